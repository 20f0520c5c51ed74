/* tp_modes_count.c - what Colossal-AI's 2-D, 2.5-D and 3-D tensor-parallel
 * modes (ref/model/styles/tp2d.c, tp3d.c) move, derived call by call from
 * the model's dims, for their report (tp_modes_report.c) to set beside the
 * counters. */
#include <stdio.h>
#include <string.h>

#include "model/gpt.h"
#include "parity/placement.h"
#include "tp_modes_internal.h"


/* ---- Colossal-AI's 2-D, 2.5-D and 3-D modes (ref/model/styles/tp2d.c, tp3d.c) ------
 * Traffic. Device 0 is at coordinate 0 of every tensor-parallel axis. Its
 * groups: tp (2-D: its row), tp2 (its column), tp3 (3-D: the weights'
 * group), of q members each, and 3-D's two vector groups (tp2-tp3 for the
 * stream's vectors, tp-tp3 for the inner layout's; q^2 members each). The
 * count below is what tp2d.c and tp3d.c move, written out call by call,
 * for one microbatch: n is device 0's tokens (its block of b / (q d)
 * sequences, 3-D's of b / q^2, times s), w_k column k's block width of a
 * kind (hidden, attention, FFN, vocabulary: gpt_local_t.t2w), w_max the
 * widest of the q, C, A, F, V device 0's own blocks (k = 0).
 * 2-D and 2.5-D (tp2d.c):
 *  - a linear [out, in]: forward q broadcasts of X[i, k] [n, w_k] along
 *    the row and q of W[j, k] [out_j, w_k] along the column, then the bias
 *    piece's all-gather over the column (q pieces of ceil(out_j / q));
 *    backward q W broadcasts and a reduce-scatter of q open slots
 *    [n, w_max(in)] over the row (dX), q X broadcasts and a reduce-scatter
 *    of q open slots [out_j, w_max(in)] over the column (dW), the bias
 *    gradient's open pieces reduce-scattered over the column. Collectives
 *    move equal counts, so a slot is as wide as the kind's widest block and
 *    uneven blocks pad: "payload" counts the blocks' own elements;
 *  - a LayerNorm: forward 2 all-reduces of n xacc_t over the row (mean,
 *    variance), the gamma and beta pieces all-gathered over the column;
 *    backward 2 reduce-scatters (dgamma, dbeta), gamma's all-gather and 2
 *    all-reduces of n xacc_t;
 *  - the embedding: the column's token ids all-gathered (i32), the lookup
 *    reduce-scattered over the column (fp32, -0 elsewhere), the position
 *    table's pieces all-gathered; backward the ids again, the gradient
 *    all-gathered over the column and the position table's gradient
 *    reduce-scattered (open);
 *  - the head: q broadcasts of E[vocab j, features] along the column and
 *    the logits' open slots [n, w_max(V)] reduce-scattered over the row;
 *    cross-entropy's max and target logit (fp32) and sum of exps (xacc_t)
 *    over the row; backward q dlogits broadcasts along the row, q E
 *    broadcasts along the column, the dE slots [w_max(V), C]
 *    reduce-scattered over the column.
 * 3-D (tp3d.c): a linear has an input group, a weight group (tp3) and an
 * output group: tp2, tp3, tp for the first of a pair (qkv, fc1, the head)
 * and tp, tp3, tp2 for the second (dense, fc2); K its input block (w_0 of
 * its input kind), O its output block:
 *  - forward: X [n, K] all-gathered over the input group (q n K), W's
 *    pieces over the weight group (q ceil(O/q) K), the open sums [q n, O]
 *    reduce-scattered over the output group (q n O), the bias pieces
 *    all-gathered over the output layout's vector group (q^2 pieces of
 *    ceil(ceil(O/q)/q));
 *  - backward: the bias gradient's open pieces reduce-scattered over that
 *    vector group, dY all-gathered over the output group (q n O), W's
 *    pieces again, dX's open sums reduce-scattered over the input group
 *    (q n K), X all-gathered again, dW's open pieces reduce-scattered over
 *    the weight group (q ceil(O/q) K);
 *  - LayerNorm and the embedding are 2-D's with the stream's vector group
 *    for the column (q^2 pieces of ceil(ceil(R/q)/q)); the head is a first
 *    linear with E (O = V, no bias), its cross-entropy's 3 all-reduces go
 *    over tp2, and the inner layout's targets are all-gathered from the
 *    stream's over its vector group (i32, forward and backward).
 * The counters tally a group by its name without the trailing digits
 * (coll.h), so tp<i>, tp2<j> and tp3<k> all count as family "tp": rows,
 * columns and 3-D's weight groups are not told apart by measurement, only
 * their sum is (a family "tp2" is added in when there is one). 3-D's
 * vector groups are named tp-vec<i>: a family of their own, checked on its
 * own. 2.5-D's depth layers share the weights: their gradients are summed
 * over depth (with dp and cp) by the data-parallel machinery, families
 * "dp-grads" and "dp". 3-D holds each weight piece on one device of the
 * replica: no gradient is summed over a tensor-parallel axis. */

