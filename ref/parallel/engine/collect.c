/* collect.c - reassembling a layout's global tensors for dumps and the
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
 *    as divergences naming the device (engine_replica_diff_t).
 * This runs outside the simulated devices: host memory, no collectives.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model/gpt.h"
#include "engine_internal.h"
#include "parity/dump.h"

void engine_collect_batch(void *ctx, const gpt_view_t *v) {
    engine_rank_t *r = ctx;
    pthread_mutex_lock(&r->sh->collect_lock);
    dump_set_writer(r->sh->run->dump, r->device);
    r->sh->dump_obs.batch_tensor(r->sh->dump_obs.ctx, v);
    pthread_mutex_unlock(&r->sh->collect_lock);
}

static const char *const kind_name[COLLECT_NKINDS] = {"grad", "param", "exp_avg", "exp_avg_sq"};

/* Bucket b's piece of kind k as this rank keeps it sharded. */
static const float *piece_of(engine_rank_t *r, collect_kind_t k, int b) {
    const size_t off = r->plan->buckets[b].shard_off;
    switch (k) {
    case COLLECT_GRAD: return engine_grad_piece(r, b);
    case COLLECT_PARAM: return r->shard_params + off;
    case COLLECT_EXP_AVG: return r->shard_m + off;
    default: return r->shard_v + off;
    }
}

/* Bucket b's piece [lo, hi) of kind k as fp32 values into out: adamw8bit's
 * state dequantized (its values are the whole state, model.h), tensor by
 * tensor as the update ran (dp_runs). */
static void piece_values(engine_rank_t *r, collect_kind_t k, int b, size_t lo, size_t hi, float *out) {
    const dp_plan_t *p = r->plan;
    if (!p->qblock && !r->shard_m && (k == COLLECT_EXP_AVG || k == COLLECT_EXP_AVG_SQ)) {
        /* nvme offload: the state is the rank's file's (offload.c) */
        engine_offload_read(r, k == COLLECT_EXP_AVG_SQ, p->buckets[b].shard_off, hi - lo, out);
        return;
    }
    if (!p->qblock || k == COLLECT_GRAD || k == COLLECT_PARAM) {
        memcpy(out, piece_of(r, k, b), (hi - lo) * sizeof(float));
        return;
    }
    const int m = k == COLLECT_EXP_AVG;
    const engine_adam8_piece_t q = engine_offload_load8(r, b); /* nvme: from the file */
    dp_run_t run = dp_runs(p, b, lo, hi);
    while (dp_run_next(&r->g->table, &run))
        adam8_dequantize((m ? q.mq : q.vq) + run.x, (m ? q.ma : q.va) + run.q, run.e - run.a,
                         p->qblock, m, out + run.x);
}

/* This rank's whole copy of kind k, or NULL where its ZeRO stage shards it;
 * adamw8bit's DDP replica dequantized into *buf (the caller frees it). */
static const float *replica_of(const engine_rank_t *r, collect_kind_t k, float **buf) {
    const int stage = r->plan->stage;
    *buf = NULL;
    switch (k) {
    case COLLECT_GRAD: return stage == 0 ? r->g->grads : NULL; /* DDP's all-gathered copy */
    case COLLECT_PARAM: return stage < 3 ? r->g->params : NULL;
    default:
        if (stage != 0) return NULL;
        const float *x = gpt_adam_values(r->g, k == COLLECT_EXP_AVG_SQ, buf);
        if (!x) parity_fatal("dp: out of memory for a replica's AdamW state");
        return x;
    }
}

static void mark(int32_t *src, size_t lo, size_t hi, int device) {
    for (size_t i = lo; src && i < hi; i++) src[i] = device;
}

/* The parts that hold bucket b's blocks as this device does, the same
 * flat range: its own, and with experts cut over an axis the dense
 * tensors reduce over (the ep axis, or a fold onto cp), for a dense
 * bucket the parts of its dense gradient group's other members (they
 * hold other experts, the same dense blocks). */
static int bucket_parts(const engine_rank_t *r, int b, int *parts) {
    parts[0] = r->part;
    if (engine_bucket_gi(r, b) != 0 || r->sh->ngroups == 1) return 1;
    int n = 1;
    const group_t *dense = r->groups[0];
    for (int q = 0; q < group_size(dense); q++) {
        const int part = r->sh->part_of[group_world_rank(dense, q)];
        int seen = 0;
        for (int i = 0; i < n; i++) seen |= parts[i] == part;
        if (!seen && n < MODEL_MAX_EXPERTS) parts[n++] = part;
    }
    return n;
}

