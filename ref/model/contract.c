/* contract.c - tiled matrix products with exact sums over K tiles.
 *
 * Work is done one block of C at a time: tm rows and as many tn-wide
 * tiles as keep the block's running state in cache. For each K tile,
 * every (tm x tn) tile of the block is computed into a partial buffer,
 * then the block's partials are folded into per-element running state.
 *
 * The fast path (fold.h's TwoSum-checked folding): each element keeps an
 * fp64 running sum of its partials, every addition checked exact by its
 * TwoSum error; one conversion then rounds the exact value once. A group
 * of FOLD_BLOCK elements in which some addition was not exact (a very
 * wide range of magnitudes, inf or NaN), and every element when xacc's
 * fast path is switched off, recompute their partials into a
 * superaccumulator instead. Both give the same bits
 * (tests/test_model_exact.c).
 *
 * Open accumulation (contract_acc: weight gradients) uses the same block
 * sums: each certified fp64 sum is an exact sum of fp32 terms, so it goes
 * into the open accumulator as one exact addition (acc_add_exact_f64)
 * instead of one per K tile. With a single K tile the partials go in
 * directly. Into a zero accumulator the first sums are stored, not added.
 *
 * In the -DPARITY_PLAIN_SUMS diagnostic build every sum is a plain fp32
 * sum in K-tile order (accum.h), to measure what exactness costs. */
#include "parity/contract.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "parity/error.h"
#include "parity/tile.h"
#include "../kernels/fold.h"
#include "../kernels/simd.h"

void contract_ws_init(contract_ws_t *ws) { memset(ws, 0, sizeof *ws); }

void contract_ws_free(contract_ws_t *ws) {
    free(ws->partial);
    free(ws->sum);
    free(ws->err);
    free(ws->result);
    free(ws->slow);
    free(ws->slow_idx);
    if (ws->has_strip) acc_free(&ws->strip);
    memset(ws, 0, sizeof *ws);
}

static void *grow(void *p, size_t bytes) {
    void *q = realloc(p, bytes ? bytes : 1);
    if (!q) parity_fatal("contract: out of memory for %zu bytes of workspace", bytes);
    return q;
}

/* Workspace for blocks of n elements (kept, never shrunk). */
static void ws_reserve(contract_ws_t *ws, size_t n) {
    if (n <= ws->cap) return;
    ws->partial = grow(ws->partial, n * sizeof(float));
    ws->sum = grow(ws->sum, n * sizeof(double));
    ws->err = grow(ws->err, fold2_groups(n) * sizeof(double));
    ws->result = grow(ws->result, n * sizeof(float));
    ws->slow_idx = grow(ws->slow_idx, n * sizeof(size_t));
    ws->cap = n;
}

static xacc_t *ws_slow(contract_ws_t *ws, size_t n) {
    if (n > ws->slow_cap) {
        ws->slow = grow(ws->slow, n * sizeof(xacc_t));
        ws->slow_cap = n;
    }
    return ws->slow;
}

/* The plain-sums build keeps its block in an acc_t of exactly n elements. */
static acc_t *ws_strip(contract_ws_t *ws, size_t n) {
    if (ws->has_strip && ws->strip.n == n) {
        acc_zero(&ws->strip);
        return &ws->strip;
    }
    if (ws->has_strip) acc_free(&ws->strip);
    if (acc_init(&ws->strip, n)) parity_fatal("contract: out of memory for %zu accumulators", n);
    ws->has_strip = 1;
    return &ws->strip;
}

static void check_grid(const char *what, int M, int N, int K, int tm, int tn, int tk) {
    if (tm <= 0 || tn <= 0 || tk <= 0 || M < 0 || N < 0 || K < 0 || M % tm || N % tn || K % tk)
        parity_fatal("%s: extents M=%d N=%d K=%d are not whole tiles of %d x %d x %d", what, M, N,
                     K, tm, tn, tk);
}

