/* contract.c - tiled matrix products with exact sums over K tiles.
 *
 * Work is done one block of C at a time: as many whole tiles as keep the
 * block's running state in cache. For each K tile, every (tm x tn) tile
 * of the block is computed into a partial buffer by one tile_gemm_tiles
 * call (one OpenBLAS call where this machine gives the canonical tiles'
 * bits that way, tile.h); the partials of up to FOLD_TERMS K tiles are
 * then folded into per-element running state in one pass, and the last
 * pass rounds straight into C. Exactly two K tiles need no fold where
 * tile_gemm_tiles_pair is available: the second tile's call adds onto the
 * first's with one fp32 rounding, which is the exact sum rounded once
 * (block_pair mends -0 and non-finite sums). A call's blocks are
 * independent pieces for the device's compute threads (pool.h), which
 * change no bit.
 *
 * The fast path (fold.h's TwoSum-checked folding): each element keeps an
 * fp64 running sum of its partials, every addition checked exact by its
 * TwoSum error; one conversion then rounds the exact value once. A group
 * of FOLD_BLOCK elements in which some addition was not exact (a very
 * wide range of magnitudes, inf or NaN), and every element when xacc's
 * fast path is switched off, recompute their partials into a
 * superaccumulator instead. Both give the same bits
 * (tests/unit/test_model_exact.c).
 *
 * Open accumulation (contract_acc: weight gradients) uses the same block
 * sums: each certified fp64 sum is an exact sum of fp32 terms, so it goes
 * into the open accumulator as one exact addition (acc_add_exact_f64)
 * instead of one per K tile. With a single K tile the partials go in
 * directly. Into a zero accumulator the first sums are stored, not added.
 *
 * In the -DPARITY_PLAIN_SUMS diagnostic build every sum is a plain fp32
 * sum in K-tile order (accum.h), to measure what exactness costs.
 *
 * Under a float order (float_order.h, tested once per call) a block's K
 * tiles' partials are summed in fp32 in the order's tree instead
 * (block_ordered), and with bf16 the operands are rounded copies and the
 * results are rounded; contract_acc then forms each block's product and
 * adds it to the open sums as one fp32 term per element. The helpers get
 * the caller's order through the plan.
 *
 * This file: one call's blocks spread over the threads, the float
 * order's operands and the entry points; a block's exact sums are
 * contract_sums.c's (contract_internal.h between them). */
#include "parity/contract.h"

#include <math.h>
#include <stdatomic.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "parity/error.h"
#include "parity/pmath.h"
#include "parity/pool.h"
#include "parity/tile.h"
#include "kernels/float_order_sum.h"
#include "kernels/fold.h"
#include "kernels/simd.h"
#include "model/ops/contract_internal.h"

void contract_ws_init(contract_ws_t *ws) { memset(ws, 0, sizeof *ws); }

void contract_ws_free(contract_ws_t *ws) {
    free(ws->partial);
    free(ws->sum);
    free(ws->err);
    free(ws->slow);
    free(ws->slow_idx);
    free(ws->bad);
    free(ws->apack);
    free(ws->panel);
    memset(ws, 0, sizeof *ws);
}

static void check_grid(const char *what, int M, int N, int K, int tm, int tn, int tk) {
    if (tm <= 0 || tn <= 0 || tk <= 0 || M < 0 || N < 0 || K < 0 || M % tm || N % tn || K % tk)
        parity_fatal("%s: extents M=%d N=%d K=%d are not whole tiles of %d x %d x %d", what, M, N,
                     K, tm, tn, tk);
}

/* Numbers the contractions, so that A packed by one is never taken for
 * another's (a buffer's address is reused with new contents). */
static atomic_ulong calls;

/* ---- one call's blocks, spread over the device's compute threads ---------
 *
 * Each block is a piece for pool.h: its tiles are canonical and its sums
 * exact, so which thread computes it changes no bit. A helper thread uses
 * a workspace of its own; the puts into an open accumulator (xvec keeps
 * one list of slow elements) take the call's lock. */

