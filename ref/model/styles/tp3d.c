/* tp3d.c - Colossal-AI's 3-D tensor parallelism (Agarwal et al.'s 3-D
 * matrix product on a q x q x q cube, the legacy `parallel_3d` layers),
 * with I1-I2 arithmetic (tp3d.h).
 *
 * Rank (a, b, c) = (tp, tp2, tp3) coordinates. The residual stream
 * ("layout A") holds the sequences of block c*q + b and the features of
 * block a; the inner layout B of a layer (qkv, attention, fc1, GeLU)
 * holds the sequences of block c*q + a and the features of block b. A
 * linear has an input group, a weight group and an output group:
 *
 *   first of a pair (qkv, fc1; A -> B): input tp2, weight tp3, output tp
 *   second (dense, fc2; B -> A):         input tp,  weight tp3, output tp2
 *
 * (the input and output groups swap after each linear). Its weight
 * W [out, in] is held as W[out block (input coordinate), piece (weight
 * coordinate); in block (output coordinate)]. The forward all-gathers the
 * input over the input group (the sequences of block c), the weight over
 * the weight group (its output block whole), contracts those tiles into
 * an open sum and reduce-scatters the open sums over the output group (its
 * sequences' blocks), rounding once: the golden run's sum over every input
 * tile, grouped by the output group's ranks. The backward gathers the
 * output gradient over the output group; dX's open sums reduce-scatter
 * over the input group, dW's over the weight group (pieces). The tied head
 * is a first linear with E (vocabulary over tp2 then tp3, features over
 * tp); LayerNorm, the embedding and the vectors are tp2d.c's with the
 * stream's sequence blocks for the vector group.
 */
#include "model/gpt.h"
#include "model/styles/tp3d.h"

#include <string.h>

#include "parity/coll.h"
#include "model/styles/tp2d.h"

/* A linear's three groups and this rank's coordinate along each. */
typedef struct {
    group_t *in, *wt, *out;
    int in_me, wt_me, out_me;
} groups_t;

static groups_t linear_groups(const gpt_t *g, int first) {
    const gpt_shard_t *s = &g->shard;
    /* the broken variant: the second linear keeps the first's groups */
    if (!first && (s->broken & GPT_BROKEN_TP3D_NO_SWAP)) first = 1;
    if (first)
        return (groups_t){s->tp_col_group, s->tp_dep_group, s->tp_group, s->tp_row, s->tp_dep,
                          s->tp_rank};
    return (groups_t){s->tp_group, s->tp_dep_group, s->tp_col_group, s->tp_rank, s->tp_dep,
                      s->tp_row};
}

static acc_t open_over(void *storage, size_t n) {
    acc_t a;
    acc_init_with(&a, n, storage);
    acc_zero(&a);
    return a;
}

/* x [n, w] of every rank of grp, in group order: [q*n, w] in buf. */
static const float *gather_rows_of(group_t *grp, int me, const float *x, size_t count, float *buf) {
    memcpy(buf + (size_t)me * count, x, count * sizeof(float));
    coll_all_gather(grp, buf + (size_t)me * count, buf, count, COLL_F32);
    return buf;
}

/* The weight's output block whole: its pieces gathered over the weight group. */
static const float *gather_weight(gpt_t *g, const groups_t *G, const float *w, int n_out, int in_w) {
    const int q = g->local.t2q;
    const tp2d_vgroup_t v = {G->wt, G->wt_me, q, 1};
    memcpy(g->scratch.tp2d->b, tp2d_gather_rows(g, &v, w, n_out, in_w),
           (size_t)n_out * in_w * sizeof(float));
    return g->scratch.tp2d->b;
}

/* out [n, N] = this rank's block of rows of round(A.B) [q*n, N] (K the
 * contraction), its open sums completed over grp (member me holds rows
 * me*n ..). */
static void contract_scatter(gpt_t *g, contract_form_t form, int n, int N, int K, int tm, int tn,
                             int tk, const float *A, int lda, const float *B, int ldb, group_t *grp,
                             int me, float *out) {
    const int q = g->local.t2q;
    acc_t open = open_over(g->scratch.tp2d->slots, (size_t)q * n * N);
    contract_acc(form, q * n, N, K, tm, tn, tk, A, lda, B, ldb, &open, 0, (size_t)N, &g->ws);
    const size_t mine = (size_t)n * N;
    coll_reduce_scatter_open(grp, &open.x, 0, &open.x, (size_t)me * mine, mine);
    acc_round_range(&open, (size_t)me * mine, mine, out);
    acc_free(&open);
}

