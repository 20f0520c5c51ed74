/* test_cp.c - context parallelism against the golden run, bit for bit.
 *
 * Context parallelism splits every sequence's positions over the cp ranks
 * (cp.h): the ring (Megatron's --cp-comm-type p2p) keeps chunks r and
 * 2cp-1-r of 2cp and passes key/value blocks around; Ulysses (a2a) keeps
 * a contiguous piece and re-shards sequence <-> heads around attention.
 * Either way the softmax of a query row is computed as the golden run
 * computes it (global max, then exact sums of exps and of exp.V over key
 * tiles), so the bits cannot depend on which rank held which key or in
 * what order the blocks arrived.
 *
 * One golden run of gpt-tiny (T = 32 in 8 token tiles of 4, 8 heads,
 * 3 steps, dropout 0.1 active), then:
 *  - the ring at cp 2 and 4, composed with tp, dp + ZeRO-1 and pp; Ulysses
 *    at cp 2, 4, 8 and with tp: every reassembled tensor memcmp'd
 *    (layout_run.h);
 *  - the chunks: cp_runs and cp_attention_pairs against a count written
 *    here from first principles (a query tile qi sees qi + 1 key tiles);
 *  - the ring's point-to-point traffic per device against the K/V blocks
 *    the algorithm must move, and Ulysses' all-to-alls against the
 *    q, k, v and context it re-shards;
 *  - the negative control: a ring that merges its partial results with
 *    flash-attention's online-softmax rescaling in arrival order is caught
 *    at the first attention output.
 *
 * PARITY_DP_MATRIX=small (the sanitizer builds): gpt-micro (T = 16 in 4
 * token tiles, 2 heads, 2 layers), cp = 2 only.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../harness.h"
#include "layout_run.h"
#include "parity/cp.h"

/* ---- bit-exact layouts -------------------------------------------------- */

static void test_ring_layouts(void) {
    const char *const tiny[] = {
        "--context-parallel-size 2",
        /* cp 4: 8 chunks of one token tile each, rank r holds tiles r and 7 - r */
        "--context-parallel-size 4",
        "--cp-comm-type p2p --context-parallel-size 2 --tensor-model-parallel-size 2",
        /* the weight gradients are then sums over dp x cp ranks' tokens */
        "--context-parallel-size 2 --data-parallel-size 2 --zero-stage 1",
        /* a stage hands the next one a chunked residual stream */
        "--context-parallel-size 2 --pipeline-model-parallel-size 2 --num-microbatches 2",
        /* sequence parallelism splits the positions a cp rank holds; unequal
         * microbatches (24 sequences in 5); every linear row-parallel */
        "--context-parallel-size 2 --tensor-model-parallel-size 2 --sequence-parallel --num-microbatches 5",
        "--context-parallel-size 2 --tensor-model-parallel-size 2 --tensor-parallel-row-linears",
    };
    const char *const micro[] = {
        "--context-parallel-size 2",
        "--context-parallel-size 2 --tensor-model-parallel-size 2",
        "--context-parallel-size 2 --data-parallel-size 2 --zero-stage 1",
        "--context-parallel-size 2 --pipeline-model-parallel-size 2 --num-microbatches 2",
    };
    const int n = small_matrix() ? 4 : 7;
    for (int k = 0; k < n; k++) expect_golden(&cfg, golden, small_matrix() ? micro[k] : tiny[k]);
}

