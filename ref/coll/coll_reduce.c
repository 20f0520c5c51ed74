/* coll_reduce.c - the elementwise reductions every algorithm shares.
 *
 * The order is always left to right over the sources the caller gives,
 * so each algorithm's fp32 summation order is decided by the algorithm
 * alone (coll.h documents them). Everything else is exact: integer sums
 * wrap (computed unsigned, so no undefined overflow), max/min select, and
 * xacc sums merge exactly and are written in canonical form.
 */
#include "coll_impl.h"

#include <string.h>

size_t coll_dtype_size(coll_dtype_t dt) {
    switch (dt) {
    case COLL_F32: return 4;
    case COLL_I32: return 4;
    case COLL_I64: return 8;
    case COLL_XACC: return sizeof(xacc_t);
    case COLL_XVEC: return sizeof(double); /* the fp64 sum; exceptions travel on top */
    default: return 0;
    }
}

size_t coll_align_elems(coll_dtype_t dt) {
    size_t e = coll_dtype_size(dt);
    return e && e < COLL_CACHE_LINE ? COLL_CACHE_LINE / e : 1;
}

/* fp32 as a signed integer that orders like the values, with -0 < +0:
 * negative floats have their magnitude bits flipped. */
static inline int32_t f32_key(float x) {
    int32_t b;
    memcpy(&b, &x, sizeof b);
    return b < 0 ? b ^ 0x7fffffff : b;
}

static const uint32_t canonical_nan_bits = 0x7fc00000u;

static inline float f32_pick(float a, float b, int want_max) {
    if (a != a || b != b) {
        float nan;
        memcpy(&nan, &canonical_nan_bits, sizeof nan);
        return nan;
    }
    int a_wins = want_max ? f32_key(a) >= f32_key(b) : f32_key(a) <= f32_key(b);
    return a_wins ? a : b;
}

/* One source combined into dst, dst[k] = dst[k] op s[k]. */
static void f32_step(float *d, const float *s, size_t n, coll_op_t op) {
    if (op == COLL_SUM) {
        for (size_t k = 0; k < n; k++) d[k] = d[k] + s[k];
    } else {
        for (size_t k = 0; k < n; k++) d[k] = f32_pick(d[k], s[k], op == COLL_MAX);
    }
}

/* d[k] = a[k] op b[k]; d may be a or b element for element. */
#define INT_PAIR(name, T, U)                                                   \
    static void name(T *d, const T *a, const T *b, size_t n, coll_op_t op) {   \
        if (op == COLL_SUM) {                                                  \
            for (size_t k = 0; k < n; k++) d[k] = (T)((U)a[k] + (U)b[k]);      \
        } else if (op == COLL_MAX) {                                           \
            for (size_t k = 0; k < n; k++) d[k] = a[k] >= b[k] ? a[k] : b[k];  \
        } else {                                                               \
            for (size_t k = 0; k < n; k++) d[k] = a[k] <= b[k] ? a[k] : b[k];  \
        }                                                                      \
    }
INT_PAIR(i32_pair, int32_t, uint32_t)
INT_PAIR(i64_pair, int64_t, uint64_t)

/* The canonical form of an exact value: xacc_merge into a fresh
 * accumulator propagates every carry, leaving the unique representation
 * with the low words in [0, 2^32), and sets the bookkeeping fields to
 * fixed values. */
static void xacc_canonical(xacc_t *out, const xacc_t *value) {
    xacc_t c;
    xacc_init(&c);
    xacc_merge(&c, value);
    *out = c;
}

void coll_copy_canonical(void *dst, const void *src, size_t count, coll_dtype_t dt) {
    if (dt != COLL_XACC) {
        if (dst != src && count) memmove(dst, src, count * coll_dtype_size(dt));
        return;
    }
    xacc_t *d = dst;
    const xacc_t *s = src;
    for (size_t k = 0; k < count; k++) xacc_canonical(&d[k], &s[k]);
}

void coll_reduce_into(void *dst, const void *const *src, int nsrc, size_t count, coll_dtype_t dt,
                      coll_op_t op) {
    if (count == 0) return;
    if (dt == COLL_XACC) { /* op is COLL_SUM: checked at the call */
        xacc_t *d = dst;
        for (size_t k = 0; k < count; k++) {
            xacc_t acc;
            xacc_init(&acc);
            for (int j = 0; j < nsrc; j++) xacc_merge(&acc, (const xacc_t *)src[j] + k);
            xacc_canonical(&d[k], &acc);
        }
        return;
    }
    /* dst := src[0] op src[1], then dst op= src[j]. When dst is one of the
     * sources element for element, the first step reads both operands of
     * each element before writing it; later steps only read dst's own
     * previous value, so a source aliasing dst must be src[0] or src[1]. */
    size_t es = coll_dtype_size(dt);
    if (nsrc == 1) {
        if (dst != src[0]) memmove(dst, src[0], count * es);
        return;
    }
    switch (dt) {
    case COLL_F32: {
        float *d = dst;
        const float *a = src[0], *b = src[1];
        if (op == COLL_SUM)
            for (size_t k = 0; k < count; k++) d[k] = a[k] + b[k];
        else
            for (size_t k = 0; k < count; k++) d[k] = f32_pick(a[k], b[k], op == COLL_MAX);
        for (int j = 2; j < nsrc; j++) f32_step(d, src[j], count, op);
        break;
    }
    case COLL_I32: {
        int32_t *d = dst;
        i32_pair(d, src[0], src[1], count, op);
        for (int j = 2; j < nsrc; j++) i32_pair(d, d, src[j], count, op);
        break;
    }
    case COLL_I64: {
        int64_t *d = dst;
        i64_pair(d, src[0], src[1], count, op);
        for (int j = 2; j < nsrc; j++) i64_pair(d, d, src[j], count, op);
        break;
    }
    default: break;
    }
}
