/* layernorm.c - LayerNorm over the feature axis (MODEL.md, LayerNorm).
 *
 * Both statistics are exact sums rounded once, then one fp32 division by
 * C; the backward's two row sums likewise. gamma and beta gradients sum
 * over every token of the global batch into open accumulators. */
#include "parity/layers.h"

#include "parity/pmath.h"

void layernorm_forward(float *y, float *xhat, float *rstd, const float *x, const float *gamma,
                       const float *beta, int n, int C, float eps, float *scratch) {
    const float fC = (float)C;
    for (int i = 0; i < n; i++) {
        const float *xi = x + (size_t)i * C;
        float *hi = xhat + (size_t)i * C, *yi = y + (size_t)i * C;
        float mu = sum_f32(xi, (size_t)C) / fC;
        for (int c = 0; c < C; c++) {
            float d = xi[c] - mu;
            hi[c] = d;            /* d for now; xhat below */
            scratch[c] = d * d;
        }
        float var = sum_f32(scratch, (size_t)C) / fC;
        float r = pm_rsqrtf(var + eps);
        rstd[i] = r;
        for (int c = 0; c < C; c++) {
            hi[c] = hi[c] * r;
            yi[c] = hi[c] * gamma[c] + beta[c];
        }
    }
}

void layernorm_backward(float *dx, acc_t *dgamma, acc_t *dbeta, const float *dy,
                        const float *xhat, const float *rstd, const float *gamma, int n, int C,
                        float *scratch) {
    const float fC = (float)C;
    const size_t nC = (size_t)n * C;
    /* gamma/beta gradients: column sums over tokens (dx holds dy*xhat
     * until the input gradient overwrites it below) */
    for (size_t i = 0; i < nC; i++) dx[i] = dy[i] * xhat[i];
    acc_add_rows(dgamma, 0, dx, n, C, C);
    acc_add_rows(dbeta, 0, dy, n, C, C);
    float *dxhat = scratch, *prod = scratch + C;
    for (int i = 0; i < n; i++) {
        const float *dyi = dy + (size_t)i * C, *hi = xhat + (size_t)i * C;
        float *dxi = dx + (size_t)i * C;
        for (int c = 0; c < C; c++) {
            dxhat[c] = dyi[c] * gamma[c];
            prod[c] = dxhat[c] * hi[c];
        }
        float a = sum_f32(dxhat, (size_t)C) / fC;
        float b = sum_f32(prod, (size_t)C) / fC;
        float r = rstd[i];
        for (int c = 0; c < C; c++) dxi[c] = ((dxhat[c] - a) - hi[c] * b) * r;
    }
}
