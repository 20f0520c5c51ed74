/* tile_gemm.c - tile GEMM dispatch, the OpenBLAS backend and its start-up
 * checks (DESIGN.md I1, I5).
 *
 * OpenBLAS is only trusted for what was measured: the pthread build, pinned
 * to one thread, gives the same bits for the same tile shape whatever the
 * leading dimensions and alignment, and is safe to call from many threads
 * at once. Its bits DO change with M, N, K and the transposition, which is
 * why callers only ever hand it whole canonical tiles. tile_init checks the
 * first two properties on the machine at hand before the backend is used,
 * because a CPU kernel that broke them would silently produce wrong
 * "golden" bits.
 */
#include "parity/tile.h"

#include "parity/runtime.h"
#include "tile_internal.h"

#include <cblas.h>
#include <pthread.h>
#include <semaphore.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static pthread_mutex_t init_lock = PTHREAD_MUTEX_INITIALIZER;
static atomic_int ready;       /* 1 once tile_init has succeeded */
static atomic_int backend;     /* tile_backend_t */
static int openblas_ok;        /* written under init_lock before ready is set */
static char openblas_why[512]; /* why OpenBLAS was refused, when !openblas_ok */

const char *tile_backend_name(tile_backend_t b) {
    switch (b) {
    case TILE_BACKEND_OPENBLAS: return "openblas";
    case TILE_BACKEND_PORTABLE: return "portable";
    }
    return "unknown";
}

/* PARITY_BACKEND unset or empty means the default, openblas (see
 * CONTRIBUTING.md, "Which backend is the default", for why not portable). */
static int parse_backend_env(tile_backend_t *out, perr_t *err) {
    const char *v = getenv("PARITY_BACKEND");
    if (v == NULL || v[0] == '\0' || strcmp(v, "openblas") == 0) {
        *out = TILE_BACKEND_OPENBLAS;
        return 0;
    }
    if (strcmp(v, "portable") == 0) {
        *out = TILE_BACKEND_PORTABLE;
        return 0;
    }
    return perr_set(err, "PARITY_BACKEND=\"%.100s\" is not a tile backend; expected "
                         "\"openblas\" (the default) or \"portable\"", v);
}

/* ---- OpenBLAS backend ------------------------------------------------------ */

/* Fatal on sizes, strides or pointers no tile can have; both backends use it. */
void tile_check_args(const char *fn, int M, int N, int K, const float *A, int lda, int lda_min,
                     const float *B, int ldb, int ldb_min, float *C, int ldc) {
    if (M < 0 || N < 0 || K < 0)
        parity_fatal("%s: negative size M=%d N=%d K=%d", fn, M, N, K);
    if (lda < lda_min || lda < 1)
        parity_fatal("%s: lda=%d, expected >= %d (M=%d N=%d K=%d)", fn, lda,
                     lda_min > 1 ? lda_min : 1, M, N, K);
    if (ldb < ldb_min || ldb < 1)
        parity_fatal("%s: ldb=%d, expected >= %d (M=%d N=%d K=%d)", fn, ldb,
                     ldb_min > 1 ? ldb_min : 1, M, N, K);
    if (ldc < N || ldc < 1)
        parity_fatal("%s: ldc=%d, expected >= %d (M=%d N=%d K=%d)", fn, ldc,
                     N > 1 ? N : 1, M, N, K);
    if ((M > 0 && N > 0 && C == NULL) || (M > 0 && N > 0 && K > 0 && (A == NULL || B == NULL)))
        parity_fatal("%s: NULL matrix pointer (A=%p B=%p C=%p)", fn, (const void *)A,
                     (const void *)B, (void *)C);
}

/* OpenBLAS 0.3.21 (built with MAX_THREADS=64) keeps a fixed pool of call
 * buffers; more threads inside it at once take its "auxiliary array"
 * path, which crashed about one run in three at 1024 simulated devices
 * (segfault in sgemm_incopy). So at most BLAS_MAX_CALLERS devices are
 * inside OpenBLAS at a time; the rest wait their turn, which changes no
 * bit. Runs of at most that many devices skip the gate (no shared atomic
 * on every tile call). */
#define BLAS_MAX_CALLERS 64
static sem_t blas_slots;
static pthread_once_t blas_slots_once = PTHREAD_ONCE_INIT;
static void blas_slots_init(void) { sem_init(&blas_slots, 0, BLAS_MAX_CALLERS); }

