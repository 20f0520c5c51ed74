/* tp3d.h - Colossal-AI's 3-D tensor parallelism in the units' linears
 * (tp3d.c); LayerNorm, the embedding and the vectors are tp2d.h's. Every
 * function is called by all ranks of the replica's tp, tp2 and tp3 groups
 * in the same order. first: the first linear of a pair (qkv, fc1, the
 * head: input layout A, the stream's), else the second (dense, fc2). x
 * [n, in block], w this rank's piece of W, b its piece of the bias (or
 * NULL), y [n, n_out] in the other layout. */
#ifndef PARITY_MODEL_TP3D_H
#define PARITY_MODEL_TP3D_H

#include "model/gpt.h"
#include "model/units/units_internal.h"

/* Whether extents lc are 3-D's: a microbatch's sequences cut into q^2
 * blocks (gpt_local_t.t2blocks; 2-D and 2.5-D cut them into q). The
 * styles' applies read the mode from the extents, as they get no shard. */
static inline int tp3d_extents(const gpt_local_t *lc) {
    return lc->t2q > 1 && lc->t2blocks == lc->t2q * lc->t2q;
}

void tp3d_linear_forward(gpt_t *g, const pass_t *p, float *y, const float *x, const float *w,
                         const float *b, int in_kind, int first, int n_out, linear_tiles_t t);
void tp3d_linear_backward(gpt_t *g, const pass_t *p, float *dx, acc_t *dw, acc_t *db,
                          const float *dy, const float *x, const float *w, int in_kind, int first,
                          int n_out, linear_tiles_t t);

/* The targets of the inner layout's sequences (the logits'), from the
 * stream's blocks' (in the scratch). */
const int32_t *tp3d_inner_targets(gpt_t *g, const pass_t *p, const int32_t *targets);

#endif
