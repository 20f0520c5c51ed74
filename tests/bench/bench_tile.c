/* bench_tile.c - GFLOP/s of one tile call, both backends, square tiles.
 *
 *   make tile-bench          (builds $(BUILD)/tile/bench_tile and runs it)
 *
 * One thread, warm caches: the figure a device thread sees for one
 * canonical tile. Each (size, form, backend) reports the best of three 0.1 s runs.
 */
#include "parity/tile.h"

#include <stdio.h>
#include <stdlib.h>
#include <time.h>

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + 1e-9 * ts.tv_nsec;
}

typedef void gemm_fn(int, int, int, const float *, int, const float *, int, float *, int);

int main(void) {
    perr_t err;
    if (tile_init(&err) != 0) {
        fprintf(stderr, "bench_tile: %s\n", err.msg);
        return 1;
    }
    static const int sizes[] = {16, 32, 64, 128};
    static const char *const forms[] = {"nn", "nt", "tn"};
    static gemm_fn *const gemm[] = {tile_gemm_nn, tile_gemm_nt, tile_gemm_tn};
    float *A = malloc(128 * 128 * sizeof(float)), *B = malloc(128 * 128 * sizeof(float));
    float *C = malloc(128 * 128 * sizeof(float));
    if (!A || !B || !C) return 1;
    for (int i = 0; i < 128 * 128; i++) {
        A[i] = (float)((i * 37) % 101 - 50) / 64.0f;
        B[i] = (float)((i * 53) % 97 - 48) / 64.0f;
    }
    printf("%-6s %-4s %12s %12s %8s\n", "tile", "form", "openblas", "portable", "ratio");
    for (size_t s = 0; s < sizeof sizes / sizeof sizes[0]; s++) {
        const int n = sizes[s];
        for (int f = 0; f < 3; f++) {
            double gflops[2];
            for (int be = 0; be < 2; be++) {
                tile_set_backend((tile_backend_t)be);
                gflops[be] = 0.0;
                for (int trial = 0; trial < 3; trial++) { /* best of 3: the machine is shared */
                    long reps = 0;
                    double t0 = now(), t;
                    do {
                        for (int r = 0; r < 64; r++) gemm[f](n, n, n, A, n, B, n, C, n);
                        reps += 64;
                        t = now() - t0;
                    } while (t < 0.1);
                    const double g = 2.0 * n * n * n * reps / t * 1e-9;
                    if (g > gflops[be]) gflops[be] = g;
                }
            }
            printf("%-6d %-4s %9.2f GF %9.2f GF %7.2fx\n", n, forms[f], gflops[0], gflops[1],
                   gflops[0] / gflops[1]);
        }
    }
    free(A);
    free(B);
    free(C);
    return 0;
}