/* beta = 0 overwrites C, beta = 1 adds the products to C
 * (tile_blas_gemm_add). OpenBLAS does beta = 0 as a clearing pass over C
 * (sgemm_beta) followed by the same kernel that beta = 1 runs, adding
 * onto C; that pass is scalar on Zen and took 8% of a gpt-124m step
 * (one call per canonical tile), so C is cleared here with memset and
 * the call adds onto +0: the same bits (the kernel's C + alpha*AB from
 * +0 either way; compared over 10^6 elements with -0, inf and subnormal
 * operands). K == 0 is done here too, so that every backend returns +0
 * for an empty sum. */
static void blas_gemm_beta(enum CBLAS_TRANSPOSE ta, enum CBLAS_TRANSPOSE tb, int M, int N, int K,
                           const float *A, int lda, const float *B, int ldb, float beta, float *C,
                           int ldc) {
    if (M == 0 || N == 0) return;
    if (beta == 0.0f) {
        for (int i = 0; i < M; i++) memset(C + (ptrdiff_t)i * ldc, 0, (size_t)N * sizeof *C);
        beta = 1.0f;
    }
    if (K == 0) return;
    if (devices_world() <= BLAS_MAX_CALLERS) { /* the pool suffices: no gate */
        cblas_sgemm(CblasRowMajor, ta, tb, M, N, K, 1.0f, A, lda, B, ldb, beta, C, ldc);
        return;
    }
    pthread_once(&blas_slots_once, blas_slots_init);
    while (sem_wait(&blas_slots) != 0) {
    }
    cblas_sgemm(CblasRowMajor, ta, tb, M, N, K, 1.0f, A, lda, B, ldb, beta, C, ldc);
    sem_post(&blas_slots);
}

static void blas_gemm(enum CBLAS_TRANSPOSE ta, enum CBLAS_TRANSPOSE tb, int M, int N, int K,
                      const float *A, int lda, const float *B, int ldb, float *C, int ldc) {
    blas_gemm_beta(ta, tb, M, N, K, A, lda, B, ldb, 0.0f, C, ldc);
}

void tile_blas_gemm_add(tile_form_t form, int M, int N, int K, const float *A, int lda,
                        const float *B, int ldb, float *C, int ldc) {
    blas_gemm_beta(form == TILE_TN ? CblasTrans : CblasNoTrans,
                   form == TILE_NT ? CblasTrans : CblasNoTrans, M, N, K, A, lda, B, ldb, 1.0f, C,
                   ldc);
}

/* ---- start-up self-check -------------------------------------------------- */

enum { FORM_NN, FORM_NT, FORM_TN };
static const char *const form_name[] = {"nn", "nt", "tn"};

typedef void gemm_fn(int, int, int, const float *, int, const float *, int, float *, int);

static void blas_form(int form, int M, int N, int K, const float *A, int lda, const float *B,
                      int ldb, float *C, int ldc) {
    enum CBLAS_TRANSPOSE ta = form == FORM_TN ? CblasTrans : CblasNoTrans;
    enum CBLAS_TRANSPOSE tb = form == FORM_NT ? CblasTrans : CblasNoTrans;
    blas_gemm(ta, tb, M, N, K, A, lda, B, ldb, C, ldc);
}

/* Stored shape of A and B for a form: rows x cols, row-major. */
static void operand_shapes(int form, int M, int N, int K, int *ar, int *ac, int *br, int *bc) {
    *ar = form == FORM_TN ? K : M;
    *ac = form == FORM_TN ? M : K;
    *br = form == FORM_NT ? N : K;
    *bc = form == FORM_NT ? K : N;
}

/* Copies a rows x cols matrix into buf at float offset off with row stride ld. */
static float *place(float *buf, size_t off, int ld, const float *src, int rows, int cols) {
    float *dst = buf + off;
    for (int r = 0; r < rows; r++)
        memcpy(dst + (size_t)r * ld, src + (size_t)r * cols, (size_t)cols * sizeof(float));
    return dst;
}

/* The same tile with tight strides and 64-byte alignment, then with padded
 * strides and buffers shifted by 1..15 floats, must give the same bits;
 * and the tight result must agree with the portable backend within
 * tile_backend_tolerance (which catches a mislinked or broken BLAS). */
