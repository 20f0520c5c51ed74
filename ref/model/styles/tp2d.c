/* tp2d.c - Colossal-AI's 2-D tensor parallelism (Optimus: SUMMA on a q x q
 * grid) and 2.5-D (Tesseract: d such grids, one per depth layer), with
 * I1-I2 arithmetic (tp2d.h).
 *
 * Rank (row i, column j) holds the stream as Colossal does, [b/q, s, h/q]:
 * the sequences of block i (2.5-D: block dep*q + i) and the features of
 * column j. A linear's weight W [out, in] is cut over both: rank (i, j)
 * holds W[out block j, in block i], so
 *
 *   Y[i, j] = sum_k X[i, k] . W[j, k]^T                         (AB)
 *
 * runs as SUMMA in q steps: step k broadcasts X[i, k] along row i and
 * W[j, k] along column j. parity's steps add the tile partials of each
 * product into ONE open exact accumulator, rounded once after the last
 * step: the golden run's sum over every input tile, grouped by block,
 * which exactness makes the same bits. The backward's two contractions
 * are the transposed forms, each a broadcast and an exact reduce (the q
 * reduces of a step loop fused into one reduce-scatter of open sums):
 *
 *   dX[i, m] = sum_j dY[i, j] . W[j, m]     (ABT: W along the column,
 *                                            reduce-scatter along the row)
 *   dW[j, k] = sum_r dY[r, j]^T . X[r, k]   (ATB: X along the row,
 *                                            reduce-scatter along the column)
 *
 * Vectors (biases, LayerNorm) are cut out/q^2: rank (i, j) holds piece i
 * of column j's block, gathered over the column for the forward, their
 * gradients (column sums over the rank's sequences) reduce-scattered over
 * it, exact. LayerNorm's statistics are open sums completed over the row
 * (norm_tp2d.c).
 * The word embedding E [V, C] is held as E[vocab block i, features j]:
 * the lookup gathers the column's token ids, looks up the rows held (-0
 * elsewhere) and reduce-scatters the sum over the column; the tied head's
 * logits [i, vocab block j] = sum_k X[i, k] . E[j, k]^T (ABT), and its
 * cross-entropy reduces over the row as 1-D's does over tp.
 */
#include "model/gpt.h"
#include "model/styles/tp2d.h"

#include <string.h>

#include "parity/coll.h"
#include "parity/pconfig.h"
#include "model/styles/tp.h"

static group_t *row_group(const gpt_t *g) { return g->shard.tp_group; }
static group_t *col_group(const gpt_t *g) { return g->shard.tp_col_group; }
static int q_of(const gpt_t *g) { return g->local.t2q; }
static int col_of(const gpt_t *g) { return g->shard.tp_rank; }
static int row_of(const gpt_t *g) { return g->shard.tp_row; }
static int width(const gpt_t *g, int kind, int k) { return g->local.t2w[kind][k]; }

/* The widest block of a kind over the columns: a reduce-scatter's slots
 * are this wide (collectives move equal counts; uneven blocks pad). */
static size_t widest(const gpt_t *g, int kind) {
    int w = 0;
    for (int k = 0; k < q_of(g); k++) w = width(g, kind, k) > w ? width(g, kind, k) : w;
    return (size_t)w;
}

static int max_width(const gpt_local_t *lc) {
    int w = 1;
    for (int t = 0; t < 4; t++)
        for (int k = 0; k < lc->t2q; k++) w = lc->t2w[t][k] > w ? lc->t2w[t][k] : w;
    return w;
}

void tp2d_layout_scratch(gpt_scratch_t *S, const model_config_t *c, const gpt_local_t *lc,
                         size_t n, carver_t *cv) {
    S->tp2d = NULL;
    if (!lc->t2q) return; /* not a 2-D, 2.5-D or 3-D layout */
    const size_t q = (size_t)lc->t2q, w = (size_t)max_width(lc), T = (size_t)c->seq_length;
    const size_t pad_rows = (T > 3 * w ? T : 3 * w) / q + 1; /* a sharded vector's piece */
    size_t slot = 3 * n * w; /* 2-D: [n, w] slots; 3-D: [q*n, 3w] in q of them */
    if (3 * w * w > slot) slot = 3 * w * w;
    if (pad_rows * w > slot) slot = pad_rows * w;
    tp2d_scratch_t measure, *sc = carve(cv, sizeof *sc);
    S->tp2d = sc;
    if (!sc) sc = &measure; /* measuring */
    sc->slot = slot;
    sc->open = carve(cv, acc_storage_bytes(n * 3 * w > 3 * w * w ? n * 3 * w : 3 * w * w));
    sc->slots = carve(cv, acc_storage_bytes(q * slot));
    sc->a = CARVE_F(cv, q * n * 3 * w);
    sc->b = CARVE_F(cv, 3 * w * w);
    sc->vec = CARVE_F(cv, q * pad_rows * w);
    sc->whole = CARVE_F(cv, (T > 3 * w ? T : 3 * w) * w);
    /* a vector group's rows of every block: 2-D q, 3-D q x q blocks */
    sc->full = CARVE_F(cv, (size_t)lc->t2blocks * n * w);
    sc->ids = (int32_t *)carve(cv, (q * q + 1) * n * sizeof(int32_t)); /* 3-D: q*q blocks + one */
}

