/* group.c - process groups from any list of world ranks (see runtime.h).
 *
 * Groups are created before a run by the main thread (or by one device
 * thread and handed to the others), so a registry of live groups lets
 * devices_run reject a group that names a rank the run will not have,
 * instead of letting its collectives wait forever for that rank.
 */
#include "parity/runtime.h"
#include "runtime_internal.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

static pthread_mutex_t registry_mu = PTHREAD_MUTEX_INITIALIZER;
static struct group *registry; /* live groups, newest first */
static uint64_t created;        /* groups made so far (registry_mu) */

/* By world rank, then by entry, so that a repeated rank names its
 * entries in order. */
static int by_rank_order(const void *a, const void *b) {
    const group_member_t *x = a, *y = b;
    if (x->rank != y->rank) return x->rank < y->rank ? -1 : 1;
    return (x->index > y->index) - (x->index < y->index);
}

/* A repeated rank sorts next to itself: returns i > 0 where by_rank[i]
 * repeats by_rank[i - 1], choosing the repeat that comes first in the
 * caller's list (as a scan of that list would report it), or 0. */
static int repeated_rank(const group_member_t *by_rank, int n) {
    int found = 0;
    for (int i = 1; i < n; i++)
        if (by_rank[i].rank == by_rank[i - 1].rank &&
            (!found || by_rank[i].index < by_rank[found].index))
            found = i;
    return found;
}

group_t *group_create(const int *world_ranks, int n, const char *name, perr_t *e) {
    if (!name) name = "group";
    if (n < 1) return perr_set(e, "group '%s': needs at least one rank, got n=%d", name, n), NULL;
    if (!world_ranks) return perr_set(e, "group '%s': rank list is NULL", name), NULL;
    int world = devices_world(); /* inside a run, ranks must exist now */
    int limit = world ? world : PARITY_MAX_DEVICES;
    int max_rank = 0;
    for (int i = 0; i < n; i++) {
        int r = world_ranks[i];
        if (r < 0 || r >= limit)
            return perr_set(e, "group '%s': rank %d (entry %d) is out of range: expected 0..%d%s",
                            name, r, i, limit - 1, world ? " (the running world)" : ""),
                   NULL;
        if (r > max_rank) max_rank = r;
    }
    group_t *g = calloc(1, sizeof *g);
    int *ranks = malloc((size_t)n * sizeof *ranks);
    group_member_t *by_rank = malloc((size_t)n * sizeof *by_rank);
    if (!g || !ranks || !by_rank) {
        free(g), free(ranks), free(by_rank);
        return perr_set(e, "group '%s': out of host memory", name), NULL;
    }
    for (int i = 0; i < n; i++) {
        ranks[i] = world_ranks[i];
        by_rank[i] = (group_member_t){world_ranks[i], i};
    }
    qsort(by_rank, (size_t)n, sizeof *by_rank, by_rank_order);
    int dup = repeated_rank(by_rank, n);
    if (dup > 0) {
        perr_set(e, "group '%s': rank %d appears twice (entries %d and %d)", name,
                 by_rank[dup].rank, by_rank[dup - 1].index, by_rank[dup].index);
        free(g), free(ranks), free(by_rank);
        return NULL;
    }
    snprintf(g->name, sizeof g->name, "%s", name);
    g->n = n;
    g->ranks = ranks;
    g->by_rank = by_rank;
    g->max_rank = max_rank;
    atomic_init(&g->coll, NULL);
    pthread_mutex_init(&g->coll_mu, NULL);
    pthread_mutex_lock(&registry_mu);
    g->next_live = registry;
    g->created = created++;
    g->net_id = runtime_run_distributed() ? -1 : 0; /* numbered when a run across processes starts */
    registry = g;
    pthread_mutex_unlock(&registry_mu);
    return g;
}

void group_destroy(group_t *g) {
    if (!g) return;
    pthread_mutex_lock(&registry_mu);
    for (struct group **p = &registry; *p; p = &(*p)->next_live) {
        if (*p == g) {
            *p = g->next_live;
            break;
        }
    }
    pthread_mutex_unlock(&registry_mu);
    void *coll = atomic_load(&g->coll);
    if (coll && g->coll_free) g->coll_free(coll);
    pthread_mutex_destroy(&g->coll_mu);
    free(g->ranks);
    free(g->by_rank);
    free(g);
}

