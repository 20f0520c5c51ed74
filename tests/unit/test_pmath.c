/* test_pmath.c - pmath.h's accuracy claims, checked against an independent
 * reference: glibc's x87 long double functions (64-bit significands),
 * rounded to float. That reference is off by at most ~2^-63 relative, so
 * rounding it gives the correctly rounded fp32 result except with
 * probability ~2^-39 per input, far below anything these sweeps can meet.
 *
 * Each sweep walks the float bit patterns of a range with an odd stride
 * (so every mantissa pattern class is visited) plus random samples, and
 * reports: inputs, max ULP distance from the correctly rounded result,
 * how many were not correctly rounded, and the max error in ULPs as a real
 * number. PMATH_DENSE=1 in the environment makes every stride 16x finer
 * (for the measured figures in the docs; too slow for every `make check`).
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "../harness.h"
#include "parity/pmath.h"

static int64_t dense_div = 1;

static uint32_t bits_of(float x) { uint32_t b; memcpy(&b, &x, 4); return b; }
static float from_bits(uint32_t b) { float x; memcpy(&x, &b, 4); return x; }

/* Floats in order as integers: ..., -ulp -> -1, +-0 -> 0, +ulp -> 1, ... */
static int64_t ord(float x) {
    uint32_t b = bits_of(x);
    return (b & 0x80000000u) ? -(int64_t)(b & 0x7fffffffu) : (int64_t)b;
}
static float from_ord(int64_t o) {
    return o >= 0 ? from_bits((uint32_t)o) : from_bits(0x80000000u | (uint32_t)(-o));
}

static int64_t ulp_dist(float a, float b) {
    if (isnan(a) || isnan(b)) return (isnan(a) && isnan(b)) ? 0 : INT64_MAX;
    int64_t d = ord(a) - ord(b);
    return d < 0 ? -d : d;
}

/* Round the long double reference to float, overflow made explicit. */
static float ld_to_f32(long double v) {
    if (v >= 0x1.ffffffp127L) return INFINITY;
    if (v <= -0x1.ffffffp127L) return -INFINITY;
    return (float)v;
}

/* The spacing of floats at y (the ulp of the correctly rounded result). */
static long double ulp_at(float y) {
    int e = (int)((bits_of(y) >> 23) & 0xff);
    return ldexpl(1.0L, (e == 0 ? 1 : e) - 150);
}

