/* tile_vec.c - the portable backend's order, eight lanes wide (AVX2).
 *
 * tile_portable.c defines every element of C as
 *
 *     acc = +0;  for k = 0 .. K-1 (ascending):  acc = acc + a_ik * b_kj;  c = acc;
 *
 * with the product rounded to fp32 before the add. This file computes
 * exactly that, faster: a register block of 6 rows x 16 columns of C is
 * twelve 8-lane accumulators, and each k adds one product to each lane.
 * Lanes are different elements of C, so widening the vectors changes no
 * element's sequence of operations; multiplying and adding are separate
 * instructions (the target has no FMA, and the build passes
 * -ffp-contract=off). So the bits are tile_portable_<form>'s, on every
 * shape, for every input, NaN, infinity, -0 and subnormals included
 * (tests/unit/test_tile_vec.c compares the two on ragged shapes and special
 * values).
 *
 * Why this exists: OpenBLAS's bits change from CPU to CPU, and on a CPU
 * whose OpenBLAS gives a tile different bits in a wider call it must be
 * called once per tile, packing both operands every time. Here the order
 * is ours, so one call covers any block of tiles, and on CPUs with
 * separate multiply and add pipes (AMD Zen) the unfused kernel runs at
 * about OpenBLAS's speed (make bench: bench_tile).
 *
 * Operands: B is packed into 16-column panels, k-major (panel[k*16 + j]),
 * up to KC values of k at a time, on the stack; columns past N are zeros
 * whose lanes are thrown away. Each of the 6 rows of A has its own pointer
 * and all advance by one k stride, so the nn, nt and tn forms share one
 * kernel: tile_vec_gemm reads A in place, tile_vec_ksum packs it into
 * register-block strips first (one stream, ap[k*6 + r]). Splitting k
 * into chunks stores the running acc in C and loads it back, which is
 * exact. tile_vec_gemm serves single tile calls and the two calls of
 * tile_gemm_tiles_pair; tile_vec_ksum the contractions over three or
 * more K tiles (contract.c).
 *
 * On other CPUs and compilers tile_vec_available() is 0 and the backend
 * runs tile_portable.c's loops.
 *
 * This file: tile_vec_gemm and its kernels (micro_6x16 in three modes);
 * the exact sums over K tiles are tile_vec_ksum.c's; the block's k loop,
 * the transpose and B's panels, which both use, are tile_vec.h's. */
#include "parity/tile.h"

#include "parity/error.h"

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "kernels/tile_vec.h"

/* What the kernel does with C. */
typedef enum {
    C_STORE,    /* c = acc, acc from +0: the first (or only) chunk of k */
    C_CONTINUE, /* c = acc, acc from c: a later chunk of k */
    C_ADD,      /* c = c + acc, acc from +0: one fp32 addition of a whole partial */
} c_mode_t;

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>

/* C into and out of the running sums, as the mode says. */
#define ROW_INIT(r)                                                                            \
    do {                                                                                       \
        if (mode == C_CONTINUE)                                                                \
            c##r##0 = _mm256_loadu_ps(c + r * ldc), c##r##1 = _mm256_loadu_ps(c + r * ldc + 8); \
        else                                                                                   \
            c##r##0 = _mm256_setzero_ps(), c##r##1 = _mm256_setzero_ps();                      \
    } while (0)
