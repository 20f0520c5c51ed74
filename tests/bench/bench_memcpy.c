/* bench_memcpy.c - the physical limit: single-thread memcpy bandwidth.
 *
 * Prints `CSV,memcpy,bytes,GBps` lines (bytes copied per second, the
 * convention of the anchors in ../shared/anchors) for 4 KiB .. 64 MiB. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

int main(void) {
    size_t max = (size_t)64 << 20;
    char *a = malloc(max), *b = malloc(max);
    if (!a || !b) return 1;
    memset(a, 1, max);
    memset(b, 2, max);
    printf("%12s %12s\n", "bytes", "GB/s");
    for (size_t n = 4096; n <= max; n *= 4) {
        int iters = (int)((size_t)2 << 30) / (int)(n > 65536 ? n : 65536);
        if (iters < 4) iters = 4;
        memcpy(b, a, n);
        double best = 1e30;
        for (int rep = 0; rep < 3; rep++) {
            double t = now();
            for (int i = 0; i < iters; i++) {
                memcpy(b, a, n);
                __asm__ volatile("" ::: "memory"); /* keep every copy */
            }
            double dt = (now() - t) / iters;
            if (dt < best) best = dt;
        }
        printf("%12zu %12.2f\n", n, (double)n / best / 1e9);
        printf("CSV,memcpy,%zu,%.3f\n", n, (double)n / best / 1e9);
    }
    free(a);
    free(b);
    return 0;
}