static void test_ulysses_layouts(void) {
    /* gpt-tiny's 8 heads: cp 8 leaves one head per rank (and one token
     * tile per rank before the all-to-all); with tp 2, heads / tp = 4
     * split over cp 2 */
    const char *const tiny[] = {
        "--cp-comm-type a2a --context-parallel-size 2",
        "--cp-comm-type a2a --context-parallel-size 4",
        "--cp-comm-type a2a --context-parallel-size 8",
        "--cp-comm-type a2a --context-parallel-size 2 --tensor-model-parallel-size 2",
        "--cp-comm-type a2a --context-parallel-size 2 --tensor-model-parallel-size 2 --sequence-parallel "
        "--data-parallel-size 2 --zero-stage 3",
    };
    /* gpt-micro's 2 heads: cp 2 only, and no room for tp beside it */
    const char *const micro[] = {"--cp-comm-type a2a --context-parallel-size 2"};
    const int n = small_matrix() ? 1 : 5;
    for (int k = 0; k < n; k++) expect_golden(&cfg, golden, small_matrix() ? micro[k] : tiny[k]);
}

/* ---- the chunks ----------------------------------------------------------- */

/* The positions a rank holds, in its storage order, expanded from runs. */
static int expand(const cp_runs_t *r, int *pos, int cap) {
    int n = 0;
    CHECK(r->n >= 1 && r->n <= CP_MAX_RUNS, "%d runs", r->n);
    for (int i = 0; i < r->n && i < CP_MAX_RUNS; i++)
        for (int t = 0; t < r->len[i]; t++)
            if (n < cap) pos[n++] = r->t0[i] + t;
    return n;
}

/* cp_runs: the ring's zigzag and Ulysses' contiguous pieces, every rank's
 * positions disjoint and together the whole sequence. */
static void test_runs(void) {
    static const int Ts[] = {32, 64, 16};
    for (int ti = 0; ti < 3; ti++) {
        const int T = Ts[ti];
        for (int cp = 1; cp <= 4; cp *= 2)
            for (int comm = 0; comm < 2; comm++) {
                int seen[64] = {0};
                for (int r = 0; r < cp; r++) {
                    const cp_runs_t got = cp_runs(cp, r, T, (cp_comm_t)comm);
                    int pos[64], want[64], nw = 0;
                    const int np = expand(&got, pos, 64);
                    if (comm == CP_RING) {
                        /* chunk r, then chunk 2cp-1-r, of 2cp chunks of T/(2cp) */
                        const int c = T / (2 * cp);
                        for (int t = 0; t < c; t++) want[nw++] = r * c + t;
                        for (int t = 0; t < c; t++) want[nw++] = (2 * cp - 1 - r) * c + t;
                        /* cp 1: chunks 0 and 1 are adjacent; one run or two both say [0, T) */
                        if (cp > 1)
                            CHECK(got.n == 2 && got.t0[0] == r * c && got.len[0] == c &&
                                      got.t0[1] == (2 * cp - 1 - r) * c && got.len[1] == c,
                                  "ring cp %d rank %d T %d: runs {%d,%d} {%d,%d} (n %d), expected "
                                  "{%d,%d} {%d,%d}", cp, r, T, got.t0[0], got.len[0],
                                  got.n > 1 ? got.t0[1] : -1, got.n > 1 ? got.len[1] : -1, got.n,
                                  r * c, c, (2 * cp - 1 - r) * c, c);
                    } else {
                        const int c = T / cp;
                        for (int t = 0; t < c; t++) want[nw++] = r * c + t;
                        CHECK(got.n == 1 && got.t0[0] == r * c && got.len[0] == c,
                              "ulysses cp %d rank %d T %d: %d runs, first {%d,%d}, expected {%d,%d}",
                              cp, r, T, got.n, got.t0[0], got.len[0], r * c, c);
                    }
                    CHECK(np == nw && !memcmp(pos, want, sizeof(int) * (size_t)nw),
                          "%s cp %d rank %d T %d: the positions differ from the split",
                          cp_comm_name((cp_comm_t)comm), cp, r, T);
                    for (int i = 0; i < np; i++)
                        if (pos[i] >= 0 && pos[i] < T) seen[pos[i]]++;
                }
                for (int t = 0; t < T; t++)
                    CHECK(seen[t] == 1, "%s cp %d T %d: position %d is held by %d ranks",
                          cp_comm_name((cp_comm_t)comm), cp, T, t, seen[t]);
            }
    }
    CHECK(!strcmp(cp_comm_name(CP_RING), "p2p") && !strcmp(cp_comm_name(CP_ULYSSES), "a2a"),
          "cp_comm_name: '%s', '%s'", cp_comm_name(CP_RING), cp_comm_name(CP_ULYSSES));
}