#define ROW_DONE(r)                                                                            \
    do {                                                                                       \
        if (mode == C_ADD) {                                                                   \
            c##r##0 = _mm256_add_ps(_mm256_loadu_ps(c + r * ldc), c##r##0);                    \
            c##r##1 = _mm256_add_ps(_mm256_loadu_ps(c + r * ldc + 8), c##r##1);                \
        }                                                                                      \
        _mm256_storeu_ps(c + r * ldc, c##r##0), _mm256_storeu_ps(c + r * ldc + 8, c##r##1);   \
    } while (0)

/* One 6 x 16 block of C over kc values of k: row r of A is ar[r][o] for
 * o = 0, a_ks, 2 a_ks, ...; the k-th 16 values of B are bp[16k ..]. */
VEC_INLINE void micro_6x16(int kc, const float *const *ar, ptrdiff_t a_ks, const float *bp,
                           float *c, ptrdiff_t ldc, c_mode_t mode) {
    const float *a0 = ar[0], *a1 = ar[1], *a2 = ar[2], *a3 = ar[3], *a4 = ar[4], *a5 = ar[5];
    BLOCK_ACC;
    ROW_INIT(0);
    ROW_INIT(1);
    ROW_INIT(2);
    ROW_INIT(3);
    ROW_INIT(4);
    ROW_INIT(5);
    ptrdiff_t o = 0;
    BLOCK_STEPS(kc);
    ROW_DONE(0);
    ROW_DONE(1);
    ROW_DONE(2);
    ROW_DONE(3);
    ROW_DONE(4);
    ROW_DONE(5);
}

/* Three instances with the mode fixed, so its branches leave the kernel. */
VEC_TARGET static void micro_store(int kc, const float *const *ar, ptrdiff_t a_ks,
                                   const float *bp, float *c, ptrdiff_t ldc) {
    micro_6x16(kc, ar, a_ks, bp, c, ldc, C_STORE);
}
VEC_TARGET static void micro_continue(int kc, const float *const *ar, ptrdiff_t a_ks,
                                      const float *bp, float *c, ptrdiff_t ldc) {
    micro_6x16(kc, ar, a_ks, bp, c, ldc, C_CONTINUE);
}
VEC_TARGET static void micro_add(int kc, const float *const *ar, ptrdiff_t a_ks,
                                 const float *bp, float *c, ptrdiff_t ldc) {
    micro_6x16(kc, ar, a_ks, bp, c, ldc, C_ADD);
}

typedef void micro_fn(int, const float *const *, ptrdiff_t, const float *, float *, ptrdiff_t);

/* A block at the bottom or right edge (mr < 6 or nr < 16): the missing
 * rows repeat row 0 and the missing columns are B's zero padding; the
 * kernel works on a 6 x 16 copy and only the real elements go back. */
static void micro_edge(micro_fn *fn, c_mode_t mode, int mr, int nr, int kc,
                       const float *const *ar, ptrdiff_t a_ks, const float *bp, float *c,
                       ptrdiff_t ldc) {
    float tmp[VEC_MR * VEC_NR];
    const float *rows[VEC_MR];
    for (int r = 0; r < VEC_MR; r++) rows[r] = ar[r < mr ? r : 0];
    if (mode != C_STORE)
        for (int r = 0; r < mr; r++) memcpy(tmp + r * VEC_NR, c + r * ldc, nr * sizeof(float));
    fn(kc, rows, a_ks, bp, tmp, VEC_NR);
    for (int r = 0; r < mr; r++) memcpy(c + r * ldc, tmp + r * VEC_NR, nr * sizeof(float));
}

int tile_vec_available(void) {
    static atomic_int known = -1; /* every thread that finds -1 computes the same value */
    int k = atomic_load_explicit(&known, memory_order_relaxed);
    if (k < 0) {
        __builtin_cpu_init();
        k = __builtin_cpu_supports("avx2") ? 1 : 0;
        atomic_store_explicit(&known, k, memory_order_relaxed);
    }
    return k;
}

void tile_vec_gemm(tile_form_t form, int M, int N, int K, const float *A, int lda,
                   const float *B, int ldb, float *C, int ldc, int add) {
    if (M <= 0 || N <= 0) return;
    if (K == 0) {
        if (!add)
            for (int i = 0; i < M; i++) memset(C + (ptrdiff_t)i * ldc, 0, N * sizeof(float));
        return;
    }
    if (add && K > VEC_KC)
        parity_fatal("tile_vec_gemm: adding a partial over K=%d > %d needs one chunk", K,
                     VEC_KC);
    /* a(i, k) = A[i*a_rs + k*a_ks] */
    const ptrdiff_t a_rs = form == TILE_TN ? 1 : lda, a_ks = form == TILE_TN ? lda : 1;
    float panel[VEC_KC * VEC_NR] __attribute__((aligned(32)));
    for (int j0 = 0; j0 < N; j0 += VEC_NR) {
        const int nr = N - j0 < VEC_NR ? N - j0 : VEC_NR;
        for (int k0 = 0; k0 < K; k0 += VEC_KC) {
            const int kc = K - k0 < VEC_KC ? K - k0 : VEC_KC;
            pack_b(form, B, ldb, j0, nr, k0, kc, panel);
            const c_mode_t mode = add ? C_ADD : k0 == 0 ? C_STORE : C_CONTINUE;
            micro_fn *fn = mode == C_ADD ? micro_add : mode == C_STORE ? micro_store
                                                                       : micro_continue;
            for (int i0 = 0; i0 < M; i0 += VEC_MR) {
                const int mr = M - i0 < VEC_MR ? M - i0 : VEC_MR;
                const float *rows[VEC_MR];
                for (int r = 0; r < VEC_MR; r++)
                    rows[r] = A + (ptrdiff_t)(i0 + (r < mr ? r : 0)) * a_rs + (ptrdiff_t)k0 * a_ks;
                float *c = C + (ptrdiff_t)i0 * ldc + j0;
                if (mr == VEC_MR && nr == VEC_NR)
                    fn(kc, rows, a_ks, panel, c, ldc);
                else
                    micro_edge(fn, mode, mr, nr, kc, rows, a_ks, panel, c, ldc);
            }
        }
    }
}

#else /* no AVX2 kernel on this target: the backend runs tile_portable.c */

int tile_vec_available(void) { return 0; }

void tile_vec_gemm(tile_form_t form, int M, int N, int K, const float *A, int lda,
                   const float *B, int ldb, float *C, int ldc, int add) {
    (void)form, (void)M, (void)N, (void)K, (void)A, (void)lda, (void)B, (void)ldb, (void)C;
    (void)ldc, (void)add;
    parity_fatal("tile_vec_gemm: no vector kernel on this target (tile_vec_available() is 0)");
}

#endif
