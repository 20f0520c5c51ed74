/* bench_xacc.c - the price of exact sums, per term, against a plain add.
 *
 * Terms are fp32 values of mixed sign over eight binades, like gradient
 * partials, so the fast paths' exactness checks hold. Rows: plain fp32 sum (the baseline), xsum_f32 on its
 * fast path (TwoSum-checked fp64 lanes), xsum_f32 forced onto the fallback
 * (superaccumulator), xvec_add (TwoSum-checked fp64 per element, the
 * gradient accumulator), and xacc_add_f32 directly. */
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "parity/xacc.h"

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static volatile float sink;

int main(void) {
    enum { N = 1 << 14, REPS = 400 }; /* 64 KiB of terms: stays in cache */
    float *x = malloc(N * sizeof *x);
    if (!x) return 1;
    uint64_t s = 88172645463325252ULL;
    for (int i = 0; i < N; i++) {
        s ^= s << 13, s ^= s >> 7, s ^= s << 17;
        /* sign * [1, 2) * 2^(0..7): eight binades, every fp64 addition exact */
        float m = 1.0f + (float)((s >> 40) & 0xffffff) * 0x1p-24f;
        x[i] = ((s >> 3) & 1 ? -m : m) * (float)(1 << (s % 8));
    }
    double t, plain, fast, slow, vec, acc1;

    t = now();
    for (int r = 0; r < REPS; r++) {
        float a = 0.0f;
        for (int i = 0; i < N; i++) a += x[i];
        sink = a;
    }
    plain = (now() - t) / ((double)REPS * N);

    t = now();
    for (int r = 0; r < REPS; r++) sink = xsum_f32(x, N);
    fast = (now() - t) / ((double)REPS * N);

    xacc_set_fast_path(0);
    t = now();
    for (int r = 0; r < REPS / 4; r++) sink = xsum_f32(x, N);
    slow = (now() - t) / ((double)(REPS / 4) * N);
    xacc_set_fast_path(1);

    xvec_t v;
    if (xvec_init(&v, N)) return 1;
    t = now();
    for (int r = 0; r < REPS; r++) xvec_add(&v, 0, x, N);
    vec = (now() - t) / ((double)REPS * N);
    float *out = malloc(N * sizeof *out);
    xvec_round(&v, out);
    sink = out[0];
    xvec_free(&v);
    free(out);

    xacc_t acc;
    xacc_init(&acc);
    t = now();
    for (int r = 0; r < REPS / 4; r++)
        for (int i = 0; i < N; i++) xacc_add_f32(&acc, x[i]);
    acc1 = (now() - t) / ((double)(REPS / 4) * N);
    sink = xacc_round_f32(&acc);

    printf("%-34s %10s %12s\n", "exact sum, per term", "ns/term", "x plain add");
    printf("%-34s %10.3f %12.1f\n", "plain fp32 add (not exact)", plain * 1e9, 1.0);
    printf("%-34s %10.3f %12.1f\n", "xsum_f32, fast path (TwoSum fp64)", fast * 1e9, fast / plain);
    printf("%-34s %10.3f %12.1f\n", "xsum_f32, fallback (banded bins)", slow * 1e9, slow / plain);
    printf("%-34s %10.3f %12.1f\n", "xvec_add (TwoSum-checked fp64)", vec * 1e9, vec / plain);
    printf("%-34s %10.3f %12.1f\n", "xacc_add_f32 (superacc, one term)", acc1 * 1e9, acc1 / plain);
    printf("CSV,xacc,plain,%.4f\nCSV,xacc,fast,%.4f\nCSV,xacc,fallback,%.4f\n", plain * 1e9,
           fast * 1e9, slow * 1e9);
    printf("CSV,xacc,xvec,%.4f\nCSV,xacc,xacc_add,%.4f\n", vec * 1e9, acc1 * 1e9);
    free(x);
    return 0;
}
