/* dp_collect.c - reassembling a layout's global tensors for dumps and the
 * checker, by placement:
 *  - batch tensors are sharded by sequence over dp: each rank writes its
 *    slice of every microbatch;
 *  - gradients (and ZeRO-3 parameters) are sharded by bucket piece: each
 *    rank writes the pieces it owns, which the exact reduce-scatter rounded
 *    (or AdamW updated) there;
 *  - everything else is replicated: the dump takes one copy (device 0's
 *    parameters at ZeRO 0-2 and scalars; DDP's all-gathered gradients from
 *    the owners' pieces), and every other device's copy is memcmp'd
 *    against it. A replica that drifts is a bug even when the copy taken
 *    is right, so disagreements are recorded and reported by the checker
 *    as divergences naming the device (dp_replica_diff_t).
 * This runs outside the simulated devices: host memory, no collectives.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dp_internal.h"
#include "parity/dump.h"

void dp_collect_batch(void *ctx, const gpt_view_t *v) {
    dp_rank_t *r = ctx;
    pthread_mutex_lock(&r->sh->collect_lock);
    dump_set_writer(r->sh->run->dump, r->device);
    r->sh->dump_obs.batch_tensor(r->sh->dump_obs.ctx, v);
    pthread_mutex_unlock(&r->sh->collect_lock);
}

void dp_collect_pieces(dp_rank_t *r, float *global, int grads) {
    const dp_plan_t *p = r->plan;
    for (int b = 0; b < p->nbuckets; b++) {
        size_t lo, hi;
        dp_piece(p, b, r->rank, &lo, &hi);
        const float *src = grads ? dp_grad_piece(r, b) : r->shard_params + p->buckets[b].shard_off;
        memcpy(global + lo, src, (hi - lo) * sizeof(float));
    }
}

gpt_t dp_global_view(const dp_shared_t *sh, const gpt_t *g) {
    gpt_t v = *g;
    v.table = sh->global; /* tensor parallelism: the whole tensors, not a rank's blocks */
    v.params = sh->params_full;
    v.grads = sh->grads_full;
    return v;
}

/* Keeps one record per tensor: the first differing element over every
 * device (the lowest device on a tie) and how many devices differ. */
static void record(dp_shared_t *sh, const char *name, uint64_t flat, int device, int taken,
                   float got, float want) {
    pthread_mutex_lock(&sh->collect_lock);
    dp_replica_diff_t *e = NULL;
    for (int i = 0; i < sh->ndiffs && !e; i++)
        if (!strcmp(sh->diffs[i].name, name)) e = &sh->diffs[i];
    if (!e && sh->ndiffs == sh->cap_diffs) {
        int cap = sh->cap_diffs ? 2 * sh->cap_diffs : 16;
        dp_replica_diff_t *grown = realloc(sh->diffs, (size_t)cap * sizeof *grown);
        if (!grown) parity_fatal("dp: out of memory recording a replica mismatch");
        sh->diffs = grown, sh->cap_diffs = cap;
    }
    if (!e) {
        e = &sh->diffs[sh->ndiffs++];
        memset(e, 0, sizeof *e);
        snprintf(e->name, sizeof e->name, "%s", name);
        e->flat = UINT64_MAX;
    }
    e->ndiffer++;
    if (flat < e->flat || (flat == e->flat && device < e->device))
        e->flat = flat, e->device = device, e->taken = taken, e->got = got, e->want = want;
    pthread_mutex_unlock(&sh->collect_lock);
}

/* The device of data-parallel rank 0 holding model part k. */
static int part_device(const dp_shared_t *sh, int k) {
    for (int d = 0; d < sh->grid.world; d++)
        if (sh->ranks[d].part == k && sh->ranks[d].rank == 0) return d;
    return -1;
}

/* Index of the first element whose bits differ; n when none. */
static size_t first_difference(const float *a, const float *b, size_t n) {
    if (!memcmp(a, b, n * sizeof(float))) return n;
    size_t i = 0;
    while (memcmp(a + i, b + i, sizeof(float)) == 0) i++;
    return i;
}

void dp_check_replica(dp_rank_t *r, int64_t step, const char *kind, const float *mine,
                      const float *taken, int taken_device) {
    const param_table_t *t = &r->g->table;
    for (int i = 0; i < t->count; i++) {
        const param_info_t *pi = &t->info[i];
        size_t k = first_difference(mine + pi->offset, taken + pi->offset, pi->numel);
        if (k == pi->numel) continue;
        int owner = taken_device, bucket; /* a data-parallel index, then a device */
        if (owner < 0) dp_owner(r->plan, pi->offset + k, &bucket, &owner);
        owner = group_world_rank(r->group, owner);
        /* the element's index in the global tensor (a tensor-parallel block) */
        const dp_part_t part = dp_part(r->sh, r->part);
        size_t flat = placement_global_index(&pi->pl, part.sizes, part.coord, k);
        char name[160];
        snprintf(name, sizeof name, "step%lld.%s.%s", (long long)step, kind, pi->name);
        record(r->sh, name, flat, r->device, owner, mine[pi->offset + k], taken[pi->offset + k]);
    }
}

void dp_check_scalars(dp_shared_t *sh, int64_t step) {
    const gpt_step_stats_t *s0 = &sh->ranks[0].step_stats;
    for (int q = 1; q < sh->grid.world; q++) {
        const gpt_step_stats_t *s = &sh->ranks[q].step_stats;
        const struct { const char *name; float got, want; } v[] = {
            {"loss", s->loss, s0->loss}, {"lr", s->lr, s0->lr}, {"grad_norm", s->grad_norm, s0->grad_norm}};
        for (int k = 0; k < 3; k++) {
            if (!memcmp(&v[k].got, &v[k].want, sizeof(float))) continue;
            char name[64];
            snprintf(name, sizeof name, "step%lld.%s", (long long)step, v[k].name);
            record(sh, name, 0, q, 0, v[k].got, v[k].want);
        }
    }
}

void dp_collect_tp(dp_shared_t *sh, int64_t step, const char *kind, float **local, float *global) {
    for (int k = 0; k < sh->nparts; k++) {
        const dp_part_t p = dp_part(sh, k);
        for (int i = 0; i < p.table->count; i++) {
            const param_info_t *pl = &p.table->info[i], *pg = &sh->global.info[i];
            if (!pl->held) continue;
            const float *mine = local[k] + pl->offset;
            float *g = global + pg->offset;
            if (!dp_part_extra(sh, &p, i)) {
                placement_put(&pl->pl, p.sizes, p.coord, mine, g);
                continue;
            }
            size_t li;
            int64_t at = placement_compare(&pl->pl, p.sizes, p.coord, mine, g, &li);
            if (at >= 0) {
                /* the copy taken: tp rank 0's, or the first stage's embedding */
                const int taken = placement_is_extra_replica(&pl->pl, p.sizes, p.coord)
                                      ? p.stage * p.sizes[GRID_TP] : p.tp_rank;
                char name[160];
                snprintf(name, sizeof name, "step%lld.%s.%s", (long long)step, kind, pg->name);
                record(sh, name, (uint64_t)at, part_device(sh, k), part_device(sh, taken), mine[li],
                       g[at]);
            }
        }
    }
}
