/* xsum.c - exact sums on the fast path: fp64 under a certificate.
 *
 * Every fp32 value is a multiple of its ulp. If all terms are multiples
 * of 2^q and sum|x| < 2^(q+53), then every partial sum, in any order, is
 * a multiple of 2^q smaller than 2^(q+53): it fits fp64's 53-bit
 * significand, so fp64 addition is exact and one conversion to fp32
 * rounds the true sum once, to nearest-even. The certificate is checked
 * on the fp64 sum of magnitudes, which is itself exact while it holds and
 * (rounding being monotone, the bound a power of two) cannot slip below
 * the bound once the true value reaches it. Terms that break it send the
 * sum, or the one xvec element, to the superaccumulator.
 */
#include "parity/xacc.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static int fast_path_enabled = 1;
static _Thread_local uint64_t count_fast, count_slow;

void xacc_set_fast_path(int enabled) { fast_path_enabled = enabled; }
int xacc_fast_path_enabled(void) { return fast_path_enabled; }

void xacc_path_counts(uint64_t *fast, uint64_t *slow) {
    *fast = count_fast;
    *slow = count_slow;
}

/* 2^(q+53) for one term, q = exponent of its ulp: 2^(E-97) for a normal
 * x with biased exponent E, 2^-96 for subnormals; +inf for zeros, which
 * constrain nothing. Inf/NaN give +inf here, but their own magnitude then
 * breaks the certificate, so they always reach the accumulator. */
static inline double term_bound(float x) {
    uint32_t u;
    memcpy(&u, &x, sizeof u);
    uint32_t e = u & 0x7f800000u;
    float pow2;
    memcpy(&pow2, &e, sizeof pow2);
    double b = (double)pow2 * 0x1p30;
    if (e == 0) b = (x == 0.0f) ? INFINITY : 0x1p-96;
    return b;
}

static float xsum_slow(const float *x, size_t n, size_t stride) {
    xacc_t acc;
    xacc_init(&acc);
    for (size_t i = 0; i < n; i++) xacc_add_f32(&acc, x[i * stride]);
    count_slow++;
    return xacc_round_f32(&acc);
}

float xsum_f32_strided(const float *x, size_t n, size_t stride) {
    if (fast_path_enabled) {
        double sum = 0.0, mag = 0.0, bound = INFINITY;
        for (size_t i = 0; i < n; i++) {
            float xi = x[i * stride];
            double b = term_bound(xi);
            bound = b < bound ? b : bound;
            sum += (double)xi;
            mag += fabs((double)xi);
        }
        if (mag < bound) {
            count_fast++;
            return (float)sum;
        }
    }
    return xsum_slow(x, n, stride);
}

float xsum_f32(const float *x, size_t n) { return xsum_f32_strided(x, n, 1); }

/* ---- xvec_t ------------------------------------------------------------ */

int xvec_init(xvec_t *v, size_t n) {
    memset(v, 0, sizeof *v);
    v->n = n;
    size_t bytes = (n ? n : 1) * sizeof(double);
    v->sum = malloc(bytes);
    v->mag = malloc(bytes);
    v->bound = malloc(bytes);
    if (!v->sum || !v->mag || !v->bound) {
        xvec_free(v);
        return -1;
    }
    xvec_zero(v);
    return 0;
}

void xvec_free(xvec_t *v) {
    free(v->sum);
    free(v->mag);
    free(v->bound);
    free(v->slow);
    memset(v, 0, sizeof *v);
}

void xvec_zero(xvec_t *v) {
    for (size_t i = 0; i < v->n; i++) {
        v->sum[i] = 0.0;
        v->mag[i] = 0.0;
        v->bound[i] = INFINITY;
    }
    v->n_slow = 0;
}

static int is_slow(const xvec_t *v, size_t i) { return v->bound[i] == -INFINITY; }