static void t2_add(t2_count_t *t, int g, coll_kind_t k, coll_dtype_t dt, double calls, double elems,
                   double payload) {
    t2_cell_t *c = &t->c[g][k][dt];
    c->calls += calls, c->elems += elems, c->payload += payload;
}

/* placement_split's largest piece: the padded piece a collective moves */
double t2_pad(int R, int q) {
    int64_t first, count;
    placement_split(R, q, 0, &first, &count);
    return (double)count;
}

/* a vector group's padded piece of R rows (tp2d.c's piece_rows): 2-D's
 * column cuts R over q, 3-D's vector groups over q, then each over q */
double t2_vpad(const t2_dims_t *D, int R) {
    const double p = t2_pad(R, D->q);
    return D->vec == G_VEC ? t2_pad((int)p, D->q) : p;
}

static double t2_width_sum(const t2_dims_t *D, int kind) {
    double w = 0;
    for (int k = 0; k < D->q; k++) w += D->lc->t2w[kind][k];
    return w;
}

/* tp2d.c's widest(): a reduce-scatter slot's width for a kind */
static double t2_widest(const t2_dims_t *D, int kind) {
    double w = 0;
    for (int k = 0; k < D->q; k++) w = D->lc->t2w[kind][k] > w ? D->lc->t2w[kind][k] : w;
    return w;
}

/* tp2d_gather_rows / scatter_rows of a block [R, w] over the vector group */
static void t2_gather_rows(t2_count_t *t, const t2_dims_t *D, int R, int w) {
    t2_add(t, D->vec, COLL_KIND_ALL_GATHER, COLL_F32, 1, D->members[D->vec] * t2_vpad(D, R) * w,
           (double)R * w);
}
static void t2_scatter_rows(t2_count_t *t, const t2_dims_t *D, int R, int w) {
    t2_add(t, D->vec, COLL_KIND_REDUCE_SCATTER, COLL_XVEC, 1, D->members[D->vec] * t2_vpad(D, R) * w,
           (double)R * w);
}

/* tp2d_linear_forward and _backward, with a bias */
static void t2_linear(t2_count_t *t, const t2_dims_t *D, int kind, int out) {
    const double q = D->q, n = D->n, K = t2_width_sum(D, kind), O = out, wm = t2_widest(D, kind);
    t2_add(t, G_TP, COLL_KIND_BROADCAST, COLL_F32, q, n * K, n * K);   /* X[i, k] */
    t2_add(t, G_TP2, COLL_KIND_BROADCAST, COLL_F32, q, O * K, O * K);  /* W[j, k] */
    t2_gather_rows(t, D, out, 1);                                      /* the bias */
    t2_add(t, G_TP2, COLL_KIND_BROADCAST, COLL_F32, q, O * K, O * K);  /* dX: W[j, m] */
    t2_add(t, G_TP, COLL_KIND_REDUCE_SCATTER, COLL_XVEC, 1, q * n * wm, n * K);
    t2_add(t, G_TP, COLL_KIND_BROADCAST, COLL_F32, q, n * K, n * K);   /* dW: X[i, k] */
    t2_add(t, G_TP2, COLL_KIND_REDUCE_SCATTER, COLL_XVEC, 1, q * O * wm, O * K);
    t2_scatter_rows(t, D, out, 1);                                     /* the bias gradient */
}

/* tp3d_linear_forward and _backward: input block K, output block O, the
 * first of a pair or the second. regather 0: without the backward's second
 * all-gathers of X and W (Colossal's Linear3D keeps the forward's). */
