/* xvec.c - n exact accumulators as fp64 sums checked by TwoSum.
 *
 * For fp64 a and b, TwoSum computes s = fl(a + b) and, exactly, the
 * rounding error e = (a + b) - s. e == 0 is therefore a proof that the
 * fp64 sum is exact: a check, not a bound. The loop below computes it for
 * a block of elements without branches (the compiler vectorises it) and
 * commits only the exact ones; the rare others move to an xacc_t holding
 * the old exact sum plus the new term. Infinities and NaNs make e a NaN,
 * so they always take the accumulator, which knows their IEEE rules.
 * A slow element's sum[] slot holds a quiet NaN whose payload is the
 * accumulator's index, so no second array has to be kept or checked.
 *
 * Zeroing is lazy: xvec_zero only marks the vector zero. The first writer
 * may claim it (xvec_claim_zero) and store every element once instead of
 * adding to zeros, which saves a pass that clears 8 bytes an element and
 * a pass that reads them back: with one microbatch per device, that is
 * all the accumulation a weight gradient gets. Anything else that touches
 * a vector still marked zero clears it first (ready()); readers that
 * cannot write see zeros.
 */
#include "parity/xacc.h"

#include <stdlib.h>
#include <string.h>

#include "simd.h"

#define SLOW_TAG 0x7ff8000000000000ULL
#define XVEC_BLOCK 64

static _Thread_local uint64_t rounded_fast, rounded_slow;

void xvec_path_counts_add(uint64_t *fast, uint64_t *slow); /* used by xsum.c */
void xvec_path_counts_add(uint64_t *fast, uint64_t *slow) {
    *fast += rounded_fast;
    *slow += rounded_slow;
}

int xvec_init(xvec_t *v, size_t n) {
    memset(v, 0, sizeof *v);
    v->n = n;
    v->sum = malloc((n ? n : 1) * sizeof(double));
    if (!v->sum) return -1;
    v->owns_sum = 1;
    xvec_zero(v);
    return 0;
}

void xvec_init_with(xvec_t *v, size_t n, double *storage) {
    memset(v, 0, sizeof *v);
    v->n = n;
    v->sum = storage;
    xvec_zero(v);
}

void xvec_free(xvec_t *v) {
    if (v->owns_sum) free(v->sum);
    free(v->slow);
    memset(v, 0, sizeof *v);
}

void xvec_zero(xvec_t *v) {
    v->n_slow = 0;
    v->zero_pending = 1;
}

/* Makes sum[] hold the zeros that zero_pending stands for. */
static void ready(xvec_t *v) {
    if (!v->zero_pending) return;
    memset(v->sum, 0, v->n * sizeof(double)); /* all-zero bits are +0.0 */
    v->zero_pending = 0;
}

int xvec_claim_zero(xvec_t *v) {
    int claimed = v->zero_pending;
    v->zero_pending = 0;
    return claimed;
}

int xvec_is_slow(const xvec_t *v, size_t i) { return !v->zero_pending && v->sum[i] != v->sum[i]; }

static size_t slow_slot(const xvec_t *v, size_t i) {
    uint64_t u;
    memcpy(&u, &v->sum[i], sizeof u);
    return (size_t)(u & ~SLOW_TAG);
}

/* Moves element i, exactly, into an accumulator of its own and returns it. */
static xacc_t *make_slow(xvec_t *v, size_t i) {
    if (xvec_is_slow(v, i)) return &v->slow[slow_slot(v, i)];
    if (v->n_slow == v->cap_slow) {
        size_t cap = v->cap_slow ? 2 * v->cap_slow : 16;
        xacc_t *grown = realloc(v->slow, cap * sizeof *grown);
        if (!grown) abort(); /* a few kilobytes; nothing sane to do */
        v->slow = grown;
        v->cap_slow = cap;
    }
    size_t slot = v->n_slow++;
    xacc_t *acc = &v->slow[slot];
    xacc_init(acc);
    xacc_add_f64_exact(acc, v->sum[i]);
    uint64_t tag = SLOW_TAG | (uint64_t)slot;
    memcpy(&v->sum[i], &tag, sizeof tag);
    return acc;
}

/* sum[j] += b[j] where the fp64 addition is exact; err[j] is non-zero
 * (NaN for inf/NaN inputs) where it is not, and there sum[j] was left
 * alone. Returns whether any failed. Kept free of branches and integer
 * flags so that GCC vectorises the main loop. */
PARITY_SIMD_CLONES
static int twosum_block(double *restrict sum, const double *restrict b, size_t len,
                        double *restrict err) {
    if (!xacc_fast_path_enabled()) {
        for (size_t j = 0; j < len; j++) err[j] = 1.0;
        return 1;
    }
    for (size_t j = 0; j < len; j++) {
        double a = sum[j], bj = b[j], s = a + bj;
        double bb = s - a;
        double e = (a - (s - bb)) + (bj - bb);
        err[j] = e;
        sum[j] = e == 0.0 ? s : a; /* -0.0 == 0.0: exact too */
    }
    for (size_t j = 0; j < len; j++)
        if (err[j] != 0.0) return 1; /* NaN != 0 as well */
    return 0;
}

