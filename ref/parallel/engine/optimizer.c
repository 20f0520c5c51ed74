/* optimizer.c - the optimizer step over the data-parallel plan's shards
 * (dp.h): the gradient norm over shards, clipping and AdamW on this
 * rank's shard, DDP's all-gather of rounded gradients, and ZeRO-3's
 * parameters gathered just in time around each unit and released after.
 *
 * The arithmetic is the golden run's: clipping multiplies each gradient by
 * the same factor, adamw_update is the same function on a sub-range, and
 * the norm's exact sum of squares is split across ranks and merged with
 * an exact all-reduce (COLL_XACC), so it rounds to the golden bits.
 */
#include <string.h>

#include "model/gpt.h"
#include "engine_internal.h"
#include "parity/layers.h"
#include "parity/pmath.h"

/* ---- ZeRO-3: a unit's parameters exist only while it runs ---------- */

/* Bucket b all-gathered into buf, joined and rounded to the compute copy
 * (mixed precision); on the device thread or the communication thread. */
static double gather_into(engine_rank_t *r, group_t *group, int b, float *buf) {
    const dp_bucket_t *bk = &r->plan->buckets[b];
    const double t0 = engine_now();
    coll_all_gather(group, r->shard_params + bk->shard_off, buf, bk->piece, COLL_F32);
    const double dt = engine_now() - t0;
    engine_join_pieces(r->plan, b, buf);
    gpt_round_params(&r->sh->cfg, buf, bk->hi - bk->lo);
    return dt;
}

static float *gathered_alloc(engine_rank_t *r, int b) {
    device_t *dev = device_self();
    float *buf = arena_alloc(dev->arena, dp_gathered_bytes(r->plan, b), MEM_PARAMS,
                             "gathered parameters (ZeRO-3)");
    if (!buf) parity_fatal("device %d: %s", r->device, arena_last_error(dev->arena));
    return buf;
}

/* --overlap-param-gather's prefetch: the gather on the communication
 * thread's group, into the buffer the device thread gave it. */
static void prefetch_job(engine_rank_t *r, int b) {
    r->t_comm += gather_into(r, engine_bucket_comm_group(r, b), b, r->unit_buf[b]);
}

static void prefetch_bucket(engine_rank_t *r, int b) {
    if (r->unit_buf[b]) return; /* gathered, or on its way */
    r->unit_buf[b] = gathered_alloc(r, b);
    r->unit_ticket[b] = engine_comm_push(r, prefetch_job, b);
}

/* The broken variant z3-prefetch-reuse: one buffer for the running unit
 * and the next one's prefetch, which lands before the unit has read it
 * (the race, deterministic: the gather runs here, the unit then computes
 * with the next unit's parameters). Units of different sizes are left. */
static void prefetch_into_running(engine_rank_t *r, int running, int b) {
    if (dp_gathered_bytes(r->plan, running) != dp_gathered_bytes(r->plan, b) || running == b) return;
    r->report->seconds_comm += gather_into(r, engine_bucket_group(r, b), b, r->unit_buf[running]);
}

/* Just in time: a prefetched bucket waited for, else gathered here. */
static void gather_bucket(engine_rank_t *r, int b) {
    const dp_bucket_t *bk = &r->plan->buckets[b];
    if (r->unit_buf[b] && r->unit_ticket[b] >= 0) {
        engine_comm_wait(r, r->unit_ticket[b]);
        r->unit_ticket[b] = -1;
    } else if (!r->unit_buf[b]) {
        r->unit_buf[b] = gathered_alloc(r, b);
        r->report->seconds_comm += gather_into(r, engine_bucket_group(r, b), b, r->unit_buf[b]);
    }
    for (int t = bk->first; t < bk->last; t++)
        r->g->param_ptr[t] = r->unit_buf[b] + (r->g->table.info[t].offset - bk->lo);
}

static void release_bucket(engine_rank_t *r, int b) {
    const dp_bucket_t *bk = &r->plan->buckets[b];
    if (!r->unit_buf[b]) return;
    if (r->unit_ticket[b] >= 0) engine_comm_wait(r, r->unit_ticket[b]); /* never read: still its */
    r->unit_ticket[b] = -1;
    arena_free(device_self()->arena, r->unit_buf[b]);
    r->unit_buf[b] = NULL;
    for (int t = bk->first; t < bk->last; t++) r->g->param_ptr[t] = NULL;
}