int group_registry_check(int world, perr_t *e) {
    int rc = 0;
    pthread_mutex_lock(&registry_mu);
    for (struct group *g = registry; g && rc == 0; g = g->next_live)
        if (g->max_rank >= world)
            rc = perr_set(e, "devices_run: group '%s' names rank %d but the run has only %d devices",
                          g->name, g->max_rank, world);
    pthread_mutex_unlock(&registry_mu);
    return rc;
}

/* (name, size, ranks, creation order): the last only orders groups that
 * are otherwise identical, and every process makes those in one order. */
static int by_identity(const void *a, const void *b) {
    const struct group *x = *(struct group *const *)a, *y = *(struct group *const *)b;
    int c = strcmp(x->name, y->name);
    if (c) return c;
    if (x->n != y->n) return x->n < y->n ? -1 : 1;
    for (int i = 0; i < x->n; i++)
        if (x->ranks[i] != y->ranks[i]) return x->ranks[i] < y->ranks[i] ? -1 : 1;
    return (x->created > y->created) - (x->created < y->created);
}

static uint64_t fnv(uint64_t h, const void *p, size_t n) {
    const unsigned char *b = p;
    for (size_t i = 0; i < n; i++) h = (h ^ b[i]) * 0x100000001b3ULL;
    return h;
}

uint64_t group_registry_number(int *n) {
    pthread_mutex_lock(&registry_mu);
    int count = 0;
    for (struct group *g = registry; g; g = g->next_live) count++;
    struct group **all = malloc((size_t)(count ? count : 1) * sizeof *all);
    uint64_t h = 0xcbf29ce484222325ULL;
    if (!all) {
        pthread_mutex_unlock(&registry_mu);
        *n = -1;
        return 0;
    }
    int k = 0;
    for (struct group *g = registry; g; g = g->next_live) all[k++] = g;
    qsort(all, (size_t)count, sizeof *all, by_identity);
    for (int i = 0; i < count; i++) {
        all[i]->net_id = i;
        h = fnv(h, all[i]->name, strlen(all[i]->name) + 1);
        h = fnv(h, all[i]->ranks, (size_t)all[i]->n * sizeof(int));
    }
    pthread_mutex_unlock(&registry_mu);
    free(all);
    *n = count;
    return h;
}

int group_size(const group_t *g) { return g->n; }

int group_rank(const group_t *g) {
    device_t *d = device_self();
    return d ? group_rank_of_world(g, d->rank) : -1;
}

int group_world_rank(const group_t *g, int group_index) {
    return group_index >= 0 && group_index < g->n ? g->ranks[group_index] : -1;
}

int group_index_of(const group_t *g, int world_rank) { return group_rank_of_world(g, world_rank); }

const char *group_name(const group_t *g) { return g->name; }

int group_create_all(const rank_layout_t *L, const char *dims, const char *prefix, group_t **out,
                     perr_t *e) {
    return group_create_all_at(L, dims, prefix, 0, out, e);
}

int group_create_all_at(const rank_layout_t *L, const char *dims, const char *prefix,
                        int first_rank, group_t **out, perr_t *e) {
    return group_create_all_mapped(L, dims, prefix, first_rank, NULL, out, e);
}

int group_create_all_mapped(const rank_layout_t *L, const char *dims, const char *prefix,
                            int first_rank, const unsigned short *rank_at, group_t **out,
                            perr_t *e) {
    int ng = layout_num_groups(L, dims);
    if (ng < 0) return perr_set(e, "group_create_all: dims '%s' names an unknown dimension", dims);
    int *ranks = malloc((size_t)L->world * sizeof *ranks);
    if (!ranks) return perr_set(e, "group_create_all: out of host memory");
    for (int i = 0; i < ng; i++) out[i] = NULL;
    int rc = 0;
    for (int r = 0; r < L->world && rc == 0; r++) {
        int id = layout_group_id(L, r, dims);
        if (out[id]) continue;
        int n = layout_group_ranks(L, r, dims, ranks);
        for (int k = 0; k < n; k++)
            ranks[k] = rank_at ? rank_at[first_rank + ranks[k]] : first_rank + ranks[k];
        char name[64];
        snprintf(name, sizeof name, "%s%d", prefix ? prefix : dims, id);
        out[id] = group_create(ranks, n, name, e);
        if (!out[id]) rc = -1;
    }
    free(ranks);
    if (rc != 0) group_destroy_all(out, ng);
    return rc;
}

void group_destroy_all(group_t **groups, int n) {
    for (int i = 0; i < n; i++) {
        group_destroy(groups[i]);
        groups[i] = NULL;
    }
}
