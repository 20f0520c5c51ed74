/* contract_internal.h - what contract.c (one call's blocks over the
 * threads, the entry points) and contract_sums.c (one block's sums)
 * share; internal to ref/model/ops. A block is rows [i0, i0+h) and
 * columns [j0, j0+w) of C, h a multiple of tm and w of tn. */
#ifndef PARITY_MODEL_OPS_CONTRACT_INTERNAL_H
#define PARITY_MODEL_OPS_CONTRACT_INTERNAL_H

#include <stddef.h>

#include "parity/contract.h"
#include "parity/tile.h"
#include "parity/xacc.h"

/* One contraction's operands and tiles. */
typedef struct {
    contract_form_t form;
    int K, tm, tn, tk;
    const float *A, *B;
    int lda, ldb;
    unsigned long call; /* which contraction: A's contents are fixed within one */
} job_t;

/* Where a block's rows of A can be kept packed for all of K, at most
 * this many floats (contract_sums.c's vector blocks). */
enum { APACK_KEEP_FLOATS = 1 << 20 };

/* The helpers both files call: static, as when they were one file (the
 * compiler's inlining choices, and so the code, stay what they were);
 * unused in a file that does not call them. */
#define PARITY_CONTRACT_HELPER __attribute__((unused)) static

PARITY_CONTRACT_HELPER tile_form_t tile_form(contract_form_t form) {
    return form == CONTRACT_NN ? TILE_NN : form == CONTRACT_NT ? TILE_NT : TILE_TN;
}

/* Where the operands of C's rows from i0, columns from j0, K from k0 start. */
PARITY_CONTRACT_HELPER void operands(const job_t *j, int i0, int j0, int k0, const float **a, const float **b) {
    const size_t i = (size_t)i0, c = (size_t)j0, k = (size_t)k0;
    const size_t lda = (size_t)j->lda, ldb = (size_t)j->ldb;
    switch (j->form) {
    case CONTRACT_NN: *a = j->A + i * lda + k, *b = j->B + k * ldb + c; return;
    case CONTRACT_NT: *a = j->A + i * lda + k, *b = j->B + c * ldb + k; return;
    case CONTRACT_TN: *a = j->A + k * lda + i, *b = j->B + k * ldb + c; return;
    }
}

/* The tile products of rows [i0, i0+h) and columns [j0, j0+w) of C for
 * the K tile at k0, into C (row stride ldc): one tile_gemm_tiles call,
 * whose tiles are the canonical tile calls' bits. */
PARITY_CONTRACT_HELPER void tiles_product(const job_t *j, int i0, int j0, int k0, int h, int w, float *C,
                          int ldc) {
    const float *a, *b;
    operands(j, i0, j0, k0, &a, &b);
    tile_gemm_tiles(tile_form(j->form), j->tm, j->tn, h, w, j->tk, a, j->lda, b, j->ldb, C, ldc);
}

/* Partials of the block for K tile k0: P[h, w]. */
PARITY_CONTRACT_HELPER void block_partials(const job_t *j, int i0, int j0, int h, int w, int k0, float *P) {
    tiles_product(j, i0, j0, k0, h, w, P, w);
}

/* Whether the block sums take the portable backend's vector kernel
 * (tile_vec_ksum), which folds each K tile's partial as it is formed. */
PARITY_CONTRACT_HELPER int vec_sums(const job_t *j) {
    return tile_get_backend() == TILE_BACKEND_PORTABLE && tile_vec_available() &&
           xacc_fast_path_enabled() && j->tk <= TILE_VEC_ADD_MAX_K;
}

/* contract_sums.c: workspace for blocks of n elements with up to errs
 * error groups and the partials of `terms` K tiles (kept, never shrunk). */
void contract_ws_reserve(contract_ws_t *ws, size_t n, size_t errs, int terms);

/* contract_sums.c: the blocks' shape (*h x *w) for a call, by backend. */
void contract_block_shape(contract_form_t form, int M, int N, int K, int tm, int tn, int *h,
                          int *w);

/* contract_sums.c: the block's exact sums over all K tiles, rounded into
 * out (row stride ldo) or left in ws->sum when out is NULL; returns the
 * number of elements not certified exact, their indices in ws->slow_idx.
 * _vec: the same by the vector kernel (vec_sums). */
size_t contract_block_sums(const job_t *j, int i0, int j0, int h, int w, float *out, int ldo,
                           contract_ws_t *ws);
size_t contract_block_sums_vec(const job_t *j, int i0, int j0, int h, int w, float *out,
                               int ldo, contract_ws_t *ws);

/* contract_sums.c: the uncertified elements' partials for K tile k0, and
 * their superaccumulators over all K tiles. */
void contract_slow_partials(const job_t *j, int i0, int j0, int h, int w, int k0,
                            contract_ws_t *ws);
xacc_t *contract_block_slow(const job_t *j, int i0, int j0, int h, int w, size_t n_slow,
                            contract_ws_t *ws);

/* contract_sums.c: the -DPARITY_PLAIN_SUMS diagnostic's fp32 sums into C. */
void contract_block_plain(const job_t *j, int i0, int j0, int h, int w, float *C, int ldc,
                          contract_ws_t *ws);

#endif