void tp3d_linear_forward(gpt_t *g, const pass_t *p, float *y, const float *x, const float *w,
                         const float *b, int in_kind, int first, int n_out, linear_tiles_t t) {
    const int n = p->n;
    const groups_t G = linear_groups(g, first);
    const int in_w = g->local.t2w[in_kind][G.out_me];
    tp2d_scratch_t *S = g->scratch.tp2d;
    const float *xg = gather_rows_of(G.in, G.in_me, x, (size_t)n * in_w, S->full);
    const float *wg = gather_weight(g, &G, w, n_out, in_w);
    contract_scatter(g, CONTRACT_NT, n, n_out, in_w, t.tokens, t.out, t.in, xg, in_w, wg, in_w, G.out,
                     G.out_me, y);
    if (b) { /* the output layout's vector */
        const tp2d_vgroup_t v = tp2d_vgroup(g, first);
        linear_add_bias(y, tp2d_gather_rows(g, &v, b, n_out, 1), n, n_out);
    }
    act_round(g, y, (size_t)n * n_out); /* 1-D's point: the exact sum, its bias, then S */
}

void tp3d_linear_backward(gpt_t *g, const pass_t *p, float *dx, acc_t *dw, acc_t *db,
                          const float *dy, const float *x, const float *w, int in_kind, int first,
                          int n_out, linear_tiles_t t) {
    const int q = g->local.t2q, n = p->n;
    const groups_t G = linear_groups(g, first);
    const int in_w = g->local.t2w[in_kind][G.out_me];
    tp2d_scratch_t *S = g->scratch.tp2d;
    if (db) {
        const tp2d_vgroup_t v = tp2d_vgroup(g, first);
        tp2d_vector_grad(g, &v, dy, n, n_out, db);
    }
    /* the output gradient of the sequences of block c, in the a buffer's room */
    float *dyg = S->a;
    gather_rows_of(G.out, G.out_me, dy, (size_t)n * n_out, dyg);
    const float *wg = gather_weight(g, &G, w, n_out, in_w);
    contract_scatter(g, CONTRACT_NN, n, in_w, n_out, t.tokens, t.in, t.out, dyg, n_out, wg, in_w, G.in,
                     G.in_me, dx);
    const size_t mine = (size_t)n * in_w;
    act_round(g, dx, mine); /* after the completion, as 1-D */
    /* dW's output block over the sequences of block c, then its pieces
     * completed over the weight group */
    const float *xg = gather_rows_of(G.in, G.in_me, x, mine, S->full);
    acc_t whole = open_over(S->open, (size_t)n_out * in_w);
    contract_acc(CONTRACT_TN, n_out, in_w, q * n, t.out, t.in, t.tokens, dyg, n_out, xg, in_w, &whole,
                 0, (size_t)in_w, &g->ws);
    const tp2d_vgroup_t v = {G.wt, G.wt_me, q, 1};
    tp2d_rows_grad(g, &v, &whole, n_out, in_w, dw);
    acc_free(&whole);
}

const int32_t *tp3d_inner_targets(gpt_t *g, const pass_t *p, const int32_t *targets) {
    const int n = p->n, q = g->local.t2q;
    const tp2d_vgroup_t v = tp2d_vgroup(g, 0); /* the stream's blocks, c*q + b */
    int32_t *all = g->scratch.tp2d->ids;
    memcpy(all + (size_t)v.me * n, targets, (size_t)n * sizeof(int32_t));
    coll_all_gather(v.grp, all + (size_t)v.me * n, all, (size_t)n, COLL_I32);
    int32_t *mine = g->scratch.tp2d->ids + (size_t)q * q * n; /* block c*q + a */
    memcpy(mine, all + (size_t)(g->shard.tp_dep * q + g->shard.tp_rank) * n, (size_t)n * sizeof(int32_t));
    return mine;
}
