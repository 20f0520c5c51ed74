/* bench_init.c - start-up: initialising a GPT-2-124M-shaped model.
 *
 *   build/bench/bench_init [model.json]
 *
 * Without an argument the model is gpt-small reshaped to GPT-2 124M
 * (V 50304, T 1024, C 768, 12 heads, 12 layers, F 3072: 124,475,904
 * parameters, ~500 MB). Rows:
 *   - params_init on a fresh buffer (its pages are first touched here),
 *     and again on the same, now resident, buffer, with one thread and
 *     with two (pool.h, as the golden run's --threads 2);
 *   - first touch alone (memset of a fresh buffer of the same size);
 *   - rng_fill_normal against the per-element scalar reference
 *     (rng_normal, the Box-Muller definition) on a 4M-element sample, and
 *     whether the two gave the same bits (tests/unit/test_rng.c asserts it).
 * Wall time and this process's CPU time (getrusage) are both printed: the
 * machine may be shared. Figures only: timing never fails. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>

#include "model/gpt.h"
#include "parity/pool.h"
#include "parity/rng.h"

typedef struct {
    double wall, cpu;
} stamp_t;

static stamp_t now(void) {
    struct timespec ts;
    struct rusage ru;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    getrusage(RUSAGE_SELF, &ru);
    return (stamp_t){(double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec,
                     (double)(ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) +
                         1e-6 * (double)(ru.ru_utime.tv_usec + ru.ru_stime.tv_usec)};
}

static void row(const char *what, stamp_t a, stamp_t b, double per, const char *unit) {
    printf("  %-44s wall %7.3f s  cpu %7.3f s", what, b.wall - a.wall, b.cpu - a.cpu);
    if (per > 0) printf("  %6.2f %s", (b.cpu - a.cpu) / per * 1e9, unit);
    printf("\n");
}

static int config(int argc, char **argv, model_config_t *c) {
    perr_t err = {0};
    int bad = argc > 1 ? model_config_load(argv[1], c, &err) : model_config_builtin("gpt-small", c, &err);
    if (!bad && argc <= 1) {
        c->vocab = 50304, c->seq_length = 1024, c->hidden = 768, c->heads = 12, c->layers = 12;
        c->ffn = 3072;
        c->tile_tokens = 128, c->tile_features = 64, c->tile_ffn = 384;
        c->global_batch = 1, c->micro_batch = 1;
    }
    if (!bad) bad = model_config_validate(c, &err);
    if (bad) fprintf(stderr, "bench_init: %s\n", err.msg);
    return bad;
}

int main(int argc, char **argv) {
    model_config_t c;
    if (config(argc, argv, &c)) return 1;
    param_table_t t;
    perr_t err = {0};
    if (param_table_build(&t, &c, &err)) {
        fprintf(stderr, "bench_init: %s\n", err.msg);
        return 1;
    }
    const size_t n = t.total;
    printf("init of %s: %zu parameters (%.0f MB)\n", c.name, n, (double)n * 4 / 1e6);

    float *p = malloc(n * sizeof *p), *q = malloc(n * sizeof *q);
    if (!p || !q) {
        fprintf(stderr, "bench_init: out of memory for 2 x %zu floats\n", n);
        return 1;
    }
    stamp_t a = now();
    params_init(&t, c.seed, p);
    stamp_t b = now();
    row("params_init, fresh buffer (first touch in)", a, b, (double)n, "ns/param");
    a = now();
    params_init(&t, c.seed, p);
    b = now();
    row("params_init, resident buffer", a, b, (double)n, "ns/param");
    /* the golden run's --threads 2: the same bits, the wall time halves
     * on two idle cores (cpu is both threads' sum) */
    if (!pool_set_threads(2, &err)) {
        a = now();
        params_init(&t, c.seed, p);
        b = now();
        row("params_init, resident buffer, 2 threads", a, b, 0, "");
        pool_set_threads(1, &err);
    }
    a = now();
    memset(q, 0, n * sizeof *q);
    b = now();
    row("first touch alone (memset of a fresh buffer)", a, b, (double)n, "ns/float");

    /* the vectorised fill against the scalar definition, same counters */
    enum { S = 1 << 22 };
    const uint64_t stream = rng_stream_id("bench_init", 0);
    a = now();
    rng_fill_normal(q, S, c.seed, stream, 12345);
    b = now();
    row("rng_fill_normal, 4M", a, b, (double)S, "ns/number");
    a = now();
    for (size_t i = 0; i < S; i++) q[S + i] = rng_normal(c.seed, stream, 12345 + i);
    b = now();
    row("scalar reference rng_normal, 4M", a, b, (double)S, "ns/number");
    printf("  same bits: %s\n", memcmp(q, q + S, S * sizeof *q) ? "NO" : "yes");

    free(p);
    free(q);
    param_table_free(&t);
    return 0;
}
