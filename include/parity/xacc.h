/* xacc.h - exact sums of fp32 values, rounded once (DESIGN.md I2).
 *
 * An xacc_t holds the exact value of any sum of fp32 terms as a signed
 * fixed-point number with its least significant bit at 2^-149 (the
 * smallest fp32 subnormal), split into 32-bit chunks kept in int64 words
 * so that billions of additions need no carry propagation. This is
 * Radford Neal's "small superaccumulator" (xsum) sized for fp32.
 * Because the value is exact, the result does not depend on the order
 * or the grouping of the additions: any parallel split of a reduction
 * gives the same bits when it merges accumulators and rounds once.
 *
 * Domain and range. The terms are fp32 values, and doubles that stand for
 * exact sums of them (xacc_add_f64_exact): any finite multiple of 2^-149,
 * up to DBL_MAX. The words hold every value in [-2^1097, 2^1097): every
 * such term, and every sum of fewer than 2^73 of them. Within the range
 * the value is exact whatever the size or order of the terms, so
 * 2^200 - 2^200 + 2^-149 rounds to 2^-149, and a sum of magnitude
 * 2^128 - 2^103 or more rounds to ±inf however it was reached. A value
 * below 2^169 (any real sum of fp32 values: it takes 2^41 terms of
 * FLT_MAX to pass it) keeps to the nine words that fp32 terms touch and
 * costs what it always did; a larger one brings more words into use.
 * Out of the domain the result is the canonical NaN (sticky, like a NaN
 * term), never undefined behaviour:
 *   - a double that is not a multiple of 2^-149 (2^-150, an fp64
 *     subnormal), which no sum of fp32 values can be;
 *   - a value outside the range when carries are propagated. Additions
 *     alone cannot get there, merges can (DBL_MAX merged into itself 74
 *     times), and whether an intermediate merge did can depend on the
 *     grouping: keep sums well inside the range.
 *
 * Rounding is to nearest, ties to even. Special values:
 *   - an exact zero sum rounds to +0.0 (so skipping an all-zero partial,
 *     e.g. a causally masked tile, never changes a result's sign);
 *   - a finite sum whose rounded magnitude exceeds FLT_MAX rounds to ±inf;
 *   - any +inf term makes the result +inf, any -inf term -inf;
 *   - +inf together with -inf, or any NaN term, gives the quiet NaN
 *     0x7fc00000 (one canonical NaN, so dumps compare with memcmp).
 *
 * The fast path (xsum_f32): a sum in fp64 whose every addition is
 * checked exact by TwoSum (ref/kernels/fold.h) is the exact sum, so one
 * conversion to fp32 gives the correctly rounded result. xsum_* falls
 * back to the accumulator when a check fails; both paths give identical
 * bits (tests/unit/test_xacc.c).
 */
#ifndef PARITY_XACC_H
#define PARITY_XACC_H

#include <stddef.h>
#include <stdint.h>

#define XACC_CHUNK_BITS 32
/* 38 x 32 bits from 2^-149: chunk[36] holds DBL_MAX's leading bit and
 * chunk[37] the sign (fp32 values need only chunk[0..8]). */
#define XACC_CHUNKS 38

typedef struct {
    int64_t chunk[XACC_CHUNKS]; /* value = sum_i chunk[i] * 2^(32 i - 149) */
    uint32_t adds_left;         /* additions before carries must be propagated */
    uint8_t pos_inf, neg_inf, nan;
    uint8_t extra;              /* chunk[8 + extra] is the top word in use: it
                                   holds the sign and every word above it is 0 */
} xacc_t;

void  xacc_init(xacc_t *acc);
void  xacc_add_f32(xacc_t *acc, float x);
void  xacc_add_array_f32(xacc_t *acc, const float *x, size_t n);
/* acc += other (exact). */
void  xacc_merge(xacc_t *acc, const xacc_t *other);
/* Round the exact value to fp32, nearest-even (acc is not changed). */
float xacc_round_f32(const xacc_t *acc);
/* Round to fp64 instead: used by diagnostics and tests. */
double xacc_round_f64(const xacc_t *acc);
/* Sign of the exact value: -1, 0 or +1 (finite part only). */
int   xacc_sign(const xacc_t *acc);

/* Exact sum of n fp32 values, rounded once; fast path with fallback. */
float xsum_f32(const float *x, size_t n);
/* Same, over x[0], x[stride], x[2*stride], ... */
float xsum_f32_strided(const float *x, size_t n, size_t stride);
/* Adds a double that is an exact sum of fp32 values (a multiple of
 * 2^-149 with at most 53 significant bits, of any magnitude up to DBL_MAX;
 * anything else is out of the domain, see above): how the fast paths
 * hand an exact fp64 partial over to the accumulator. */
void  xacc_add_f64_exact(xacc_t *acc, double x);

/* Fast path on or off for the whole process (tests compare both paths;
 * off means every sum goes through xacc_t). Default on. */
void  xacc_set_fast_path(int enabled);
int   xacc_fast_path_enabled(void);
/* Per-thread counters: sums (or xvec elements) finished on the fast path
 * and on the fallback since the thread started. */
