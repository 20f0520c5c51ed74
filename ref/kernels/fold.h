/* fold.h - the vectorisable exact-sum fast path (internal to ref/).
 *
 * Many fp32 terms per element are folded into an fp64 running sum, the
 * largest magnitude and the smallest non-zero magnitude. Every fp32 term
 * is a multiple of its ulp, which exceeds |term| * 2^-24, and the term of
 * smallest magnitude has the smallest ulp 2^q. So when
 *     p2 * max|term| < 2^29 * min|term|     (p2 = a power of two >= #terms)
 * sum|term| < 2^(q+53): every partial sum, in any order, is a multiple of
 * 2^q that fits fp64's significand. The fp64 sum is then exact, and
 * (float) of it is the exact sum rounded once, the bits xacc.h gives.
 * Terms that break the certificate (a very wide range of magnitudes, inf,
 * NaN: a NaN makes the sum NaN) must take the superaccumulator instead.
 *
 * An exact zero sum is +0 (the running sum starts at +0.0, and
 * +0 + -0 = +0), as xacc.h's rule requires.
 */
#ifndef PARITY_MODEL_FOLD_H
#define PARITY_MODEL_FOLD_H

#include <math.h>
#include <stddef.h>

enum { FOLD_BLOCK = 64 };

static inline void fold_init(double *sum, float *mx, float *mn, size_t n) {
    for (size_t i = 0; i < n; i++) sum[i] = 0.0, mx[i] = 0.0f, mn[i] = INFINITY;
}

/* The state of the first term alone: fold_init then fold, in one pass. */
static inline void fold_first_one(double *sum, float *mx, float *mn, float p) {
    float a = fabsf(p);
    *sum = 0.0 + (double)p; /* +0 for either zero, as a running sum gives */
    *mx = a;
    *mn = a == 0.0f ? INFINITY : a;
}
static inline void fold_first_block(double *restrict sum, float *restrict mx,
                                    float *restrict mn, const float *restrict p) {
    for (int i = 0; i < FOLD_BLOCK; i++) fold_first_one(&sum[i], &mx[i], &mn[i], p[i]);
}
static inline void fold_first(double *sum, float *mx, float *mn, const float *p, size_t n) {
    size_t i = 0;
    for (; i + FOLD_BLOCK <= n; i += FOLD_BLOCK) fold_first_block(sum + i, mx + i, mn + i, p + i);
    for (; i < n; i++) fold_first_one(&sum[i], &mx[i], &mn[i], p[i]);
}

static inline void fold_one(double *sum, float *mx, float *mn, float p) {
    float a = fabsf(p);
    float nz = a == 0.0f ? INFINITY : a;
    *sum = *sum + (double)p;
    *mx = a > *mx ? a : *mx;
    *mn = nz < *mn ? nz : *mn;
}

/* Branch-free blocks of constant length, so that GCC vectorises at -O2. */
static inline void fold_block(double *restrict sum, float *restrict mx, float *restrict mn,
                              const float *restrict p) {
    for (int i = 0; i < FOLD_BLOCK; i++) fold_one(&sum[i], &mx[i], &mn[i], p[i]);
}

/* sum[i] += p[i] etc. for i < n */
static inline void fold(double *sum, float *mx, float *mn, const float *p, size_t n) {
    size_t i = 0;
    for (; i + FOLD_BLOCK <= n; i += FOLD_BLOCK) fold_block(sum + i, mx + i, mn + i, p + i);
    for (; i < n; i++) fold_one(&sum[i], &mx[i], &mn[i], p[i]);
}

/* The smallest power of two >= terms. */
static inline double fold_p2(size_t terms) {
    double p2 = 1.0;
    while (p2 < (double)terms) p2 *= 2.0;
    return p2;
}

/* 1 when the fp64 sum of the folded terms is exact (and finite, < 2^100). */
static inline int fold_certified(double sum, float mx, float mn, double p2) {
    double big = (double)mx * p2;
    return (big < (double)mn * 0x1p29) & (big < 0x1p100) & (sum - sum == 0.0);
}

/* bad[i] = !fold_certified(...) for i < n; returns how many are bad.
 * The certificate is evaluated as 0.0/1.0 flags in fp64, which GCC
 * vectorises; the common all-good block costs one vector pass. */
