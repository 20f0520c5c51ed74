/* rng.c - Philox4x32-10 and the position-keyed draws built on it.
 *
 * Philox, as specified in Salmon et al. (SC'11): each of the 10 rounds
 * multiplies two of the four counter words by fixed 32-bit constants,
 * keeps both halves of the 64-bit products, and mixes in the other two
 * words and the key:
 *     (c0, c1, c2, c3) -> (hi(M1 c2) ^ c1 ^ k0, lo(M1 c2),
 *                          hi(M0 c0) ^ c3 ^ k1, lo(M0 c0))
 * and between rounds the key advances by the Weyl constants (W0, W1),
 * the fractional parts of the golden ratio and of sqrt 3 in 32-bit
 * fixed point.
 */
#include "parity/rng.h"

#include "parity/pmath.h"
#include "simd.h"

#define PHILOX_M0 0xD2511F53u
#define PHILOX_M1 0xCD9E8D57u
#define PHILOX_W0 0x9E3779B9u
#define PHILOX_W1 0xBB67AE85u
#define PHILOX_ROUNDS 10

/* The ten rounds on the counter words c[4] under key (k0, k1). */
static inline void philox_rounds(uint32_t c[4], uint32_t k0, uint32_t k1) {
    uint32_t c0 = c[0], c1 = c[1], c2 = c[2], c3 = c[3];
#pragma GCC unroll 10
    for (int r = 0; r < PHILOX_ROUNDS; r++) {
        if (r > 0) { k0 += PHILOX_W0; k1 += PHILOX_W1; }
        uint64_t p0 = (uint64_t)PHILOX_M0 * c0;
        uint64_t p1 = (uint64_t)PHILOX_M1 * c2;
        uint32_t n0 = (uint32_t)(p1 >> 32) ^ c1 ^ k0;
        uint32_t n2 = (uint32_t)(p0 >> 32) ^ c3 ^ k1;
        c1 = (uint32_t)p1;
        c3 = (uint32_t)p0;
        c0 = n0;
        c2 = n2;
    }
    c[0] = c0; c[1] = c1; c[2] = c2; c[3] = c3;
}

void philox4x32_10(const uint32_t ctr[4], const uint32_t key[2], uint32_t out[4]) {
    uint32_t c[4] = {ctr[0], ctr[1], ctr[2], ctr[3]};
    philox_rounds(c, key[0], key[1]);
    out[0] = c[0]; out[1] = c[1]; out[2] = c[2]; out[3] = c[3];
}

/* frac(sqrt 2) and frac(sqrt 3) in 64-bit fixed point, made odd. */
#define MIX_C1 0x6a09e667f3bcc909ull
#define MIX_C2 0xbb67ae8584caa73bull

uint64_t rng_mix64(uint64_t x) {
    x ^= x >> 32;
    x *= MIX_C1;
    x ^= x >> 29;
    x *= MIX_C2;
    x ^= x >> 32;
    return x;
}

/* FNV-1a, 64-bit parameters from the FNV specification. */
uint64_t rng_fnv1a64(const char *name) {
    uint64_t h = 0xcbf29ce484222325ull;
    for (const unsigned char *p = (const unsigned char *)name; *p; p++) {
        h ^= *p;
        h *= 0x100000001b3ull;
    }
    return h;
}

uint64_t rng_stream_id(const char *name, uint64_t step) {
    return rng_mix64(rng_fnv1a64(name) ^ rng_mix64(step));
}

/* Words 0 and 1 of the block for (seed, stream, counter). */
static void block_words(uint64_t seed, uint64_t stream, uint64_t counter, uint32_t *w0, uint32_t *w1) {
    const uint32_t ctr[4] = {(uint32_t)counter, (uint32_t)(counter >> 32),
                             (uint32_t)stream, (uint32_t)(stream >> 32)};
    const uint32_t key[2] = {(uint32_t)seed, (uint32_t)(seed >> 32)};
    uint32_t out[4];
    philox4x32_10(ctr, key, out);
    *w0 = out[0];
    *w1 = out[1];
}

uint32_t rng_u32(uint64_t seed, uint64_t stream, uint64_t counter) {
    uint32_t w0, w1;
    block_words(seed, stream, counter, &w0, &w1);
    return w0;
}