static int check_tile_invariance(char *why, size_t why_len) {
    static const int shapes[][3] = {{64, 64, 64}, {24, 40, 56}, {16, 16, 16}, {7, 13, 5},
                                    {128, 32, 96}, {33, 65, 17}};
    static const int variants[][2] = {{1, 1}, {3, 5}, {8, 15}, {17, 7}}; /* {ld pad, offset} */
    const size_t cap = 160 * 160 + 64; /* floats: largest operand with padding and offset */
    float *buf = aligned_alloc(64, 8 * cap * sizeof(float));
    if (buf == NULL) {
        snprintf(why, why_len, "out of memory in the OpenBLAS self-check");
        return -1;
    }
    float *a0 = buf, *b0 = buf + cap, *c0 = buf + 2 * cap, *cp = buf + 3 * cap;
    float *abuf = buf + 4 * cap, *bbuf = buf + 5 * cap, *cbuf = buf + 6 * cap;
    int rc = 0;
    uint32_t state = 12345;
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0] && rc == 0; s++) {
        const int M = shapes[s][0], N = shapes[s][1], K = shapes[s][2];
        for (int form = FORM_NN; form <= FORM_TN && rc == 0; form++) {
            int ar, ac, br, bc;
            operand_shapes(form, M, N, K, &ar, &ac, &br, &bc);
            for (int i = 0; i < ar * ac; i++) a0[i] = tile_check_value(&state);
            for (int i = 0; i < br * bc; i++) b0[i] = tile_check_value(&state);
            blas_form(form, M, N, K, a0, ac, b0, bc, c0, N);

            static gemm_fn *const portable[] = {tile_portable_nn, tile_portable_nt,
                                                tile_portable_tn};
            portable[form](M, N, K, a0, ac, b0, bc, cp, N);
            for (int i = 0; i < M && rc == 0; i++)
                for (int j = 0; j < N && rc == 0; j++) {
                    double sum_abs = 0.0;
                    for (int k = 0; k < K; k++) {
                        double a = form == FORM_TN ? a0[k * ac + i] : a0[i * ac + k];
                        double b = form == FORM_NT ? b0[j * bc + k] : b0[k * bc + j];
                        const double p = a * b; /* exact: 24 x 24 bits */
                        sum_abs += p < 0 ? -p : p;
                    }
                    double d = (double)c0[i * N + j] - (double)cp[i * N + j];
                    if (d < 0) d = -d;
                    if (!(d <= tile_backend_tolerance(K, sum_abs))) {
                        snprintf(why, why_len,
                                 "OpenBLAS sgemm_%s %dx%dx%d disagrees with the portable "
                                 "backend at C[%d,%d]: %.9g vs %.9g (tolerance %.3g)",
                                 form_name[form], M, N, K, i, j, (double)c0[i * N + j],
                                 (double)cp[i * N + j], tile_backend_tolerance(K, sum_abs));
                        rc = -1;
                    }
                }

            for (size_t v = 0; v < sizeof variants / sizeof variants[0] && rc == 0; v++) {
                const int pad = variants[v][0], off = variants[v][1];
                const float *a = place(abuf, off, ac + pad, a0, ar, ac);
                const float *b = place(bbuf, (off * 3) % 16, bc + pad, b0, br, bc);
                float *c = cbuf + (off * 7) % 16;
                blas_form(form, M, N, K, a, ac + pad, b, bc + pad, c, N + pad);
                for (int i = 0; i < M && rc == 0; i++)
                    if (memcmp(c + (size_t)i * (N + pad), c0 + (size_t)i * N,
                               (size_t)N * sizeof(float)) != 0) {
                        snprintf(why, why_len,
                                 "OpenBLAS (%s kernel) is not tile-invariant on this machine: "
                                 "sgemm_%s %dx%dx%d gives different bits in row %d when the "
                                 "leading dimensions grow by %d and the buffers move by "
                                 "%d floats",
                                 openblas_get_corename(), form_name[form], M, N, K, i, pad,
                                 off);
                        rc = -1;
                    }
            }
        }
    }
    free(buf);
    return rc;
}

/* Pins OpenBLAS and runs every check; 0 if the backend can be trusted. */
static int check_openblas(char *why, size_t why_len) {
    openblas_set_num_threads(1);
    const int par = openblas_get_parallel();
    if (par != 1) {
        snprintf(why, why_len,
                 "OpenBLAS is not the pthread build (openblas_get_parallel() = %d, expected 1; "
                 "0 is the serial build, unsafe when device threads call it at once, 2 the "
                 "OpenMP build)", par);
        return -1;
    }
    const int nt = openblas_get_num_threads();
    if (nt != 1) {
        snprintf(why, why_len,
                 "OpenBLAS ignored openblas_set_num_threads(1): it reports %d threads", nt);
        return -1;
    }
    return check_tile_invariance(why, why_len);
}

