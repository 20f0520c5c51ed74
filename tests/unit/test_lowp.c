/* test_lowp.c - bf16 and fp16 rounding (pmath.h, ref/kernels/lowp.c), the
 * storage dtypes of mixed precision.
 *
 * Held against independent definitions: bf16 as the nearest of the two
 * neighbouring multiples of its quantum, chosen in fp64 (every fp32 and
 * both neighbours are exact there); fp16 as the compiler's _Float16
 * conversion (IEEE round to nearest even) where it has one, and the same
 * fp64 nearest-neighbour rule otherwise. Every fp32 bit pattern with a
 * stride, the edges of both ranges, and ties. */
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "../harness.h"
#include "parity/pmath.h"

static uint32_t fbits(float x) { uint32_t b; memcpy(&b, &x, 4); return b; }
static float ffrom(uint32_t b) { float x; memcpy(&x, &b, 4); return x; }

/* The nearest multiple of quantum q (a power of two) to x, ties to the
 * even multiple; in fp64, where all of it is exact. */
static double nearest(double x, double q) {
    const double lo = floor(x / q) * q, hi = lo + q;
    if (x - lo < hi - x) return lo;
    if (x - lo > hi - x) return hi;
    return fmod(lo / q, 2.0) == 0.0 ? lo : hi;
}

static float ref_bf16(float x) {
    if (isnan(x)) return ffrom(PM_NAN_BITS);
    if (isinf(x) || x == 0.0f) return x;
    int e;
    frexp(fabs((double)x), &e);                 /* |x| in [2^(e-1), 2^e) */
    const double q = ldexp(1.0, (e - 1 < -126 ? -126 : e - 1) - 7);
    const double r = nearest(fabs((double)x), q);
    const float out = r >= 0x1p128 ? INFINITY : (float)r;
    return x < 0 ? -out : out;
}

static float ref_fp16(float x) {
#ifdef __FLT16_MAX__
    if (isnan(x)) return ffrom(PM_NAN_BITS);
    return (float)(_Float16)x;
#else
    if (isnan(x)) return ffrom(PM_NAN_BITS);
    if (isinf(x) || x == 0.0f) return x;
    int e;
    frexp(fabs((double)x), &e);
    const double q = ldexp(1.0, (e - 1 < -14 ? -14 : e - 1) - 10);
    const double r = nearest(fabs((double)x), q);
    const float out = r >= 65520.0 ? INFINITY : (float)r;
    return x < 0 ? copysignf(out, -1.0f) : out;
#endif
}

static void sweep(float (*mine)(float), float (*ref)(float), const char *what) {
    int bad = 0;
    for (uint64_t b = 0; b <= 0xffffffffull; b += 997) { /* a prime stride: every exponent, many significands */
        const float x = ffrom((uint32_t)b);
        const uint32_t got = fbits(mine(x)), want = fbits(ref(x));
        if (got != want && bad++ < 5)
            CHECK(0, "%s(%08x) = %08x, want %08x", what, (uint32_t)b, got, want);
    }
    CHECK(bad == 0, "%s: %d bit patterns differ", what, bad);
}

static void test_bf16_sweep(void) { sweep(pm_round_bf16, ref_bf16, "bf16"); }
static void test_fp16_sweep(void) { sweep(pm_round_fp16, ref_fp16, "fp16"); }

static void test_edges(void) {
    /* bf16: ties to even at 1 + 2^-8 (down) and 1 + 3 2^-8 (up); the
     * largest finite rounds to inf; subnormals keep 8 bits */
    CHECK(pm_round_bf16(1.0f + 0x1p-8f) == 1.0f, "tie down");
    CHECK(pm_round_bf16(1.0f + 3 * 0x1p-8f) == 1.0f + 0x1p-6f, "tie up");
    CHECK(isinf(pm_round_bf16(3.4028235e38f)), "FLT_MAX -> inf");
    CHECK(pm_round_bf16(0x1p-133f) == 0x1p-133f && pm_round_bf16(0x1p-149f) == 0.0f,
          "bf16 subnormals: quantum 2^-133");
    /* fp16: 65504 stays, 65519.99 rounds to it, 65520 to inf; 2^-24 and
     * half of it (to 0, even); 1.5 2^-24 to 2 2^-24; the sign of -0 kept */
    CHECK(pm_round_fp16(65504.0f) == 65504.0f, "65504");
    CHECK(pm_round_fp16(65519.99f) == 65504.0f, "below the threshold");
    CHECK(isinf(pm_round_fp16(65520.0f)) && pm_round_fp16(-65520.0f) < 0, "65520 -> inf");
    CHECK(pm_round_fp16(0x1p-24f) == 0x1p-24f, "the smallest subnormal");
    CHECK(pm_round_fp16(0x1p-25f) == 0.0f, "half of it: to even (0)");
    CHECK(pm_round_fp16(1.5f * 0x1p-24f) == 0x1p-23f, "1.5 quanta: to even (2)");
    CHECK(fbits(pm_round_fp16(-0x1p-30f)) == 0x80000000u, "-tiny -> -0");
    CHECK(fbits(pm_round_fp16(NAN)) == PM_NAN_BITS && fbits(pm_round_bf16(-NAN)) == PM_NAN_BITS,
          "NaN -> the canonical NaN");
    float v[3] = {1.0f + 0x1p-11f, 3.0f, 1e-9f};
    pm_round_fp16_array(v, 3);
    CHECK(v[0] == 1.0f && v[1] == 3.0f && v[2] == 0.0f, "array");
}

int main(void) {
    RUN(test_bf16_sweep);
    RUN(test_fp16_sweep);
    RUN(test_edges);
    return harness_done();
}
