/* tile_portable.c - the portable tile GEMM backend (DESIGN.md I5).
 *
 * Every element of C is computed in one fixed order, fully specified by
 * IEEE 754 single precision:
 *
 *     acc = 0.0f;  for k = 0 .. K-1:  acc = acc + a_k * b_k;  c = acc;
 *
 * with each product rounded to fp32 before the add (no FMA; the Makefile
 * passes -ffp-contract=off and this file never asks for fmaf). Nothing here
 * reassociates, so the bits are the same on any IEEE machine, with any
 * compiler, at any optimisation level and vector width
 * (tests/tile/test_tile_opt.c builds this file at -O0, -O2 and
 * -O3 -mavx2 -mfma and compares the bits; the same digest was also seen on
 * an Intel Xeon with gcc 13 at -O3 -march=native).
 *
 * Speed comes from the loop order only (i-k-j). A register block of MR rows
 * x NR columns of C is held in 8 vector registers; for each k (ascending)
 * every accumulator gets its one product, 4 adjacent columns per vector.
 * Vector lanes are different elements of C, so vectorising across N
 * changes no element's order of operations. Blocks at the right and bottom
 * edges of C use a plain scalar loop in the same order.
 *
 * The three forms differ only in how they reach a_ik and b_kj:
 *   nn: a_ik = A[i*lda + k]  b_kj = B[k*ldb + j]   (rows of B contiguous)
 *   tn: a_ik = A[k*lda + i]  b_kj = B[k*ldb + j]   (rows of B contiguous)
 *   nt: a_ik = A[i*lda + k]  b_kj = B[j*ldb + k]   (columns of B contiguous:
 *       a KC x NR panel of B^T is first copied into a local buffer; copying
 *       is exact, and splitting k into chunks just stores the running acc
 *       in C and loads it back, which is exact too)
 *
 * This file calls nothing but parity_fatal, so the -O0/-O2 test can link
 * several builds of it side by side with renamed entry points.
 */
#include "parity/tile.h"
#include "tile_internal.h"

#include <stddef.h>
#include <string.h>

enum {
    MR = 4,   /* rows of C per register block */
    NR = 8,   /* columns of C per register block: the vectorised loop */
    KC = 512, /* k per packed panel of B^T in the nt form (16 KiB on the stack) */
};


/* One block of C: rows [0, mr), columns [0, nr), mr <= MR, nr <= NR.
 *   c[r, j] = (first ? +0 : c[r, j]) + sum_{k < kc, ascending} a(r, k) * b[k*ldb + j]
 * with a(r, k) = a[r*a_rs + k*a_ks].
 *
 * The full-size block is written with GCC/Clang generic vectors of 4
 * floats: 4 adjacent columns of one row of C per vector, two vectors per
 * row, 8 accumulators in all (they fit the 16 SSE or NEON registers).
 * Vector + and * are lane-wise IEEE operations, so every lane performs
 * exactly the scalar recurrence above; where the target has no vectors the
 * compiler emits scalar code. Spelling the vectors out keeps the speed from
 * depending on the auto-vectoriser's cost model, which at
 * -fvect-cost-model=cheap chose to vectorise the k loop as an in-order
 * reduction instead: the same bits, 7x slower. */
typedef float vec4 __attribute__((vector_size(4 * sizeof(float))));
_Static_assert(MR == 4 && NR == 8, "block_full is written out for 4 x 8 blocks");

static vec4 load4(const float *p) {
    vec4 v;
    memcpy(&v, p, sizeof v); /* unaligned load */
    return v;
}

static void store4(float *p, vec4 v) { memcpy(p, &v, sizeof v); }

static void block_full(int kc, const float *a, ptrdiff_t a_rs, ptrdiff_t a_ks,
                       const float *b, ptrdiff_t ldb, float *c, ptrdiff_t ldc, int first) {
    /* accRH: row R of the block, columns 4H .. 4H+3 */
    vec4 acc00 = {0}, acc01 = {0}, acc10 = {0}, acc11 = {0};
    vec4 acc20 = {0}, acc21 = {0}, acc30 = {0}, acc31 = {0};
    if (!first) {
        acc00 = load4(c), acc01 = load4(c + 4);
        acc10 = load4(c + ldc), acc11 = load4(c + ldc + 4);
        acc20 = load4(c + 2 * ldc), acc21 = load4(c + 2 * ldc + 4);
        acc30 = load4(c + 3 * ldc), acc31 = load4(c + 3 * ldc + 4);
    }
    for (int k = 0; k < kc; k++) {
        const vec4 b0 = load4(b + k * ldb), b1 = load4(b + k * ldb + 4);
        const float *ak = a + k * a_ks;
        const float a0 = ak[0], a1 = ak[a_rs], a2 = ak[2 * a_rs], a3 = ak[3 * a_rs];
        /* scalar * vector broadcasts the scalar to every lane */
        acc00 = acc00 + a0 * b0, acc01 = acc01 + a0 * b1;
        acc10 = acc10 + a1 * b0, acc11 = acc11 + a1 * b1;
        acc20 = acc20 + a2 * b0, acc21 = acc21 + a2 * b1;
        acc30 = acc30 + a3 * b0, acc31 = acc31 + a3 * b1;
    }
    store4(c, acc00), store4(c + 4, acc01);
    store4(c + ldc, acc10), store4(c + ldc + 4, acc11);
    store4(c + 2 * ldc, acc20), store4(c + 2 * ldc + 4, acc21);
    store4(c + 3 * ldc, acc30), store4(c + 3 * ldc + 4, acc31);
}

