/* fold.h - the vectorisable exact-sum fast path (internal to ref/).
 *
 * fp32 terms are added into fp64 running sums, and every addition is
 * checked: Knuth's TwoSum gives an addition's rounding error exactly, and
 * the error is zero exactly when the addition was exact (finite values,
 * round to nearest; an overflow or a NaN makes it NaN). So a sum whose
 * errors were all zero is the exact sum, whatever the spread of its terms
 * and whatever the order, and (float) of it is the exact sum rounded
 * once: the bits xacc.h gives. A sum with a non-zero error (one that needs
 * more than fp64's 53 bits, an inf, a NaN) must take the superaccumulator
 * instead.
 *
 * The errors are not kept per sum: their magnitudes are added up per
 * group (a sum of non-negative values is zero only when every one is, and
 * a NaN stays NaN), and a group with a non-zero total takes the
 * superaccumulator for all of its sums.
 *
 * An exact zero sum is +0 (a running sum starts at +0.0, and
 * +0 + -0 = +0), as xacc.h's rule requires.
 *
 * Users: contract.c (the K-tile sums of matrix products), accum.c (sums
 * of rows, e.g. bias gradients), xsum.c (sums of one array). Each calls
 * these always-inline kernels from a function cloned per vector width
 * (simd.h), with the shape arguments constant, so that each instance
 * vectorises without branches.
 */
#ifndef PARITY_MODEL_FOLD_H
#define PARITY_MODEL_FOLD_H

#include <math.h>
#include <stddef.h>

/* Sums a group of errors covers in a row (fold_row). */
enum { FOLD_BLOCK = 64 };

/* Terms one pass of fold_row adds to each sum. At most four: fold_terms
 * is written out for up to four. */
enum { FOLD_TERMS = 4 };

#define FOLD_INLINE static inline __attribute__((always_inline))

/* One TwoSum-checked addition: returns s + b, adds its |error| to *lane. */
FOLD_INLINE double fold_add(double s, double b, double *lane) {
    const double r = s + b, bb = r - s;
    *lane = *lane + fabs((s - (r - bb)) + (b - bb));
    return r;
}

/* One sum: start + p[0] + ... + p[q-1] (term t at p + t * ps), each
 * addition checked; from_first starts from +0 + p[0] instead of start.
 * Written out rather than looped: GCC at -O2 does not unroll a loop of
 * constant q completely, and an inner loop keeps the loop over sums
 * around it from vectorising. */
FOLD_INLINE double fold_terms(double start, const float *p, size_t ps, int q, int from_first,
                              double *lane) {
    double s = from_first ? 0.0 + (double)p[0] : fold_add(start, (double)p[0], lane);
    if (q > 1) s = fold_add(s, (double)p[ps], lane);
    if (q > 2) s = fold_add(s, (double)p[2 * ps], lane);
    if (q > 3) s = fold_add(s, (double)p[3 * ps], lane);
    return s;
}

/* A row of w sums: q terms each (term t of sum e at p[t * ps + e]) added
 * into sum[0..w), or, when to_out (a last pass), rounded once into
 * out[0..w) instead. err[g] += the |error|s of the row's group g (sums
 * g*FOLD_BLOCK ..; the last group may be short). Eight lanes, so that the
 * loop vectorises. */
FOLD_INLINE void fold_row(double *restrict sum, double *restrict err, const float *restrict p,
                          size_t ps, int q, int from_first, int to_out, float *restrict out,
                          int w) {
    int i = 0, g = 0;
    for (; i + FOLD_BLOCK <= w; i += FOLD_BLOCK, g++) {
        double lane[8] = {0, 0, 0, 0, 0, 0, 0, 0};
        for (int k = 0; k < FOLD_BLOCK; k += 8)
            for (int l = 0; l < 8; l++) {
                const int e = i + k + l;
                const double s =
                    fold_terms(from_first ? 0.0 : sum[e], p + e, ps, q, from_first, &lane[l]);
                if (to_out)
                    out[e] = (float)s;
                else
                    sum[e] = s;
            }
        err[g] = err[g] + (((lane[0] + lane[1]) + (lane[2] + lane[3])) +
                           ((lane[4] + lane[5]) + (lane[6] + lane[7])));
    }
    double lane = 0.0;
    for (int e = i; e < w; e++) {
        const double s = fold_terms(from_first ? 0.0 : sum[e], p + e, ps, q, from_first, &lane);
        if (to_out)
            out[e] = (float)s;
        else
            sum[e] = s;
    }
    if (i < w) err[g] = err[g] + lane;
}

/* Error groups in a row of w sums (the last may be short). */
static inline int fold_groups(int w) { return (w + FOLD_BLOCK - 1) / FOLD_BLOCK; }

/* One pass over h rows of w sums: q terms each (1 <= q <= FOLD_TERMS),
 * row r's term t at P + r * prow + t * pterm; sums at sum + r * w, error
 * groups at err + r * fold_groups(w); from_first and into out (row
 * stride ldo; NULL keeps the sums) as fold_row. Dispatches to a fold_row
 * instance with q, from_first and to_out constant. Returns -1 for a q
 * out of range, else 0. */
FOLD_INLINE int fold_rows(double *sum, double *err, const float *P, size_t prow, size_t pterm,
                          int h, int w, int q, int from_first, float *out, size_t ldo) {
    const int gw = fold_groups(w), to_out = out != NULL;
    for (int r = 0; r < h; r++) {
        double *s = sum + (size_t)r * w, *e = err + (size_t)r * gw;
        const float *p = P + (size_t)r * prow;
        float *o = to_out ? out + (size_t)r * ldo : NULL;
#define FOLD_CASE(Q, F, O) \
    case (Q) * 4 + (F) * 2 + (O): fold_row(s, e, p, pterm, Q, F, O, o, w); break;
#define FOLD_CASES(Q) FOLD_CASE(Q, 0, 0) FOLD_CASE(Q, 0, 1) FOLD_CASE(Q, 1, 0) FOLD_CASE(Q, 1, 1)
        switch (q * 4 + from_first * 2 + to_out) {
            FOLD_CASES(1) FOLD_CASES(2) FOLD_CASES(3) FOLD_CASES(4)
        default: return -1;
        }
#undef FOLD_CASES
#undef FOLD_CASE
    }
    return 0;
}

