/* tile_wide.c - one OpenBLAS call for a block of canonical tiles, where
 * this machine's OpenBLAS is shown to give every tile's bits (tile.h:
 * tile_gemm_tiles), and two calls for the rounded sums of a block's two
 * K tiles (tile_gemm_tiles_pair).
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

/* What a shape was checked for. */
typedef enum { CHECK_WIDE, CHECK_PAIR } check_kind_t;

typedef struct {
    int kind, form, tm, tn, M, N, K;
    int wide; /* 1: the call(s) give the canonical bits */
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
/* The stored operands of a form's block: A's and B's row strides (ac, bc)
 * and element counts (na, nb). */
static void operand_sizes(tile_form_t form, int M, int N, int K, int *ac, int *bc, size_t *na,
                          size_t *nb) {
    *ac = form == TILE_TN ? M : K;
    *bc = form == TILE_NT ? K : N;
    *na = (size_t)M * K;
    *nb = (size_t)N * K;
}

static int check_wide(tile_form_t form, int tm, int tn, int M, int N, int K) {
    int ac, bc;
    size_t na, nb, nc = (size_t)M * N;
    operand_sizes(form, M, N, K, &ac, &bc, &na, &nb);
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

/* 1 when the two calls of tile_gemm_tiles_pair give, on random data,
 * every element's two canonical tile partials added in fp32. */
static int check_pair(tile_form_t form, int tm, int tn, int M, int N, int K) {
    int ac, bc;
    size_t na, nb, nc = (size_t)M * N;
    operand_sizes(form, M, N, K, &ac, &bc, &na, &nb);
    float *buf = malloc((2 * na + 2 * nb + 3 * nc) * sizeof(float));
    if (buf == NULL) return 0; /* the fold is always right */
    float *a0 = buf, *a1 = a0 + na, *b0 = a1 + na, *b1 = b0 + nb;
    float *c_pair = b1 + nb, *c_tiles = c_pair + nc, *p1 = c_tiles + nc;
    uint32_t state = 0x85ebca6bu ^ (uint32_t)(M * 31 + N * 17 + K);
    for (size_t i = 0; i < 2 * na + 2 * nb; i++) buf[i] = tile_check_value(&state);
    gemm_form(form, M, N, K, a0, ac, b0, bc, c_pair, N);
    tile_blas_gemm_add(form, M, N, K, a1, ac, b1, bc, c_pair, N);
    per_tile(form, tm, tn, M, N, K, a0, ac, b0, bc, c_tiles, N);
    per_tile(form, tm, tn, M, N, K, a1, ac, b1, bc, p1, N);
    for (size_t i = 0; i < nc; i++) c_tiles[i] = c_tiles[i] + p1[i];
    const int same = memcmp(c_pair, c_tiles, nc * sizeof(float)) == 0;
    free(buf);
    return same;
}

static const wide_shape_t *find(int n, check_kind_t kind, tile_form_t form, int tm, int tn,
                                int M, int N, int K) {
    for (int i = 0; i < n; i++) {
        const wide_shape_t *s = &shapes[i];
        if (s->kind == (int)kind && s->form == (int)form && s->tm == tm && s->tn == tn &&
            s->M == M && s->N == N && s->K == K)
            return s;
    }
    return NULL;
}

/* Whether the block may take kind's calls: looked up, or checked and
 * recorded. */
static int shape_ok(check_kind_t kind, tile_form_t form, int tm, int tn, int M, int N, int K) {
    const wide_shape_t *s = find(atomic_load_explicit(&n_shapes, memory_order_acquire), kind,
                                 form, tm, tn, M, N, K);
    if (s) return s->wide;
    pthread_mutex_lock(&shapes_lock);
    const int n = atomic_load_explicit(&n_shapes, memory_order_relaxed);
    s = find(n, kind, form, tm, tn, M, N, K);
    int wide = s                    ? s->wide
               : kind == CHECK_WIDE ? check_wide(form, tm, tn, M, N, K)
                                    : check_pair(form, tm, tn, M, N, K);
    if (!s && n < WIDE_SHAPES) {
        shapes[n] = (wide_shape_t){(int)kind, (int)form, tm, tn, M, N, K, wide};
        atomic_store_explicit(&n_shapes, n + 1, memory_order_release);
    }
    pthread_mutex_unlock(&shapes_lock);
    return wide;
}

static void check_block(const char *fn, int tm, int tn, int M, int N) {
    if (tm <= 0 || tn <= 0 || M < 0 || N < 0 || M % tm || N % tn)
        parity_fatal("%s: a %d x %d block is not whole %d x %d tiles", fn, M, N, tm, tn);
}

void tile_gemm_tiles(tile_form_t form, int tm, int tn, int M, int N, int K, const float *A,
                     int lda, const float *B, int ldb, float *C, int ldc) {
    check_block("tile_gemm_tiles", tm, tn, M, N);
    if (M == 0 || N == 0) return;
    const int one_tile = M == tm && N == tn;
    if (one_tile || tile_get_backend() == TILE_BACKEND_PORTABLE ||
        ((size_t)M * (size_t)N <= WIDE_MAX_ELEMS && shape_ok(CHECK_WIDE, form, tm, tn, M, N, K)))
        gemm_form(form, M, N, K, A, lda, B, ldb, C, ldc);
    else
        per_tile(form, tm, tn, M, N, K, A, lda, B, ldb, C, ldc);
}

int tile_gemm_tiles_pair(tile_form_t form, int tm, int tn, int M, int N, int K,
                         const float *A0, const float *A1, int lda, const float *B0,
                         const float *B1, int ldb, float *C, int ldc) {
    check_block("tile_gemm_tiles_pair", tm, tn, M, N);
    if (M == 0 || N == 0) return 0;
    if (tile_get_backend() == TILE_BACKEND_PORTABLE) {
        /* the portable order forms each whole partial before the add */
        if (!tile_vec_available() || K == 0 || K > TILE_VEC_ADD_MAX_K) return -1;
        tile_vec_gemm(form, M, N, K, A0, lda, B0, ldb, C, ldc, 0);
        tile_vec_gemm(form, M, N, K, A1, lda, B1, ldb, C, ldc, 1);
        return 0;
    }
    if (K == 0 ||
        (size_t)M * (size_t)N > WIDE_MAX_ELEMS || !shape_ok(CHECK_PAIR, form, tm, tn, M, N, K))
        return -1;
    gemm_form(form, M, N, K, A0, lda, B0, ldb, C, ldc);
    tile_blas_gemm_add(form, M, N, K, A1, lda, B1, ldb, C, ldc);
    return 0;
}

/* Shapes checked for kind: how many passed (*ok) and failed (*failed). */
static void counts(check_kind_t kind, int *ok, int *failed) {
    const int n = atomic_load_explicit(&n_shapes, memory_order_acquire);
    int passed = 0, checked = 0;
    for (int i = 0; i < n; i++)
        if (shapes[i].kind == (int)kind) passed += shapes[i].wide, checked++;
    *ok = passed;
    *failed = checked - passed;
}

void tile_wide_counts(int *wide, int *narrow) { counts(CHECK_WIDE, wide, narrow); }
void tile_pair_counts(int *pair, int *folded) { counts(CHECK_PAIR, pair, folded); }
