/* accum.h - the sums the model does, in one place.
 *
 * Every reduction of the golden model goes through these functions, so
 * that its exactness contract (DESIGN.md I2) has one home:
 *
 *   acc_t     n open exact accumulators (an xvec_t): weight, bias, LayerNorm
 *             and embedding gradients across token tiles and microbatches,
 *             and the tile partials of one contraction. Rounded once.
 *   sacc_t    one open exact accumulator (an xacc_t): the loss sum across
 *             microbatches, the squared gradient norm across tensors.
 *   sum_f32   a short one-shot exact sum rounded once (xsum_f32):
 *             LayerNorm statistics, softmax denominators.
 *
 * Diagnostic build: compiling with -DPARITY_PLAIN_SUMS replaces every one
 * of them by a plain fp32 running sum in the order the terms arrive. It
 * exists to measure what exactness costs (tests/bench/bench_gpt.sh) and
 * to show the drift plain sums bring (build/plain/parity check ...); its
 * results depend on the order of the terms and it is never the default.
 * accum_plain_sums() says which build this is. The types are the same in
 * both builds: an acc_t's plain sums are fp32 values held in its xvec_t
 * (xvec_add_plain) and an sacc_t's in its xacc_t, so whatever reads or
 * moves open sums (the collectives, the data-parallel reduction) takes
 * them unchanged, and sums that cross devices are merged as the exact
 * build merges them: only each device's own additions are plain.
 */
#ifndef PARITY_ACCUM_H
#define PARITY_ACCUM_H

#include <stddef.h>

#include "parity/xacc.h"

typedef struct {
    size_t n;
    xvec_t x; /* the open sums (plain fp32 values in the diagnostic build) */
} acc_t;

/* 0 on success, -1 when memory is short. The accumulators start at zero. */
int   acc_init(acc_t *a, size_t n);
/* The same over caller memory of acc_storage_bytes(n) bytes. */
size_t acc_storage_bytes(size_t n);
void  acc_init_with(acc_t *a, size_t n, void *storage);
void  acc_free(acc_t *a);
void  acc_zero(acc_t *a);
/* a[offset + i] += x[i], i < n. */
void  acc_add(acc_t *a, size_t offset, const float *x, size_t n);
/* a[offset + r*ld + c] += tile[r*ldt + c], r < rows, c < cols. */
void  acc_add_tile(acc_t *a, size_t offset, size_t ld, const float *tile, int rows, int cols,
                   int ldt);
/* a[offset + i] += x[i], i < n, where each x[i] is already the EXACT sum
 * of fp32 values (finite, a multiple of 2^-149 with at most 53 significant
 * bits: what an fp64 sum under an exactness certificate gives). One exact
 * addition per element however many terms x[i] stands for. */
void  acc_add_exact_f64(acc_t *a, size_t offset, const double *x, size_t n);
/* Stores into a zero accumulator, which is faster than adding to it
 * (no pass clearing memory, none reading it back): acc_claim_zero(a)
 * returns 1 when a is all zeros and not yet written since acc_zero, and
 * hands it over; the caller must then set every element once through
 * acc_store_* before anything else reads or adds to a. Returns 0 (add as
 * usual) otherwise. */
int   acc_claim_zero(acc_t *a);
void  acc_store_tile(acc_t *a, size_t offset, size_t ld, const float *tile, int rows, int cols,
                     int ldt);
void  acc_store_exact_f64(acc_t *a, size_t offset, const double *x, size_t n);
/* a[offset + c] += sum over r < nrows of rows[r*ld + c], c < width: column
 * sums over tokens (bias, LayerNorm gamma/beta gradients), exact, with
 * one exact addition per column when the fast path certifies the sum. */
void  acc_add_rows(acc_t *a, size_t offset, const float *rows, int nrows, int width, int ld);
/* dst += src (same n). */
void  acc_merge(acc_t *dst, const acc_t *src);
/* out[i] = a[i] rounded once to fp32 (a is unchanged). */
void  acc_round(const acc_t *a, float *out);
/* out[i] = a[offset + i] rounded once, i < n: a range of the sums. */
void  acc_round_range(const acc_t *a, size_t offset, size_t n, float *out);

typedef struct {
    xacc_t x; /* the sum (one plain fp32 value in the diagnostic build) */
} sacc_t;

void  sacc_init(sacc_t *s);
void  sacc_add(sacc_t *s, const float *x, size_t n);
/* s += x[i]*x[i] for i < n, each square rounded to fp32 first (MODEL.md's
 * gradient norm): shared by the golden step and sharded optimizers. */
void  sacc_add_squares(sacc_t *s, const float *x, size_t n);
float sacc_round(const sacc_t *s);

/* round(x[0] + ... + x[n-1]), exact and rounded once; +0 for n == 0. */
float sum_f32(const float *x, size_t n);

/* 1 in the -DPARITY_PLAIN_SUMS diagnostic build, else 0. */
int   accum_plain_sums(void);

#endif