void  xacc_path_counts(uint64_t *fast, uint64_t *slow);

/* xvec_t: n independent exact accumulators, for sums that stay open
 * across many additions (weight gradients across token tiles and
 * microbatches, tile partials of a contraction).
 *
 * Each element is one fp64 running sum, kept exact: every addition is
 * checked with TwoSum (Knuth), whose error term is zero exactly when the
 * fp64 addition was exact. An element whose addition would round moves,
 * with both the rounded sum and its error (together exact), to its own
 * xacc_t, allocated on demand so a vector of millions of gradients pays
 * only for the few elements that need it. 8 bytes per element; the fp64
 * sums are also what devices exchange when they combine partials.
 * Rounding gives the same bits on either path. */
typedef struct {
    size_t n;
    double *sum;     /* [n] exact partial sums; a slow element holds a NaN
                        whose payload is its index in slow[]              */
    xacc_t *slow;    /* fallback accumulators, grown on demand            */
    size_t n_slow, cap_slow;
    int owns_sum;    /* 0 when the caller provided sum[] (xvec_init_with) */
    int zero_pending; /* every element is +0 and sum[] is not cleared yet */
} xvec_t;

/* 0 on success, -1 when memory is short. Not thread-safe: one owner. */
int   xvec_init(xvec_t *v, size_t n);
/* The same over caller memory of n doubles (e.g. from a device arena, so
 * that accumulators count as the device's gradient memory). */
void  xvec_init_with(xvec_t *v, size_t n, double *storage);
void  xvec_free(xvec_t *v);
/* Every element to +0: O(1), the clearing is deferred (see xvec.c). */
void  xvec_zero(xvec_t *v);
/* 1 when v is all zeros not yet written, which then becomes the caller's
 * to fill: it must set every element once with the xvec_store_*
 * functions before any other use of v. 0 otherwise (use the adds). */
int   xvec_claim_zero(xvec_t *v);
/* v[offset + i] += x[i] for i < n, exactly. */
void  xvec_add(xvec_t *v, size_t offset, const float *x, size_t n);
/* v[offset + r*ld + c] += tile[r*ldt + c] for r < rows, c < cols. */
void  xvec_add_tile(xvec_t *v, size_t offset, size_t ld, const float *tile,
                    int rows, int cols, int ldt);
/* v[offset + i] += x[i], where each x[i] is already an EXACT sum of fp32
 * values held in fp64 (finite, a multiple of 2^-149, any magnitude: the
 * domain of xacc_add_f64_exact): one exact addition per element however
 * many terms x[i] stands for. Out of the domain, an element that takes
 * its accumulator becomes NaN; one that stays on its fp64 path is not
 * checked. */
void  xvec_add_f64_exact(xvec_t *v, size_t offset, const double *x, size_t n);
/* The stores: v[...] = x[...] exactly, into a claimed vector; the same
 * arguments and results as the adds into zeros. */
void  xvec_store(xvec_t *v, size_t offset, const float *x, size_t n);
void  xvec_store_tile(xvec_t *v, size_t offset, size_t ld, const float *tile,
                      int rows, int cols, int ldt);
void  xvec_store_f64_exact(xvec_t *v, size_t offset, const double *x, size_t n);
void  xvec_store_range(xvec_t *dst, size_t dst_off, const xvec_t *src, size_t src_off, size_t n);
/* v[i] += x, a whole exact sum at once (element i takes its accumulator). */
void  xvec_add_xacc(xvec_t *v, size_t i, const xacc_t *x);
/* dst += src elementwise (same n), exactly. */
void  xvec_merge(xvec_t *dst, const xvec_t *src);
/* dst[dst_off + i] += src[src_off + i] for i < n: how a device folds in a
 * slice of a peer's open accumulators. */
void  xvec_merge_range(xvec_t *dst, size_t dst_off, const xvec_t *src, size_t src_off, size_t n);
/* The -DPARITY_PLAIN_SUMS diagnostic build's addition (accum.h), on the
 * same storage: v[offset + i] = fl32(fl32(v[offset + i]) + x[i]), a plain
 * fp32 sum held in fp64, in the order the calls come. An element that an
 * exact merge made slow, or wider than fp32, is rounded to fp32 first; an
 * infinite or NaN result goes to its accumulator, as the exact adds put
 * it, so the vector stays one that every xvec_* function (and the
 * collectives' open sums) takes. */
void  xvec_add_plain(xvec_t *v, size_t offset, const float *x, size_t n);
/* Its store into a claimed vector: the same results as adding to zeros. */
void  xvec_store_plain(xvec_t *v, size_t offset, const float *x, size_t n);
/* 1 when element i has moved to its fallback accumulator. */
int   xvec_is_slow(const xvec_t *v, size_t i);
/* out[i] = v[i] rounded once to fp32. */
void  xvec_round(const xvec_t *v, float *out);
/* One element as an accumulator (for collectives and tests). */
void  xvec_get(const xvec_t *v, size_t i, xacc_t *out);

#endif
