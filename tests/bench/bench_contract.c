/* bench_contract.c - gpt-124m's matrix products as parity computes them
 * (tiles, exact sums over K tiles) against one whole-matrix OpenBLAS
 * sgemm each (PyTorch's way), one thread, in the same process.
 *
 *   make bench    (runs build/bench/bench_contract via tests/bench/run.sh)
 *
 * The ten shapes are the forward, input-gradient and weight-gradient
 * products of one gpt-124m layer and of its LM head (the vocabulary cut to
 * 8192 columns to keep the run short), with gpt-124m's canonical tiles.
 * Three rounds alternate the three ways (contract on the OpenBLAS
 * backend, contract on the portable backend, whole sgemm) so that a
 * machine whose speed drifts affects them alike; figures are total GFLOP/s
 * over the shapes and the ratios to sgemm. Reports, never asserts.
 */
#include "parity/contract.h"
#include "parity/tile.h"

#include <cblas.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

static double cpu_seconds(void) {
    struct timespec t;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
    return t.tv_sec + 1e-9 * t.tv_nsec;
}

/* M, N, K, tile M, tile N, tile K, form (contract_form_t) */
static const int shapes[][7] = {
    {1024, 2304, 768, 128, 64, 64, CONTRACT_NN},  /* QKV forward */
    {1024, 3072, 768, 128, 384, 64, CONTRACT_NN}, /* FFN up forward */
    {1024, 768, 3072, 128, 64, 384, CONTRACT_NN}, /* FFN down forward */
    {1024, 8192, 768, 128, 64, 64, CONTRACT_NT},  /* LM head forward (tied) */
    {1024, 768, 2304, 128, 64, 64, CONTRACT_NT},  /* QKV input gradient */
    {1024, 768, 3072, 128, 64, 384, CONTRACT_NT}, /* FFN up input gradient */
    {1024, 768, 8192, 128, 64, 64, CONTRACT_NN},  /* LM head input gradient */
    {768, 2304, 1024, 64, 64, 128, CONTRACT_TN},  /* QKV weight gradient */
    {3072, 768, 1024, 384, 64, 128, CONTRACT_TN}, /* FFN down weight gradient */
    {8192, 768, 1024, 64, 64, 128, CONTRACT_TN},  /* LM head weight gradient */
};
enum { NSHAPES = sizeof shapes / sizeof shapes[0], WAYS = 3, ROUNDS = 3 };
static const char *const way_name[WAYS] = {"contract, OpenBLAS backend",
                                           "contract, portable backend", "whole sgemm (PyTorch's way)"};

int main(void) {
    perr_t err;
    if (tile_init(&err) != 0) {
        fprintf(stderr, "bench_contract: %s\n", err.msg);
        return 1;
    }
    size_t most = 0;
    double gflop = 0;
    for (int s = 0; s < NSHAPES; s++) {
        const size_t m = shapes[s][0], n = shapes[s][1], k = shapes[s][2];
        most = m * k > most ? m * k : most;
        most = n * k > most ? n * k : most;
        most = m * n > most ? m * n : most;
        gflop += 2.0 * m * n * k * 1e-9;
    }
    float *A = malloc(most * sizeof(float)), *B = malloc(most * sizeof(float));
    float *C = malloc(most * sizeof(float));
    if (!A || !B || !C) return 1;
    srand(7);
    for (size_t i = 0; i < most; i++) {
        A[i] = (float)rand() / RAND_MAX - 0.5f;
        B[i] = (float)rand() / RAND_MAX - 0.5f;
    }
    contract_ws_t ws;
    contract_ws_init(&ws);
    double seconds[WAYS] = {0};
    for (int round = 0; round < ROUNDS; round++)
        for (int way = 0; way < WAYS; way++) {
            if (way < 2) tile_set_backend(way ? TILE_BACKEND_PORTABLE : TILE_BACKEND_OPENBLAS);
            const double t0 = cpu_seconds();
            for (int s = 0; s < NSHAPES; s++) {
                const int M = shapes[s][0], N = shapes[s][1], K = shapes[s][2];
                const contract_form_t f = (contract_form_t)shapes[s][6];
                const int lda = f == CONTRACT_TN ? M : K, ldb = f == CONTRACT_NT ? K : N;
                if (way == 2)
                    cblas_sgemm(CblasRowMajor, f == CONTRACT_TN ? CblasTrans : CblasNoTrans,
                                f == CONTRACT_NT ? CblasTrans : CblasNoTrans, M, N, K, 1.0f, A,
                                lda, B, ldb, 0.0f, C, N);
                else
                    contract(f, M, N, K, shapes[s][3], shapes[s][4], shapes[s][5], A, lda, B,
                             ldb, C, N, &ws);
            }
            seconds[way] += cpu_seconds() - t0;
        }
    printf("gpt-124m's products (%d shapes, %.1f GFLOP a round, %d alternating rounds, one "
           "thread; portable AVX2 kernel: %s)\n", NSHAPES, gflop, ROUNDS,
           tile_vec_available() ? "yes" : "no");
    for (int way = 0; way < WAYS; way++)
        printf("  %-30s %7.1f GFLOP/s  %.2fx whole sgemm's speed\n", way_name[way],
               gflop * ROUNDS / seconds[way], seconds[2] / seconds[way]);
    printf("CSV,contract,%.3f,%.3f,%.3f\n", seconds[0], seconds[1], seconds[2]);
    contract_ws_free(&ws);
    tile_set_backend(TILE_BACKEND_OPENBLAS);
    free(A), free(B), free(C);
    return 0;
}
