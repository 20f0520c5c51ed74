/* accum.c - the model's sums: exact (xacc.h) or, in the diagnostic
 * -DPARITY_PLAIN_SUMS build, plain fp32 in arrival order, held in the
 * same xvec_t and xacc_t (accum.h). Under a float order (float_order.h)
 * the sums are the plain build's, except that terms handed over together
 * (acc_add_rows' rows, sacc_add's array) are first summed in the order. */
#include "parity/accum.h"

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/float_order_sum.h"
#include "kernels/fold.h"
#include "kernels/simd.h"
#include "parity/error.h"

#ifdef PARITY_PLAIN_SUMS
enum { PLAIN = 1 };
#else
enum { PLAIN = 0 };
#endif

int accum_plain_sums(void) { return PLAIN; }

/* fp32 sums: the diagnostic build, or the calling thread's float order. */
static int plain(void) { return PLAIN || forder_sums() != NULL; }

int acc_init(acc_t *a, size_t n) {
    memset(a, 0, sizeof *a);
    a->n = n;
    return xvec_init(&a->x, n);
}

size_t acc_storage_bytes(size_t n) { return (n ? n : 1) * sizeof(double); }

void acc_init_with(acc_t *a, size_t n, void *storage) {
    memset(a, 0, sizeof *a);
    a->n = n;
    xvec_init_with(&a->x, n, storage);
}

void acc_free(acc_t *a) {
    xvec_free(&a->x);
    memset(a, 0, sizeof *a);
}

void acc_zero(acc_t *a) { xvec_zero(&a->x); }

/* a[offset + i] (+)= x[i]: added when store is 0, stored into a claimed
 * accumulator when 1; exact, or plain fp32 in the diagnostic build. */
static void put_run(acc_t *a, size_t offset, const float *x, size_t n, int store) {
    if (plain())
        (store ? xvec_store_plain : xvec_add_plain)(&a->x, offset, x, n);
    else
        (store ? xvec_store : xvec_add)(&a->x, offset, x, n);
}

void acc_add(acc_t *a, size_t offset, const float *x, size_t n) { put_run(a, offset, x, n, 0); }

int acc_claim_zero(acc_t *a) { return xvec_claim_zero(&a->x); }

static void put_tile(acc_t *a, size_t offset, size_t ld, const float *tile, int rows, int cols,
                     int ldt, int store) {
    if (ld == (size_t)cols && ldt == cols) { /* one contiguous run: longer vector loops */
        put_run(a, offset, tile, (size_t)rows * (size_t)cols, store);
        return;
    }
    for (int r = 0; r < rows; r++)
        put_run(a, offset + (size_t)r * ld, tile + (size_t)r * (size_t)ldt, (size_t)cols, store);
}

void acc_add_tile(acc_t *a, size_t offset, size_t ld, const float *tile, int rows, int cols,
                  int ldt) {
    put_tile(a, offset, ld, tile, rows, cols, ldt, 0);
}

void acc_store_tile(acc_t *a, size_t offset, size_t ld, const float *tile, int rows, int cols,
                    int ldt) {
    put_tile(a, offset, ld, tile, rows, cols, ldt, 1);
}

static void put_exact_f64(acc_t *a, size_t offset, const double *x, size_t n, int store) {
    if (plain()) { /* each x[i] rounded to fp32, then added */
        enum { CHUNK = 64 };
        float f[CHUNK];
        for (size_t base = 0; base < n; base += CHUNK) {
            size_t len = n - base < CHUNK ? n - base : CHUNK;
            for (size_t k = 0; k < len; k++) f[k] = (float)x[base + k];
            put_run(a, offset + base, f, len, store);
        }
        return;
    }
    (store ? xvec_store_f64_exact : xvec_add_f64_exact)(&a->x, offset, x, n);
}

void acc_add_exact_f64(acc_t *a, size_t offset, const double *x, size_t n) {
    put_exact_f64(a, offset, x, n, 0);
}

void acc_store_exact_f64(acc_t *a, size_t offset, const double *x, size_t n) {
    put_exact_f64(a, offset, x, n, 1);
}

