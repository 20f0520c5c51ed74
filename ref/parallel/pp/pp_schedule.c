/* pp_schedule.c - the order of a stage's forward and backward passes
 * (pp.h), one function per schedule, with Megatron's formulas. */
#include "parity/pp.h"

#include <stdlib.h>

static int min_i(int a, int b) { return a < b ? a : b; }

static int put(pp_op_t *ops, int n, int fwd, int mb, int chunk) {
    ops[n] = (pp_op_t){fwd, mb, chunk};
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

int pp_schedule(const pp_plan_t *p, int r, pp_op_t *ops) {
    switch (p->sched) {
    case PC_PP_GPIPE: return gpipe(p, ops);
    case PC_PP_NAIVE: return naive(p, ops);
    case PC_PP_INTERLEAVED: return interleaved(p, r, ops);
    default: return one_f_one_b(p, r, ops);
    }
}

int pp_max_in_flight(const pp_plan_t *p, int r, int c) {
    pp_op_t *ops = malloc(2 * (size_t)p->m * (size_t)p->v * sizeof *ops);
    if (!ops) parity_fatal("pipeline schedule: out of memory for %d microbatches", p->m);
    int have = 0, most = 0;
    const int n = pp_schedule(p, r, ops);
    for (int i = 0; i < n; i++) {
        if (c >= 0 && ops[i].chunk != c) continue;
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
    default: return min_i(p->pp - r, p->m);
    }
}

double pp_bubble_theory(const pp_plan_t *p) {
    if (p->sched == PC_PP_NAIVE) return (double)(p->pp - 1) / p->pp;
    /* the flush costs (p - 1) chunk passes, a chunk being 1/v of a stage:
     * (p - 1)/v over m + (p - 1)/v, Megatron's (p - 1)/m / v as a
     * fraction of the step (v = 1: (p - 1)/(m + p - 1)) */
    const double v = p->sched == PC_PP_INTERLEAVED ? p->v : 1;
    return (double)(p->pp - 1) / (v * p->m + p->pp - 1);
}

const char *pp_schedule_name(pc_pp_schedule_t s) {
    return s == PC_PP_GPIPE         ? "gpipe"
           : s == PC_PP_INTERLEAVED ? "interleaved"
           : s == PC_PP_NAIVE       ? "naive"
                                    : "1f1b";
}
