/* rank.c - a device's set-up and teardown: its replica (shard, slots,
 * the stage's schedule), the features its layout switches on (features.c),
 * the buffers beside the replica (one table, engine_rank_buffers, for
 * setup and the estimate), and the golden initial values.
 *
 *   engine_setup_rank:    rank_replica -> engine_features_setup ->
 *                         rank_alloc_buffers -> rank_init_params -> checkpoint
 *   engine_teardown_rank: peaks -> engine_features_teardown -> the rest
 */
#include <stdlib.h>
#include <string.h>

#include "model/gpt.h"
#include "engine_internal.h"

unsigned engine_replica_omits(int stage) {
    unsigned omit = GPT_NO_INIT; /* parameters copied from params_full */
    if (stage >= 1) omit |= GPT_NO_OPTIMIZER;
    if (stage >= 2) omit |= GPT_NO_GRADS;
    if (stage >= 3) omit |= GPT_NO_PARAMS;
    return omit;
}

/* Open sums only where a reduction is open (DESIGN.md): a unit's
 * gradients are complete once its backward has run on the step's last
 * microbatch. With one microbatch, a gradient group of one (no bucket
 * waits for a reduce-scatter) and one stage (no tied-embedding
 * all-reduce after the schedule), they are rounded right then, where
 * the group of one's reduction would round them (ZeRO >= 2 keeps no
 * replica gradients: not there), and the units take turns over one
 * unit's worth of open sums. With more microbatches every sum stays
 * open across them: that is the open reduction. */
unsigned engine_replica_flags(const pconfig_t *pc, const pp_plan_t *pp, int stage) {
    const int per_unit = pconfig_grad_ranks(pc) == 1 && pp->pp == 1 && pp->m == 1 && stage < 2;
    return engine_replica_omits(stage) | (per_unit ? (unsigned)GPT_UNIT_OPEN_SUMS : 0u);
}

void engine_rank_buffers(const dp_plan_t *p, const pconfig_t *pc, engine_rank_t *r, engine_buf_t out[ENGINE_NBUFS]) {
    size_t piece_max = 0;
    for (int b = 0; b < p->nbuckets; b++)
        if (p->buckets[b].piece > piece_max) piece_max = p->buckets[b].piece;
    const size_t S = p->shard_len ? p->shard_len : 1, n = (size_t)p->dp;
    /* adamw8bit: a byte an element, and each block's absmax (dp.h) */
    const int q8 = p->qblock > 0, nvme = pc->offload == PC_OFFLOAD_NVME;
    const int opt = p->stage >= 1 && !nvme, host = pc->offload == PC_OFFLOAD_CPU;
    const size_t QS = (p->shard_qlen ? p->shard_qlen : 1) * sizeof(float);
    /* the exact reduce-scatter's rounds (reduce.c): n blocks of at most `round` */
    const size_t round = engine_round_elems(piece_max, p->dp);
#define F(field) (r ? (void **)&r->field : NULL)
    const engine_buf_t bufs[ENGINE_NBUFS] = {
        {F(shard_m), S * sizeof(float), MEM_OPTIMIZER, "AdamW m shard", opt && !q8, host},
        {F(shard_v), S * sizeof(float), MEM_OPTIMIZER, "AdamW v shard", opt && !q8, host},
        {F(shard_mq), S, MEM_OPTIMIZER, "AdamW m shard codes (8-bit)", opt && q8, host},
        {F(shard_vq), S, MEM_OPTIMIZER, "AdamW v shard codes (8-bit)", opt && q8, host},
        {F(shard_ma), QS, MEM_OPTIMIZER, "AdamW m shard block absmax", opt && q8, host},
        {F(shard_va), QS, MEM_OPTIMIZER, "AdamW v shard block absmax", opt && q8, host},
        /* nvme: two buckets' pieces of m and v between the file and the
         * update (one updated while the next is read, offload.c) */
        {F(off.m), 2 * engine_offload_slot_floats(p) * sizeof(float), MEM_OPTIMIZER,
         "AdamW m staging (nvme offload)", nvme, 0},
        {F(off.v), 2 * engine_offload_slot_floats(p) * sizeof(float), MEM_OPTIMIZER,
         "AdamW v staging (nvme offload)", nvme, 0},
        {F(shard_grads), S * sizeof(float), MEM_GRADS, "gradient shard", p->stage >= 2, 0},
        {F(shard_params), S * sizeof(float), MEM_PARAMS, "parameter shard", p->stage >= 3, 0},
        {F(scratch_mem[0]), (round * n + 1) * sizeof(double), MEM_COMM, "exact sums being reduced", 1, 0},
        {F(scratch_mem[1]), (round + 1) * sizeof(double), MEM_COMM, "exact sums being reduced", 1, 0},
        {F(gather_buf), (piece_max * n + 1) * sizeof(float), MEM_COMM, "all-gather buffer", 1, 0},
        {F(comm_gather_buf), (piece_max * n + 1) * sizeof(float), MEM_COMM,
         "all-gather buffer (communication thread)", pc->overlap_param_gather && p->stage < 3, 0},
    };
#undef F
    memcpy(out, bufs, sizeof bufs);
}