typedef struct {
    job_t job;
    int M, N, H, W, nbi, nbj; /* block grid: blocks of H x W, nbi x nbj */
    int by_columns;           /* pieces go down a column of blocks first */
    contract_ws_t *ws;   /* the calling thread's */
    float *C;            /* contract */
    int ldc;
    const float *bias;   /* contract_add_bias: [N], or NULL */
    acc_t *acc; /* contract_acc */
    size_t offset, ld;
    int store;
    pthread_mutex_t lock;
    /* the caller's float order: NULL for exact sums, else &order_copy */
    const float_order_t *order;
    float_order_t order_copy;
    uint64_t key; /* the call's RANDOM chunking (forder_key) */
    int bf16;     /* results rounded to bfloat16 (operands already are) */
} plan_t;

static contract_ws_t helper_ws[POOL_MAX_THREADS]; /* zeroed: contract_ws_init's state */

static contract_ws_t *worker_ws(const plan_t *p, int worker) {
    contract_ws_t *ws = worker == 0 ? p->ws : &helper_ws[worker];
    int terms = vec_sums(&p->job) ? 1 : FOLD_TERMS;
    if (p->order) { /* block_ordered's rows */
        const int rows = forder_rows_buffers(p->order, p->job.K / p->job.tk);
        terms = rows > terms ? rows : terms;
    }
    contract_ws_reserve(ws, (size_t)p->H * (size_t)p->W, (size_t)p->H * (size_t)fold_groups(p->W), terms);
    return ws;
}

/* Which block a piece is. Consecutive pieces share B's columns (by
 * columns) or A's rows (by rows): whichever operand is larger is then
 * read from memory once and from cache by the neighbouring blocks (the
 * LM head's weight, 154 MB, was read 16 times a product row by row). */
static void block_at(const plan_t *p, int piece, int *i0, int *j0, int *h, int *w) {
    *i0 = (p->by_columns ? piece % p->nbi : piece / p->nbj) * p->H;
    *j0 = (p->by_columns ? piece / p->nbi : piece % p->nbj) * p->W;
    *h = p->M - *i0 < p->H ? p->M - *i0 : p->H;
    *w = p->N - *j0 < p->W ? p->N - *j0 : p->W;
}

static int plan_blocks(plan_t *p, int M, int N) {
    p->M = M, p->N = N;
    contract_block_shape(p->job.form, M, N, p->job.K, p->job.tm, p->job.tn, &p->H, &p->W);
    p->nbj = (N + p->W - 1) / p->W;
    p->nbi = (M + p->H - 1) / p->H;
    /* down the columns only where A's rows are not kept packed and B is
     * the larger operand */
    p->by_columns = N > M && tile_vec_pack_a_size(p->H, p->job.K) > APACK_KEEP_FLOATS;
    return p->nbi * p->nbj;
}

/* C's rows [0, h) of columns [j0, j0 + w) += bias[j0 ...], in fp32. */
static void add_bias(float *c, int ldc, const float *bias, int j0, int h, int w) {
    for (int r = 0; r < h; r++) {
        float *row = c + (size_t)r * ldc;
        for (int e = 0; e < w; e++) row[e] = row[e] + bias[j0 + e];
    }
}

/* Two K tiles: their sums straight into C by tile_gemm_tiles_pair, where
 * this machine allows, then the fold's rules where fp32 addition differs
 * (tile.h): -0 becomes +0, and a sum that is not finite is listed in
 * slow_idx for the superaccumulator. Returns the number listed, or -1
 * when the pair calls are not available (nothing written). */
static long block_pair(const job_t *j, int i0, int j0, int h, int w, float *c, int ldc,
                       contract_ws_t *ws) {
    const float *a0, *b0, *a1, *b1;
    operands(j, i0, j0, 0, &a0, &b0);
    operands(j, i0, j0, j->tk, &a1, &b1);
    if (tile_gemm_tiles_pair(tile_form(j->form), j->tm, j->tn, h, w, j->tk, a0, a1, j->lda, b0,
                             b1, j->ldb, c, ldc))
        return -1;
    size_t n_slow = 0;
    for (int r = 0; r < h; r++) {
        float *row = c + (size_t)r * ldc;
        uint32_t special = 0; /* exponent all ones (inf, NaN), or -0 */
        for (int e = 0; e < w; e++) {
            uint32_t u;
            memcpy(&u, &row[e], sizeof u);
            special |= ((u & 0x7f800000u) == 0x7f800000u) | (u == 0x80000000u);
        }
        if (special)
            for (int e = 0; e < w; e++) {
                if (row[e] == 0.0f) row[e] = 0.0f; /* -0 -> +0 */
                else if (row[e] - row[e] != 0.0f) ws->slow_idx[n_slow++] = (size_t)r * w + e;
            }
    }
    return (long)n_slow;
}

