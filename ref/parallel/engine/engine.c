/* engine.c - the driver every layout runs on (engine.h): the run's set-up
 * (grid, groups, each stage's tables and data-parallel plan), each
 * device's main (its set-up and teardown: rank.c, features.c, links.c),
 * and its step:
 *
 *   this stage's schedule over this rank's microbatches    (schedule.c):
 *       forward + backward into open exact sums      (the model's code)
 *       [ZeRO-3: each unit's parameters gathered before it runs, freed after]
 *       [last microbatch, overlap: buckets reduced as units finish]
 *   exact reduce-scatter of every remaining bucket    (reduce.c)
 *   DDP: all-gather the rounded gradients
 *   loss and gradient norm: exact all-reduces of open sums
 *   clip + AdamW on this rank's shard; ZeRO-1/2: all-gather the parameters
 *                                                     (optimizer.c)
 *
 * For dumps and the checker, ranks also copy their batch slices, gradient
 * pieces and parameter pieces into run-wide global tensors, and check
 * that replicated tensors agree on every device (collect.c).
 *
 * A rank's microbatches split its sequences as evenly as possible
 * (pconfig.h): the replica is sized for the largest, which need not
 * divide the batch, and need not be the golden run's microbatch.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "model/gpt.h"
#include "engine_internal.h"
#include "parity/corpus.h"
#include "parity/dump.h"
#include "parity/layers.h"

double engine_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

void engine_fail(engine_shared_t *sh, const char *msg) {
    pthread_mutex_lock(&sh->collect_lock);
    if (!sh->failed) {
        size_t len = strlen(msg) < sizeof sh->err.msg - 1 ? strlen(msg) : sizeof sh->err.msg - 1;
        memcpy(sh->err.msg, msg, len);
        sh->err.msg[len] = 0;
    }
    sh->failed = 1;
    pthread_mutex_unlock(&sh->collect_lock);
}

/* ---- one step ------------------------------------------------------------ */

/* The negative controls that act on the optimizer's results: a parameter
 * replica that drifts (--test-broken replica:R), and the checker's
 * optimizer-state controls (ENGINE_BROKEN_*). */
static void flip_bit(float *x) {
    uint32_t u;
    memcpy(&u, x, sizeof u);
    u ^= 1u;
    memcpy(x, &u, sizeof u);
}

static void break_after_update(engine_rank_t *r, int64_t step) {
    const engine_run_t *run = r->sh->run;
    if (run->broken_replica == r->device + 1) flip_bit(r->g->params + r->g->table.total / 2);
    if ((run->broken_check & ENGINE_BROKEN_ADAM_REPLICA) && r->device == 1 && r->g->adam_m)
        flip_bit(r->g->adam_m + r->g->table.total / 3);
    if ((run->broken_check & ENGINE_BROKEN_ZERO_SHARD) && r->rank == 1 && r->shard_v &&
        step == engine_first_step(run) + run->steps - 1 && r->plan->shard_len > 0)
        flip_bit(r->shard_v + r->plan->shard_len / 2);
}

/* The step's mean token loss: the exact sum of every counted token's
 * loss over the devices that hold them. */
static float step_loss(engine_rank_t *r) {
    xacc_t loss;
    if (r->sh->pp.pp == 1 && !gpt_tp_cuts_batch(r->g)) {
        coll_all_reduce(r->group, &r->g->loss_acc.x, &loss, 1, COLL_XACC, COLL_SUM);
    } else { /* the last stage's tokens, once per tp group (2-D: per row): over every device */
        xacc_t mine;
        xacc_init(&mine);
        if (gpt_counts_loss(r->g)) mine = r->g->loss_acc.x;
        coll_all_reduce(r->world, &mine, &loss, 1, COLL_XACC, COLL_SUM);
    }
    return mean_token_loss(&r->sh->cfg, xacc_round_f32(&loss));
}

/* A collected step, after the update: the scalars, parameters and AdamW
 * state reassembled, checked across replicas and, at device 0, dumped. */