/* The unit whose parameters to prefetch as `unit` begins (FSDP's and
 * DeepSpeed ZeRO-3's prefetch of the next module in execution order):
 * the next one of the running pass's chunk, forward up, backward down;
 * none inside a recomputation (the backward's forward gathers and
 * releases its units itself: two units stay the most gathered). */
static int prefetch_unit(const engine_rank_t *r, int unit, int event) {
    if (!r->sh->run->pc.overlap_param_gather) return -1;
    const int dir = event == GPT_FWD_BEGIN ? 1 : -1, next = unit + dir;
    if (dir != r->pass_dir || next < r->pass_lo || next >= r->pass_hi) return -1;
    int first, last;
    if (dir < 0 && gpt_recompute_chunk(&r->sh->cfg, &r->g->shard.units, unit, &first, &last) &&
        unit == last && last > first)
        return -1;
    return next;
}

void engine_unit_event(void *ctx, gpt_t *g, int unit, int event) {
    (void)g;
    engine_rank_t *r = ctx;
    const dp_plan_t *p = r->plan;
    if (p->stage == 3) {
        int bs[DP_UNIT_MAX_BUCKETS], k = dp_unit_buckets(p, unit, bs);
        const int begin = event == GPT_FWD_BEGIN || event == GPT_BWD_BEGIN;
        for (int i = 0; i < k; i++) {
            if (begin) gather_bucket(r, bs[i]);
            else release_bucket(r, bs[i]);
        }
        const int next = begin ? prefetch_unit(r, unit, event) : -1;
        int nb[DP_UNIT_MAX_BUCKETS], n = next >= 0 ? dp_unit_buckets(p, next, nb) : 0;
        for (int i = 0; i < n; i++)
            if (r->sh->run->broken_z3_prefetch_reuse && i < k) prefetch_into_running(r, bs[i], nb[i]);
            else prefetch_bucket(r, nb[i]);
    }
    /* overlap: every bucket this unit's backward finished goes to the
     * communication thread, while the units below it still compute */
    /* (GPT_UNIT_OPEN_SUMS: the unit's backward rounded them already; a
     * B pass leaves the weight gradients to its W: engine_chunk_weights_final) */
    const int early = r->sh->run->broken_zb_early_reduce; /* the broken variant: at B */
    if (event == GPT_BWD_END && r->wstash.in_b && r->wstash.marks) /* where W runs up to */
        r->wstash.marks[r->wstash.pass * r->wstash.units + unit] = linear_wstash_count(linear_wstash_bound());
    if (event == GPT_BWD_END && r->last_micro && !r->unit_sums && (!r->wstash.in_b || early) &&
        r->sh->run->pc.overlap_grad_reduce) {
        int upto = 0;
        while (upto < p->nbuckets && p->buckets[upto].ready_unit >= unit) upto++;
        engine_buckets_ready(r, upto);
    }
}

/* Whether every gradient of bucket b is final (a split backward): each
 * unit it holds tensors of ran its last W. */
static int bucket_final(const engine_rank_t *r, int b) {
    const dp_plan_t *p = r->plan;
    const dp_bucket_t *bk = &p->buckets[b];
    if (bk->ready_unit < 0) return 0; /* the tied embedding: after the stages' all-reduce */
    for (int t = bk->first; t < bk->last; t++)
        if (r->g->table.info[t].numel && !r->wstash.unit_final[p->unit_of_tensor[t]]) return 0;
    return 1;
}

/* A split backward's unit ran its last W: the buckets now final, in
 * order, go to the communication thread while the W passes below it and
 * the later passes run (Megatron-core with delay_wgrad_compute: a
 * parameter's hook fires after its wgrad; buckets go in order, a prefix). */
void engine_weights_final(engine_rank_t *r) {
    if (r->unit_sums || r->sh->run->broken_zb_early_reduce) return;
    int upto = 0;
    while (upto < r->plan->nbuckets && bucket_final(r, upto)) upto++;
    engine_buckets_ready(r, upto);
}

/* ---- the reduced gradients: their dtype, fp16's unscaling ---------------- */

/* The pieces this rank's norm and update read (DDP: every gradient, which
 * every rank updates): gpt_finish_grads, as the golden run's. */
void engine_finish_grads(engine_rank_t *r) {
    const dp_plan_t *p = r->plan;
    const model_config_t *c = &r->sh->cfg;
    if (c->precision != MODEL_FP16 && c->grad_dtype == MODEL_FP32) return;
    if (p->stage == 0) {
        gpt_finish_grads(&r->g->scaler, c, r->g->grads, r->g->table.total);
        return;
    }
    for (int b = 0; b < p->nbuckets; b++) {
        size_t lo, hi;
        dp_piece(p, b, engine_bucket_rank(r, b), &lo, &hi);
        gpt_finish_grads(&r->g->scaler, c, engine_grad_piece(r, b), hi - lo);
    }
}