/* ---- initialisation and backend selection ---------------------------------- */

int tile_init(perr_t *err) {
    if (atomic_load_explicit(&ready, memory_order_acquire)) return 0;
    pthread_mutex_lock(&init_lock);
    int rc = 0;
    if (!atomic_load_explicit(&ready, memory_order_relaxed)) {
        tile_backend_t b;
        rc = parse_backend_env(&b, err);
        if (rc == 0) {
            openblas_ok = check_openblas(openblas_why, sizeof openblas_why) == 0;
            if (b == TILE_BACKEND_OPENBLAS && !openblas_ok) {
                rc = perr_set(err, "tile backend openblas refused: %s; set "
                                   "PARITY_BACKEND=portable to use the portable backend",
                              openblas_why);
            } else {
                atomic_store_explicit(&backend, (int)b, memory_order_relaxed);
                atomic_store_explicit(&ready, 1, memory_order_release);
            }
        }
    }
    pthread_mutex_unlock(&init_lock);
    return rc;
}

static void require_ready(const char *fn) {
    if (!atomic_load_explicit(&ready, memory_order_acquire))
        parity_fatal("%s called before tile_init() succeeded: call tile_init() once at "
                     "start-up, before any device thread runs a kernel", fn);
}

void tile_set_backend(tile_backend_t b) {
    require_ready("tile_set_backend");
    if (b != TILE_BACKEND_OPENBLAS && b != TILE_BACKEND_PORTABLE)
        parity_fatal("tile_set_backend: unknown backend %d", (int)b);
    if (b == TILE_BACKEND_OPENBLAS && !openblas_ok)
        parity_fatal("tile_set_backend(openblas): OpenBLAS failed its start-up check: %s",
                     openblas_why);
    atomic_store_explicit(&backend, (int)b, memory_order_relaxed);
}

tile_backend_t tile_get_backend(void) {
    return (tile_backend_t)atomic_load_explicit(&backend, memory_order_relaxed);
}

int tile_select_backend_from_env(perr_t *err) {
    require_ready("tile_select_backend_from_env");
    tile_backend_t b;
    if (parse_backend_env(&b, err) != 0) return -1;
    if (b == TILE_BACKEND_OPENBLAS && !openblas_ok)
        return perr_set(err, "tile backend openblas refused: %s; set PARITY_BACKEND=portable "
                             "to use the portable backend", openblas_why);
    atomic_store_explicit(&backend, (int)b, memory_order_relaxed);
    return 0;
}

/* ---- dispatch -------------------------------------------------------------- */

/* One tile call on the selected backend. The portable backend runs its
 * eight-lane kernel where this CPU has one (tile_vec.c: the same bits). */
static void dispatch(tile_form_t form, const char *fn, int M, int N, int K, const float *A,
                     int lda, const float *B, int ldb, float *C, int ldc) {
    require_ready(fn);
    const int portable = tile_get_backend() == TILE_BACKEND_PORTABLE;
    if (portable && !tile_vec_available()) {
        gemm_fn *const loop[] = {tile_portable_nn, tile_portable_nt, tile_portable_tn};
        loop[form](M, N, K, A, lda, B, ldb, C, ldc);
        return;
    }
    tile_check_args(fn, M, N, K, A, lda, form == TILE_TN ? M : K, B, ldb,
                    form == TILE_NT ? K : N, C, ldc);
    if (portable)
        tile_vec_gemm(form, M, N, K, A, lda, B, ldb, C, ldc, 0);
    else
        blas_gemm(form == TILE_TN ? CblasTrans : CblasNoTrans,
                  form == TILE_NT ? CblasTrans : CblasNoTrans, M, N, K, A, lda, B, ldb, C, ldc);
}

void tile_gemm_nn(int M, int N, int K, const float *A, int lda, const float *B, int ldb,
                  float *C, int ldc) {
    dispatch(TILE_NN, "tile_gemm_nn", M, N, K, A, lda, B, ldb, C, ldc);
}

void tile_gemm_nt(int M, int N, int K, const float *A, int lda, const float *B, int ldb,
                  float *C, int ldc) {
    dispatch(TILE_NT, "tile_gemm_nt", M, N, K, A, lda, B, ldb, C, ldc);
}

void tile_gemm_tn(int M, int N, int K, const float *A, int lda, const float *B, int ldb,
                  float *C, int ldc) {
    dispatch(TILE_TN, "tile_gemm_tn", M, N, K, A, lda, B, ldb, C, ldc);
}