/* The block broadcast from group member `root`: mine when this rank is
 * the root (a broadcast reads the root's buffer only), else into buf. */
static const float *bcast(group_t *grp, int me, int root, const float *mine, float *buf,
                          size_t count) {
    float *at = me == root ? (float *)(uintptr_t)mine : buf;
    coll_broadcast(grp, at, count, COLL_F32, root);
    return at;
}

static acc_t open_over(void *storage, size_t n) {
    acc_t a;
    acc_init_with(&a, n, storage);
    acc_zero(&a);
    return a;
}

/* ---- vectors cut out/q^2 -------------------------------------------------
 * A column block of R rows of w values each (a bias or LayerNorm vector:
 * w = 1; the position table: R = T positions of the block's features) is
 * cut by rows over the ranks of a vector group (tp2d.h): 2-D's column,
 * piece r holding rows placement_split(R, q, r); 3-D's sequence blocks,
 * pieces nested over two axes. Collectives move equal counts, so pieces
 * travel padded to the largest piece's rows. */

tp2d_vgroup_t tp2d_vgroup(const gpt_t *g, int inner) {
    const gpt_shard_t *sh = &g->shard;
    if (sh->tp_mode != PC_TP_3D) return (tp2d_vgroup_t){sh->tp_col_group, sh->tp_row, g->local.t2q, 1};
    const int q = g->local.t2q, other = inner ? sh->tp_rank : sh->tp_row;
    return (tp2d_vgroup_t){sh->tp_vec_group[inner], sh->tp_dep * q + other, q, q};
}

/* Piece `r`'s rows of R: split over q1, then (3-D) each over q2. */
static void piece_rows(const tp2d_vgroup_t *v, int R, int r, int64_t *first, int64_t *count) {
    placement_split(R, v->q1, r / v->q2, first, count);
    if (v->q2 == 1) return;
    int64_t f2, n2;
    placement_split(*count, v->q2, r % v->q2, &f2, &n2);
    *first += f2, *count = n2;
}

static size_t pad_rows(const tp2d_vgroup_t *v, int R) {
    int64_t first, count;
    piece_rows(v, R, 0, &first, &count); /* piece 0 is a largest (placement_split) */
    return (size_t)count;
}

const float *tp2d_gather_rows(gpt_t *g, const tp2d_vgroup_t *v, const float *piece, int R, int w) {
    const int n = v->q1 * v->q2;
    const size_t pad = pad_rows(v, R) * (size_t)w;
    float *parts = g->scratch.tp2d->vec, *whole = g->scratch.tp2d->whole;
    int64_t first, count;
    piece_rows(v, R, v->me, &first, &count);
    memcpy(parts + (size_t)v->me * pad, piece, (size_t)count * w * sizeof(float));
    coll_all_gather(v->grp, parts + (size_t)v->me * pad, parts, pad, COLL_F32);
    for (int r = 0; r < n; r++) {
        piece_rows(v, R, r, &first, &count);
        memcpy(whole + (size_t)first * w, parts + (size_t)r * pad, (size_t)count * w * sizeof(float));
    }
    return whole;
}

/* The open partial sums of a column block [R, w], in the padded pieces'
 * layout (slot r: piece r's rows), zeroed. */
static acc_t rows_partial(gpt_t *g, const tp2d_vgroup_t *v, int R, int w) {
    return open_over(g->scratch.tp2d->slots, (size_t)(v->q1 * v->q2) * pad_rows(v, R) * (size_t)w);
}

/* Where row `row` of the block lies in rows_partial's layout. */
static size_t rows_at(const tp2d_vgroup_t *v, int R, int w, int row) {
    for (int r = 0; r < v->q1 * v->q2; r++) {
        int64_t first, count;
        piece_rows(v, R, r, &first, &count);
        if (row < first + count) return ((size_t)r * pad_rows(v, R) + (size_t)(row - first)) * w;
    }
    return 0;
}

