/* norm.h - the norm family: how a replica runs LayerNorm over the tokens
 * it holds (p->ns). Every style is layernorm.c's arithmetic: each row's
 * mean and variance from exact sums over its C features, rounded once;
 * gamma's and beta's gradients exact sums over the tokens, left open.
 * The styles (one file each, one line in styles.c's norm_table):
 *
 *   norm_tp2d.c   "layernorm-2d"  a row's features cut over a row of
 *                                 ranks (2-D, 2.5-D and 3-D): the row
 *                                 statistics completed over that row
 *   norm_local.c  "layernorm"     every feature of a row held (the golden
 *                                 run, 1-D); under sequence parallelism
 *                                 gamma's and beta's sums over the
 *                                 positions held completed across tp
 *
 * Scratch: norm_local.c's sequence-parallel partial sums are its own.
 * norm_tp2d.c's row sums and statistics are its own; it shares the t2_*
 * buffers (gpt_scratch_t: the linear and vocabulary families use them
 * too). */
#ifndef PARITY_MODEL_NORM_H
#define PARITY_MODEL_NORM_H

#include "model/gpt.h"
#include "model/units/units_internal.h"

/* units_internal.h's ln_forward / ln_backward:
 *   forward:  y, xhat [ns, hid], rstd [ns] from x [ns, hid], gamma, beta
 *             (hid: the features held; 2-D: gamma and beta as pieces)
 *   backward: dx [ns, hid]; dgamma, dbeta += their gradients */
typedef struct {
    style_t base;
    void (*forward)(gpt_t *g, const pass_t *p, float *y, float *xhat, float *rstd, const float *x,
                    const float *gamma, const float *beta);
    void (*backward)(gpt_t *g, const pass_t *p, float *dx, acc_t *dgamma, acc_t *dbeta,
                     const float *dy, const float *xhat, const float *rstd, const float *gamma);
} norm_style_t;

static inline const norm_style_t *norm_style(const gpt_t *g) {
    return (const norm_style_t *)g->styles.style[STYLE_NORM];
}

extern const norm_style_t norm_tp2d, norm_local;

#endif