static void t3_linear(t2_count_t *t, const t2_dims_t *D, int K, int O, int first, int bias,
                      int regather) {
    const double q = D->q, n = D->n, nK = q * n * K, nO = q * n * O, W = q * t2_pad(O, D->q) * K;
    const int in = first ? G_TP2 : G_TP, out = first ? G_TP : G_TP2;
    t2_add(t, in, COLL_KIND_ALL_GATHER, COLL_F32, 1, nK, nK);              /* X */
    t2_add(t, G_TP3, COLL_KIND_ALL_GATHER, COLL_F32, 1, W, (double)O * K); /* W's pieces */
    t2_add(t, out, COLL_KIND_REDUCE_SCATTER, COLL_XVEC, 1, nO, nO);        /* Y's open sums */
    if (bias) t2_gather_rows(t, D, O, 1), t2_scatter_rows(t, D, O, 1);     /* bias, its gradient */
    t2_add(t, out, COLL_KIND_ALL_GATHER, COLL_F32, 1, nO, nO);             /* dY */
    if (regather) t2_add(t, G_TP3, COLL_KIND_ALL_GATHER, COLL_F32, 1, W, (double)O * K);
    t2_add(t, in, COLL_KIND_REDUCE_SCATTER, COLL_XVEC, 1, nK, nK);         /* dX */
    if (regather) t2_add(t, in, COLL_KIND_ALL_GATHER, COLL_F32, 1, nK, nK);
    t2_add(t, G_TP3, COLL_KIND_REDUCE_SCATTER, COLL_XVEC, 1, W, (double)O * K); /* dW's pieces */
}

static void t2_layernorm(t2_count_t *t, const t2_dims_t *D) {
    t2_add(t, G_TP, COLL_KIND_ALL_REDUCE, COLL_XACC, 4, 4 * D->n, 4 * D->n); /* 2 forward, 2 backward */
    for (int k = 0; k < 3; k++) t2_gather_rows(t, D, D->C, 1); /* gamma, beta; gamma again */
    for (int k = 0; k < 2; k++) t2_scatter_rows(t, D, D->C, 1); /* dgamma, dbeta */
}

static void t2_layer(t2_count_t *t, const t2_dims_t *D, int regather) {
    t2_layernorm(t, D);
    if (t2_three(D)) {
        t3_linear(t, D, D->C, 3 * D->A, 1, 1, regather); /* qkv */
        t3_linear(t, D, D->A, D->C, 0, 1, regather);     /* the attention projection */
    } else {
        t2_linear(t, D, TP2D_HIDDEN, 3 * D->A);
        t2_linear(t, D, TP2D_HEADS, D->C);
    }
    t2_layernorm(t, D);
    if (t2_three(D)) {
        t3_linear(t, D, D->C, D->F, 1, 1, regather); /* fc1 */
        t3_linear(t, D, D->F, D->C, 0, 1, regather); /* fc2 */
    } else {
        t2_linear(t, D, TP2D_HIDDEN, D->F);
        t2_linear(t, D, TP2D_FFN, D->C);
    }
}

static void t2_embedding(t2_count_t *t, const t2_dims_t *D) {
    const double mv = D->members[D->vec], n = D->n, C = D->C;
    t2_add(t, D->vec, COLL_KIND_ALL_GATHER, COLL_I32, 2, 2 * mv * n, 2 * mv * n);     /* ids, twice */
    t2_add(t, D->vec, COLL_KIND_REDUCE_SCATTER, COLL_F32, 1, mv * n * C, mv * n * C); /* lookup */
    t2_gather_rows(t, D, D->T, D->C);                                              /* positions */
    t2_add(t, D->vec, COLL_KIND_ALL_GATHER, COLL_F32, 1, mv * n * C, mv * n * C);     /* gradient */
    t2_scatter_rows(t, D, D->T, D->C);                           /* the position table's gradient */
}