static inline void fold_flags_block(double *restrict flag, const double *restrict sum,
                                    const float *restrict mx, const float *restrict mn,
                                    double p2) {
    for (int i = 0; i < FOLD_BLOCK; i++) {
        double big = (double)mx[i] * p2, lim = (double)mn[i] * 0x1p29, d = sum[i] - sum[i];
        flag[i] = (big < lim ? 0.0 : 1.0) + (big < 0x1p100 ? 0.0 : 1.0) + (d == 0.0 ? 0.0 : 1.0);
    }
}
/* Always inlined, so that it runs in its caller's vector width (simd.h). */
static inline __attribute__((always_inline)) size_t fold_check(unsigned char *bad, const double *sum, const float *mx,
                                const float *mn, size_t n, double p2) {
    size_t i = 0, count = 0;
    double flag[FOLD_BLOCK];
    for (; i + FOLD_BLOCK <= n; i += FOLD_BLOCK) {
        fold_flags_block(flag, sum + i, mx + i, mn + i, p2);
        /* any flag set? Lane-wise sums of small integers (exact), so the
         * loop vectorises instead of chaining one add after another. */
        double lane[8] = {0, 0, 0, 0, 0, 0, 0, 0};
        for (int k = 0; k < FOLD_BLOCK; k += 8)
            for (int l = 0; l < 8; l++) lane[l] = lane[l] + flag[k + l];
        double any = ((lane[0] + lane[1]) + (lane[2] + lane[3])) +
                     ((lane[4] + lane[5]) + (lane[6] + lane[7]));
        for (int k = 0; k < FOLD_BLOCK; k++) bad[i + k] = 0;
        if (any != 0.0)
            for (int k = 0; k < FOLD_BLOCK; k++) {
                bad[i + k] = flag[k] != 0.0;
                count += bad[i + k];
            }
    }
    for (; i < n; i++) {
        bad[i] = (unsigned char)!fold_certified(sum[i], mx[i], mn[i], p2);
        count += bad[i];
    }
    return count;
}

/* ---- TwoSum-checked folding (contract.c's K-tile sums) -------------------
 *
 * The same fp64 running sum, checked addition by addition instead of by
 * the bound above: Knuth's TwoSum gives each addition's rounding error
 * exactly, and the error is zero exactly when the addition was exact
 * (finite values, round to nearest; an overflow or a NaN makes it NaN).
 * So a sum whose errors were all zero is the exact sum, whatever the
 * spread of its terms, and (float) of it rounds it once. No magnitudes are
 * kept: a fold reads the partial and reads and writes the sum, 12 bytes
 * an element against the certificate's 28. The errors are not kept per
 * element either: their magnitudes are summed per group of FOLD_BLOCK
 * elements (a sum of non-negative values is zero only when every one is,
 * and a NaN stays NaN), and a group with a non-zero total takes the
 * superaccumulator for all of its elements. */

/* sum[i] = the first term (+0 for either zero, as a running sum gives). */
static inline void fold2_first(double *restrict sum, const float *restrict p, size_t n) {
    for (size_t i = 0; i < n; i++) sum[i] = 0.0 + (double)p[i];
}

/* sum[i] += p[i] for the FOLD_BLOCK elements of one group; returns the
 * sum of the additions' |error|s. Eight lanes, so that it vectorises. */
static inline double fold2_block(double *restrict sum, const float *restrict p) {
    double lane[8] = {0, 0, 0, 0, 0, 0, 0, 0};
    for (int k = 0; k < FOLD_BLOCK; k += 8)
        for (int l = 0; l < 8; l++) {
            const double a = sum[k + l], b = (double)p[k + l], s = a + b, bb = s - a;
            const double e = (a - (s - bb)) + (b - bb);
            sum[k + l] = s;
            lane[l] = lane[l] + fabs(e);
        }
    return ((lane[0] + lane[1]) + (lane[2] + lane[3])) + ((lane[4] + lane[5]) + (lane[6] + lane[7]));
}

/* sum[i] += p[i], i < n; err[g] += the |error|s of group g (elements
 * g*FOLD_BLOCK ..; the last group may be short). */
static inline __attribute__((always_inline)) void fold2(double *restrict sum, double *restrict err,
                                                        const float *restrict p, size_t n) {
    size_t i = 0, g = 0;
    for (; i + FOLD_BLOCK <= n; i += FOLD_BLOCK, g++) err[g] = err[g] + fold2_block(sum + i, p + i);
    for (; i < n; i++) {
        const double a = sum[i], b = (double)p[i], s = a + b, bb = s - a;
        sum[i] = s;
        err[g] = err[g] + fabs((a - (s - bb)) + (b - bb));
    }
}

/* Groups of n elements (the last may be short). */
static inline size_t fold2_groups(size_t n) { return (n + FOLD_BLOCK - 1) / FOLD_BLOCK; }

#endif
