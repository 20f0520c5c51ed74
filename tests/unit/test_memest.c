/* test_memest.c - the memory estimate against the arenas' measured peaks.
 *
 * For layouts of gpt-micro and gpt-tiny (dp 1/2/4 x ZeRO 0-3 x
 * accumulation, overlap on some) and the golden model, the estimate of
 * every category must be at least the arena's high-water mark after a
 * step, and the total at most 1.25x the measured peak (printed: the
 * ratio reached). A device given exactly the estimate as its capacity
 * must run; one byte less must be refused up front, naming --arena-mb.
 * The 168-layer model of the issue must be refused in well under a
 * second for lack of host memory, with a fake PARITY_MEM_AVAILABLE_MB so
 * the test does not depend on this machine. The dump's estimate must be
 * the bytes a real dump holds. PARITY_DP_MATRIX=small (sanitizer builds)
 * keeps gpt-micro only.
 */
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "model/gpt.h"
#include "../harness.h"
#include "parity/corpus.h"
#include "parity/dump.h"
#include "parity/engine.h"
#include "parity/memest.h"
#include "parity/runtime.h"
#include "parity/tile.h"

static corpus_t corpus;
static double worst_ratio = 0, best_ratio = 1e9;

static int small(void) {
    const char *m = getenv("PARITY_DP_MATRIX");
    return m && !strcmp(m, "small");
}

static int make_layout(pconfig_t *pc, const model_config_t *m, int dp, int z, int accum,
                       int overlap, double bucket_mb) {
    pconfig_defaults(pc);
    pc->dp = dp;
    pc->zero_stage = z;
    pc->accum_degree = accum;
    pc->overlap_grad_reduce = overlap;
    pc->overlap_param_gather = overlap && (z == 1 || z == 2);
    if (bucket_mb > 0) pc->bucket_cap_mb = bucket_mb;
    pc->given |= PC_GIVEN_DP | PC_GIVEN_ZERO | PC_GIVEN_ACCUM;
    perr_t err;
    return pconfig_validate(pc, m->global_batch, &err);
}

/* The estimate against measured peaks, category by category. */
static void compare(const char *what, const memest_dev_t *e, const size_t peak[MEM_NCAT],
                    size_t peak_total, int ratio_too) {
    const struct { const char *name; size_t est, got; } c[] = {
        {"params", e->params, peak[MEM_PARAMS]},
        {"grads + open sums", e->grads + e->open_sums, peak[MEM_GRADS]},
        {"optimizer", e->optimizer, peak[MEM_OPTIMIZER]},
        {"activations", e->activations, peak[MEM_ACTIVATIONS]},
        {"comm", e->comm, peak[MEM_COMM]},
        {"workspace", e->workspace, peak[MEM_WORKSPACE]},
        {"total", e->total, peak_total},
    };
    for (size_t k = 0; k < sizeof c / sizeof c[0]; k++)
        CHECK(c[k].est >= c[k].got, "%s: %s estimated %zu bytes < measured %zu", what, c[k].name,
              c[k].est, c[k].got);
    if (!ratio_too) return;
    double ratio = (double)e->total / (double)(peak_total ? peak_total : 1);
    CHECK(ratio <= 1.25, "%s: estimate %zu is %.3fx the measured %zu", what, e->total, ratio,
          peak_total);
    if (ratio > worst_ratio) worst_ratio = ratio;
    if (ratio < best_ratio) best_ratio = ratio;
}

static void check_layout(const model_config_t *m, const pconfig_t *pc) {
    char desc[160], what[256];
    pconfig_describe(pc, desc, sizeof desc);
    snprintf(what, sizeof what, "%s B=%d %s", m->name, m->global_batch, desc);
    memest_t est;
    perr_t err;
    CHECK(memest_layout(m, pc, &est, &err) == 0, "%s: %s", what, err.msg);
    CHECK(est.devices == pc->world_size, "%s", what);
    CHECK(pc->pp > 1 || est.all_devices == est.max_dev.total * (size_t)pc->world_size, "%s", what);
    device_report_t rep[16];
    engine_run_t run = {.model = *m, .pc = *pc, .steps = 1, .data = &corpus, .algo = COLL_ALGO_RING,
                    .reports = rep};
    CHECK(pc->world_size <= 16 && engine_train(&run, &err) == 0, "%s: %s", what, err.msg);
    /* every device within the largest's estimate; the largest within 1.25x */
    int largest = 0;
    for (int d = 0; d < pc->world_size; d++)
        if (rep[d].peak_total > rep[largest].peak_total) largest = d;
    for (int d = 0; d < pc->world_size; d++)
        compare(what, &est.max_dev, rep[d].peak, rep[d].peak_total, d == largest);
}

