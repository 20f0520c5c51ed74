/* mpi_coll.c - every collective and point-to-point form on N devices,
 * run either as N threads of one process or under mpirun as N processes
 * (the MPI transport, coll.h), printing one digest per device of every
 * result it received. tests/cli/test_mpi.sh runs both and requires the same
 * lines: the transport must give the shared-memory run's bits, fp32 sums
 * included (their order is the algorithm's), for both algorithms, and
 * open sums with slow elements (inf, NaN, huge terms) included.
 *
 *   mpi_coll run N        N device threads (without mpirun), or under
 *                         mpirun one device per process (N ignored)
 *   mpi_coll mismatch     rank 1's all-reduce count differs: fatal, naming both
 *   mpi_coll p2p-mismatch rank 1 receives fewer elements than rank 0 sends
 *   mpi_coll hang         rank 1 never joins a barrier: the watchdog names it
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "parity/coll.h"
#include "parity/runtime.h"
#include "parity/xacc.h"

typedef struct {
    group_t *world, *pair; /* every device; devices 0 and 1 */
    const char *mode;
    uint64_t digest[PARITY_MAX_DEVICES];
} job_t;

/* MPI_COLL_TRACE=1: each result's own digest on stderr, in call order, to
 * find the first call whose bits differ between the two runs. */
static int trace_on;

static uint64_t fnv(const void *p, size_t n) {
    const unsigned char *b = p;
    uint64_t h = 0xcbf29ce484222325ULL;
    for (size_t i = 0; i < n; i++) h = (h ^ b[i]) * 0x100000001b3ULL;
    return h;
}

static uint64_t mix(uint64_t h, const void *p, size_t n) {
    const unsigned char *b = p;
    if (trace_on) fprintf(stderr, "T %d %016llx\n", device_self()->rank, (unsigned long long)fnv(p, n));
    for (size_t i = 0; i < n; i++) h = (h ^ b[i]) * 0x100000001b3ULL;
    return h;
}

/* Values whose fp32 sums depend on the order: magnitudes 2^-20 .. 2^20. */
static float value(int dev, int call, size_t i) {
    uint64_t x = (uint64_t)dev * 0x9e3779b97f4a7c15ULL ^ (uint64_t)call * 0xbf58476d1ce4e5b9ULL ^ i;
    x ^= x >> 31, x *= 0x94d049bb133111ebULL, x ^= x >> 29;
    float m = (float)(x & 0xffff) / 65536.0f - 0.5f;
    return ldexpf(m, (int)((x >> 16) % 41) - 20);
}

static void fill(void *buf, size_t n, coll_dtype_t dt, int dev, int call) {
    for (size_t i = 0; i < n; i++) {
        float v = value(dev, call, i);
        switch (dt) {
        case COLL_F32: ((float *)buf)[i] = v; break;
        case COLL_I32: ((int32_t *)buf)[i] = (int32_t)(v * 1e6f); break;
        case COLL_I64: ((int64_t *)buf)[i] = (int64_t)(v * 1e9f); break;
        default: xacc_init(&((xacc_t *)buf)[i]), xacc_add_f32(&((xacc_t *)buf)[i], v); break;
        }
    }
}

