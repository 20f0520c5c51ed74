/* dp_plan.c - units, buckets and shards of data parallelism (dp.h). */
#include <stdlib.h>
#include <string.h>

#include "model/gpt.h"
#include "parity/dp.h"

void dp_plan_free(dp_plan_t *p) {
    free(p->unit_first);
    free(p->unit_last);
    free(p->unit_of_tensor);
    free(p->buckets);
    free(p->bucket_of_unit);
    free(p->unit_nbuckets);
    free(p->cuts);
    memset(p, 0, sizeof *p);
}

void dp_piece(const dp_plan_t *p, int b, int k, size_t *lo, size_t *hi) {
    const dp_bucket_t *bk = &p->buckets[b];
    if (bk->cut) {
        *lo = bk->cut[k], *hi = bk->cut[k + 1];
        return;
    }
    size_t a = bk->lo + (size_t)k * bk->piece, e = a + bk->piece;
    *lo = a < bk->hi ? a : bk->hi;
    *hi = e < bk->hi ? e : bk->hi;
}

void dp_owner(const dp_plan_t *p, size_t x, int *bucket, int *rank) {
    *bucket = -1, *rank = -1;
    for (int b = 0; b < p->nbuckets; b++)
        if (x >= p->buckets[b].lo && x < p->buckets[b].hi) {
            *bucket = b;
            if (!p->buckets[b].cut) {
                *rank = (int)((x - p->buckets[b].lo) / p->buckets[b].piece);
                return;
            }
            int k = 0; /* the piece [cut[k], cut[k+1]) holding x: empty ones hold nothing */
            while (x >= p->buckets[b].cut[k + 1]) k++;
            *rank = k;
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

dp_run_t dp_runs(const dp_plan_t *p, int b, size_t lo, size_t hi) {
    return (dp_run_t){.t = p->buckets[b].first - 1, .last = p->buckets[b].last, .lo = lo, .hi = hi,
                      .qblock = p->qblock};
}

int dp_run_next(const param_table_t *t, dp_run_t *r) {
    if (r->qblock && r->e > r->a) r->q += adam8_nblocks(r->e - r->a, r->qblock);
    for (r->t++; r->t < r->last; r->t++) {
        const param_info_t *pi = &t->info[r->t];
        const size_t a = pi->offset > r->lo ? pi->offset : r->lo;
        const size_t e = pi->offset + pi->numel < r->hi ? pi->offset + pi->numel : r->hi;
        if (a < e) {
            r->a = a, r->e = e, r->x = a - r->lo;
            return 1;
        }
    }
    r->a = r->e = 0;
    return 0;
}

/* The first block boundary at or after flat element x of the bucket: a
 * multiple of the block size from the start of the tensor holding x, or
 * that tensor's end (the next one's start). */
static size_t block_up(const param_table_t *t, const dp_bucket_t *bk, size_t x, size_t block) {
    for (int i = bk->first; i < bk->last; i++) {
        const param_info_t *pi = &t->info[i];
        if (x < pi->offset || x >= pi->offset + pi->numel) continue;
        const size_t up = (x - pi->offset + block - 1) / block * block;
        return pi->offset + (up < pi->numel ? up : pi->numel);
    }
    return x; /* the bucket's end */
}

/* adamw8bit: every bucket's cuts at block boundaries (unless
 * DP_PLAN_UNALIGNED), its longest piece and its pieces' absmax counts. */
static int plan_blocks(dp_plan_t *p, const param_table_t *t, unsigned flags, perr_t *err) {
    size_t ncuts = 0;
    for (int b = 0; b < p->nbuckets; b++) ncuts += (size_t)p->buckets[b].n + 1;
    if (!(flags & DP_PLAN_UNALIGNED) && !(p->cuts = malloc(ncuts * sizeof(size_t))))
        return perr_set(err, "dp plan: out of memory");
    const size_t B = (size_t)p->qblock;
    size_t *cut = p->cuts;
    for (int b = 0; b < p->nbuckets; b++) {
        dp_bucket_t *bk = &p->buckets[b];
        const size_t n = (size_t)bk->n;
        if (cut) {
            const size_t even = bk->piece;
            cut[0] = bk->lo, cut[n] = bk->hi, bk->piece = 0;
            for (size_t k = 1; k < n; k++) {
                const size_t x = bk->lo + k * even < bk->hi ? bk->lo + k * even : bk->hi;
                const size_t up = block_up(t, bk, x, B);
                cut[k] = up > cut[k - 1] ? up : cut[k - 1];
            }
            for (size_t k = 0; k < n; k++)
                if (cut[k + 1] - cut[k] > bk->piece) bk->piece = cut[k + 1] - cut[k];
            bk->cut = cut;
            cut += n + 1;
        }
        bk->qpiece = 0;
        for (int k = 0; k < bk->n; k++) {
            size_t lo, hi;
            dp_piece(p, b, k, &lo, &hi);
            dp_run_t r = dp_runs(p, b, lo, hi);
            while (dp_run_next(t, &r)) {}
            if (r.q > bk->qpiece) bk->qpiece = r.q;
        }
    }
    return 0;
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
                 const int *sizes, int stage, double bucket_cap_mb, unsigned flags, perr_t *err);

int dp_plan_build(dp_plan_t *p, const param_table_t *t, const model_config_t *cfg, int dp,
                  int stage, double bucket_cap_mb, perr_t *err) {
    return build(p, t, cfg, dp, NULL, stage, bucket_cap_mb, 0, err);
}

int dp_plan_build_grid_ex(dp_plan_t *p, const param_table_t *t, const model_config_t *cfg,
                          const int sizes[GRID_NAXES], int stage, double bucket_cap_mb,
                          unsigned flags, perr_t *err) {
    int most = 1; /* the largest group: the buffers' */
    for (int i = 0; i < t->count; i++) {
        const int n = bucket_group_size(t->info[i].reduce, sizes, 1);
        most = n > most ? n : most;
    }
    return build(p, t, cfg, most, sizes, stage, bucket_cap_mb, flags, err);
}

int dp_plan_build_grid(dp_plan_t *p, const param_table_t *t, const model_config_t *cfg,
                       const int sizes[GRID_NAXES], int stage, double bucket_cap_mb, perr_t *err) {
    return dp_plan_build_grid_ex(p, t, cfg, sizes, stage, bucket_cap_mb, 0, err);
}

static int build(dp_plan_t *p, const param_table_t *t, const model_config_t *cfg, int dp,
                 const int *sizes, int stage, double bucket_cap_mb, unsigned flags, perr_t *err) {
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
    p->qblock = cfg->optimizer == MODEL_OPT_ADAMW8BIT ? cfg->optimizer_block : 0;
    if (p->qblock && plan_blocks(p, t, flags, err)) {
        dp_plan_free(p);
        return -1;
    }
    size_t off = 0, qoff = 0;
    for (int b = 0; b < p->nbuckets; b++) {
        p->buckets[b].shard_off = off;
        p->buckets[b].qshard_off = qoff;
        off += p->buckets[b].piece;
        qoff += p->buckets[b].qpiece;
    }
    p->shard_len = off;
    p->shard_qlen = qoff;
    return 0;
}
