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
 * whole sum to the superaccumulator. (xvec.c checks each addition with
 * TwoSum instead, which suits sums that stay open.)
 */
#include "parity/xacc.h"

#include <math.h>
#include <string.h>

static int fast_path_enabled = 1;
static _Thread_local uint64_t count_fast, count_slow;

void xacc_set_fast_path(int enabled) { fast_path_enabled = enabled; }
int xacc_fast_path_enabled(void) { return fast_path_enabled; }

void xvec_path_counts_add(uint64_t *fast, uint64_t *slow); /* xvec.c */

void xacc_path_counts(uint64_t *fast, uint64_t *slow) {
    *fast = count_fast;
    *slow = count_slow;
    xvec_path_counts_add(fast, slow);
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
    double normal = (double)pow2 * 0x1p30, tiny = x == 0.0f ? INFINITY : 0x1p-96;
    return e ? normal : tiny;
}

static float xsum_slow(const float *x, size_t n, size_t stride) {
    xacc_t acc;
    xacc_init(&acc);
    for (size_t i = 0; i < n; i++) xacc_add_f32(&acc, x[i * stride]);
    count_slow++;
    return xacc_round_f32(&acc);
}

/* The certificate's loop. While it holds, fp64 addition is exact in any
 * order, so four independent lanes (which the compiler can keep in
 * vector registers) give the same sum as one; if it fails, the lanes'
 * values are thrown away. */
#define LANES 4
static int fast_sum(const float *x, size_t n, size_t stride, double *out) {
    double sum[LANES] = {0}, mag[LANES] = {0}, bound[LANES];
    for (int l = 0; l < LANES; l++) bound[l] = INFINITY;
    size_t i = 0;
    for (; i + LANES <= n; i += LANES) {
        for (int l = 0; l < LANES; l++) {
            float xi = x[(i + (size_t)l) * stride];
            double b = term_bound(xi);
            bound[l] = b < bound[l] ? b : bound[l];
            sum[l] += (double)xi;
            mag[l] += fabs((double)xi);
        }
    }
    for (; i < n; i++) {
        float xi = x[i * stride];
        double b = term_bound(xi);
        bound[0] = b < bound[0] ? b : bound[0];
        sum[0] += (double)xi;
        mag[0] += fabs((double)xi);
    }
    double total_mag = (mag[0] + mag[1]) + (mag[2] + mag[3]);
    double min_bound = bound[0];
    for (int l = 1; l < LANES; l++) min_bound = bound[l] < min_bound ? bound[l] : min_bound;
    if (!(total_mag < min_bound)) return 0;
    *out = (sum[0] + sum[1]) + (sum[2] + sum[3]);
    return 1;
}

float xsum_f32_strided(const float *x, size_t n, size_t stride) {
    double sum;
    if (fast_path_enabled && fast_sum(x, n, stride, &sum)) {
        count_fast++;
        return (float)sum;
    }
    return xsum_slow(x, n, stride);
}

float xsum_f32(const float *x, size_t n) { return xsum_f32_strided(x, n, 1); }

