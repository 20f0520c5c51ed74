/* tile_vec_ksum.c - exact sums over K tiles in the eight-lane kernel
 * (tile_vec_ksum, tile_vec_pack_a, tile_vec_ksum_packed; tile.h): each
 * register block's partial for one K tile formed as tile_vec_gemm forms
 * it (tile_vec.h's k loop, the portable order's bits), then added into
 * fp64 running sums whose exactness a certificate checks. The callers
 * are contract.c's block sums. */
#include "parity/tile.h"

#include "parity/error.h"

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "kernels/tile_vec.h"

#if defined(__x86_64__) && defined(__GNUC__)

/* ---- exact sums over K tiles (tile_vec_ksum) ---------------------------------
 *
 * The register block's partial for one K tile is formed as above (12
 * accumulators from +0), then added into fp64 running sums. The first K
 * tile starts its sums as +0 + p, so an exact zero sum is +0. Doing this
 * in the kernel keeps each partial in registers (no pass over memory per
 * K tile) and runs the k loop over every K tile of a chunk in one call.
 * What certifies that every fp64 addition was exact (cert_t):
 *
 * - CERT_TWOSUM: each addition checked by Knuth's TwoSum as in fold.h:
 *   the error is +0 exactly when the addition was exact (for finite
 *   values; an infinity or a NaN makes it NaN). Errors are OR-ed bitwise
 *   into one vector per register block: any set bit marks the block's
 *   sums as not certified. Six additions a value: on Zen's two FP-add
 *   pipes the check took a fifth of a 64-value K tile's time.
 *
 * - CERT_RANGE: the block's partials' largest magnitude and smallest
 *   nonzero one, as the integers their bits are (the sign cleared), over
 *   all of K (range_exact decides). Every partial is a whole multiple of
 *   2^(e_min - 150) and below 2^(e_max - 126) in magnitude (e: the
 *   biased exponent field; a subnormal's 0 is one below its true scale,
 *   which only shrinks the quantum), so any sum of n of them, in any
 *   order, is a multiple of that quantum below n 2^(e_max - 126): exact
 *   in fp64's 53 bits when e_max - e_min + ceil(log2 n) <= 29. Two
 *   integer min/max a vector and no extra floating-point addition. It
 *   certifies less than TwoSum (its bound is the worst order's), so it
 *   is used where a block runs all of K at once (tile_vec_ksum_packed),
 *   which runs a block it cannot certify again with TwoSum. */
typedef enum { CERT_TWOSUM, CERT_RANGE } cert_t;

/* A register block's certificate so far. */
typedef struct {
    __m256d err;    /* CERT_TWOSUM: OR of the TwoSum errors */
    __m256i hi, lo; /* CERT_RANGE: per lane max |bits|, min (|bits| - 1) unsigned (0 wraps) */
} cert_state_t;

/* s[0..3] += the four fp32 values of p; with CERT_TWOSUM, checked into *err. */
VEC_INLINE void fold4(cert_t cert, double *s, __m128 p, int first, __m256d *err) {
    const __m256d b = _mm256_cvtps_pd(p);
    if (first) {
        _mm256_storeu_pd(s, _mm256_add_pd(_mm256_setzero_pd(), b));
        return;
    }
    const __m256d a = _mm256_loadu_pd(s), r = _mm256_add_pd(a, b);
    if (cert == CERT_TWOSUM) {
        const __m256d bb = _mm256_sub_pd(r, a);
        const __m256d e =
            _mm256_add_pd(_mm256_sub_pd(a, _mm256_sub_pd(r, bb)), _mm256_sub_pd(b, bb));
        *err = _mm256_or_pd(*err, e);
    }
    _mm256_storeu_pd(s, r);
}

/* CERT_RANGE: the eight partials of v into the lane-wise extremes. */
VEC_INLINE void range8(__m256 v, __m256i *hi, __m256i *lo) {
    const __m256i u = _mm256_and_si256(_mm256_castps_si256(v), _mm256_set1_epi32(0x7fffffff));
    *hi = _mm256_max_epu32(*hi, u);
    *lo = _mm256_min_epu32(*lo, _mm256_sub_epi32(u, _mm256_set1_epi32(1)));
}