/* The causal (query tile, key tile) pairs of the tiles [t0, t0 + n):
 * query tile qi sees key tiles 0..qi. */
static int64_t pairs_of_tiles(int t0, int n) {
    int64_t s = 0;
    for (int qi = t0; qi < t0 + n; qi++) s += qi + 1;
    return s;
}

/* cp_attention_pairs: the zigzag balances the causal triangle. Each
 * rank's count is computed here from its two chunks, and the ranks may
 * differ by at most one pair (the "balanced within one tile"; the
 * zigzag in fact makes them equal: chunk r and chunk 2cp-1-r of k tiles
 * add to k^2 (2cp-1) + k (k+1) whatever r). The contiguous split, for
 * contrast, gives its last rank about 2cp - 1 times its first's work. */
static void test_attention_pairs_are_balanced(void) {
    static const struct { int T, tile; } shapes[] = {{32, 4}, {64, 4}, {128, 8}, {16, 4}};
    for (int si = 0; si < 4; si++) {
        const int T = shapes[si].T, tile = shapes[si].tile, nT = T / tile;
        const int64_t triangle = (int64_t)nT * (nT + 1) / 2;
        for (int cp = 1; 2 * cp <= nT; cp *= 2) {
            const int k = nT / (2 * cp); /* token tiles per chunk */
            int64_t lo = INT64_MAX, hi = 0, sum = 0, c_lo = INT64_MAX, c_hi = 0;
            for (int r = 0; r < cp; r++) {
                const int64_t got = cp_attention_pairs(cp, r, T, tile, CP_RING);
                const int64_t want = pairs_of_tiles(r * k, k) + pairs_of_tiles((2 * cp - 1 - r) * k, k);
                CHECK(got == want, "ring cp %d rank %d (T %d, tile %d): %lld pairs, its chunks "
                      "%d and %d of %d tiles have %lld", cp, r, T, tile, (long long)got, r,
                      2 * cp - 1 - r, k, (long long)want);
                lo = got < lo ? got : lo;
                hi = got > hi ? got : hi;
                sum += got;
                const int64_t contiguous = pairs_of_tiles(r * 2 * k, 2 * k);
                c_lo = contiguous < c_lo ? contiguous : c_lo;
                c_hi = contiguous > c_hi ? contiguous : c_hi;
            }
            CHECK(hi - lo <= 1, "ring cp %d (T %d, tile %d): ranks' pairs range over [%lld, %lld]",
                  cp, T, tile, (long long)lo, (long long)hi);
            CHECK(sum == triangle, "ring cp %d (T %d, tile %d): the ranks' pairs add to %lld, "
                  "the causal triangle has %lld", cp, T, tile, (long long)sum, (long long)triangle);
            if (T == 32 && cp > 1)
                printf("T %d tile %d cp %d: zigzag %lld..%lld pairs a rank, contiguous %lld..%lld\n",
                       T, tile, cp, (long long)lo, (long long)hi, (long long)c_lo, (long long)c_hi);
        }
        /* Ulysses: every rank runs the whole triangle of each head it
         * holds (heads / cp of them), so per rank it does heads/cp
         * triangles where the ring does heads x its pairs: the same work
         * (heads x triangle / cp), and the same on every rank */
        for (int cp = 1; cp <= nT && cp <= 8; cp *= 2)
            for (int r = 0; r < cp; r++) {
                const int64_t got = cp_attention_pairs(cp, r, T, tile, CP_ULYSSES);
                CHECK(got == triangle, "ulysses cp %d rank %d (T %d, tile %d): %lld pairs a head, "
                      "the causal triangle has %lld", cp, r, T, tile, (long long)got,
                      (long long)triangle);
                if (2 * cp <= nT)
                    CHECK(cp * cp_attention_pairs(cp, r, T, tile, CP_RING) == got,
                          "cp %d rank %d (T %d, tile %d): ring and Ulysses ranks should do the same "
                          "work", cp, r, T, tile);
            }
    }
}

