/* test_dp.c - data parallelism against the golden run, bit for bit.
 *
 * One golden run of gpt-tiny (3 steps, dropout and clipping active), then
 * every layout of the matrix: dp in {1,2,3,4,8} x ZeRO stage in {0..3} x
 * accumulation in {1,2,3}, plus overlap on/off and both reduction
 * algorithms. Each layout's reassembled global tensors (inputs, every
 * activation checkpoint, logits, loss, every gradient, every updated
 * parameter, at every step) are compared with the golden ones by memcmp
 * (check.h). A deliberately broken variant (plain fp32 ring sums) must be
 * caught. Prints: layout | devices | steps | tensors compared | bit-exact.
 *
 * PARITY_DP_MATRIX=small (the sanitizer builds) runs the same tests on
 * gpt-micro with a batch of 12, and a matrix without dp 3 and 8.
 */
#include <stdlib.h>
#include <string.h>

#include "harness.h"
#include "parity/check.h"
#include "parity/corpus.h"
#include "parity/dp.h"
#include "parity/dump.h"
#include "parity/tile.h"

enum { STEPS = 3 };
static model_config_t cfg;
static corpus_t corpus;
static dump_t *golden;

static dump_t *golden_run(void) {
    gpt_t *g;
    perr_t err;
    if (gpt_new(&g, &cfg, &err)) {
        fprintf(stderr, "%s\n", err.msg);
        return NULL;
    }
    dump_t *d = dump_new(g, DUMP_TENSORS);
    dump_add_init(d, g, &err);
    for (int s = 0; s < STEPS; s++) {
        gpt_observer_t obs = {0};
        gpt_step_stats_t st;
        dump_begin_step(d, s, &obs);
        gpt_train_step(g, &corpus, s, &obs, &st);
        if (dump_end_step(d, g, &st, &err)) fprintf(stderr, "%s\n", err.msg);
    }
    gpt_free(g);
    return d;
}

/* Runs one layout; returns 1 when every golden tensor matched. */
static int run_layout(const char *flags, coll_algo_t algo, int broken, int *compared,
                      FILE *report) {
    pconfig_t pc;
    pconfig_defaults(&pc);
    char buf[256], *argv[16];
    int argc = 0;
    snprintf(buf, sizeof buf, "%s", flags);
    for (char *t = strtok(buf, " "); t && argc < 16; t = strtok(NULL, " ")) argv[argc++] = t;
    perr_t err;
    for (int i = 0; i < argc;)
        if (pconfig_parse_flag(&pc, argc, argv, &i, &err) != 1) {
            fprintf(stderr, "bad flags '%s'\n", flags);
            return 0;
        }
    if (pconfig_validate(&pc, cfg.global_batch, &err)) {
        fprintf(stderr, "%s: %s\n", flags, err.msg);
        return 0;
    }
    gpt_t *g;
    gpt_new(&g, &cfg, &err);
    dump_t *d = dump_new(g, DUMP_TENSORS);
    gpt_free(g);
    dp_run_t run = {.model = cfg, .pc = pc, .steps = STEPS, .data = &corpus, .algo = algo,
                    .broken_fp32_sums = broken, .dump = d};
    int ok = dp_train(&run, &err) == 0;
    if (!ok) fprintf(stderr, "%s: %s\n", flags, err.msg);
    check_result_t res;
    if (ok) ok = check_compare(dump_writer(golden), dump_writer(d), NULL, report, &res) == 0;
    *compared = res.compared;
    dump_free(d);
    return ok;
}

static int small_matrix(void) {
    const char *m = getenv("PARITY_DP_MATRIX");
    return m && !strcmp(m, "small");
}

