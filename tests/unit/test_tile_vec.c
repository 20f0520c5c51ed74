/* test_tile_vec.c - the portable order, eight lanes wide (ref/kernels/tile_vec.c).
 *
 * tile_vec_gemm must give tile_portable_<form>'s bits on every shape (the
 * 6 x 16 register blocks' ragged edges, k split into chunks), for every
 * input (signed zeros, subnormals, infinities, NaN); its add mode must be
 * one fp32 addition of the whole partial. tile_vec_ksum's certified sums
 * must be the superaccumulator's sums of the portable K-tile partials
 * (xacc.h), and a register block whose sums are not exact must say so.
 * On a CPU without AVX2 the vector kernel does not run; every test then
 * checks only that tile_vec_ksum refuses.
 */
#include "../harness.h"
#include "parity/tile.h"
#include "parity/xacc.h"

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

typedef void gemm_fn(int, int, int, const float *, int, const float *, int, float *, int);
static gemm_fn *const portable[] = {tile_portable_nn, tile_portable_nt, tile_portable_tn};
static const char *const form_name[] = {"nn", "nt", "tn"};

static uint64_t rng = 0x243f6a8885a308d3ull;
static float next_value(int spread) { /* full mantissas, exponents over +-spread */
    rng = rng * 6364136223846793005ull + 1442695040888963407ull;
    const float m = (float)((int32_t)(rng >> 32) >> 7) * 0x1p-24f;
    const int e = spread ? (int)((rng >> 16) % (2 * spread + 1)) - spread : 0;
    return ldexpf(m, e);
}

static float *floats(size_t n) {
    float *p = malloc(n * sizeof(float) + 64);
    if (!p) abort();
    return p;
}

/* A and B of a form's M x N x K product with padded strides. */
typedef struct {
    int M, N, K, lda, ldb, form;
    float *A, *B;
} operands_t;

static operands_t make(int form, int M, int N, int K, int spread, int special) {
    operands_t o = {M, N, K, 0, 0, form, NULL, NULL};
    const int ar = form == TILE_TN ? K : M, ac = form == TILE_TN ? M : K;
    const int br = form == TILE_NT ? N : K, bc = form == TILE_NT ? K : N;
    o.lda = ac + 3, o.ldb = bc + 5;
    o.A = floats((size_t)ar * o.lda), o.B = floats((size_t)br * o.ldb);
    for (size_t i = 0; i < (size_t)ar * o.lda; i++) o.A[i] = next_value(spread);
    for (size_t i = 0; i < (size_t)br * o.ldb; i++) o.B[i] = next_value(spread);
    if (special == 1) /* -0 products only: the sums must be +0 */
        for (size_t i = 0; i < (size_t)ar * o.lda; i++) o.A[i] = i % 2 ? -0.0f : 0.0f;
    if (special == 1)
        for (size_t i = 0; i < (size_t)br * o.ldb; i++) o.B[i] = -fabsf(o.B[i]) - 1.0f;
    if (special == 2) /* subnormal products and sums */
        for (size_t i = 0; i < (size_t)ar * o.lda; i++) o.A[i] *= 0x1p-70f;
    if (special == 2)
        for (size_t i = 0; i < (size_t)br * o.ldb; i++) o.B[i] *= 0x1p-70f;
    if (special == 3) { /* an infinity and a NaN */
        o.A[0] = INFINITY;
        o.A[(size_t)(ar / 2) * o.lda + ac / 2] = NAN;
    }
    return o;
}

static void drop(operands_t *o) { free(o->A), free(o->B); }

/* Bit for bit, but any NaN equals any NaN (IEEE does not pin payloads). */
static int same_bits(float x, float y) {
    return (isnan(x) && isnan(y)) || memcmp(&x, &y, sizeof x) == 0;
}