/* Cloned per vector width (simd.h): fold.h's column sums. */
PARITY_SIMD_CLONES
static void column_sums(double *sum, double *comp, double *err, const float *rows, int nrows,
                        int w, int ld) {
    fold_columns_dd(sum, comp, err, rows, (size_t)ld, nrows, w);
}

/* acc_add_rows under a float order: the column sums over the rows in the
 * order's tree (the row form, one tree for every column: RANDOM's cuts
 * drawn from the call's extents and first terms), then one fp32 addition
 * each to the running values. */
typedef struct {
    const float *rows;
    int width, ld;
} rows_leaf_t;

static void row_leaf(void *ctx, int k, float *buf) {
    const rows_leaf_t *r = ctx;
    memcpy(buf, r->rows + (size_t)k * (size_t)r->ld, (size_t)r->width * sizeof(float));
}

static void add_rows_ordered(acc_t *a, const float_order_t *o, size_t offset, const float *rows,
                             int nrows, int width, int ld) {
    const size_t w = width > 0 ? (size_t)width : 1;
    float *bufs = malloc((size_t)forder_rows_buffers(o, nrows) * w * sizeof(float));
    if (!bufs) parity_fatal("acc_add_rows: out of memory for %d columns", width);
    uint32_t first, last;
    memcpy(&first, rows, sizeof first);
    memcpy(&last, rows + (size_t)(nrows - 1) * (size_t)ld + (size_t)(width - 1), sizeof last);
    const uint64_t key = forder_key(o, (uint64_t)nrows << 32 | (uint64_t)width,
                                    (uint64_t)first | (uint64_t)last << 32);
    const rows_leaf_t r = {rows, width, ld};
    const float *sum = forder_sum_rows(o, key, nrows, (size_t)width, row_leaf, (void *)&r, bufs);
    acc_add(a, offset, sum, (size_t)width);
    free(bufs);
}

void acc_add_rows(acc_t *a, size_t offset, const float *rows, int nrows, int width, int ld) {
    const float_order_t *o = PLAIN ? NULL : forder_sums();
    if (o && nrows > 1 && width > 0) {
        add_rows_ordered(a, o, offset, rows, nrows, width, ld);
        return;
    }
    if (plain() || nrows <= 1) {
        for (int r = 0; r < nrows; r++)
            acc_add(a, offset, rows + (size_t)r * ld, (size_t)width);
        return;
    }
    size_t w = (size_t)width;
    double *sum = malloc(3 * w * sizeof(double)), *comp = sum + w, *err = comp + w;
    if (!sum) parity_fatal("acc_add_rows: out of memory for %d columns", width);
    column_sums(sum, comp, err, rows, nrows, width, ld);
    /* A column whose pair is not exact (or inf, NaN) goes in term by term
     * below; its pair is zeroed so that the puts add nothing. */
    const int fast = xacc_fast_path_enabled();
    int n_slow = 0;
    for (size_t c = 0; c < w; c++)
        if (!fast || err[c] != 0.0 || sum[c] - sum[c] != 0.0) {
            err[c] = 1.0; /* marks the column, also when the fast path is off */
            sum[c] = comp[c] = 0.0;
            n_slow++;
        }
    /* a whole zero accumulator (a bias or LayerNorm gradient's first
     * microbatch) takes the sums as they are, then adds the errors */
    put_exact_f64(a, offset, sum, w, offset == 0 && w == a->n && acc_claim_zero(a));
    put_exact_f64(a, offset, comp, w, 0);
    /* a failed column's terms go through a superaccumulator of its own */
    float *column = n_slow ? malloc((size_t)nrows * sizeof(float)) : NULL;
    if (n_slow && !column) parity_fatal("acc_add_rows: out of memory for %d rows", nrows);
    for (size_t c = 0; n_slow && c < w; c++)
        if (err[c] != 0.0) {
            for (int r = 0; r < nrows; r++) column[r] = rows[(size_t)r * ld + c];
            xacc_t exact;
            xacc_init(&exact);
            xacc_add_array_f32(&exact, column, (size_t)nrows);
            xvec_add_xacc(&a->x, offset + c, &exact);
        }
    free(column);
    free(sum);
}

