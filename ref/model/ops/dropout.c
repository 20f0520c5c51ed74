/* dropout.c - inverted dropout with position-keyed masks (I3).
 *
 * Element i of a site is kept iff rng_uniform(seed, stream, i) >= p, where
 * i is its flat index in the site's GLOBAL tensor ([B,T,C] or [B,H,T,T])
 * and stream = rng_stream_id(site, step). A rank that holds any slice of
 * the tensor draws exactly the golden mask for it.
 *
 * A dropped element is +0 (not x*0, whose sign would follow x), so the
 * forward and backward never depend on the sign of a dropped value. */
#include "parity/layers.h"

#include "parity/rng.h"

float dropout_scale(float p) { return 1.0f / (1.0f - p); }

void dropout_mask(uint8_t *keep, size_t n, uint64_t seed, uint64_t stream,
                  uint64_t first_index, float p) {
    enum { CHUNK = 1024 };
    float u[CHUNK];
    for (size_t base = 0; base < n; base += CHUNK) {
        size_t len = n - base < CHUNK ? n - base : CHUNK;
        rng_fill_uniform(u, len, seed, stream, first_index + base);
        for (size_t i = 0; i < len; i++) keep[base + i] = u[i] >= p;
    }
}

void dropout_forward(float *y, const float *x, const uint8_t *keep, size_t n, float p) {
    float scale = dropout_scale(p);
    for (size_t i = 0; i < n; i++) y[i] = keep[i] ? x[i] * scale : 0.0f;
}

void dropout_backward(float *dx, const float *dy, const uint8_t *keep, size_t n, float p) {
    float scale = dropout_scale(p);
    for (size_t i = 0; i < n; i++) dx[i] = keep[i] ? dy[i] * scale : 0.0f;
}