static void collect_after_update(engine_rank_t *r, int64_t step, gpt_step_stats_t st) {
    engine_shared_t *sh = r->sh;
    r->step_stats = st;
    engine_note_scalars(r, &r->step_stats);
    for (collect_kind_t k = COLLECT_PARAM; k < COLLECT_NKINDS; k++) engine_collect_kind(r, step, k);
    engine_merge_step(r); /* every device's scalars and batch tensors, at device 0 */
    if (r->device != 0) return;
    engine_check_scalars(sh, step);
    gpt_t view = engine_global_view(sh, r->g);
    view.adam_t = engine_adam_t(r);
    if (r->moe.counts) view.moe = r->moe.sum; /* the run's, not device 0's */
    dump_sources_t src;
    engine_collect_sources(sh, &src);
    dump_set_sources(sh->run->dump, &src);
    perr_t err;
    if (dump_end_step(sh->run->dump, &view, &st, &err)) engine_fail(sh, err.msg);
}

/* One step on one device; returns whether its loss or gradient norm is
 * not finite (the same answer on every device). */
static int run_step(engine_rank_t *r, int64_t step, int collect) {
    engine_shared_t *sh = r->sh;
    engine_run_t *run = sh->run;
    const model_config_t *c = &sh->cfg;
    gpt_observer_t obs = {r, collect ? engine_collect_batch : NULL, NULL, engine_unit_event};
    /* device 0, or across processes each process's device: its dump and copies */
    if (collect && (r->device == 0 || runtime_run_distributed())) {
        dump_begin_step(run->dump, step, &sh->dump_obs);
        engine_collect_reset(sh); /* nothing written yet: coverage */
        engine_zero_for_merge(sh);
    }
    device_note_step(step);
    coll_barrier(r->world); /* the dump is ready for everyone's slices */
    const double step_start = engine_now();
    gpt_step_begin(r->g);
    double t0 = engine_now(), comm0 = r->report->seconds_comm;
    engine_run_schedule(r, step, &obs);
    r->report->pp_busy += r->busy;
    /* reductions overlapped with these microbatches run on the
     * communication thread and are not part of this wall time's work */
    r->report->seconds_compute += engine_now() - t0 - (r->report->seconds_comm - comm0);
    t0 = engine_now();
    device_note_microbatch(-1, -1);
    device_note_pass(DEVICE_PASS_REDUCE, -1);
    engine_reduce_pending(r);
    if (r->plan->stage == 0) engine_all_gather_grads(r);
    engine_span(r, "gradient reduction", "exact-sum", t0, -1, -1);
    const float loss_value = step_loss(r);
    if (r->moe.counts) engine_moe_stats(r, step);
    double o0 = engine_now(), oc0 = r->report->seconds_comm;
    const float scale = c->precision == MODEL_FP16 ? r->g->scaler.scale : 0.0f;
    /* the broken variant: the norm of still-scaled gradients (PyTorch's
     * GradScaler docs: unscale before clipping); it finishes them after */
    const int clip_scaled = run->broken_fp16_clip_scaled;
    if (!clip_scaled) engine_finish_grads(r);
    const float norm = engine_grad_norm(r);
    if (clip_scaled) engine_finish_grads(r);
    r->report->seconds_optimizer += engine_now() - o0 - (r->report->seconds_comm - oc0);
    engine_span(r, "gradient norm", "collective", o0, -1, -1);
    /* fp16: an overflowing step is skipped alike on every rank (the norm is
     * the exact global one) and the schedule counts updates */
    const int skipped = loss_scaler_step(&r->g->scaler, c, !isfinite(norm));
    const float lr = lr_schedule(c, step - r->g->scaler.skipped + skipped);
    if (collect) {
        /* pieces -> this tensor-parallel rank's tensors -> the global ones */
        engine_collect_kind(r, step, COLLECT_GRAD);
        if (r->device == 0) {
            gpt_t view = engine_global_view(sh, r->g);
            sh->dump_obs.grads_ready(sh->dump_obs.ctx, &view);
        }
    }
    o0 = engine_now(), oc0 = r->report->seconds_comm;
    device_note_pass(DEVICE_PASS_OPTIMIZER, -1);
    if (!skipped) engine_update(r, lr, norm);
    r->report->seconds_optimizer += engine_now() - o0 - (r->report->seconds_comm - oc0);
    engine_span(r, "optimizer", "optimizer", o0, -1, -1);
    break_after_update(r, step);
    const gpt_step_stats_t st = {loss_value, lr, norm, 0.0, scale, skipped};
    if (collect) collect_after_update(r, step, st);
    /* as PyTorch's DDP anchor times a step: barrier to barrier */
    engine_merge_flush(r);
    /* the pipeline's span: from this device's start (all start together,
     * after the step's barrier) to the last device's last backward; the
     * next step's barrier keeps sched_end until everyone has read it */
    double flush = 0;
    for (int d = 0; d < sh->world; d++)
        if (sh->sched_end[d] > flush) flush = sh->sched_end[d];
    r->report->pp_span += flush - r->sched_start;
    if (r->device == 0 && run->stats)
        run->stats[step - engine_first_step(run)] =
            (gpt_step_stats_t){loss_value, lr, norm, engine_now() - step_start, scale, skipped};
    return !skipped && (!isfinite(loss_value) || !isfinite(norm));
}

