/* bench_mpi.c - the MPI transport's all-reduce against OpenMPI's own
 * MPI_Allreduce, in the same processes of the same mpirun (run by
 * tests/bench/run.sh; bench_coll gives the shared-memory transport's
 * figures in the same `make bench`).
 *
 * For each size, every process's device times parity's fp32 sum
 * all-reduce (coll_all_reduce: the agreement round, then rank i reduces
 * slice i and sends it to all, in the direct algorithm's order), then
 * the open-sum all-reduce DP uses (8 bytes an element on the wire), then
 * MPI_Allreduce of the same fp32 buffer. nccl-tests conventions: busbw =
 * bytes / time x 2 (n - 1) / n. Prints figures, never judges them.
 * CSV lines: CSV,mpi,kind,ndev,bytes,time_us,busbw_GBps.
 */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "parity/coll.h"
#include "parity/runtime.h"
#include "parity/xacc.h"

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

typedef struct {
    group_t *world;
} job_t;

static void report(int n, const char *kind, size_t bytes, double sec) {
    double bus = (double)bytes / sec / 1e9 * 2.0 * (n - 1) / n;
    printf("%-22s world=%d bytes=%9zu time_us=%9.1f busbw=%6.2fGB/s\n", kind, n, bytes, sec * 1e6, bus);
    printf("CSV,mpi,%s,%d,%zu,%.2f,%.3f\n", kind, n, bytes, sec * 1e6, bus);
}

static void device_main(device_t *dev, void *arg) {
    job_t *j = arg;
    const int n = group_size(j->world), me = dev->rank;
    for (size_t count = 1024; count <= (size_t)1 << 20; count *= 4) {
        const int it = count >= ((size_t)1 << 18) ? 20 : 200;
        float *x = malloc(count * sizeof *x), *y = malloc(count * sizeof *y);
        for (size_t i = 0; i < count; i++) x[i] = (float)(i % 7) * 0.25f;
        xvec_t v;
        xvec_init(&v, count);
        double t[4];
        for (int kind = 0; kind < 4; kind++) {
            for (int rep = -3; rep < it; rep++) { /* 3 warm-up calls */
                if (rep == 0) {
                    coll_barrier(j->world);
                    t[kind] = now();
                }
                if (kind == 0) coll_all_reduce(j->world, x, y, count, COLL_F32, COLL_SUM);
                if (kind == 1) {
                    xvec_zero(&v);
                    xvec_add(&v, 0, x, count);
                    coll_all_reduce_open(j->world, &v, 0, count);
                }
                if (kind == 2) MPI_Allreduce(x, y, (int)count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
                if (kind == 3) { /* the refill alone, taken off the open sums' time */
                    xvec_zero(&v);
                    xvec_add(&v, 0, x, count);
                }
            }
            t[kind] = (now() - t[kind]) / it;
        }
        if (me == 0) {
            report(n, "parity-mpi-f32", count * 4, t[0]);
            report(n, "parity-mpi-open", count * 8, t[1] - t[3]);
            report(n, "openmpi-allreduce", count * 4, t[2]);
            printf("  ratio (MPI_Allreduce time / parity fp32 time) at %zu bytes: %.2f\n", count * 4,
                   t[2] / t[0]);
        }
        xvec_free(&v);
        free(x), free(y);
    }
}

int main(int argc, char **argv) {
    perr_t e;
    if (coll_mpi_init(&argc, &argv, &e) || runtime_processes() < 2) {
        fprintf(stderr, "bench_mpi: run it under mpirun with 2 or more processes%s%s\n",
                e.msg[0] ? ": " : "", e.msg);
        return 2;
    }
    const int n = runtime_processes();
    int ranks[PARITY_MAX_DEVICES];
    for (int i = 0; i < n; i++) ranks[i] = i;
    job_t j = {group_create(ranks, n, "world", &e)};
    if (!j.world || devices_run(n, 0, device_main, &j, &e)) {
        fprintf(stderr, "bench_mpi: %s\n", e.msg);
        return 2;
    }
    group_destroy(j.world);
    coll_mpi_finalize();
    return 0;
}