void engine_collect_pieces(engine_rank_t *r, collect_kind_t k, float **outs, int32_t **srcs) {
    const dp_plan_t *p = r->plan;
    int parts[MODEL_MAX_EXPERTS]; /* ep <= E */
    for (int b = 0; b < p->nbuckets; b++) {
        size_t lo, hi;
        dp_piece(p, b, engine_bucket_rank(r, b), &lo, &hi);
        /* the checker control: device 1 leaves one gradient element unwritten */
        const size_t skip = (r->sh->run->broken_check & ENGINE_BROKEN_UNWRITTEN) && r->device == 1 &&
                            k == COLLECT_GRAD && b == 0 && hi > lo;
        const int np = bucket_parts(r, b, parts);
        for (int i = 0; i < np; i++) {
            if (skip)
                memcpy(outs[parts[i]] + lo + skip, piece_of(r, k, b) + skip, (hi - lo - skip) * sizeof(float));
            else
                piece_values(r, k, b, lo, hi, outs[parts[i]] + lo);
            mark(srcs ? srcs[parts[i]] : NULL, lo + skip, hi, r->device);
        }
    }
}

void engine_collect_reset(engine_shared_t *sh) {
    for (int k = 0; k < COLLECT_NKINDS; k++) {
        for (int part = 0; sh->src_local[k] && part < sh->nparts; part++)
            memset(sh->src_local[k][part], 0xff, engine_part(sh, part).table->total * sizeof(int32_t));
        if (sh->src_full[k]) memset(sh->src_full[k], 0xff, sh->global.total * sizeof(int32_t));
    }
}

void engine_collect_sources(const engine_shared_t *sh, dump_sources_t *out) {
    *out = (dump_sources_t){sh->src_full[COLLECT_GRAD], sh->src_full[COLLECT_PARAM], sh->src_full[COLLECT_EXP_AVG],
                            sh->src_full[COLLECT_EXP_AVG_SQ]};
}

int32_t **engine_part_sources(const engine_shared_t *sh) {
    int32_t **b = calloc((size_t)sh->nparts, sizeof *b);
    for (int t = 0; b && t < sh->nparts; t++)
        if (!(b[t] = calloc(engine_part(sh, t).table->total + 1, sizeof(int32_t)))) {
            engine_part_sources_free(sh, b);
            return NULL;
        }
    return b;
}

void engine_part_sources_free(const engine_shared_t *sh, int32_t **b) {
    for (int t = 0; b && t < sh->nparts; t++) free(b[t]);
    free(b);
}

/* The same with this rank's copy of kind k already at hand (mine: NULL
 * where it is sharded). */
static void collect_part(engine_rank_t *r, collect_kind_t k, const float *mine, float **outs,
                         int32_t **srcs) {
    const size_t total = r->g->table.total;
    if (k == COLLECT_GRAD || !mine) {
        engine_collect_pieces(r, k, outs, srcs);
    } else if (engine_part_lead(r)) { /* the copy taken: data-parallel rank 0's */
        memcpy(outs[r->part], mine, total * sizeof(float));
        mark(srcs ? srcs[r->part] : NULL, 0, total, r->device);
    }
}

void engine_collect_part(engine_rank_t *r, collect_kind_t k, float **outs, int32_t **srcs) {
    float *buf;
    collect_part(r, k, replica_of(r, k, &buf), outs, srcs);
    free(buf);
}

void engine_collect_kind(engine_rank_t *r, int64_t step, collect_kind_t k) {
    engine_shared_t *sh = r->sh;
    float *local = sh->local[k][r->part], *buf;
    const float *mine = replica_of(r, k, &buf);
    const int sharded = k == COLLECT_GRAD || !mine;
    collect_part(r, k, mine, sh->local[k], sh->src_local[k]);
    engine_merge_kind(r, k); /* every rank's pieces are in, in every process */
    /* every other replica against the copy taken (DDP's gradients: against
     * each element's owner, whose piece the all-gather copied) */
    if (mine && (sharded || !engine_part_lead(r)))
        engine_check_replica(r, step, kind_name[k], mine, local, sharded ? -1 : 0);
    free(buf);
    if (r->device == 0) engine_collect_tp(sh, step, k);
}

