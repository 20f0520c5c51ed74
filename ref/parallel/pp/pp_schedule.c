/* pp_schedule.c - the order of a stage's forward and backward passes
 * (pp.h), one function per schedule, with Megatron's formulas. */
#include "parity/pp.h"

#include <stdlib.h>

static int min_i(int a, int b) { return a < b ? a : b; }

static int put(pp_op_t *ops, int n, int fwd, int mb, int chunk) {
    ops[n] = (pp_op_t){fwd, mb, chunk, PP_PASS_WHOLE};
    return n + 1;
}

/* GPipe: all forward, then all backward (m slots). */
static int gpipe(const pp_plan_t *p, pp_op_t *ops) {
    int n = 0;
    for (int mb = 0; mb < p->m; mb++) n = put(ops, n, 1, mb, 0);
    for (int mb = 0; mb < p->m; mb++) n = put(ops, n, 0, mb, 0);
    return n;
}

/* 1F1B: stage r runs min(pp - r - 1, m) forwards ahead, so at most
 * pp - r microbatches are in flight. */
static int one_f_one_b(const pp_plan_t *p, int r, pp_op_t *ops) {
    const int warm = min_i(p->pp - r - 1, p->m);
    int n = 0;
    for (int mb = 0; mb < warm; mb++) n = put(ops, n, 1, mb, 0);
    for (int k = 0; k < p->m - warm; k++) {
        n = put(ops, n, 1, warm + k, 0);
        n = put(ops, n, 0, k, 0);
    }
    for (int mb = p->m - warm; mb < p->m; mb++) n = put(ops, n, 0, mb, 0);
    return n;
}

/* Naive model parallelism: each microbatch's forward and backward
 * through every stage before the next one starts (one slot; the bubble
 * is (p - 1) / p). */
static int naive(const pp_plan_t *p, pp_op_t *ops) {
    int n = 0;
    for (int mb = 0; mb < p->m; mb++) {
        n = put(ops, n, 1, mb, 0);
        n = put(ops, n, 0, mb, 0);
    }
    return n;
}

/* Interleaved 1F1B over m * v virtual microbatches. Virtual microbatch k
 * is microbatch (k / (pp*v)) * pp + k mod pp of chunk (k mod pp*v) / pp
 * (forward) or v - 1 minus that (backward): groups of pp microbatches
 * go through chunk 0, then chunk 1, ... */
static int interleaved_warmup(const pp_plan_t *p, int r) {
    const int total = p->m * p->v;
    if (p->m == p->pp) return total; /* Megatron: all forward, then all backward */
    return min_i((p->pp - r - 1) * 2 + (p->v - 1) * p->pp, total);
}

static void virtual_mb(const pp_plan_t *p, int k, int fwd, int *mb, int *chunk) {
    const int group = p->pp * p->v, in_group = k % group;
    *chunk = in_group / p->pp;
    if (!fwd) *chunk = p->v - 1 - *chunk;
    *mb = k / group * p->pp + k % p->pp;
}

static int interleaved(const pp_plan_t *p, int r, pp_op_t *ops) {
    const int total = p->m * p->v, warm = interleaved_warmup(p, r);
    int n = 0, mb, c;
    for (int k = 0; k < warm; k++) {
        virtual_mb(p, k, 1, &mb, &c);
        n = put(ops, n, 1, mb, c);
    }
    for (int k = 0; k < total - warm; k++) {
        virtual_mb(p, warm + k, 1, &mb, &c);
        n = put(ops, n, 1, mb, c);
        virtual_mb(p, k, 0, &mb, &c);
        n = put(ops, n, 0, mb, c);
    }
    for (int k = total - warm; k < total; k++) {
        virtual_mb(p, k, 0, &mb, &c);
        n = put(ops, n, 0, mb, c);
    }
    return n;
}

/* ---- split backward: B (input gradient) and W (weight gradient) ---- */

static int put_part(pp_op_t *ops, int n, int part, int mb, int chunk) {
    ops[n] = (pp_op_t){!part, mb, chunk, part};
    return n + 1;
}
#define PF(mb, c) (n = put_part(ops, n, 0, (mb), (c)))
#define PB(mb, c) (n = put_part(ops, n, PP_PASS_B, (mb), (c)))
#define PW(mb, c) (n = put_part(ops, n, PP_PASS_W, (mb), (c)))

