/* mpi_host.c - the engine's host memory merged between processes
 * (coll_host_merge, coll_host_gather in coll.h): one call per process,
 * from its device thread, on a communicator of its own. */
#ifdef PARITY_HAVE_MPI
#include "mpi_internal.h"

#include <limits.h>
#include <stdlib.h>

static const int no_peer = -1;

void net_host_merge(void *buf, size_t bytes, coll_merge_t how) {
    MPI_Datatype t = how == COLL_MERGE_OR ? MPI_BYTE : how == COLL_MERGE_MAX_I32 ? MPI_INT32_T : MPI_DOUBLE;
    MPI_Op op = how == COLL_MERGE_OR ? MPI_BOR : MPI_MAX;
    const size_t es = how == COLL_MERGE_OR ? 1 : how == COLL_MERGE_MAX_I32 ? 4 : 8;
    const size_t per = (size_t)1 << 28; /* elements a call: within an int */
    net_wait_t w = {NULL, "host merge", 0, &no_peer};
    for (size_t at = 0; at < bytes / es; at += per) {
        size_t k = bytes / es - at < per ? bytes / es - at : per;
        MPI_Request r;
        MPI_Iallreduce(MPI_IN_PLACE, (char *)buf + at * es, (int)k, t, op, net_host_comm, &r);
        net_wait_all(1, &r, &w);
    }
}

void net_host_gather(const void *mine, size_t len, coll_host_take_fn take, void *ctx) {
    net_wait_t w = {NULL, "host gather", 0, &no_peer};
    const int P = runtime_processes(), me = runtime_process_rank();
    uint64_t n = len;
    MPI_Request r;
    if (me != 0) {
        MPI_Isend(&n, 1, MPI_UINT64_T, 0, 0, net_host_comm, &r);
        net_wait_all(1, &r, &w);
        if (len) {
            MPI_Isend(mine, net_count(len, "host gather"), MPI_BYTE, 0, 1, net_host_comm, &r);
            net_wait_all(1, &r, &w);
        }
        return;
    }
    for (int p = 1; p < P; p++) {
        MPI_Irecv(&n, 1, MPI_UINT64_T, p, 0, net_host_comm, &r);
        net_wait_all(1, &r, &w);
        unsigned char *buf = malloc((size_t)n + 1);
        if (!buf) parity_fatal("collectives: out of host memory gathering %llu bytes",
                               (unsigned long long)n);
        if (n) {
            MPI_Irecv(buf, net_count((size_t)n, "host gather"), MPI_BYTE, p, 1, net_host_comm, &r);
            net_wait_all(1, &r, &w);
        }
        take(ctx, p, buf, (size_t)n);
        free(buf);
    }
}
#endif