/* Column sums over n rows of y [n, R] into the partial of a vector [R]. */
static void add_column_sums(const tp2d_vgroup_t *v, acc_t *part, const float *y, int n, int R) {
    for (int r = 0; r < v->q1 * v->q2; r++) {
        int64_t first, count;
        piece_rows(v, R, r, &first, &count);
        if (count) acc_add_rows(part, (size_t)r * pad_rows(v, R), y + first, n, (int)count, R);
    }
}

/* grad (this rank's piece) += the exact sum over the group of part. */
static void scatter_rows(const tp2d_vgroup_t *v, acc_t *part, int R, int w, acc_t *grad) {
    const size_t pad = pad_rows(v, R) * (size_t)w;
    int64_t first, count;
    piece_rows(v, R, v->me, &first, &count);
    coll_reduce_scatter_open(v->grp, &part->x, 0, &part->x, (size_t)v->me * pad, pad);
    xvec_merge_range(&grad->x, 0, &part->x, (size_t)v->me * pad, (size_t)count * w);
    acc_free(part);
}

void tp2d_vector_grad(gpt_t *g, const tp2d_vgroup_t *v, const float *dy, int n, int R, acc_t *grad) {
    acc_t part = rows_partial(g, v, R, 1);
    add_column_sums(v, &part, dy, n, R);
    scatter_rows(v, &part, R, 1, grad);
}

void tp2d_rows_grad(gpt_t *g, const tp2d_vgroup_t *v, const acc_t *whole, int R, int w, acc_t *grad) {
    acc_t part = rows_partial(g, v, R, w);
    for (int r = 0; r < v->q1 * v->q2; r++) {
        int64_t first, count;
        piece_rows(v, R, r, &first, &count);
        xvec_merge_range(&part.x, (size_t)r * pad_rows(v, R) * w, &whole->x, (size_t)first * w,
                         (size_t)count * w);
    }
    scatter_rows(v, &part, R, w, grad);
}

/* ---- linears --------------------------------------------------------------- */

void tp2d_linear_forward(gpt_t *g, const pass_t *p, float *y, const float *x, const float *w,
                         const float *b, int in_kind, int n_out, linear_tiles_t t) {
    const int q = q_of(g), n = p->n;
    tp2d_scratch_t *S = g->scratch.tp2d;
    const unsigned br = g->shard.broken;
    const int lowp = (br & GPT_BROKEN_TP2D_SUMMA_LOWP) != 0;
    const int rounded = lowp || (br & GPT_BROKEN_TP2D_SUMMA_ROUNDED) != 0;
    const size_t ny = (size_t)n * n_out;
    acc_t open = open_over(S->open, ny);
    for (int k = 0; k < q; k++) {
        const int wk = width(g, in_kind, k);
        const float *xk = bcast(row_group(g), col_of(g), k, x, S->a, (size_t)n * wk);
        const float *Wk = bcast(col_group(g), row_of(g), k, w, S->b, (size_t)n_out * wk);
        if (rounded) { /* the broken variants: each step's product rounded, fp32 sums;
                        * LOWP: the product and the running sum rounded to S */
            acc_t step = open_over(S->slots, ny);
            contract_acc(CONTRACT_NT, n, n_out, wk, t.tokens, t.out, t.in, xk, wk, Wk, wk, &step, 0,
                         (size_t)n_out, &g->ws);
            float *part = S->full;
            acc_round(&step, k ? part : y);
            acc_free(&step);
            if (lowp) act_round(g, k ? part : y, ny);
            for (size_t e = 0; k && e < ny; e++) y[e] = y[e] + part[e];
            if (lowp && k) act_round(g, y, ny);
            continue;
        }
        contract_acc(CONTRACT_NT, n, n_out, wk, t.tokens, t.out, t.in, xk, wk, Wk, wk, &open, 0,
                     (size_t)n_out, &g->ws);
    }
    if (!rounded) acc_round(&open, y);
    acc_free(&open);
    const tp2d_vgroup_t v = tp2d_vgroup(g, 0);
    if (b) linear_add_bias(y, tp2d_gather_rows(g, &v, b, n_out, 1), n, n_out);
    act_round(g, y, ny); /* 1-D's point: the exact sum, its bias, then S */
}