/* ZB-H1 (Qi et al., ICLR 2024, the handcrafted schedule; as PyTorch's
 * ScheduleInterleavedZeroBubble with one chunk a stage): 1F1B's F and B
 * order, and on stage r each W comes r microbatches after its B (W of
 * k - r right after B of k); the r left over run at the end, filling
 * the cool-down's bubble. In flight: 1F1B's pp - r. */
static int zb_h1(const pp_plan_t *p, int r, pp_op_t *ops) {
    const int warm = min_i(p->pp - 1 - r, p->m);
    int n = 0, f = 0, b = 0, w = 0;
    for (int k = 0; k < warm; k++) PF(f++, 0);
    for (int k = 0; k < p->m; k++) { /* steady state, then cool-down */
        if (k < p->m - warm) PF(f++, 0);
        PB(b++, 0);
        if (k >= r) PW(w++, 0);
    }
    while (w < b) PW(w++, 0);
    return n;
}

/* ZB-H2 (the same paper's second handcrafted schedule, 2x ZB-H1's
 * activation memory): stage r runs 2(pp - r) - 1 forwards before its first
 * B, exactly the time that B takes to come back (T_F = T_B = T_W), so the
 * warm-up has no bubble; then B, F, W with each W lagging its B by r
 * microbatches, the r left over filling the cool-down: every stage busy
 * from its first F to its last W, a parallelogram. In flight: the warm-up,
 * plus the lagging W's, min(2 pp - r, m). */
static int zb_h2(const pp_plan_t *p, int r, pp_op_t *ops) {
    const int warm = min_i(2 * (p->pp - r) - 1, p->m);
    int n = 0, f = 0, w = 0;
    for (int k = 0; k < warm; k++) PF(f++, 0);
    for (int b = 0; b < p->m; b++) {
        PB(b, 0);
        if (f < p->m) PF(f++, 0);
        if (b >= r) PW(w++, 0);
    }
    while (w < p->m) PW(w++, 0);
    return n;
}

/* ZB-V (same paper; sail-sg's handcrafted_zb_v.py, PyTorch's
 * ScheduleZBVZeroBubble): two chunks a stage in a V. Warm-up 2(pp-r)-1
 * chunk-0 forwards, r pairs (F chunk 1, F chunk 0), pp-r triples of
 * chunk 1's F B W; steady [F c0] B W c0, F B W c1; cool-down r pairs of
 * B c0, B c1, pp - r pairs of B c0, W c0, then the W left of chunk 1,
 * then of chunk 0. Fewer than 2 pp - 1 microbatches: generated for
 * 2 pp - 1 and the others dropped. */
static int zb_v(const pp_plan_t *p, int r, pp_op_t *ops) {
    const int P = p->pp, m = p->m, N = m > 2 * P - 1 ? m : 2 * P - 1;
    pp_op_t *all = malloc(3 * 2 * (size_t)N * sizeof *all);
    if (!all) parity_fatal("pipeline schedule: out of memory for %d microbatches", N);
    pp_op_t *keep = ops;
    ops = all;
    int n = 0, f0 = 0, f1 = 0, b0 = 0, b1 = 0;
    for (int k = 0; k < 2 * (P - r) - 1; k++) PF(f0++, 0);
    for (int k = 0; k < r; k++) PF(f1++, 1), PF(f0++, 0);
    for (int k = 0; k < P - r; k++) PF(f1++, 1), PB(b1, 1), PW(b1, 1), b1++;
    while (f1 < f0 || f0 < N) {
        if (f0 < N) PF(f0++, 0);
        PB(b0, 0), PW(b0, 0), b0++;
        PF(f1++, 1);
        PB(b1, 1), PW(b1, 1), b1++;
    }
    int w0 = b0, w1 = b1;
    for (int k = 0; k < r; k++) PB(b0++, 0), PB(b1++, 1);
    for (int k = 0; k < P - r; k++) PB(b0++, 0), PW(w0++, 0);
    while (w1 < b1) PW(w1++, 1);
    while (w0 < b0) PW(w0++, 0);
    ops = keep;
    int kept = 0;
    for (int i = 0; i < n; i++)
        if (all[i].mb < m) ops[kept++] = all[i];
    free(all);
    return kept;
}

