/* test_pp.c - pipeline parallelism against the golden run, bit for bit.
 *
 * One golden run of gpt-tiny (8 layers, 3 steps, dropout and clipping
 * active), then every pipeline layout of the matrix: pp in {2, 3, 4} x
 * schedule {gpipe, 1f1b, interleaved} x microbatches m in {1, 2, 3, 4, 8}
 * where the schedule allows it (interleaved: m a multiple of pp; naive,
 * the patterns file's unpipelined stages, at m = 3), a
 * custom layer split, an untied head (its own golden run), and 3-D
 * layouts with tensor, sequence and data parallelism and ZeRO 1 and 3.
 * Every reassembled tensor (activations, gradients, updated parameters,
 * every step) is memcmp'd (layout_run.h).
 * Then what the schedules promise, checked against formulas written here
 * independently of pp_schedule.c:
 *  - p2p messages and bytes of every device against the count of stage
 *    boundaries its chunks have;
 *  - the trace file: each device's forward/backward spans in its
 *    schedule's order (1F1B's warm-up count, GPipe's all-forward-first,
 *    the interleaved chunk order);
 *  - activation slots: GPipe m, 1F1B min(pp - r, m);
 * and the two broken variants, caught at the right tensor.
 *
 * PARITY_DP_MATRIX=small (the sanitizer builds): gpt-micro (2 layers),
 * pp = 2 only.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../harness.h"
#include "layout_run.h"
#include "parity/json.h"
#include "parity/pp.h"
#include "parity/tile.h"

/* pp x schedule x m, where the schedule allows m (gpt-tiny: 8 layers, a
 * batch of 24; pp = 3 needs a split: 3,3,2, or 2,2,4 for two chunks). */
static void test_schedules(void) {
    static const int ms[] = {1, 2, 3, 4, 8};
    const int max_pp = small_matrix() ? 2 : 4;
    for (int pp = 2; pp <= max_pp; pp++)
        for (int s = 0; s < 4; s++)
            for (int k = 0; k < 5; k++) {
                const int m = ms[k], inter = s == 2;
                if (inter && (m % pp || small_matrix())) continue;
                if (s == 3 && m != 3) continue; /* naive: one microbatch at a time */
                if (small_matrix() && m > 4) continue;
                const char *split = pp != 3 ? "" : inter ? "--pipeline-layer-split 2,2,4 " : "--pipeline-layer-split 3,3,2 ";
                char flags[256];
                snprintf(flags, sizeof flags,
                         "--pipeline-model-parallel-size %d %s--pipeline-schedule %s --num-microbatches %d%s",
                         pp, split, s == 0 ? "gpipe" : s == 1 ? "1f1b" : s == 2 ? "interleaved" : "naive", m,
                         inter ? " --virtual-pipeline-model-parallel-size 2" : "");
                expect_golden(&cfg, golden, flags);
            }
}