static float uniform_from_word(uint32_t w) { return (float)(w >> 8) * 0x1p-24f; }

float rng_uniform(uint64_t seed, uint64_t stream, uint64_t counter) {
    return uniform_from_word(rng_u32(seed, stream, counter));
}

/* Box-Muller's steps (rng.h), shared by the scalar and the array form so
 * that both do the same fp32 operations in the same order. */
static inline float bm_u1(uint32_t w0) { return (float)((w0 >> 8) + 1u) * 0x1p-24f; } /* (0, 1], exact */
static inline float bm_u2(uint32_t w1) { return (float)(w1 >> 8) * 0x1p-24f; }        /* [0, 1), exact */
static inline float bm_r2(float log_u1) { return -2.0f * log_u1 + 0.0f; }  /* +0 turns -0 into +0 */
static inline float bm_angle(float u2) { return 6.2831855f * u2; }

float rng_normal_from_words(uint32_t w0, uint32_t w1) {
    float r = pm_sqrtf(bm_r2(pm_logf(bm_u1(w0))));
    return r * pm_cosf(bm_angle(bm_u2(w1)));
}

float rng_normal(uint64_t seed, uint64_t stream, uint64_t counter) {
    uint32_t w0, w1;
    block_words(seed, stream, counter, &w0, &w1);
    return rng_normal_from_words(w0, w1);
}

/* Batched Philox: words 0 and 1 of the blocks of n consecutive counters.
 * The arithmetic per counter is exactly philox4x32_10's; the loop over
 * counters is the outer one, its rounds unrolled inside, so a compiler
 * may vectorise across counters (GCC does, but spends most of its time
 * moving 32-bit words in and out of 64-bit products: the AVX2 form
 * below is ~4x faster). */
static void philox_words_scalar(uint64_t seed, uint64_t stream, uint64_t counter0, size_t n,
                                uint32_t *restrict w0, uint32_t *restrict w1) {
    for (size_t l = 0; l < n; l++) {
        uint64_t counter = counter0 + (uint64_t)l;   /* wraps mod 2^64, as the scalar path */
        uint32_t c[4] = {(uint32_t)counter, (uint32_t)(counter >> 32), (uint32_t)stream,
                         (uint32_t)(stream >> 32)};
        philox_rounds(c, (uint32_t)seed, (uint32_t)(seed >> 32));
        w0[l] = c[0];
        w1[l] = c[1];
    }
}

#if defined(__x86_64__) && defined(__GNUC__) && !defined(PARITY_NO_SIMD_CLONES)
#include <immintrin.h>
#define PHILOX_AVX2 1

/* The 32 x 32 -> 64-bit products m * c of 8 lanes, split into their low
 * and high words: vpmuludq multiplies the even lanes, and the odd lanes
 * shifted down. Integer arithmetic: the same bits as the scalar path. */
__attribute__((target("avx2"))) static inline void mul_lo_hi(__m256i c, __m256i m, __m256i *lo,
                                                             __m256i *hi) {
    __m256i pe = _mm256_mul_epu32(c, m);                        /* lanes 0 2 4 6 */
    __m256i po = _mm256_mul_epu32(_mm256_srli_epi64(c, 32), m); /* lanes 1 3 5 7 */
    *lo = _mm256_blend_epi32(pe, _mm256_slli_epi64(po, 32), 0xaa);
    *hi = _mm256_blend_epi32(_mm256_srli_epi64(pe, 32), po, 0xaa);
}

