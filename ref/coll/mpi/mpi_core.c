/* mpi_core.c - the MPI transport's start and end, its waits and the
 * groups' agreement at the start of each run (coll.h, net.h).
 *
 * Waiting polls: every wait tests its own requests and moves pending
 * point-to-point receives (so a process blocked in one transfer still
 * answers the others: no wait can depend on the receiver posting), then
 * yields the CPU, since make check runs more processes than cores.
 */
#ifdef PARITY_HAVE_MPI
#include "mpi_internal.h"

#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

MPI_Comm net_coll_comm = MPI_COMM_NULL, net_p2p_comm = MPI_COMM_NULL, net_host_comm = MPI_COMM_NULL;
static int up, finalized;

int coll_mpi_built(void) { return 1; }
int coll_mpi_launched(void) { return up; }

int net_active(void) { return up && runtime_run_distributed(); }

static int64_t now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

void net_backoff(unsigned spins) {
    if (spins < 32) return;
    if (spins < 2048) {
        sched_yield();
        return;
    }
    struct timespec ts = {0, 20000}; /* a long wait: 20 us naps */
    nanosleep(&ts, NULL);
}

int net_count(size_t bytes, const char *what) {
    if (bytes > (size_t)1 << 30)
        coll_die("%s: a message of %zu bytes across processes (the MPI transport sends at most "
                 "1 GiB at once; use smaller buckets)", what, bytes);
    return (int)bytes;
}

/* open[i]: whether request i (with peer w->peers[i]) is still open. */
static _Noreturn void hang(int n, const int *open, const net_wait_t *w, int64_t waited) {
    device_t *d = device_self();
    fprintf(stderr, "parity: collective watchdog: device %d (MPI process %d) waited %.1f s (timeout "
                    "%.1f s, PARITY_COLL_TIMEOUT) in %s",
            d ? d->rank : -1, runtime_process_rank(), (double)waited / 1e9,
            (double)coll_timeout_ns() / 1e9, w->what);
    if (w->seq) fprintf(stderr, " call #%llu", (unsigned long long)w->seq);
    fprintf(stderr, " of group '%s'\n", w->g ? group_name(w->g) : "(every process)");
    for (int i = 0; w->g && i < n; i++)
        if (open[i] && w->peers && w->peers[i] >= 0)
            fprintf(stderr, "parity: %s of group '%s' is still waiting on rank %d (world %d, MPI "
                            "process %d)\n", w->what, group_name(w->g), w->peers[i],
                    group_world_rank(w->g, w->peers[i]), group_world_rank(w->g, w->peers[i]));
    coll_die("collective hang across processes (see the report above)");
}

void net_wait_all(int n, MPI_Request *reqs, const net_wait_t *w) {
    const int64_t t0 = now_ns(), limit = coll_timeout_ns();
    for (unsigned spins = 0;; spins++) {
        int open = 0;
        for (int i = 0; i < n; i++) {
            if (reqs[i] == MPI_REQUEST_NULL) continue;
            int flag = 0;
            MPI_Test(&reqs[i], &flag, MPI_STATUS_IGNORE);
            open += !flag;
        }
        if (!open) return;
        net_progress();
        if ((spins & 63) == 63 && limit > 0 && now_ns() - t0 > limit) {
            int *still = malloc((size_t)n * sizeof *still);
            for (int i = 0; still && i < n; i++) still[i] = reqs[i] != MPI_REQUEST_NULL;
            hang(still ? n : 0, still, w, now_ns() - t0);
        }
        net_backoff(spins);
    }
}

void net_wait_state(_Atomic int *state, int want, const net_wait_t *w) {
    const int64_t t0 = now_ns(), limit = coll_timeout_ns();
    for (unsigned spins = 0; atomic_load(state) != want; spins++) {
        net_progress();
        if (atomic_load(state) == want) return;
        if ((spins & 63) == 63 && limit > 0 && now_ns() - t0 > limit) {
            const int one = 1;
            hang(1, &one, w, now_ns() - t0);
        }
        net_backoff(spins);
    }
}

void net_probe(int src, int tag, MPI_Comm comm, MPI_Message *m, MPI_Status *st, const net_wait_t *w) {
    const int64_t t0 = now_ns(), limit = coll_timeout_ns();
    for (unsigned spins = 0;; spins++) {
        int flag = 0;
        MPI_Improbe(src, tag, comm, &flag, m, st);
        if (flag) return;
        net_progress();
        if ((spins & 63) == 63 && limit > 0 && now_ns() - t0 > limit) {
            const int one = 1;
            hang(1, &one, w, now_ns() - t0);
        }
        net_backoff(spins);
    }
}

