/* test_xacc.c - the exact accumulator against an independent big integer.
 *
 * The oracle here shares no code with ref/kernels/xacc.c: it decomposes
 * floats and doubles with frexp, keeps the exact sum as a 1280-bit
 * two's-complement integer in units of 2^-149 (room for sums of doubles
 * up to 2^1130), and checks a result by the *definition* of
 * round-to-nearest-even (no neighbour float is closer; ties go to the even
 * significand) instead of by re-implementing the rounding.
 */
#include <float.h>
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "../harness.h"
#include "parity/xacc.h"

/* ---- the oracle: 1280-bit two's complement, units of 2^-149 --------- */
#define LIMBS 40
typedef struct { uint32_t w[LIMBS]; } big_t;

static void big_zero(big_t *a) { memset(a, 0, sizeof *a); }

static void big_add(big_t *a, const big_t *b) {
    uint64_t carry = 0;
    for (int i = 0; i < LIMBS; i++) {
        uint64_t s = (uint64_t)a->w[i] + b->w[i] + carry;
        a->w[i] = (uint32_t)s;
        carry = s >> 32;
    }
}

static void big_neg(big_t *a) {
    for (int i = 0; i < LIMBS; i++) a->w[i] = ~a->w[i];
    big_t one;
    big_zero(&one);
    one.w[0] = 1;
    big_add(a, &one);
}

static int big_is_neg(const big_t *a) { return (int)(a->w[LIMBS - 1] >> 31); }

static int big_cmp_abs(const big_t *a, const big_t *b) { /* compare |a| and |b| */
    big_t x = *a, y = *b;
    if (big_is_neg(&x)) big_neg(&x);
    if (big_is_neg(&y)) big_neg(&y);
    for (int i = LIMBS - 1; i >= 0; i--)
        if (x.w[i] != y.w[i]) return x.w[i] < y.w[i] ? -1 : 1;
    return 0;
}

/* Exact value of a finite float in units of 2^-149. */
static void big_from_float(big_t *out, float x) {
    big_zero(out);
    if (x == 0.0f) return;
    int e;
    float fr = frexpf(fabsf(x), &e); /* |x| = fr * 2^e, fr in [0.5, 1) */
    uint64_t m = (uint64_t)ldexpf(fr, 24);
    int p = e - 24 + 149;
    while (p < 0) {
        m >>= 1;
        p++;
    }
    /* set m << p bit by bit: slow and obviously right */
    for (int b = 0; b < 24; b++)
        if ((m >> b) & 1) out->w[(p + b) / 32] |= 1u << ((p + b) % 32);
    if (x < 0) big_neg(out);
}

/* Exact value of a finite double that is a multiple of 2^-149 (the
 * domain of xacc_add_f64_exact); returns 0 when it is not one. */
static int big_from_double(big_t *out, double x) {
    big_zero(out);
    if (x == 0.0) return 1;
    int e;
    double fr = frexp(fabs(x), &e); /* |x| = fr * 2^e, fr in [0.5, 1) */
    uint64_t m = (uint64_t)ldexp(fr, 53);
    int p = e - 53 + 149;
    for (; p < 0; p++) {
        if (m & 1) return 0;
        m >>= 1;
    }
    for (int b = 0; b < 53; b++)
        if ((m >> b) & 1) out->w[(p + b) / 32] |= 1u << ((p + b) % 32);
    if (x < 0) big_neg(out);
    return 1;
}

static void big_add_double(big_t *a, double x) {
    big_t t;
    if (!big_from_double(&t, x)) abort(); /* a test bug: not in the domain */
    big_add(a, &t);
}

static void big_add_float(big_t *a, float x) {
    big_t t;
    big_from_float(&t, x);
    big_add(a, &t);
}

/* |exact - r| as a big integer. */
static void big_dist(big_t *out, const big_t *exact, float r) {
    big_from_float(out, r);
    big_neg(out);
    big_add(out, exact);
}

/* Checks r is the round-to-nearest-even of `exact` (finite cases). */
static int is_correct_rounding(const big_t *exact, float r) {
    /* Overflow threshold: |exact| >= 2^128 - 2^103, in units 2^277 - 2^252. */
    big_t thr;
    big_zero(&thr);
    for (int b = 252; b < 277; b++) thr.w[b / 32] |= 1u << (b % 32);
    int overflow = big_cmp_abs(exact, &thr) >= 0;
    if (isinf(r)) return overflow && ((r > 0) == !big_is_neg(exact));
    if (overflow || isnan(r)) return 0;
    big_t d, dn;
    big_dist(&d, exact, r);
    float neighbours[2] = {nextafterf(r, INFINITY), nextafterf(r, -INFINITY)};
    for (int k = 0; k < 2; k++) {
        float n = neighbours[k];
        if (isinf(n)) continue;
        big_dist(&dn, exact, n);
        int c = big_cmp_abs(&d, &dn);
        if (c > 0) return 0;
        if (c == 0) { /* tie: r must have the even significand */
            uint32_t u;
            memcpy(&u, &r, sizeof u);
            if (u & 1) return 0;
        }
    }
    /* the sign of zero: an exact zero must give +0 */
    big_t z;
    big_zero(&z);
    if (big_cmp_abs(exact, &z) == 0) return r == 0.0f && !signbit(r);
    return 1;
}

/* The same for xacc_round_f64: r is the fp64 round-to-nearest-even of
 * `exact` (for values whose fp64 neighbours are multiples of 2^-149, i.e.
 * zero or of magnitude 2^-96 and more, which is what the tests use). */