/* A float order's block: each element's K/tk partials summed in fp32 in
 * the order's tree (float_order_sum.h), one block_partials call a term. */
typedef struct {
    const job_t *j;
    int i0, j0, h, w;
} leaf_t;

static void block_leaf(void *ctx, int k, float *buf) {
    const leaf_t *l = ctx;
    block_partials(l->j, l->i0, l->j0, l->h, l->w, k * l->j->tk, buf);
}

static void block_ordered(const plan_t *p, int i0, int j0, int h, int w, float *c, int ldc,
                          contract_ws_t *ws) {
    leaf_t l = {&p->job, i0, j0, h, w};
    const float *sum = forder_sum_rows(p->order, p->key, p->job.K / p->job.tk,
                                       (size_t)h * (size_t)w, block_leaf, &l, ws->partial);
    for (int r = 0; r < h; r++)
        memcpy(c + (size_t)r * ldc, sum + (size_t)r * w, (size_t)w * sizeof(float));
}

/* bf16's output rounding of a block of C. */
static void round_block(float *c, int ldc, int h, int w) {
    for (int r = 0; r < h; r++) pm_round_bf16_array(c + (size_t)r * ldc, (size_t)w);
}

/* The block's product (K tiles summed exactly, or in the float order)
 * into c (row stride ldc). */
static void block_result(const plan_t *p, int i0, int j0, int h, int w, float *c, int ldc,
                         contract_ws_t *ws) {
    if (p->order) {
        block_ordered(p, i0, j0, h, w, c, ldc, ws);
        return;
    }
    if (p->job.K == p->job.tk) { /* one tile: its partial (contract_acc's bf16 blocks) */
        tiles_product(&p->job, i0, j0, 0, h, w, c, ldc);
        return;
    }
    const int vec = vec_sums(&p->job); /* its own sums, A packed, beat the pair's two calls */
    long pair = !vec && p->job.K == 2 * p->job.tk
                    ? block_pair(&p->job, i0, j0, h, w, c, ldc, ws)
                    : -1;
    size_t n_slow = pair >= 0 ? (size_t)pair
                    : vec     ? contract_block_sums_vec(&p->job, i0, j0, h, w, c, ldc, ws)
                              : contract_block_sums(&p->job, i0, j0, h, w, c, ldc, ws);
    if (n_slow) {
        xacc_t *acc = contract_block_slow(&p->job, i0, j0, h, w, n_slow, ws);
        for (size_t s = 0; s < n_slow; s++) {
            const size_t i = ws->slow_idx[s];
            c[(i / (size_t)w) * (size_t)ldc + i % (size_t)w] = xacc_round_f32(&acc[s]);
        }
    }
}

/* contract's piece: block -> C. */
static void contract_block(void *arg, int piece, int worker) {
    const plan_t *p = arg;
    contract_ws_t *ws = worker_ws(p, worker);
    int i0, j0, h, w;
    block_at(p, piece, &i0, &j0, &h, &w);
    float *c = p->C + (size_t)i0 * p->ldc + j0;
    if (accum_plain_sums()) {
        contract_block_plain(&p->job, i0, j0, h, w, c, p->ldc, ws);
        if (p->bias) add_bias(c, p->ldc, p->bias, j0, h, w);
        return;
    }
    block_result(p, i0, j0, h, w, c, p->ldc, ws);
    if (p->bias) add_bias(c, p->ldc, p->bias, j0, h, w);
    if (p->bf16) round_block(c, p->ldc, h, w);
}

/* contract's one-K-tile piece: a band of tm rows, its partials are C. */
static void contract_band(void *arg, int piece, int worker) {
    (void)worker;
    const plan_t *p = arg;
    const job_t *j = &p->job;
    const int i0 = piece * j->tm;
    float *c = p->C + (size_t)i0 * p->ldc;
    tiles_product(j, i0, 0, 0, j->tm, p->N, c, p->ldc);
    if (p->bias) add_bias(c, p->ldc, p->bias, 0, j->tm, p->N);
    if (p->bf16) round_block(c, p->ldc, j->tm, p->N);
}

