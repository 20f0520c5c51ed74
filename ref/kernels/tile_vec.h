/* tile_vec.h - what the eight-lane kernels share (internal to
 * ref/kernels): the register block's extents, the k loop that forms a
 * block's products (its macros), the 8 x 8 transpose and B's panels.
 * tile_vec.c runs them as tile_vec_gemm, tile_vec_ksum.c as the exact
 * sums over K tiles. Every helper is static, inlined into each kernel
 * as before the kernels were two files, so the instructions and the
 * bits are the same. */
#ifndef PARITY_KERNELS_TILE_VEC_H
#define PARITY_KERNELS_TILE_VEC_H

#include <stddef.h>

#include "parity/tile.h"

enum {
    VEC_MR = TILE_VEC_MR, /* rows of C per register block */
    VEC_NR = TILE_VEC_NR, /* columns of C per register block: two 8-lane vectors */
    VEC_KC = TILE_VEC_ADD_MAX_K, /* k per packed panel: 32 KiB on the stack */
};

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>

#define VEC_TARGET __attribute__((target("avx2,no-fma")))
#define VEC_INLINE static inline __attribute__((always_inline, target("avx2,no-fma")))

/* The running sums of one row of the block: columns 0-7 and 8-15. */
#define ROW_ACC(r) __m256 c##r##0, c##r##1
/* The register block's twelve: c00, c01 (row 0) .. c50, c51 (row 5). */
#define BLOCK_ACC                                                                              \
    ROW_ACC(0);                                                                                \
    ROW_ACC(1);                                                                                \
    ROW_ACC(2);                                                                                \
    ROW_ACC(3);                                                                                \
    ROW_ACC(4);                                                                                \
    ROW_ACC(5)
/* acc = acc + a * b, lane-wise, rounded twice, as the portable loop. */
#define MAC(acc, x, b) acc = _mm256_add_ps(acc, _mm256_mul_ps(x, b))
#define ROW_STEP(r)                                                                            \
    do {                                                                                       \
        const __m256 x = _mm256_broadcast_ss(a##r + o);                                       \
        MAC(c##r##0, x, b0);                                                                   \
        MAC(c##r##1, x, b1);                                                                   \
    } while (0)
/* count values of k for the whole block: one row of the panel (two
 * vectors) and one value of each row of A a step. */
#define BLOCK_STEPS(count)                                                                     \
    for (int k = 0; k < (count); k++, o += a_ks, bp += VEC_NR) {                               \
        const __m256 b0 = _mm256_load_ps(bp), b1 = _mm256_load_ps(bp + 8);                     \
        ROW_STEP(0);                                                                           \
        ROW_STEP(1);                                                                           \
        ROW_STEP(2);                                                                           \
        ROW_STEP(3);                                                                           \
        ROW_STEP(4);                                                                           \
        ROW_STEP(5);                                                                           \
    }
/* The 8 x 8 transpose of rows r[0..7] (8 floats each): out[i] = column i. */
VEC_INLINE void transpose8(__m256 r[8]) {
    const __m256 t0 = _mm256_unpacklo_ps(r[0], r[1]), t1 = _mm256_unpackhi_ps(r[0], r[1]);
    const __m256 t2 = _mm256_unpacklo_ps(r[2], r[3]), t3 = _mm256_unpackhi_ps(r[2], r[3]);
    const __m256 t4 = _mm256_unpacklo_ps(r[4], r[5]), t5 = _mm256_unpackhi_ps(r[4], r[5]);
    const __m256 t6 = _mm256_unpacklo_ps(r[6], r[7]), t7 = _mm256_unpackhi_ps(r[6], r[7]);
    const __m256 u0 = _mm256_shuffle_ps(t0, t2, 0x44), u1 = _mm256_shuffle_ps(t0, t2, 0xee);
    const __m256 u2 = _mm256_shuffle_ps(t1, t3, 0x44), u3 = _mm256_shuffle_ps(t1, t3, 0xee);
    const __m256 u4 = _mm256_shuffle_ps(t4, t6, 0x44), u5 = _mm256_shuffle_ps(t4, t6, 0xee);
    const __m256 u6 = _mm256_shuffle_ps(t5, t7, 0x44), u7 = _mm256_shuffle_ps(t5, t7, 0xee);
    r[0] = _mm256_permute2f128_ps(u0, u4, 0x20), r[1] = _mm256_permute2f128_ps(u1, u5, 0x20);
    r[2] = _mm256_permute2f128_ps(u2, u6, 0x20), r[3] = _mm256_permute2f128_ps(u3, u7, 0x20);
    r[4] = _mm256_permute2f128_ps(u0, u4, 0x31), r[5] = _mm256_permute2f128_ps(u1, u5, 0x31);
    r[6] = _mm256_permute2f128_ps(u2, u6, 0x31), r[7] = _mm256_permute2f128_ps(u3, u7, 0x31);
}

/* panel[k*16 + j] = b[j*ldb + k] for 16 rows j of B (the nt form's
 * [N, K] operand), eight by eight through vector transposes; a tail of
 * k that is not a multiple of 8 is copied one value at a time. */
VEC_INLINE void pack_b_transposed(const float *b, ptrdiff_t ldb, int kc, float *panel) {
    int k = 0;
    for (; k + 8 <= kc; k += 8)
        for (int h = 0; h < VEC_NR; h += 8) {
            __m256 r[8];
            for (int i = 0; i < 8; i++) r[i] = _mm256_loadu_ps(b + (h + i) * ldb + k);
            transpose8(r);
            for (int i = 0; i < 8; i++) _mm256_store_ps(panel + (k + i) * VEC_NR + h, r[i]);
        }
    for (; k < kc; k++)
        for (int j = 0; j < VEC_NR; j++) panel[k * VEC_NR + j] = b[j * ldb + k];
}
/* panel[k*16 + j] = b(k0 + k, j0 + j) for j < nr, +0 for nr <= j < 16.
 * Whole rows are two vector copies: memcpy of a variable 64 bytes became
 * `rep movsq`, whose start-up cost was a quarter of a gpt-124m step. */
/* (unused: a file of the kernels may not pack B) */
__attribute__((unused)) VEC_TARGET static void pack_b(tile_form_t form, const float *B, ptrdiff_t ldb, int j0, int nr,
                              int k0, int kc, float *panel) {
    if (form == TILE_NT) { /* B is [N, K]: b(k, j) = B[j*ldb + k] */
        if (nr == VEC_NR) {
            pack_b_transposed(B + (ptrdiff_t)j0 * ldb + k0, ldb, kc, panel);
            return;
        }
        for (int j = 0; j < VEC_NR; j++) {
            if (j >= nr) {
                for (int k = 0; k < kc; k++) panel[k * VEC_NR + j] = 0.0f;
                continue;
            }
            const float *bj = B + (ptrdiff_t)(j0 + j) * ldb + k0;
            for (int k = 0; k < kc; k++) panel[k * VEC_NR + j] = bj[k];
        }
        return;
    }
    const float *b = B + (ptrdiff_t)k0 * ldb + j0; /* B is [K, N]: b(k, j) = B[k*ldb + j] */
    if (nr == VEC_NR) {
        for (int k = 0; k < kc; k++, b += ldb, panel += VEC_NR) {
            _mm256_store_ps(panel, _mm256_loadu_ps(b));
            _mm256_store_ps(panel + 8, _mm256_loadu_ps(b + 8));
        }
        return;
    }
    for (int k = 0; k < kc; k++, b += ldb, panel += VEC_NR)
        for (int j = 0; j < VEC_NR; j++) panel[j] = j < nr ? b[j] : 0.0f;
}

#endif
#endif
