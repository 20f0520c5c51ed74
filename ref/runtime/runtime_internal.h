/* runtime_internal.h - what the runtime shares with the layers above it
 * inside ref/ (not part of the public API).
 *
 * The collectives layer keeps its per-group state (member slots, p2p
 * channels) behind group->coll, created on first use and released by
 * group_destroy through group->coll_free. The group knows nothing about
 * what is inside: the runtime stays below the collectives.
 */
#ifndef PARITY_RUNTIME_INTERNAL_H
#define PARITY_RUNTIME_INTERNAL_H

#include <stdatomic.h>

#include "parity/runtime.h"

struct group {
    char name[64];
    int n;
    int *ranks;    /* [n] world ranks, by group index */
    int *index_of; /* [max_rank + 1] world rank -> group index, or -1 */
    int max_rank;
    _Atomic(void *) coll;         /* collectives state, created on first use */
    void (*coll_free)(void *);    /* set together with coll */
    struct group *next_live;      /* registry of live groups (group.c) */
};

/* Checks every live group against a run of `world` devices (group.c). */
int group_registry_check(int world, perr_t *e);

/* Index of the calling device thread in g, or -1 (fast path for coll). */
static inline int group_rank_of_world(const struct group *g, int world_rank) {
    return world_rank >= 0 && world_rank <= g->max_rank ? g->index_of[world_rank] : -1;
}

#endif