/* ---- double-double sums (sums of many terms of any spread) ----------------
 *
 * A sum of hundreds of terms of widely spread magnitudes (a bias
 * gradient's column over every token, squares for a norm) rarely stays
 * within fp64's 53 bits, so the checks above would fail it. Here each
 * term's addition is a TwoSum whose error is kept: sum + comp, with comp
 * the running sum of the errors, is then exactly the sum of the terms, as
 * long as comp's own additions are exact (checked by TwoSum again; they
 * add errors far smaller than the terms, so they almost always are). The
 * pair goes into an open accumulator as two exact fp64 terms. */

/* Returns s + b; *t = its rounding error (exactly: s + b = result + *t). */
FOLD_INLINE double fold_two_sum(double s, double b, double *t) {
    const double r = s + b, bb = r - s;
    *t = (s - (r - bb)) + (b - bb);
    return r;
}

/* One term into a pair: s + k += b, k's addition checked into *e. */
FOLD_INLINE void fold_dd_add(double *s, double *k, double *e, double b) {
    double t;
    *s = fold_two_sum(*s, b, &t);
    *k = fold_add(*k, t, e);
}

/* Column sums of nrows rows of w floats (row r at rows + r * ld) as pairs
 * sum[c] + comp[c]; err[c] = the |error|s of comp[c]'s own additions
 * (0: the pair is exact). The rows stream past in order, four at a time,
 * while the three w-long arrays stay in L1: a column-by-column walk
 * strides across pages and costs a cache and TLB miss a row. */
FOLD_INLINE void fold_columns_dd(double *restrict sum, double *restrict comp,
                                 double *restrict err, const float *restrict rows, size_t ld,
                                 int nrows, int w) {
    for (int c = 0; c < w; c++) sum[c] = 0.0, comp[c] = 0.0, err[c] = 0.0;
    int r = 0;
    for (; r + 4 <= nrows; r += 4) {
        const float *x0 = rows + (size_t)r * ld, *x1 = x0 + ld, *x2 = x1 + ld, *x3 = x2 + ld;
        for (int c = 0; c < w; c++) {
            double s = sum[c], k = comp[c], e = err[c];
            fold_dd_add(&s, &k, &e, (double)x0[c]);
            fold_dd_add(&s, &k, &e, (double)x1[c]);
            fold_dd_add(&s, &k, &e, (double)x2[c]);
            fold_dd_add(&s, &k, &e, (double)x3[c]);
            sum[c] = s, comp[c] = k, err[c] = e;
        }
    }
    for (; r < nrows; r++) {
        const float *x = rows + (size_t)r * ld;
        for (int c = 0; c < w; c++) fold_dd_add(&sum[c], &comp[c], &err[c], (double)x[c]);
    }
}

/* The sum of n floats as a pair *hi + *lo, in 16 lanes, as
 * fold_columns_dd; 1 when the pair is exact, else 0. */
FOLD_INLINE int fold_array_dd(const float *restrict x, size_t n, double *hi, double *lo) {
    enum { LANES = 16 };
    double s[LANES], k[LANES], e[LANES];
    for (int l = 0; l < LANES; l++) s[l] = 0.0, k[l] = 0.0, e[l] = 0.0;
    size_t i = 0;
    for (; i + LANES <= n; i += LANES)
        for (int l = 0; l < LANES; l++) fold_dd_add(&s[l], &k[l], &e[l], (double)x[i + l]);
    for (int l = 0; i + l < n; l++) fold_dd_add(&s[l], &k[l], &e[l], (double)x[i + l]);
    /* the lanes' pairs in a tree, half onto half */
    for (int h = LANES / 2; h >= 1; h /= 2)
        for (int l = 0; l < h; l++) {
            e[l] = e[l] + e[l + h];
            fold_dd_add(&s[l], &k[l], &e[l], s[l + h]);
            k[l] = fold_add(k[l], k[l + h], &e[l]);
        }
    *hi = s[0];
    *lo = k[0];
    return e[0] == 0.0;
}

/* The sum of n terms x[0], x[stride], ... in 16 lanes, every addition
 * checked (the lanes are then added with checks too): 1 and *out = the
 * exact sum when no addition had an error, else 0. Called with stride 1
 * constant where it can be, so that the loop vectorises. */
FOLD_INLINE int fold_array(const float *x, size_t n, size_t stride, double *out) {
    enum { LANES = 16 };
    double s[LANES], e[LANES];
    for (int l = 0; l < LANES; l++) s[l] = 0.0, e[l] = 0.0;
    size_t i = 0;
    for (; i + LANES <= n; i += LANES)
        for (int l = 0; l < LANES; l++) s[l] = fold_add(s[l], (double)x[(i + l) * stride], &e[l]);
    for (int l = 0; i + l < n; l++) s[l] = fold_add(s[l], (double)x[(i + l) * stride], &e[l]);
    /* the lanes in a tree, half onto half: four dependent steps, not 16 */
    for (int h = LANES / 2; h >= 1; h /= 2)
        for (int l = 0; l < h; l++) {
            e[l] = e[l] + e[l + h];
            s[l] = fold_add(s[l], s[l + h], &e[l]);
        }
    *out = s[0];
    return e[0] == 0.0;
}

#endif