static void test_matrix(void) {
    static const int dps[] = {1, 2, 3, 4, 8};
    printf("%-80s %7s %5s %8s %9s\n", "layout", "devices", "steps", "tensors", "bit-exact");
    for (int i = 0; i < 5; i++)
        for (int z = 0; z < 4; z++)
            for (int a = 1; a <= 3; a++) {
                if (small_matrix() && (dps[i] == 8 || dps[i] == 3)) continue;
                char flags[160];
                int ov = (i + z + a) % 2;
                snprintf(flags, sizeof flags, "--data-parallel-size %d --zero-stage %d --accum-degree %d%s%s",
                         dps[i], z, a, ov ? " --overlap-grad-reduce" : "",
                         ov && (z == 1 || z == 2) ? " --overlap-param-gather" : "");
                coll_algo_t algo = (i + z) % 2 ? COLL_ALGO_RING : COLL_ALGO_DIRECT;
                int n = 0, ok = run_layout(flags, algo, 0, &n, stderr);
                printf("%-74s %-5s %7d %5d %8d %9s\n", flags, algo == COLL_ALGO_RING ? "ring" : "direct",
                       dps[i], STEPS, n, ok ? "yes" : "NO");
                fflush(stdout);
                CHECK(ok, "layout %s (%s) differs from the golden run", flags,
                      algo == COLL_ALGO_RING ? "ring" : "direct");
            }
}

static void test_overlap_and_algorithms(void) {
    /* the same layouts with overlap on and off, each algorithm */
    const char *layouts[] = {"--data-parallel-size 4 --zero-stage 1 --accum-degree 2",
                             "--data-parallel-size 2 --zero-stage 3 --accum-degree 3 --bucket-cap-mb 0.05"};
    for (int k = 0; k < 2; k++)
        for (int ov = 0; ov < 2; ov++)
            for (int al = 0; al < 2; al++) {
                char flags[200];
                snprintf(flags, sizeof flags, "%s%s%s", layouts[k], ov ? " --overlap-grad-reduce" : "",
                         ov && k == 0 ? " --overlap-param-gather" : "");
                int n, ok = run_layout(flags, al ? COLL_ALGO_RING : COLL_ALGO_DIRECT, 0, &n, stderr);
                CHECK(ok, "%s algo %d", flags, al);
            }
}

static void test_small_buckets(void) {
    int n, ok = run_layout("--data-parallel-size 3 --zero-stage 2 --bucket-cap-mb 0.01 --overlap-grad-reduce",
                           COLL_ALGO_RING, 0, &n, stderr);
    CHECK(ok, "many small buckets");
}

/* Measured device memory and traffic against the ZeRO formulas (fp32:
 * params 4 Psi, grads 4 Psi + 8 Psi of open exact sums, optimizer 8 Psi,
 * each divided by N from its stage on), computed here from Psi and N. */