static void check_gemm(int form, int M, int N, int K, int spread, int special) {
    operands_t o = make(form, M, N, K, spread, special);
    const int ldc = N + 7;
    float *want = floats((size_t)M * ldc), *got = floats((size_t)M * ldc);
    for (size_t i = 0; i < (size_t)M * ldc; i++) want[i] = got[i] = 42.0f;
    portable[form](M, N, K, o.A, o.lda, o.B, o.ldb, want, ldc);
    tile_vec_gemm((tile_form_t)form, M, N, K, o.A, o.lda, o.B, o.ldb, got, ldc, 0);
    int bad = 0;
    for (int i = 0; i < M; i++)
        for (int j = 0; j < ldc; j++) bad += !same_bits(want[i * ldc + j], got[i * ldc + j]);
    CHECK(bad == 0, "%s %dx%dx%d spread %d special %d: %d elements differ from the portable loop",
          form_name[form], M, N, K, spread, special, bad);
    /* add mode: got = want + P, one fp32 addition per element */
    if (K <= TILE_VEC_ADD_MAX_K) {
        for (int i = 0; i < M; i++)
            for (int j = 0; j < N; j++) got[i * ldc + j] = want[i * ldc + j] * 0.5f;
        tile_vec_gemm((tile_form_t)form, M, N, K, o.A, o.lda, o.B, o.ldb, got, ldc, 1);
        bad = 0;
        for (int i = 0; i < M; i++)
            for (int j = 0; j < N; j++) {
                const float w = want[i * ldc + j];
                bad += !same_bits(w * 0.5f + w, got[i * ldc + j]);
            }
        CHECK(bad == 0, "%s %dx%dx%d add mode: %d elements are not C + P rounded once",
              form_name[form], M, N, K, bad);
    }
    free(want), free(got), drop(&o);
}

static void test_gemm_is_the_portable_order(void) {
    if (!tile_vec_available()) {
        printf("  no AVX2 here: the portable backend runs tile_portable.c's loops\n");
        return;
    }
    static const int shp[][3] = {{6, 16, 64},  {12, 32, 1},  {1, 1, 1},      {7, 17, 9},
                                 {5, 15, 3},   {128, 64, 64}, {13, 40, 513}, {37, 23, 1100},
                                 {2, 130, 70}, {64, 8, 4}};
    for (size_t s = 0; s < sizeof shp / sizeof shp[0]; s++)
        for (int form = 0; form < 3; form++) {
            check_gemm(form, shp[s][0], shp[s][1], shp[s][2], 0, 0);
            check_gemm(form, shp[s][0], shp[s][1], shp[s][2], 20, 0);
            for (int special = 1; special <= 3; special++)
                check_gemm(form, shp[s][0], shp[s][1], shp[s][2], 2, special);
        }
}