static void t2_head(t2_count_t *t, const t2_dims_t *D, int regather) {
    const double q = D->q, n = D->n, C = D->C, V = t2_width_sum(D, TP2D_VOCAB);
    t2_layernorm(t, D); /* the final LayerNorm */
    if (t2_three(D)) {
        t3_linear(t, D, D->C, D->V, 1, 0, regather);
        t2_add(t, G_TP2, COLL_KIND_ALL_REDUCE, COLL_F32, 2, 2 * n, 2 * n); /* CE max, target logit */
        t2_add(t, G_TP2, COLL_KIND_ALL_REDUCE, COLL_XACC, 1, n, n);        /* CE sum of exps */
        const double mv = D->members[D->vec];                      /* the inner layout's targets */
        t2_add(t, D->vec, COLL_KIND_ALL_GATHER, COLL_I32, 2, 2 * mv * n, 2 * mv * n);
        return;
    }
    const double wv = t2_widest(D, TP2D_VOCAB);
    t2_add(t, G_TP2, COLL_KIND_BROADCAST, COLL_F32, 2 * q, 2 * V * C, 2 * V * C); /* E, twice */
    t2_add(t, G_TP, COLL_KIND_REDUCE_SCATTER, COLL_XVEC, 1, q * n * wv, n * V);   /* logits */
    t2_add(t, G_TP, COLL_KIND_ALL_REDUCE, COLL_F32, 2, 2 * n, 2 * n); /* CE max, target logit */
    t2_add(t, G_TP, COLL_KIND_ALL_REDUCE, COLL_XACC, 1, n, n);        /* CE sum of exps */
    t2_add(t, G_TP, COLL_KIND_BROADCAST, COLL_F32, q, n * V, n * V);  /* dlogits */
    t2_add(t, G_TP2, COLL_KIND_REDUCE_SCATTER, COLL_XVEC, 1, q * wv * C, V * C); /* dE */
}

/* a += k * b */
static void t2_scale_add(t2_count_t *a, const t2_count_t *b, double k) {
    for (int g = 0; g < T2_NG; g++)
        for (int i = 0; i < COLL_NKINDS; i++)
            for (int d = 0; d < COLL_NDTYPES; d++) {
                const t2_cell_t *x = &b->c[g][i][d];
                t2_add(a, g, (coll_kind_t)i, (coll_dtype_t)d, k * x->calls, k * x->elems, k * x->payload);
            }
}

void t2_derive(const t2_dims_t *D, int L, int e, int hd, int m, int regather,
               t2_count_t *layer, t2_count_t *outer, t2_count_t *step) {
    memset(layer, 0, sizeof *layer), memset(outer, 0, sizeof *outer), memset(step, 0, sizeof *step);
    t2_layer(layer, D, regather);
    if (e) t2_embedding(outer, D);
    if (hd) t2_head(outer, D, regather);
    t2_scale_add(step, layer, (double)L * m);
    t2_scale_add(step, outer, m);
}

t2_sum_t t2_sum(const t2_count_t *t, const t2_dims_t *D, int kind, unsigned gmask) {
    t2_sum_t s = {0, 0, 0, 0, 0, 0};
    for (int g = 0; g < T2_NG; g++)
        for (int k = 0; k < COLL_NKINDS; k++)
            for (int d = 0; d < COLL_NDTYPES; d++) {
                const t2_cell_t *x = &t->c[g][k][d];
                if (!(gmask >> g & 1u) || (kind >= 0 && k != kind) || !x->calls) continue;
                const double es = (double)coll_dtype_size((coll_dtype_t)d);
                const double fac = coll_busbw_factor((coll_kind_t)k, D->members[g]);
                s.calls += x->calls, s.elems += x->elems, s.bytes += x->elems * es;
                s.bus += x->elems * es * fac, s.bus_elems += x->elems * fac;
                s.payload_bytes += x->payload * es;
            }
    return s;
}

/* Device 0's dims: its blocks (gpt_local_dims at coordinate 0) and
 * tokens per microbatch. */
int t2_dims(const run_report_t *run, gpt_local_t *lc, t2_dims_t *D) {
    const pconfig_t *pc = &run->pc;
    const model_config_t *c = &run->cfg;
    int sub[3];
    pconfig_tp_sub(pc, sub);
    perr_t err;
    if (gpt_local_dims(c, sub[0], 0, 0, pconfig_tp_opts(pc), lc, &err) || lc->t2q != sub[0]) return -1;
    const int q = sub[0], per_rank = pc->global_batch / (pc->dp > 0 ? pc->dp : 1);
    const int m = pc->accum_degree > 0 ? pc->accum_degree : 1, three = pc->tp_mode == PC_TP_3D;
    *D = (t2_dims_t){pc->tp_mode, q, pc->tp_mode == PC_TP_25D ? sub[2] : 1,
                     (double)(per_rank / m / pconfig_tp_batch_blocks(pc)) * lc->seq_held,
                     c->seq_length, lc->hid, lc->attn, lc->ffn, lc->t2w[TP2D_VOCAB][0],
                     three ? G_VEC : G_TP2, {q, q, three ? q : 0, three ? q * q : 0}, lc};
    return 0;
}
