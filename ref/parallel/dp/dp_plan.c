/* dp_plan.c - units, buckets and shards of data parallelism (dp.h). */
#include <stdlib.h>
#include <string.h>

#include "parity/dp.h"

void dp_plan_free(dp_plan_t *p) {
    free(p->unit_first);
    free(p->unit_last);
    free(p->unit_of_tensor);
    free(p->buckets);
    free(p->bucket_of_unit);
    free(p->unit_nbuckets);
    memset(p, 0, sizeof *p);
}

void dp_piece(const dp_plan_t *p, int b, int k, size_t *lo, size_t *hi) {
    const dp_bucket_t *bk = &p->buckets[b];
    size_t a = bk->lo + (size_t)k * bk->piece, e = a + bk->piece;
    *lo = a < bk->hi ? a : bk->hi;
    *hi = e < bk->hi ? e : bk->hi;
}

void dp_owner(const dp_plan_t *p, size_t x, int *bucket, int *rank) {
    *bucket = -1, *rank = -1;
    for (int b = 0; b < p->nbuckets; b++)
        if (x >= p->buckets[b].lo && x < p->buckets[b].hi) {
            *bucket = b;
            *rank = (int)((x - p->buckets[b].lo) / p->buckets[b].piece);
            return;
        }
}

int dp_unit_buckets(const dp_plan_t *p, int unit, int out[DP_UNIT_MAX_BUCKETS]) {
    int k = 0;
    for (int i = 0; p->bucket_of_unit[unit] >= 0 && i < p->unit_nbuckets[unit]; i++)
        out[k++] = p->bucket_of_unit[unit] + i;
    for (int i = 0; unit == p->nunits - 1 && p->tied && p->bucket_of_unit[0] >= 0 &&
                    i < p->unit_nbuckets[0];
         i++)
        out[k++] = p->bucket_of_unit[0] + i;
    return k;
}

void dp_plan_hold_embedding(dp_plan_t *p, const param_table_t *t) {
    for (int b = 0; b < p->nbuckets; b++)
        if (p->buckets[b].first <= t->wte && t->wte < p->buckets[b].last) p->buckets[b].ready_unit = -1;
}

/* The ranks of a gradient group: the sizes of its axes (grid NULL: dp). */
static int bucket_group_size(unsigned reduce, const int *sizes, int dp) {
    if (!sizes) return dp;
    int n = 1;
    for (int a = 0; a < GRID_NAXES; a++)
        if (reduce >> a & 1) n *= sizes[a];
    return n;
}

/* Returns the bucket's index, or -1 when its tensors are all empty
 * (another pipeline stage's): no bucket. */
static int add_bucket(dp_plan_t *p, const param_table_t *t, int first, int last, const int *sizes) {
    if (t->info[first].offset == t->info[last - 1].offset + t->info[last - 1].numel) return -1;
    dp_bucket_t *b = &p->buckets[p->nbuckets++];
    b->first = first;
    b->last = last;
    b->lo = t->info[first].offset;
    b->hi = t->info[last - 1].offset + t->info[last - 1].numel;
    /* final after the backward of its lowest tensor's unit: the lowest one
     * this stage holds (a pipeline stage's table has empty tensors) */
    int lowest = first;
    while (lowest + 1 < last && t->info[lowest].numel == 0) lowest++;
    b->ready_unit = p->unit_of_tensor[lowest];
    b->reduce = t->info[lowest].reduce;
    b->n = bucket_group_size(b->reduce, sizes, p->dp);
    b->piece = (b->hi - b->lo + (size_t)b->n - 1) / (size_t)b->n;
    return p->nbuckets - 1;
}

/* Whether tensors i-1 and i (both held) reduce over different groups. */
static int group_changes(const param_table_t *t, int i) {
    return t->info[i].reduce != t->info[i - 1].reduce;
}

static int build(dp_plan_t *p, const param_table_t *t, const model_config_t *cfg, int dp,
                 const int *sizes, int stage, double bucket_cap_mb, perr_t *err);