static int is_correct_rounding_f64(const big_t *exact, double r) {
    /* overflow threshold: |exact| >= 2^1024 - 2^970, in units 2^1173 - 2^1119 */
    big_t thr;
    big_zero(&thr);
    for (int b = 1119; b < 1173; b++) thr.w[b / 32] |= 1u << (b % 32);
    int overflow = big_cmp_abs(exact, &thr) >= 0;
    if (isinf(r)) return overflow && ((r > 0) == !big_is_neg(exact));
    if (overflow || isnan(r)) return 0;
    big_t d, dn, z0;
    big_zero(&z0);
    if (!big_from_double(&d, r)) return 0;
    big_neg(&d);
    big_add(&d, exact);
    if (fabs(r) < 0x1p-96) /* a multiple of 2^-149 this small is a double: exact */
        return big_cmp_abs(&d, &z0) == 0 && !(r == 0.0 && signbit(r));
    double neighbours[2] = {nextafter(r, INFINITY), nextafter(r, -INFINITY)};
    for (int k = 0; k < 2; k++) {
        if (isinf(neighbours[k])) continue;
        if (!big_from_double(&dn, neighbours[k])) return 0;
        big_neg(&dn);
        big_add(&dn, exact);
        int c = big_cmp_abs(&d, &dn);
        if (c > 0) return 0;
        if (c == 0) { /* tie: r must have the even significand */
            uint64_t u;
            memcpy(&u, &r, sizeof u);
            if (u & 1) return 0;
        }
    }
    if (big_cmp_abs(exact, &z0) == 0) return r == 0.0 && !signbit(r);
    return 1;
}

