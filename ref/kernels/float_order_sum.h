/* float_order_sum.h - how the kernels sum in the calling thread's float
 * order (float_order.h): one scalar sum and one sum of whole rows of
 * partials, both fp32 in the order's association.
 *
 * Every kind is a tree over the n terms, in one of two shapes:
 *   chunked   contiguous chunks, each summed left to right, and the
 *             chunk sums left to right: SEQUENTIAL (one chunk), GROUPED
 *             (`groups` near-equal chunks, fewer when n < groups), RANDOM
 *             (1 to FORDER_MAX_CHUNKS chunks, their count and cuts drawn
 *             from the seed and the sum's key);
 *   reversed  one chunk, right to left (REVERSED);
 *   pairwise  halves (the first floor(n/2) terms, then the rest), summed
 *             recursively, and their two sums added (PAIRWISE).
 * The scalar and the row form build the same tree, so a sum has the same
 * bits whichever form computes it. */
#ifndef PARITY_KERNELS_FLOAT_ORDER_SUM_H
#define PARITY_KERNELS_FLOAT_ORDER_SUM_H

#include <stddef.h>
#include <stdint.h>

#include "parity/float_order.h"

enum { FORDER_MAX_CHUNKS = 16 };

/* The calling thread's order when its sums are fp32 (kind != EXACT),
 * else NULL: the one test an exact-sum site makes per call. */
const float_order_t *forder_sums(void);

/* A RANDOM sum's key from what identifies it: its extent and terms
 * (scalar sums) or its shape and operands (contractions). */
uint64_t forder_key(const float_order_t *o, uint64_t a, uint64_t b);

/* x[0] + x[stride] + ... (n terms) in fp32 in order o (kind != EXACT);
 * a RANDOM chunking is keyed by n and the first and last terms' bits.
 * +0 for n == 0. */
float forder_sum(const float_order_t *o, const float *x, size_t n, size_t stride);

/* The row form: out[e] = sum over k < nk of term k's element e (e < w),
 * where leaf(ctx, k, buf) writes term k's w elements into buf, each term
 * computed exactly once. bufs holds forder_rows_buffers(o, nk) rows of w
 * floats; returns the row of bufs that holds the sums. */
typedef void forder_leaf_fn(void *ctx, int k, float *buf);
int    forder_rows_buffers(const float_order_t *o, int nk);
float *forder_sum_rows(const float_order_t *o, uint64_t key, int nk, size_t w,
                       forder_leaf_fn *leaf, void *ctx, float *bufs);

#endif
