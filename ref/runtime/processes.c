/* processes.c - which devices this process runs (runtime.h).
 *
 * The runtime knows nothing about MPI: the transport that spreads
 * devices over processes (ref/coll/mpi/) tells it how many processes
 * there are and which one this is, and hooks itself around each run
 * that spans them (to agree on the groups before any device starts).
 */
#include "parity/runtime.h"
#include "runtime_internal.h"

#include <stdatomic.h>

static int nprocs = 1, prank;
static _Atomic int distributed; /* the current run spans processes */
static runtime_run_begin_fn hook_begin;
static runtime_run_end_fn hook_end;

void runtime_set_processes(int n, int rank) {
    nprocs = n > 0 ? n : 1;
    prank = rank >= 0 && rank < nprocs ? rank : 0;
}

int runtime_processes(void) { return nprocs; }
int runtime_process_rank(void) { return prank; }
int runtime_run_distributed(void) { return atomic_load(&distributed); }

int runtime_hosts_device(int world, int rank) {
    return nprocs == 1 || world == 1 ? 1 : rank == prank;
}

void runtime_set_run_hooks(runtime_run_begin_fn begin, runtime_run_end_fn end) {
    hook_begin = begin;
    hook_end = end;
}

int runtime_run_begin(int world, perr_t *e) {
    if (nprocs == 1 || world == 1) return 0;
    if (world != nprocs)
        return perr_set(e, "devices_run: the layout has %d devices but mpirun started %d processes: "
                           "the MPI transport runs one device per process (mpirun -np %d)",
                        world, nprocs, world);
    if (hook_begin && hook_begin(world, e)) return -1;
    atomic_store(&distributed, 1);
    return 0;
}

void runtime_run_end(void) {
    if (!atomic_load(&distributed)) return;
    if (hook_end) hook_end();
    atomic_store(&distributed, 0);
}
