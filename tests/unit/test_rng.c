/* test_rng.c - Philox4x32-10 and the position-keyed draws of rng.h.
 *
 * Known answers come from the Random123 distribution's kat_vectors file
 * (the published test vectors of Salmon et al.). The statistical checks
 * use bounds of 6 standard deviations of each estimator, so a correct
 * generator fails them with probability ~1e-9, while a broken one (a bias
 * in the 24-bit mapping, a wrong Box-Muller branch) fails every time.
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "../harness.h"
#include "parity/pmath.h"
#include "parity/rng.h"

static uint32_t fbits(float x) { uint32_t b; memcpy(&b, &x, 4); return b; }

static void test_known_answers(void) {
    static const struct { uint32_t ctr[4], key[2], out[4]; } kat[] = {
        {{0, 0, 0, 0}, {0, 0}, {0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8}},
        {{0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff}, {0xffffffff, 0xffffffff},
         {0x408f276d, 0x41c83b0e, 0xa20bc7c6, 0x6d5451fd}},
        {{0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344}, {0xa4093822, 0x299f31d0},
         {0xd16cfe09, 0x94fdcceb, 0x5001e420, 0x24126ea1}},
    };
    for (int i = 0; i < 3; i++) {
        uint32_t out[4];
        philox4x32_10(kat[i].ctr, kat[i].key, out);
        for (int w = 0; w < 4; w++)
            CHECK(out[w] == kat[i].out[w], "vector %d word %d: %08x, want %08x", i, w, out[w], kat[i].out[w]);
    }
}

/* rng_u32's documented layout: key = seed, ctr = (counter, stream). */
static void test_u32_layout(void) {
    const uint64_t seed = 0x0123456789abcdefull, stream = 0xfedcba9876543210ull;
    for (uint64_t c = 0; c < 1000; c++) {
        uint64_t counter = c * 0x9e3779b97f4a7c15ull;
        uint32_t ctr[4] = {(uint32_t)counter, (uint32_t)(counter >> 32), (uint32_t)stream,
                           (uint32_t)(stream >> 32)};
        uint32_t key[2] = {(uint32_t)seed, (uint32_t)(seed >> 32)}, out[4];
        philox4x32_10(ctr, key, out);
        CHECK(rng_u32(seed, stream, counter) == out[0], "counter %llu", (unsigned long long)counter);
        float u = (float)(out[0] >> 8) / 16777216.0f;
        CHECK(fbits(rng_uniform(seed, stream, counter)) == fbits(u), "uniform at %llu", (unsigned long long)counter);
        CHECK(fbits(rng_normal(seed, stream, counter)) == fbits(rng_normal_from_words(out[0], out[1])),
              "normal at %llu", (unsigned long long)counter);
    }
}

/* Box-Muller written out independently, in double with libm: the fp32
 * pmath version must agree to a few fp32 ulps (it is not the definition,
 * only a check that the transform is the documented one). */
static void test_normal_transform(void) {
    uint64_t s = 1;
    double worst = 0;
    for (int i = 0; i < 200000; i++) {
        s = s * 6364136223846793005ull + 1442695040888963407ull;
        uint32_t w0 = (uint32_t)(s >> 32), w1 = (uint32_t)s;
        if (i == 0) w0 = 0;            /* u1 = 2^-24: the largest radius */
        if (i == 1) w0 = 0xffffffffu;  /* u1 = 1: radius 0 */
        double u1 = ((w0 >> 8) + 1.0) / 16777216.0, u2 = (w1 >> 8) / 16777216.0;
        double want = sqrt(-2.0 * log(u1)) * cos(2.0 * 3.14159265358979323846 * u2);
        float got = rng_normal_from_words(w0, w1);
        CHECK(isfinite(got) && fabsf(got) <= 5.7683f, "w0 %08x w1 %08x: %a", w0, w1, got);
        double err = fabs(got - want);
        if (err > worst) worst = err;
    }
    /* fp32 rounding of u2 * 2pi moves the angle by <= 2^-22 radians; times
     * a radius <= 5.77 that bounds the difference by ~1.5e-6, plus a few
     * fp32 ulps of r and cos. */
    CHECK(worst < 4e-6, "max |pmath Box-Muller - libm double| = %g", worst);
    CHECK(fbits(rng_normal_from_words(0xffffffffu, 0x12345678u)) == 0, "u1 = 1 must give +0");
}

