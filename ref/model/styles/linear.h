/* linear.h - the linear family: how a replica runs the linears of a pair
 * (qkv then the attention's dense, fc1 then fc2; LLaVA's projector).
 *
 * A pair is Megatron's unit of tensor parallelism: the first linear's
 * output feeds the second's input through an elementwise region (the
 * attention core, GeLU), so a style may leave the first's output cut
 * by features and let the second contract that cut. Every style computes
 * the golden bits (I1-I2): each output is the canonical tiles' exact sum,
 * rounded once. The styles (one file each, one line in styles.c's
 * linear_table):
 *
 *   linear_tp3d.c     "3-d"            Colossal-AI's 3-D cube (tp3d.c)
 *   linear_summa2d.c  "summa-2d"       Colossal-AI's 2-D and 2.5-D SUMMA (tp2d.c)
 *   linear_row.c      "row-parallel"   every linear row-parallel (row_linears)
 *   linear_1d.c       "1-d column/row" Megatron's 1-D, with and without sequence
 *                                      parallelism; the golden run (tp = 1)
 *
 * Scratch: linear_row.c's buffers are its own (its layout_scratch).
 * Shared, in gpt_scratch_t, because other families use them too:
 * the 1-D buffers (tp_layout_scratch: open sums, a reduce-scatter's
 * share and a gather's parts, used by rowpar_forward, colpar_backward
 * and the sequence-parallel gathers of every family) and the 2-D ones
 * (tp2d_layout_scratch: the 2-D and 3-D linears, 2-D LayerNorm, and the
 * vocabulary's 2-D/3-D embedding and head).
 *
 * A new style: a `const linear_style_t` in its own file whose applies
 * says which extents it serves, and a line in linear_table ahead of the
 * styles it is more specific than. A test adds one with style_register
 * (tests/styles/). */
#ifndef PARITY_MODEL_LINEAR_H
#define PARITY_MODEL_LINEAR_H

#include "model/gpt.h"
#include "model/units/units_internal.h"

/* The pair's operations, units_internal.h's pair_* (n = p->n tokens,
 * ns = p->ns the tokens held under sequence parallelism, else n):
 *   first_forward:   y [n, n_out] = x [n, n_in] . w^T + b
 *   first_backward:  dx [ns, n_in]; dw, db += the gradients of the rows held
 *   second_forward:  y [ns, n_out] from x [n, wx], the rank contracting
 *                    its columns [c0, c0 + cl); in_kind: 2-D's blocks of x
 *   second_backward: dx [n, wx] (gathered when the rank holds a slice)
 * The shapes are the 1-D forms'; 2-D and 3-D cut n and the features by
 * their blocks (tp2d.h, tp3d.h). */
typedef struct {
    style_t base;
    void (*first_forward)(gpt_t *g, const pass_t *p, float *y, const float *x, const float *w,
                          const float *b, int n_in, int n_out, linear_tiles_t t);
    void (*first_backward)(gpt_t *g, const pass_t *p, float *dx, acc_t *dw, acc_t *db,
                           const float *dy, const float *x, const float *w, int n_in, int n_out,
                           linear_tiles_t t);
    void (*second_forward)(gpt_t *g, const pass_t *p, float *y, const float *x, int wx, int c0,
                           int cl, const float *w, const float *b, int n_out, linear_tiles_t t,
                           int in_kind);
    void (*second_backward)(gpt_t *g, const pass_t *p, float *dx, acc_t *dw, acc_t *db,
                            const float *dy, const float *x, int wx, int c0, int cl,
                            const float *w, int n_out, linear_tiles_t t, int in_kind);
} linear_style_t;

/* The replica's chosen linear style (styles_choose, at scratch layout). */
static inline const linear_style_t *linear_style(const gpt_t *g) {
    return (const linear_style_t *)g->styles.style[STYLE_LINEAR];
}

/* The styles of the built-in table (styles.c lists them). */
extern const linear_style_t linear_tp3d, linear_summa2d, linear_row, linear_1d;

#endif