/* The tile product at (i0, j0, k0) into C. */
static void tile_product(contract_form_t form, int tm, int tn, int tk, const float *A, int lda,
                         const float *B, int ldb, int i0, int j0, int k0, float *C, int ldc) {
    size_t i = (size_t)i0, j = (size_t)j0, k = (size_t)k0;
    switch (form) {
    case CONTRACT_NN:
        tile_gemm_nn(tm, tn, tk, A + i * lda + k, lda, B + k * ldb + j, ldb, C, ldc);
        break;
    case CONTRACT_NT:
        tile_gemm_nt(tm, tn, tk, A + i * lda + k, lda, B + j * ldb + k, ldb, C, ldc);
        break;
    case CONTRACT_TN:
        tile_gemm_tn(tm, tn, tk, A + k * lda + i, lda, B + k * ldb + j, ldb, C, ldc);
        break;
    }
}

typedef struct {
    contract_form_t form;
    int K, tm, tn, tk;
    const float *A, *B;
    int lda, ldb;
} job_t;

/* A block of C: rows [i0, i0+tm), columns [j0, j0+w), w a multiple of tn.
 * Blocks are as wide as fits BLOCK_ELEMS, so the running state (16 bytes
 * an element) stays in cache while every K tile is folded in. */
enum { BLOCK_ELEMS = 16384 };

static int block_width(int N, int tm, int tn) {
    int tiles = BLOCK_ELEMS / (tm * tn);
    if (tiles < 1) tiles = 1;
    return tiles * tn < N ? tiles * tn : N;
}

/* Partials of the block for K tile k0: P[tm, w]. */
static void block_partials(const job_t *j, int i0, int j0, int w, int k0, float *P) {
    for (int c = 0; c < w; c += j->tn)
        tile_product(j->form, j->tm, j->tn, j->tk, j->A, j->lda, j->B, j->ldb, i0, j0 + c, k0,
                     P + c, w);
}

/* The running state of the block over all K tiles. Returns the number of
 * elements that failed the certificate; their indices are in slow_idx.
 * Cloned per vector width (simd.h): the fold loops are most of its time. */
PARITY_SIMD_CLONES
static size_t block_sums(const job_t *j, int i0, int j0, int w, contract_ws_t *ws) {
    const size_t n = (size_t)j->tm * (size_t)w, groups = fold2_groups(n);
    double *sum = ws->sum, *err = ws->err;
    for (size_t g = 0; g < groups; g++) err[g] = 0.0;
    for (int k0 = 0; k0 < j->K; k0 += j->tk) {
        block_partials(j, i0, j0, w, k0, ws->partial);
        if (k0 == 0)
            fold2_first(sum, ws->partial, n);
        else
            fold2(sum, err, ws->partial, n);
    }
    size_t n_slow = 0;
    const int all = !xacc_fast_path_enabled();
    for (size_t g = 0; g < groups; g++)
        if (all || err[g] != 0.0) /* an inexact addition (or inf, NaN) in the group */
            for (size_t i = g * FOLD_BLOCK; i < n && i < (g + 1) * FOLD_BLOCK; i++)
                ws->slow_idx[n_slow++] = i;
    return n_slow;
}

/* Superaccumulators for the failed elements: recompute the partials (the
 * tile calls are deterministic) and add each failed element's terms. */
static xacc_t *block_slow(const job_t *j, int i0, int j0, int w, size_t n_slow,
                          contract_ws_t *ws) {
    xacc_t *acc = ws_slow(ws, n_slow);
    for (size_t s = 0; s < n_slow; s++) xacc_init(&acc[s]);
    for (int k0 = 0; k0 < j->K; k0 += j->tk) {
        block_partials(j, i0, j0, w, k0, ws->partial);
        for (size_t s = 0; s < n_slow; s++) xacc_add_f32(&acc[s], ws->partial[ws->slow_idx[s]]);
    }
    return acc;
}

