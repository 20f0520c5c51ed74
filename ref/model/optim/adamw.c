/* adamw.c - AdamW in fp32, MODEL.md's formula in MODEL.md's order.
 *
 * The bias corrections 1 - beta^t come from repeated fp64 products of
 * the fp32 betas, rounded once to fp32, so every rank that holds a shard
 * of the optimizer state (ZeRO) computes the same two numbers. */
#include "model/gpt.h"

#include "model/optim/adamw_internal.h"

float adamw_sqrtf(float x) { return adamw_sqrt_lane(x); }

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

adamw_coef_t adamw_coef(int t, float lr, float beta1, float beta2, float eps, float weight_decay) {
    return (adamw_coef_t){.beta1 = beta1, .beta2 = beta2, .om1 = 1.0f - beta1, .om2 = 1.0f - beta2,
                          .bc1 = bias_correction(beta1, t), .bc2 = bias_correction(beta2, t),
                          .eps = eps, .lr = lr, .weight_decay = weight_decay};
}

PARITY_SIMD_CLONES
void adamw_update(float *p, const float *g, float *m, float *v, size_t n, int t, float lr,
                  float beta1, float beta2, float eps, float weight_decay) {
    const adamw_coef_t c = adamw_coef(t, lr, beta1, beta2, eps, weight_decay);
    for (size_t i = 0; i < n; i++) adamw_lane(&c, p + i, g[i], m + i, v + i);
}
