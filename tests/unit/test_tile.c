/* test_tile.c - the tile GEMM kernel and its two backends (include/parity/tile.h).
 *
 * Every check compares against something computed independently here: a
 * naive loop written straight from the portable backend's specification,
 * an fp64 reference with the textbook error bound, or the same OpenBLAS
 * call on a differently laid out copy of the same tile. The -O0/-O2 check
 * of the portable backend is tests/tile/test_tile_opt.c.
 *
 * The order of the RUN lines matters at the top: the first tests run
 * before tile_init has ever succeeded.
 */
#include "../harness.h"
#include "parity/tile.h"

#include <cblas.h>
#include <math.h>
#include <pthread.h>
#include <stdint.h>
#include <sys/wait.h>
#include <unistd.h>

typedef void gemm_fn(int, int, int, const float *, int, const float *, int, float *, int);
enum { NN, NT, TN };
static const char *const form_name[] = {"nn", "nt", "tn"};
static gemm_fn *const gemm_dispatch[] = {tile_gemm_nn, tile_gemm_nt, tile_gemm_tn};
static gemm_fn *const gemm_portable[] = {tile_portable_nn, tile_portable_nt, tile_portable_tn};

/* ---- helpers ---------------------------------------------------------------- */

static uint64_t rng_state = 0x9e3779b97f4a7c15ull;
static uint64_t rng_next(void) { /* splitmix64 */
    uint64_t z = (rng_state += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}
/* Uniform in (-1, 1) with a full mantissa, scaled by 2^e for e in
 * [-spread, spread], so sums cancel and round in interesting ways. */
static float rng_float(int spread) {
    uint64_t r = rng_next();
    float x = (float)((int32_t)(uint32_t)r >> 7) * 0x1p-24f;
    int e = spread ? (int)((r >> 32) % (uint64_t)(2 * spread + 1)) - spread : 0;
    return ldexpf(x, e);
}
static void fill(float *x, size_t n, int spread) {
    for (size_t i = 0; i < n; i++) x[i] = rng_float(spread);
}

/* Stored shapes of A and B for a form (row-major rows x cols). */
static void shapes_of(int form, int M, int N, int K, int *ar, int *ac, int *br, int *bc) {
    *ar = form == TN ? K : M;
    *ac = form == TN ? M : K;
    *br = form == NT ? N : K;
    *bc = form == NT ? K : N;
}
static float a_at(int form, const float *A, int lda, int i, int k) {
    return form == TN ? A[(size_t)k * lda + i] : A[(size_t)i * lda + k];
}
static float b_at(int form, const float *B, int ldb, int k, int j) {
    return form == NT ? B[(size_t)j * ldb + k] : B[(size_t)k * ldb + j];
}

/* The portable backend's specification, written the obvious way (j outer,
 * k innermost) and kept separate from ref/kernels/tile_portable.c. */
static void spec_gemm(int form, int M, int N, int K, const float *A, int lda, const float *B,
                      int ldb, float *C, int ldc) {
    for (int i = 0; i < M; i++)
        for (int j = 0; j < N; j++) {
            float acc = 0.0f;
            for (int k = 0; k < K; k++) {
                const float p = a_at(form, A, lda, i, k) * b_at(form, B, ldb, k, j);
                acc = acc + p;
            }
            C[(size_t)i * ldc + j] = acc;
        }
}

/* fp64 reference: each product of two floats is exact in fp64; the sum
 * adds at most K 2^-53 S of its own error. S = sum |a||b|. */
static void ref_f64(int form, int K, const float *A, int lda, const float *B, int ldb, int i,
                    int j, double *c, double *S) {
    double s = 0.0, sa = 0.0;
    for (int k = 0; k < K; k++) {
        double p = (double)a_at(form, A, lda, i, k) * (double)b_at(form, B, ldb, k, j);
        s += p;
        sa += fabs(p);
    }
    *c = s;
    *S = sa;
}

static float *alloc_floats(size_t n) {
    float *p = aligned_alloc(64, ((n * sizeof(float) + 63) / 64) * 64);
    if (!p) {
        fprintf(stderr, "out of memory\n");
        exit(2);
    }
    return p;
}

/* Runs fn in a child process; returns its exit status (or 128 + signal)
 * and its stderr in msg. Used for the fatal paths. */
static int run_in_child(void (*fn)(void), char *msg, size_t msg_len) {
    int fds[2];
    if (pipe(fds) != 0) return -1;
    fflush(stdout);
    fflush(stderr);
    pid_t pid = fork();
    if (pid == 0) {
        close(fds[0]);
        dup2(fds[1], 2);
        fn();
        _exit(0);
    }
    close(fds[1]);
    size_t got = 0;
    ssize_t n;
    while (got + 1 < msg_len && (n = read(fds[0], msg + got, msg_len - 1 - got)) > 0)
        got += (size_t)n;
    msg[got] = '\0';
    close(fds[0]);
    int status = 0;
    waitpid(pid, &status, 0);
    return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

/* ---- 7. bad input, before tile_init has succeeded ------------------------- */

static void call_gemm_before_init(void) {
    float a[4] = {1, 2, 3, 4}, c[4];
    tile_gemm_nn(2, 2, 2, a, 2, a, 2, c, 2);
}

static void test_bad_env_refused(void) {
    perr_t err = {{0}};
    setenv("PARITY_BACKEND", "bogus", 1);
    CHECK(tile_init(&err) == -1, "tile_init accepted PARITY_BACKEND=bogus");
    CHECK(strstr(err.msg, "PARITY_BACKEND") != NULL, "message does not name the variable: %s",
          err.msg);
    CHECK(strstr(err.msg, "bogus") != NULL, "message does not quote the value: %s", err.msg);
    CHECK(strstr(err.msg, "openblas") && strstr(err.msg, "portable"),
          "message does not list the accepted values: %s", err.msg);
    /* A failed init leaves the kernels unusable: fatal, not a silent default. */
    char msg[1024];
    int rc = run_in_child(call_gemm_before_init, msg, sizeof msg);
    CHECK(rc == 3, "kernel before tile_init: exit %d, expected 3 (stderr: %s)", rc, msg);
    CHECK(strstr(msg, "tile_init") != NULL, "fatal message does not mention tile_init: %s", msg);
    unsetenv("PARITY_BACKEND");
}

/* ---- 1. pinning -------------------------------------------------------------- */

static int init_failed;
static void test_init_pins_openblas(void) {
    /* Start from 2 threads so the check can fail if tile_init did not pin. */
    openblas_set_num_threads(2);
    CHECK(openblas_get_num_threads() == 2, "could not set 2 OpenBLAS threads (got %d)",
          openblas_get_num_threads());
    perr_t err = {{0}};
    int rc = tile_init(&err);
    CHECK(rc == 0, "tile_init failed: %s", err.msg);
    init_failed = rc != 0;
    CHECK(openblas_get_num_threads() == 1, "OpenBLAS runs %d threads after tile_init",
          openblas_get_num_threads());
    CHECK(openblas_get_parallel() == 1, "openblas_get_parallel() = %d, expected 1 (pthread build)",
          openblas_get_parallel());
    CHECK(tile_get_backend() == TILE_BACKEND_OPENBLAS, "default backend is %s",
          tile_backend_name(tile_get_backend()));
    /* Idempotent: a second call succeeds without re-reading the environment. */
    setenv("PARITY_BACKEND", "bogus", 1);
    CHECK(tile_init(&err) == 0, "second tile_init failed: %s", err.msg);
    unsetenv("PARITY_BACKEND");
}

/* ---- 7 (cont.). environment selection after init ---------------------------- */

static void test_env_selection(void) {
    perr_t err = {{0}};
    static const struct { const char *value; int rc; tile_backend_t b; } cases[] = {
        {"portable", 0, TILE_BACKEND_PORTABLE}, {"openblas", 0, TILE_BACKEND_OPENBLAS},
        {"", 0, TILE_BACKEND_OPENBLAS},         {"Portable", -1, TILE_BACKEND_OPENBLAS},
        {"blas", -1, TILE_BACKEND_OPENBLAS},    {"portable ", -1, TILE_BACKEND_OPENBLAS},
    };
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        tile_set_backend(TILE_BACKEND_OPENBLAS);
        setenv("PARITY_BACKEND", cases[c].value, 1);
        err.msg[0] = '\0';
        int rc = tile_select_backend_from_env(&err);
        CHECK(rc == cases[c].rc, "PARITY_BACKEND=\"%s\": rc %d, expected %d", cases[c].value, rc,
              cases[c].rc);
        CHECK(tile_get_backend() == cases[c].b, "PARITY_BACKEND=\"%s\": backend %s",
              cases[c].value, tile_backend_name(tile_get_backend()));
        if (cases[c].rc != 0)
            CHECK(strstr(err.msg, "PARITY_BACKEND") && strstr(err.msg, cases[c].value),
                  "message for \"%s\": %s", cases[c].value, err.msg);
    }
    unsetenv("PARITY_BACKEND");
    CHECK(tile_select_backend_from_env(&err) == 0 && tile_get_backend() == TILE_BACKEND_OPENBLAS,
          "unset PARITY_BACKEND does not select openblas");
    CHECK(strcmp(tile_backend_name(TILE_BACKEND_OPENBLAS), "openblas") == 0 &&
              strcmp(tile_backend_name(TILE_BACKEND_PORTABLE), "portable") == 0,
          "backend names");
}

static void call_gemm_bad_lda(void) {
    float a[16] = {0}, c[16];
    tile_gemm_nn(4, 4, 4, a, 3, a, 4, c, 4); /* lda 3 < K 4 */
}
static void call_portable_bad_ldb(void) {
    float a[16] = {0}, c[16];
    tile_portable_nt(4, 4, 4, a, 4, a, 2, c, 4); /* ldb 2 < K 4 */
}
static void call_gemm_negative(void) {
    float a[16] = {0}, c[16];
    tile_gemm_tn(4, -1, 4, a, 4, a, 4, c, 4);
}

static void test_bad_arguments_are_fatal(void) {
    char msg[1024];
    int rc = run_in_child(call_gemm_bad_lda, msg, sizeof msg);
    CHECK(rc == 3 && strstr(msg, "lda=3") && strstr(msg, ">= 4"), "bad lda: exit %d, %s", rc,
          msg);
    rc = run_in_child(call_portable_bad_ldb, msg, sizeof msg);
    CHECK(rc == 3 && strstr(msg, "ldb=2") && strstr(msg, "tile_portable_nt"),
          "bad ldb: exit %d, %s", rc, msg);
    rc = run_in_child(call_gemm_negative, msg, sizeof msg);
    CHECK(rc == 3 && strstr(msg, "N=-1"), "negative N: exit %d, %s", rc, msg);
}

/* ---- 2. OpenBLAS tile invariance ------------------------------------------- */

/* Computes the tile once with tight strides in 64-byte aligned buffers, then
 * in 7 other layouts (padded leading dimensions, buffers shifted by 1..15
 * floats), through tile_gemm_* with the OpenBLAS backend; all must match
 * bit for bit. C is pre-filled with NaN (beta = 0 must overwrite it) and
 * its row padding with a sentinel that must survive. */
static int invariance_failures;
static void check_invariance(int M, int N, int K) {
    static const int layout[][6] = {
        /* pad A, pad B, pad C, off A, off B, off C */
        {0, 0, 0, 1, 2, 3},   {1, 2, 3, 4, 5, 6},    {5, 3, 1, 7, 8, 9},
        {16, 0, 7, 10, 11, 12}, {0, 9, 0, 13, 14, 15}, {13, 13, 13, 0, 0, 0},
        {2, 1, 64, 15, 1, 8},
    };
    for (int form = NN; form <= TN; form++) {
        int ar, ac, br, bc;
        shapes_of(form, M, N, K, &ar, &ac, &br, &bc);
        const int maxpad = 64, maxoff = 16;
        float *A0 = alloc_floats((size_t)ar * ac), *B0 = alloc_floats((size_t)br * bc);
        float *C0 = alloc_floats((size_t)M * N);
        float *Ab = alloc_floats((size_t)ar * (ac + maxpad) + maxoff);
        float *Bb = alloc_floats((size_t)br * (bc + maxpad) + maxoff);
        float *Cb = alloc_floats((size_t)M * (N + maxpad) + maxoff);
        fill(A0, (size_t)ar * ac, 4);
        fill(B0, (size_t)br * bc, 4);
        gemm_dispatch[form](M, N, K, A0, ac, B0, bc, C0, N);
        for (size_t v = 0; v < sizeof layout / sizeof layout[0]; v++) {
            const int lda = ac + layout[v][0], ldb = bc + layout[v][1], ldc = N + layout[v][2];
            float *A = Ab + layout[v][3], *B = Bb + layout[v][4], *C = Cb + layout[v][5];
            for (int r = 0; r < ar; r++) memcpy(A + (size_t)r * lda, A0 + (size_t)r * ac, ac * 4);
            for (int r = 0; r < br; r++) memcpy(B + (size_t)r * ldb, B0 + (size_t)r * bc, bc * 4);
            for (size_t i = 0; i < (size_t)M * ldc; i++) C[i] = (i % ldc) < (size_t)N ? NAN : -7.0f;
            gemm_dispatch[form](M, N, K, A, lda, B, ldb, C, ldc);
            int bad_row = -1, pad_hit = 0;
            for (int i = 0; i < M; i++) {
                if (bad_row < 0 && memcmp(C + (size_t)i * ldc, C0 + (size_t)i * N, N * 4) != 0)
                    bad_row = i;
                for (int j = N; j < ldc; j++) pad_hit |= C[(size_t)i * ldc + j] != -7.0f;
            }
            CHECK(bad_row < 0, "%s %dx%dx%d layout %zu: row %d differs", form_name[form], M, N, K,
                  v, bad_row);
            CHECK(!pad_hit, "%s %dx%dx%d layout %zu wrote into C's row padding", form_name[form],
                  M, N, K, v);
            invariance_failures += bad_row >= 0 || pad_hit;
        }
        free(A0); free(B0); free(C0); free(Ab); free(Bb); free(Cb);
    }
}

static void test_openblas_tile_invariance(void) {
    tile_set_backend(TILE_BACKEND_OPENBLAS);
    static const int sz[] = {8, 16, 32, 64, 128};
    for (int m = 0; m < 5; m++)
        for (int n = 0; n < 5; n++)
            for (int k = 0; k < 5; k++) check_invariance(sz[m], sz[n], sz[k]);
    static const int odd[][3] = {{24, 40, 56}, {7, 13, 5}, {1, 1, 1}, {1, 128, 3},
                                 {100, 3, 77}, {33, 65, 17}, {5, 9, 300}};
    for (size_t s = 0; s < sizeof odd / sizeof odd[0]; s++)
        check_invariance(odd[s][0], odd[s][1], odd[s][2]);
}

/* ---- 2b. blocks of tiles in one call (tile_gemm_tiles) ---------------------- */

/* Every tile of a tile_gemm_tiles block, in padded buffers, must be bit for
 * bit the tile call of that tile alone: under OpenBLAS whether the block
 * ran as one call (checked at first use) or tile by tile, and under the
 * portable backend always. */
static void check_block(tile_backend_t b, int form, int tm, int tn, int K, int M, int N) {
    tile_set_backend(b);
    int ar, ac, br, bc;
    shapes_of(form, M, N, K, &ar, &ac, &br, &bc);
    const int lda = ac + 3, ldb = bc + 5, ldc = N + 7;
    float *A = alloc_floats((size_t)ar * lda), *B = alloc_floats((size_t)br * ldb);
    float *C = alloc_floats((size_t)M * ldc), *T = alloc_floats((size_t)tm * tn);
    fill(A, (size_t)ar * lda, 6);
    fill(B, (size_t)br * ldb, 6);
    for (size_t i = 0; i < (size_t)M * ldc; i++) C[i] = (i % ldc) < (size_t)N ? NAN : -7.0f;
    tile_gemm_tiles((tile_form_t)form, tm, tn, M, N, K, A, lda, B, ldb, C, ldc);
    int bad = 0, pad_hit = 0;
    for (int r = 0; r < M; r += tm)
        for (int c = 0; c < N; c += tn) {
            const float *a = form == TN ? A + r : A + (size_t)r * lda;
            const float *bb = form == NT ? B + (size_t)c * ldb : B + c;
            gemm_dispatch[form](tm, tn, K, a, lda, bb, ldb, T, tn);
            for (int i = 0; i < tm; i++)
                bad += memcmp(C + (size_t)(r + i) * ldc + c, T + (size_t)i * tn, tn * 4) != 0;
        }
    for (int i = 0; i < M; i++)
        for (int j = N; j < ldc; j++) pad_hit |= C[(size_t)i * ldc + j] != -7.0f;
    CHECK(!bad, "%s tiles %s %dx%d (tile %dx%dx%d): %d tile rows differ from the tile calls",
          tile_backend_name(b), form_name[form], M, N, tm, tn, K, bad);
    CHECK(!pad_hit, "%s tiles %s %dx%d wrote into C's row padding", tile_backend_name(b),
          form_name[form], M, N);
    free(A); free(B); free(C); free(T);
}

static void test_tile_blocks(void) {
    /* {tm, tn, K, M, N}: gpt-small's blocks, odd multiples, small tiles
     * (where OpenBLAS's small-matrix kernels may take one shape and not the
     * other), and one block too big to check, which runs tile by tile. */
    static const int shp[][5] = {{128, 128, 128, 128, 512}, {128, 256, 128, 256, 256},
                                 {128, 128, 256, 128, 384}, {128, 128, 32, 128, 256},
                                 {16, 16, 16, 48, 80},      {4, 8, 8, 12, 64},
                                 {8, 32, 16, 64, 32},       {7, 5, 3, 21, 10},
                                 {8, 8, 8, 1024, 1032}};
    for (size_t s = 0; s < sizeof shp / sizeof shp[0]; s++)
        for (int form = NN; form <= TN; form++) {
            check_block(TILE_BACKEND_OPENBLAS, form, shp[s][0], shp[s][1], shp[s][2], shp[s][3],
                        shp[s][4]);
            if (s < 4 || s == 7)
                check_block(TILE_BACKEND_PORTABLE, form, shp[s][0], shp[s][1], shp[s][2],
                            shp[s][3], shp[s][4]);
        }
    tile_set_backend(TILE_BACKEND_OPENBLAS);
    int wide, narrow;
    tile_wide_counts(&wide, &narrow);
    /* Every shape above but the too-big one is recorded once (the portable
     * backend never consults the table). */
    CHECK(wide + narrow == 8 * 3, "%d + %d block shapes recorded, expected %d", wide, narrow,
          8 * 3);
    printf("  tile blocks on this machine: %d shapes as one OpenBLAS call, %d tile by tile\n",
           wide, narrow);
}

static void call_tiles_ragged(void) {
    tile_gemm_tiles(TILE_NN, 8, 8, 12, 16, 8, NULL, 8, NULL, 16, NULL, 16);
}

static void test_tile_blocks_ragged_is_fatal(void) {
    char msg[512];
    CHECK(run_in_child(call_tiles_ragged, msg, sizeof msg) != 0, "a 12 x 16 block of 8 x 8 "
          "tiles was accepted");
    CHECK(strstr(msg, "not whole 8 x 8 tiles") != NULL, "message: %s", msg);
}

/* ---- 3. concurrency ------------------------------------------------------- */

enum { CONC_THREADS = 8 };
typedef struct {
    int calls;
    const float *A, *B, *A2, *B2; /* 64x64 NT tile; 24x40x56 NN tile */
    const float *ref, *ref2;
    const float *ref3; /* the 64x64 NT product as two 32x64 tiles */
    int mismatches;
} conc_arg_t;

static void *conc_worker(void *p) {
    conc_arg_t *arg = p;
    float *C = alloc_floats(64 * 64 + 16), *C2 = alloc_floats(24 * 40 + 16);
    for (int it = 0; it < arg->calls; it++) {
        float *c = C + (it % 16); /* move the output around too */
        tile_gemm_nt(64, 64, 64, arg->A, 64, arg->B, 64, c, 64);
        arg->mismatches += memcmp(c, arg->ref, 64 * 64 * 4) != 0;
        if (it % 4 == 0) {
            tile_gemm_nn(24, 40, 56, arg->A2, 56, arg->B2, 40, C2, 40);
            arg->mismatches += memcmp(C2, arg->ref2, 24 * 40 * 4) != 0;
        }
        if (it % 8 == 0) { /* the first call checks the block shape, under a lock */
            tile_gemm_tiles(TILE_NT, 32, 64, 64, 64, 64, arg->A, 64, arg->B, 64, c, 64);
            arg->mismatches += memcmp(c, arg->ref3, 64 * 64 * 4) != 0;
        }
    }
    free(C);
    free(C2);
    return NULL;
}

static void run_concurrency(tile_backend_t b, int calls) {
    tile_set_backend(b);
    float *A = alloc_floats(64 * 64), *B = alloc_floats(64 * 64), *ref = alloc_floats(64 * 64);
    float *A2 = alloc_floats(24 * 56), *B2 = alloc_floats(56 * 40), *ref2 = alloc_floats(24 * 40);
    fill(A, 64 * 64, 3);
    fill(B, 64 * 64, 3);
    fill(A2, 24 * 56, 3);
    fill(B2, 56 * 40, 3);
    tile_gemm_nt(64, 64, 64, A, 64, B, 64, ref, 64); /* single-thread reference */
    tile_gemm_nn(24, 40, 56, A2, 56, B2, 40, ref2, 40);
    float *ref3 = alloc_floats(64 * 64);
    tile_gemm_nt(32, 64, 64, A, 64, B, 64, ref3, 64);
    tile_gemm_nt(32, 64, 64, A + 32 * 64, 64, B, 64, ref3 + 32 * 64, 64);
    pthread_t th[CONC_THREADS];
    conc_arg_t args[CONC_THREADS];
    for (int t = 0; t < CONC_THREADS; t++) {
        args[t] = (conc_arg_t){calls, A, B, A2, B2, ref, ref2, ref3, 0};
        CHECK(pthread_create(&th[t], NULL, conc_worker, &args[t]) == 0, "pthread_create");
    }
    for (int t = 0; t < CONC_THREADS; t++) {
        pthread_join(th[t], NULL);
        CHECK(args[t].mismatches == 0, "%s: thread %d saw %d results that differ from the "
              "single-thread reference", tile_backend_name(b), t, args[t].mismatches);
    }
    free(A); free(B); free(ref); free(A2); free(B2); free(ref2); free(ref3);
}

static void test_concurrent_calls(void) {
    run_concurrency(TILE_BACKEND_OPENBLAS, 2000);
    run_concurrency(TILE_BACKEND_PORTABLE, 200);
    tile_set_backend(TILE_BACKEND_OPENBLAS);
}

/* ---- 4. the backends agree within the documented bound ------------------- */

static void test_backends_agree_within_bound(void) {
    static const int shp[][3] = {{64, 64, 64}, {24, 40, 56}, {128, 128, 128}, {16, 8, 512},
                                 {7, 13, 5},   {32, 32, 1100}, {1, 1, 4096}};
    double worst_ratio = 0.0, worst_rel = 0.0;
    long differing = 0, total = 0;
    for (size_t s = 0; s < sizeof shp / sizeof shp[0]; s++)
        for (int form = NN; form <= TN; form++)
            for (int spread = 0; spread <= 8; spread += 8) {
                const int M = shp[s][0], N = shp[s][1], K = shp[s][2];
                int ar, ac, br, bc;
                shapes_of(form, M, N, K, &ar, &ac, &br, &bc);
                float *A = alloc_floats((size_t)ar * ac), *B = alloc_floats((size_t)br * bc);
                float *Cb = alloc_floats((size_t)M * N), *Cp = alloc_floats((size_t)M * N);
                fill(A, (size_t)ar * ac, spread);
                fill(B, (size_t)br * bc, spread);
                tile_set_backend(TILE_BACKEND_OPENBLAS);
                gemm_dispatch[form](M, N, K, A, ac, B, bc, Cb, N);
                tile_set_backend(TILE_BACKEND_PORTABLE);
                gemm_dispatch[form](M, N, K, A, ac, B, bc, Cp, N);
                for (int i = 0; i < M; i++)
                    for (int j = 0; j < N; j++) {
                        double c, S;
                        ref_f64(form, K, A, ac, B, bc, i, j, &c, &S);
                        const double d = fabs((double)Cb[i * N + j] - (double)Cp[i * N + j]);
                        CHECK(d <= tile_backend_tolerance(K, S),
                              "%s %dx%dx%d C[%d,%d]: openblas %.9g portable %.9g, |diff| %.3g > "
                              "tolerance %.3g", form_name[form], M, N, K, i, j,
                              (double)Cb[i * N + j], (double)Cp[i * N + j], d,
                              tile_backend_tolerance(K, S));
                        const double ratio = S > 0 ? d / (K * 0x1p-23 * S) : 0.0;
                        if (ratio > worst_ratio) worst_ratio = ratio;
                        if (c != 0 && d / fabs(c) > worst_rel) worst_rel = d / fabs(c);
                        differing += d != 0;
                        total++;
                    }
                free(A); free(B); free(Cb); free(Cp);
            }
    tile_set_backend(TILE_BACKEND_OPENBLAS);
    printf("  backends: %ld of %ld elements differ; max |diff| / (K 2^-23 S) = %.4f; "
           "max |diff| / |c| = %.3g\n", differing, total, worst_ratio, worst_rel);
}

/* ---- 5. portable vs the specification and an fp64 reference --------------- */

static void check_portable(int form, int M, int N, int K, int spread, int special) {
    int ar, ac, br, bc;
    shapes_of(form, M, N, K, &ar, &ac, &br, &bc);
    const int lda = ac + 3, ldb = bc + 1, ldc = N + 2; /* not tight: strides must not matter */
    float *A = alloc_floats((size_t)ar * lda), *B = alloc_floats((size_t)br * ldb);
    float *C = alloc_floats((size_t)M * ldc), *Cs = alloc_floats((size_t)M * ldc);
    fill(A, (size_t)ar * lda, spread);
    fill(B, (size_t)br * ldb, spread);
    if (special == 1) { /* zeros times negatives: every product is -0, the sum must be +0 */
        for (size_t i = 0; i < (size_t)ar * lda; i++) A[i] = i % 2 ? -0.0f : 0.0f;
        for (size_t i = 0; i < (size_t)br * ldb; i++) B[i] = -fabsf(B[i]);
    } else if (special == 2) { /* subnormal products and sums */
        for (size_t i = 0; i < (size_t)ar * lda; i++) A[i] *= 0x1p-70f;
        for (size_t i = 0; i < (size_t)br * ldb; i++) B[i] *= 0x1p-70f;
    } else if (special == 3) { /* inf and NaN propagate exactly as the spec says */
        A[0] = INFINITY;
        B[(size_t)(br - 1) * ldb] = -INFINITY;
        A[(size_t)(ar / 2) * lda + ac / 2] = NAN;
    }
    for (size_t i = 0; i < (size_t)M * ldc; i++) C[i] = Cs[i] = NAN;
    gemm_portable[form](M, N, K, A, lda, B, ldb, C, ldc);
    spec_gemm(form, M, N, K, A, lda, B, ldb, Cs, ldc);
    for (int i = 0; i < M; i++) {
        /* Bit for bit, except that a NaN's sign and payload are not pinned
         * (IEEE 754 leaves open which NaN operand propagates). */
        int same = 1;
        for (int j = 0; j < N; j++) {
            const float x = C[(size_t)i * ldc + j], y = Cs[(size_t)i * ldc + j];
            same &= (isnan(x) && isnan(y)) || memcmp(&x, &y, sizeof x) == 0;
        }
        CHECK(same, "%s %dx%dx%d spread %d special %d: row %d differs from the fixed-order spec",
              form_name[form], M, N, K, spread, special, i);
        if (special == 1)
            for (int j = 0; j < N; j++)
                CHECK(signbit(C[(size_t)i * ldc + j]) == 0 && C[(size_t)i * ldc + j] == 0,
                      "%s: sum of -0 products gave %g", form_name[form], C[(size_t)i * ldc + j]);
        if (special) continue;
        for (int j = 0; j < N; j++) {
            double c, S;
            ref_f64(form, K, A, lda, B, ldb, i, j, &c, &S);
            /* Sequential fp32 sum: |c^ - c| <= gamma_K S, gamma_K = K u / (1 - K u),
             * u = 2^-24; plus the fp64 reference's own error, K 2^-53 S. */
            const double u = 0x1p-24, gamma = K * u / (1 - K * u);
            const double d = fabs((double)C[(size_t)i * ldc + j] - c);
            CHECK(d <= gamma * S + K * 0x1p-53 * S + K * 0x1p-150,
                  "%s %dx%dx%d C[%d,%d]: portable %.9g, fp64 %.17g, error %.3g > bound %.3g",
                  form_name[form], M, N, K, i, j, (double)C[(size_t)i * ldc + j], c, d,
                  gamma * S);
        }
    }
    free(A); free(B); free(C); free(Cs);
}

static void test_portable_matches_spec_and_fp64(void) {
    static const int shp[][3] = {{64, 64, 64}, {24, 40, 56}, {7, 13, 5},  {1, 1, 1},
                                 {4, 8, 3},    {9, 17, 33},  {5, 3, 1100}, {128, 16, 128}};
    for (size_t s = 0; s < sizeof shp / sizeof shp[0]; s++)
        for (int form = NN; form <= TN; form++) {
            check_portable(form, shp[s][0], shp[s][1], shp[s][2], 0, 0);
            check_portable(form, shp[s][0], shp[s][1], shp[s][2], 10, 0);
            for (int special = 1; special <= 3; special++)
                check_portable(form, shp[s][0], shp[s][1], shp[s][2], 2, special);
        }
}

/* ---- edge sizes, both backends ---------------------------------------------- */

static void test_empty_sizes(void) {
    float A[16] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16}, C[12];
    for (int be = 0; be < 2; be++) {
        tile_set_backend((tile_backend_t)be);
        for (int form = NN; form <= TN; form++) {
            /* K = 0: an empty sum is +0, and C is overwritten even if it held NaN or -0. */
            for (int i = 0; i < 12; i++) C[i] = i % 2 ? NAN : -0.0f;
            gemm_dispatch[form](3, 4, 0, A, form == TN ? 3 : 1, A, form == NT ? 1 : 4, C, 4);
            for (int i = 0; i < 12; i++)
                CHECK(C[i] == 0 && !signbit(C[i]), "%s K=0 backend %s: C[%d] = %g",
                      form_name[form], tile_backend_name((tile_backend_t)be), i, C[i]);
            /* M = 0 or N = 0: nothing is written. */
            for (int i = 0; i < 12; i++) C[i] = 42.0f;
            gemm_dispatch[form](0, 4, 3, A, 4, A, 4, C, 4);
            gemm_dispatch[form](3, 0, 3, A, 3, A, 3, C, 1);
            for (int i = 0; i < 12; i++)
                CHECK(C[i] == 42.0f, "%s empty M or N wrote C[%d]", form_name[form], i);
        }
    }
    tile_set_backend(TILE_BACKEND_OPENBLAS);
}

int main(void) {
    RUN(test_bad_env_refused); /* must run before the first successful tile_init */
    RUN(test_init_pins_openblas);
    if (init_failed) return harness_done(); /* nothing below can run */
    RUN(test_env_selection);
    RUN(test_bad_arguments_are_fatal);
    RUN(test_openblas_tile_invariance);
    RUN(test_tile_blocks);
    RUN(test_tile_blocks_ragged_is_fatal);
    RUN(test_concurrent_calls);
    RUN(test_backends_agree_within_bound);
    RUN(test_portable_matches_spec_and_fp64);
    RUN(test_empty_sizes);
    return harness_done();
}