static void run_all(device_t *dev, job_t *j) {
    const int n = group_size(j->world), me = dev->rank;
    const coll_dtype_t types[] = {COLL_F32, COLL_I32, COLL_I64, COLL_XACC};
    const size_t K = 37; /* elements per rank: uneven slices */
    uint64_t h = 0xcbf29ce484222325ULL;
    int call = 0;
    for (int algo = 0; algo < COLL_NALGOS; algo++) {
        coll_set_algo((coll_algo_t)algo);
        for (size_t t = 0; t < sizeof types / sizeof types[0]; t++) {
            const coll_dtype_t dt = types[t];
            const size_t es = coll_dtype_size(dt), N = K * (size_t)n;
            char *send = malloc(N * es), *recv = malloc(N * es);
            size_t *sc = malloc(4 * (size_t)n * sizeof *sc), *sd = sc + n, *rc = sd + n, *rd = rc + n;
            for (int op = 0; op < COLL_NOPS; op++) {
                if (dt == COLL_XACC && op != COLL_SUM) continue;
                fill(send, N, dt, me, ++call);
                coll_all_reduce(j->world, send, recv, N, dt, (coll_op_t)op);
                h = mix(h, recv, N * es);
                fill(send, N, dt, me, ++call);
                coll_reduce_scatter(j->world, send, recv, K, dt, (coll_op_t)op);
                h = mix(h, recv, K * es);
                fill(send, N, dt, me, ++call);
                coll_reduce(j->world, send, recv, N, dt, (coll_op_t)op, n > 1 ? 1 : 0);
                if (me == (n > 1 ? 1 : 0)) h = mix(h, recv, N * es);
            }
            fill(send, N, dt, me, ++call);
            coll_all_reduce(j->world, send, send, N, dt, COLL_SUM); /* in place */
            h = mix(h, send, N * es);
            fill(recv, N, dt, me, ++call);
            coll_broadcast(j->world, recv, N, dt, n - 1);
            h = mix(h, recv, N * es);
            fill(send, K, dt, me, ++call);
            coll_all_gather(j->world, send, recv, K, dt);
            h = mix(h, recv, N * es);
            fill(send, N, dt, me, ++call);
            coll_all_to_all(j->world, send, recv, K, dt);
            h = mix(h, recv, N * es);
            for (int q = 0; q < n; q++) { /* rank i sends (i + q) % 5 + 1 elements to q */
                sc[q] = (size_t)(me + q) % 5 + 1, sd[q] = (size_t)q * 6;
                rc[q] = (size_t)(q + me) % 5 + 1, rd[q] = (size_t)q * 6;
            }
            fill(send, N, dt, me, ++call);
            memset(recv, 0, N * es);
            coll_all_to_all_v(j->world, send, sc, sd, recv, rc, rd, dt);
            h = mix(h, recv, N * es);
            free(send), free(recv), free(sc);
        }
        /* open sums with slow elements: huge terms and an inf somewhere */
        xvec_t v, r;
        const size_t N = K * (size_t)n;
        xvec_init(&v, N), xvec_init(&r, K);
        float *x = malloc(N * sizeof *x), *out = malloc(N * sizeof *out);
        fill(x, N, COLL_F32, me, ++call);
        x[3] = 3e38f, x[5] = me == 0 ? INFINITY : 1.0f, x[N - 1] = -3e38f;
        xvec_zero(&v);
        xvec_add(&v, 0, x, N);
        xvec_add(&v, 0, x, N); /* 6e38: slow */
        coll_all_reduce_open(j->world, &v, 0, N);
        xvec_round(&v, out);
        h = mix(h, out, N * sizeof *out);
        xvec_zero(&v);
        xvec_add(&v, 0, x, N);
        xvec_add(&v, 0, x, N);
        coll_reduce_scatter_open(j->world, &v, 0, &r, 0, K);
        float o2[64];
        xvec_round(&r, o2);
        h = mix(h, o2, K * sizeof *o2);
        /* point to point round the ring: fp32 and open sums */
        if (n > 1) {
            float a[16], b[16];
            fill(a, 16, COLL_F32, me, ++call);
            coll_request_t *req[2] = {coll_isend(j->world, a, 16, COLL_F32, (me + 1) % n, 7),
                                      coll_irecv(j->world, b, 16, COLL_F32, (me + n - 1) % n, 7)};
            coll_wait_all(2, req);
            h = mix(h, b, sizeof b);
            xvec_zero(&r);
            coll_request_t *q2[2] = {coll_isend_open(j->world, &v, 0, K, (me + 1) % n, 9),
                                     coll_irecv_open(j->world, &r, 0, K, (me + n - 1) % n, 9)};
            coll_wait_all(2, q2);
            xvec_round(&r, o2);
            h = mix(h, o2, K * sizeof *o2);
        }
        free(x), free(out);
        xvec_free(&v), xvec_free(&r);
    }
    coll_barrier(j->world);
    j->digest[me] = h;
    printf("device %d of %d: %016llx\n", me, n, (unsigned long long)h);
    fflush(stdout);
}

static void device_main(device_t *dev, void *arg) {
    job_t *j = arg;
    const int me = dev->rank;
    if (!strcmp(j->mode, "run")) {
        run_all(dev, j);
    } else if (!strcmp(j->mode, "mismatch")) {
        float x[8] = {0}, y[8];
        coll_all_reduce(j->world, x, y, me == 1 ? 4 : 8, COLL_F32, COLL_SUM);
    } else if (!strcmp(j->mode, "p2p-mismatch")) {
        float x[8] = {0};
        if (me == 0) coll_send(j->pair, x, 8, COLL_F32, 1, 3);
        if (me == 1) coll_recv(j->pair, x, 4, COLL_F32, 0, 3);
    } else if (!strcmp(j->mode, "hang")) {
        /* rank 1 never comes: it is busy elsewhere until the others' watchdog stops the job */
        if (me != 1) coll_barrier(j->world);
        else sleep(60);
    }
}

int main(int argc, char **argv) {
    perr_t e;
    trace_on = getenv("MPI_COLL_TRACE") != NULL;
    if (coll_mpi_init(&argc, &argv, &e)) {
        fprintf(stderr, "mpi_coll: %s\n", e.msg);
        return 2;
    }
    if (argc < 2) {
        fprintf(stderr, "usage: mpi_coll run|mismatch|p2p-mismatch|hang [N]\n");
        return 2;
    }
    int n = runtime_processes() > 1 ? runtime_processes() : argc > 2 ? atoi(argv[2]) : 2;
    if (n < 2 && strcmp(argv[1], "run")) n = 2;
    job_t *j = calloc(1, sizeof *j);
    int ranks[PARITY_MAX_DEVICES];
    for (int i = 0; i < n; i++) ranks[i] = i;
    j->mode = argv[1];
    j->world = group_create(ranks, n, "world", &e);
    j->pair = group_create(ranks, 2 < n ? 2 : n, "pair", &e);
    if (!j->world || !j->pair || devices_run(n, 0, device_main, j, &e)) {
        fprintf(stderr, "mpi_coll: %s\n", e.msg);
        return 2;
    }
    group_destroy(j->world);
    group_destroy(j->pair);
    free(j);
    coll_mpi_finalize();
    return 0;
}