/* tile_vec_ksum against xacc over the portable partials of each K tile. */
static void check_ksum(int form, int M, int N, int nt, int tk, int spread, int special,
                       int *flagged) {
    const int K = nt * tk;
    operands_t o = make(form, M, N, K, spread, special);
    const int ldo = N + 3, nbj = (N + TILE_VEC_NR - 1) / TILE_VEC_NR;
    const int nbi = (M + TILE_VEC_MR - 1) / TILE_VEC_MR;
    double *S = malloc((size_t)M * N * sizeof(double));
    float *out = floats((size_t)M * ldo), *P = floats((size_t)M * N);
    float *work = floats(tile_vec_ksum_work(M, tk));
    unsigned char *bad = malloc((size_t)nbi * nbj);
    xacc_t *acc = malloc((size_t)M * N * sizeof(xacc_t));
    if (!S || !bad || !acc) abort();
    for (size_t e = 0; e < (size_t)M * N; e++) xacc_init(&acc[e]);
    for (int t = 0; t < nt; t++) {
        const float *a = form == TILE_TN ? o.A + (size_t)t * tk * o.lda : o.A + (size_t)t * tk;
        const float *b = form == TILE_NT ? o.B + (size_t)t * tk : o.B + (size_t)t * tk * o.ldb;
        portable[form](M, N, tk, a, o.lda, b, o.ldb, P, N);
        for (size_t e = 0; e < (size_t)M * N; e++) xacc_add_f32(&acc[e], P[e]);
    }
    CHECK(tile_vec_ksum((tile_form_t)form, M, N, K, tk, o.A, o.lda, o.B, o.ldb, S, N, out, ldo,
                        bad, work) == 0,
          "tile_vec_ksum refused %s K=%d tk=%d", form_name[form], K, tk);
    int wrong = 0;
    for (int i = 0; i < M; i++)
        for (int j = 0; j < N; j++) {
            if (bad[i / TILE_VEC_MR * nbj + j / TILE_VEC_NR]) continue;
            const float want = xacc_round_f32(&acc[(size_t)i * N + j]);
            wrong += !same_bits(want, out[(size_t)i * ldo + j]) ||
                     !same_bits(want, (float)S[(size_t)i * N + j]);
        }
    CHECK(wrong == 0, "%s %dx%d, %d tiles of %d, spread %d special %d: %d certified sums differ "
          "from the superaccumulator's", form_name[form], M, N, nt, tk, spread, special, wrong);
    /* A packed once (tile_vec_ksum_packed: the range certificate over all of K, then
     * TwoSum where it cannot certify) gives the same sums, flags and outputs */
    float *packed = floats(tile_vec_pack_a_size(M, K)), *out2 = floats((size_t)M * ldo);
    float *panel = floats(tile_vec_ksum_panel_work(K, tk));
    double *S2 = malloc((size_t)M * N * sizeof(double));
    unsigned char *bad2 = malloc((size_t)nbi * nbj);
    if (!S2 || !bad2) abort();
    CHECK(tile_vec_pack_a((tile_form_t)form, M, K, tk, o.A, o.lda, packed) == 0 &&
              tile_vec_ksum_packed((tile_form_t)form, M, N, K, tk, packed, o.B, o.ldb, S2, N,
                                   out2, ldo, bad2, panel + 1) == 0,
          "tile_vec_pack_a / tile_vec_ksum_packed refused %s K=%d tk=%d", form_name[form], K, tk);
    int differ = memcmp(bad, bad2, (size_t)nbi * nbj) != 0;
    for (int i = 0; i < M; i++)
        for (int j = 0; j < N; j++)
            differ += !bad[i / TILE_VEC_MR * nbj + j / TILE_VEC_NR] &&
                      (!same_bits(out[(size_t)i * ldo + j], out2[(size_t)i * ldo + j]) ||
                       memcmp(&S[(size_t)i * N + j], &S2[(size_t)i * N + j], sizeof(double)));
    CHECK(differ == 0, "%s %dx%d K=%d: A packed once gives other sums or flags (%d)",
          form_name[form], M, N, K, differ);
    free(packed), free(panel), free(out2), free(S2), free(bad2);
    for (int b = 0; b < nbi * nbj; b++) *flagged += bad[b];
    free(S), free(out), free(P), free(work), free(bad), free(acc), drop(&o);
}

