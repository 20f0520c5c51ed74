/* xsum.c - exact sums on the fast path: fp64 under a certificate.
 *
 * Every fp32 value is a multiple of its ulp. If all terms are multiples
 * of 2^q and sum|x| < 2^(q+53), then every partial sum, in any order, is
 * a multiple of 2^q smaller than 2^(q+53): it fits fp64's 53-bit
 * significand, so fp64 addition is exact and one conversion to fp32
 * rounds the true sum once, to nearest-even. fold.h checks a sufficient
 * form of it from the largest and smallest non-zero magnitude (the
 * smallest term has the smallest ulp). Terms that break it send the
 * whole sum to the superaccumulator. (xvec.c checks each addition with
 * TwoSum instead, which suits sums that stay open.)
 */
#include "parity/xacc.h"

#include "fold.h"
#include "simd.h"

#include <math.h>

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

static float xsum_slow(const float *x, size_t n, size_t stride) {
    xacc_t acc;
    xacc_init(&acc);
    if (stride == 1)
        xacc_add_array_f32(&acc, x, n); /* banded: exact fp64 bins (xacc.c) */
    else
        for (size_t i = 0; i < n; i++) xacc_add_f32(&acc, x[i * stride]);
    count_slow++;
    return xacc_round_f32(&acc);
}

/* The certificate's loop (fold.h): 16 independent fp64 lanes, each with
 * its largest and smallest non-zero magnitude. While the certificate
 * holds, fp64 addition is exact in any order, so the lanes' sum is the sum;
 * if it fails, the lanes' values are thrown away. */
#define LANES 16
PARITY_SIMD_CLONES
static int fast_sum(const float *x, size_t n, size_t stride, double *out) {
    double s[LANES];
    float mx[LANES], mn[LANES];
    fold_init(s, mx, mn, LANES);
    size_t i = 0;
    for (; i + LANES <= n; i += LANES)
        for (int l = 0; l < LANES; l++) fold_one(&s[l], &mx[l], &mn[l], x[(i + (size_t)l) * stride]);
    for (; i < n; i++) fold_one(&s[0], &mx[0], &mn[0], x[i * stride]);
    double total = 0.0;
    float big = 0.0f, small = INFINITY;
    for (int l = 0; l < LANES; l++) {
        total = total + s[l];
        big = mx[l] > big ? mx[l] : big;
        small = mn[l] < small ? mn[l] : small;
    }
    if (!fold_certified(total, big, small, fold_p2(n))) return 0;
    *out = total;
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

int xsum_f64_exact(const float *x, size_t n, double *exact) {
    return fast_path_enabled && fast_sum(x, n, 1, exact);
}

