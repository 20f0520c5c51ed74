/* test_xacc.c - the exact accumulator against an independent big integer.
 *
 * The oracle here shares no code with ref/kernels/xacc.c: it decomposes
 * floats with frexpf, keeps the exact sum as a 384-bit two's-complement
 * integer in units of 2^-149, and checks a result by the *definition* of
 * round-to-nearest-even (no neighbour float is closer; ties go to the even
 * significand) instead of by re-implementing the rounding.
 */
#include <float.h>
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "harness.h"
#include "parity/xacc.h"

/* ---- the oracle: 384-bit two's complement, units of 2^-149 ---------- */
#define LIMBS 12
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
    return harness_done();
}