static void device_main(device_t *dev, void *arg) {
    engine_shared_t *sh = arg;
    engine_rank_t *r = &sh->ranks[dev->rank];
    coll_set_algo(sh->run->algo);
    int32_t ok = engine_setup_rank(r, dev) == 0, all_ok;
    const pconfig_t *pc = &sh->run->pc;
    if (ok && (pc->overlap_grad_reduce || pc->overlap_param_gather) && engine_comm_start(r, dev)) {
        engine_fail(sh, "dp: cannot start a communication thread");
        ok = 0;
    }
    coll_all_reduce(r->world, &ok, &all_ok, 1, COLL_I32, COLL_MIN);
    if (all_ok) {
        engine_run_t *run = sh->run;
        if (run->dump && r->device == 0) {
            gpt_t view = engine_global_view(sh, r->g);
            perr_t err;
            if (dump_add_init(run->dump, &view, &err)) engine_fail(sh, err.msg);
        }
        coll_counters_reset(dev->rank);
        int64_t s = 0;
        while (s < run->steps) {
            const int stop = run_step(r, engine_first_step(run) + s,
                                      run->dump && (!run->dump_step || run->dump_step[s]));
            s++;
            if (stop && run->stop_nonfinite) break;
        }
        if (r->device == 0) run->steps_run = (int)s;
        coll_counters_get(dev->rank, &r->report->comm);
        engine_ckpt_collect(r); /* --save: the final state, reassembled */
    }
    engine_comm_stop(r);
    engine_teardown_rank(r, dev);
    engine_merge_run(r, r->report - r->device); /* reports[], the disagreements */
}

/* ---- the run ---------------------------------------------------------------- */

void engine_replica_config(const model_config_t *model, const pconfig_t *pc, model_config_t *out) {
    *out = *model;
    out->global_batch = pc->global_batch;
    out->micro_batch = pc->micro_batch;
    out->recompute = pc->recompute;
    out->recompute_block = pc->recompute_block;
    out->recompute_layers = pc->recompute_layers;
}