/* ---- random inputs ------------------------------------------------- */
static uint64_t rng_state = 0x9e3779b97f4a7c15ULL;
static uint64_t next_u64(void) { /* splitmix64 */
    uint64_t z = (rng_state += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}
static int rand_below(int n) { return (int)(next_u64() % (uint64_t)n); }

/* A finite float with exponent drawn from [lo, hi] (unbiased, 0 = subnormal
 * region when lo reaches -149). */
static float rand_float(int lo_exp, int hi_exp) {
    int e = lo_exp + rand_below(hi_exp - lo_exp + 1);
    float m = 1.0f + (float)(next_u64() >> 41) * 0x1p-23f;
    float x = ldexpf(m, e);
    if (isinf(x)) x = FLT_MAX;
    return (next_u64() & 1) ? -x : x;
}

static void fill_case(float *x, int n, int kind) {
    for (int i = 0; i < n; i++) {
        switch (kind) {
        case 0: x[i] = rand_float(-10, 10); break;            /* fast path territory */
        case 1: x[i] = rand_float(-149, 127); break;          /* every exponent */
        case 2: x[i] = rand_float(-140, -120); break;         /* subnormal region */
        case 3: x[i] = rand_float(100, 127); break;           /* near overflow */
        default: x[i] = rand_float(-40, 40); break;
        }
    }
    if (kind == 4 && n > 1) /* catastrophic cancellation: pair up opposites */
        for (int i = 0; i + 1 < n; i += 2) x[i + 1] = -x[i] * (rand_below(4) ? 1.0f : 1.0000001f);
}

static uint32_t bits(float x) {
    uint32_t u;
    memcpy(&u, &x, sizeof u);
    return u;
}

/* ---- tests ----------------------------------------------------------- */
static void test_random_sums_are_correctly_rounded(void) {
    float x[600];
    for (int trial = 0; trial < 3000; trial++) {
        int kind = trial % 5, n = 1 + rand_below(600);
        fill_case(x, n, kind);
        big_t exact;
        big_zero(&exact);
        for (int i = 0; i < n; i++) big_add_float(&exact, x[i]);
        float fast = xsum_f32(x, (size_t)n);
        xacc_set_fast_path(0);
        float slow = xsum_f32(x, (size_t)n);
        xacc_set_fast_path(1);
        xacc_t acc;
        xacc_init(&acc);
        xacc_add_array_f32(&acc, x, (size_t)n);
        float direct = xacc_round_f32(&acc);
        CHECK(bits(fast) == bits(slow) && bits(slow) == bits(direct),
              "trial %d kind %d: fast %a slow %a direct %a", trial, kind, fast, slow, direct);
        CHECK(is_correct_rounding(&exact, direct), "trial %d kind %d n %d: got %a", trial, kind, n,
              direct);
    }
}

/* xacc_add_array_f32's banded fast path (xacc.c) against term-by-term
 * addition and the big-integer oracle: long arrays (several 2^14-term
 * chunks) at the worst case of each exponent band (every term at the
 * band's top, so the bin's exactness bound is tight), mixed with the
 * band's smallest terms and both signs, and a chunk holding an infinity. */
static void test_array_bands(void) {
    enum { N = 40000 };
    static float x[N];
    for (int band = 0; band < 16; band++) {
        int top = band * 16 + 15 < 254 ? band * 16 + 15 : 254; /* biased exponent */
        for (int i = 0; i < N; i++) {
            uint32_t u = (uint32_t)top << 23 | 0x7fffffu; /* largest of the band */
            if (i % 3 == 1) u = (uint32_t)(band ? band * 16 : 0) << 23 | 1u; /* its smallest */
            if (i % 7 == 5) u |= 0x80000000u;
            memcpy(&x[i], &u, sizeof u);
        }
        if (band == 15) x[N - 5] = INFINITY; /* the last chunk takes the slow path */
        xacc_t banded, termwise;
        xacc_init(&banded);
        xacc_init(&termwise);
        xacc_add_array_f32(&banded, x, N);
        for (int i = 0; i < N; i++) xacc_add_f32(&termwise, x[i]);
        big_t exact;
        big_zero(&exact);
        for (int i = 0; i < N && band < 15; i++) big_add_float(&exact, x[i]);
        float a = xacc_round_f32(&banded), b = xacc_round_f32(&termwise);
        double a64 = xacc_round_f64(&banded), b64 = xacc_round_f64(&termwise);
        CHECK(bits(a) == bits(b) && memcmp(&a64, &b64, sizeof a64) == 0,
              "band %d: banded %a / %a, term by term %a / %a", band, a, a64, b, b64);
        CHECK(band == 15 || is_correct_rounding(&exact, a), "band %d: %a is not the rounded sum",
              band, a);
    }
}

static void shuffle(float *x, int n) {
    for (int i = n - 1; i > 0; i--) {
        int j = rand_below(i + 1);
        float t = x[i];
        x[i] = x[j];
        x[j] = t;
    }
}

static void test_permutations_and_partitions(void) {
    float x[400];
    for (int trial = 0; trial < 500; trial++) {
        int n = 2 + rand_below(399), kind = trial % 5;
        fill_case(x, n, kind);
        float ref = xsum_f32(x, (size_t)n);
        for (int rep = 0; rep < 4; rep++) {
            shuffle(x, n);
            CHECK(bits(xsum_f32(x, (size_t)n)) == bits(ref), "permutation trial %d", trial);
            /* random partition into parts, each its own accumulator, merged
             * in a random order; some parts tiny-carry to exercise normalize */
            xacc_t parts[8], total;
            int nparts = 1 + rand_below(8);
            for (int p = 0; p < nparts; p++) {
                xacc_init(&parts[p]);
                if (rand_below(2)) parts[p].adds_left = 1 + (uint32_t)rand_below(3);
            }
            for (int i = 0; i < n; i++) xacc_add_f32(&parts[rand_below(nparts)], x[i]);
            xacc_init(&total);
            int order[8];
            for (int p = 0; p < nparts; p++) order[p] = p;
            for (int p = nparts - 1; p > 0; p--) {
                int q = rand_below(p + 1), t = order[p];
                order[p] = order[q];
                order[q] = t;
            }
            for (int p = 0; p < nparts; p++) xacc_merge(&total, &parts[order[p]]);
            CHECK(bits(xacc_round_f32(&total)) == bits(ref), "partition trial %d: %a vs %a", trial,
                  xacc_round_f32(&total), ref);
        }
    }
}

static void expect_sum(const float *x, int n, float want, const char *what) {
    float fast = xsum_f32(x, (size_t)n);
    xacc_set_fast_path(0);
    float slow = xsum_f32(x, (size_t)n);
    xacc_set_fast_path(1);
    CHECK(bits(fast) == bits(want), "%s: fast path gave %a (0x%08x), want %a", what, fast,
          bits(fast), want);
    CHECK(bits(slow) == bits(want), "%s: fallback gave %a (0x%08x), want %a", what, slow,
          bits(slow), want);
}

static void test_hard_cases(void) {
    const float tiny = 0x1p-149f, big = 1e38f;
    float c1[] = {big, -big, tiny};
    expect_sum(c1, 3, tiny, "1e38 + -1e38 + tiny");
    float c2[] = {big, tiny, -big};
    expect_sum(c2, 3, tiny, "1e38 + tiny + -1e38");
    float c3[] = {FLT_MAX, FLT_MAX, -FLT_MAX};
    expect_sum(c3, 3, FLT_MAX, "intermediate overflow is not overflow");
    float c4[] = {FLT_MAX, FLT_MAX};
    expect_sum(c4, 2, INFINITY, "overflow to +inf");
    float c5[] = {-FLT_MAX, -0x1p103f};
    expect_sum(c5, 2, -INFINITY, "tie at the overflow threshold rounds to -inf");
    float c6[] = {FLT_MAX, 0x1p102f};
    expect_sum(c6, 2, FLT_MAX, "just below the threshold stays finite");
    float c7[] = {1.0f, 0x1p-24f};
    expect_sum(c7, 2, 1.0f, "tie to even (down)");
    float c8[] = {1.0f + 0x1p-23f, 0x1p-24f};
    expect_sum(c8, 2, 1.0f + 0x1p-22f, "tie to even (up)");
    float c9[] = {1.0f, 0x1p-24f, 0x1p-60f};
    expect_sum(c9, 3, 1.0f + 0x1p-23f, "sticky bit breaks the tie");
    /* exact 1 + 2^-23 + 2^-24 - 2^-54 lies just below a tie; an fp64 sum
     * loses the 2^-54 and lands on the tie, so only a correct certificate
     * (it must fail here) gets 1 + 2^-23 */
    float c9b[] = {1.0f, 0x1.8p-23f, 0x1.fffffep-31f, -0x1p-30f};
    expect_sum(c9b, 4, 1.0f + 0x1p-23f, "certificate boundary");
    float c10[] = {-0.0f, -0.0f};
    expect_sum(c10, 2, 0.0f, "-0 + -0 is +0");
    expect_sum(NULL, 0, 0.0f, "empty sum is +0");
    float c11[] = {3.5f, -3.5f};
    expect_sum(c11, 2, 0.0f, "x + -x is +0");
    float c12[] = {tiny, tiny, tiny};
    expect_sum(c12, 3, 3 * tiny, "subnormals add exactly");
    float c13[] = {0x1p-126f, -tiny};
    expect_sum(c13, 2, 0x1p-126f - tiny, "normal minus subnormal");
    float c14[] = {INFINITY, 1.0f};
    expect_sum(c14, 2, INFINITY, "+inf");
    float c15[] = {-INFINITY, FLT_MAX, FLT_MAX};
    expect_sum(c15, 3, -INFINITY, "-inf beats finite overflow");
    float c16[] = {INFINITY, -INFINITY};
    float nan_sum = xsum_f32(c16, 2);
    CHECK(bits(nan_sum) == 0x7fc00000u, "inf + -inf: got 0x%08x", bits(nan_sum));
    float c17[] = {1.0f, NAN, 2.0f};
    CHECK(bits(xsum_f32(c17, 3)) == 0x7fc00000u, "NaN gives the canonical NaN");
    float c18[] = {-NAN};
    CHECK(bits(xsum_f32(c18, 1)) == 0x7fc00000u, "negative NaN is canonicalised");
}

static void test_round_f64(void) {
    xacc_t acc;
    xacc_init(&acc);
    xacc_add_f32(&acc, 1.0f);
    xacc_add_f32(&acc, 0x1p-100f);
    CHECK(xacc_round_f64(&acc) == 1.0, "1 + 2^-100 rounds to 1 in fp64, got %a",
          xacc_round_f64(&acc));
    xacc_add_f32(&acc, 0x1p-53f);
    CHECK(xacc_round_f64(&acc) == 1.0 + 0x1p-52, "tie broken upward by the sticky 2^-100, got %a",
          xacc_round_f64(&acc));
    xacc_init(&acc);
    xacc_add_f32(&acc, 0x1p-149f);
    CHECK(xacc_round_f64(&acc) == 0x1p-149, "smallest subnormal exact in fp64");
    xacc_add_f32(&acc, -0x1p-148f);
    CHECK(xacc_round_f64(&acc) == -0x1p-149, "negative result");
    CHECK(xacc_sign(&acc) == -1, "sign");
    xacc_init(&acc);
    for (int i = 0; i < 1000; i++) xacc_add_f32(&acc, rand_float(-5, 5));
    /* fp64 is exact for these (range 2^10 * 24 bits < 53 bits): compare */
    xacc_t again;
    xacc_init(&again);
    rng_state = 77;
    double d = 0.0;
    for (int i = 0; i < 1000; i++) {
        float x = rand_float(-5, 5);
        xacc_add_f32(&again, x);
        d += (double)x;
    }
    CHECK(xacc_round_f64(&again) == d, "fp64-exact range: %a vs %a", xacc_round_f64(&again), d);
}

static void test_f64_exact_handover(void) {
    /* an fp64 exact partial added to an accumulator equals adding its terms */
    for (int trial = 0; trial < 2000; trial++) {
        float x[64];
        int n = 1 + rand_below(64);
        fill_case(x, n, trial % 2 ? 0 : 2);
        double d = 0.0;
        for (int i = 0; i < n; i++) d += (double)x[i];
        xacc_t a, b;
        xacc_init(&a);
        xacc_init(&b);
        xacc_add_array_f32(&a, x, (size_t)n);
        xacc_add_f64_exact(&b, d); /* kinds 0 and 2 keep fp64 exact */
        CHECK(bits(xacc_round_f32(&a)) == bits(xacc_round_f32(&b)), "trial %d", trial);
        /* the same partial into an open xvec that already holds a wild
         * value, so some additions must take the fallback */
        xvec_t v;
        CHECK(xvec_init(&v, 1) == 0, "alloc");
        float wild = trial % 3 ? 0x1p100f : 1.0f;
        xvec_add(&v, 0, &wild, 1);
        xvec_add_f64_exact(&v, 0, &d, 1);
        xacc_add_f32(&a, wild);
        float got;
        xvec_round(&v, &got);
        CHECK(bits(got) == bits(xacc_round_f32(&a)), "xvec_add_f64_exact trial %d", trial);
        xvec_free(&v);
    }
}

static void test_xvec_matches_scalar_accumulators(void) {
    enum { N = 300, TILES = 40 };
    xvec_t v, w;
    CHECK(xvec_init(&v, N) == 0 && xvec_init(&w, N) == 0, "alloc");
    xacc_t ref[N];
    for (int i = 0; i < N; i++) xacc_init(&ref[i]);
    float tile[N];
    for (int t = 0; t < TILES; t++) {
        /* mostly well-scaled partials, sometimes a wild one that forces the
         * fallback for some elements halfway through */
        fill_case(tile, N, t == 17 ? 1 : (t % 7 == 3 ? 2 : 0));
        xvec_t *dst = (t % 3) ? &v : &w;
        if (t % 2) {
            xvec_add(dst, 0, tile, N);
        } else { /* same data as a 10 x 30 tile with its own leading dim */
            xvec_add_tile(dst, 0, 30, tile, 10, 30, 30);
        }
        for (int i = 0; i < N; i++) xacc_add_f32(&ref[i], tile[i]);
    }
    xvec_merge(&v, &w);
    float got[N];
    xvec_round(&v, got);
    int bad = 0;
    for (int i = 0; i < N; i++) bad += bits(got[i]) != bits(xacc_round_f32(&ref[i]));
    CHECK(bad == 0, "%d of %d elements differ from per-element accumulators", bad, N);
    CHECK(v.n_slow > 0, "the wild tile should have sent some elements to the fallback");
    xvec_free(&v);
    xvec_free(&w);
}

static void test_xvec_paths_agree(void) {
    /* the same additions with the fast path off give the same bits */
    enum { N = 256 };
    float parts[12][N];
    for (int p = 0; p < 12; p++) fill_case(parts[p], N, p % 5);
    float on[N], off[N];
    for (int mode = 0; mode < 2; mode++) {
        xacc_set_fast_path(mode == 0);
        xvec_t v;
        CHECK(xvec_init(&v, N) == 0, "alloc");
        for (int p = 0; p < 12; p++) xvec_add(&v, 0, parts[p], N);
        xvec_round(&v, mode == 0 ? on : off);
        xvec_free(&v);
    }
    xacc_set_fast_path(1);
    CHECK(memcmp(on, off, sizeof on) == 0, "fast and fallback paths differ");
    xvec_t z;
    CHECK(xvec_init(&z, 4) == 0, "alloc");
    float zeros[4] = {-0.0f, -0.0f, 0.0f, -0.0f}, out[4];
    xvec_add(&z, 0, zeros, 4);
    xvec_round(&z, out);
    for (int i = 0; i < 4; i++) CHECK(bits(out[i]) == 0, "xvec zero is +0");
    xvec_free(&z);
}

/* v (+)= x by the store (claimed) or the add into zeros, then more adds. */
static void store_or_add(int store, int form, xvec_t *v, const float *x, const double *d,
                         const xvec_t *src, int n) {
    CHECK(xvec_claim_zero(v) == 1, "a zeroed vector can be claimed");
    CHECK(xvec_claim_zero(v) == 0, "a claimed vector cannot be claimed again");
    if (!store) xvec_zero(v); /* zeros again, for the adds */
    switch (form) {
    case 0: (store ? xvec_store : xvec_add)(v, 0, x, (size_t)n); break;
    case 1: (store ? xvec_store_tile : xvec_add_tile)(v, 0, 8, x, n / 8, 8, 8); break;
    case 2: (store ? xvec_store_f64_exact : xvec_add_f64_exact)(v, 0, d, (size_t)n); break;
    default: (store ? xvec_store_range : xvec_merge_range)(v, 0, src, 0, (size_t)n); break;
    }
}

static void test_xvec_store_equals_add_to_zero(void) {
    /* the store forms give a claimed vector what adding to zeros gives it,
     * in both paths, for -0, inf, NaN and slow (NaN-tagged) source
     * elements, and later additions see the same state */
    enum { N = 64 };
    float x[N], more[N];
    double d[N];
    fill_case(x, N, 2);
    fill_case(more, N, 1);
    x[0] = -0.0f, x[1] = INFINITY, x[2] = NAN, x[3] = -INFINITY, x[4] = 0x1p-149f;
    for (int i = 0; i < N; i++) d[i] = i == 1 || i == 2 || i == 3 ? -0.0 : (double)x[i];
    xvec_t src;
    CHECK(xvec_init(&src, N) == 0, "alloc");
    xvec_add(&src, 0, x, N);
    xvec_add(&src, 0, more, N); /* some elements go slow */
    CHECK(src.n_slow > 0, "the source should have slow elements");
    for (int fast = 0; fast < 2; fast++)
        for (int form = 0; form < 4; form++) {
            xacc_set_fast_path(fast);
            float out[2][2][N]; /* [store][before, after more adds] */
            for (int store = 0; store < 2; store++) {
                xvec_t v;
                CHECK(xvec_init(&v, N) == 0, "alloc");
                store_or_add(store, form, &v, x, d, &src, N);
                xvec_round(&v, out[store][0]);
                xvec_add(&v, 0, more, N);
                xvec_round(&v, out[store][1]);
                xvec_free(&v);
            }
            CHECK(memcmp(out[0], out[1], sizeof out[0]) == 0, "form %d, fast path %d", form, fast);
        }
    xacc_set_fast_path(1);
    /* a vector still marked zero reads as +0 everywhere */
    xvec_t z;
    CHECK(xvec_init(&z, 3) == 0, "alloc");
    float out[3] = {1.0f, 1.0f, 1.0f};
    xvec_round(&z, out);
    xacc_t one;
    xvec_get(&z, 2, &one);
    CHECK(bits(out[0]) == 0 && bits(out[2]) == 0 && bits(xacc_round_f32(&one)) == 0 &&
              !xvec_is_slow(&z, 1), "a pending-zero vector reads as +0");
    xvec_free(&z);
    xvec_free(&src);
}

static void test_xvec_certificate_boundary(void) {
    /* the "certificate boundary" case of test_hard_cases, fed to xvec one
     * term at a time, and split over two vectors that are then merged; at
     * several scales, since an exactness check must not depend on size */
    const float scales[3] = {1.0f, 0x1p-80f, 0x1p60f};
    for (int k = 0; k < 3; k++) {
        float sc = scales[k];
        const float terms[4] = {1.0f * sc, 0x1.8p-23f * sc, 0x1.fffffep-31f * sc, -0x1p-30f * sc};
        xvec_t v, w;
        CHECK(xvec_init(&v, 1) == 0 && xvec_init(&w, 1) == 0, "alloc");
        for (int i = 0; i < 4; i++) xvec_add(&v, 0, &terms[i], 1);
        float got;
        xvec_round(&v, &got);
        CHECK(got == (1.0f + 0x1p-23f) * sc, "xvec_add at scale %a: got %a", sc, got);
        /* v = 1 + 1.5*2^-23; w = 2^-3 - 2^-54, exact in fp64 but not in fp32 */
        const float w_terms[3] = {0x1.fffffep-31f * sc, -0x1p-30f * sc, 0x1p-3f * sc};
        xvec_zero(&v);
        xvec_add(&v, 0, &terms[0], 1);
        xvec_add(&v, 0, &terms[1], 1);
        for (int i = 0; i < 3; i++) xvec_add(&w, 0, &w_terms[i], 1);
        xvec_merge(&v, &w);
        xvec_round(&v, &got);
        CHECK(got == (1.125f + 0x1p-23f) * sc, "xvec_merge at scale %a: got %a", sc, got);
        xvec_free(&v);
        xvec_free(&w);
    }
}

static void test_forced_carries(void) {
    /* propagating carries every few additions must not change the value */
    float x[2000];
    fill_case(x, 2000, 1);
    xacc_t a, b;
    xacc_init(&a);
    xacc_init(&b);
    for (int i = 0; i < 2000; i++) {
        b.adds_left = 1;
        xacc_add_f32(&a, x[i]);
        xacc_add_f32(&b, x[i]);
    }
    CHECK(bits(xacc_round_f32(&a)) == bits(xacc_round_f32(&b)), "carry propagation changed the sum");
    /* many large same-sign terms: the top word grows past 32 bits */
    xacc_init(&a);
    big_t exact;
    big_zero(&exact);
    for (int i = 0; i < 100000; i++) {
        xacc_add_f32(&a, 0x1.fffffep126f);
        big_add_float(&exact, 0x1.fffffep126f);
    }
    CHECK(is_correct_rounding(&exact, xacc_round_f32(&a)), "large sum overflows to +inf");
    for (int i = 0; i < 100000; i++) xacc_add_f32(&a, -0x1.fffffep126f);
    xacc_add_f32(&a, 1.5f);
    CHECK(xacc_round_f32(&a) == 1.5f, "and cancels back exactly: %a", xacc_round_f32(&a));
}

/* ---- huge fp64 terms and the range (xacc.h, "Domain and range") ------ */

static void canonical_of(xacc_t *out, const xacc_t *v) {
    xacc_init(out);
    xacc_merge(out, v); /* what the collectives send: coll_reduce.c */
}

/* Every path that takes exact fp64 terms must give the correctly rounded
 * sum of d[0..n-1]: xacc_add_f64_exact forwards and backwards, two
 * accumulators merged either way round (the same canonical bytes), and
 * xvec with the fast path on and off, term by term and as two merged
 * vectors (a huge fp64 sum that turns inexact moves to the accumulator). */
static void expect_f64_sum(const double *d, int n, const char *what) {
    big_t exact;
    big_zero(&exact);
    for (int i = 0; i < n; i++) big_add_double(&exact, d[i]);
    xacc_t fwd, rev, part[2];
    xacc_init(&fwd);
    xacc_init(&rev);
    xacc_init(&part[0]);
    xacc_init(&part[1]);
    for (int i = 0; i < n; i++) {
        xacc_add_f64_exact(&fwd, d[i]);
        xacc_add_f64_exact(&rev, d[n - 1 - i]);
        xacc_add_f64_exact(&part[i % 2], d[i]);
    }
    float r = xacc_round_f32(&fwd);
    double r64 = xacc_round_f64(&fwd);
    CHECK(is_correct_rounding(&exact, r), "%s: xacc gave %a", what, r);
    CHECK(is_correct_rounding_f64(&exact, r64), "%s: xacc_round_f64 gave %a", what, r64);
    CHECK(bits(xacc_round_f32(&rev)) == bits(r), "%s: reversed, %a", what, xacc_round_f32(&rev));
    xacc_t merged[2], canon[3];
    for (int k = 0; k < 2; k++) {
        merged[k] = part[k];
        xacc_merge(&merged[k], &part[1 - k]);
        canonical_of(&canon[k], &merged[k]);
    }
    canonical_of(&canon[2], &fwd);
    CHECK(memcmp(&canon[0], &canon[1], sizeof canon[0]) == 0 &&
              memcmp(&canon[0], &canon[2], sizeof canon[0]) == 0,
          "%s: either grouping must give the same canonical bytes", what);
    CHECK(bits(xacc_round_f32(&merged[0])) == bits(r), "%s: merged, %a", what,
          xacc_round_f32(&merged[0]));
    for (int fast = 1; fast >= 0; fast--) {
        xacc_set_fast_path(fast);
        xvec_t all, even, odd;
        CHECK(xvec_init(&all, 1) == 0 && xvec_init(&even, 1) == 0 && xvec_init(&odd, 1) == 0,
              "alloc");
        for (int i = 0; i < n; i++) {
            xvec_add_f64_exact(&all, 0, &d[i], 1);
            xvec_add_f64_exact(i % 2 ? &odd : &even, 0, &d[i], 1);
        }
        xvec_merge(&even, &odd);
        float a, b;
        xvec_round(&all, &a);
        xvec_round(&even, &b);
        CHECK(bits(a) == bits(r) && bits(b) == bits(r),
              "%s: xvec (fast path %d) gave %a, merged %a, want %a", what, fast, a, b, r);
        xvec_free(&all);
        xvec_free(&even);
        xvec_free(&odd);
    }
    xacc_set_fast_path(1);
}

static void test_huge_f64_terms(void) {
    const double c1[] = {0x1p169, 0x1p169};
    expect_f64_sum(c1, 2, "2^169 + 2^169 (was -inf)");
    const double c2[] = {0x1p200, -0x1p200, 0x1p-149};
    expect_f64_sum(c2, 3, "2^200 - 2^200 + 2^-149");
    const double c3[] = {0x1p200, 0x1p-149, -0x1p200};
    expect_f64_sum(c3, 3, "2^200 + 2^-149 - 2^200");
    const double c4[] = {DBL_MAX, -DBL_MAX, 1.5};
    expect_f64_sum(c4, 3, "DBL_MAX - DBL_MAX + 1.5");
    const double c5[] = {DBL_MAX, DBL_MAX};
    expect_f64_sum(c5, 2, "DBL_MAX + DBL_MAX overflows fp64 too");
    const double c6[] = {-DBL_MAX, -DBL_MAX, DBL_MAX};
    expect_f64_sum(c6, 3, "-DBL_MAX twice, + DBL_MAX");
    /* the largest doubles of 53 significant bits, cancelling to their ulp */
    const double c7[] = {DBL_MAX, -0x1.ffffffffffffep1023, -0x1p971, 0x1p-149};
    expect_f64_sum(c7, 4, "DBL_MAX - its predecessor - ulp + 2^-149");
    /* around the old top word's reach: 2^139 (first term past chunk[8])
     * and 2^169 (past its int64) */
    const double c8[] = {0x1.fffffffffffffp138, 0x1p139, -0x1.fffffffffffffp139, 0x1p-149};
    expect_f64_sum(c8, 4, "terms around 2^139, exact to 2^86 + 2^-149");
    const double c9[] = {0x1.fffffffffffffp168, 0x1p116, -0x1p169};
    expect_f64_sum(c9, 3, "largest 53-bit double below 2^169, + ulp - 2^169");
    const double c10[] = {0x1.fffffffffffffp169, 0x1.fffffffffffffp169, -0x1p171, 0x1.8p-148};
    expect_f64_sum(c10, 4, "terms just below 2^170");
    /* the fp32 overflow threshold reached from above */
    const double c11[] = {0x1p500, 0x1p128, -0x1p500, -0x1p103};
    expect_f64_sum(c11, 4, "2^128 - 2^103 (a tie: +inf) via 2^500");
    const double c12[] = {0x1p500, 0x1p128, -0x1p500, -0x1.0000000000001p103};
    expect_f64_sum(c12, 4, "just below the tie: FLT_MAX, via 2^500");
    /* an open xvec element holding 2^1000 whose next addition is inexact:
     * it moves to its accumulator with the huge sum */
    const double c13[] = {0x1p1000, 1.0, -0x1p1000};
    expect_f64_sum(c13, 3, "xvec slow element from 2^1000");
    const double c14[] = {0x1p1000, (double)FLT_MAX, -0x1p1000, 0x1.fffffffffffffp-97};
    expect_f64_sum(c14, 4, "FLT_MAX between 2^1000s");
    /* the explicit values, besides the oracle */
    xacc_t a;
    xacc_init(&a);
    xacc_add_f64_exact(&a, 0x1p169);
    xacc_add_f64_exact(&a, 0x1p169);
    CHECK(xacc_round_f32(&a) == INFINITY && xacc_round_f64(&a) == 0x1p170 && xacc_sign(&a) == 1,
          "2^169 + 2^169: %a, %a", xacc_round_f32(&a), xacc_round_f64(&a));
}

static double rand_double(int lo_exp, int hi_exp) {
    int e = lo_exp + rand_below(hi_exp - lo_exp + 1);
    double x = ldexp(1.0 + (double)(next_u64() >> 12) * 0x1p-52, e);
    return (next_u64() & 1) ? -x : x;
}

static void test_huge_random(void) {
    /* doubles over the whole domain (2^-97 is the lowest binade whose every
     * double is a multiple of 2^-149), clustered or not, with exact
     * cancellations and fp32 terms mixed in */
    double d[48];
    char what[64];
    for (int trial = 0; trial < 400; trial++) {
        int n = 1 + rand_below(48), kind = trial % 4;
        int centre = -97 + rand_below(1024 + 97 - 60);
        for (int i = 0; i < n; i++) {
            switch (kind) {
            case 0: d[i] = rand_double(-97, 1023); break;
            case 1: d[i] = rand_double(centre, centre + 60); break;
            case 2: /* mostly fp32 values */
                d[i] = rand_below(3) ? (double)rand_float(-149, 127) : rand_double(128, 1023);
                break;
            default: d[i] = rand_double(100, 200); break;
            }
            if (i > 0 && rand_below(3) == 0) d[i] = -d[rand_below(i)]; /* cancel an earlier term */
        }
        snprintf(what, sizeof what, "random trial %d (kind %d, n %d)", trial, kind, n);
        expect_f64_sum(d, n, what);
    }
}

static void test_range_limit(void) {
    /* doubling by merges (the only way there): 2^1023 * 2^73 = 2^1096 is in
     * range and rounds to inf, and cancels exactly */
    xacc_t pos, neg, t;
    xacc_init(&pos);
    xacc_init(&neg);
    xacc_add_f64_exact(&pos, 0x1p1023);
    xacc_add_f64_exact(&neg, -0x1p1023);
    for (int k = 0; k < 73; k++) {
        t = pos, xacc_merge(&pos, &t);
        t = neg, xacc_merge(&neg, &t);
    }
    CHECK(xacc_round_f32(&pos) == INFINITY && xacc_round_f64(&pos) == INFINITY &&
              xacc_sign(&pos) == 1, "2^1096: %a", xacc_round_f32(&pos));
    CHECK(xacc_round_f32(&neg) == -INFINITY && xacc_sign(&neg) == -1, "-2^1096");
    t = pos;
    xacc_add_f32(&t, 0x1p-149f);
    xacc_merge(&t, &neg);
    CHECK(bits(xacc_round_f32(&t)) == bits(0x1p-149f), "2^1096 + 2^-149 - 2^1096: %a",
          xacc_round_f32(&t));
    /* the range is [-2^1097, 2^1097): out of it, the canonical NaN, sticky */
    t = neg, xacc_merge(&neg, &t);
    CHECK(xacc_round_f32(&neg) == -INFINITY && xacc_sign(&neg) == -1, "-2^1097 still fits");
    t = pos, xacc_merge(&pos, &t);
    CHECK(bits(xacc_round_f32(&pos)) == 0x7fc00000u && isnan(xacc_round_f64(&pos)),
          "2^1097 is out of range: got %a", xacc_round_f32(&pos));
    xacc_merge(&pos, &neg);
    xacc_add_f32(&pos, 1.0f);
    CHECK(bits(xacc_round_f32(&pos)) == 0x7fc00000u, "out of range stays NaN");
}

static void test_fp32_sums_past_2_170(void) {
    /* fp32 terms alone, past what chunk[8] alone could hold (2^170, which
     * overflowed its int64): 2^20 terms of FLT_MAX doubled 25 times by
     * merges, then cancelled to 1.5 */
    xacc_t a, b, t;
    xacc_init(&a);
    xacc_init(&b);
    for (int i = 0; i < 1 << 20; i++) {
        xacc_add_f32(&a, FLT_MAX);
        xacc_add_f32(&b, -FLT_MAX);
    }
    big_t exact;
    big_zero(&exact);
    big_add_float(&exact, FLT_MAX);
    for (int k = 0; k < 20 + 25; k++) big_add(&exact, &exact);
    for (int k = 0; k < 25; k++) {
        t = a, xacc_merge(&a, &t);
        t = b, xacc_merge(&b, &t);
    }
    CHECK(is_correct_rounding(&exact, xacc_round_f32(&a)), "2^45 FLT_MAX: %a", xacc_round_f32(&a));
    CHECK(xacc_round_f64(&a) == (double)FLT_MAX * 0x1p45, "2^45 FLT_MAX in fp64: %a",
          xacc_round_f64(&a));
    xacc_merge(&a, &b);
    xacc_add_f32(&a, 1.5f);
    CHECK(xacc_round_f32(&a) == 1.5f, "and cancels back exactly: %a", xacc_round_f32(&a));
}

static void test_xvec_huge(void) {
    /* the open accumulators take the same huge values on both paths: an
     * fp64 element that stays exact, and one that moves to its xacc_t */
    const double twice[2] = {0x1p169, 0x1p169}, slow[3] = {0x1p1000, 1.0, -0x1p1000};
    for (int fast = 1; fast >= 0; fast--) {
        xacc_set_fast_path(fast);
        xvec_t v;
        CHECK(xvec_init(&v, 2) == 0, "alloc");
        for (int i = 0; i < 3; i++) {
            if (i < 2) xvec_add_f64_exact(&v, 0, &twice[i], 1);
            xvec_add_f64_exact(&v, 1, &slow[i], 1);
        }
        CHECK(xvec_is_slow(&v, 1) || !fast, "2^1000 + 1 is inexact in fp64");
        float out[2];
        xvec_round(&v, out);
        CHECK(out[0] == INFINITY && out[1] == 1.0f, "fast path %d: 2^169 + 2^169 gave %a, "
              "2^1000 + 1 - 2^1000 gave %a", fast, out[0], out[1]);
        xacc_t e;
        xvec_get(&v, 0, &e);
        CHECK(xacc_round_f64(&e) == 0x1p170, "fast path %d: xvec_get gave %a", fast,
              xacc_round_f64(&e));
        xvec_free(&v);
    }
    xacc_set_fast_path(1);
}

static void test_f64_out_of_domain(void) {
    /* doubles with bits below 2^-149 are no sum of fp32 values: NaN, not a
     * silently truncated term */
    const double bad[] = {0x1p-150, 0x1.8p-149, 0x1.0000000000001p-100, -0x1p-1022, 0x1p-1074};
    for (int k = 0; k < 5; k++) {
        xacc_t a;
        xacc_init(&a);
        xacc_add_f32(&a, 1.0f);
        xacc_add_f64_exact(&a, bad[k]);
        CHECK(bits(xacc_round_f32(&a)) == 0x7fc00000u, "%a: got %a", bad[k], xacc_round_f32(&a));
    }
    /* the smallest ones that are multiples of 2^-149 stay exact */
    const double good[] = {0x1p-149, -0x1.8p-148, 0x1.0000000000001p-97, 0x1.fffffffffffffp-97};
    expect_f64_sum(good, 4, "smallest multiples of 2^-149");
}

static void test_xvec_plain_sums(void) {
    /* the plain-sums build's addition: fp32 running sums held in the
     * vector, across blocks; an overflow (vector loop) and a NaN (element
     * by element, once an element is slow) are kept in accumulators, and a
     * slow element (an exact add's) is rounded to fp32 first */
    enum { N = 150, ROUNDS = 7 };
    xvec_t v, w;
    CHECK(xvec_init(&v, N) == 0 && xvec_init(&w, N) == 0, "alloc");
    float want[N] = {0}, x[N], out[N];
    for (int r = 0; r < ROUNDS; r++) {
        if (r == 3) { /* element 70 goes slow: 2^100 + its sum is inexact in fp64 */
            const double big = 0x1p100;
            xvec_add_f64_exact(&v, 70, &big, 1);
            CHECK(xvec_is_slow(&v, 70), "2^100 + a small sum went slow");
            want[70] = 0x1p100f; /* the exact sum, rounded to fp32 */
        }
        for (int i = 0; i < N; i++) x[i] = rand_float(-10, 10);
        if (r < 2) x[6] = FLT_MAX; /* FLT_MAX + FLT_MAX: +inf */
        if (r == 4 || r == 5) x[5] = r == 4 ? -INFINITY : INFINITY; /* -inf + inf: NaN */
        for (int i = 0; i < N; i++) want[i] = want[i] + x[i];
        xvec_add_plain(&v, 0, x, N);
        xvec_round(&v, out);
        int bad = 0;
        for (int i = 0; i < N; i++)
            bad += isnan(want[i]) ? bits(out[i]) != 0x7fc00000u : bits(out[i]) != bits(want[i]);
        CHECK(bad == 0, "round %d: %d of %d elements are not the fp32 running sums", r, bad, N);
        if (r == 1) CHECK(xvec_is_slow(&v, 6) && v.n_slow == 1, "the vector loop's inf is kept");
    }
    CHECK(want[6] == INFINITY && isnan(want[5]), "the case has its inf and NaN");
    CHECK(xvec_is_slow(&v, 5) && xvec_is_slow(&v, 6), "inf and NaN are kept in accumulators");
    /* the vector is still one the exact functions take */
    xvec_zero(&w);
    xvec_merge(&w, &v);
    xvec_round(&w, out);
    CHECK(out[6] == INFINITY && bits(out[5]) == 0x7fc00000u && bits(out[0]) == bits(want[0]),
          "merged: %a %a %a", out[6], out[5], out[0]);
    /* the store into a claimed vector is the add to zeros: -0 becomes +0 */
    const float y[3] = {-0.0f, INFINITY, 1.5f};
    xvec_t u;
    CHECK(xvec_init(&u, 3) == 0 && xvec_claim_zero(&u), "alloc, claim");
    xvec_store_plain(&u, 0, y, 3);
    xvec_round(&u, out);
    CHECK(bits(out[0]) == 0 && out[1] == INFINITY && xvec_is_slow(&u, 1) && out[2] == 1.5f,
          "stored: %a %a %a", out[0], out[1], out[2]);
    xvec_free(&u);
    xvec_free(&v);
    xvec_free(&w);
}

int main(void) {
    RUN(test_random_sums_are_correctly_rounded);
    RUN(test_permutations_and_partitions);
    RUN(test_hard_cases);
    RUN(test_round_f64);
    RUN(test_f64_exact_handover);
    RUN(test_xvec_matches_scalar_accumulators);
    RUN(test_xvec_paths_agree);
    RUN(test_xvec_store_equals_add_to_zero);
    RUN(test_xvec_certificate_boundary);
    RUN(test_forced_carries);
    RUN(test_array_bands);
    RUN(test_huge_f64_terms);
    RUN(test_huge_random);
    RUN(test_range_limit);
    RUN(test_fp32_sums_past_2_170);
    RUN(test_xvec_huge);
    RUN(test_f64_out_of_domain);
    RUN(test_xvec_plain_sums);
    return harness_done();
}