/* Pipeline stages differ: the largest device is estimated, with the
 * activation slots its schedule needs. */
static void test_pipeline_within_estimate(void) {
    model_config_t m;
    perr_t err;
    model_config_builtin(small() ? "gpt-micro" : "gpt-tiny", &m, &err);
    if (small()) m.global_batch = m.micro_batch = 12;
    static const struct { int pp, sched, v, accum, z, dp; } L[] = {
        {2, PC_PP_GPIPE, 1, 4, 0, 1}, {2, PC_PP_1F1B, 1, 4, 1, 2}, {2, PC_PP_1F1B, 1, 3, 3, 2},
        {4, PC_PP_1F1B, 1, 8, 2, 1}, {2, PC_PP_INTERLEAVED, 2, 4, 1, 1},
    };
    for (size_t k = 0; k < sizeof L / sizeof L[0]; k++) {
        if (L[k].pp > m.layers || (L[k].v > 1 && m.layers < 4)) continue;
        pconfig_t pc;
        pconfig_defaults(&pc);
        pc.pp = L[k].pp, pc.pp_schedule = (pc_pp_schedule_t)L[k].sched, pc.vpp = L[k].v;
        pc.dp = L[k].dp, pc.zero_stage = L[k].z, pc.accum_degree = L[k].accum;
        pc.given |= PC_GIVEN_DP | PC_GIVEN_ZERO | PC_GIVEN_ACCUM;
        if (pconfig_validate(&pc, m.global_batch, &err)) {
            CHECK(0, "%s", err.msg);
            continue;
        }
        check_layout(&m, &pc);
    }
}

/* Context parallelism: the slots hold T/cp positions and the ring's or
 * Ulysses' buffers; ZeRO shards over dp x cp. */
static void test_context_parallel_within_estimate(void) {
    model_config_t m;
    perr_t err;
    model_config_builtin("gpt-tiny", &m, &err);
    static const struct { int cp, comm, tp, dp, z; } L[] = {
        {2, 0, 1, 1, 0}, {4, 0, 1, 1, 1}, {2, 0, 2, 2, 3}, {2, 1, 2, 1, 2}, {4, 1, 1, 2, 0},
    };
    for (size_t k = 0; k < (small() ? 2 : sizeof L / sizeof L[0]); k++) {
        pconfig_t pc;
        pconfig_defaults(&pc);
        pc.cp = L[k].cp, pc.cp_comm = L[k].comm, pc.tp = L[k].tp;
        pc.dp = L[k].dp, pc.zero_stage = L[k].z;
        pc.given |= PC_GIVEN_DP | PC_GIVEN_ZERO;
        if (pconfig_validate(&pc, m.global_batch, &err)) {
            CHECK(0, "%s", err.msg);
            continue;
        }
        check_layout(&m, &pc);
    }
}

static void test_layouts_within_estimate(void) {
    const char *models[] = {"gpt-micro", "gpt-tiny"};
    for (int mi = 0; mi < (small() ? 1 : 2); mi++) {
        model_config_t m;
        perr_t err;
        model_config_builtin(models[mi], &m, &err);
        if (mi == 0) m.global_batch = m.micro_batch = 12;
        static const int dps[] = {1, 2, 4};
        for (int i = 0; i < 3; i++)
            for (int z = 0; z < 4; z++)
                for (int a = 1; a <= 3; a += 2) {
                    pconfig_t pc;
                    CHECK(make_layout(&pc, &m, dps[i], z, a, (i + z + a) % 2, 0) == 0, "layout");
                    check_layout(&m, &pc);
                }
    }
    /* many small buckets, and an uneven split of a batch of 35 */
    model_config_t m;
    perr_t err;
    model_config_builtin("gpt-micro", &m, &err);
    pconfig_t pc;
    CHECK(make_layout(&pc, &m, 2, 2, 1, 1, 0.01) == 0, "small buckets");
    check_layout(&m, &pc);
    m.global_batch = m.micro_batch = 35;
    CHECK(make_layout(&pc, &m, 5, 3, 4, 0, 0) == 0, "batch 35");
    check_layout(&m, &pc);
    printf("estimate / measured peak, total per device: %.4f .. %.4f\n", best_ratio, worst_ratio);
}

/* adamw8bit: codes and block absmax, sharded at block boundaries (their
 * pieces are uneven: the buffers are sized for the longest). */