/* An untied output layer (its own golden run), custom splits, and 3-D. */
static void test_untied_split_and_3d(void) {
    model_config_t untied = cfg;
    untied.tied = 0;
    dump_t *gu = golden_run(&untied);
    CHECK(gu != NULL, "untied golden run");
    if (gu) {
        expect_golden(&untied, gu, "--pipeline-model-parallel-size 2 --num-microbatches 3");
        if (!small_matrix())
            expect_golden(&untied, gu, "--pipeline-model-parallel-size 4 --pipeline-schedule interleaved "
                                       "--num-layers-per-virtual-pipeline-stage 1 --num-microbatches 4");
    }
    dump_free(gu);
    const char *const tiny[] = {
        "--pipeline-model-parallel-size 2 --pipeline-layer-split 5,3 --num-microbatches 4",
        "--pipeline-model-parallel-size 3 --pipeline-layer-split 1,6,1 --pipeline-schedule gpipe --num-microbatches 2",
        /* 3-D: dp2 x tp2 x pp2; with SP + ZeRO-1 + interleaving; with ZeRO-3 */
        "--data-parallel-size 2 --tensor-model-parallel-size 2 --pipeline-model-parallel-size 2 --num-microbatches 2",
        "--data-parallel-size 2 --tensor-model-parallel-size 2 --sequence-parallel --zero-stage 1 "
        "--pipeline-model-parallel-size 2 --virtual-pipeline-model-parallel-size 2 --num-microbatches 4",
        "--data-parallel-size 2 --tensor-model-parallel-size 2 --zero-stage 3 --pipeline-model-parallel-size 2 "
        "--num-microbatches 3 --rank-order tp-dp-pp",
        /* the tied embedding's bucket waits for the embedding group, overlap or not */
        "--data-parallel-size 2 --zero-stage 2 --overlap-grad-reduce --pipeline-model-parallel-size 4 "
        "--num-microbatches 3 --rank-order pp-dp",
    };
    const char *const micro[] = {
        "--data-parallel-size 2 --tensor-model-parallel-size 2 --pipeline-model-parallel-size 2 --num-microbatches 2",
        "--data-parallel-size 2 --tensor-model-parallel-size 2 --sequence-parallel --zero-stage 3 "
        "--pipeline-model-parallel-size 2 --num-microbatches 3 --overlap-grad-reduce",
    };
    const int n = small_matrix() ? 2 : 6;
    for (int k = 0; k < n; k++) expect_golden(&cfg, golden, small_matrix() ? micro[k] : tiny[k]);
}

/* ---- running a layout for its reports and trace ------------------------ */

static int run_reports(const char *flags, pconfig_t *pc, device_report_t *rep, const char *trace) {
    perr_t err;
    if (parse_layout(flags, cfg.global_batch, pc)) return -1;
    engine_run_t run = {.model = cfg, .pc = *pc, .steps = 1, .data = &corpus, .reports = rep,
                    .trace_path = trace};
    if (engine_train(&run, &err)) {
        fprintf(stderr, "%s: %s\n", flags, err.msg);
        return -1;
    }
    return 0;
}

static int grid_stage(const pconfig_t *pc, int device) {
    grid_t G;
    const int sizes[GRID_NAXES] = {pc->tp, 1, 1, 1, 1, pc->dp, pc->pp};
    if (grid_init_mapped(&G, pc->order, sizes, pc->rank_list, pc->n_rank_list, NULL)) return -1;
    int s = grid_device(&G, device).coord[GRID_PP];
    grid_free(&G);
    return s;
}

/* Messages a device of stage r sends in one step, by the boundaries of
 * its virtual stages vs = c*pp + r (of V = pp*v): one activation per
 * microbatch over each vs -> vs+1, one gradient over each vs -> vs-1;
 * and their bytes: a sequence's residual stream (T/sp x C fp32) each. */
