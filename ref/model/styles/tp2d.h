/* tp2d.h - Colossal-AI's 2-D (SUMMA) and 2.5-D tensor parallelism in the
 * units' operations (tp2d.c). Every function is called by all ranks of
 * the replica's row and column groups (gpt_shard_t.tp_group,
 * tp_col_group) in the same order. Widths come from the column blocks
 * (gpt_local_t.t2w); in_kind is TP2D_HIDDEN (qkv, fc1), TP2D_HEADS
 * (the attention projection) or TP2D_FFN (fc2). */
#ifndef PARITY_MODEL_TP2D_H
#define PARITY_MODEL_TP2D_H

#include "model/gpt.h"
#include "model/units/unit_kind.h"
#include "model/units/units_internal.h"

/* 2-D, 2.5-D and 3-D's buffers (gpt_scratch_t.tp2d), w the widest column
 * block: a SUMMA's open output [n, 3w] and its q open slots
 * (reduce-scatters, `slot` elements each), the blocks broadcast to it
 * a [n, w] (3-D: [q*n, 3w]) and b [3w, w], a sharded vector's gathered
 * pieces (vec) and whole, the sequences' ids and rows over the column
 * [q*n] [q*n, w] (3-D: q*q blocks). */
typedef struct tp2d_scratch {
    void *open, *slots;
    float *a, *b, *vec, *whole, *full;
    int32_t *ids;
    size_t slot;
} tp2d_scratch_t;
/* Carves them into S->tp2d (measures when cv->base is NULL). */
void tp2d_layout_scratch(gpt_scratch_t *S, const model_config_t *c, const gpt_local_t *lc,
                         size_t n, carver_t *cv);

/* The ranks a vector's pieces are cut over: 2-D's column (q1 = q pieces,
 * q2 = 1), 3-D's sequence blocks of the stream (inner 0: the tp2-tp3
 * group) or of the inner layout (inner 1: tp-tp3), pieces nested q1 x q2;
 * me: this rank's piece. */
typedef struct {
    group_t *grp;
    int me, q1, q2;
} tp2d_vgroup_t;
tp2d_vgroup_t tp2d_vgroup(const gpt_t *g, int inner);
/* A block [R, w] cut by rows over v, gathered whole (in the scratch). */
const float *tp2d_gather_rows(gpt_t *g, const tp2d_vgroup_t *v, const float *piece, int R, int w);
/* grad (this rank's piece of a vector [R]) += the exact sum over v of
 * the column sums of dy [n, R]; of a whole open block [R, w]. */
void tp2d_vector_grad(gpt_t *g, const tp2d_vgroup_t *v, const float *dy, int n, int R, acc_t *grad);
void tp2d_rows_grad(gpt_t *g, const tp2d_vgroup_t *v, const acc_t *whole, int R, int w, acc_t *grad);

/* y [n, n_out] = round(sum over the row's input blocks of x.w^T) + b:
 * x [n, in block of this column], w [n_out, in block of this row], b the
 * bias piece (or NULL). Backward: dx [n, in block of this column], the
 * weight's and the bias piece's gradients added. */
void tp2d_linear_forward(gpt_t *g, const pass_t *p, float *y, const float *x, const float *w,
                         const float *b, int in_kind, int n_out, linear_tiles_t t);
void tp2d_linear_backward(gpt_t *g, const pass_t *p, float *dx, acc_t *dw, acc_t *db,
                          const float *dy, const float *x, const float *w, int in_kind, int n_out,
                          linear_tiles_t t);

/* The vocabulary-parallel embedding: x [n, hid] of the block's tokens
 * from the word rows held and the position table's piece; backward:
 * their gradients from d [n, hid]. */
void tp2d_embedding_lookup(gpt_t *g, const pass_t *p, float *x, const int32_t *tokens,
                           const float *wte);
void tp2d_embedding_positions(gpt_t *g, const pass_t *p, float *x, const float *wpe_piece);
void tp2d_embedding_backward(gpt_t *g, const pass_t *p, acc_t *dwte, acc_t *dwpe, const float *d,
                             const int32_t *tokens);

/* The head: logits [n, vocab block of this column] from x [n, hid] and
 * the word rows held e; backward: dx [n, hid] and e's gradient. */
void tp2d_head_logits(gpt_t *g, const pass_t *p, float *logits, const float *x, const float *e);
void tp2d_head_backward(gpt_t *g, const pass_t *p, float *dx, acc_t *de, const float *dlogits,
                        const float *x, const float *e);

#endif