int dp_plan_build(dp_plan_t *p, const param_table_t *t, const model_config_t *cfg, int dp,
                  int stage, double bucket_cap_mb, perr_t *err) {
    return build(p, t, cfg, dp, NULL, stage, bucket_cap_mb, err);
}

int dp_plan_build_grid(dp_plan_t *p, const param_table_t *t, const model_config_t *cfg,
                       const int sizes[GRID_NAXES], int stage, double bucket_cap_mb, perr_t *err) {
    int most = 1; /* the largest group: the buffers' */
    for (int i = 0; i < t->count; i++) {
        const int n = bucket_group_size(t->info[i].reduce, sizes, 1);
        most = n > most ? n : most;
    }
    return build(p, t, cfg, most, sizes, stage, bucket_cap_mb, err);
}

static int build(dp_plan_t *p, const param_table_t *t, const model_config_t *cfg, int dp,
                 const int *sizes, int stage, double bucket_cap_mb, perr_t *err) {
    memset(p, 0, sizeof *p);
    p->dp = dp;
    p->stage = stage;
    p->tied = cfg->tied;
    p->nunits = t->n_units;
    p->unit_first = calloc((size_t)p->nunits, sizeof(int));
    p->unit_last = calloc((size_t)p->nunits, sizeof(int));
    p->unit_of_tensor = calloc((size_t)t->count, sizeof(int));
    p->buckets = calloc((size_t)t->count + 1, sizeof(dp_bucket_t));
    p->bucket_of_unit = calloc((size_t)p->nunits, sizeof(int));
    p->unit_nbuckets = calloc((size_t)p->nunits, sizeof(int));
    if (!p->unit_first || !p->unit_last || !p->unit_of_tensor || !p->buckets || !p->bucket_of_unit ||
        !p->unit_nbuckets) {
        dp_plan_free(p);
        return perr_set(err, "dp plan: out of memory");
    }
    /* units: each unit's tensors are contiguous, in unit order (params.c) */
    for (int u = 0; u < p->nunits; u++) param_unit_range(t, u, &p->unit_first[u], &p->unit_last[u]);
    for (int u = 0; u < p->nunits; u++)
        for (int i = p->unit_first[u]; i < p->unit_last[u]; i++) p->unit_of_tensor[i] = u;
    /* a bucket holds tensors of one reduction group: a series of
     * buckets per group (dp_bucket_t.reduce) */
    if (stage == 3) {
        /* one bucket per unit and group, in backward order: head, layers
         * down, embeddings; a unit's runs of one group last first */
        for (int u = p->nunits - 1; u >= 0; u--) {
            p->bucket_of_unit[u] = -1;
            int last = p->unit_last[u];
            for (int i = last - 1; i >= p->unit_first[u]; i--) {
                if (i > p->unit_first[u] && !group_changes(t, i)) continue;
                const int b = add_bucket(p, t, i, last, sizes);
                if (b >= 0) p->bucket_of_unit[u] = b, p->unit_nbuckets[u]++;
                last = i;
            }
            /* the unit's buckets, first to last: bucket_of_unit onward */
            if (p->unit_nbuckets[u] > 1) p->bucket_of_unit[u] -= p->unit_nbuckets[u] - 1;
        }
    } else {
        /* whole tensors in backward order until the bucket holds
         * bucket_cap_mb of fp32 gradients */
        double cap = bucket_cap_mb * 1e6 / sizeof(float);
        int last = t->count;
        double have = 0;
        for (int i = t->count - 1; i >= 0; i--) {
            have += (double)t->info[i].numel;
            if (have >= cap || i == 0 || group_changes(t, i)) {
                add_bucket(p, t, i, last, sizes);
                last = i;
                have = 0;
            }
        }
    }
    size_t off = 0;
    for (int b = 0; b < p->nbuckets; b++) {
        p->buckets[b].shard_off = off;
        off += p->buckets[b].piece;
    }
    p->shard_len = off;
    return 0;
}