/* DualPipeV (DeepSeek's DualPipe, the V variant: dualpipev.py's
 * DualPipeV.step, PyTorch's ScheduleDualPipeV): microbatches enter at the
 * V's two arms; eight steps. A full backward is B then W at once; a zero-
 * bubble one defers W to a queue shared by both chunks. F and B written
 * after each other are the pairs DualPipe overlaps. Needs m >= 2 pp. */
static int dualpipev(const pp_plan_t *p, int r, pp_op_t *ops) {
    const int P = p->pp, m = p->m;
    int n = 0, f[2] = {0, 0}, b[2] = {0, 0}, qh = 0, qt = 0;
    pp_op_t *q = malloc(2 * (size_t)m * sizeof *q); /* the deferred W's, oldest first */
    if (!q) parity_fatal("pipeline schedule: out of memory for %d microbatches", m);
#define DF(c) PF(f[c]++, (c))
#define DB(c, zb)                                                                      \
    do {                                                                               \
        const int k_ = b[c]++;                                                         \
        PB(k_, (c));                                                                   \
        if (zb) q[qt++] = (pp_op_t){0, k_, (c), PP_PASS_W};                            \
        else PW(k_, (c));                                                              \
    } while (0)
#define DW() do { if (qh < qt) ops[n++] = q[qh++]; } while (0)
    for (int k = 0; k < (P - r - 1) * 2; k++) DF(0);              /* 1: F0 */
    for (int k = 0; k < r + 1; k++) DF(0), DF(1);                 /* 2: F0 F1 */
    for (int k = 0; k < P - r - 1; k++) { DB(1, 1); DW(); DF(1); } /* 3: B1 W F1 */
    for (int k = 0; k < m - 2 * P + r + 1; k++) {                 /* 4: F0&B1, F1&B0 */
        DF(0); DB(1, 0);
        DF(1); DB(0, 0);
    }
    for (int k = 0; k < P - r - 1; k++) { DB(1, 0); DF(1); DB(0, 0); } /* 5: B1, F1&B0 */
    const int s6 = r + 1; /* 6: B1 B0, the second half zero-bubble */
    for (int k = 0, zb = 0; k < s6; k++) {
        if (k == s6 / 2 && r % 2 == 1) zb = 1;
        DB(1, zb);
        if (k == s6 / 2 && r % 2 == 0) zb = 1;
        DB(0, zb);
    }
    for (int k = 0; k < P - r - 1; k++) { DW(); DB(0, 1); }       /* 7: W B0 */
    for (int k = 0; k < r + 1; k++) DW();                         /* 8: W */
    while (qh < qt) DW();
#undef DF
#undef DB
#undef DW
    free(q);
    return n;
}
#undef PF
#undef PB
#undef PW

/* An interleaved encoder-decoder (pp.h's rings): the decoder's stages run
 * Megatron's interleaved schedule over their own ring of D stages; the
 * encoder's run its every forward, chunk by chunk, then its every
 * backward (interleaved's order when m = pp), so no encoder pass waits on
 * the decoder until every forward has left: the decoder's first stage
 * then pulls the encoder's outputs as a first stage reads its data, and
 * the encoder's backwards wait only on gradients that the decoder makes
 * on its own. */
static int interleaved_rings(const pp_plan_t *p, int r, pp_op_t *ops) {
    int n = 0;
    if (r >= p->rings) {
        pp_plan_t ring = *p;
        ring.pp = p->pp - p->rings, ring.rings = 0;
        return interleaved(&ring, r - p->rings, ops);
    }
    for (int c = 0; c < p->v; c++)
        for (int mb = 0; mb < p->m; mb++) n = put(ops, n, 1, mb, c);
    for (int c = p->v - 1; c >= 0; c--)
        for (int mb = 0; mb < p->m; mb++) n = put(ops, n, 0, mb, c);
    return n;
}