static void test_fill_equals_scalar(void) {
    enum { N = 1000 };
    static float u[N], z[N];
    const uint64_t seed = 42, stream = rng_stream_id("test.fill", 7);
    /* Counter origins around the 32-bit carry and the 64-bit wrap. */
    const uint64_t origins[] = {0, 1, 0xfffffff0ull, 0xfffffffffffffe00ull, 0x8000000000000003ull};
    for (int o = 0; o < 5; o++) {
        /* tails of every length up to 10, then across the fills' 8-counter
         * lanes and 256-counter blocks */
        static const size_t lens[] = {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 19, 37, 255, 256, 257, 263, 520};
        for (size_t li = 0; li < sizeof lens / sizeof *lens; li++) {
            const size_t n = lens[li];
            rng_fill_uniform(u, n, seed, stream, origins[o]);
            rng_fill_normal(z, n, seed, stream, origins[o]);
            for (size_t i = 0; i < n; i++) {
                CHECK(fbits(u[i]) == fbits(rng_uniform(seed, stream, origins[o] + i)), "uniform o%d i%zu", o, i);
                CHECK(fbits(z[i]) == fbits(rng_normal(seed, stream, origins[o] + i)), "normal o%d i%zu", o, i);
            }
        }
        rng_fill_uniform(u, N, seed, stream, origins[o]);
        rng_fill_normal(z, N, seed, stream, origins[o]);
        int bad = 0;
        for (size_t i = 0; i < N; i++) {
            bad += fbits(u[i]) != fbits(rng_uniform(seed, stream, origins[o] + i));
            bad += fbits(z[i]) != fbits(rng_normal(seed, stream, origins[o] + i));
        }
        CHECK(bad == 0, "origin %d: %d elements differ from the scalar definition", o, bad);
    }
}

/* The fills' vectorised paths (AVX2 Philox, pmath's array forms) against
 * the scalar definition at random counters, seeds and streams: 64 fills
 * of odd lengths, ~260,000 numbers of each kind. */
static void test_fill_random_origins(void) {
    enum { N = 4099 };
    static float u[N], z[N];
    uint64_t s = 0x2545f4914f6cdd1dull;
    long bad = 0;
    for (int t = 0; t < 64; t++) {
        s ^= s << 13, s ^= s >> 7, s ^= s << 17;
        const uint64_t seed = s * 0x9e3779b97f4a7c15ull, stream = rng_mix64(s), origin = rng_mix64(s + 1);
        const size_t n = N - (size_t)(s % 97);
        rng_fill_uniform(u, n, seed, stream, origin);
        rng_fill_normal(z, n, seed, stream, origin);
        for (size_t i = 0; i < n; i++) {
            bad += fbits(u[i]) != fbits(rng_uniform(seed, stream, origin + i));
            bad += fbits(z[i]) != fbits(rng_normal(seed, stream, origin + i));
        }
    }
    CHECK(bad == 0, "%ld numbers differ from the scalar definition", bad);
}

/* Box-Muller's array path on its WHOLE input domain: u1 takes only the
 * 2^24 values ((w0 >> 8) + 1) 2^-24 and the angle only the 2^24 values
 * 6.2831855f ((w1 >> 8) 2^-24) (rng.h), so every radius and every cosine
 * rng_fill_normal can compute is checked against the scalar functions
 * rng_normal uses (words 0 and 0xffffffff, the ends, included). With
 * test_fill_* (Philox lanes, the final product) this proves the fill
 * equals rng_normal for every counter. */