/* ---- the global norm over shards ------------------------------------ */

float engine_grad_norm(engine_rank_t *r) {
    const dp_plan_t *p = r->plan;
    sacc_t mine;
    xacc_t total;
    sacc_init(&mine);
    /* a tensor several parts hold counts once: tp rank 0's copy of one
     * every tensor-parallel rank holds whole, the first stage's tied
     * embedding (engine_part_extra) */
    const engine_part_t part = engine_part(r->sh, r->part);
    for (int b = 0; b < p->nbuckets; b++) {
        size_t lo, hi;
        dp_piece(p, b, engine_bucket_rank(r, b), &lo, &hi);
        const float *g = engine_grad_piece(r, b);
        /* copies along the bucket's own group's axes are its pieces, each
         * counted by its owner: only copies along other axes are extra
         * (a dense tensor on every ep rank's part: its group spans ep) */
        engine_part_t in_group = part;
        for (int a = 0; a < GRID_NAXES; a++)
            if (p->buckets[b].reduce >> a & 1) in_group.coord[a] = 0;
        for (int t = p->buckets[b].first; t < p->buckets[b].last; t++) {
            const param_info_t *pi = &r->g->table.info[t];
            size_t a = pi->offset > lo ? pi->offset : lo;
            size_t e = pi->offset + pi->numel < hi ? pi->offset + pi->numel : hi;
            /* the broken variant: expert tensors kept on tp rank 0 only */
            const int dropped = (r->sh->run->broken_moe & GPT_BROKEN_MOE_NORM_TP) &&
                                r->tp_rank != 0 && strstr(pi->name, "mlp.experts.");
            if (a < e && !dropped && !engine_part_extra(r->sh, &in_group, t))
                sacc_add_squares(&mine, g + (a - lo), e - a);
        }
    }
    double t0 = engine_now();
    coll_all_reduce(r->world, &mine.x, &total, 1, COLL_XACC, COLL_SUM);
    r->report->seconds_comm += engine_now() - t0;
    return pm_sqrtf(xacc_round_f32(&total));
}

/* ---- the optimizer on this rank's pieces ------------------------------ */

void engine_split_pieces(const dp_plan_t *p, int b, float *buf) {
    const dp_bucket_t *bk = &p->buckets[b];
    if (!bk->cut) return;
    /* engine_join_pieces backwards: the last piece first, the padding zeroed */
    for (int k = bk->n - 1; k >= 1; k--) {
        const size_t len = bk->cut[k + 1] - bk->cut[k];
        memmove(buf + (size_t)k * bk->piece, buf + (bk->cut[k] - bk->lo), len * sizeof(float));
        memset(buf + (size_t)k * bk->piece + len, 0, (bk->piece - len) * sizeof(float));
    }
    memset(buf + (bk->cut[1] - bk->lo), 0, (bk->piece - (bk->cut[1] - bk->lo)) * sizeof(float));
}

void engine_join_pieces(const dp_plan_t *p, int b, float *buf) {
    const dp_bucket_t *bk = &p->buckets[b];
    if (!bk->cut) return; /* even pieces: already back to back */
    /* piece k moves down from k * piece to cut[k] - lo <= k * piece (the
     * pieces before it are at most `piece` long), past every piece still
     * to move: in increasing k, memmove never overwrites one */
    for (int k = 1; k < bk->n; k++)
        memmove(buf + (bk->cut[k] - bk->lo), buf + (size_t)k * bk->piece,
                (bk->cut[k + 1] - bk->cut[k]) * sizeof(float));
}

/* Pads this rank's piece of bucket b to `piece` elements, all-gathers the
 * bucket over `group` through buf ([piece * n]) and writes it back to
 * full[lo, hi) of every rank. Returns the seconds spent communicating. */