/* The parts' blocks of the golden initial parameters. */
static int init_local(engine_shared_t *sh, perr_t *err) {
    sh->params_local = engine_part_buffers(sh);
    sh->grads_local = engine_part_buffers(sh);
    if (!sh->params_local || !sh->grads_local) return perr_set(err, "dp: out of memory");
    engine_cut_parts(sh, sh->params_full, sh->params_local);
    if (sh->run->dump) { /* a dump: AdamW's state and every kind's sources too */
        if (!sh->m_local) sh->m_local = engine_part_buffers(sh);
        if (!sh->v_local) sh->v_local = engine_part_buffers(sh);
        sh->m_full = calloc(sh->global.total + 1, sizeof(float));
        sh->v_full = calloc(sh->global.total + 1, sizeof(float));
        if (!sh->m_local || !sh->v_local || !sh->m_full || !sh->v_full)
            return perr_set(err, "dp: out of memory");
    }
    float **local[COLLECT_NKINDS] = {sh->grads_local, sh->params_local, sh->m_local, sh->v_local};
    float *full[COLLECT_NKINDS] = {sh->grads_full, sh->params_full, sh->m_full, sh->v_full};
    for (int k = 0; k < COLLECT_NKINDS; k++) {
        sh->local[k] = local[k], sh->full[k] = full[k];
        if (!sh->run->dump) continue;
        sh->src_local[k] = engine_part_sources(sh);
        sh->src_full[k] = calloc(sh->global.total + 1, sizeof(int32_t));
        if (!sh->src_local[k] || !sh->src_full[k]) return perr_set(err, "dp: out of memory");
    }
    return 0;
}

static void free_local(engine_shared_t *sh) {
    engine_part_buffers_free(sh, sh->params_local);
    engine_part_buffers_free(sh, sh->grads_local);
    for (int k = 0; k < COLLECT_NKINDS; k++) {
        engine_part_sources_free(sh, sh->src_local[k]);
        free(sh->src_full[k]);
    }
    free(sh->m_full);
    free(sh->v_full);
}

int engine_check_model(const model_config_t *model, const pconfig_t *pc, perr_t *err) {
    if ((pc->given & PC_GIVEN_ETP) && model->moe_experts <= 0)
        return perr_set(err, "expert-tensor-parallel-size: %d, but model %s has no experts (a dense "
                             "MLP in every layer; --num-experts E)", pc->etp, model->name);
    const unsigned enc[2] = {PC_GIVEN_ENCODER_TP, PC_GIVEN_ENCODER_PP};
    const char *enc_flag[2] = {"encoder-tensor-model-parallel-size",
                               "encoder-pipeline-model-parallel-size"};
    for (int k = 0; k < 2; k++)
        if ((pc->given & enc[k]) && model->arch == MODEL_GPT)
            return perr_set(err, "%s: model %s is decoder-only: a GPT (arch gpt) has no encoder",
                            enc_flag[k], model->name);
    if (pc->ep > 1 && model->moe_experts <= 0)
        return perr_set(err, "expert-model-parallel-size: %d needs mixture-of-experts layers "
                             "(--num-experts E)", pc->ep);
    if (pc->ep > 1 && model->moe_experts % pc->ep)
        return perr_set(err, "expert-model-parallel-size: %d must divide the %d experts "
                             "(--num-experts): each expert-parallel rank holds whole experts",
                        pc->ep, model->moe_experts);
    return 0;
}

/* The broken variants' preconditions: each names what it needs. */
static int check_broken(const engine_run_t *run, int world, perr_t *err) {
    const pconfig_t *pc = &run->pc;
    if (run->broken_replica && (run->broken_replica > world || pc->zero_stage == 3))
        return perr_set(err, "broken_replica: %s", pc->zero_stage == 3
                            ? "ZeRO-3 keeps no parameter replicas to perturb"
                            : "no such device (expected a rank below the world size)");
    if ((run->broken_pp_mask_key || run->broken_pp_tied_grad) && pc->pp == 1)
        return perr_set(err, "broken_pp_%s: needs pipeline-model-parallel-size > 1",
                        run->broken_pp_mask_key ? "mask_key" : "tied_grad");
    if (run->broken_cp_online_softmax && (pc->cp == 1 || pc->cp_comm))
        return perr_set(err, "broken_cp_online_softmax: needs the ring (context-parallel-size > 1, "
                             "--cp-comm-type p2p)");
    if ((run->broken_pp_tied_grad || run->broken_encdec_tied_cuts) && !run->model.tied)
        return perr_set(err, "broken_%s: the model's head is not tied to the embedding",
                        run->broken_pp_tied_grad ? "pp_tied_grad" : "encdec_tied_cuts");
    if (run->broken_encdec_tied_cuts && !pconfig_hetero(pc))
        return perr_set(err, "broken_encdec_tied_cuts: needs an encoder mesh of etp < tp");
    return 0;
}

