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
 * the caller's order through the plan. */
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

static void *grow(void *p, size_t bytes) {
    void *q = realloc(p, bytes ? bytes : 1);
    if (!q) parity_fatal("contract: out of memory for %zu bytes of workspace", bytes);
    return q;
}

/* Workspace for blocks of n elements with up to errs error groups (kept,
 * never shrunk): the running sums and the partials of `terms` K tiles
 * (FOLD_TERMS where fold passes run, one for the vector kernel). */
static void ws_reserve(contract_ws_t *ws, size_t n, size_t errs, int terms) {
    if (n > ws->cap) {
        ws->sum = grow(ws->sum, n * sizeof(double));
        ws->slow_idx = grow(ws->slow_idx, n * sizeof(size_t));
        ws->cap = n;
    }
    if ((size_t)terms * n > ws->partial_cap) {
        ws->partial = grow(ws->partial, (size_t)terms * n * sizeof(float));
        ws->partial_cap = (size_t)terms * n;
    }
    if (errs > ws->err_cap) {
        ws->err = grow(ws->err, errs * sizeof(double));
        ws->err_cap = errs;
    }
}

static xacc_t *ws_slow(contract_ws_t *ws, size_t n) {
    if (n > ws->slow_cap) {
        ws->slow = grow(ws->slow, n * sizeof(xacc_t));
        ws->slow_cap = n;
    }
    return ws->slow;
}

static void check_grid(const char *what, int M, int N, int K, int tm, int tn, int tk) {
    if (tm <= 0 || tn <= 0 || tk <= 0 || M < 0 || N < 0 || K < 0 || M % tm || N % tn || K % tk)
        parity_fatal("%s: extents M=%d N=%d K=%d are not whole tiles of %d x %d x %d", what, M, N,
                     K, tm, tn, tk);
}

typedef struct {
    contract_form_t form;
    int K, tm, tn, tk;
    const float *A, *B;
    int lda, ldb;
    unsigned long call; /* which contraction: A's contents are fixed within one */
} job_t;

/* Numbers the contractions, so that A packed by one is never taken for
 * another's (a buffer's address is reused with new contents). */
static atomic_ulong calls;

static tile_form_t tile_form(contract_form_t form) {
    return form == CONTRACT_NN ? TILE_NN : form == CONTRACT_NT ? TILE_NT : TILE_TN;
}