int pp_schedule(const pp_plan_t *p, int r, pp_op_t *ops) {
    if (p->rings && p->sched == PC_PP_INTERLEAVED) return interleaved_rings(p, r, ops);
    switch (p->sched) {
    case PC_PP_ZB_H1: return zb_h1(p, r, ops);
    case PC_PP_ZB_H2: return zb_h2(p, r, ops);
    case PC_PP_ZB_V: return zb_v(p, r, ops);
    case PC_PP_DUALPIPEV: return dualpipev(p, r, ops);
    case PC_PP_GPIPE: return gpipe(p, ops);
    case PC_PP_NAIVE: return naive(p, ops);
    case PC_PP_INTERLEAVED: return interleaved(p, r, ops);
    default: return one_f_one_b(p, r, ops);
    }
}

int pp_max_in_flight(const pp_plan_t *p, int r, int c) {
    pp_op_t *ops = malloc((size_t)pp_max_ops(p) * sizeof *ops);
    if (!ops) parity_fatal("pipeline schedule: out of memory for %d microbatches", p->m);
    int have = 0, most = 0;
    const int n = pp_schedule(p, r, ops);
    for (int i = 0; i < n; i++) {
        if (c >= 0 && ops[i].chunk != c) continue;
        if (ops[i].part == PP_PASS_B) continue; /* the activations stay until W */
        have += ops[i].fwd ? 1 : -1;
        if (have > most) most = have;
    }
    free(ops);
    return most;
}

int pp_in_flight_formula(const pp_plan_t *p, int r) {
    switch (p->sched) {
    case PC_PP_GPIPE: return p->m;
    case PC_PP_NAIVE: return 1;
    case PC_PP_INTERLEAVED: return min_i(interleaved_warmup(p, r) + 1, p->m * p->v);
    case PC_PP_ZB_H1: return min_i(p->pp, p->m); /* a W lags its B by r: pp - r + r */
    case PC_PP_ZB_H2: return min_i(2 * p->pp - r, p->m); /* 2 (pp - r) - 1 warm-up, r lagging W's, 1 */
    case PC_PP_ZB_V: return min_i(2 * p->pp, 2 * p->m);
    case PC_PP_DUALPIPEV: return 2 * p->pp + 1; /* DualPipe's PP + 1, PP = 2 pp chunks */
    default: return min_i(p->pp - r, p->m);
    }
}

double pp_bubble_theory(const pp_plan_t *p) {
    if (p->sched == PC_PP_NAIVE) return (double)(p->pp - 1) / p->pp;
    if (pconfig_splits_backward(p->sched)) {
        /* the schedule itself, run with T_F = T_B = T_W (the paper's unit
         * case): ZB-H1 (p-1)/(3m+p-1), ZB-V and DualPipeV (p-1)/(6m+p-1) in
         * chunk passes; the mean over stages of their idle share */
        const pp_times_t unit = {1, 1, 1};
        pp_sim_t sim;
        if (pp_simulate(p, &unit, &sim)) return -1;
        double idle = 0;
        for (int r = 0; r < p->pp; r++) idle += pp_sim_bubble(p, &sim, r);
        return idle / p->pp;
    }
    /* the flush costs (p - 1) chunk passes, a chunk being 1/v of a stage:
     * (p - 1)/v over m + (p - 1)/v, Megatron's (p - 1)/m / v as a
     * fraction of the step (v = 1: (p - 1)/(m + p - 1)) */
    const double v = p->sched == PC_PP_INTERLEAVED ? p->v : 1;
    return (double)(p->pp - 1) / (v * p->m + p->pp - 1);
}

const char *pp_bubble_formula(const pp_plan_t *p) {
    switch (p->sched) {
    case PC_PP_INTERLEAVED: return "(p-1)/(v m+p-1)";
    case PC_PP_NAIVE: return "(p-1)/p";
    case PC_PP_ZB_H1: return "(p-1)(T_F+T_B-T_W) a stage, (p-1)/(3m+p-1) at T_F=T_B=T_W";
    case PC_PP_ZB_H2: return "(p-1)(T_F+T_B-2T_W) a stage; at T_F=T_B=T_W none inside a stage's "
                             "run, (p-1)/(3m+p-1) of the span";
    case PC_PP_ZB_V:
    case PC_PP_DUALPIPEV: return "the schedule at T_F=T_B=T_W (chunk passes): (p-1)/(6m+p-1)";
    default: return "(p-1)/(m+p-1)";
    }
}

const char *pp_schedule_name(pc_pp_schedule_t s) { return pconfig_schedule_name(s); }