static void test_p2p_traffic_follows_the_schedule(void) {
    const char *const L[] = {
        "--pipeline-model-parallel-size 4 --num-microbatches 4",
        "--pipeline-model-parallel-size 2 --virtual-pipeline-model-parallel-size 2 --num-microbatches 4",
        "--pipeline-model-parallel-size 2 --tensor-model-parallel-size 2 --sequence-parallel --num-microbatches 3",
    };
    for (int k = small_matrix() ? 2 : 0; k < 3; k++) {
        pconfig_t pc;
        device_report_t rep[16];
        memset(rep, 0, sizeof rep);
        if (run_reports(L[k], &pc, rep, NULL)) {
            CHECK(0, "%s did not run", L[k]);
            continue;
        }
        const int pp = pc.pp, v = pc.vpp, V = pp * v, m = pc.accum_degree;
        const uint64_t seq_bytes = (uint64_t)cfg.seq_length / (pc.sequence_parallel ? (uint64_t)pc.tp : 1) *
                                   (uint64_t)cfg.hidden * sizeof(float);
        for (int d = 0; d < pc.world_size; d++) {
            const int r = grid_stage(&pc, d);
            int boundaries = 0;
            for (int c = 0; c < v; c++) boundaries += (c * pp + r < V - 1) + (c * pp + r > 0);
            const coll_family_t *f = coll_counters_family(&rep[d].comm, "pp");
            const coll_tally_t *s = f ? &f->by[COLL_KIND_SEND][COLL_F32] : NULL;
            const uint64_t want_calls = (uint64_t)boundaries * (uint64_t)m;
            /* every sequence of the step crosses each boundary once */
            const uint64_t want_bytes = (uint64_t)boundaries * (uint64_t)(cfg.global_batch / pc.dp) * seq_bytes;
            CHECK(s && s->calls == want_calls && s->sent == want_bytes,
                  "%s: device %d (stage %d) sent %llu messages, %llu bytes; expected %llu and %llu",
                  L[k], d, r, s ? (unsigned long long)s->calls : 0ULL,
                  s ? (unsigned long long)s->sent : 0ULL, (unsigned long long)want_calls,
                  (unsigned long long)want_bytes);
        }
        printf("p2p traffic: %s: every device's messages and bytes match its boundaries x m\n", L[k]);
    }
}

/* A rank list places the stages: with --rank-list 3,0,2,1 over the
 * positions of tp-pp, stage 0 is on devices 3 (tp 0) and 0 (tp 1),
 * stage 1 on 2 and 1, as each device reports from inside the run; and
 * a list over tp x dp x pp (the dp groups, the embedding group and the
 * pipeline neighbours all moved) runs bit for bit. */
static void test_rank_list_places_the_stages(void) {
    const char *flags = "--tensor-model-parallel-size 2 --pipeline-model-parallel-size 2 "
                        "--num-microbatches 2 --rank-list 3,0,2,1";
    static const int stage[4] = {0, 1, 1, 0};
    pconfig_t pc;
    device_report_t rep[4];
    memset(rep, 0, sizeof rep);
    if (run_reports(flags, &pc, rep, NULL)) {
        CHECK(0, "%s did not run", flags);
        return;
    }
    for (int d = 0; d < 4; d++)
        CHECK(rep[d].pp_stage == stage[d], "device %d ran stage %d, expected %d", d, rep[d].pp_stage,
              stage[d]);
    expect_golden(&cfg, golden, "--data-parallel-size 2 --tensor-model-parallel-size 2 "
                                "--pipeline-model-parallel-size 2 --num-microbatches 2 --zero-stage 1 "
                                "--rank-list 5,2,7,0,3,6,1,4");
}

/* ---- the trace: each device's spans follow its schedule ----------------- */

typedef struct {
    int fwd, mb, chunk;
} pass_t;

/* Device d's forward and backward spans, in time order (the writer keeps
 * a device's spans in the order they ended, which is their order). */
static int device_passes(const json_t *events, int d, pass_t *out, int cap) {
    int n = 0;
    for (size_t i = 0; i < json_len(events); i++) {
        const json_t *e = json_at(events, i);
        const char *cat = json_string(json_get(e, "cat"));
        if (!cat || (strcmp(cat, "forward") && strcmp(cat, "backward"))) continue;
        if ((int)json_number(json_get(e, "tid")) != d || n == cap) continue;
        const json_t *args = json_get(e, "args");
        out[n++] = (pass_t){!strcmp(cat, "forward"), (int)json_number(json_get(args, "mb")),
                            (int)json_number(json_get(args, "chunk"))};
    }
    return n;
}