static uint64_t rng_state = 0x243f6a8885a308d3ull;
static uint64_t next_u64(void) {   /* splitmix64-style generator for samples */
    uint64_t z = (rng_state += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

typedef float (*fn_t)(float);
typedef long double (*ref_t)(long double);

typedef struct {
    uint64_t n, not_cr;
    int64_t max_ulp;
    double max_err;      /* |got - exact| / ulp, as a real number */
    float worst_x;
} stat_t;

static void record(stat_t *s, float x, float got, long double exact) {
    float want = ld_to_f32(exact);
    int64_t d = ulp_dist(got, want);
    s->n++;
    if (d) s->not_cr++;
    if (d > s->max_ulp) { s->max_ulp = d; s->worst_x = x; }
    if (isfinite(want) && isfinite(got)) {
        double e = (double)(fabsl((long double)got - exact) / ulp_at(want));
        if (e > s->max_err) s->max_err = e;
    }
}

/* Every stride-th float of [lo, hi], starting at lo. */
static void sweep(stat_t *s, fn_t f, ref_t r, float lo, float hi, int64_t stride) {
    stride = stride / dense_div | 1;
    for (int64_t o = ord(lo); o <= ord(hi); o += stride) {
        float x = from_ord(o);
        record(s, x, f(x), r(x));
    }
}

/* n random floats of [lo, hi]: half uniform in bit pattern (log-uniform),
 * half uniform in value. */
static void sample(stat_t *s, fn_t f, ref_t r, float lo, float hi, int n) {
    int64_t olo = ord(lo), span = ord(hi) - olo + 1;
    for (int i = 0; i < n; i++) {
        float x;
        if (i & 1) x = from_ord(olo + (int64_t)(next_u64() % (uint64_t)span));
        else x = (float)((double)lo + ((double)hi - (double)lo) * ((double)(next_u64() >> 11) * 0x1p-53));
        if (x < lo) x = lo;
        if (x > hi) x = hi;
        record(s, x, f(x), r(x));
    }
}

static void report(const char *name, const char *range, const stat_t *s) {
    printf("  %-18s %-28s n=%-9llu max %lld ulp (%.4f real), not correctly rounded %llu",
           name, range, (unsigned long long)s->n, (long long)s->max_ulp, s->max_err,
           (unsigned long long)s->not_cr);
    if (s->max_ulp) printf(" (e.g. x = %a)", s->worst_x);
    printf("\n");
}

/* The claims of pmath.h: <= 1 ULP, and misrounding rare. The fp64 result
 * errs by < 2^-50 relative, so about one input in 2^24 lies close enough to
 * a midpoint; 1 in 10^5 leaves ample margin yet would catch a sloppy
 * polynomial (which misrounds percent-level fractions). */
static void check_stat(const char *name, const stat_t *s, int64_t max_ulp) {
    CHECK(s->max_ulp <= max_ulp, "%s: %lld ulp at x = %a (allowed %lld)", name,
          (long long)s->max_ulp, s->worst_x, (long long)max_ulp);
    CHECK(s->not_cr * 100000 <= s->n, "%s: %llu of %llu not correctly rounded", name,
          (unsigned long long)s->not_cr, (unsigned long long)s->n);
}

/* ------------------------------------------------------------ references */

static long double r_exp(long double x) { return expl(x); }
static long double r_log(long double x) { return logl(x); }
static long double r_tanh(long double x) { return tanhl(x); }
static long double r_erf(long double x) { return erfl(x); }
static long double r_sin(long double x) { return sinl(x); }
static long double r_cos(long double x) { return cosl(x); }
static long double r_sqrt(long double x) { return sqrtl(x); }

#include "../pmath/pmath_ref.h"

/* ----------------------------------------------------------------- tests */

static void test_exp(void) {
    stat_t s = {0};
    sweep(&s, pm_expf, r_exp, -104.0f, 89.0f, 1021);
    sample(&s, pm_expf, r_exp, -104.0f, 89.0f, 200000);
    report("pm_expf", "[-104, 89] (all outcomes)", &s);
    check_stat("expf", &s, 1);

    stat_t soft = {0};                    /* softmax arguments, x - max <= 0 */
    sweep(&soft, pm_expf, r_exp, -20.0f, 0.0f, 257);
    sweep(&soft, pm_expf, r_exp, -100.0f, -20.0f, 1021);
    report("pm_expf", "softmax [-100, 0]", &soft);
    check_stat("expf softmax", &soft, 1);

    stat_t edge = {0};                    /* every float near the thresholds */
    sweep(&edge, pm_expf, r_exp, 88.0f, 89.0f, 1);
    sweep(&edge, pm_expf, r_exp, -104.0f, -103.0f, 1);
    sweep(&edge, pm_expf, r_exp, -88.0f, -87.0f, 1);   /* FLT_MIN boundary */
    report("pm_expf", "every float near thresholds", &edge);
    check_stat("expf edges", &edge, 1);

    /* The thresholds: finite/inf and subnormal/0 switch exactly where
     * the correctly rounded result does. */
    float hi = 88.0f, lo = -103.0f;
    while (isfinite(ld_to_f32(expl(nextafterf(hi, INFINITY))))) hi = nextafterf(hi, INFINITY);
    while (ld_to_f32(expl(nextafterf(lo, -INFINITY))) > 0.0f) lo = nextafterf(lo, -INFINITY);
    CHECK(isfinite(pm_expf(hi)) && isinf(pm_expf(nextafterf(hi, INFINITY))), "overflow at %a", hi);
    CHECK(pm_expf(lo) == 0x1p-149f && pm_expf(nextafterf(lo, -INFINITY)) == 0.0f,
          "underflow at %a: %a", lo, pm_expf(lo));
}

static void test_log(void) {
    stat_t s = {0};
    sweep(&s, pm_logf, r_log, 0x1p-149f, 1e6f, 1021);
    sample(&s, pm_logf, r_log, 0x1p-149f, 3.4e38f, 200000);
    report("pm_logf", "(0, 1e6] + samples to FLT_MAX", &s);
    check_stat("logf", &s, 1);

    stat_t one = {0};
    sweep(&one, pm_logf, r_log, 0.99f, 1.01f, 1);           /* log x ~ x - 1 */
    sweep(&one, pm_logf, r_log, 0x1p-149f, 0x1p-126f, 31);  /* subnormals */
    report("pm_logf", "every float in [0.99, 1.01], subn", &one);
    check_stat("logf near 1 / subnormal", &one, 1);
}

static void test_tanh_erf(void) {
    stat_t t = {0}, e = {0};
    sweep(&t, pm_tanhf, r_tanh, -20.0f, 20.0f, 1021);
    sample(&t, pm_tanhf, r_tanh, -3.4e38f, 3.4e38f, 100000);
    sweep(&e, pm_erff, r_erf, -20.0f, 20.0f, 1021);
    sample(&e, pm_erff, r_erf, -3.4e38f, 3.4e38f, 100000);
    report("pm_tanhf", "[-20, 20] + full-range samples", &t);
    report("pm_erff", "[-20, 20] + full-range samples", &e);
    check_stat("tanhf", &t, 1);
    check_stat("erff", &e, 1);
}

static void test_gelu(void) {
    stat_t g = {0};
    sweep(&g, pm_gelu_tanh, r_gelu, -20.0f, 20.0f, 1021);
    sample(&g, pm_gelu_tanh, r_gelu, -3.4e38f, 3.4e38f, 100000);
    report("pm_gelu_tanh", "[-20, 20] + full-range samples", &g);
    check_stat("gelu_tanh", &g, 1);

    /* The gradient: <= 2 ULP (pmath.h), also next to its zero at
     * x ~ -0.75246 where its two terms cancel: every float there. */
    stat_t d = {0};
    sweep(&d, pm_gelu_tanh_grad, r_gelu_grad, -20.0f, 20.0f, 1021);
    sample(&d, pm_gelu_tanh_grad, r_gelu_grad, -3.4e38f, 3.4e38f, 100000);
    sweep(&d, pm_gelu_tanh_grad, r_gelu_grad, -0.7528f, -0.7508f, 1);
    report("pm_gelu_tanh_grad", "[-20,20], full, every x at 0", &d);
    check_stat("gelu_tanh_grad", &d, 2);
}

static void test_sqrt_rsqrt(void) {
    stat_t s = {0}, r = {0};
    sweep(&s, pm_sqrtf, r_sqrt, 0x1p-149f, 3.4028235e38f, 1021);
    sweep(&s, pm_sqrtf, r_sqrt, 0x1p-149f, 0x1p-126f, 61);
    sample(&s, pm_sqrtf, r_sqrt, 0x1p-149f, 3.4028235e38f, 200000);
    report("pm_sqrtf", "all positive floats", &s);
    CHECK(s.max_ulp == 0, "sqrt not correctly rounded at %a", s.worst_x);

    sweep(&r, pm_rsqrtf, r_rsqrt, 1e-12f, 1e12f, 509);
    sample(&r, pm_rsqrtf, r_rsqrt, 0x1p-149f, 3.4028235e38f, 200000);
    report("pm_rsqrtf", "[1e-12, 1e12] + all positive", &r);
    check_stat("rsqrtf", &r, 1);
}

static void test_sin_cos(void) {
    const float two_pi = 6.2831855f;
    stat_t s = {0}, c = {0};
    sweep(&s, pm_sinf, r_sin, -two_pi, two_pi, 1021);
    sweep(&c, pm_cosf, r_cos, -two_pi, two_pi, 1021);
    report("pm_sinf", "[-2pi, 2pi]", &s);
    report("pm_cosf", "[-2pi, 2pi]", &c);
    check_stat("sinf", &s, 1);
    check_stat("cosf", &c, 1);

    /* Large arguments go through the same exact reduction: sample the
     * whole range, and the floats next to multiples of pi/2 where the
     * result is tiny and a sloppy reduction would lose every bit. */
    stat_t ls = {0}, lc = {0};
    sample(&ls, pm_sinf, r_sin, -3.4e38f, 3.4e38f, 100000);
    sample(&lc, pm_cosf, r_cos, -3.4e38f, 3.4e38f, 100000);
    for (int k = 1; k < 200000; k += 7) {
        float x = (float)((long double)k * (LD_PI / 2));
        for (int j = -2; j <= 2; j++) {
            float y = from_ord(ord(x) + j);
            record(&ls, y, pm_sinf(y), sinl(y));
            record(&lc, y, pm_cosf(y), cosl(y));
        }
    }
    report("pm_sinf", "full range + near k pi/2", &ls);
    report("pm_cosf", "full range + near k pi/2", &lc);
    check_stat("sinf large", &ls, 1);
    check_stat("cosf large", &lc, 1);
}

static void test_powf_int(void) {
    stat_t s = {0};
    for (int i = 0; i < 400000; i++) {
        float x = (float)((double)(next_u64() >> 11) * 0x1p-53 * 3.75 + 0.25);
        if (i & 1) x = -x;
        int n = (int)(next_u64() % 129) - 64;
        record(&s, x, pm_powf_int(x, n), powl(x, n));
    }
    /* Bases next to 1 with huge exponents: the error grows with |n|. */
    for (int i = 0; i < 20000; i++) {
        float x = from_ord(ord(1.0f) + (int64_t)(next_u64() % 4096) - 2048);
        int n = (int)(next_u64() % (1u << 21)) - (1 << 20);
        record(&s, x, pm_powf_int(x, n), powl(x, n));
    }
    report("pm_powf_int", "|x| in [.25,4] |n|<=64; x~1 |n|<=2^20", &s);
    check_stat("powf_int", &s, 1);
}

/* IEEE special values: exact bits. */
static void test_special_values(void) {
    const float inf = INFINITY, nan = NAN;
    const uint32_t cnan = PM_NAN_BITS;
    struct { const char *what; float got; uint32_t want; } t[] = {
        {"exp(nan)", pm_expf(nan), cnan},        {"exp(-nan)", pm_expf(-nan), cnan},
        {"exp(+inf)", pm_expf(inf), 0x7f800000}, {"exp(-inf)", pm_expf(-inf), 0},
        {"exp(+0)", pm_expf(0.0f), 0x3f800000},  {"exp(-0)", pm_expf(-0.0f), 0x3f800000},
        {"exp(100)", pm_expf(100.0f), 0x7f800000}, {"exp(-200)", pm_expf(-200.0f), 0},
        {"log(nan)", pm_logf(nan), cnan},        {"log(-1)", pm_logf(-1.0f), cnan},
        {"log(-inf)", pm_logf(-inf), cnan},      {"log(-tiny)", pm_logf(-0x1p-149f), cnan},
        {"log(+0)", pm_logf(0.0f), 0xff800000},  {"log(-0)", pm_logf(-0.0f), 0xff800000},
        {"log(+inf)", pm_logf(inf), 0x7f800000}, {"log(1)", pm_logf(1.0f), 0},
        {"tanh(nan)", pm_tanhf(nan), cnan},      {"tanh(-0)", pm_tanhf(-0.0f), 0x80000000},
        {"tanh(inf)", pm_tanhf(inf), 0x3f800000}, {"tanh(-inf)", pm_tanhf(-inf), 0xbf800000},
        {"erf(nan)", pm_erff(nan), cnan},        {"erf(-0)", pm_erff(-0.0f), 0x80000000},
        {"erf(inf)", pm_erff(inf), 0x3f800000},  {"erf(-inf)", pm_erff(-inf), 0xbf800000},
        {"sqrt(nan)", pm_sqrtf(nan), cnan},      {"sqrt(-1)", pm_sqrtf(-1.0f), cnan},
        {"sqrt(-inf)", pm_sqrtf(-inf), cnan},    {"sqrt(-0)", pm_sqrtf(-0.0f), 0x80000000},
        {"sqrt(+0)", pm_sqrtf(0.0f), 0},         {"sqrt(inf)", pm_sqrtf(inf), 0x7f800000},
        {"sqrt(4)", pm_sqrtf(4.0f), 0x40000000}, {"sqrt(tiny)", pm_sqrtf(0x1p-148f), 0x1a800000},
        {"rsqrt(nan)", pm_rsqrtf(nan), cnan},    {"rsqrt(-1)", pm_rsqrtf(-1.0f), cnan},
        {"rsqrt(+0)", pm_rsqrtf(0.0f), 0x7f800000}, {"rsqrt(-0)", pm_rsqrtf(-0.0f), 0xff800000},
        {"rsqrt(inf)", pm_rsqrtf(inf), 0},       {"rsqrt(4)", pm_rsqrtf(4.0f), 0x3f000000},
        {"sin(nan)", pm_sinf(nan), cnan},        {"sin(inf)", pm_sinf(inf), cnan},
        {"sin(-inf)", pm_sinf(-inf), cnan},      {"sin(-0)", pm_sinf(-0.0f), 0x80000000},
        {"cos(nan)", pm_cosf(nan), cnan},        {"cos(inf)", pm_cosf(-inf), cnan},
        {"cos(-0)", pm_cosf(-0.0f), 0x3f800000}, {"sin(tiny)", pm_sinf(0x1p-149f), 1},
        {"gelu(nan)", pm_gelu_tanh(nan), cnan},  {"gelu(inf)", pm_gelu_tanh(inf), 0x7f800000},
        {"gelu(-inf)", pm_gelu_tanh(-inf), 0x80000000}, {"gelu(-0)", pm_gelu_tanh(-0.0f), 0x80000000},
        {"gelu(-20)", pm_gelu_tanh(-20.0f), 0x80000000},
        {"gelu'(nan)", pm_gelu_tanh_grad(nan), cnan}, {"gelu'(inf)", pm_gelu_tanh_grad(inf), 0x3f800000},
        {"gelu'(-inf)", pm_gelu_tanh_grad(-inf), 0x80000000},
        {"gelu'(0)", pm_gelu_tanh_grad(0.0f), 0x3f000000},
        {"pow(nan,0)", pm_powf_int(nan, 0), 0x3f800000}, {"pow(nan,2)", pm_powf_int(nan, 2), cnan},
        {"pow(0,-1)", pm_powf_int(0.0f, -1), 0x7f800000}, {"pow(-0,-1)", pm_powf_int(-0.0f, -1), 0xff800000},
        {"pow(-0,-2)", pm_powf_int(-0.0f, -2), 0x7f800000}, {"pow(-0,3)", pm_powf_int(-0.0f, 3), 0x80000000},
        {"pow(2,INT_MIN)", pm_powf_int(2.0f, -2147483647 - 1), 0},
        {"pow(1,INT_MIN)", pm_powf_int(1.0f, -2147483647 - 1), 0x3f800000},
        {"pow(10,39)", pm_powf_int(10.0f, 39), 0x7f800000}, {"pow(-2,3)", pm_powf_int(-2.0f, 3), 0xc1000000},
        {"pow(2,-149)", pm_powf_int(2.0f, -149), 1}, {"pow(2,-150)", pm_powf_int(2.0f, -150), 0},
    };
    for (size_t i = 0; i < sizeof t / sizeof t[0]; i++)
        CHECK(bits_of(t[i].got) == t[i].want, "%s = 0x%08x, want 0x%08x", t[i].what, bits_of(t[i].got),
              t[i].want);
}

/* Symmetries the implementation must keep exactly (not just within 1 ulp). */
static void test_symmetry(void) {
    int bad = 0;
    for (int i = 0; i < 200000; i++) {
        float x = from_bits((uint32_t)next_u64() & 0x7fffffffu);
        if (isnan(x)) continue;
        bad += bits_of(pm_tanhf(-x)) != (bits_of(pm_tanhf(x)) ^ 0x80000000u);
        bad += bits_of(pm_erff(-x)) != (bits_of(pm_erff(x)) ^ 0x80000000u);
        bad += bits_of(pm_sinf(-x)) != (bits_of(pm_sinf(x)) ^ 0x80000000u) && !isnan(pm_sinf(x));
        bad += bits_of(pm_cosf(-x)) != bits_of(pm_cosf(x));
    }
    CHECK(bad == 0, "%d asymmetric results", bad);
}

/* ns per call against glibc's float versions, on model-range inputs. */
static void test_speed(void) {
    enum { N = 1 << 16, REPS = 8 };
    static float in[N], pos[N];
    for (int i = 0; i < N; i++) {
        in[i] = (float)((double)(next_u64() >> 11) * 0x1p-53 * 16.0 - 8.0);
        pos[i] = (float)((double)(next_u64() >> 11) * 0x1p-53 * 100.0 + 1e-3);
    }
    struct { const char *name; fn_t f; fn_t libm; const float *x; } t[] = {
        {"expf", pm_expf, expf, in},   {"logf", pm_logf, logf, pos},   {"tanhf", pm_tanhf, tanhf, in},
        {"erff", pm_erff, erff, in},   {"sinf", pm_sinf, sinf, in},    {"cosf", pm_cosf, cosf, in},
        {"sqrtf", pm_sqrtf, sqrtf, pos}, {"rsqrtf", pm_rsqrtf, NULL, pos},
        {"gelu_tanh", pm_gelu_tanh, NULL, in}, {"gelu_tanh_grad", pm_gelu_tanh_grad, NULL, in},
    };
    volatile float sink = 0;
    for (size_t k = 0; k < sizeof t / sizeof t[0]; k++) {
        double ns[2] = {0, 0};
        for (int which = 0; which < 2; which++) {
            fn_t f = which ? t[k].libm : t[k].f;
            if (!f) continue;
            struct timespec a, b;
            clock_gettime(CLOCK_MONOTONIC, &a);
            float acc = 0;
            for (int r = 0; r < REPS; r++)
                for (int i = 0; i < N; i++) acc += f(t[k].x[i]);
            clock_gettime(CLOCK_MONOTONIC, &b);
            sink += acc;
            ns[which] = ((double)(b.tv_sec - a.tv_sec) * 1e9 + (double)(b.tv_nsec - a.tv_nsec)) / (N * REPS);
        }
        if (t[k].libm) printf("  speed %-16s %6.1f ns/call   (glibc %5.1f ns)\n", t[k].name, ns[0], ns[1]);
        else printf("  speed %-16s %6.1f ns/call\n", t[k].name, ns[0]);
    }
    /* the vectorised array forms the model calls */
    static float y[N], g[N];
    for (int which = 0; which < 2; which++) {
        struct timespec a, b;
        clock_gettime(CLOCK_MONOTONIC, &a);
        for (int r = 0; r < REPS; r++) {
            if (which) pm_gelu_tanh_array(y, g, in, N);
            else pm_expf_shifted(y, in, 1.0f, N);
            sink += y[r];
        }
        clock_gettime(CLOCK_MONOTONIC, &b);
        double ns = ((double)(b.tv_sec - a.tv_sec) * 1e9 + (double)(b.tv_nsec - a.tv_nsec)) / (N * REPS);
        printf("  speed %-16s %6.1f ns/element\n", which ? "gelu_tanh_array" : "expf_shifted", ns);
    }
    (void)sink;
}

/* pm_gelu_tanh_and_grad must give exactly the bits of the two separate
 * functions: every 97th bit pattern of the whole float range, specials
 * included. */
static void test_gelu_fused_matches(void) {
    long bad = 0;
    for (uint64_t b = 0; b <= 0xffffffffu; b += 97) {
        uint32_t u = (uint32_t)b;
        float x;
        memcpy(&x, &u, sizeof x);
        float g, y = pm_gelu_tanh_and_grad(x, &g);
        float y1 = pm_gelu_tanh(x), g1 = pm_gelu_tanh_grad(x);
        bad += memcmp(&y, &y1, sizeof y) != 0 || memcmp(&g, &g1, sizeof g) != 0;
    }
    CHECK(bad == 0, "%ld inputs differ between the fused and the separate GeLU", bad);
}

/* The vectorised array forms (pm_expf_shifted, pm_gelu_tanh_array,
 * pm_logf_array, pm_sqrtf_array, pm_cosf_array; run
 * in the widest clone this CPU has, see ref/kernels/simd.h) equal the
 * scalar functions bit for bit, over a stride of every float pattern
 * (NaNs, infinities, subnormals included) and at odd array lengths. */
static void test_array_forms_match(void) {
    enum { N = 4099 };
    static float x[N], y[N], g[N];
    long bad = 0, n = 0;
    for (uint64_t b = 0; b <= 0xffffffffu; b += (uint64_t)N * 89) {
        for (int i = 0; i < N; i++) x[i] = from_bits((uint32_t)(b + (uint64_t)i * 89));
        int len = N - (int)(b % 7);
        pm_gelu_tanh_array(y, g, x, (size_t)len);
        for (int i = 0; i < len; i++) {
            float gs, ys = pm_gelu_tanh_and_grad(x[i], &gs);
            bad += bits_of(ys) != bits_of(y[i]) || bits_of(gs) != bits_of(g[i]);
        }
        const float m = from_bits((uint32_t)(b >> 3)); /* softmax's shift, also odd ones */
        pm_expf_shifted(y, x, m, (size_t)len);
        for (int i = 0; i < len; i++) bad += bits_of(pm_expf(x[i] - m)) != bits_of(y[i]);
        pm_logf_array(y, x, (size_t)len);
        for (int i = 0; i < len; i++) bad += bits_of(pm_logf(x[i])) != bits_of(y[i]);
        pm_sqrtf_array(y, x, (size_t)len);
        for (int i = 0; i < len; i++) bad += bits_of(pm_sqrtf(x[i])) != bits_of(y[i]);
        pm_cosf_array(y, x, (size_t)len);
        for (int i = 0; i < len; i++) bad += bits_of(pm_cosf(x[i])) != bits_of(y[i]);
        /* cos's path for arrays whose every |x| < 2^31: the same patterns
         * with the exponent cut to 2^-8 .. 2^31 (every reduction window) */
        for (int i = 0; i < len; i++)
            g[i] = from_bits((bits_of(x[i]) & 0x807fffffu) | (uint32_t)(119 + i % 39) << 23);
        pm_cosf_array(y, g, (size_t)len);
        for (int i = 0; i < len; i++) bad += bits_of(pm_cosf(g[i])) != bits_of(y[i]);
        n += len;
    }
    CHECK(n > 1000000, "only %ld inputs", n);
    CHECK(bad == 0, "%ld of %ld array results differ from the scalar functions", bad, n);
}

int main(void) {
    const char *d = getenv("PMATH_DENSE");
    if (d && *d && *d != '0') dense_div = 16;
    RUN(test_special_values);
    RUN(test_exp);
    RUN(test_log);
    RUN(test_tanh_erf);
    RUN(test_gelu);
    RUN(test_gelu_fused_matches);
    RUN(test_array_forms_match);
    RUN(test_sqrt_rsqrt);
    RUN(test_sin_cos);
    RUN(test_powf_int);
    RUN(test_symmetry);
    RUN(test_speed);
    return harness_done();
}