static void test_adamw8bit_within_estimate(void) {
    model_config_t m;
    perr_t err;
    model_config_builtin(small() ? "gpt-micro" : "gpt-tiny", &m, &err);
    m.optimizer = MODEL_OPT_ADAMW8BIT, m.optimizer_block = 8;
    if (small()) m.global_batch = m.micro_batch = 12;
    static const struct { int dp, z, tp; } L[] = {{2, 1, 1}, {4, 3, 1}, {2, 2, 2}, {3, 1, 1}};
    for (size_t k = 0; k < sizeof L / sizeof L[0]; k++) {
        pconfig_t pc;
        pconfig_defaults(&pc);
        pc.dp = L[k].dp, pc.zero_stage = L[k].z, pc.tp = L[k].tp;
        pc.given |= PC_GIVEN_DP | PC_GIVEN_ZERO;
        if (pconfig_validate(&pc, m.global_batch, &err)) {
            CHECK(0, "%s", err.msg);
            continue;
        }
        check_layout(&m, &pc);
    }
}

/* The golden run (train.c: gpt_new) is estimated with pc = NULL; the same
 * allocations from an arena show its peaks. */
static void test_golden_within_estimate(void) {
    const char *models[] = {"gpt-micro", "gpt-tiny", "gpt-small"};
    for (int mi = 0; mi < (small() ? 1 : 3); mi++) {
        model_config_t m;
        perr_t err;
        model_config_builtin(models[mi], &m, &err);
        memest_t est;
        CHECK(memest_layout(&m, NULL, &est, &err) == 0, "%s", err.msg);
        CHECK(est.devices == 1 && est.host_shared == 0 && est.max_dev.comm == 0, "golden: one device");
        arena_t *a = arena_create(0, 0);
        gpt_t *g;
        CHECK(gpt_new_ex(&g, &m, gpt_golden_flags(&m), a, &err) == 0, "%s", err.msg);
        gpt_step_stats_t st;
        gpt_train_step(g, &corpus, 0, NULL, &st);
        size_t peak[MEM_NCAT];
        for (int c = 0; c < MEM_NCAT; c++) peak[c] = arena_high_water(a, (mem_cat_t)c);
        char what[96];
        snprintf(what, sizeof what, "golden %s", m.name);
        compare(what, &est.max_dev, peak, arena_high_water(a, MEM_NCAT), 1);
        gpt_free(g);
        arena_destroy(a);
    }
}

/* Exactly the estimate fits (the run completes in an arena of that
 * capacity); a byte less is refused before any device starts. */
static void test_arena_capacity_is_the_estimate(void) {
    model_config_t m;
    perr_t err;
    model_config_builtin("gpt-micro", &m, &err);
    for (int z = 0; z < 4; z++) {
        pconfig_t pc;
        make_layout(&pc, &m, 2, z, 2, z == 1, 0);
        memest_t est;
        CHECK(memest_layout(&m, &pc, &est, &err) == 0, "%s", err.msg);
        CHECK(memest_check(&est, est.max_dev.total, &err) == 0, "stage %d: %s", z, err.msg);
        CHECK(memest_check(&est, est.max_dev.total - 1, &err) == -1, "stage %d: must be refused", z);
        CHECK(strstr(err.msg, "--arena-mb") && strstr(err.msg, "params") &&
                  strstr(err.msg, "open exact sums") && strstr(err.msg, "activations"),
              "the refusal names the flag and the categories: %s", err.msg);
        engine_run_t run = {.model = m, .pc = pc, .steps = 1, .data = &corpus,
                        .arena_capacity = est.max_dev.total, .algo = COLL_ALGO_DIRECT};
        CHECK(engine_train(&run, &err) == 0, "stage %d in an arena of exactly the estimate: %s", z,
              err.msg);
    }
}