void acc_merge(acc_t *dst, const acc_t *src) {
    if (!plain()) {
        xvec_merge(&dst->x, &src->x);
        return;
    }
    float *terms = malloc((src->n ? src->n : 1) * sizeof(float)); /* src's fp32 values */
    if (!terms) parity_fatal("acc_merge: out of memory for %zu sums", src->n);
    acc_round(src, terms);
    acc_add(dst, 0, terms, src->n);
    free(terms);
}

void acc_round(const acc_t *a, float *out) { xvec_round(&a->x, out); }

void acc_round_range(const acc_t *a, size_t offset, size_t n, float *out) {
    xvec_t range = a->x; /* the same sums: a slow element's tag names its accumulator in the same list */
    range.sum += offset;
    range.n = n;
    xvec_round(&range, out);
}

void sacc_init(sacc_t *s) { xacc_init(&s->x); }

/* The plain build's s += x[i] (or x[i]*x[i], each square rounded), in
 * fp32 one term after the other: the running sum is the one fp32 value s
 * holds (rounded to fp32 first, should a merge have made it wider). */
static void plain_add(sacc_t *s, const float *x, size_t n, int squares) {
    float v = xacc_round_f32(&s->x);
    for (size_t i = 0; i < n; i++) v = v + (squares ? x[i] * x[i] : x[i]);
    xacc_init(&s->x);
    xacc_add_f32(&s->x, v);
}

/* Under a float order: the n terms (or their fp32 squares) summed in the
 * order, then added to the running fp32 value s holds. */
static void ordered_add(sacc_t *s, const float_order_t *o, const float *x, size_t n, int squares) {
    float *sq = NULL;
    if (squares) {
        sq = malloc((n ? n : 1) * sizeof(float));
        if (!sq) parity_fatal("sacc_add_squares: out of memory for %zu terms", n);
        for (size_t i = 0; i < n; i++) sq[i] = x[i] * x[i];
    }
    const float v = xacc_round_f32(&s->x) + forder_sum(o, squares ? sq : x, n, 1);
    free(sq);
    xacc_init(&s->x);
    xacc_add_f32(&s->x, v);
}

/* Cloned per vector width (simd.h): fold.h's double-double array sum. */
PARITY_SIMD_CLONES
static int array_sum_dd(const float *x, size_t n, double *hi, double *lo) {
    return fold_array_dd(x, n, hi, lo);
}

void sacc_add(sacc_t *s, const float *x, size_t n) {
    if (PLAIN) {
        plain_add(s, x, n, 0);
        return;
    }
    const float_order_t *o = forder_sums();
    if (o) {
        ordered_add(s, o, x, n, 0);
        return;
    }
    /* chunks whose double-double sum is exact enter as two terms each */
    enum { CHUNK = 1024 };
    for (size_t base = 0; base < n; base += CHUNK) {
        size_t len = n - base < CHUNK ? n - base : CHUNK;
        double hi, lo;
        if (xacc_fast_path_enabled() && array_sum_dd(x + base, len, &hi, &lo) &&
            hi - hi == 0.0) {
            xacc_add_f64_exact(&s->x, hi);
            xacc_add_f64_exact(&s->x, lo);
        } else {
            xacc_add_array_f32(&s->x, x + base, len);
        }
    }
}

void sacc_add_squares(sacc_t *s, const float *x, size_t n) {
    if (PLAIN) {
        plain_add(s, x, n, 1);
        return;
    }
    const float_order_t *o = forder_sums();
    if (o) {
        ordered_add(s, o, x, n, 1);
        return;
    }
    enum { CHUNK = 1024 };
    float sq[CHUNK];
    for (size_t base = 0; base < n; base += CHUNK) {
        size_t len = n - base < CHUNK ? n - base : CHUNK;
        for (size_t k = 0; k < len; k++) sq[k] = x[base + k] * x[base + k];
        sacc_add(s, sq, len);
    }
}

float sacc_round(const sacc_t *s) { return xacc_round_f32(&s->x); }

float sum_f32(const float *x, size_t n) {
    if (PLAIN) {
        float s = 0.0f;
        for (size_t i = 0; i < n; i++) s = s + x[i];
        return s;
    }
    return xsum_f32(x, n);
}