/* The replica's shard: this device's place on the grid and its groups,
 * and the broken variants the model's own code runs. */
static gpt_shard_t rank_shard(const engine_rank_t *r) {
    const engine_shared_t *sh = r->sh;
    const engine_run_t *run = sh->run;
    const engine_dev_t gd = engine_device(sh, r->device);
    gpt_shard_t shard = {
        .tp = gd.size[GRID_TP], .tp_rank = r->tp_rank, .sp = run->pc.sequence_parallel,
        .tp_group = r->tp_group,
        .broken = (run->broken_tp_fp32_sums ? GPT_BROKEN_TP_FP32_SUMS : 0u) |
                  (run->broken_tp_vocab_pad ? GPT_BROKEN_TP_VOCAB_PAD : 0u) |
                  (run->broken_cp_online_softmax ? GPT_BROKEN_CP_ONLINE_SOFTMAX : 0u) |
                  (run->broken_cp_causal_ring ? GPT_BROKEN_CP_CAUSAL_RING : 0u) |
                  run->broken_moe | run->broken_tp2d |
                  (run->broken_check & ENGINE_BROKEN_TP_INPUT_GRAD ? GPT_BROKEN_TP_INPUT_GRAD : 0u),
        .units = sh->pp.units[r->stage], .row_linears = run->pc.tp_row_linears,
        .cp = gd.size[GRID_CP], .cp_rank = r->cp_rank,
        .cp_comm = run->pc.cp_comm ? CP_ULYSSES : CP_RING, .cp_group = r->cp_group,
        .ep = gd.size[GRID_EP], .ep_rank = r->ep_rank, .ep_group = r->ep_group,
        .etp_group = r->etp_group,
        .expert_tp = run->pc.etp > 1 ? run->pc.etp : 0, .expert_fold = pconfig_ep_folded(&run->pc),
        .expert_fold_n = pconfig_ep_fold_n(&run->pc), .fold_group = r->fold_group,
        .tp_mode = run->pc.tp_mode, .tp_row = gd.coord[GRID_TP2], .tp_depth = gd.size[GRID_TP3],
        .tp_dep = gd.coord[GRID_TP3],
        .tp_col_group = gd.size[GRID_TP2] > 1 ? gd.group[GRID_TP2] : NULL,
        .tp_dep_group = gd.size[GRID_TP3] > 1 ? gd.group[GRID_TP3] : NULL,
        .tp_vec_group = {r->tp_vec[0], r->tp_vec[1]},
        .on_grid = 1};
    for (int a = 0; a < GRID_NAXES; a++)
        shard.grid_sizes[a] = gd.size[a], shard.grid_coord[a] = gd.coord[a];
    return shard;
}