static double all_gather_bucket(engine_rank_t *r, group_t *group, float *buf, int b,
                                const float *my_piece, float *full) {
    const dp_plan_t *p = r->plan;
    const dp_bucket_t *bk = &p->buckets[b];
    size_t lo, hi;
    const int rank = engine_bucket_rank(r, b);
    dp_piece(p, b, rank, &lo, &hi);
    /* a group of one whose piece already lies in place: the gather would
     * copy the bucket out and back (1-2% of a dp = 1 step) */
    if (engine_bucket_n(r, b) == 1 && my_piece == full + bk->lo) return 0.0;
    float *send = buf + bk->piece * (size_t)rank; /* in-place form */
    memmove(send, my_piece, (hi - lo) * sizeof(float));
    memset(send + (hi - lo), 0, (bk->piece - (hi - lo)) * sizeof(float));
    double t0 = engine_now();
    coll_all_gather(group, send, buf, bk->piece, COLL_F32);
    double dt = engine_now() - t0;
    engine_join_pieces(p, b, buf);
    memcpy(full + bk->lo, buf, (bk->hi - bk->lo) * sizeof(float));
    return dt;
}

/* overlap_param_gather: bucket b's parameters, on the communication
 * thread (its own group and buffer), while the device thread updates the
 * next buckets. */
void engine_gather_params_job(engine_rank_t *r, int b) {
    size_t lo, hi;
    dp_piece(r->plan, b, engine_bucket_rank(r, b), &lo, &hi);
    r->t_comm += all_gather_bucket(r, engine_bucket_comm_group(r, b), r->comm_gather_buf, b,
                                   r->g->params + lo, r->g->params);
}

void engine_all_gather_grads(engine_rank_t *r) {
    for (int b = 0; b < r->plan->nbuckets; b++)
        r->report->seconds_comm +=
            all_gather_bucket(r, engine_bucket_group(r, b), r->gather_buf, b,
                              engine_grad_piece(r, b), r->g->grads);
}

void engine_update(engine_rank_t *r, float lr, float grad_norm) {
    const dp_plan_t *p = r->plan;
    const model_config_t *c = &r->sh->cfg;
    if (p->stage == 0) { /* DDP: every rank holds every gradient and updates it all */
        gpt_step_update(r->g, lr, grad_norm);
        return;
    }
    const float factor = clip_factor(c, grad_norm);
    const int overlap = p->stage < 3 && r->sh->run->pc.overlap_param_gather;
    if (overlap) engine_comm_use_for_gather(r);
    r->adam_t++;
    engine_offload_begin(r);
    for (int b = 0; b < p->nbuckets; b++) {
        const dp_bucket_t *bk = &p->buckets[b];
        size_t lo, hi;
        dp_piece(p, b, engine_bucket_rank(r, b), &lo, &hi);
        float *gp = engine_grad_piece(r, b);
        float *pp = p->stage == 3 ? r->shard_params + bk->shard_off : r->g->params + lo;
        if (factor != 1.0f)
            for (size_t k = 0; k < hi - lo; k++) gp[k] = gp[k] * factor;
        /* each tensor's part of the piece: whole blocks under adamw8bit (dp.h);
         * fp32 AdamW's m and v where the offload keeps them (offload.c) */
        float *m = NULL, *v = NULL;
        engine_adam8_piece_t q = {0};
        if (!p->qblock) engine_offload_get(r, b, &m, &v);
        else q = engine_offload_get8(r, b);
        dp_run_t run = dp_runs(p, b, lo, hi);
        while (dp_run_next(&r->g->table, &run)) {
            const param_info_t *pi = &r->g->table.info[run.t];
            const size_t x = run.x, n = run.e - run.a;
            const float wd = pi->weight_decay ? c->weight_decay : 0.0f;
            if (p->qblock) {
                adamw8bit_update(pp + x, gp + x, q.mq + x, q.ma + run.q, q.vq + x, q.va + run.q, n,
                                 p->qblock,
                                 r->adam_t, lr, c->beta1, c->beta2, c->eps, wd);
            } else {
                adamw_update(pp + x, gp + x, m + x, v + x, n, r->adam_t, lr, c->beta1, c->beta2,
                             c->eps, wd);
                gpt_round_optim_state(c, pp + x, m + x, v + x, n);
            }
        }
        engine_offload_put(r, b);
        if (overlap)
            engine_buckets_ready(r, b + 1);
        else if (p->stage < 3)
            r->report->seconds_comm +=
                all_gather_bucket(r, engine_bucket_group(r, b), r->gather_buf, b, r->g->params + lo,
                                  r->g->params);
    }
    engine_offload_end(r);
    if (overlap) {
        engine_comm_finish(r);
        engine_comm_use_for_reduce(r);
        r->report->seconds_comm += r->t_comm;
        r->t_comm = 0;
    }
    gpt_params_refresh(r->g); /* mixed precision: the compute copy (ZeRO-3: at each gather) */
}
