/* bits.h - an fp32 value's bits and back, without aliasing (memcpy):
 * the kernels that work on the representation (exact sums, rounding to
 * the storage dtypes) share these two. */
#ifndef PARITY_KERNELS_BITS_H
#define PARITY_KERNELS_BITS_H

#include <stdint.h>
#include <string.h>

static inline uint32_t f32_bits(float x) {
    uint32_t u;
    memcpy(&u, &x, sizeof u);
    return u;
}

static inline float f32_from_bits(uint32_t u) {
    float x;
    memcpy(&x, &u, sizeof x);
    return x;
}

#endif
