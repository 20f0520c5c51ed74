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
#include "model/gpt.h"
#include "model/styles/tp.h"

#include <string.h>

#include "parity/coll.h"
#include "parity/pconfig.h"
#include "parity/runtime.h"

void tp_complete_open(gpt_t *g, acc_t *a, size_t n, float *out) {
    group_t *grp = g->shard.tp_group;
    if (g->shard.broken & GPT_BROKEN_TP_FP32_SUMS) {
        /* the deliberately broken variant: each rank rounds its partial,
         * then fp32 sums in the collective's order */
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

void tp_layout_scratch(gpt_scratch_t *S, const model_config_t *c, const gpt_local_t *lc, size_t n,
                       int tp, carver_t *cv) {
    S->tp = NULL;
    if (tp == 1) return;
    const size_t C = (size_t)c->hidden, F = (size_t)lc->ffn;
    const int sp = lc->seq_parts > 1;
    tp_scratch_t measure, *sc = carve(cv, sizeof *sc);
    S->tp = sc;
    if (!sc) sc = &measure; /* measuring */
    /* the open outputs of row-parallel linears: [n, C], or with every
     * linear row-parallel up to [n, max(3C, F)] */
    const size_t wide = 3 * C > F ? 3 * C : F, widest = lc->row_linears ? wide : C;
    sc->open = carve(cv, acc_storage_bytes(n * widest));
    sc->open_local = sp ? carve(cv, acc_storage_bytes(n / (size_t)lc->seq_parts * C)) : NULL;
    sc->parts = sp ? CARVE_F(cv, n * C) : NULL;
}

void tp_sum_xacc(gpt_t *g, xacc_t *x, size_t n) {
    coll_all_reduce(g->shard.tp_group, x, x, n, COLL_XACC, COLL_SUM);
}

/* ---- sequence parallelism -------------------------------------------------
 * A rank holds positions p*Tl .. p*Tl+Tl-1 (Tl = T/tp, p its part) of
 * every sequence of the slot, as [n_seq][Tl][w] (with context parallelism
 * T is the slot's Tc positions, and these are indices into them). Collectives move
 * contiguous blocks, one per rank, so the full layout [n_seq][T][w] is
 * permuted to and from "parts order" [tp][n_seq][Tl][w] around them. */

/* full [n_seq][tp*Tl][w] <-> parts [tp][n_seq][Tl][w], run by run
 * (into_parts: src is full, dst parts; else the reverse). */
static void permute_parts(float *dst, const float *src, int tp, int n_seq, int Tl, int w,
                          int into_parts) {
    const size_t run = (size_t)Tl * w;
    for (int r = 0; r < tp; r++)
        for (int s = 0; s < n_seq; s++) {
            const size_t in_parts = ((size_t)r * n_seq + s) * run, in_full = ((size_t)s * tp + r) * run;
            memcpy(dst + (into_parts ? in_parts : in_full), src + (into_parts ? in_full : in_parts),
                   run * sizeof(float));
        }
}

void sp_gather(gpt_t *g, float *full, const float *local, int n_seq, int w) {
    const int tp = g->shard.tp, Tl = g->local.seq_held / tp;
    const size_t count = (size_t)n_seq * Tl * w;
    float *parts = g->scratch.tp->parts;
    memcpy(parts + (size_t)g->shard.tp_rank * count, local, count * sizeof(float));
    coll_all_gather(g->shard.tp_group, parts + (size_t)g->shard.tp_rank * count, parts, count,
                    COLL_F32);
    permute_parts(full, parts, tp, n_seq, Tl, w, 0);
}

void tp_gather_cols(gpt_t *g, float *full, const float *local, int n, int w, float *parts) {
    const size_t count = (size_t)n * w;
    memcpy(parts + (size_t)g->shard.tp_rank * count, local, count * sizeof(float));
    coll_all_gather(g->shard.tp_group, parts + (size_t)g->shard.tp_rank * count, parts, count,
                    COLL_F32);
    permute_parts(full, parts, g->shard.tp, n, 1, w, 0); /* [tp][n][w] -> [n][tp*w] */
}

void sp_reduce_scatter_f32(gpt_t *g, float *local, const float *full, int n_seq, int w) {
    const int tp = g->shard.tp, Tl = g->local.seq_held / tp;
    float *parts = g->scratch.tp->parts;
    permute_parts(parts, full, tp, n_seq, Tl, w, 1);
    coll_reduce_scatter(g->shard.tp_group, parts, local, (size_t)n_seq * Tl * w, COLL_F32,
                        COLL_SUM);
}

void sp_contract_parts(gpt_t *g, contract_form_t form, int n_seq, int N, int K, int tn, int tk,
                       const float *A, int lda, const float *B, int ldb, acc_t *open) {
    const int tp = g->shard.tp, T = g->local.seq_held, Tl = T / tp;
    for (int r = 0; r < tp; r++)
        for (int s = 0; s < n_seq; s++)
            contract_acc(form, Tl, N, K, g->cfg.tile_tokens, tn, tk,
                         A + ((size_t)s * T + (size_t)r * Tl) * lda, lda, B, ldb, open,
                         ((size_t)r * n_seq + s) * Tl * (size_t)N, (size_t)N, &g->ws);
}

void sp_complete_open(gpt_t *g, acc_t *open, size_t count, float *out) {
    group_t *grp = g->shard.tp_group;
    if (g->shard.broken & GPT_BROKEN_TP_FP32_SUMS) {
        float *parts = g->scratch.tp->parts; /* rounded per rank, then fp32 sums */
        acc_round(open, parts);
        coll_reduce_scatter(grp, parts, out, count, COLL_F32, COLL_SUM);
        return;
    }
    acc_t mine;
    acc_init_with(&mine, count, g->scratch.tp->open_local);
    acc_zero(&mine);
    coll_reduce_scatter_open(grp, &open->x, 0, &mine.x, 0, count);
    acc_round(&mine, out);
    acc_free(&mine); /* its exception accumulators; the buffer stays */
}

void tp_all_reduce_acc(gpt_t *g, acc_t *a) {
    coll_all_reduce_open(g->shard.tp_group, &a->x, 0, a->n);
}
