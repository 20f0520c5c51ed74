/* safetensors_internal.h - what the .safetensors reader (safetensors.c)
 * and writer (safetensors_write.c) share: a shape's element count with
 * its overflow check, and the byte order swap for a big-endian host.
 * Internal to ref/io. */
#ifndef PARITY_IO_SAFETENSORS_INTERNAL_H
#define PARITY_IO_SAFETENSORS_INTERNAL_H

#include <stddef.h>
#include <stdint.h>

/* Elements of a shape, or -1 (as UINT64_MAX) on overflow. A zero dim
 * makes the tensor empty whatever the other dims are. */
static inline int shape_numel(int ndim, const int64_t *shape, uint64_t *out) {
    uint64_t n = 1;
    int overflow = 0;
    for (int d = 0; d < ndim; d++) {
        uint64_t s = (uint64_t)shape[d];
        if (s == 0) {
            *out = 0;
            return 0;
        }
        if (n > UINT64_MAX / s) overflow = 1;
        else n *= s;
    }
    if (overflow) return -1;
    *out = n;
    return 0;
}

#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
/* The format is little-endian; a big-endian host swaps each element. */
static inline void swap_elements(uint8_t *p, uint64_t nbytes, size_t esize) {
    for (uint64_t i = 0; esize > 1 && i + esize <= nbytes; i += esize)
        for (size_t a = 0, b = esize - 1; a < b; a++, b--) {
            uint8_t t = p[i + a];
            p[i + a] = p[i + b];
            p[i + b] = t;
        }
}
#define ST_HOST_BIG_ENDIAN 1
#else
#define ST_HOST_BIG_ENDIAN 0
#endif

#endif
