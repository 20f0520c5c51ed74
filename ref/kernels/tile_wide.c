/* tile_wide.c - one OpenBLAS call for a block of canonical tiles, where
 * this machine's OpenBLAS is shown to give every tile's bits (tile.h:
 * tile_gemm_tiles).
 *
 * The check compares, on random full-mantissa data, one call over the
 * block with one call per tile. OpenBLAS has no data-dependent order (no
 * branch on values), so a shape that agrees on such data agrees on all:
 * any difference in the order or grouping of a K sum shows in some
 * element's rounding. Results are cached per shape; the table is written
 * under a lock and read without one (entries are published by an atomic
 * count and never change afterwards).
 */
#include "parity/tile.h"

#include "parity/runtime.h"
#include "tile_internal.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* Blocks above this many elements of C are not checked (the check's own
 * memory and time grow with the block) and run tile by tile. */
enum { WIDE_MAX_ELEMS = 1 << 20, WIDE_SHAPES = 256 };

typedef struct {
    int form, tm, tn, M, N, K;
    int wide; /* 1: one call gives every tile's bits */
} wide_shape_t;

static wide_shape_t shapes[WIDE_SHAPES];
static atomic_int n_shapes; /* entries [0, n_shapes) are final */
static pthread_mutex_t shapes_lock = PTHREAD_MUTEX_INITIALIZER;

static void gemm_form(tile_form_t form, int M, int N, int K, const float *A, int lda,
                      const float *B, int ldb, float *C, int ldc) {
    switch (form) {
    case TILE_NN: tile_gemm_nn(M, N, K, A, lda, B, ldb, C, ldc); return;
    case TILE_NT: tile_gemm_nt(M, N, K, A, lda, B, ldb, C, ldc); return;
    case TILE_TN: tile_gemm_tn(M, N, K, A, lda, B, ldb, C, ldc); return;
    }
    parity_fatal("tile_gemm_tiles: unknown form %d", (int)form);
}

/* One call per tile: the canonical computation. */
static void per_tile(tile_form_t form, int tm, int tn, int M, int N, int K, const float *A,
                     int lda, const float *B, int ldb, float *C, int ldc) {
    for (int r = 0; r < M; r += tm)
        for (int c = 0; c < N; c += tn) {
            /* A's rows are C's rows (nn, nt) or its columns (tn: A is [K, M]);
             * B's columns are C's columns (nn, tn) or its rows (nt: B is [N, K]). */
            const float *a = form == TILE_TN ? A + r : A + (size_t)r * lda;
            const float *b = form == TILE_NT ? B + (size_t)c * ldb : B + c;
            gemm_form(form, tm, tn, K, a, lda, b, ldb, C + (size_t)r * ldc + c, ldc);
        }
}

/* 1 when one call over the block gives every tile's bits, on random data. */
static int check_wide(tile_form_t form, int tm, int tn, int M, int N, int K) {
    const int ar = form == TILE_TN ? K : M, ac = form == TILE_TN ? M : K;
    const int br = form == TILE_NT ? N : K, bc = form == TILE_NT ? K : N;
    const size_t na = (size_t)ar * ac, nb = (size_t)br * bc, nc = (size_t)M * N;
    float *buf = malloc((na + nb + 2 * nc) * sizeof(float));
    if (buf == NULL) return 0; /* tile by tile is always right */
    float *a = buf, *b = a + na, *c_wide = b + nb, *c_tiles = c_wide + nc;
    uint32_t state = 0x9e3779b9u ^ (uint32_t)(M * 31 + N * 17 + K);
    for (size_t i = 0; i < na; i++) a[i] = tile_check_value(&state);
    for (size_t i = 0; i < nb; i++) b[i] = tile_check_value(&state);
    gemm_form(form, M, N, K, a, ac, b, bc, c_wide, N);
    per_tile(form, tm, tn, M, N, K, a, ac, b, bc, c_tiles, N);
    const int same = memcmp(c_wide, c_tiles, nc * sizeof(float)) == 0;
    free(buf);
    return same;
}

static const wide_shape_t *find(int n, tile_form_t form, int tm, int tn, int M, int N, int K) {
    for (int i = 0; i < n; i++) {
        const wide_shape_t *s = &shapes[i];
        if (s->form == (int)form && s->tm == tm && s->tn == tn && s->M == M && s->N == N &&
            s->K == K)
            return s;
    }
    return NULL;
}

/* Whether the block may be one call: looked up, or checked and recorded. */
static int wide_ok(tile_form_t form, int tm, int tn, int M, int N, int K) {
    const wide_shape_t *s =
        find(atomic_load_explicit(&n_shapes, memory_order_acquire), form, tm, tn, M, N, K);
    if (s) return s->wide;
    pthread_mutex_lock(&shapes_lock);
    const int n = atomic_load_explicit(&n_shapes, memory_order_relaxed);
    s = find(n, form, tm, tn, M, N, K);
    int wide = s ? s->wide : check_wide(form, tm, tn, M, N, K);
    if (!s && n < WIDE_SHAPES) {
        shapes[n] = (wide_shape_t){(int)form, tm, tn, M, N, K, wide};
        atomic_store_explicit(&n_shapes, n + 1, memory_order_release);
    }
    pthread_mutex_unlock(&shapes_lock);
    return wide;
}

void tile_gemm_tiles(tile_form_t form, int tm, int tn, int M, int N, int K, const float *A,
                     int lda, const float *B, int ldb, float *C, int ldc) {
    if (tm <= 0 || tn <= 0 || M < 0 || N < 0 || M % tm || N % tn)
        parity_fatal("tile_gemm_tiles: a %d x %d block is not whole %d x %d tiles", M, N, tm,
                     tn);
    if (M == 0 || N == 0) return;
    const int one_tile = M == tm && N == tn;
    if (one_tile || tile_get_backend() == TILE_BACKEND_PORTABLE ||
        ((size_t)M * (size_t)N <= WIDE_MAX_ELEMS && wide_ok(form, tm, tn, M, N, K)))
        gemm_form(form, M, N, K, A, lda, B, ldb, C, ldc);
    else
        per_tile(form, tm, tn, M, N, K, A, lda, B, ldb, C, ldc);
}

void tile_wide_counts(int *wide, int *narrow) {
    const int n = atomic_load_explicit(&n_shapes, memory_order_acquire);
    int w = 0;
    for (int i = 0; i < n; i++) w += shapes[i].wide;
    *wide = w;
    *narrow = n - w;
}