static void test_box_muller_domain_exhaustive(void) {
    enum { N = 4096 };
    static float x[N], y[N], r[N], a[N], c[N];
    long bad = 0;
    for (uint32_t w = 0; w < (1u << 24); w += N) {
        for (uint32_t i = 0; i < N; i++) {
            x[i] = (float)((w + i) + 1u) * 0x1p-24f;          /* u1 */
            a[i] = 6.2831855f * ((float)(w + i) * 0x1p-24f);  /* angle */
        }
        pm_logf_array(y, x, N);
        for (int i = 0; i < N; i++) y[i] = -2.0f * y[i] + 0.0f;
        pm_sqrtf_array(r, y, N);
        pm_cosf_array(c, a, N);
        for (int i = 0; i < N; i++) {
            bad += fbits(r[i]) != fbits(pm_sqrtf(-2.0f * pm_logf(x[i]) + 0.0f));
            bad += fbits(c[i]) != fbits(pm_cosf(a[i]));
        }
    }
    CHECK(bad == 0, "%ld radii or cosines differ from the scalar functions", bad);
}

/* I3: shards filled separately, at their global offsets, equal the same
 * slices of one full fill, for any cut points. */
static void test_sharded_fill_matches_full(void) {
    enum { N = 10007 };
    static float full_u[N], full_z[N], part_u[N], part_z[N];
    const uint64_t seed = 1234, stream = rng_stream_id("h0.mlp.w_in", 0), base = 5000000000ull;
    rng_fill_uniform(full_u, N, seed, stream, base);
    rng_fill_normal(full_z, N, seed, stream, base);
    uint64_t s = 99;
    for (int trial = 0; trial < 20; trial++) {
        size_t a = 0;
        while (a < N) {   /* random cut points, like uneven or tiled shards */
            s = s * 6364136223846793005ull + 1442695040888963407ull;
            size_t len = 1 + (size_t)((s >> 33) % (trial < 10 ? 700 : 13));
            if (a + len > N) len = N - a;
            rng_fill_uniform(part_u + a, len, seed, stream, base + a);
            rng_fill_normal(part_z + a, len, seed, stream, base + a);
            a += len;
        }
        CHECK(memcmp(full_u, part_u, sizeof full_u) == 0, "uniform shards differ (trial %d)", trial);
        CHECK(memcmp(full_z, part_z, sizeof full_z) == 0, "normal shards differ (trial %d)", trial);
    }
}

static void test_streams_and_seeds_differ(void) {
    enum { N = 100000 };
    static float a[N], b[N], c[N];
    const uint64_t s1 = rng_stream_id("wte", 0), s2 = rng_stream_id("wpe", 0), s3 = rng_stream_id("wte", 1);
    CHECK(s1 != s2 && s1 != s3 && s2 != s3, "stream ids collide");
    rng_fill_uniform(a, N, 7, s1, 0);
    rng_fill_uniform(b, N, 7, s2, 0);
    rng_fill_uniform(c, N, 8, s1, 0);
    int same_ab = 0, same_ac = 0;
    for (int i = 0; i < N; i++) { same_ab += a[i] == b[i]; same_ac += a[i] == c[i]; }
    /* Independent 24-bit values agree with probability 2^-24: expect 0.006
     * of 10^5; 5 would be a 1e-13 event. */
    CHECK(same_ab < 5, "streams: %d equal elements", same_ab);
    CHECK(same_ac < 5, "seeds: %d equal elements", same_ac);
    /* Neighbouring steps of one tensor, and steps across names, never
     * share a stream id. */
    int dup = 0;
    uint64_t prev = 0;
    for (uint64_t step = 0; step < 1000; step++) {
        uint64_t id = rng_stream_id("layer.dropout", step);
        dup += step && id == prev;
        dup += id == rng_stream_id("layer.dropouu", step);
        prev = id;
    }
    CHECK(dup == 0, "%d stream-id collisions", dup);
}

