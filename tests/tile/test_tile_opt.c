/* test_tile_opt.c - the portable backend gives the same bits at any
 * optimisation level and vector width (DESIGN.md I5).
 *
 * tests/tile.mk compiles ref/kernels/tile_portable.c several more times
 * with renamed entry points:
 *   *_O0    -O0 (scalar code, every value through memory)
 *   *_O2    -O2 (the library's usual build: SSE2 vectors on x86-64)
 *   *_avx2  -O3 -mavx2 -mfma (x86-64 only: 8-wide vectors, FMA instructions
 *           available but -ffp-contract=off must keep them out)
 * and links them here next to the library's own tile_portable_* (built
 * with whatever flags this build uses, sanitizers included). All must
 * agree bit for bit on tiles of many shapes, including ones that leave
 * partial register blocks, cross the nt form's k-panel boundary, and hold
 * subnormals, signed zeros and infinities.
 */
#include "../harness.h"
#include "parity/tile.h"

#include <math.h>
#include <stdint.h>

typedef void gemm_fn(int, int, int, const float *, int, const float *, int, float *, int);
#define DECLARE(variant)                                                                    \
    gemm_fn tile_portable_nn_##variant, tile_portable_nt_##variant, tile_portable_tn_##variant;
DECLARE(O0)
DECLARE(O2)
#ifdef TILE_OPT_AVX2
DECLARE(avx2)
#endif

typedef struct {
    const char *name;
    gemm_fn *form[3]; /* nn, nt, tn */
} variant_t;

static const char *const form_name[] = {"nn", "nt", "tn"};

static uint64_t rng_state = 0x243f6a8885a308d3ull;
static uint64_t rng_next(void) { /* splitmix64 */
    uint64_t z = (rng_state += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

/* Mostly full-mantissa values over a wide exponent range; every 61st value
 * is a signed zero, a subnormal or an infinity. */
static float value(void) {
    uint64_t r = rng_next();
    switch (r % 61) {
    case 0: return -0.0f;
    case 1: return 0x1p-140f * (float)(int)(r >> 40 & 0xff);
    case 2: return (r >> 8) % 50 == 0 ? INFINITY : 1.0f;
    default: break;
    }
    float x = (float)((int32_t)(uint32_t)r >> 7) * 0x1p-24f;
    return ldexpf(x, (int)((r >> 32) % 41) - 20);
}

/* Bitwise equality, except that NaN sign and payload are not pinned
 * (IEEE 754 leaves open which NaN operand propagates). */
static int same_bits(const float *x, const float *y, size_t n) {
    for (size_t i = 0; i < n; i++)
        if (!(isnan(x[i]) && isnan(y[i])) && memcmp(&x[i], &y[i], sizeof(float)) != 0) return 0;
    return 1;
}

static variant_t variants[4];
static int n_variants;

static void test_all_builds_agree(void) {
    static const int shp[][3] = {{64, 64, 64}, {128, 128, 128}, {24, 40, 56}, {7, 13, 5},
                                 {1, 1, 1},    {4, 8, 1},       {3, 9, 1100}, {17, 31, 513},
                                 {16, 16, 2}};
    for (size_t s = 0; s < sizeof shp / sizeof shp[0]; s++)
        for (int f = 0; f < 3; f++) {
            const int M = shp[s][0], N = shp[s][1], K = shp[s][2];
            const int ar = f == 2 ? K : M, ac = f == 2 ? M : K;
            const int br = f == 1 ? N : K, bc = f == 1 ? K : N;
            const int lda = ac + 1, ldb = bc + 2, ldc = N + 3;
            float *A = malloc((size_t)ar * lda * sizeof(float));
            float *B = malloc((size_t)br * ldb * sizeof(float));
            float *C[4];
            for (int v = 0; v < n_variants; v++) C[v] = malloc((size_t)M * ldc * sizeof(float));
            for (size_t i = 0; i < (size_t)ar * lda; i++) A[i] = value();
            for (size_t i = 0; i < (size_t)br * ldb; i++) B[i] = value();
            for (int v = 0; v < n_variants; v++) {
                memset(C[v], 0xff, (size_t)M * ldc * sizeof(float));
                variants[v].form[f](M, N, K, A, lda, B, ldb, C[v], ldc);
            }
            for (int v = 1; v < n_variants; v++)
                CHECK(same_bits(C[0], C[v], (size_t)M * ldc), "%s %dx%dx%d: %s and %s differ",
                      form_name[f], M, N, K, variants[0].name, variants[v].name);
            free(A);
            free(B);
            for (int v = 0; v < n_variants; v++) free(C[v]);
        }
}

int main(void) {
    variants[n_variants++] = (variant_t){"-O0", {tile_portable_nn_O0, tile_portable_nt_O0,
                                                 tile_portable_tn_O0}};
    variants[n_variants++] = (variant_t){"-O2", {tile_portable_nn_O2, tile_portable_nt_O2,
                                                 tile_portable_tn_O2}};
    variants[n_variants++] = (variant_t){"library", {tile_portable_nn, tile_portable_nt,
                                                     tile_portable_tn}};
#ifdef TILE_OPT_AVX2
    if (__builtin_cpu_supports("avx2"))
        variants[n_variants++] = (variant_t){"-O3 -mavx2 -mfma", {tile_portable_nn_avx2,
                                             tile_portable_nt_avx2, tile_portable_tn_avx2}};
    else
        printf("  (no AVX2 on this CPU: the -mavx2 build is not run)\n");
#endif
    RUN(test_all_builds_agree);
    return harness_done();
}
