/* runtime_internal.h - what the runtime shares with the layers above it
 * inside ref/ (not part of the public API).
 *
 * The collectives layer keeps its per-group state (member slots, p2p
 * channels) behind group->coll, created on first use and released by
 * group_destroy through group->coll_free. The group knows nothing about
 * what is inside: the runtime stays below the collectives. coll_mu lets
 * exactly one member build that state while the others wait for it: with
 * thousands of members entering their first collective together, a copy
 * per thread would be thousands of copies.
 */
#ifndef PARITY_RUNTIME_INTERNAL_H
#define PARITY_RUNTIME_INTERNAL_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>

#include "parity/runtime.h"

/* One member: its world rank and its index in the group. */
typedef struct {
    int rank, index;
} group_member_t;

struct group {
    char name[64];
    int n;
    int *ranks;               /* [n] world ranks, by group index */
    group_member_t *by_rank;  /* [n] sorted by world rank (O(n) bytes, however
                                 far apart the ranks: a table indexed by rank
                                 would cost every group O(world)) */
    int max_rank;
    _Atomic(void *) coll;         /* collectives state, created on first use */
    void (*coll_free)(void *);    /* set together with coll */
    pthread_mutex_t coll_mu;      /* held while coll is being created */
    struct group *next_live;      /* registry of live groups (group.c) */
    uint64_t created;             /* creation order in this process */
    int net_id;                   /* a run across processes: the group's number,
                                     the same in every process (group_registry_number) */
};

/* Checks every live group against a run of `world` devices (group.c). */
int group_registry_check(int world, perr_t *e);

/* A run across processes (processes.c): numbers the live groups 0, 1, ...
 * by (name, size, ranks, creation order), which every process that built
 * the same groups agrees on whatever else it made, and returns a digest
 * of that list for the processes to compare; *n: how many. */
uint64_t group_registry_number(int *n);

/* The transport's hooks around a run across processes (processes.c):
 * begin before any device starts (0, or -1 with a message: the
 * processes disagree), end after the local device finished. */
typedef int (*runtime_run_begin_fn)(int world, perr_t *e);
typedef void (*runtime_run_end_fn)(void);
void runtime_set_run_hooks(runtime_run_begin_fn begin, runtime_run_end_fn end);
int  runtime_run_begin(int world, perr_t *e);
void runtime_run_end(void);

/* Index of world_rank in g, or -1: a binary search (fast path for coll). */
static inline int group_rank_of_world(const struct group *g, int world_rank) {
    int lo = 0, hi = g->n;
    while (lo < hi) {
        int mid = lo + (hi - lo) / 2;
        if (g->by_rank[mid].rank < world_rank) lo = mid + 1;
        else hi = mid;
    }
    return lo < g->n && g->by_rank[lo].rank == world_rank ? g->by_rank[lo].index : -1;
}

/* ---- stepper.c: step-through mode (runtime.h) ----
 * devices_run calls step_run_begin before starting the threads (0, or -1
 * for a focus outside the world), each device thread step_device_start
 * before its function and step_device_finish after it, and
 * step_run_end after the join. All of them do nothing in a threaded run. */
int  step_run_begin(int world, perr_t *e);
void step_run_end(void);
void step_device_start(int rank);
void step_device_finish(int rank);
/* The device `rank`, which holds the baton, must wait until ready(ctx):
 * hands the baton on and returns holding it again, ready(ctx) true. -1
 * when timeout_ns (> 0; 0: none) passed first. ready runs on other
 * threads, under the stepper's lock: it may only read atomics. */
typedef int (*step_ready_fn)(const void *ctx);
int  step_block(int rank, step_ready_fn ready, const void *ctx, int64_t timeout_ns);
/* The device holding the baton, -1 when none (for reports). */
int  step_holder(void);
/* Called (then the process exits) when no device can run while some
 * still wait: the collectives register their "what every device is
 * doing" report. */
typedef void (*step_deadlock_fn)(void);
void step_set_deadlock_reporter(step_deadlock_fn fn);

#endif