static void block_edge(int mr, int nr, int kc, const float *a, ptrdiff_t a_rs, ptrdiff_t a_ks,
                       const float *b, ptrdiff_t ldb, float *c, ptrdiff_t ldc, int first) {
    float acc[MR][NR];
    for (int r = 0; r < mr; r++)
        for (int j = 0; j < nr; j++) acc[r][j] = first ? 0.0f : c[r * ldc + j];
    for (int k = 0; k < kc; k++) {
        const float *bk = b + k * ldb;
        for (int r = 0; r < mr; r++) {
            const float ar = a[r * a_rs + k * a_ks];
            for (int j = 0; j < nr; j++) acc[r][j] = acc[r][j] + ar * bk[j];
        }
    }
    for (int r = 0; r < mr; r++)
        for (int j = 0; j < nr; j++) c[r * ldc + j] = acc[r][j];
}

static void block(int mr, int nr, int kc, const float *a, ptrdiff_t a_rs, ptrdiff_t a_ks,
                  const float *b, ptrdiff_t ldb, float *c, ptrdiff_t ldc, int first) {
    if (mr == MR && nr == NR)
        block_full(kc, a, a_rs, a_ks, b, ldb, c, ldc, first);
    else
        block_edge(mr, nr, kc, a, a_rs, a_ks, b, ldb, c, ldc, first);
}

static void zero_c(int M, int N, float *C, int ldc) {
    for (int i = 0; i < M; i++)
        for (int j = 0; j < N; j++) C[(ptrdiff_t)i * ldc + j] = 0.0f;
}

/* nn and tn: B's rows are contiguous, so blocks read B in place.
 * a(i, k) = A[i*a_rs + k*a_ks]. */
static void gemm_b_rows(int M, int N, int K, const float *A, ptrdiff_t a_rs, ptrdiff_t a_ks,
                        const float *B, int ldb, float *C, int ldc) {
    if (K == 0) {
        zero_c(M, N, C, ldc);
        return;
    }
    for (int j0 = 0; j0 < N; j0 += NR) {
        const int nr = N - j0 < NR ? N - j0 : NR;
        for (int i0 = 0; i0 < M; i0 += MR) {
            const int mr = M - i0 < MR ? M - i0 : MR;
            block(mr, nr, K, A + i0 * a_rs, a_rs, a_ks, B + j0, ldb,
                  C + (ptrdiff_t)i0 * ldc + j0, ldc, 1);
        }
    }
}

void tile_portable_nn(int M, int N, int K, const float *A, int lda, const float *B, int ldb,
                      float *C, int ldc) {
    tile_check_args("tile_portable_nn", M, N, K, A, lda, K, B, ldb, N, C, ldc);
    gemm_b_rows(M, N, K, A, lda, 1, B, ldb, C, ldc);
}

void tile_portable_tn(int M, int N, int K, const float *A, int lda, const float *B, int ldb,
                      float *C, int ldc) {
    tile_check_args("tile_portable_tn", M, N, K, A, lda, M, B, ldb, N, C, ldc);
    gemm_b_rows(M, N, K, A, 1, lda, B, ldb, C, ldc);
}

void tile_portable_nt(int M, int N, int K, const float *A, int lda, const float *B, int ldb,
                      float *C, int ldc) {
    tile_check_args("tile_portable_nt", M, N, K, A, lda, K, B, ldb, K, C, ldc);
    if (M == 0 || N == 0) return;
    if (K == 0) {
        zero_c(M, N, C, ldc);
        return;
    }
    float panel[KC * NR]; /* panel[k*NR + j] = B[(j0+j)*ldb + k0+k] */
    for (int j0 = 0; j0 < N; j0 += NR) {
        const int nr = N - j0 < NR ? N - j0 : NR;
        for (int k0 = 0; k0 < K; k0 += KC) {
            const int kc = K - k0 < KC ? K - k0 : KC;
            for (int j = 0; j < nr; j++) {
                const float *bj = B + (ptrdiff_t)(j0 + j) * ldb + k0;
                for (int k = 0; k < kc; k++) panel[k * NR + j] = bj[k];
            }
            for (int i0 = 0; i0 < M; i0 += MR) {
                const int mr = M - i0 < MR ? M - i0 : MR;
                block(mr, nr, kc, A + (ptrdiff_t)i0 * lda + k0, lda, 1, panel, NR,
                      C + (ptrdiff_t)i0 * ldc + j0, ldc, k0 == 0);
            }
        }
    }
}