/* sum[j] = b[j] where b[j] is finite (one exact term); err[j] is NaN and
 * sum[j] = +0 where it is not, for the caller to add through the
 * accumulator. The store counterpart of twosum_block: + 0.0 turns -0 into
 * +0, as adding to a zero sum would. */
PARITY_SIMD_CLONES
static int store_block(double *restrict sum, const double *restrict b, size_t len,
                       double *restrict err) {
    const double off = xacc_fast_path_enabled() ? 0.0 : 1.0; /* off: every term to its xacc */
    for (size_t j = 0; j < len; j++) {
        double bj = b[j], e = (bj - bj) + off; /* 0 when finite, NaN for inf/NaN */
        err[j] = e;
        sum[j] = e == 0.0 ? bj + 0.0 : 0.0;
    }
    for (size_t j = 0; j < len; j++)
        if (err[j] != 0.0) return 1;
    return 0;
}

/* v[dst + j] (+)= x[j]: added when store is 0, stored into a claimed
 * vector when 1. */
static void put_run(xvec_t *v, size_t dst, const float *x, size_t n, int store) {
    double b[XVEC_BLOCK];
    double err[XVEC_BLOCK];
    if (!store) ready(v);
    for (size_t base = 0; base < n; base += XVEC_BLOCK) {
        size_t len = n - base < XVEC_BLOCK ? n - base : XVEC_BLOCK;
        double *sum = v->sum + dst + base;
        for (size_t j = 0; j < len; j++) b[j] = (double)x[base + j];
        if (store ? store_block(sum, b, len, err) : twosum_block(sum, b, len, err))
            for (size_t j = 0; j < len; j++)
                if (err[j] != 0.0) xacc_add_f32(make_slow(v, dst + base + j), x[base + j]);
    }
}

static void put_tile(xvec_t *v, size_t offset, size_t ld, const float *tile, int rows, int cols,
                     int ldt, int store) {
    for (int r = 0; r < rows; r++)
        put_run(v, offset + (size_t)r * ld, tile + (size_t)r * (size_t)ldt, (size_t)cols, store);
}

static void put_f64_exact(xvec_t *v, size_t offset, const double *x, size_t n, int store) {
    double err[XVEC_BLOCK];
    if (!store) ready(v);
    for (size_t base = 0; base < n; base += XVEC_BLOCK) {
        size_t len = n - base < XVEC_BLOCK ? n - base : XVEC_BLOCK;
        double *sum = v->sum + offset + base;
        if (store ? store_block(sum, x + base, len, err) : twosum_block(sum, x + base, len, err))
            for (size_t j = 0; j < len; j++)
                if (err[j] != 0.0) xacc_add_f64_exact(make_slow(v, offset + base + j), x[base + j]);
    }
}

void xvec_add(xvec_t *v, size_t offset, const float *x, size_t n) { put_run(v, offset, x, n, 0); }
void xvec_store(xvec_t *v, size_t offset, const float *x, size_t n) { put_run(v, offset, x, n, 1); }

void xvec_add_tile(xvec_t *v, size_t offset, size_t ld, const float *tile, int rows, int cols,
                   int ldt) {
    put_tile(v, offset, ld, tile, rows, cols, ldt, 0);
}
void xvec_store_tile(xvec_t *v, size_t offset, size_t ld, const float *tile, int rows, int cols,
                     int ldt) {
    put_tile(v, offset, ld, tile, rows, cols, ldt, 1);
}

void xvec_add_f64_exact(xvec_t *v, size_t offset, const double *x, size_t n) {
    put_f64_exact(v, offset, x, n, 0);
}
void xvec_store_f64_exact(xvec_t *v, size_t offset, const double *x, size_t n) {
    put_f64_exact(v, offset, x, n, 1);
}

/* sum[j] = fl32(fl32(sum[j]) + x[j]), or fl32(+0 + x[j]) when store:
 * the plain sums' vector loop, for a vector without slow elements.
 * Returns whether a result is inf or NaN (exponent all ones); kept free
 * of branches so that GCC vectorises it. */
PARITY_SIMD_CLONES
static int plain_run(double *restrict sum, const float *restrict x, size_t n, int store) {
    uint32_t special = 0;
    for (size_t j = 0; j < n; j++) {
        float s = (store ? 0.0f : (float)sum[j]) + x[j];
        uint32_t u;
        memcpy(&u, &s, sizeof u);
        special |= (u & 0x7f800000u) == 0x7f800000u;
        sum[j] = s;
    }
    return special != 0;
}

