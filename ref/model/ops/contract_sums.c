/* contract_sums.c - one block's sums over K tiles (contract.c's header
 * comment says how): the workspace, the blocks' shape, the fold passes
 * and their TwoSum certificates, the vector kernel's sums, the
 * superaccumulators for what neither certified, and the plain-sums
 * diagnostic. */
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

static void *grow(void *p, size_t bytes) {
    void *q = realloc(p, bytes ? bytes : 1);
    if (!q) parity_fatal("contract: out of memory for %zu bytes of workspace", bytes);
    return q;
}

/* Workspace for blocks of n elements with up to errs error groups (kept,
 * never shrunk): the running sums and the partials of `terms` K tiles
 * (FOLD_TERMS where fold passes run, one for the vector kernel). */
void contract_ws_reserve(contract_ws_t *ws, size_t n, size_t errs, int terms) {
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
enum { VEC_BLOCK_W = 128, VEC_BLOCK_ELEMS = 32768 };

void contract_block_shape(contract_form_t form, int M, int N, int K, int tm, int tn, int *h,
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
size_t contract_block_sums(const job_t *j, int i0, int j0, int h, int w, float *out, int ldo,
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

/* contract_block_sums by tile_vec_ksum: the same sums (and outputs), the elements
 * of register blocks it could not certify listed in slow_idx. */
size_t contract_block_sums_vec(const job_t *j, int i0, int j0, int h, int w, float *out,
                               int ldo, contract_ws_t *ws) {
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
void contract_slow_partials(const job_t *j, int i0, int j0, int h, int w, int k0,
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
xacc_t *contract_block_slow(const job_t *j, int i0, int j0, int h, int w, size_t n_slow,
                            contract_ws_t *ws) {
    xacc_t *acc = ws_slow(ws, n_slow);
    for (size_t s = 0; s < n_slow; s++) xacc_init(&acc[s]);
    for (int k0 = 0; k0 < j->K; k0 += j->tk) {
        contract_slow_partials(j, i0, j0, h, w, k0, ws);
        for (size_t s = 0; s < n_slow; s++) xacc_add_f32(&acc[s], ws->partial[ws->slow_idx[s]]);
    }
    return acc;
}

/* The -DPARITY_PLAIN_SUMS diagnostic: fp32 sums in K-tile order, the
 * first K tile's partials written straight into C. */
void contract_block_plain(const job_t *j, int i0, int j0, int h, int w, float *C, int ldc,
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