static json_t *trace_of(const char *flags, pconfig_t *pc, device_report_t *rep) {
    char dir[] = "/tmp/parity-test-pp-XXXXXX", path[64];
    if (!mkdtemp(dir)) return NULL;
    snprintf(path, sizeof path, "%s/trace.json", dir);
    json_t *j = NULL;
    if (run_reports(flags, pc, rep, path) == 0) {
        FILE *f = fopen(path, "rb");
        static char text[1 << 22];
        size_t len = f ? fread(text, 1, sizeof text, f) : 0;
        if (f) fclose(f);
        perr_t err;
        j = json_parse(text, len, &err);
        if (!j) fprintf(stderr, "trace: %s\n", err.msg);
    }
    unlink(path);
    rmdir(dir);
    return j;
}

static void check_gpipe(const pass_t *p, int n, int m, const char *what) {
    for (int i = 0; i < n; i++) {
        const int want_fwd = i < m, want_mb = i < m ? i : i - m;
        CHECK(n == 2 * m && p[i].fwd == want_fwd && p[i].mb == want_mb,
              "%s: pass %d is %c%d, GPipe wants %c%d", what, i, p[i].fwd ? 'F' : 'B', p[i].mb,
              want_fwd ? 'F' : 'B', want_mb);
    }
}

static void check_1f1b(const pass_t *p, int n, int m, int pp, int r, const char *what) {
    const int warm = pp - r - 1 < m ? pp - r - 1 : m;
    int first_b = 0;
    while (first_b < n && p[first_b].fwd) first_b++;
    CHECK(first_b == (warm < m ? warm + 1 : m), "%s: stage %d runs %d forwards before its first "
          "backward; 1F1B's warm-up is min(pp - r - 1, m) = %d, plus one", what, r, first_b, warm);
    /* steady state: backwards in microbatch order, never more than pp - r in flight */
    int in_flight = 0, next_b = 0;
    for (int i = 0; i < n; i++) {
        in_flight += p[i].fwd ? 1 : -1;
        CHECK(in_flight <= pp - r, "%s: stage %d holds %d microbatches", what, r, in_flight);
        if (!p[i].fwd) CHECK(p[i].mb == next_b++, "%s: backward out of order", what);
    }
}

/* Interleaved: the k-th forward of stage r runs chunk (k mod pp*v) / pp,
 * the k-th backward v - 1 minus that (Megatron's get_model_chunk_id), on
 * microbatch (k / (pp*v)) * pp + k mod pp; the warm-up runs
 * (pp - r - 1) * 2 + (v - 1) * pp forwards (all of them when m = pp)
 * before the first backward. */
static void check_interleaved(const pass_t *p, int n, int pp, int v, int m, int r, const char *what) {
    int kf = 0, kb = 0, first_b = -1;
    for (int i = 0; i < n; i++) {
        int k = p[i].fwd ? kf++ : kb++, c = (k % (pp * v)) / pp, mb = k / (pp * v) * pp + k % pp;
        if (!p[i].fwd) c = v - 1 - c;
        if (!p[i].fwd && first_b < 0) first_b = i;
        CHECK(p[i].chunk == c && p[i].mb == mb, "%s: stage %d's %s %d runs microbatch %d chunk %d, "
              "expected %d, %d", what, r, p[i].fwd ? "forward" : "backward", k, p[i].mb, p[i].chunk,
              mb, c);
    }
    int warm = m == pp ? m * v : (pp - r - 1) * 2 + (v - 1) * pp;
    if (warm > m * v) warm = m * v;
    CHECK(first_b == (warm < m * v ? warm + 1 : warm), "%s: stage %d runs %d forwards before its "
          "first backward, expected %d", what, r, first_b, warm < m * v ? warm + 1 : warm);
}