void tp2d_linear_backward(gpt_t *g, const pass_t *p, float *dx, acc_t *dw, acc_t *db,
                          const float *dy, const float *x, const float *w, int in_kind, int n_out,
                          linear_tiles_t t) {
    const int q = q_of(g), n = p->n, me_c = col_of(g), me_r = row_of(g);
    tp2d_scratch_t *S = g->scratch.tp2d;
    size_t slot = (size_t)n * widest(g, in_kind);
    /* dX (ABT): slot m holds this rank's part of dX[i, m] */
    acc_t slots = open_over(S->slots, (size_t)q * slot);
    for (int m = 0; m < q; m++) {
        const int wm = width(g, in_kind, m);
        const float *Wm = bcast(col_group(g), me_r, m, w, S->b, (size_t)n_out * wm);
        contract_acc(CONTRACT_NN, n, wm, n_out, t.tokens, t.in, t.out, dy, n_out, Wm, wm, &slots,
                     (size_t)m * slot, (size_t)wm, &g->ws);
    }
    coll_reduce_scatter_open(row_group(g), &slots.x, 0, &slots.x, (size_t)me_c * slot, slot);
    acc_round_range(&slots, (size_t)me_c * slot, (size_t)n * width(g, in_kind, me_c), dx);
    acc_free(&slots);
    act_round(g, dx, (size_t)n * width(g, in_kind, me_c)); /* after the completion, as 1-D */
    /* dW (ATB): slot k holds this rank's sequences' part of dW[j, k] */
    slot = (size_t)n_out * widest(g, in_kind);
    slots = open_over(S->slots, (size_t)q * slot);
    for (int k = 0; k < q; k++) {
        const int wk = width(g, in_kind, k);
        const float *xk = bcast(row_group(g), me_c, k, x, S->a, (size_t)n * wk);
        contract_acc(CONTRACT_TN, n_out, wk, n, t.out, t.in, t.tokens, dy, n_out, xk, wk, &slots,
                     (size_t)k * slot, (size_t)wk, &g->ws);
    }
    coll_reduce_scatter_open(col_group(g), &slots.x, 0, &slots.x, (size_t)me_r * slot, slot);
    xvec_merge_range(&dw->x, 0, &slots.x, (size_t)me_r * slot, (size_t)n_out * width(g, in_kind, me_r));
    acc_free(&slots);
    const tp2d_vgroup_t v = tp2d_vgroup(g, 0);
    if (db) tp2d_vector_grad(g, &v, dy, n, n_out, db);
}

/* ---- the embedding and the head ---------------------------------------- */

/* Every sequence's ids of the stream's vector group's blocks (2-D: the
 * column's rows; 3-D: the blocks of the stream's features), [n][ids] in
 * the group's order, which is the blocks' order in the microbatch. */
static const int32_t *group_ids(gpt_t *g, const tp2d_vgroup_t *v, const int32_t *tokens, int n) {
    int32_t *ids = g->scratch.tp2d->ids;
    memcpy(ids + (size_t)v->me * n, tokens, (size_t)n * sizeof(int32_t));
    coll_all_gather(v->grp, ids + (size_t)v->me * n, ids, (size_t)n, COLL_I32);
    return ids;
}

void tp2d_embedding_lookup(gpt_t *g, const pass_t *p, float *x, const int32_t *tokens,
                           const float *wte) {
    const int n = p->n, w = g->local.hid;
    const tp2d_vgroup_t v = tp2d_vgroup(g, 0);
    const int32_t *ids = group_ids(g, &v, tokens, n);
    float *looked = g->scratch.tp2d->full;
    embedding_lookup(looked, ids, v.q1 * v.q2 * n, w, wte, g->local.emb_vocab0, g->local.emb_vocab);
    coll_reduce_scatter(v.grp, looked, x, (size_t)n * w, COLL_F32, COLL_SUM);
}

void tp2d_embedding_positions(gpt_t *g, const pass_t *p, float *x, const float *wpe_piece) {
    const int w = g->local.hid, T = p->T;
    const tp2d_vgroup_t v = tp2d_vgroup(g, 0);
    /* the positions the slot holds: all T, or context parallelism's runs */
    const float *wpe = tp2d_gather_rows(g, &v, wpe_piece, T, w);
    for (int s = 0, at = 0; s < p->n_seq; s++)
        for (int k = 0; k < p->runs.n; at += p->runs.len[k++])
            embedding_add_positions(x + (size_t)at * w, 1, p->runs.len[k], p->runs.t0[k], w, wpe);
}

