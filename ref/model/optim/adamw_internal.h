/* adamw_internal.h - AdamW's per-element arithmetic, shared by the fp32
 * state (adamw.c) and the 8-bit one (adamw8bit.c), so both run MODEL.md's
 * formula in its order and cannot drift apart. */
#ifndef PARITY_MODEL_ADAMW_INTERNAL_H
#define PARITY_MODEL_ADAMW_INTERNAL_H

#include <stdint.h>
#include <string.h>

#include "parity/pmath.h"
#include "kernels/simd.h"

/* sqrt of a non-negative v/bc2. IEEE 754 requires square root to be
 * correctly rounded, so the hardware instruction gives exactly pm_sqrtf's
 * bits (pmath.h: "0 ulp, as IEEE sqrt") at a fraction of the cost of
 * pmath's portable Newton iteration; tests/unit/test_model_config.c checks the
 * two agree bit for bit. NaN and negative input give pm_sqrtf's canonical
 * NaN. Branch-free (with -fno-math-errno, no libm call), so the update
 * loop vectorises. */
PARITY_LANE float adamw_sqrt_lane(float x) {
    float nan;
    const uint32_t bits = PM_NAN_BITS;
    memcpy(&nan, &bits, sizeof nan);
    float s = __builtin_sqrtf(x >= 0.0f ? x : 0.0f);
    return x >= 0.0f ? s : nan;
}

/* One step's constants: the bias corrections 1 - beta^t (adamw.c) and
 * 1 - beta. */
typedef struct {
    float beta1, beta2, om1, om2, bc1, bc2, eps, lr, weight_decay;
} adamw_coef_t;
adamw_coef_t adamw_coef(int t, float lr, float beta1, float beta2, float eps, float weight_decay);

/* MODEL.md's AdamW on one element: m, v, then the parameter. */
PARITY_LANE void adamw_lane(const adamw_coef_t *c, float *p, float gi, float *m, float *v) {
    *m = c->beta1 * *m + c->om1 * gi;
    *v = c->beta2 * *v + c->om2 * (gi * gi);
    float upd = (*m / c->bc1) / (adamw_sqrt_lane(*v / c->bc2) + c->eps);
    if (c->weight_decay != 0.0f) upd = upd + c->weight_decay * *p;
    *p = *p - c->lr * upd;
}

#endif