/* ---- a float order's operands (float_order.h) ------------------------------ */

/* A rows x cols operand (row stride ld) rounded to bfloat16, packed. */
static float *bf16_copy(const float *x, int rows, int cols, int ld) {
    const size_t n = (size_t)rows * (size_t)cols;
    float *y = malloc((n ? n : 1) * sizeof(float));
    if (!y) parity_fatal("contract: out of memory for a %d x %d bf16 operand", rows, cols);
    for (int r = 0; r < rows; r++) {
        memcpy(y + (size_t)r * cols, x + (size_t)r * ld, (size_t)cols * sizeof(float));
        pm_round_bf16_array(y + (size_t)r * cols, (size_t)cols);
    }
    return y;
}

/* The caller's order into the plan: its sums, the call's RANDOM key (its
 * shape and first operands' bits), and with bf16 A, B and the bias
 * replaced by rounded copies, returned in *owned for the caller to free. */
static void plan_order(plan_t *p, const float_order_t *o, int M, int N, const float **bias,
                       float *owned[3]) {
    job_t *j = &p->job;
    owned[0] = owned[1] = owned[2] = NULL;
    p->order_copy = *o;
    p->order = o->kind == FLOAT_ORDER_EXACT ? NULL : &p->order_copy;
    const uint64_t shape = (uint64_t)j->form << 60 ^ (uint64_t)M << 40 ^ (uint64_t)N << 20 ^
                           (uint64_t)j->K;
    uint32_t a, b;
    memcpy(&a, j->A, sizeof a);
    memcpy(&b, j->B, sizeof b);
    p->key = forder_key(o, shape, (uint64_t)a | (uint64_t)b << 32);
    p->bf16 = o->bf16;
    if (!o->bf16) return;
    const int tn = j->form == CONTRACT_TN, nt = j->form == CONTRACT_NT;
    owned[0] = bf16_copy(j->A, tn ? j->K : M, tn ? M : j->K, j->lda);
    owned[1] = bf16_copy(j->B, nt ? N : j->K, nt ? j->K : N, j->ldb);
    j->A = owned[0], j->lda = tn ? M : j->K;
    j->B = owned[1], j->ldb = nt ? j->K : N;
    if (bias && *bias) {
        owned[2] = bf16_copy(*bias, 1, N, N);
        *bias = owned[2];
    }
}

void contract_add_bias(contract_form_t form, int M, int N, int K, int tm, int tn, int tk,
                       const float *A, int lda, const float *B, int ldb, const float *bias,
                       float *C, int ldc, contract_ws_t *ws) {
    check_grid("contract", M, N, K, tm, tn, tk);
    if (M == 0 || N == 0) return;
    const float_order_t *o = float_order_is_exact() ? NULL : float_order_get();
    if (K == 0) {
        for (int i = 0; i < M; i++) memset(C + (size_t)i * ldc, 0, (size_t)N * sizeof(float));
        if (bias) add_bias(C, ldc, bias, 0, M, N);
        if (o && o->bf16) round_block(C, ldc, M, N);
        return;
    }
    plan_t p = {.job = {form, K, tm, tn, tk, A, B, lda, ldb, atomic_fetch_add(&calls, 1) + 1},
                .ws = ws, .C = C, .ldc = ldc, .bias = bias};
    float *owned[3] = {NULL, NULL, NULL};
    if (o) plan_order(&p, o, M, N, &p.bias, owned);
    if (K == tk) { /* one tile: its partial is the result */
        p.M = M, p.N = N;
        pool_run(contract_band, &p, M / tm);
    } else {
        pool_run(contract_block, &p, plan_blocks(&p, M, N));
    }
    for (int i = 0; i < 3; i++) free(owned[i]);
}

void contract(contract_form_t form, int M, int N, int K, int tm, int tn, int tk,
              const float *A, int lda, const float *B, int ldb, float *C, int ldc,
              contract_ws_t *ws) {
    contract_add_bias(form, M, N, K, tm, tn, tk, A, lda, B, ldb, NULL, C, ldc, ws);
}