void contract(contract_form_t form, int M, int N, int K, int tm, int tn, int tk,
              const float *A, int lda, const float *B, int ldb, float *C, int ldc,
              contract_ws_t *ws) {
    check_grid("contract", M, N, K, tm, tn, tk);
    if (M == 0 || N == 0) return;
    if (K == 0) {
        for (int i = 0; i < M; i++) memset(C + (size_t)i * ldc, 0, (size_t)N * sizeof(float));
        return;
    }
    if (K == tk) { /* one tile: its partial is the result */
        for (int i0 = 0; i0 < M; i0 += tm)
            for (int j0 = 0; j0 < N; j0 += tn)
                tile_product(form, tm, tn, tk, A, lda, B, ldb, i0, j0, 0,
                             C + (size_t)i0 * ldc + j0, ldc);
        return;
    }
    const job_t job = {form, K, tm, tn, tk, A, B, lda, ldb};
    const int W = block_width(N, tm, tn);
    ws_reserve(ws, (size_t)tm * (size_t)W);
    for (int i0 = 0; i0 < M; i0 += tm)
        for (int j0 = 0; j0 < N; j0 += W) {
            const int w = N - j0 < W ? N - j0 : W;
            const size_t n = (size_t)tm * (size_t)w;
            float *res = ws->result;
            if (accum_plain_sums()) {
                acc_t *acc = ws_strip(ws, n);
                for (int k0 = 0; k0 < K; k0 += tk) {
                    block_partials(&job, i0, j0, w, k0, ws->partial);
                    acc_add(acc, 0, ws->partial, n);
                }
                acc_round(acc, res);
            } else {
                size_t n_slow = block_sums(&job, i0, j0, w, ws);
                for (size_t i = 0; i < n; i++) res[i] = (float)ws->sum[i];
                if (n_slow) {
                    xacc_t *acc = block_slow(&job, i0, j0, w, n_slow, ws);
                    for (size_t s = 0; s < n_slow; s++)
                        res[ws->slow_idx[s]] = xacc_round_f32(&acc[s]);
                }
            }
            for (int r = 0; r < tm; r++)
                memcpy(C + (size_t)(i0 + r) * ldc + j0, res + (size_t)r * w,
                       (size_t)w * sizeof(float));
        }
}

void contract_acc(contract_form_t form, int M, int N, int K, int tm, int tn, int tk,
                  const float *A, int lda, const float *B, int ldb, acc_t *acc,
                  size_t offset, size_t ld, contract_ws_t *ws) {
    check_grid("contract_acc", M, N, K, tm, tn, tk);
    if (M == 0 || N == 0 || K == 0) return;
    const job_t job = {form, K, tm, tn, tk, A, B, lda, ldb};
    const int W = block_width(N, tm, tn);
    ws_reserve(ws, (size_t)tm * (size_t)W);
    const int direct = accum_plain_sums() || K == tk;
    /* A call that covers all of a zero accumulator stores each element's
     * first sum instead of adding it (accum.h: acc_claim_zero); every
     * element below is in exactly one block. */
    const int store = offset == 0 && ld == (size_t)N && (size_t)M * (size_t)N == acc->n &&
                      acc_claim_zero(acc);
    for (int i0 = 0; i0 < M; i0 += tm)
        for (int j0 = 0; j0 < N; j0 += W) {
            const int w = N - j0 < W ? N - j0 : W;
            const size_t n = (size_t)tm * (size_t)w;
            const size_t at = offset + (size_t)i0 * ld + (size_t)j0;
            if (direct) {
                for (int k0 = 0; k0 < K; k0 += tk) {
                    block_partials(&job, i0, j0, w, k0, ws->partial);
                    (store && k0 == 0 ? acc_store_tile : acc_add_tile)(acc, at, ld, ws->partial,
                                                                        tm, w, w);
                }
                continue;
            }
            size_t n_slow = block_sums(&job, i0, j0, w, ws);
            for (size_t s = 0; s < n_slow; s++) ws->sum[ws->slow_idx[s]] = 0.0;
            void (*put)(acc_t *, size_t, const double *, size_t) =
                store ? acc_store_exact_f64 : acc_add_exact_f64;
            if (ld == (size_t)w)
                put(acc, at, ws->sum, n);
            else
                for (int r = 0; r < tm; r++)
                    put(acc, at + (size_t)r * ld, ws->sum + (size_t)r * w, (size_t)w);
            if (n_slow) /* the failed elements' partials, one by one */
                for (int k0 = 0; k0 < K; k0 += tk) {
                    block_partials(&job, i0, j0, w, k0, ws->partial);
                    for (size_t s = 0; s < n_slow; s++) {
                        size_t i = ws->slow_idx[s];
                        acc_add(acc, at + (i / (size_t)w) * ld + i % (size_t)w, &ws->partial[i],
                                1);
                    }
                }
        }
}