/* Where the operands of C's rows from i0, columns from j0, K from k0 start. */
static void operands(const job_t *j, int i0, int j0, int k0, const float **a, const float **b) {
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
static void tiles_product(const job_t *j, int i0, int j0, int k0, int h, int w, float *C,
                          int ldc) {
    const float *a, *b;
    operands(j, i0, j0, k0, &a, &b);
    tile_gemm_tiles(tile_form(j->form), j->tm, j->tn, h, w, j->tk, a, j->lda, b, j->ldb, C, ldc);
}

/* A block of C: rows [i0, i0+h), columns [j0, j0+w), h a multiple of tm
 * and w of tn. Blocks hold up to block_elems() elements; they are as wide
 * as that allows first (one OpenBLAS call covers the block, and the wider
 * it is, the fewer times A's strip is packed), then as tall. Measured on
 * gpt-small (2 MiB L2): 16384 elements 306-313 ms a step, 32768 279-294,
 * 65536 268-288, 131072 270-293, 262144 298: the partials of a fold pass
 * (16 bytes an element) and the sums (8) stay in L2 up to about here. So
 * a block holds the largest power of two of elements whose 24 bytes each
 * fill at most 3/4 of this core's L2: 65536 at 2 MiB, 16384 at 512 KiB
 * (an EPYC whose OpenBLAS runs every tile as its own call, where a narrower
 * block packs nothing more). The shape of a block changes no bit. */
enum { BLOCK_ELEMS_DEFAULT = 65536, BLOCK_ELEMS_MIN = 4096, BLOCK_BYTES_PER_ELEM = 24 };

static int block_elems_value = BLOCK_ELEMS_DEFAULT;
static pthread_once_t block_elems_once = PTHREAD_ONCE_INIT;

static void block_elems_init(void) {
    const long l2 = sysconf(_SC_LEVEL2_CACHE_SIZE);
    if (l2 <= 0) return; /* unknown: the default */
    const long fit = l2 / 4 * 3 / BLOCK_BYTES_PER_ELEM;
    int n = BLOCK_ELEMS_MIN;
    while (n < BLOCK_ELEMS_DEFAULT && 2L * n <= fit) n *= 2;
    block_elems_value = n;
}

static int block_elems(void) {
    pthread_once(&block_elems_once, block_elems_init);
    return block_elems_value;
}

/* The vector kernel's blocks. Where the block's rows of A can be kept
 * packed for all of K (up to APACK_KEEP_FLOATS, for the blocks beside
 * it), as tall as that allows and VEC_BLOCK_W wide: tile_vec_ksum_packed
 * packs each 16-column panel of B once a span of K for all of the
 * block's rows. Measured on gpt-124m's product shapes (512 KiB-L2 EPYC,
 * alternating in one process): 1.02-1.31x the speed of the earlier
 * 256 x 128 blocks. Longer rows (the LM head's input gradient, K =
 * 50304) are packed a chunk at a time by tile_vec_ksum, whose fp64 sums
 * are read back at every chunk: its blocks hold VEC_BLOCK_ELEMS elements
 * (256 x 128; that order at 1024 x 128 ran at 0.7 of their speed).
 * Block shape changes no bit. */
enum { VEC_BLOCK_W = 128, VEC_BLOCK_ELEMS = 32768, APACK_KEEP_FLOATS = 1 << 20 };

static void block_shape(contract_form_t form, int M, int N, int K, int tm, int tn, int *h,
                        int *w) {
    if (tile_get_backend() == TILE_BACKEND_PORTABLE && tile_vec_available()) {
        int tiles = VEC_BLOCK_W / tn;
        if (tiles < 1) tiles = 1;
        *w = tiles * tn < N ? tiles * tn : N;
        /* A kept; the nt form's blocks half as tall: its panels of B
         * (rows of a weight, transposed) pack fast, and its products ran
         * 1.07-1.14x faster so, where the others' ran 0.93-1.03x */
        const size_t keep = form == CONTRACT_NT ? APACK_KEEP_FLOATS / 2 : APACK_KEEP_FLOATS;
        int rows = (int)(keep / ((size_t)K + 1) / (size_t)tm);
        if (rows < 1) rows = VEC_BLOCK_ELEMS / (tm * *w); /* A packed a chunk at a time */
        if (rows < 1) rows = 1;
        *h = rows < M / tm ? rows * tm : M;
        return;
    }
    const int elems = block_elems();
    int tiles = elems / (tm * tn);
    if (tiles < 1) tiles = 1;
    *w = tiles * tn < N ? tiles * tn : N;
    int rows = elems / (tm * *w);
    if (rows < 1) rows = 1;
    *h = rows * tm < M ? rows * tm : M;
}

/* Partials of the block for K tile k0: P[h, w]. */
static void block_partials(const job_t *j, int i0, int j0, int h, int w, int k0, float *P) {
    tiles_product(j, i0, j0, k0, h, w, P, w);
}

/* One fold pass over a block of h rows of w: q partials at P (partial t
 * at P + t*h*w), starting from the first of them or from sum, ending in
 * sum or (out != NULL) rounded into out (row stride ldo). Cloned per
 * vector width (simd.h): the fold is most of the exact sums' time. */
PARITY_SIMD_CLONES
static void fold_pass(double *sum, double *err, const float *P, int h, int w, int q,
                      int from_first, float *out, int ldo) {
    if (fold_rows(sum, err, P, (size_t)w, (size_t)h * (size_t)w, h, w, q, from_first, out,
                  (size_t)ldo))
        parity_fatal("contract: a fold pass of %d K tiles (1 to %d)", q, FOLD_TERMS);
}

/* The block's exact sums over all K tiles, FOLD_TERMS K tiles a pass:
 * rounded into out (row stride ldo), or left in ws->sum when out is NULL.
 * Returns the number of elements whose sum was not certified exact;
 * their indices (h x w, row-major) are in slow_idx. */
static size_t block_sums(const job_t *j, int i0, int j0, int h, int w, float *out, int ldo,
                         contract_ws_t *ws) {
    const size_t n = (size_t)h * (size_t)w;
    const int nk = j->K / j->tk, gw = fold_groups(w);
    for (size_t g = 0; g < (size_t)h * gw; g++) ws->err[g] = 0.0;
    for (int k = 0; k < nk; k += FOLD_TERMS) {
        const int q = nk - k < FOLD_TERMS ? nk - k : FOLD_TERMS;
        for (int t = 0; t < q; t++)
            block_partials(j, i0, j0, h, w, (k + t) * j->tk, ws->partial + (size_t)t * n);
        fold_pass(ws->sum, ws->err, ws->partial, h, w, q, k == 0, k + q == nk ? out : NULL,
                  ldo);
    }
    size_t n_slow = 0;
    const int all = !xacc_fast_path_enabled();
    for (int r = 0; r < h; r++)
        for (int g = 0; g < gw; g++)
            if (all || ws->err[(size_t)r * gw + g] != 0.0) /* an inexact addition, inf, NaN */
                for (int c = g * FOLD_BLOCK; c < w && c < (g + 1) * FOLD_BLOCK; c++)
                    ws->slow_idx[n_slow++] = (size_t)r * w + c;
    return n_slow;
}

/* Whether the block sums take the portable backend's vector kernel
 * (tile_vec_ksum), which folds each K tile's partial as it is formed. */
static int vec_sums(const job_t *j) {
    return tile_get_backend() == TILE_BACKEND_PORTABLE && tile_vec_available() &&
           xacc_fast_path_enabled() && j->tk <= TILE_VEC_ADD_MAX_K;
}

/* block_sums by tile_vec_ksum: the same sums (and outputs), the elements
 * of register blocks it could not certify listed in slow_idx. */
static size_t block_sums_vec(const job_t *j, int i0, int j0, int h, int w, float *out, int ldo,
                             contract_ws_t *ws) {
    const int nbi = (h + TILE_VEC_MR - 1) / TILE_VEC_MR, nbj = (w + TILE_VEC_NR - 1) / TILE_VEC_NR;
    if ((size_t)nbi * nbj > ws->bad_cap) {
        ws->bad = grow(ws->bad, (size_t)nbi * nbj);
        ws->bad_cap = (size_t)nbi * nbj;
    }
    const float *a, *b;
    operands(j, i0, j0, 0, &a, &b);
    int rc;
    const size_t whole = tile_vec_pack_a_size(h, j->K);
    if (whole <= APACK_KEEP_FLOATS) {
        /* the block's rows of A packed once for every block beside it */
        if (whole > ws->apack_cap) {
            ws->apack = grow(ws->apack, whole * sizeof(float));
            ws->apack_cap = whole;
            ws->apack_call = 0;
        }
        if (ws->apack_call != j->call || ws->apack_i0 != i0 || ws->apack_h != h) {
            if (tile_vec_pack_a(tile_form(j->form), h, j->K, j->tk, a, j->lda, ws->apack))
                parity_fatal("contract: tile_vec_pack_a refused K=%d in tiles of %d", j->K,
                             j->tk);
            ws->apack_call = j->call, ws->apack_i0 = i0, ws->apack_h = h;
        }
        const size_t work = tile_vec_ksum_panel_work(j->K, j->tk);
        if (work > ws->panel_cap) {
            ws->panel = grow(ws->panel, work * sizeof(float));
            ws->panel_cap = work;
        }
        rc = tile_vec_ksum_packed(tile_form(j->form), h, w, j->K, j->tk, ws->apack, b, j->ldb,
                                  ws->sum, w, out, ldo, ws->bad, ws->panel);
    } else { /* A's rows are too long to keep: packed a chunk at a time */
        const size_t work = tile_vec_ksum_work(h, j->tk);
        if (work > ws->apack_cap) {
            ws->apack = grow(ws->apack, work * sizeof(float));
            ws->apack_cap = work;
        }
        ws->apack_call = 0;
        rc = tile_vec_ksum(tile_form(j->form), h, w, j->K, j->tk, a, j->lda, b, j->ldb, ws->sum,
                           w, out, ldo, ws->bad, ws->apack);
    }
    if (rc) parity_fatal("contract: tile_vec_ksum refused K=%d in tiles of %d", j->K, j->tk);
    size_t n_slow = 0;
    for (int bi = 0; bi < nbi; bi++)
        for (int bj = 0; bj < nbj; bj++)
            if (ws->bad[(size_t)bi * nbj + bj])
                for (int r = bi * TILE_VEC_MR; r < h && r < (bi + 1) * TILE_VEC_MR; r++)
                    for (int c = bj * TILE_VEC_NR; c < w && c < (bj + 1) * TILE_VEC_NR; c++)
                        ws->slow_idx[n_slow++] = (size_t)r * w + c;
    return n_slow;
}

/* The partials for K tile k0 of the elements the last block sums could
 * not certify, at their places in ws->partial (h x w): the whole block's
 * tile calls, or after the vector kernel only its flagged register
 * blocks (ws->bad), by the same kernel: the portable order gives every
 * element the same bits whatever rectangle is computed around it. */
static void slow_partials(const job_t *j, int i0, int j0, int h, int w, int k0,
                          contract_ws_t *ws) {
    if (!vec_sums(j)) {
        block_partials(j, i0, j0, h, w, k0, ws->partial);
        return;
    }
    const int nbi = (h + TILE_VEC_MR - 1) / TILE_VEC_MR, nbj = (w + TILE_VEC_NR - 1) / TILE_VEC_NR;
    for (int bi = 0; bi < nbi; bi++)
        for (int bj = 0; bj < nbj; bj++) {
            if (!ws->bad[(size_t)bi * nbj + bj]) continue;
            const int r0 = bi * TILE_VEC_MR, c0 = bj * TILE_VEC_NR;
            const int mr = h - r0 < TILE_VEC_MR ? h - r0 : TILE_VEC_MR;
            const int nr = w - c0 < TILE_VEC_NR ? w - c0 : TILE_VEC_NR;
            const float *a, *b;
            operands(j, i0 + r0, j0 + c0, k0, &a, &b);
            tile_vec_gemm(tile_form(j->form), mr, nr, j->tk, a, j->lda, b, j->ldb,
                          ws->partial + (size_t)r0 * w + c0, w, 0);
        }
}

/* Superaccumulators for the failed elements: recompute the partials (the
 * tile calls are deterministic) and add each failed element's terms. */
static xacc_t *block_slow(const job_t *j, int i0, int j0, int h, int w, size_t n_slow,
                          contract_ws_t *ws) {
    xacc_t *acc = ws_slow(ws, n_slow);
    for (size_t s = 0; s < n_slow; s++) xacc_init(&acc[s]);
    for (int k0 = 0; k0 < j->K; k0 += j->tk) {
        slow_partials(j, i0, j0, h, w, k0, ws);
        for (size_t s = 0; s < n_slow; s++) xacc_add_f32(&acc[s], ws->partial[ws->slow_idx[s]]);
    }
    return acc;
}

/* The -DPARITY_PLAIN_SUMS diagnostic: fp32 sums in K-tile order, the
 * first K tile's partials written straight into C. */
static void block_plain(const job_t *j, int i0, int j0, int h, int w, float *C, int ldc,
                        contract_ws_t *ws) {
    block_partials(j, i0, j0, h, w, 0, ws->partial);
    for (int r = 0; r < h; r++)
        memcpy(C + (size_t)r * ldc, ws->partial + (size_t)r * w, (size_t)w * sizeof(float));
    for (int k0 = j->tk; k0 < j->K; k0 += j->tk) {
        block_partials(j, i0, j0, h, w, k0, ws->partial);
        for (int r = 0; r < h; r++) {
            float *c = C + (size_t)r * ldc;
            const float *p = ws->partial + (size_t)r * w;
            for (int i = 0; i < w; i++) c[i] = c[i] + p[i];
        }
    }
}

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
    ws_reserve(ws, (size_t)p->H * (size_t)p->W, (size_t)p->H * (size_t)fold_groups(p->W), terms);
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
    block_shape(p->job.form, M, N, p->job.K, p->job.tm, p->job.tn, &p->H, &p->W);
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
                    : vec     ? block_sums_vec(&p->job, i0, j0, h, w, c, ldc, ws)
                              : block_sums(&p->job, i0, j0, h, w, c, ldc, ws);
    if (n_slow) {
        xacc_t *acc = block_slow(&p->job, i0, j0, h, w, n_slow, ws);
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
        block_plain(&p->job, i0, j0, h, w, c, p->ldc, ws);
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
    size_t n_slow = vec_sums(j) ? block_sums_vec(j, i0, j0, h, w, NULL, 0, ws)
                                : block_sums(j, i0, j0, h, w, NULL, 0, ws);
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
            slow_partials(j, i0, j0, h, w, k0, ws);
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