#define ROW_ZERO(r) c##r##0 = _mm256_setzero_ps(), c##r##1 = _mm256_setzero_ps()
/* Folds row r's 16 partials straight from the registers: converting from
 * a stored copy instead stalled on store-to-load forwarding. */
#define ROW_FOLD(r)                                                                            \
    do {                                                                                       \
        double *sr = s + r * lds;                                                              \
        if (cert == CERT_RANGE) range8(c##r##0, &hi, &lo), range8(c##r##1, &hi, &lo);          \
        fold4(cert, sr, _mm256_castps256_ps128(c##r##0), start, &err);                        \
        fold4(cert, sr + 4, _mm256_extractf128_ps(c##r##0, 1), start, &err);                 \
        fold4(cert, sr + 8, _mm256_castps256_ps128(c##r##1), start, &err);                    \
        fold4(cert, sr + 12, _mm256_extractf128_ps(c##r##1, 1), start, &err);                 \
    } while (0)

/* One 6 x 16 register block over nt K tiles of tk: row r of A at ar[r]
 * (k stride a_ks), B's packed panel at bp, fp64 sums at s (row stride
 * lds; first: the chunk starts the sums), rounded into out (row stride
 * ldo) when out is not NULL; the certificate carried in *st. */
VEC_INLINE void micro_ksum_cert(cert_t cert, int nt, int tk, const float *const *ar,
                                ptrdiff_t a_ks, const float *bp, double *s, ptrdiff_t lds,
                                float *out, ptrdiff_t ldo, int first, cert_state_t *st) {
    const float *a0 = ar[0], *a1 = ar[1], *a2 = ar[2], *a3 = ar[3], *a4 = ar[4], *a5 = ar[5];
    /* locals: *st may alias s as far as the compiler knows, which would keep it in memory */
    __m256d err = st->err;
    __m256i hi = st->hi, lo = st->lo;
    ptrdiff_t o = 0;
    for (int t = 0; t < nt; t++) {
        BLOCK_ACC;
        ROW_ZERO(0), ROW_ZERO(1), ROW_ZERO(2), ROW_ZERO(3), ROW_ZERO(4), ROW_ZERO(5);
        BLOCK_STEPS(tk);
        const int start = first && t == 0;
        ROW_FOLD(0);
        ROW_FOLD(1);
        ROW_FOLD(2);
        ROW_FOLD(3);
        ROW_FOLD(4);
        ROW_FOLD(5);
    }
    st->err = err, st->hi = hi, st->lo = lo;
    if (out)
        for (int r = 0; r < VEC_MR; r++)
            for (int q = 0; q < VEC_NR; q += 4)
                _mm_storeu_ps(out + r * ldo + q, _mm256_cvtpd_ps(_mm256_loadu_pd(s + r * lds + q)));
}

/* The two instances, the certificate's branches out of the kernel. */
VEC_TARGET static void micro_ksum_twosum(int nt, int tk, const float *const *ar,
                                         ptrdiff_t a_ks, const float *bp, double *s,
                                         ptrdiff_t lds, float *out, ptrdiff_t ldo, int first,
                                         cert_state_t *st) {
    micro_ksum_cert(CERT_TWOSUM, nt, tk, ar, a_ks, bp, s, lds, out, ldo, first, st);
}
VEC_TARGET static void micro_ksum_range(int nt, int tk, const float *const *ar,
                                        ptrdiff_t a_ks, const float *bp, double *s,
                                        ptrdiff_t lds, float *out, ptrdiff_t ldo, int first,
                                        cert_state_t *st) {
    micro_ksum_cert(CERT_RANGE, nt, tk, ar, a_ks, bp, s, lds, out, ldo, first, st);
}

typedef void micro_ksum_fn(int, int, const float *const *, ptrdiff_t, const float *, double *,
                           ptrdiff_t, float *, ptrdiff_t, int, cert_state_t *);

/* A register block at the bottom or right edge, through 6 x 16 copies of
 * its sums and output (as micro_edge). The missing columns' partials are
 * +0 (B's zero padding) and the missing rows repeat row 0: neither
 * changes a certificate. */
VEC_TARGET static void micro_ksum_edge(micro_ksum_fn *fn, int mr, int nr, int nt, int tk,
                                       const float *const *ar, ptrdiff_t a_ks, const float *bp,
                                       double *s, ptrdiff_t lds, float *out, ptrdiff_t ldo,
                                       int first, cert_state_t *st) {
    double ts[VEC_MR * VEC_NR];
    float to[VEC_MR * VEC_NR];
    const float *rows[VEC_MR];
    for (int r = 0; r < VEC_MR; r++) rows[r] = ar[r < mr ? r : 0];
    for (int r = 0; r < VEC_MR; r++) /* the copies of row 0 fold what row 0 folds */
        for (int j = 0; j < VEC_NR; j++)
            ts[r * VEC_NR + j] = first || j >= nr ? 0.0 : s[(r < mr ? r : 0) * lds + j];
    fn(nt, tk, rows, a_ks, bp, ts, VEC_NR, out ? to : NULL, VEC_NR, first, st);
    for (int r = 0; r < mr; r++) {
        memcpy(s + r * lds, ts + r * VEC_NR, nr * sizeof(double));
        if (out) memcpy(out + r * ldo, to + r * VEC_NR, nr * sizeof(float));
    }
}

VEC_INLINE cert_state_t cert_start(void) {
    return (cert_state_t){_mm256_setzero_pd(), _mm256_setzero_si256(), _mm256_set1_epi32(-1)};
}

/* 1 where the block's additions are not certified exact. */
VEC_INLINE unsigned char twosum_failed(const cert_state_t *st) {
    return (unsigned char)!_mm256_testz_si256(_mm256_castpd_si256(st->err),
                                              _mm256_castpd_si256(st->err));
}

VEC_INLINE uint32_t lanes_max(__m256i v) {
    __m128i m = _mm_max_epu32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
    m = _mm_max_epu32(m, _mm_shuffle_epi32(m, 0x4e));
    return (uint32_t)_mm_cvtsi128_si32(_mm_max_epu32(m, _mm_shuffle_epi32(m, 0xb1)));
}
VEC_INLINE uint32_t lanes_min(__m256i v) {
    __m128i m = _mm_min_epu32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
    m = _mm_min_epu32(m, _mm_shuffle_epi32(m, 0x4e));
    return (uint32_t)_mm_cvtsi128_si32(_mm_min_epu32(m, _mm_shuffle_epi32(m, 0xb1)));
}

/* CERT_RANGE's rule for nt partials an element (see above). */
VEC_INLINE unsigned char range_failed(const cert_state_t *st, int nt) {
    const uint32_t hi = lanes_max(st->hi), lo = lanes_min(st->lo);
    if (lo == 0xffffffffu) return 0; /* every partial +0 or -0: the sums are +0 */
    const int e_max = (int)(hi >> 23), e_min = (int)((lo + 1) >> 23);
    int log2n = 0;
    while ((1L << log2n) < nt) log2n++;
    return (unsigned char)(e_max >= 255 || e_max - e_min + log2n > 29);
}

/* ap[(i/6)*6*kc + k*6 + i%6] = a(i, k0 + k) for i < M (rows past M in the
 * last strip are +0): A's rows for one chunk of k in register-block
 * strips, read by the kernel as one sequential stream each. */
VEC_TARGET static void pack_a(tile_form_t form, const float *A, ptrdiff_t lda, int M, int k0,
                              int kc, float *ap) {
    for (int i0 = 0; i0 < M; i0 += VEC_MR, ap += (ptrdiff_t)VEC_MR * kc) {
        const int mr = M - i0 < VEC_MR ? M - i0 : VEC_MR;
        if (form == TILE_TN) { /* a(i, k) = A[k*lda + i]: six neighbours a k */
            /* a masked load reads the mr real ones (and no further), zeros
             * the rest; each store's two extra floats are overwritten by
             * the next (the work buffer has room for the last one's) */
            const __m256i lane = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
            const __m256i mask = _mm256_cmpgt_epi32(_mm256_set1_epi32(mr), lane);
            const float *a = A + (ptrdiff_t)k0 * lda + i0;
            for (int k = 0; k < kc; k++, a += lda)
                _mm256_storeu_ps(ap + k * VEC_MR, _mm256_maskload_ps(a, mask));
            continue;
        }
        /* a(i, k) = A[i*lda + k]: eight k of the six rows at a time, through
         * an 8 x 8 transpose whose two extra rows are zeros; each column
         * store writes 8 floats of which the next store overwrites 2 (the
         * work buffer has room for the last one's). */
        const float *a[VEC_MR];
        for (int r = 0; r < VEC_MR; r++) a[r] = A + (ptrdiff_t)(i0 + (r < mr ? r : 0)) * lda + k0;
        int k = 0;
        for (; k + 8 <= kc; k += 8) {
            __m256 v[8];
            for (int r = 0; r < VEC_MR; r++)
                v[r] = r < mr ? _mm256_loadu_ps(a[r] + k) : _mm256_setzero_ps();
            v[6] = v[7] = _mm256_setzero_ps();
            transpose8(v);
            for (int i = 0; i < 8; i++) _mm256_storeu_ps(ap + (k + i) * VEC_MR, v[i]);
        }
        for (; k < kc; k++)
            for (int r = 0; r < VEC_MR; r++) ap[k * VEC_MR + r] = r < mr ? a[r][k] : 0.0f;
    }
}

/* k values in one chunk of whole K tiles: as many tiles as fit half a
 * panel (the panel and a strip of packed A then share L1), at least one. */
static int ksum_chunk(int tk) { return tk <= VEC_KC / 2 ? VEC_KC / 2 / tk * tk : tk; }

size_t tile_vec_ksum_work(int M, int tk) { /* + 2: pack_a's last column store */
    return (size_t)((M + VEC_MR - 1) / VEC_MR * VEC_MR) * (size_t)ksum_chunk(tk) + 2;
}

size_t tile_vec_pack_a_size(int M, int K) {
    return (size_t)((M + VEC_MR - 1) / VEC_MR * VEC_MR) * (size_t)K + 2;
}

int tile_vec_pack_a(tile_form_t form, int M, int K, int tk, const float *A, int lda,
                    float *packed) {
    if (!tile_vec_available() || tk <= 0 || tk > VEC_KC || K % tk || K == 0) return -1;
    if (M > 0) pack_a(form, A, lda, M, 0, K, packed); /* strips of all of K (ksum_panels) */
    return 0;
}

/* The CPU check sits outside the AVX2 function that follows. */
VEC_TARGET static void ksum(tile_form_t form, int M, int N, int K, int tk, const float *A,
                            int lda, const float *B, int ldb, double *S, int lds, float *out,
                            int ldo, unsigned char *bad, float *work);

int tile_vec_ksum(tile_form_t form, int M, int N, int K, int tk, const float *A, int lda,
                  const float *B, int ldb, double *S, int lds, float *out, int ldo,
                  unsigned char *bad, float *work) {
    if (!tile_vec_available() || tk <= 0 || tk > VEC_KC || K % tk || K == 0) return -1;
    if (M > 0 && N > 0) ksum(form, M, N, K, tk, A, lda, B, ldb, S, lds, out, ldo, bad, work);
    return 0;
}

/* tile_vec_ksum_counts: register blocks run by ksum_panels, and those
 * the range rule left to TwoSum. */
static atomic_long blocks, retried;

void tile_vec_ksum_counts(long *all, long *twosum) {
    *all = atomic_load(&blocks), *twosum = atomic_load(&retried);
}

size_t tile_vec_ksum_panel_work(int K, int tk) { /* + 8: 32-byte alignment */
    (void)tk;
    return K > 0 ? (size_t)K * VEC_NR + 8 : 8;
}

VEC_TARGET static void ksum_panels(tile_form_t form, int M, int N, int K, int tk,
                                   const float *packed, const float *B, int ldb, double *S,
                                   int lds, float *out, int ldo, unsigned char *bad,
                                   float *panel);

int tile_vec_ksum_packed(tile_form_t form, int M, int N, int K, int tk, const float *packed,
                         const float *B, int ldb, double *S, int lds, float *out, int ldo,
                         unsigned char *bad, float *work) {
    if (!tile_vec_available() || tk <= 0 || tk > VEC_KC || K % tk || K == 0) return -1;
    float *panel = (float *)(((uintptr_t)work + 31) & ~(uintptr_t)31);
    if (M > 0 && N > 0)
        ksum_panels(form, M, N, K, tk, packed, B, ldb, S, lds, out, ldo, bad, panel);
    return 0;
}

/* One register block (rows i0.., columns j0..) over the K tiles of kc
 * values of k from k0: A's strip at ap (6 values a k), B's panel rows at
 * bp; its certificate carried in *st. */
VEC_TARGET static void block_tiles(micro_ksum_fn *fn, int M, int N, int K, int tk, int i0,
                                   int j0, int k0, int kc, const float *ap, const float *bp,
                                   double *S, int lds, float *out, int ldo, cert_state_t *st) {
    const int mr = M - i0 < VEC_MR ? M - i0 : VEC_MR, nr = N - j0 < VEC_NR ? N - j0 : VEC_NR;
    const float *rows[VEC_MR] = {ap, ap + 1, ap + 2, ap + 3, ap + 4, ap + 5};
    double *sb = S + (ptrdiff_t)i0 * lds + j0;
    float *ob = out && k0 + kc == K ? out + (ptrdiff_t)i0 * ldo + j0 : NULL;
    if (mr == VEC_MR && nr == VEC_NR)
        fn(kc / tk, tk, rows, VEC_MR, bp, sb, lds, ob, ldo, k0 == 0, st);
    else
        micro_ksum_edge(fn, mr, nr, kc / tk, tk, rows, VEC_MR, bp, sb, lds, ob, ldo, k0 == 0, st);
}

/* A chunk at a time (packed into work), then B's panel for the chunk,
 * then every register block of the rows; TwoSum certificates, carried
 * from chunk to chunk in the flags. */
VEC_TARGET static void ksum(tile_form_t form, int M, int N, int K, int tk, const float *A,
                            int lda, const float *B, int ldb, double *S, int lds, float *out,
                            int ldo, unsigned char *bad, float *work) {
    const int chunk = ksum_chunk(tk), nbj = (N + VEC_NR - 1) / VEC_NR;
    float panel[VEC_KC * VEC_NR] __attribute__((aligned(32)));
    for (int k0 = 0; k0 < K; k0 += chunk) {
        const int kc = K - k0 < chunk ? K - k0 : chunk;
        pack_a(form, A, lda, M, k0, kc, work);
        for (int j0 = 0; j0 < N; j0 += VEC_NR) {
            pack_b(form, B, ldb, j0, N - j0 < VEC_NR ? N - j0 : VEC_NR, k0, kc, panel);
            for (int i0 = 0; i0 < M; i0 += VEC_MR) {
                cert_state_t st = cert_start();
                block_tiles(micro_ksum_twosum, M, N, K, tk, i0, j0, k0, kc,
                            work + (ptrdiff_t)i0 * kc, panel, S, lds, out, ldo, &st);
                unsigned char *flag = &bad[i0 / VEC_MR * nbj + j0 / VEC_NR];
                *flag = (unsigned char)((k0 == 0 ? 0 : *flag) | twosum_failed(&st));
            }
        }
    }
}

/* With A packed for all of K (strips of 6 rows, tile_vec_pack_a): B's
 * panel for all of K, then each register block over all of its K tiles
 * in one kernel call, so that its fp64 sums stay in L1 from its first K
 * tile to its last and the panel serves every row; the
 * range certificate over the block's whole K at once, then TwoSum's. Chunk by chunk
 * over all rows (ksum) read the sums back from L2 or L3 at every chunk;
 * on gpt-124m's weight-gradient shapes this order is 1.3x faster,
 * elsewhere 1.02-1.07x (the 512 KiB-L2 EPYC, the two orders alternating
 * in one process). */
VEC_TARGET static void ksum_panels(tile_form_t form, int M, int N, int K, int tk,
                                   const float *packed, const float *B, int ldb, double *S,
                                   int lds, float *out, int ldo, unsigned char *bad,
                                   float *panel) {
    long retries = 0; /* counted once a call: a locked add a block drains the store buffer */
    const int nbj = (N + VEC_NR - 1) / VEC_NR;
    for (int j0 = 0; j0 < N; j0 += VEC_NR) {
        const int nr = N - j0 < VEC_NR ? N - j0 : VEC_NR;
        pack_b(form, B, ldb, j0, nr, 0, K, panel);
        for (int i0 = 0; i0 < M; i0 += VEC_MR) {
            const double *sb = S + (ptrdiff_t)i0 * lds + j0;
            for (int r = 0; r < VEC_MR && i0 + r < M; r++) /* the sums' lines, while tile 1 runs */
                _mm_prefetch((const char *)(sb + r * lds), _MM_HINT_T0),
                    _mm_prefetch((const char *)(sb + r * lds + nr - 1), _MM_HINT_T0);
            /* the range rule first; where it cannot certify (a wide range of
             * partials: the qkv input gradient's key part is tiny early on),
             * the block again with TwoSum, which certifies every exact sum,
             * before the caller's superaccumulator */
            unsigned char failed = 0;
            for (int pass = 0; pass < 2; pass++) {
                cert_state_t st = cert_start();
                block_tiles(pass ? micro_ksum_twosum : micro_ksum_range, M, N, K, tk, i0, j0, 0,
                            K, packed + (ptrdiff_t)i0 * K, panel, S, lds, out, ldo, &st);
                failed = pass ? twosum_failed(&st) : range_failed(&st, K / tk);
                if (!failed) break;
                retries += !pass;
            }
            bad[i0 / VEC_MR * nbj + j0 / VEC_NR] = failed;
        }
    }
    atomic_fetch_add_explicit(&blocks, (long)((M + VEC_MR - 1) / VEC_MR) * nbj,
                              memory_order_relaxed);
    if (retries) atomic_fetch_add_explicit(&retried, retries, memory_order_relaxed);
}

#else /* no AVX2 kernel on this target: the backend runs tile_portable.c */

int tile_vec_ksum(tile_form_t form, int M, int N, int K, int tk, const float *A, int lda,
                  const float *B, int ldb, double *S, int lds, float *out, int ldo,
                  unsigned char *bad, float *work) {
    (void)form, (void)M, (void)N, (void)K, (void)tk, (void)A, (void)lda, (void)B, (void)ldb;
    (void)S, (void)lds, (void)out, (void)ldo, (void)bad, (void)work;
    return -1;
}

size_t tile_vec_ksum_work(int M, int tk) {
    (void)M, (void)tk;
    return 0;
}

size_t tile_vec_pack_a_size(int M, int K) {
    (void)M, (void)K;
    return 0;
}

int tile_vec_pack_a(tile_form_t form, int M, int K, int tk, const float *A, int lda,
                    float *packed) {
    (void)form, (void)M, (void)K, (void)tk, (void)A, (void)lda, (void)packed;
    return -1;
}

size_t tile_vec_ksum_panel_work(int K, int tk) {
    (void)K, (void)tk;
    return 0;
}

void tile_vec_ksum_counts(long *all, long *twosum) { *all = *twosum = 0; }

int tile_vec_ksum_packed(tile_form_t form, int M, int N, int K, int tk, const float *packed,
                         const float *B, int ldb, double *S, int lds, float *out, int ldo,
                         unsigned char *bad, float *work) {
    (void)form, (void)M, (void)N, (void)K, (void)tk, (void)packed, (void)B, (void)ldb;
    (void)S, (void)lds, (void)out, (void)ldo, (void)bad, (void)work;
    return -1;
}

#endif
