/* gelu.c - GPT-2's tanh GeLU, from pmath's fixed-order implementation. */
#include "parity/layers.h"

#include "parity/pmath.h"

void gelu_forward(float *y, float *dydx, const float *x, size_t n) {
    pm_gelu_tanh_array(y, dydx, x, n);
}

void gelu_backward(float *dx, const float *dy, const float *dydx, size_t n) {
    for (size_t i = 0; i < n; i++) dx[i] = dy[i] * dydx[i];
}