/* rng_mix64 is a bijection: apply the inverse of each step (derived here,
 * not in rng.c) and get the input back. */
static uint64_t inv_xorshift(uint64_t y, int s) {
    uint64_t x = y;
    for (int i = 0; i < 64 / s + 1; i++) x = y ^ (x >> s);
    return x;
}
static uint64_t inv_odd(uint64_t a) {   /* a^-1 mod 2^64 by Newton: x <- x (2 - a x) */
    uint64_t x = a;                     /* correct to 3 bits for odd a */
    for (int i = 0; i < 6; i++) x *= 2 - a * x;
    return x;
}
static void test_mix64_bijective(void) {
    const uint64_t c1 = 0x6a09e667f3bcc909ull, c2 = 0xbb67ae8584caa73bull;
    CHECK(c1 * inv_odd(c1) == 1 && c2 * inv_odd(c2) == 1, "modular inverse");
    uint64_t s = 3;
    for (int i = 0; i < 100000; i++) {
        s = s * 6364136223846793005ull + 1442695040888963407ull;
        uint64_t x = i < 64 ? (1ull << i) : s, y = rng_mix64(x);
        y = inv_xorshift(y, 32);
        y *= inv_odd(c2);
        y = inv_xorshift(y, 29);
        y *= inv_odd(c1);
        y = inv_xorshift(y, 32);
        CHECK(y == x, "mix64 inverse fails at %016llx", (unsigned long long)x);
    }
    /* Avalanche: one flipped input bit flips about half the output bits. */
    double total = 0;
    int n = 0;
    for (int i = 0; i < 2000; i++) {
        s = s * 6364136223846793005ull + 1442695040888963407ull;
        for (int b = 0; b < 64; b++, n++) total += __builtin_popcountll(rng_mix64(s) ^ rng_mix64(s ^ (1ull << b)));
    }
    CHECK(fabs(total / n - 32.0) < 0.5, "mean flipped bits %.3f", total / n);
    CHECK(rng_fnv1a64("") == 0xcbf29ce484222325ull && rng_fnv1a64("a") == 0xaf63dc4c8601ec8cull,
          "FNV-1a test vectors");
}

static void test_uniform_statistics(void) {
    enum { N = 1000000 };
    float *u = malloc(N * sizeof *u);
    rng_fill_uniform(u, N, 2024, rng_stream_id("stats.uniform", 0), 0);
    double sum = 0, sum2 = 0;
    long bins[256] = {0};
    int out_of_range = 0;
    for (int i = 0; i < N; i++) {
        out_of_range += !(u[i] >= 0.0f && u[i] < 1.0f);
        sum += u[i];
        bins[(int)(u[i] * 256.0f)]++;
    }
    double mean = sum / N;
    for (int i = 0; i < N; i++) sum2 += (u[i] - mean) * (u[i] - mean);
    double var = sum2 / (N - 1);
    /* sd(mean) = sqrt(1/12/N); sd(var) = sqrt((1/80 - 1/144)/N). */
    CHECK(out_of_range == 0, "%d values outside [0, 1)", out_of_range);
    CHECK(fabs(mean - 0.5) < 6 * sqrt(1.0 / 12 / N), "mean %.6f", mean);
    CHECK(fabs(var - 1.0 / 12) < 6 * sqrt((1.0 / 80 - 1.0 / 144) / N), "variance %.6f", var);
    /* chi-square over 256 bins: 255 dof, mean 255, sd sqrt(510). */
    double chi2 = 0, e = N / 256.0;
    for (int b = 0; b < 256; b++) chi2 += (bins[b] - e) * (bins[b] - e) / e;
    CHECK(fabs(chi2 - 255) < 6 * sqrt(510.0), "chi2 %.1f", chi2);
    printf("  uniform: mean %.6f var %.6f (1/12 = %.6f) chi2(255) %.1f\n", mean, var, 1.0 / 12, chi2);
    free(u);
}

