/* adamw.c - AdamW in fp32, MODEL.md's formula in MODEL.md's order.
 *
 * The bias corrections 1 - beta^t come from repeated fp64 products of
 * the fp32 betas, rounded once to fp32, so every rank that holds a shard
 * of the optimizer state (ZeRO) computes the same two numbers. */
#include "parity/model.h"

#include <stdint.h>
#include <string.h>

#include "parity/pmath.h"
#include "../kernels/simd.h"

/* sqrt of a non-negative v/bc2. IEEE 754 requires square root to be
 * correctly rounded, so the hardware instruction gives exactly pm_sqrtf's
 * bits (pmath.h: "0 ulp, as IEEE sqrt") at a fraction of the cost of
 * pmath's portable Newton iteration; tests/test_model_config.c checks the
 * two agree bit for bit. NaN and negative input give pm_sqrtf's canonical
 * NaN. Branch-free (with -fno-math-errno, no libm call), so the update
 * loop vectorises. */
static inline float sqrt_lane(float x) {
    float nan;
    const uint32_t bits = PM_NAN_BITS;
    memcpy(&nan, &bits, sizeof nan);
    float s = __builtin_sqrtf(x >= 0.0f ? x : 0.0f);
    return x >= 0.0f ? s : nan;
}

float adamw_sqrtf(float x) { return sqrt_lane(x); }

/* Stops once |beta^i| <= 2^-26, with the loop's own bits: |pw| never grows
 * again (|beta| < 1, and rounding is monotone), and any double within
 * 2^-26 of 1 rounds to 1.0f (fp32's neighbours of 1 are 2^-24 below and
 * 2^-23 above). So a checkpoint's AdamW count (ckpt.h) costs at most
 * log(2^-26) / log(beta) products a call: 351 at beta 0.95, 18,000 at
 * 0.999; only |beta| >= 1, which validation refuses, runs all t. */
static float bias_correction(float beta, int t) {
    double pw = 1.0;
    for (int i = 0; i < t; i++) {
        pw *= (double)beta;
        if (pw <= 0x1p-26 && pw >= -0x1p-26) return 1.0f;
    }
    return (float)(1.0 - pw);
}

PARITY_SIMD_CLONES
void adamw_update(float *p, const float *g, float *m, float *v, size_t n, int t, float lr,
                  float beta1, float beta2, float eps, float weight_decay) {
    const float bc1 = bias_correction(beta1, t), bc2 = bias_correction(beta2, t);
    const float om1 = 1.0f - beta1, om2 = 1.0f - beta2;
    for (size_t i = 0; i < n; i++) {
        float gi = g[i];
        m[i] = beta1 * m[i] + om1 * gi;
        v[i] = beta2 * v[i] + om2 * (gi * gi);
        float upd = (m[i] / bc1) / (sqrt_lane(v[i] / bc2) + eps);
        if (weight_decay != 0.0f) upd = upd + weight_decay * p[i];
        p[i] = p[i] - lr * upd;
    }
}