/* cp_check: what must divide what, with the flag named. */
static void test_check_names_the_flag(void) {
    perr_t err;
    /* gpt-tiny: T 32, tiles of 4 (8 token tiles), 8 heads */
    CHECK(cp_check(2, CP_RING, 32, 4, 8, 1, &err) == 0, "ring cp 2: %s", err.msg);
    CHECK(cp_check(4, CP_RING, 32, 4, 8, 2, &err) == 0, "ring cp 4 tp 2: %s", err.msg);
    CHECK(cp_check(8, CP_ULYSSES, 32, 4, 8, 1, &err) == 0, "ulysses cp 8: %s", err.msg);
    CHECK(cp_check(2, CP_ULYSSES, 32, 4, 8, 2, &err) == 0, "ulysses cp 2 tp 2: %s", err.msg);
    static const struct { int cp; cp_comm_t comm; int tp; const char *why; } bad[] = {
        {3, CP_RING, 1, "2cp = 6 chunks do not cut 8 token tiles"},
        {8, CP_RING, 1, "2cp = 16 chunks for 8 token tiles"},
        {16, CP_RING, 1, "2cp = 32 chunks for 8 token tiles"},
        {3, CP_ULYSSES, 1, "3 pieces of 8 token tiles, 8 heads"},
        {4, CP_ULYSSES, 4, "heads / tp = 2 over 4 ranks"},
        {16, CP_ULYSSES, 1, "16 ranks for 8 heads"},
    };
    for (int i = 0; i < 6; i++) {
        memset(&err, 0, sizeof err);
        const int rc = cp_check(bad[i].cp, bad[i].comm, 32, 4, 8, bad[i].tp, &err);
        CHECK(rc == -1 && strstr(err.msg, "context-parallel-size"),
              "%s cp %d tp %d (%s): rc %d, message '%s' should name context-parallel-size",
              cp_comm_name(bad[i].comm), bad[i].cp, bad[i].tp, bad[i].why, rc, err.msg);
    }
}

/* ---- communication ------------------------------------------------------ */

static int run_reports(const char *flags, pconfig_t *pc, device_report_t *rep) {
    perr_t err;
    if (parse_layout(flags, cfg.global_batch, pc)) return -1;
    engine_run_t run = {.model = cfg, .pc = *pc, .steps = 1, .data = &corpus, .reports = rep};
    if (engine_train(&run, &err)) {
        fprintf(stderr, "%s: %s\n", flags, err.msg);
        return -1;
    }
    return 0;
}

/* A layout's per-device reports of one step (at most 16 devices); 0,
 * counted as a failure, when it does not run. */
static int reports_of(const char *flags, pconfig_t *pc, device_report_t *rep) {
    memset(rep, 0, 16 * sizeof *rep);
    const int ok = run_reports(flags, pc, rep) == 0;
    CHECK(ok, "%s did not run", flags);
    return ok;
}

/* The ring's point-to-point traffic of one step, per device, from what
 * the algorithm must move (every device of a ring is alike). A "block" is
 * one rank's keys (or values) of the step's sequences: n_seq x Tc x A
 * fp32, Tc = T / cp positions, A = hidden / tp features; m microbatches
 * split n_seq between them, so bytes do not depend on m but messages do.
 * Per layer and microbatch:
 *  - forward: the K blocks go round the ring (cp - 1 hand-offs), then the
 *    V blocks (the global max needs every key's score before any exp.V):
 *    2 (cp - 1) fp32 messages;
 *  - backward: K and V travel together again, (cp - 1) messages of 2A a
 *    token; the contributions to other ranks' dK and dV are open exact
 *    sums returned to their owners: (cp - 1) messages of n_seq x Tc x 2A
 *    elements, 8 bytes each, plus the exception payload of slow elements.
 * The message counts are a choice of the implementation as much as of
 * the algorithm (K and V could share the forward hand-off); the bytes
 * follow from the blocks whatever the messages are. */
