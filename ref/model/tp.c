/* tp.c - how a tensor-parallel replica completes its sums (Megatron's
 * conjugate f/g operators), without losing a bit.
 *
 * A row-parallel linear's output, and a column-parallel linear's input
 * gradient, are contractions over an axis the ranks split: each rank's
 * exact sum over the tiles it holds stays open, the group adds the open
 * sums exactly, and every rank rounds once, where the golden run rounds
 * its sum over all tiles. Exact sums do not care about order or
 * grouping, so the bits are the golden ones for any degree and any
 * collective algorithm. (Production frameworks round each rank's partial
 * to the working precision and all-reduce those: the order then decides
 * the bits, Megatron-LM issues 1736 and 1754, torchtitan 1750.)
 */
#include "tp.h"

#include "parity/coll.h"
#include "parity/runtime.h"

void tp_complete_open(gpt_t *g, acc_t *a, size_t n, float *out) {
    group_t *grp = g->shard.tp_group;
    if (accum_plain_sums() || (g->shard.broken & GPT_BROKEN_TP_FP32_SUMS)) {
        /* the diagnostic build, and the deliberately broken variant: each
         * rank rounds its partial, then fp32 sums in the collective's order */
        acc_round(a, out);
        coll_all_reduce(grp, out, out, n, COLL_F32, COLL_SUM);
        return;
    }
    coll_all_reduce_open(grp, &a->x, 0, n);
    acc_round(a, out);
}

void tp_sum_f32(gpt_t *g, float *x, size_t n) {
    coll_all_reduce(g->shard.tp_group, x, x, n, COLL_F32, COLL_SUM);
}

void tp_max_f32(gpt_t *g, float *x, size_t n) {
    coll_all_reduce(g->shard.tp_group, x, x, n, COLL_F32, COLL_MAX);
}

void tp_sum_xacc(gpt_t *g, xacc_t *x, size_t n) {
    coll_all_reduce(g->shard.tp_group, x, x, n, COLL_XACC, COLL_SUM);
}