static void test_trace_follows_the_schedule(void) {
    const char *const L[] = {
        "--pipeline-model-parallel-size 4 --pipeline-schedule gpipe --num-microbatches 3",
        "--pipeline-model-parallel-size 4 --pipeline-schedule 1f1b --num-microbatches 8",
        "--pipeline-model-parallel-size 2 --pipeline-schedule 1f1b --num-microbatches 1",
        "--pipeline-model-parallel-size 2 --virtual-pipeline-model-parallel-size 2 --num-microbatches 6",
    };
    for (int k = 0; k < 4; k++) {
        if (small_matrix() && (k < 2 || k == 3)) continue;
        pconfig_t pc;
        device_report_t rep[16];
        memset(rep, 0, sizeof rep);
        json_t *j = trace_of(L[k], &pc, rep);
        CHECK(j != NULL, "%s: no trace", L[k]);
        if (!j) continue;
        const json_t *events = json_get(j, "traceEvents");
        for (int d = 0; d < pc.world_size; d++) {
            pass_t p[256];
            const int r = grid_stage(&pc, d), n = device_passes(events, d, p, 256);
            const int m = pc.accum_degree, v = pc.vpp;
            CHECK(n == 2 * m * v, "%s: device %d traced %d passes, expected 2 m v = %d", L[k], d, n,
                  2 * m * v);
            if (pc.pp_schedule == PC_PP_GPIPE) check_gpipe(p, n, m, L[k]);
            else if (pc.pp_schedule == PC_PP_1F1B) check_1f1b(p, n, m, pc.pp, r, L[k]);
            else check_interleaved(p, n, pc.pp, v, m, r, L[k]);
            /* activation slots: what the schedule holds at once, counted while it ran */
            const int total = m * v, warm_i = m == pc.pp ? total : (pc.pp - r - 1) * 2 + (v - 1) * pc.pp;
            const int want = pc.pp_schedule == PC_PP_GPIPE ? m
                             : pc.pp_schedule == PC_PP_1F1B ? (pc.pp - r < m ? pc.pp - r : m)
                                                            : (warm_i + 1 < total ? warm_i + 1 : total);
            CHECK(rep[d].pp_in_flight_peak == want, "%s: stage %d held %d microbatches at once, "
                  "the schedule's formula says %d", L[k], r, rep[d].pp_in_flight_peak, want);
        }
        /* and the rest of a step is on the tracks too */
        static const char *const cats[] = {"send", "recv", "exact-sum", "collective", "optimizer"};
        for (int c = 0; c < 5; c++) {
            int seen = 0;
            for (size_t i = 0; i < json_len(events) && !seen; i++) {
                const char *cat = json_string(json_get(json_at(events, i), "cat"));
                seen = cat && !strcmp(cat, cats[c]);
            }
            CHECK(seen, "%s: no '%s' span in the trace", L[k], cats[c]);
        }
        printf("trace: %s: every device's spans follow its schedule\n", L[k]);
        json_free(j);
    }
}

/* ---- the broken variants ------------------------------------------------ */

static void test_broken_variants_are_caught(void) {
    /* masks keyed by a stage's microbatch count: microbatch 1 holds
     * sequences B/3 .. 2B/3 - 1 but draws the masks of sequences 1 ..
     * B/3; the first mask drawn is the embedding dropout's */
    expect_caught("--pipeline-model-parallel-size 2 --num-microbatches 3", BROKEN_PP_MASK_KEY,
                  "step0.mask.dropout.embedding", "microbatch 1 of 3",
                  "masks keyed by the stage's microbatch count");
    /* the tied embedding's gradient without the embedding group: the first
     * stage rounds only the embedding's part */
    expect_caught("--pipeline-model-parallel-size 2 --num-microbatches 2", BROKEN_PP_TIED_GRAD,
                  "step0.grad.embedding.word_embeddings.weight", "device 0 (tp 0, cp 0, ep 0, dp 0, pp 0)",
                  "tied embedding without its group");
}

int main(void) {
    if (layout_test_setup()) return 1;
    RUN(test_broken_variants_are_caught);
    RUN(test_trace_follows_the_schedule);
    RUN(test_p2p_traffic_follows_the_schedule);
    RUN(test_rank_list_places_the_stages);
    RUN(test_untied_split_and_3d);
    RUN(test_schedules);
    dump_free(golden);
    corpus_free(&corpus);
    return harness_done();
}