gpt_t engine_global_view(const engine_shared_t *sh, const gpt_t *g) {
    gpt_t v = *g;
    v.table = sh->global; /* tensor parallelism: the whole tensors, not a rank's blocks */
    v.params = sh->params_full;
    v.grads = sh->grads_full;
    v.adam_m = sh->m_full; /* NULL unless collected */
    v.adam_v = sh->v_full;
    v.adam8_m = v.adam8_v = NULL; /* a replica's own blocks: m_full holds their values */
    v.adam8_am = v.adam8_av = NULL;
    return v;
}

/* Keeps one record per tensor: the first differing element over every
 * device (the lowest device on a tie) and how many devices differ. */
void engine_record_diff(engine_shared_t *sh, const engine_replica_diff_t *d) {
    pthread_mutex_lock(&sh->collect_lock);
    engine_replica_diff_t *e = NULL;
    for (int i = 0; i < sh->ndiffs && !e; i++)
        if (!strcmp(sh->diffs[i].name, d->name)) e = &sh->diffs[i];
    if (!e && sh->ndiffs == sh->cap_diffs) {
        int cap = sh->cap_diffs ? 2 * sh->cap_diffs : 16;
        engine_replica_diff_t *grown = realloc(sh->diffs, (size_t)cap * sizeof *grown);
        if (!grown) parity_fatal("dp: out of memory recording a replica mismatch");
        sh->diffs = grown, sh->cap_diffs = cap;
    }
    if (!e) {
        e = &sh->diffs[sh->ndiffs++];
        *e = *d;
        e->ndiffer = 0;
        e->flat = UINT64_MAX;
    }
    e->ndiffer += d->ndiffer;
    if (d->flat < e->flat || (d->flat == e->flat && d->device < e->device))
        e->flat = d->flat, e->device = d->device, e->taken = d->taken, e->got = d->got, e->want = d->want;
    pthread_mutex_unlock(&sh->collect_lock);
}

static void record(engine_shared_t *sh, const char *name, uint64_t flat, int device, int taken,
                   float got, float want) {
    engine_replica_diff_t d = {.flat = flat, .device = device, .taken = taken, .ndiffer = 1,
                               .got = got, .want = want};
    snprintf(d.name, sizeof d.name, "%s", name);
    engine_record_diff(sh, &d);
}

/* The device of data-parallel rank 0 holding model part k. */
static int part_device(const engine_shared_t *sh, int k) {
    for (int d = 0; d < sh->world; d++)
        if (sh->ranks[d].part == k && engine_part_lead(&sh->ranks[d])) return d;
    return -1;
}

/* Index of the first element whose bits differ; n when none. */
static size_t first_difference(const float *a, const float *b, size_t n) {
    if (!memcmp(a, b, n * sizeof(float))) return n;
    size_t i = 0;
    while (memcmp(a + i, b + i, sizeof(float)) == 0) i++;
    return i;
}

void engine_check_replica(engine_rank_t *r, int64_t step, const char *kind, const float *mine,
                          const float *taken, int taken_device) {
    const param_table_t *t = &r->g->table;
    for (int i = 0; i < t->count; i++) {
        const param_info_t *pi = &t->info[i];
        size_t k = first_difference(mine + pi->offset, taken + pi->offset, pi->numel);
        if (k == pi->numel) continue;
        int owner = taken_device, bucket = -1; /* a gradient-group index, then a device */
        if (owner < 0) dp_owner(r->plan, pi->offset + k, &bucket, &owner);
        owner = group_world_rank(bucket >= 0 ? engine_bucket_group(r, bucket) : r->groups[r->sh->ngroups - 1],
                                 owner);
        /* the element's index in the global tensor (a tensor-parallel block) */
        const engine_part_t part = engine_part(r->sh, r->part);
        size_t flat = placement_global_index(&pi->pl, part.sizes, part.coord, k);
        char name[160];
        snprintf(name, sizeof name, "step%lld.%s.%s", (long long)step, kind, pi->name);
        record(r->sh, name, flat, r->device, owner, mine[pi->offset + k], taken[pi->offset + k]);
    }
}

