/* contract.h - matrix products over the canonical tile grid (I1 + I2).
 *
 * A contraction C = A.B is cut into tiles: tm rows of C, tn columns of C
 * and tk terms of the contracted axis. Every tile product is ONE
 * tile_gemm_* call of shape (tm, tn, tk) with the form (nn/nt/tn) of the
 * product, whatever the layout: that is what makes OpenBLAS's bits
 * reproducible (tile.h). The tk-tile partials of one element of C are
 * then summed exactly and rounded once (accum.h).
 *
 * The contracted extent K may cover only some of the tiles of an axis
 * (attention skips key tiles above the causal diagonal; a tensor-parallel
 * rank holds some feature tiles): the caller passes the pointer of the
 * first tile it sums. The rule for a single tile is the one in MODEL.md:
 * when exactly one tile contributes (K == tk), its partial is the result
 * and no accumulator is used; two or more are summed exactly.
 *
 * Forms, row-major, strides in floats (as tile.h):
 *   nn: A[M,K]   . B[K,N]
 *   nt: A[M,K]   . B[N,K]^T
 *   tn: A[K,M]^T . B[K,N]
 * tm | M, tn | N and tk | K are required (fatal otherwise: the model's
 * config validation makes them hold).
 */
#ifndef PARITY_CONTRACT_H
#define PARITY_CONTRACT_H

#include <stddef.h>

#include "parity/accum.h"

typedef enum { CONTRACT_NN, CONTRACT_NT, CONTRACT_TN } contract_form_t;

/* Scratch for one thread's contractions: a block of tile partials and the
 * block's running exact sums, grown on demand and reused. */
typedef struct {
    size_t cap;           /* elements per strip sum and slow_idx hold */
    float *partial;       /* [partial_cap] K tiles' partials (fold.h: up to FOLD_TERMS) */
    size_t partial_cap;
    double *sum;          /* [cap] running fp64 sums (exact while every addition is) */
    double *err;          /* [err_cap] the additions' |TwoSum errors| by group (fold.h) */
    size_t err_cap;
    size_t *slow_idx;     /* [cap] elements that need the superaccumulator */
    xacc_t *slow;         /* [slow_cap] their accumulators */
    size_t slow_cap;
    unsigned char *bad;   /* [bad_cap] register blocks tile_vec_ksum could not certify */
    size_t bad_cap;
    float *apack;         /* [apack_cap] A packed for tile_vec_ksum */
    size_t apack_cap;
    unsigned long apack_call; /* apack holds rows apack_i0 .. + apack_h of this */
    int apack_i0, apack_h;    /* contraction's A, all of K (0: nothing kept) */
    float *panel;         /* [panel_cap] B's panel for tile_vec_ksum_packed */
    size_t panel_cap;
} contract_ws_t;

void contract_ws_init(contract_ws_t *ws);
void contract_ws_free(contract_ws_t *ws);

/* C[M,N] = round(sum over tk-tiles of the tile products). */
void contract(contract_form_t form, int M, int N, int K, int tm, int tn, int tk,
              const float *A, int lda, const float *B, int ldb, float *C, int ldc,
              contract_ws_t *ws);

/* contract, then C[i,j] = C[i,j] + bias[j] in fp32: the bias added to
 * the rounded sum (I4), as a pass of its own would, but block by block
 * while each block of C is still in cache. */
void contract_add_bias(contract_form_t form, int M, int N, int K, int tm, int tn, int tk,
                       const float *A, int lda, const float *B, int ldb, const float *bias,
                       float *C, int ldc, contract_ws_t *ws);

/* acc[offset + i*ld + j] += every tile partial of (A.B)[i,j], i < M,
 * j < N, left open (not rounded): weight gradients summed over the token
 * tiles of every microbatch, partial sums a collective will merge. */
void contract_acc(contract_form_t form, int M, int N, int K, int tm, int tn, int tk,
                  const float *A, int lda, const float *B, int ldb, acc_t *acc,
                  size_t offset, size_t ld, contract_ws_t *ws);

#endif