static void test_normal_statistics(void) {
    enum { N = 1000000 };
    float *z = malloc(N * sizeof *z);
    rng_fill_normal(z, N, 2024, rng_stream_id("stats.normal", 0), 0);
    double m1 = 0, m2 = 0, m3 = 0, m4 = 0;
    int beyond3 = 0, nonfinite = 0;
    for (int i = 0; i < N; i++) {
        double x = z[i];
        nonfinite += !isfinite(z[i]);
        m1 += x; m2 += x * x; m3 += x * x * x; m4 += x * x * x * x;
        beyond3 += fabs(x) > 3.0;
    }
    m1 /= N; m2 /= N; m3 /= N; m4 /= N;
    /* Moments of N(0,1): 0, 1, 0, 3; sd of the estimators sqrt(E x^2k - (E x^k)^2 / N):
     * sqrt(1/N), sqrt(2/N), sqrt(15/N), sqrt(96/N). P(|x| > 3) = 0.0026998. */
    CHECK(nonfinite == 0, "%d non-finite", nonfinite);
    CHECK(fabs(m1) < 6 * sqrt(1.0 / N), "mean %.5f", m1);
    CHECK(fabs(m2 - 1) < 6 * sqrt(2.0 / N), "E x^2 %.5f", m2);
    CHECK(fabs(m3) < 6 * sqrt(15.0 / N), "E x^3 %.5f", m3);
    CHECK(fabs(m4 - 3) < 6 * sqrt(96.0 / N), "E x^4 %.5f (kurtosis)", m4);
    double p3 = 0.0026997960632601866, sd3 = sqrt(p3 * (1 - p3) * N);
    CHECK(fabs(beyond3 - p3 * N) < 6 * sd3, "%d beyond 3 sigma, want %.0f", beyond3, p3 * N);
    printf("  normal: mean %.5f E[x^2] %.5f E[x^3] %.5f E[x^4] %.4f beyond 3sd %d (expect %.0f)\n", m1, m2, m3,
           m4, beyond3, p3 * N);
    free(z);
}

static void test_speed(void) {
    enum { N = 1 << 18 };
    static float buf[N];
    struct timespec a, b;
    volatile uint32_t sink = 0;
    double ns[4];
    memset(buf, 0, sizeof buf);   /* fault the pages in before timing */
    for (int k = 0; k < 4; k++) {
        clock_gettime(CLOCK_MONOTONIC, &a);
        if (k == 0) for (int i = 0; i < N; i++) sink += rng_u32(1, 2, (uint64_t)i);
        if (k == 1) rng_fill_uniform(buf, N, 1, 2, 0);
        if (k == 2) for (int i = 0; i < N; i++) buf[i] = rng_normal(1, 2, (uint64_t)i);
        if (k == 3) rng_fill_normal(buf, N, 1, 2, 0);
        clock_gettime(CLOCK_MONOTONIC, &b);
        ns[k] = ((double)(b.tv_sec - a.tv_sec) * 1e9 + (double)(b.tv_nsec - a.tv_nsec)) / N;
    }
    printf("  speed: rng_u32 %.1f ns, rng_fill_uniform %.1f ns/elem, rng_normal %.1f ns, rng_fill_normal %.1f "
           "ns/elem\n", ns[0], ns[1], ns[2], ns[3]);
    (void)sink;
}

int main(void) {
    RUN(test_known_answers);
    RUN(test_u32_layout);
    RUN(test_normal_transform);
    RUN(test_fill_equals_scalar);
    RUN(test_fill_random_origins);
    RUN(test_box_muller_domain_exhaustive);
    RUN(test_sharded_fill_matches_full);
    RUN(test_streams_and_seeds_differ);
    RUN(test_mix64_bijective);
    RUN(test_uniform_statistics);
    RUN(test_normal_statistics);
    RUN(test_speed);
    return harness_done();
}