/* Element i := the fp32 value t, in its accumulator: t is inf or NaN, or
 * i is slow already (slow; else sum[i] may hold anything). */
static void plain_slow(xvec_t *v, size_t i, float t, int slow) {
    if (!slow) v->sum[i] = 0.0;
    xacc_t *acc = make_slow(v, i);
    xacc_init(acc);
    xacc_add_f32(acc, t);
}

/* v[offset + j] (+)= x[j] in plain fp32: added when store is 0, stored
 * into a claimed vector when 1. */
static void put_plain(xvec_t *v, size_t offset, const float *x, size_t n, int store) {
    if (!store) ready(v);
    double *sum = v->sum + offset;
    if (!v->n_slow) {
        if (plain_run(sum, x, n, store)) /* no slow element's NaN tag was overwritten */
            for (size_t j = 0; j < n; j++)
                if (sum[j] - sum[j] != 0.0) plain_slow(v, offset + j, (float)sum[j], 0);
        return;
    }
    for (size_t j = 0; j < n; j++) { /* element by element: a slow one's tag must stay */
        const int slow = !store && xvec_is_slow(v, offset + j);
        float old = store ? 0.0f : slow ? xacc_round_f32(&v->slow[slow_slot(v, offset + j)])
                                        : (float)sum[j];
        float t = old + x[j];
        if (slow || t - t != 0.0f) plain_slow(v, offset + j, t, slow);
        else sum[j] = t;
    }
}

void xvec_add_plain(xvec_t *v, size_t offset, const float *x, size_t n) {
    put_plain(v, offset, x, n, 0);
}
void xvec_store_plain(xvec_t *v, size_t offset, const float *x, size_t n) {
    put_plain(v, offset, x, n, 1);
}

void xvec_add_xacc(xvec_t *v, size_t i, const xacc_t *x) {
    ready(v);
    xacc_merge(make_slow(v, i), x);
}

void xvec_get(const xvec_t *v, size_t i, xacc_t *out) {
    if (xvec_is_slow(v, i)) {
        *out = v->slow[slow_slot(v, i)];
        return;
    }
    xacc_init(out);
    if (!v->zero_pending) xacc_add_f64_exact(out, v->sum[i]);
}

static void put_range(xvec_t *dst, size_t dst_off, const xvec_t *src, size_t src_off, size_t n,
                      int store) {
    if (src->zero_pending) { /* adding zeros changes nothing; storing them does */
        if (store) memset(dst->sum + dst_off, 0, n * sizeof(double));
        return;
    }
    if (!store) ready(dst);
    double err[XVEC_BLOCK];
    for (size_t base = 0; base < n; base += XVEC_BLOCK) {
        size_t len = n - base < XVEC_BLOCK ? n - base : XVEC_BLOCK;
        double *sum = dst->sum + dst_off + base;
        const double *b = src->sum + src_off + base;
        /* a slow source element is a NaN here, so it fails and is merged
         * below from its accumulator */
        if (!(store ? store_block(sum, b, len, err) : twosum_block(sum, b, len, err))) continue;
        for (size_t j = 0; j < len; j++) {
            if (err[j] == 0.0) continue;
            xacc_t theirs;
            xvec_get(src, src_off + base + j, &theirs);
            xacc_merge(make_slow(dst, dst_off + base + j), &theirs);
        }
    }
}

void xvec_merge_range(xvec_t *dst, size_t dst_off, const xvec_t *src, size_t src_off, size_t n) {
    put_range(dst, dst_off, src, src_off, n, 0);
}
void xvec_store_range(xvec_t *dst, size_t dst_off, const xvec_t *src, size_t src_off, size_t n) {
    put_range(dst, dst_off, src, src_off, n, 1);
}

void xvec_merge(xvec_t *dst, const xvec_t *src) { xvec_merge_range(dst, 0, src, 0, dst->n); }

/* out[i] = (float)sum[i], the exact value rounded once (a slow
 * element's NaN tag gives a NaN, replaced by xvec_round). */
PARITY_SIMD_CLONES
static void round_fast(const double *restrict sum, float *restrict out, size_t n) {
    for (size_t i = 0; i < n; i++) out[i] = (float)sum[i];
}

void xvec_round(const xvec_t *v, float *out) {
    uint64_t slow = 0;
    if (v->zero_pending)
        memset(out, 0, v->n * sizeof(float)); /* +0.0f */
    else
        round_fast(v->sum, out, v->n);
    if (v->n_slow)
        for (size_t i = 0; i < v->n; i++)
            if (xvec_is_slow(v, i)) {
                out[i] = xacc_round_f32(&v->slow[slow_slot(v, i)]);
                slow++;
            }
    rounded_slow += slow;
    rounded_fast += v->n - slow;
}
