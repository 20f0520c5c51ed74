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

int dp_unit_buckets(const dp_plan_t *p, int unit, int out[2]) {
    int k = 0;
    if (p->bucket_of_unit[unit] >= 0) out[k++] = p->bucket_of_unit[unit];
    if (unit == p->nunits - 1 && p->tied && p->bucket_of_unit[0] >= 0) out[k++] = p->bucket_of_unit[0];
    return k;
}

void dp_plan_hold_embedding(dp_plan_t *p, const param_table_t *t) {
    for (int b = 0; b < p->nbuckets; b++)
        if (p->buckets[b].first <= t->wte && t->wte < p->buckets[b].last) p->buckets[b].ready_unit = -1;
}

/* Returns the bucket's index, or -1 when its tensors are all empty
 * (another pipeline stage's): no bucket. */
static int add_bucket(dp_plan_t *p, const param_table_t *t, int first, int last) {
    if (t->info[first].offset == t->info[last - 1].offset + t->info[last - 1].numel) return -1;
    dp_bucket_t *b = &p->buckets[p->nbuckets++];
    b->first = first;
    b->last = last;
    b->lo = t->info[first].offset;
    b->hi = t->info[last - 1].offset + t->info[last - 1].numel;
    b->piece = (b->hi - b->lo + (size_t)p->dp - 1) / (size_t)p->dp;
    /* final after the backward of its lowest tensor's unit: the lowest one
     * this stage holds (a pipeline stage's table has empty tensors) */
    int lowest = first;
    while (lowest + 1 < last && t->info[lowest].numel == 0) lowest++;
    b->ready_unit = p->unit_of_tensor[lowest];
    b->reduce = t->info[lowest].reduce;
    return p->nbuckets - 1;
}

int dp_plan_build(dp_plan_t *p, const param_table_t *t, const model_config_t *cfg, int dp,
                  int stage, double bucket_cap_mb, perr_t *err) {
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
    if (!p->unit_first || !p->unit_last || !p->unit_of_tensor || !p->buckets || !p->bucket_of_unit) {
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
        /* one bucket per unit, in backward order: head, layers down, embeddings */
        for (int u = p->nunits - 1; u >= 0; u--) {
            for (int i = p->unit_first[u] + 1; i < p->unit_last[u]; i++)
                if (t->info[i].numel && t->info[i - 1].numel &&
                    t->info[i].reduce != t->info[i - 1].reduce) {
                    dp_plan_free(p);
                    return perr_set(err, "ZeRO-3: unit %d holds tensors reducing over different "
                                         "groups ('%s', '%s'): one bucket per unit needs one group",
                                    u, t->info[i - 1].name, t->info[i].name);
                }
            p->bucket_of_unit[u] = add_bucket(p, t, p->unit_first[u], p->unit_last[u]);
        }
    } else {
        /* whole tensors in backward order until the bucket holds
         * bucket_cap_mb of fp32 gradients */
        double cap = bucket_cap_mb * 1e6 / sizeof(float);
        int last = t->count;
        double have = 0;
        for (int i = t->count - 1; i >= 0; i--) {
            have += (double)t->info[i].numel;
            if (have >= cap || i == 0 || t->info[i - 1].reduce != t->info[i].reduce) {
                add_bucket(p, t, i, last);
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