static void test_ksum_is_the_exact_sum(void) {
    if (!tile_vec_available()) {
        double s;
        float a = 1, c;
        unsigned char b;
        CHECK(tile_vec_ksum(TILE_NN, 1, 1, 1, 1, &a, 1, &a, 1, &s, 1, &c, 1, &b, &a) == -1,
              "tile_vec_ksum ran without AVX2");
        return;
    }
    static const int shp[][4] = {{6, 16, 2, 64}, {7, 17, 3, 8},  {128, 64, 12, 64},
                                 {13, 40, 5, 100}, {1, 1, 4, 1}, {20, 33, 2, 384},
                                 /* more than one span of K (tile_vec.c) */
                                 {6, 16, 40, 64}, {13, 20, 9, 384}};
    int flagged_plain = 0, flagged_wide = 0, flagged_special = 0;
    for (size_t s = 0; s < sizeof shp / sizeof shp[0]; s++)
        for (int form = 0; form < 3; form++) {
            check_ksum(form, shp[s][0], shp[s][1], shp[s][2], shp[s][3], 0, 0, &flagged_plain);
            check_ksum(form, shp[s][0], shp[s][1], shp[s][2], shp[s][3], 60, 0, &flagged_wide);
            check_ksum(form, shp[s][0], shp[s][1], shp[s][2], shp[s][3], 2, 1, &flagged_plain);
            check_ksum(form, shp[s][0], shp[s][1], shp[s][2], shp[s][3], 2, 2, &flagged_plain);
            check_ksum(form, shp[s][0], shp[s][1], shp[s][2], shp[s][3], 2, 3,
                       &flagged_special);
        }
    /* the check can fail: values 2^120 apart do not add exactly in fp64,
     * and a partial that is infinite or NaN is never certified */
    CHECK(flagged_wide > 0, "no register block flagged over an exponent spread of 2^120");
    CHECK(flagged_special > 0, "no register block flagged with an infinity and a NaN");
    CHECK(flagged_plain == 0, "%d register blocks flagged on plain data", flagged_plain);
    long all, again;
    tile_vec_ksum_counts(&all, &again);
    printf("  register blocks sent to the superaccumulator: %d of the wide-range runs, %d with "
           "inf/NaN, %d otherwise; run again with TwoSum after the range rule: %ld of %ld\n",
           flagged_wide, flagged_special, flagged_plain, again, all);
    CHECK(tile_vec_ksum(TILE_NN, 6, 16, 1024, 1024, NULL, 1, NULL, 1, NULL, 1, NULL, 1, NULL,
                        NULL) == -1, "tile_vec_ksum accepted K tiles above its chunk");
}

/* The range certificate's rule at its edge: two K tiles of one product
 * each, 1 and x. x = 2^-28: exponents 28 apart, + log2(2) = 29: certified
 * by the range; x = 2^-29: 30, run again with TwoSum, which certifies it
 * (1 + x is exact in fp64: the range rule bounds the worst order of any
 * number of terms); x = 2^-60: 1 + x is not exact in fp64, so TwoSum
 * flags it for the superaccumulator. */
static void test_range_certificate_edge(void) {
    if (!tile_vec_available()) return;
    static const float xs[] = {0x1p-28f, 0x1p-29f, -0x1p-28f, 0.0f, 0x1p-60f};
    static const int again[] = {0, 1, 0, 0, 1}, flagged[] = {0, 0, 0, 0, 1};
    for (int c = 0; c < 5; c++) {
        float A[6 * 2], B[2 * 16], out[6 * 16], *packed = floats(tile_vec_pack_a_size(6, 2));
        float *panel = floats(tile_vec_ksum_panel_work(2, 1));
        double S[6 * 16];
        unsigned char bad = 9;
        long all0, twosum0, all1, twosum1;
        for (int i = 0; i < 6; i++) A[i * 2] = 1.0f, A[i * 2 + 1] = xs[c];
        for (int j = 0; j < 32; j++) B[j] = 1.0f;
        tile_vec_ksum_counts(&all0, &twosum0);
        CHECK(tile_vec_pack_a(TILE_NN, 6, 2, 1, A, 2, packed) == 0 &&
                  tile_vec_ksum_packed(TILE_NN, 6, 16, 2, 1, packed, B, 16, S, 16, out, 16, &bad,
                                       panel) == 0,
              "tile_vec_ksum_packed refused 6 x 16, K 2 in tiles of 1");
        tile_vec_ksum_counts(&all1, &twosum1);
        CHECK(all1 - all0 == 1 && twosum1 - twosum0 == again[c],
              "x = %a: %ld blocks, %ld run again with TwoSum; expected 1, %d", (double)xs[c],
              all1 - all0, twosum1 - twosum0, again[c]);
        CHECK(bad == flagged[c] && (bad || (S[0] == 1.0 + (double)xs[c] &&
                                            same_bits(out[95], (float)(1.0 + xs[c])))),
              "x = %a: flag %d (expected %d), sum %a", (double)xs[c], bad, flagged[c], S[0]);
        free(packed), free(panel);
    }
}

int main(void) {
    RUN(test_gemm_is_the_portable_order);
    RUN(test_ksum_is_the_exact_sum);
    RUN(test_range_certificate_edge);
    return harness_done();
}
