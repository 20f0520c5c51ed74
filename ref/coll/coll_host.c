/* coll_host.c - merging the engine's host memory between processes
 * (coll.h). With one process the memory is shared and a barrier is all
 * it takes; across processes the MPI transport moves it. */
#include "coll_impl.h"
#include "mpi/net.h"

static void check_world(group_t *g, const char *what) {
    if (!g) coll_die("%s: the group is NULL", what);
    if (net_active() && group_size(g) != runtime_processes())
        coll_die("%s on group '%s': across processes it needs every device of the run (%d), the "
                 "group has %d", what, group_name(g), runtime_processes(), group_size(g));
}

void coll_host_merge(group_t *g, void *buf, size_t bytes, coll_merge_t how) {
    check_world(g, "coll_host_merge");
    coll_barrier(g); /* every process's writes are in */
    if (net_active()) net_host_merge(buf, bytes, how);
}

void coll_host_gather(group_t *g, const void *mine, size_t len, coll_host_take_fn take, void *ctx) {
    check_world(g, "coll_host_gather");
    coll_barrier(g);
    if (net_active()) net_host_gather(mine, len, take, ctx);
}

const char *coll_transport_name(void) { return net_active() ? "mpi" : "shm"; }