/* Where the devices sit (one grid, or an encoder mesh beside the
 * decoder's), the pipeline's plan, the golden table, the stages' tables
 * and plans, and the golden initial parameters cut to the parts. */
static int build_layout(engine_shared_t *sh, perr_t *err) {
    const engine_run_t *run = sh->run;
    const pconfig_t *pc = &run->pc;
    /* expert parallelism takes its ranks from the data-parallel ones
     * (Megatron's rule): the grid's ep axis times its dp axis is dp;
     * folded onto the tp ranks, the grid has no ep axis */
    int sizes[GRID_NAXES];
    pconfig_grid_sizes(pc, sizes);
    if (pconfig_hetero(pc)) { /* an encoder mesh beside the decoder's */
        if (engine_meshes_init(sh, err)) return -1;
    } else {
        if (grid_init_mapped(&sh->grid, pc->order, sizes, pc->rank_list, pc->n_rank_list, err))
            return -1;
        sh->have_grid = 1;
        sh->world = sh->grid.world;
    }
    if (model_config_validate_replica(&sh->cfg, err) || pp_plan_build(&sh->pp, &sh->cfg, pc, err) ||
        param_table_build(&sh->global, &sh->cfg, err))
        return -1;
    sh->have_global = 1;
    if (engine_build_stages(sh, err)) return -1; /* tables, parts, gradient group, plans */
    sh->params_full = calloc(sh->global.total + 1, sizeof(float));
    sh->grads_full = calloc(sh->global.total + 1, sizeof(float));
    if (!sh->params_full || !sh->grads_full) return perr_set(err, "dp: out of memory");
    params_init(&sh->global, sh->cfg.seed, sh->params_full);
    if (engine_ckpt_prepare(sh, err)) return -1; /* --load: the checkpoint's state instead */
    return init_local(sh, err);
}

/* The run's groups beyond the grid's own: the gradient groups (and their
 * communication thread's copies), 3-D tensor parallelism's vector groups. */
typedef struct {
    engine_groups_t main[ENGINE_MAX_GROUPS], grad[ENGINE_MAX_GROUPS];
    engine_groups_t vec[2]; /* 3-D tensor parallelism's (tp3d.c) */
    engine_groups_t etp;    /* expert tensor parallelism over etp < tp ranks */
    engine_groups_t fold;   /* ep folded onto ep < tp tp ranks */
} run_groups_t;

/* Runs of n consecutive tp ranks of every tp group (1 < n < tp; else no
 * groups): expert tensor parallelism over etp < tp ranks, and ep folded
 * onto ep < tp of them (Megatron's expert grid, etp fastest, then ep). */
static int make_tp_runs(engine_shared_t *sh, int n, const char *name, engine_groups_t *out,
                        perr_t *err) {
    memset(out, 0, sizeof *out);
    if (n <= 1 || n >= sh->run->pc.tp) return 0;
    out->groups = calloc((size_t)sh->world, sizeof *out->groups);
    out->id_of = calloc((size_t)sh->world, sizeof *out->id_of);
    if (!out->groups || !out->id_of) return perr_set(err, "dp: out of memory");
    for (int d = 0; d < sh->world; d++) {
        const engine_dev_t gd = engine_device(sh, d);
        const int t = gd.coord[GRID_TP];
        if (t % n) continue;
        int ranks[PARITY_MAX_DEVICES];
        for (int k = 0; k < n; k++) ranks[k] = group_world_rank(gd.group[GRID_TP], t + k);
        char gname[32];
        snprintf(gname, sizeof gname, "%s%d", name, out->n);
        if (!(out->groups[out->n] = group_create(ranks, n, gname, err))) return -1;
        for (int k = 0; k < n; k++) out->id_of[ranks[k]] = out->n;
        out->n++;
    }
    return 0;
}