static void ring_traffic(const char *flags) {
    pconfig_t pc;
    device_report_t rep[16];
    if (!reports_of(flags, &pc, rep)) return;
    const uint64_t cp = (uint64_t)pc.cp, m = (uint64_t)pc.accum_degree, L = (uint64_t)cfg.layers;
    const uint64_t n_seq = (uint64_t)(cfg.global_batch / pc.dp), Tc = (uint64_t)cfg.seq_length / cp;
    const uint64_t A = (uint64_t)(cfg.hidden / pc.tp);
    const uint64_t block = n_seq * Tc * A; /* elements */
    const uint64_t want_f32_calls = L * m * (2 * (cp - 1) + (cp - 1));
    const uint64_t want_f32_bytes = L * (2 * (cp - 1) * block + (cp - 1) * 2 * block) * sizeof(float);
    const uint64_t want_open_calls = L * m * (cp - 1);
    const uint64_t min_open_bytes = L * (cp - 1) * 2 * block * 8;
    for (int d = 0; d < pc.world_size; d++) {
        const coll_family_t *f = coll_counters_family(&rep[d].comm, "cp");
        CHECK(f != NULL, "%s: device %d has no traffic in the 'cp' family", flags, d);
        if (!f) continue;
        const coll_tally_t *s = &f->by[COLL_KIND_SEND][COLL_F32];
        const coll_tally_t *o = &f->by[COLL_KIND_SEND][COLL_XVEC];
        CHECK(s->sent == want_f32_bytes, "%s: device %d sent %llu bytes of K/V blocks, expected "
              "L (2 (cp-1) + 2 (cp-1)) x %llu x 4 = %llu", flags, d, (unsigned long long)s->sent,
              (unsigned long long)block, (unsigned long long)want_f32_bytes);
        CHECK(s->calls == want_f32_calls, "%s: device %d sent %llu fp32 messages, expected "
              "L m 3 (cp-1) = %llu", flags, d, (unsigned long long)s->calls,
              (unsigned long long)want_f32_calls);
        CHECK(o->calls == want_open_calls && o->sent >= min_open_bytes,
              "%s: device %d returned %llu open-sum messages of %llu bytes; expected L m (cp-1) = "
              "%llu of at least 8 x 2 x %llu elements a layer = %llu bytes", flags, d,
              (unsigned long long)o->calls, (unsigned long long)o->sent,
              (unsigned long long)want_open_calls, (unsigned long long)block,
              (unsigned long long)min_open_bytes);
        /* the ring sends and receives alike, and never all-to-alls */
        CHECK(f->by[COLL_KIND_RECV][COLL_F32].recv == s->sent,
              "%s: device %d received %llu fp32 bytes, sent %llu", flags, d,
              (unsigned long long)f->by[COLL_KIND_RECV][COLL_F32].recv, (unsigned long long)s->sent);
        CHECK(f->by[COLL_KIND_ALL_TO_ALL][COLL_F32].calls == 0,
              "%s: device %d made all-to-alls in the ring", flags, d);
        if (d == 0)
            printf("%s: device 0: %llu K/V messages (%llu bytes), %llu open-sum messages "
                   "(%llu bytes)\n", flags, (unsigned long long)s->calls,
                   (unsigned long long)s->sent, (unsigned long long)o->calls,
                   (unsigned long long)o->sent);
    }
}

static void test_ring_traffic(void) {
    ring_traffic("--context-parallel-size 2");
    if (small_matrix()) return;
    ring_traffic("--context-parallel-size 4");
    /* A = hidden / tp features; m microbatches: m times the messages, the same bytes */
    ring_traffic("--context-parallel-size 2 --tensor-model-parallel-size 2 --num-microbatches 2");
}