/* The model: about 2.1e9 parameters, ~69 GB on one device. */
static void test_huge_model_refused_fast(void) {
    model_config_t m;
    perr_t err;
    model_config_builtin("gpt-tiny", &m, &err);
    m.hidden = 1024, m.heads = 128, m.ffn = 4096, m.layers = 168;
    setenv("PARITY_MEM_AVAILABLE_MB", "16000", 1);
    CHECK(memest_available() == (size_t)16000e6, "PARITY_MEM_AVAILABLE_MB is read");
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    memest_t est, golden;
    pconfig_t pc;
    CHECK(make_layout(&pc, &m, 4, 3, 1, 0, 0) == 0, "layout");
    int rc_layout = memest_layout(&m, &pc, &est, &err) ? -2 : memest_check(&est, 0, &err);
    char msg[sizeof err.msg];
    memcpy(msg, err.msg, sizeof msg);
    int rc_golden = memest_layout(&m, NULL, &golden, &err) ? -2 : memest_check(&golden, 0, &err);
    clock_gettime(CLOCK_MONOTONIC, &t1);
    double secs = (double)(t1.tv_sec - t0.tv_sec) + 1e-9 * (double)(t1.tv_nsec - t0.tv_nsec);
    CHECK(rc_layout == -1 && strstr(msg, "host memory") && strstr(msg, "16.00 GB is available"),
          "dp=4 ZeRO-3: %s", msg);
    CHECK(rc_golden == -1 && strstr(err.msg, "host memory"), "golden: %s", err.msg);
    CHECK(golden.max_dev.total > (size_t)16000e6, "golden estimate %zu bytes, the 16 GB available",
          golden.max_dev.total);
    CHECK(secs < 0.5, "refusing took %.3f s", secs);
    printf("168 layers refused in %.1f ms:\n  %s\n  %s\n", 1e3 * secs, msg, err.msg);
    setenv("PARITY_MEM_AVAILABLE_MB", "1000000", 1);
    CHECK(memest_check(&golden, 0, &err) == 0, "fits a host with 1 TB available: %s", err.msg);
    unsetenv("PARITY_MEM_AVAILABLE_MB");
}

/* memest_dump_tensor_bytes against the bytes a real dump holds, with and
 * without dropout masks. */
static void test_dump_estimate_is_exact(void) {
    for (int drop = 0; drop < 2; drop++) {
        model_config_t m;
        perr_t err;
        model_config_builtin("gpt-micro", &m, &err);
        if (!drop) m.hidden_dropout = m.attention_dropout = 0.0f;
        gpt_t *g;
        CHECK(gpt_new(&g, &m, &err) == 0, "%s", err.msg);
        dump_t *d = dump_new(g, DUMP_TENSORS);
        dump_add_init(d, g, &err);
        for (int s = 0; s < 2; s++) {
            gpt_observer_t obs = {0};
            gpt_step_stats_t st;
            dump_begin_step(d, s, &obs);
            gpt_train_step(g, &corpus, s, &obs, &st);
            dump_end_step(d, g, &st, &err);
        }
        const st_writer_t *w = dump_writer(d);
        size_t bytes = 0;
        for (size_t i = 0; i < st_writer_count(w); i++) {
            st_tensor_t t;
            st_writer_tensor(w, i, &t);
            bytes += (size_t)st_numel(&t) * st_dtype_size(t.dtype);
        }
        CHECK(bytes == memest_dump_tensor_bytes(&m, 2), "dropout %d: dump holds %zu bytes, "
              "estimate %zu", drop, bytes, memest_dump_tensor_bytes(&m, 2));
        dump_free(d);
        gpt_free(g);
    }
}

/* PARITY_MEM_AVAILABLE_MB: malformed, zero or non-finite is refused, not
 * ignored; a meminfo without MemAvailable falls back to MemFree + Cached. */
static void test_available_env_and_meminfo(void) {
    perr_t err;
    const char *bad[] = {"abc", "0", "1e300", "-5", "nan", "12x"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        setenv("PARITY_MEM_AVAILABLE_MB", bad[i], 1);
        CHECK(memest_env_check(&err) == -1 && strstr(err.msg, "PARITY_MEM_AVAILABLE_MB"),
              "PARITY_MEM_AVAILABLE_MB=%s accepted", bad[i]);
        memest_t m = {.devices = 1};
        CHECK(memest_check(&m, 0, &err) == -1, "memest_check ignored PARITY_MEM_AVAILABLE_MB=%s", bad[i]);
    }
    setenv("PARITY_MEM_AVAILABLE_MB", "2.5", 1);
    CHECK(memest_env_check(&err) == 0 && memest_available() == (size_t)2.5e6, "2.5 MB");
    unsetenv("PARITY_MEM_AVAILABLE_MB");
    char dir[] = "/tmp/parity_meminfo_XXXXXX", path[64];
    if (harness_mkdtemp(dir)) return;
    snprintf(path, sizeof path, "%s/meminfo", dir);
    FILE *f = fopen(path, "w");
    fputs("MemTotal: 1000 kB\nMemFree: 100 kB\nBuffers: 5 kB\nCached: 20 kB\n", f);
    fclose(f);
    CHECK(memest_meminfo_available(path) == 120 * 1024, "no MemAvailable: MemFree + Cached");
    f = fopen(path, "w");
    fputs("MemFree: 100 kB\nMemAvailable: 300 kB\nCached: 20 kB\n", f);
    fclose(f);
    CHECK(memest_meminfo_available(path) == 300 * 1024, "MemAvailable when present");
    f = fopen(path, "w");
    fputs("MemTotal: 1000 kB\n", f);
    fclose(f);
    CHECK(memest_meminfo_available(path) == 0, "neither: unknown");
    unlink(path);
    rmdir(dir);
}

