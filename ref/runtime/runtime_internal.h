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
};

/* Checks every live group against a run of `world` devices (group.c). */
int group_registry_check(int world, perr_t *e);

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

#endif