/* Ulysses moves no point-to-point messages: per layer and microbatch
 * four all-to-alls of the cp group, q, k, v in [n, 3A] and the context
 * out [n, A], then in the backward pass the context's gradient in and
 * dq, dk, dv out: S (nccl-tests' bytes, the whole send buffer) is 8
 * blocks of n_seq x Tc x A fp32 a layer, whatever m. */
static void test_ulysses_traffic(void) {
    static const char *const L2[] = {
        "--cp-comm-type a2a --context-parallel-size 2",
        "--cp-comm-type a2a --context-parallel-size 4 --tensor-model-parallel-size 2 --num-microbatches 3",
    };
    for (int k = 0; k < (small_matrix() ? 1 : 2); k++) {
        const char *flags = L2[k];
        pconfig_t pc;
        device_report_t rep[16];
        if (!reports_of(flags, &pc, rep)) continue;
        const uint64_t cp = (uint64_t)pc.cp, m = (uint64_t)pc.accum_degree, L = (uint64_t)cfg.layers;
        const uint64_t block = (uint64_t)(cfg.global_batch / pc.dp) * ((uint64_t)cfg.seq_length / cp) *
                               (uint64_t)(cfg.hidden / pc.tp);
        for (int d = 0; d < pc.world_size; d++) {
            const coll_family_t *f = coll_counters_family(&rep[d].comm, "cp");
            CHECK(f != NULL, "%s: device %d has no traffic in the 'cp' family", flags, d);
            if (!f) continue;
            uint64_t sends = 0;
            for (int dt = 0; dt < COLL_NDTYPES; dt++) sends += f->by[COLL_KIND_SEND][dt].calls;
            const coll_tally_t *a = &f->by[COLL_KIND_ALL_TO_ALL][COLL_F32];
            CHECK(a->calls == L * m * 4 && a->bytes == L * 8 * block * sizeof(float) && sends == 0,
                  "%s: device %d made %llu all-to-alls of %llu bytes and %llu sends; expected "
                  "L m 4 = %llu of L x 8 x %llu x 4 = %llu bytes, no sends", flags, d,
                  (unsigned long long)a->calls, (unsigned long long)a->bytes,
                  (unsigned long long)sends, (unsigned long long)(L * m * 4),
                  (unsigned long long)block, (unsigned long long)(L * 8 * block * sizeof(float)));
            if (d == 0)
                printf("%s: device 0: %llu all-to-alls, %llu bytes\n", flags,
                       (unsigned long long)a->calls, (unsigned long long)a->bytes);
        }
    }
}

/* ---- the broken variant ------------------------------------------------- */

/* Flash attention's online softmax: running fp32 max, sum and output,
 * rescaled by exp(m_old - m_new) as each key block arrives, in ring
 * order. The golden run takes the exact global max first and exact sums
 * rounded once, so the very first attention output differs (already on
 * rows whose keys are all local: the running fp32 sums round where the
 * exact ones do not), and the report names the rank that produced it. */
static void test_broken_online_softmax_is_caught(void) {
    expect_caught("--context-parallel-size 2", BROKEN_CP_ONLINE_SOFTMAX,
                  "step0.act.layers.0.self_attention.core_attention.output", "context-parallel rank",
                  "online softmax in ring order");
}

int main(void) {
    if (layout_test_setup()) return 1;
    RUN(test_runs);
    RUN(test_attention_pairs_are_balanced);
    RUN(test_check_names_the_flag);
    RUN(test_broken_online_softmax_is_caught);
    RUN(test_ring_traffic);
    RUN(test_ulysses_traffic);
    RUN(test_ring_layouts);
    RUN(test_ulysses_layouts);
    dump_free(golden);
    corpus_free(&corpus);
    return harness_done();
}