/* The open-sum modes (model.h) keep the bits: a step of gpt-tiny (one
 * microbatch: unit by unit, over a pool) and of gpt-micro and gpt-tiny
 * at two microbatches (gradients inside their open sums) gives the same
 * loss, gradients, parameters and AdamW state as open sums for the whole
 * step, over 3 steps. And they take less memory: the pool less than one
 * sum per parameter, the shared block exactly 8 bytes a parameter. */
static void test_open_sum_modes_same_bits(void) {
    const struct { const char *model; int halve; } runs[] = {
        {"gpt-tiny", 0}, {"gpt-micro", 0}, {"gpt-tiny", 1}};
    for (size_t k = 0; k < (small() ? 2 : sizeof runs / sizeof runs[0]); k++) {
        model_config_t m;
        perr_t err;
        model_config_builtin(runs[k].model, &m, &err);
        if (runs[k].halve) m.micro_batch = m.global_batch / 2;
        const unsigned mode = gpt_golden_flags(&m);
        CHECK(mode == (m.micro_batch == m.global_batch ? GPT_UNIT_OPEN_SUMS : GPT_GRADS_IN_SUMS),
              "%s: mode %u", m.name, mode);
        gpt_t *g[2];
        CHECK(gpt_new_ex(&g[0], &m, 0, NULL, &err) == 0, "%s", err.msg);
        CHECK(gpt_new_ex(&g[1], &m, mode, NULL, &err) == 0, "%s", err.msg);
        const size_t P = g[0]->table.total, F4 = P * sizeof(float);
        for (int step = 0; step < 3; step++) {
            gpt_step_stats_t st[2];
            for (int i = 0; i < 2; i++) gpt_train_step(g[i], &corpus, step, NULL, &st[i]);
            CHECK(!memcmp(&st[0].loss, &st[1].loss, sizeof(float)) &&
                      !memcmp(&st[0].grad_norm, &st[1].grad_norm, sizeof(float)),
                  "%s mode %u step %d: loss or gradient norm differ",
                  m.name, mode, step);
            CHECK(!memcmp(g[0]->grads, g[1]->grads, F4) && !memcmp(g[0]->params, g[1]->params, F4) &&
                      !memcmp(g[0]->adam_m, g[1]->adam_m, F4) &&
                      !memcmp(g[0]->adam_v, g[1]->adam_v, F4),
                  "%s mode %u step %d: gradients, parameters or AdamW state differ", m.name, mode,
                  step);
        }
        gpt_mem_t whole, less;
        CHECK(gpt_mem_bytes(&m, 0, &whole, &err) == 0 && gpt_mem_bytes(&m, mode, &less, &err) == 0,
              "%s", err.msg);
        if (mode == GPT_UNIT_OPEN_SUMS)
            CHECK(less.open_sums < whole.open_sums && less.grads == F4, "%s: pool %zu of %zu bytes",
                  m.name, less.open_sums, whole.open_sums);
        else
            CHECK(less.grads + less.open_sums == 2 * F4 && whole.grads + whole.open_sums == 3 * F4,
                  "%s: gradients and open sums %zu bytes, %zu parameters", m.name,
                  less.grads + less.open_sums, P);
        printf("    %s, micro_batch %d of %d: gradients + open sums %.2f bytes a parameter (was %.2f)\n",
               m.name, m.micro_batch, m.global_batch, (double)(less.grads + less.open_sums) / (double)P,
               (double)(whole.grads + whole.open_sums) / (double)P);
        gpt_free(g[0]);
        gpt_free(g[1]);
    }
}

int main(void) {
    perr_t err;
    if (!getenv("PARITY_BACKEND")) setenv("PARITY_BACKEND", "portable", 1);
    if (tile_init(&err) || corpus_load(&corpus, "ref/data/corpus.txt", &err)) {
        fprintf(stderr, "setup: %s\n", err.msg);
        return 1;
    }
    RUN(test_available_env_and_meminfo);
    RUN(test_huge_model_refused_fast);
    RUN(test_dump_estimate_is_exact);
    RUN(test_arena_capacity_is_the_estimate);
    RUN(test_golden_within_estimate);
    RUN(test_open_sum_modes_same_bits);
    RUN(test_layouts_within_estimate);
    RUN(test_pipeline_within_estimate);
    RUN(test_context_parallel_within_estimate);
    RUN(test_adamw8bit_within_estimate);
    corpus_free(&corpus);
    return harness_done();
}