static int make_groups(engine_shared_t *sh, run_groups_t *G, perr_t *err) {
    /* the ranks that split a step's tokens sum every weight gradient: the
     * token axes the placements replicate it over (engine_build_stages:
     * data times context parallel, Megatron's data-parallel group with
     * context parallelism); gradient reductions may run on a communication
     * thread, so they get groups of their own */
    for (int k = 0; k < sh->ngroups; k++)
        if (engine_groups_create(sh, sh->grad_name[k], "dp", &G->main[k], err) ||
            engine_groups_create(sh, sh->grad_name[k], "dp-grads", &G->grad[k], err))
            return -1;
    const pconfig_t *pc = &sh->run->pc;
    if (make_tp_runs(sh, pc->etp, "etp", &G->etp, err) ||
        make_tp_runs(sh, pconfig_ep_folded(pc) == GPT_EXPERT_FOLD_TP ? pconfig_ep_fold_n(pc) : 0,
                     "ep-fold", &G->fold, err))
        return -1;
    if (sh->run->pc.tp_mode == PC_TP_3D &&
        (engine_groups_create(sh, "tp2-tp3", "tp-vec", &G->vec[0], err) ||
         engine_groups_create(sh, "tp-tp3", "tp-vec", &G->vec[1], err)))
        return -1;
    return 0;
}

static void free_groups(run_groups_t *G) {
    for (int k = 0; k < 2; k++) engine_groups_free(&G->vec[k]);
    engine_groups_free(&G->etp);
    engine_groups_free(&G->fold);
    for (int k = 0; k < ENGINE_MAX_GROUPS; k++) {
        engine_groups_free(&G->grad[k]);
        engine_groups_free(&G->main[k]);
    }
}

/* Every device's rank: its coordinates, groups, part and plan. */
static void init_ranks(engine_shared_t *sh, int world, const run_groups_t *G, trace_buf_t *traces,
                       device_report_t *reports) {
    const pconfig_t *pc = &sh->run->pc;
    int sizes[GRID_NAXES];
    pconfig_grid_sizes(pc, sizes);
    const int ep = sizes[GRID_EP], cp = pc->cp;
    const double origin = engine_now();
    group_t *all = sh->meshes ? sh->meshes->all : sh->grid.all;
    for (int d = 0; d < world; d++) {
        const engine_dev_t gd = engine_device(sh, d);
        device_note_coords(d, gd.coord, gd.size); /* for debuggers: parity devices */
        const int gid = G->main[0].id_of[d];
        const int stage = gd.coord[GRID_PP], dtp = gd.size[GRID_TP];
        if (traces) trace_buf_init(&traces[d], origin);
        sh->ranks[d] = (engine_rank_t){.sh = sh, .rank = group_index_of(G->main[0].groups[gid], d),
                                   .n = sh->grad_n[0],
                                   .data_rank = gd.coord[GRID_DP] * ep + gd.coord[GRID_EP],
                                   .data_n = pc->dp, .cp_rank = gd.coord[GRID_CP],
                                   .ep_rank = gd.coord[GRID_EP],
                                   .ep_group = ep > 1 ? gd.group[GRID_EP] : NULL,
                                   .cp_group = cp > 1 ? gd.group[GRID_CP] : NULL, .device = d,
                                   .tp_rank = gd.coord[GRID_TP],
                                   .tp_group = dtp > 1 ? gd.group[GRID_TP] : NULL,
                                   .stage = stage, .part = sh->part_of[d],
                                   .plan = &sh->plans[sh->part_of[d]], .pp_group = gd.group[GRID_PP],
                                   .emb_group = engine_emb_group_of(sh, d),
                                   .trace = traces ? &traces[d] : NULL,
                                   .world = all, .group = G->main[0].groups[gid],
                                   .grad_group = G->grad[0].groups[gid], .report = &reports[d]};
        if (G->etp.groups) sh->ranks[d].etp_group = G->etp.groups[G->etp.id_of[d]];
        if (G->fold.groups) sh->ranks[d].fold_group = G->fold.groups[G->fold.id_of[d]];
        for (int k = 0; k < 2 && G->vec[k].groups; k++)
            sh->ranks[d].tp_vec[k] = G->vec[k].groups[G->vec[k].id_of[d]];
        for (int k = 0; k < sh->ngroups; k++) {
            engine_rank_t *r = &sh->ranks[d];
            const int id = G->main[k].id_of[d];
            r->groups[k] = G->main[k].groups[id], r->grad_groups[k] = G->grad[k].groups[id];
            r->grank[k] = group_index_of(G->main[k].groups[id], d), r->gn[k] = sh->grad_n[k];
        }
        memset(&reports[d], 0, sizeof reports[d]);
    }
}

