/* tile_internal.h - what the tile backends and their checks share (internal
 * to ref/kernels). */
#ifndef PARITY_KERNELS_TILE_INTERNAL_H
#define PARITY_KERNELS_TILE_INTERNAL_H

#include <stdint.h>

#include "parity/tile.h"

/* Fatal on sizes, strides or pointers no tile can have (tile_gemm.c). */
void tile_check_args(const char *fn, int M, int N, int K, const float *A, int lda, int lda_min,
                     const float *B, int ldb, int ldb_min, float *C, int ldc);

/* C[M,N] += the product of one OpenBLAS call with beta = 1, whatever the
 * backend (tile_wide.c's pair check and calls only). */
void tile_blas_gemm_add(tile_form_t form, int M, int N, int K, const float *A, int lda,
                        const float *B, int ldb, float *C, int ldc);

/* Deterministic values in (-1, 1) with full 24-bit mantissas, so that
 * every product and sum of a self-check rounds. */
static inline float tile_check_value(uint32_t *state) {
    *state = *state * 1664525u + 1013904223u;
    return (float)((int32_t)*state >> 7) * 0x1p-24f;
}

#endif