void tp2d_embedding_backward(gpt_t *g, const pass_t *p, acc_t *dwte, acc_t *dwpe, const float *d,
                             const int32_t *tokens) {
    const int n = p->n, w = g->local.hid, T = p->T;
    const tp2d_vgroup_t v = tp2d_vgroup(g, 0);
    const int32_t *ids = group_ids(g, &v, tokens, n);
    float *full = g->scratch.tp2d->full;
    memcpy(full + (size_t)v.me * n * w, d, (size_t)n * w * sizeof(float));
    coll_all_gather(v.grp, full + (size_t)v.me * n * w, full, (size_t)n * w, COLL_F32);
    const int v0 = g->local.emb_vocab0, nv = g->local.emb_vocab;
    for (size_t i = 0; i < (size_t)(v.q1 * v.q2) * n; i++) {
        const int r = ids[i] - v0;
        if (r >= 0 && r < nv) acc_add(dwte, (size_t)r * w, full + i * w, (size_t)w);
    }
    acc_t part = rows_partial(g, &v, T, w);
    for (int s = 0, at = 0; s < p->n_seq; s++)
        for (int k = 0; k < p->runs.n; k++)
            for (int t = p->runs.t0[k]; t < p->runs.t0[k] + p->runs.len[k]; t++, at++)
                acc_add(&part, rows_at(&v, T, w, t), d + (size_t)at * w, (size_t)w);
    scatter_rows(&v, &part, T, w, dwpe);
}

void tp2d_head_logits(gpt_t *g, const pass_t *p, float *logits, const float *x, const float *e) {
    const int q = q_of(g), n = p->n, me_c = col_of(g), w = g->local.hid;
    tp2d_scratch_t *S = g->scratch.tp2d;
    const int tf = g->cfg.tile_features;
    const size_t slot = (size_t)n * widest(g, TP2D_VOCAB);
    acc_t slots = open_over(S->slots, (size_t)q * slot);
    for (int j = 0; j < q; j++) { /* E[vocab j, features mine] from row j */
        const int vj = width(g, TP2D_VOCAB, j);
        const float *Ej = bcast(col_group(g), row_of(g), j, e, S->b, (size_t)vj * w);
        contract_acc(CONTRACT_NT, n, vj, w, g->cfg.tile_tokens, tf, tf, x, w, Ej, w, &slots,
                     (size_t)j * slot, (size_t)vj, &g->ws);
    }
    coll_reduce_scatter_open(row_group(g), &slots.x, 0, &slots.x, (size_t)me_c * slot, slot);
    acc_round_range(&slots, (size_t)me_c * slot, (size_t)n * width(g, TP2D_VOCAB, me_c), logits);
    acc_free(&slots);
}

void tp2d_head_backward(gpt_t *g, const pass_t *p, float *dx, acc_t *de, const float *dlogits,
                        const float *x, const float *e) {
    const int q = q_of(g), n = p->n, me_r = row_of(g), w = g->local.hid;
    tp2d_scratch_t *S = g->scratch.tp2d;
    const int tf = g->cfg.tile_features, tt = g->cfg.tile_tokens;
    const size_t slot = widest(g, TP2D_VOCAB) * (size_t)w;
    acc_t open = open_over(S->open, (size_t)n * w);
    acc_t slots = open_over(S->slots, (size_t)q * slot);
    for (int j = 0; j < q; j++) {
        const int vj = width(g, TP2D_VOCAB, j);
        const float *dLj = bcast(row_group(g), col_of(g), j, dlogits, S->a, (size_t)n * vj);
        const float *Ej = bcast(col_group(g), me_r, j, e, S->b, (size_t)vj * w);
        /* dX[i, mine] += dL[i, j] . E[j, mine] (AB) */
        contract_acc(CONTRACT_NN, n, w, vj, tt, tf, tf, dLj, vj, Ej, w, &open, 0, (size_t)w, &g->ws);
        /* dE[j, mine] += dL[i, j]^T . X[i, mine], completed over the column (ATB) */
        contract_acc(CONTRACT_TN, vj, w, n, tf, tf, tt, dLj, vj, x, w, &slots, (size_t)j * slot,
                     (size_t)w, &g->ws);
    }
    acc_round(&open, dx);
    acc_free(&open);
    act_round(g, dx, (size_t)n * w); /* the head's input gradient, as 1-D's colpar_backward */
    coll_reduce_scatter_open(col_group(g), &slots.x, 0, &slots.x, (size_t)me_r * slot, slot);
    xvec_merge_range(&de->x, 0, &slots.x, (size_t)me_r * slot, (size_t)width(g, TP2D_VOCAB, me_r) * w);
    acc_free(&slots);
}