static void test_memory_and_traffic_follow_zero(void) {
    enum { N = 4 };
    param_table_t t;
    perr_t err;
    CHECK(param_table_build(&t, &cfg, &err) == 0, "%s", err.msg);
    const double psi = (double)t.total;
    /* a tied head reads the embedding bucket, so ZeRO-3 gathers it twice
     * in each pass */
    const double emb = cfg.tied ? (double)(t.info[t.wte].numel + t.info[t.wpe].numel) : 0;
    param_table_free(&t);
    double last_total = 1e300;
    for (int z = 0; z <= 3; z++) {
        pconfig_t pc;
        pconfig_defaults(&pc);
        pc.dp = N;
        pc.zero_stage = z;
        pc.given |= PC_GIVEN_DP | PC_GIVEN_ZERO;
        CHECK(pconfig_validate(&pc, cfg.global_batch, &err) == 0, "%s", err.msg);
        dp_device_report_t rep[N];
        dp_run_t run = {.model = cfg, .pc = pc, .steps = 1, .data = &corpus,
                        .algo = COLL_ALGO_DIRECT, .reports = rep};
        CHECK(dp_train(&run, &err) == 0, "%s", err.msg);
        /* bucket padding: at most N-1 elements per bucket, a few buckets */
        const double pad = 4.0 * 64 * N * 4, div[4][3] = {{1, 1, 1}, {1, 1, N}, {1, N, N}, {N, N, N}};
        const double want_params = 4 * psi / div[z][0], want_grads = 4 * psi / div[z][1] + 8 * psi;
        const double want_opt = 8 * psi / div[z][2];
        for (int d = 0; d < N; d++) {
            double params = (double)rep[d].peak[MEM_PARAMS], grads = (double)rep[d].peak[MEM_GRADS];
            double opt = (double)rep[d].peak[MEM_OPTIMIZER];
            /* ZeRO-3 also holds the gathered units it is running (at most
             * the embeddings plus one layer or the head) */
            double extra = z == 3 ? 4.0 * psi / 2 : 0;
            CHECK(params >= want_params - pad && params <= want_params + pad + extra,
                  "stage %d device %d: params %.0f bytes, formula %.0f", z, d, params, want_params);
            CHECK(grads >= want_grads - pad && grads <= want_grads + pad,
                  "stage %d device %d: grads %.0f bytes, formula %.0f", z, d, grads, want_grads);
            CHECK(opt >= want_opt - pad && opt <= want_opt + pad,
                  "stage %d device %d: optimizer %.0f bytes, formula %.0f", z, d, opt, want_opt);
        }
        double total = want_params + want_grads + want_opt;
        CHECK(total < last_total, "stage %d does not save memory", z);
        last_total = total;
        /* traffic in elements: 2 Psi (N-1)/N, or (1 + 2 accum) Psi (N-1)/N for ZeRO-3 */
        const coll_counters_t *c = &rep[0].comm;
        double rs = (double)c->bus_bytes[COLL_KIND_REDUCE_SCATTER] / 8;
        double ag = (double)c->bus_bytes[COLL_KIND_ALL_GATHER] / 4;
        double unit = psi * (N - 1) / N, padded = unit + (double)N * 400;
        double want_ag = z == 3 ? 2 * pc.accum_degree * (psi + emb) * (N - 1) / N : unit;
        double pad_ag = z == 3 ? 2 * pc.accum_degree * (double)N * 400 : padded - unit;
        CHECK(rs >= unit && rs <= padded, "stage %d: reduce-scatter moved %.0f elements, formula %.0f",
              z, rs, unit);
        CHECK(ag >= want_ag && ag <= want_ag + pad_ag,
              "stage %d: all-gathers moved %.0f elements, formula %.0f", z, ag, want_ag);
        printf("ZeRO-%d dp=%d: params %.2f grads %.2f (exact sums incl.) optimizer %.2f MB; "
               "traffic %.2f Psi\n",
               z, N, rep[0].peak[MEM_PARAMS] / 1e6, rep[0].peak[MEM_GRADS] / 1e6,
               rep[0].peak[MEM_OPTIMIZER] / 1e6, (rs + ag) / psi);
    }
}

static void test_broken_variant_is_caught(void) {
    char *buf = NULL;
    size_t len = 0;
    FILE *rep = open_memstream(&buf, &len);
    int n, ok = run_layout("--data-parallel-size 4", COLL_ALGO_RING, 1, &n, rep);
    fclose(rep);
    CHECK(!ok, "fp32 ring sums must not match the golden run");
    CHECK(buf && strstr(buf, "FIRST DIVERGENCE") && strstr(buf, "ulp"),
          "the checker must print a first-divergence report, got:\n%s", buf ? buf : "");
    if (buf) printf("broken variant (fp32 ring sums), as reported:\n%s", buf);
    free(buf);
}

int main(void) {
    perr_t err;
    /* The portable backend: the same bits on any machine, and on gpt-tiny's
     * small tiles faster than OpenBLAS's per-call overhead. */
    if (!getenv("PARITY_BACKEND")) setenv("PARITY_BACKEND", "portable", 1);
    if (tile_init(&err) || model_config_builtin(small_matrix() ? "gpt-micro" : "gpt-tiny", &cfg, &err) ||
        corpus_load(&corpus, "ref/data/corpus.txt", &err)) {
        fprintf(stderr, "setup: %s\n", err.msg);
        return 1;
    }
    if (small_matrix()) cfg.global_batch = cfg.micro_batch = 12;
    golden = golden_run();
    if (!golden) return 1;
    RUN(test_memory_and_traffic_follow_zero);
    RUN(test_broken_variant_is_caught);
    RUN(test_small_buckets);
    RUN(test_overlap_and_algorithms);
    RUN(test_matrix);
    dump_free(golden);
    corpus_free(&corpus);
    return harness_done();
}