/* Moves element i, exactly, into an accumulator of its own and returns it. */
static xacc_t *make_slow(xvec_t *v, size_t i) {
    if (is_slow(v, i)) return &v->slow[(size_t)v->sum[i]];
    if (v->n_slow == v->cap_slow) {
        size_t cap = v->cap_slow ? 2 * v->cap_slow : 16;
        xacc_t *grown = realloc(v->slow, cap * sizeof *grown);
        if (!grown) abort(); /* a few hundred bytes; nothing sane to do */
        v->slow = grown;
        v->cap_slow = cap;
    }
    size_t slot = v->n_slow++;
    xacc_t *acc = &v->slow[slot];
    xacc_init(acc);
    xacc_add_f64_exact(acc, v->sum[i]);
    v->sum[i] = (double)slot;
    v->mag[i] = 0.0;
    v->bound[i] = -INFINITY;
    return acc;
}

/* Adds x[0..n) to elements dst .. dst+n: the vectorisable common case
 * commits every element whose certificate still holds; the rest (already
 * slow ones have bound -inf, so they fail too) go to accumulators. */
#define XVEC_BLOCK 64
static void add_run(xvec_t *v, size_t dst, const float *x, size_t n) {
    int force_slow = !fast_path_enabled;
    for (size_t base = 0; base < n; base += XVEC_BLOCK) {
        size_t len = n - base < XVEC_BLOCK ? n - base : XVEC_BLOCK;
        double *sum = v->sum + dst + base, *mag = v->mag + dst + base;
        double *bound = v->bound + dst + base;
        const float *xs = x + base;
        unsigned char ok[XVEC_BLOCK];
        int failures = 0;
        for (size_t j = 0; j < len; j++) {
            double b = term_bound(xs[j]);
            double nb = b < bound[j] ? b : bound[j];
            double nm = mag[j] + fabs((double)xs[j]);
            double ns = sum[j] + (double)xs[j];
            int good = (nm < nb) & !force_slow;
            ok[j] = (unsigned char)good;
            failures += !good;
            sum[j] = good ? ns : sum[j];
            mag[j] = good ? nm : mag[j];
            bound[j] = good ? nb : bound[j];
        }
        if (failures)
            for (size_t j = 0; j < len; j++)
                if (!ok[j]) xacc_add_f32(make_slow(v, dst + base + j), xs[j]);
    }
}

void xvec_add(xvec_t *v, size_t offset, const float *x, size_t n) { add_run(v, offset, x, n); }

void xvec_add_tile(xvec_t *v, size_t offset, size_t ld, const float *tile, int rows, int cols,
                   int ldt) {
    for (int r = 0; r < rows; r++)
        add_run(v, offset + (size_t)r * ld, tile + (size_t)r * (size_t)ldt, (size_t)cols);
}

void xvec_get(const xvec_t *v, size_t i, xacc_t *out) {
    if (is_slow(v, i)) {
        *out = v->slow[(size_t)v->sum[i]];
        return;
    }
    xacc_init(out);
    xacc_add_f64_exact(out, v->sum[i]);
}

void xvec_merge(xvec_t *dst, const xvec_t *src) {
    for (size_t i = 0; i < dst->n; i++) {
        if (!fast_path_enabled || is_slow(dst, i) || is_slow(src, i)) {
            xacc_t theirs;
            xvec_get(src, i, &theirs);
            xacc_merge(make_slow(dst, i), &theirs);
            continue;
        }
        /* Both exact multiples of 2^min(q); the combined magnitude bounds
         * the combined sum, so the same certificate covers the merge. */
        double nb = src->bound[i] < dst->bound[i] ? src->bound[i] : dst->bound[i];
        double nm = dst->mag[i] + src->mag[i];
        if (nm < nb) {
            dst->sum[i] += src->sum[i];
            dst->mag[i] = nm;
            dst->bound[i] = nb;
        } else {
            xacc_add_f64_exact(make_slow(dst, i), src->sum[i]);
        }
    }
}

void xvec_round(const xvec_t *v, float *out) {
    uint64_t slow = 0;
    for (size_t i = 0; i < v->n; i++) {
        if (is_slow(v, i)) {
            out[i] = xacc_round_f32(&v->slow[(size_t)v->sum[i]]);
            slow++;
        } else {
            out[i] = (float)v->sum[i];
        }
    }
    count_slow += slow;
    count_fast += v->n - slow;
}