/* philox_words_scalar for n a multiple of 8, 8 counters per AVX2 vector. */
__attribute__((target("avx2"))) static void philox_words_avx2(uint64_t seed, uint64_t stream,
                                                              uint64_t counter0, size_t n,
                                                              uint32_t *w0, uint32_t *w1) {
    const __m256i m0 = _mm256_set1_epi32((int)PHILOX_M0), m1 = _mm256_set1_epi32((int)PHILOX_M1);
    for (size_t l = 0; l < n; l += 8) {
        uint32_t lo[8], hi[8];
        for (int j = 0; j < 8; j++) {
            uint64_t counter = counter0 + (uint64_t)(l + (size_t)j);   /* wraps mod 2^64 */
            lo[j] = (uint32_t)counter;
            hi[j] = (uint32_t)(counter >> 32);
        }
        __m256i c0 = _mm256_loadu_si256((const __m256i *)lo);
        __m256i c1 = _mm256_loadu_si256((const __m256i *)hi);
        __m256i c2 = _mm256_set1_epi32((int)(uint32_t)stream);
        __m256i c3 = _mm256_set1_epi32((int)(uint32_t)(stream >> 32));
        uint32_t k0 = (uint32_t)seed, k1 = (uint32_t)(seed >> 32);
        for (int r = 0; r < PHILOX_ROUNDS; r++) {
            if (r > 0) { k0 += PHILOX_W0; k1 += PHILOX_W1; }
            __m256i p0lo, p0hi, p1lo, p1hi;
            mul_lo_hi(c0, m0, &p0lo, &p0hi);
            mul_lo_hi(c2, m1, &p1lo, &p1hi);
            __m256i n0 = _mm256_xor_si256(_mm256_xor_si256(p1hi, c1), _mm256_set1_epi32((int)k0));
            __m256i n2 = _mm256_xor_si256(_mm256_xor_si256(p0hi, c3), _mm256_set1_epi32((int)k1));
            c1 = p1lo;
            c3 = p0lo;
            c0 = n0;
            c2 = n2;
        }
        _mm256_storeu_si256((__m256i *)(w0 + l), c0);
        _mm256_storeu_si256((__m256i *)(w1 + l), c1);
    }
}
#endif

static void philox_words(uint64_t seed, uint64_t stream, uint64_t counter0, size_t n,
                         uint32_t *restrict w0, uint32_t *restrict w1) {
    size_t done = 0;
#ifdef PHILOX_AVX2
    if (__builtin_cpu_supports("avx2")) {
        done = n - n % 8;
        philox_words_avx2(seed, stream, counter0, done, w0, w1);
    }
#endif
    philox_words_scalar(seed, stream, counter0 + done, n - done, w0 + done, w1 + done);
}

/* Counters per pass of the fills: a pass's buffers stay in L1
 * (at most 6 x 1 KiB), and the array calls cost little next to the work. */
#define BLOCK 256

PARITY_SIMD_CLONES
void rng_fill_uniform(float *out, size_t n, uint64_t seed, uint64_t stream, uint64_t counter0) {
    uint32_t w0[BLOCK], w1[BLOCK];
    for (size_t i = 0; i < n; i += BLOCK) {
        const size_t m = n - i < BLOCK ? n - i : BLOCK;
        philox_words(seed, stream, counter0 + i, m, w0, w1);
        for (size_t l = 0; l < m; l++) out[i + l] = uniform_from_word(w0[l]);
    }
}

/* rng_normal_from_words over blocks: Philox in lanes, then each step of
 * Box-Muller as one vectorised array call (pmath's array forms give the
 * scalar functions' bits), instead of three scalar calls per element. */
PARITY_SIMD_CLONES
void rng_fill_normal(float *out, size_t n, uint64_t seed, uint64_t stream, uint64_t counter0) {
    float u1[BLOCK], u2[BLOCK], a[BLOCK], b[BLOCK];   /* [BLOCK] each */
    uint32_t w0[BLOCK], w1[BLOCK];
    for (size_t i = 0; i < n; i += BLOCK) {
        const size_t m = n - i < BLOCK ? n - i : BLOCK;
        philox_words(seed, stream, counter0 + i, m, w0, w1);
        for (size_t l = 0; l < m; l++) {
            u1[l] = bm_u1(w0[l]);
            u2[l] = bm_u2(w1[l]);
        }
        pm_logf_array(a, u1, m);
        for (size_t l = 0; l < m; l++) a[l] = bm_r2(a[l]);
        pm_sqrtf_array(b, a, m);                       /* b = r */
        for (size_t l = 0; l < m; l++) u2[l] = bm_angle(u2[l]);
        pm_cosf_array(a, u2, m);                       /* a = cos */
        for (size_t l = 0; l < m; l++) out[i + l] = b[l] * a[l];
    }
}
