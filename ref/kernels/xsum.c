/* xsum.c - exact sums on the fast path: fp64 with every addition checked.
 *
 * fold.h's fold_array adds the terms in 16 fp64 lanes and checks each
 * addition with TwoSum; when none had an error, the fp64 total is the
 * exact sum and one conversion to fp32 rounds it once, to nearest-even.
 * Otherwise (a sum that needs more than 53 bits, inf, NaN) the whole sum
 * goes to the superaccumulator. Both give the same bits
 * (tests/unit/test_xacc.c).
 *
 * Under a float order (float_order.h) the same terms are summed in fp32
 * in that order instead: one test per sum.
 */
#include "parity/xacc.h"

#include "float_order_sum.h"
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

/* Cloned per vector width (simd.h); the contiguous case gets its own
 * instance with stride 1 constant, which vectorises. */
PARITY_SIMD_CLONES
static int fast_sum(const float *x, size_t n, size_t stride, double *out) {
    return stride == 1 ? fold_array(x, n, 1, out) : fold_array(x, n, stride, out);
}

float xsum_f32_strided(const float *x, size_t n, size_t stride) {
    const float_order_t *o = forder_sums();
    if (o) return forder_sum(o, x, n, stride);
    double sum;
    if (fast_path_enabled && fast_sum(x, n, stride, &sum)) {
        count_fast++;
        return (float)sum;
    }
    return xsum_slow(x, n, stride);
}

float xsum_f32(const float *x, size_t n) { return xsum_f32_strided(x, n, 1); }