/* The replica with the stage's slots, and the stage's schedule. */
static int rank_replica(engine_rank_t *r, device_t *dev) {
    engine_shared_t *sh = r->sh;
    perr_t err;
    const gpt_shard_t shard = rank_shard(r);
    r->report->pp_stage = r->stage;
    r->report->pp_slots = engine_stage_slots(&sh->pp, r->stage, r->slot_first);
    const unsigned flags = engine_replica_flags(&sh->run->pc, &sh->pp, r->plan->stage);
    r->unit_sums = (flags & GPT_UNIT_OPEN_SUMS) != 0;
    if (gpt_new_tp(&r->g, &sh->cfg, &shard, flags, dev->arena, &err) ||
        gpt_set_stage_slots(r->g, r->report->pp_slots, &err)) {
        char msg[sizeof err.msg + 64];
        snprintf(msg, sizeof msg, "device %d: %s", r->device, err.msg);
        engine_fail(sh, msg);
        return -1;
    }
    r->ops = calloc((size_t)pp_max_ops(&sh->pp), sizeof *r->ops);
    r->slot_of = calloc((size_t)sh->pp.m * (size_t)sh->pp.v, sizeof *r->slot_of);
    if (!r->ops || !r->slot_of) {
        engine_fail(sh, "dp: out of memory for the schedule");
        return -1;
    }
    r->nops = pp_schedule(&sh->pp, r->stage, r->ops);
    return 0;
}

/* The buffer table's buffers, each from the device's arena or the host's. */
static int rank_alloc_buffers(engine_rank_t *r, device_t *dev) {
    engine_buf_t bufs[ENGINE_NBUFS];
    engine_rank_buffers(r->plan, &r->sh->run->pc, r, bufs);
    for (int k = 0; k < ENGINE_NBUFS; k++) {
        if (!bufs[k].want) continue;
        arena_t *where = bufs[k].host ? r->off.host_arena : dev->arena;
        *bufs[k].ptr = arena_alloc(where, bufs[k].bytes, bufs[k].cat, bufs[k].name);
        if (!*bufs[k].ptr) {
            char msg[4096];
            snprintf(msg, sizeof msg, "device %d%s: %s", r->device,
                     bufs[k].host ? " (its host arena)" : "", arena_last_error(where));
            engine_fail(r->sh, msg);
            return -1;
        }
    }
    xvec_init_with(&r->scratch[0], 0, r->scratch_mem[0]);
    xvec_init_with(&r->scratch[1], 0, r->scratch_mem[1]);
    r->unit_buf = calloc((size_t)r->plan->nbuckets, sizeof(float *));
    r->unit_ticket = malloc(((size_t)r->plan->nbuckets + 1) * sizeof(long));
    for (int b = 0; r->unit_ticket && b < r->plan->nbuckets; b++) r->unit_ticket[b] = -1;
    if (!r->unit_buf || !r->unit_ticket) {
        engine_fail(r->sh, "dp: out of memory");
        return -1;
    }
    return 0;
}

/* The golden initial values (position-keyed, I3), computed once by
 * engine_train as DDP broadcasts rank 0's: this tensor-parallel rank's
 * blocks, whole or cut to this data-parallel shard. */
static void rank_init_params(engine_rank_t *r) {
    const dp_plan_t *p = r->plan;
    const float *init = r->sh->params_local[r->part];
    if (p->stage < 3) {
        memcpy(r->g->params, init, r->g->table.total * sizeof(float));
        gpt_params_refresh(r->g); /* mixed precision: the compute copy */
        return;
    }
    for (int b = 0; b < p->nbuckets; b++) {
        size_t lo, hi;
        dp_piece(p, b, engine_bucket_rank(r, b), &lo, &hi);
        memcpy(r->shard_params + p->buckets[b].shard_off, init + lo, (hi - lo) * sizeof(float));
    }
}

int engine_setup_rank(engine_rank_t *r, device_t *dev) {
    if (rank_replica(r, dev) || engine_features_setup(r, dev) || rank_alloc_buffers(r, dev))
        return -1;
    rank_init_params(r);
    engine_ckpt_setup_rank(r); /* a resumed run: the checkpoint's AdamW state */
    return 0;
}

void engine_teardown_rank(engine_rank_t *r, device_t *dev) {
    device_report_t *rep = r->report;
    for (int c = 0; c < MEM_NCAT; c++) rep->peak[c] = arena_high_water(dev->arena, (mem_cat_t)c);
    rep->peak_total = arena_high_water(dev->arena, MEM_NCAT);
    if (r->off.host_arena) rep->host_peak = arena_high_water(r->off.host_arena, MEM_NCAT);
    engine_features_teardown(r);
    xvec_free(&r->scratch[0]);
    xvec_free(&r->scratch[1]);
    free(r->unit_buf);
    free(r->unit_ticket);
    free(r->ops);
    free(r->slot_of);
    gpt_free(r->g);
    r->g = NULL;
}