/* contract_acc's piece: block -> the open accumulator. */
static void acc_block(void *arg, int piece, int worker) {
    plan_t *p = arg;
    const job_t *j = &p->job;
    contract_ws_t *ws = worker_ws(p, worker);
    int i0, j0, h, w;
    block_at(p, piece, &i0, &j0, &h, &w);
    const size_t n = (size_t)h * (size_t)w, ld = p->ld;
    const size_t at = p->offset + (size_t)i0 * ld + (size_t)j0;
    if (p->order || p->bf16) { /* the block's product, then one fp32 term an element */
        float *prod = malloc(n * sizeof(float));
        if (!prod) parity_fatal("contract_acc: out of memory for a block of %zu", n);
        block_result(p, i0, j0, h, w, prod, w, ws);
        if (p->bf16) round_block(prod, w, h, w);
        pthread_mutex_lock(&p->lock);
        (p->store ? acc_store_tile : acc_add_tile)(p->acc, at, ld, prod, h, w, w);
        pthread_mutex_unlock(&p->lock);
        free(prod);
        return;
    }
    if (accum_plain_sums() || j->K == j->tk) {
        for (int k0 = 0; k0 < j->K; k0 += j->tk) {
            block_partials(j, i0, j0, h, w, k0, ws->partial);
            pthread_mutex_lock(&p->lock);
            (p->store && k0 == 0 ? acc_store_tile : acc_add_tile)(p->acc, at, ld, ws->partial,
                                                                   h, w, w);
            pthread_mutex_unlock(&p->lock);
        }
        return;
    }
    size_t n_slow = vec_sums(j) ? contract_block_sums_vec(j, i0, j0, h, w, NULL, 0, ws)
                                : contract_block_sums(j, i0, j0, h, w, NULL, 0, ws);
    for (size_t s = 0; s < n_slow; s++) ws->sum[ws->slow_idx[s]] = 0.0;
    void (*put)(acc_t *, size_t, const double *, size_t) =
        p->store ? acc_store_exact_f64 : acc_add_exact_f64;
    pthread_mutex_lock(&p->lock);
    if (ld == (size_t)w)
        put(p->acc, at, ws->sum, n);
    else
        for (int r = 0; r < h; r++)
            put(p->acc, at + (size_t)r * ld, ws->sum + (size_t)r * w, (size_t)w);
    pthread_mutex_unlock(&p->lock);
    if (n_slow) /* the failed elements' partials, one by one */
        for (int k0 = 0; k0 < j->K; k0 += j->tk) {
            contract_slow_partials(j, i0, j0, h, w, k0, ws);
            pthread_mutex_lock(&p->lock);
            for (size_t s = 0; s < n_slow; s++) {
                size_t i = ws->slow_idx[s];
                acc_add(p->acc, at + (i / (size_t)w) * ld + i % (size_t)w, &ws->partial[i], 1);
            }
            pthread_mutex_unlock(&p->lock);
        }
}

void contract_acc(contract_form_t form, int M, int N, int K, int tm, int tn, int tk,
                  const float *A, int lda, const float *B, int ldb, acc_t *acc,
                  size_t offset, size_t ld, contract_ws_t *ws) {
    check_grid("contract_acc", M, N, K, tm, tn, tk);
    if (M == 0 || N == 0 || K == 0) return;
    plan_t p = {.job = {form, K, tm, tn, tk, A, B, lda, ldb, atomic_fetch_add(&calls, 1) + 1},
                .ws = ws, .acc = acc, .offset = offset, .ld = ld};
    /* A call that covers all of a zero accumulator stores each element's
     * first sum instead of adding it (accum.h: acc_claim_zero); every
     * element is in exactly one block. */
    p.store = offset == 0 && ld == (size_t)N && (size_t)M * (size_t)N == acc->n &&
              acc_claim_zero(acc);
    float *owned[3] = {NULL, NULL, NULL};
    if (!float_order_is_exact()) plan_order(&p, float_order_get(), M, N, NULL, owned);
    const int pieces = plan_blocks(&p, M, N);
    pthread_mutex_init(&p.lock, NULL);
    pool_run(acc_block, &p, pieces);
    for (int i = 0; i < 3; i++) free(owned[i]);
    pthread_mutex_destroy(&p.lock);
}
