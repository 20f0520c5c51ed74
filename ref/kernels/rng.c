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

#define PHILOX_M0 0xD2511F53u
#define PHILOX_M1 0xCD9E8D57u
#define PHILOX_W0 0x9E3779B9u
#define PHILOX_W1 0xBB67AE85u
#define PHILOX_ROUNDS 10

void philox4x32_10(const uint32_t ctr[4], const uint32_t key[2], uint32_t out[4]) {
    uint32_t c0 = ctr[0], c1 = ctr[1], c2 = ctr[2], c3 = ctr[3];
    uint32_t k0 = key[0], k1 = key[1];
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
    out[0] = c0; out[1] = c1; out[2] = c2; out[3] = c3;
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

float rng_normal_from_words(uint32_t w0, uint32_t w1) {
    float u1 = (float)((w0 >> 8) + 1u) * 0x1p-24f;   /* (0, 1], exact */
    float u2 = (float)(w1 >> 8) * 0x1p-24f;          /* [0, 1), exact */
    float r = pm_sqrtf(-2.0f * pm_logf(u1) + 0.0f);
    return r * pm_cosf(6.2831855f * u2);
}

float rng_normal(uint64_t seed, uint64_t stream, uint64_t counter) {
    uint32_t w0, w1;
    block_words(seed, stream, counter, &w0, &w1);
    return rng_normal_from_words(w0, w1);
}

/* Batched Philox: LANES consecutive counters go through the rounds side
 * by side. The arithmetic per lane is exactly philox4x32_10's; the lane
 * loops have no dependences between lanes, so compilers turn them into
 * SIMD multiplies. Only words 0 and 1 are kept. */
#define LANES 8

static void philox_lanes(uint64_t seed, uint64_t stream, uint64_t counter0,
                         uint32_t w0[LANES], uint32_t w1[LANES]) {
    uint32_t c0[LANES], c1[LANES], c2[LANES], c3[LANES];
    for (int l = 0; l < LANES; l++) {
        uint64_t counter = counter0 + (uint64_t)l;   /* wraps mod 2^64, as the scalar path */
        c0[l] = (uint32_t)counter;
        c1[l] = (uint32_t)(counter >> 32);
        c2[l] = (uint32_t)stream;
        c3[l] = (uint32_t)(stream >> 32);
    }
    uint32_t k0 = (uint32_t)seed, k1 = (uint32_t)(seed >> 32);
    for (int r = 0; r < PHILOX_ROUNDS; r++) {
        if (r > 0) { k0 += PHILOX_W0; k1 += PHILOX_W1; }
        for (int l = 0; l < LANES; l++) {
            uint64_t p0 = (uint64_t)PHILOX_M0 * c0[l];
            uint64_t p1 = (uint64_t)PHILOX_M1 * c2[l];
            uint32_t n0 = (uint32_t)(p1 >> 32) ^ c1[l] ^ k0;
            uint32_t n2 = (uint32_t)(p0 >> 32) ^ c3[l] ^ k1;
            c1[l] = (uint32_t)p1;
            c3[l] = (uint32_t)p0;
            c0[l] = n0;
            c2[l] = n2;
        }
    }
    for (int l = 0; l < LANES; l++) { w0[l] = c0[l]; w1[l] = c1[l]; }
}

void rng_fill_uniform(float *out, size_t n, uint64_t seed, uint64_t stream, uint64_t counter0) {
    size_t i = 0;
    uint32_t w0[LANES], w1[LANES];
    for (; i + LANES <= n; i += LANES) {
        philox_lanes(seed, stream, counter0 + i, w0, w1);
        for (int l = 0; l < LANES; l++) out[i + l] = uniform_from_word(w0[l]);
    }
    for (; i < n; i++) out[i] = rng_uniform(seed, stream, counter0 + i);
}

void rng_fill_normal(float *out, size_t n, uint64_t seed, uint64_t stream, uint64_t counter0) {
    size_t i = 0;
    uint32_t w0[LANES], w1[LANES];
    for (; i + LANES <= n; i += LANES) {
        philox_lanes(seed, stream, counter0 + i, w0, w1);
        for (int l = 0; l < LANES; l++) out[i + l] = rng_normal_from_words(w0[l], w1[l]);
    }
    for (; i < n; i++) out[i] = rng_normal(seed, stream, counter0 + i);
}