/* Everything build_layout made (after a failure part way too). */
static void free_layout(engine_shared_t *sh) {
    engine_free_stages(sh);
    if (sh->have_grid) grid_free(&sh->grid);
    engine_meshes_free(sh);
    if (sh->have_global) param_table_free(&sh->global);
    free_local(sh);
    engine_ckpt_free(sh);
    free(sh->params_full);
    free(sh->grads_full);
}

/* The layout built, every device's main run on it, the traces written. */
static int run_devices(engine_shared_t *sh, int world, device_report_t *reports, perr_t *err) {
    engine_run_t *run = sh->run;
    run_groups_t G;
    memset(&G, 0, sizeof G);
    trace_buf_t *traces = NULL;
    int rc = -1;
    if (build_layout(sh, err) || make_groups(sh, &G, err)) goto out;
    if (run->trace_path && !(traces = calloc((size_t)world, sizeof *traces))) {
        perr_set(err, "dp: out of memory for the trace");
        goto out;
    }
    init_ranks(sh, world, &G, traces, reports);
    if (devices_run(world, run->arena_capacity, device_main, sh, err)) goto out;
    if (sh->failed) {
        perr_set(err, "%s", sh->err.msg);
        goto out;
    }
    if (traces && trace_write(run->trace_path, traces, world, err)) goto out;
    run->replica_diffs = sh->diffs, run->n_replica_diffs = sh->ndiffs;
    sh->diffs = NULL;
    rc = 0;
out:
    for (int d = 0; traces && d < world; d++) trace_buf_free(&traces[d]);
    free(traces);
    free_groups(&G);
    free_layout(sh);
    return rc;
}

int engine_train(engine_run_t *run, perr_t *err) {
    pconfig_t *pc = &run->pc;
    if (engine_check_model(&run->model, pc, err)) return -1;
    run->replica_diffs = NULL, run->n_replica_diffs = 0;
    /* nvme offload: the directory's lock and the run's own place in it,
     * for this run unless the caller holds them already (the CLI does,
     * for the whole process) */
    const int own_claim = pc->offload == PC_OFFLOAD_NVME && !engine_offload_claimed();
    if (own_claim && engine_offload_claim(pc->offload_path, err)) return -1;
    engine_shared_t *sh = calloc(1, sizeof *sh);
    if (!sh) {
        if (own_claim) engine_offload_release();
        return perr_set(err, "dp: out of memory");
    }
    sh->run = run;
    engine_replica_config(&run->model, pc, &sh->cfg);
    const int world = (int)(pc->dp * pconfig_replica_devices(pc));
    int rc = -1;
    sh->ranks = calloc((size_t)world, sizeof(engine_rank_t));
    sh->sched_end = calloc((size_t)world, sizeof(double));
    sh->scalars = calloc((size_t)world, sizeof *sh->scalars);
    device_report_t *reports = run->reports ? run->reports : calloc((size_t)world, sizeof *reports);
    pthread_mutex_init(&sh->collect_lock, NULL);
    if (!sh->ranks || !reports || !sh->sched_end || !sh->scalars) perr_set(err, "dp: out of memory");
    else if (!check_broken(run, world, err)) rc = run_devices(sh, world, reports, err);
    free(sh->diffs);
    if (reports != run->reports) free(reports);
    free(sh->ranks);
    free(sh->sched_end);
    free(sh->scalars);
    pthread_mutex_destroy(&sh->collect_lock);
    free(sh);
    if (own_claim) engine_offload_release();
    return rc;
}