/* AdamW's step count as a device keeps it (DDP: in its replica). */
int engine_adam_t(const engine_rank_t *r) { return r->plan->stage == 0 ? r->g->adam_t : r->adam_t; }

void engine_check_scalars(engine_shared_t *sh, int64_t step) {
    static const char *const names[ENGINE_NSCALARS] = {"loss", "lr", "grad_norm", "adam_t", "loss_scale"};
    const float *s0 = sh->scalars[0]; /* engine_note_scalars, merged across processes */
    for (int q = 1; q < sh->world; q++) {
        for (int k = 0; k < ENGINE_NSCALARS; k++) {
            if (!memcmp(&sh->scalars[q][k], &s0[k], sizeof(float))) continue;
            char name[64];
            snprintf(name, sizeof name, "step%lld.%s", (long long)step, names[k]);
            record(sh, name, 0, q, 0, sh->scalars[q][k], s0[k]);
        }
    }
}

typedef struct {
    const int32_t *from;
    int32_t *to;
} src_runs_t;

static void put_sources(void *ctx, size_t global_flat, size_t local_flat, size_t n) {
    const src_runs_t *s = ctx;
    memcpy(s->to + global_flat, s->from + local_flat, n * sizeof(int32_t));
}

/* The part whose copy of a tensor the dump takes, for part p's extra
 * copy: coordinate 0 along every axis the tensor is replicated over (tp
 * rank 0's; with experts cut over ep, a dense tensor's on ep rank 0), or
 * for the last stage's tied embedding the first stage's. Parts differ
 * along tp, ep and pp (and cp under a cp fold). */
static int taken_part(const engine_shared_t *sh, const engine_part_t *p, const placement_t *pl) {
    int c[GRID_NAXES];
    memcpy(c, p->coord, sizeof c);
    if (placement_is_extra_replica(pl, p->sizes, p->coord)) {
        for (int a = 0; a < GRID_NAXES; a++) {
            int cut = (pl->partial >> a & 1u) != 0;
            for (int k = 0; k < pl->ncuts; k++) cut |= pl->cut[k].over == (grid_axis_t)a;
            if (a != GRID_PP && !cut) c[a] = 0;
        }
    } else {
        c[GRID_PP] = 0;
    }
    for (int k = 0; k < sh->nparts; k++) {
        int same = 1; /* parts differ along tp (and its sub-axes), ep, pp, and cp with
                         the experts folded onto it (a part's cp coordinate is 0 otherwise) */
        for (int a = 0; a < GRID_NAXES; a++)
            if (a != GRID_DP) same &= sh->part_coord[k][a] == c[a];
        if (same) return k;
    }
    return 0;
}

void engine_collect_tp(engine_shared_t *sh, int64_t step, collect_kind_t kind) {
    float **local = sh->local[kind], *global = sh->full[kind];
    for (int k = 0; k < sh->nparts; k++) {
        const engine_part_t p = engine_part(sh, k);
        for (int i = 0; i < p.table->count; i++) {
            const param_info_t *pl = &p.table->info[i], *pg = &sh->global.info[i];
            if (!pl->held) continue;
            const float *mine = local[k] + pl->offset;
            float *g = global + pg->offset;
            if (!engine_part_extra(sh, &p, i)) {
                placement_put(&pl->pl, p.sizes, p.coord, mine, g);
                if (sh->src_local[kind]) {
                    src_runs_t runs = {sh->src_local[kind][k] + pl->offset, sh->src_full[kind] + pg->offset};
                    placement_for_runs(&pl->pl, p.sizes, p.coord, put_sources, &runs);
                }
                continue;
            }
            size_t li;
            int64_t at = placement_compare(&pl->pl, p.sizes, p.coord, mine, g, &li);
            if (at >= 0) {
                const int taken = taken_part(sh, &p, &pl->pl);
                char name[160];
                snprintf(name, sizeof name, "step%lld.%s.%s", (long long)step, kind_name[kind],
                         pg->name);
                int device = part_device(sh, k), from = part_device(sh, taken);
                if (sh->src_local[kind]) { /* ZeRO: the piece's owner */
                    device = sh->src_local[kind][k][pl->offset + li];
                    from = sh->src_full[kind][pg->offset + (size_t)at];
                }
                record(sh, name, (uint64_t)at, device, from, mine[li], g[at]);
            }
        }
    }
}