/* An exit that is not coll_mpi_finalize's (a fatal error, the watchdog,
 * an early return) stops the other processes too: they would otherwise
 * wait for this one until their own watchdogs fire. */
static void on_exit_hook(int status, void *arg) {
    (void)arg;
    if (!up || finalized) return;
    if (status == 0) {
        finalized = 1;
        MPI_Finalize();
        return;
    }
    fflush(stdout);
    fflush(stderr);
    MPI_Abort(MPI_COMM_WORLD, status);
}

/* Before a run across processes starts its device: every process must
 * have built the same groups, numbered alike (the tags). */
static int run_begin(int world, perr_t *e) {
    (void)world;
    int n;
    uint64_t mine[2] = {group_registry_number(&n), 0};
    if (n < 0) return perr_set(e, "devices_run: out of host memory numbering the groups");
    mine[1] = (uint64_t)n;
    const int P = runtime_processes();
    uint64_t *all = malloc((size_t)P * sizeof mine);
    if (!all) return perr_set(e, "devices_run: out of host memory");
    MPI_Allgather(mine, 2, MPI_UINT64_T, all, 2, MPI_UINT64_T, net_host_comm);
    int rc = 0;
    for (int p = 1; p < P && !rc; p++)
        if (all[2 * p] != all[0] || all[2 * p + 1] != all[1])
            rc = perr_set(e, "devices_run: MPI process %d built other groups than process 0 (%llu "
                             "against %llu): every process must set up the same layout",
                          p, (unsigned long long)all[2 * p + 1], (unsigned long long)all[1]);
    free(all);
    if (!rc && n > NET_MAX_GROUPS)
        rc = perr_set(e, "devices_run: %d groups, more than the MPI transport's %d", n, NET_MAX_GROUPS);
    return rc;
}

static void run_end(void) {}

int coll_mpi_init(int *argc, char ***argv, perr_t *e) {
    if (up || (!getenv("OMPI_COMM_WORLD_SIZE") && !getenv("PMIX_RANK"))) return 0;
    int provided = 0;
    if (MPI_Init_thread(argc, argv, MPI_THREAD_MULTIPLE, &provided) != MPI_SUCCESS)
        return perr_set(e, "MPI_Init_thread failed");
    if (provided < MPI_THREAD_MULTIPLE) {
        MPI_Finalize();
        return perr_set(e, "the MPI library gives thread level %d, the transport needs "
                           "MPI_THREAD_MULTIPLE (a device and its communication thread both send)",
                        provided);
    }
    int size, rank;
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    if (size > PARITY_MAX_DEVICES) {
        MPI_Finalize();
        return perr_set(e, "mpirun started %d processes, more than the %d devices parity runs",
                        size, PARITY_MAX_DEVICES);
    }
    MPI_Comm_dup(MPI_COMM_WORLD, &net_coll_comm);
    MPI_Comm_dup(MPI_COMM_WORLD, &net_p2p_comm);
    MPI_Comm_dup(MPI_COMM_WORLD, &net_host_comm);
    runtime_set_processes(size, rank);
    runtime_set_run_hooks(run_begin, run_end);
    up = 1;
    on_exit(on_exit_hook, NULL);
    return 0;
}

void coll_mpi_finalize(void) {
    if (!up || finalized) return;
    finalized = 1;
    fflush(stdout);
    MPI_Finalize();
}

void coll_processes_barrier(void) {
    if (up && runtime_processes() > 1) MPI_Barrier(net_host_comm);
}

#else /* built without MPI */

#include "net.h"

#include <stdlib.h>

int coll_mpi_built(void) { return 0; }
int coll_mpi_launched(void) { return 0; }
int net_active(void) { return 0; }

int coll_mpi_init(int *argc, char ***argv, perr_t *e) {
    (void)argc, (void)argv;
    if (getenv("OMPI_COMM_WORLD_SIZE") || getenv("PMIX_RANK"))
        return perr_set(e, "started by mpirun, but this build has no MPI transport (install "
                           "libopenmpi-dev and rebuild: the Makefile uses mpicc when it finds it)");
    return 0;
}

void coll_mpi_finalize(void) {}
void coll_processes_barrier(void) {}

/* Never reached: net_active() is 0. */
void net_run(coll_ctx_t *c, coll_call_t *d) { (void)c, (void)d; }
coll_request_t *net_p2p_post(coll_request_t *req) { return req; }
void net_p2p_wait(coll_request_t *req) { (void)req; }
void net_host_merge(void *buf, size_t bytes, coll_merge_t how) { (void)buf, (void)bytes, (void)how; }
void net_host_gather(const void *mine, size_t len, coll_host_take_fn take, void *ctx) {
    (void)mine, (void)len, (void)take, (void)ctx;
}
#endif
