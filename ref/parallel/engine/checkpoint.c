/* checkpoint.c - layout-free checkpoints on a data- and tensor-parallel
 * layout (ckpt.h): a checkpoint holds global tensors, and a layout takes
 * its blocks and shards from them, and gives them back, through the same
 * cuts that initialisation and dumps use:
 *  - tensor parallelism: every tensor through its placement
 *    (placement_take / placement_put), parameters and AdamW m and v alike;
 *  - data parallelism: parameters as engine_train hands out the initial ones
 *    (whole replicas at ZeRO 0-2, bucket pieces at ZeRO-3); AdamW state as
 *    the stage keeps it: DDP's replicas hold it whole, ZeRO >= 1 shards
 *    hold piece k of every bucket (dp_plan.c);
 *  - the AdamW step count, which bias correction reads, and fp16's loss
 *    scaler, which every rank holds alike.
 * Saving takes one copy of what is replicated (data-parallel rank 0, and
 * tensor-parallel rank 0 of a tensor every tp rank holds): dumps and the
 * checker already compare replicas, and a checkpoint is not a checker.
 */
#include <stdlib.h>
#include <string.h>

#include "model/gpt.h"
#include "engine_internal.h"
#include "parity/ckpt.h"

int64_t engine_first_step(const engine_run_t *run) { return run->resume ? run->resume->step : 0; }

size_t engine_ckpt_host_bytes(const model_config_t *model, const pconfig_t *pc) {
    param_table_t t;
    const gpt_layout_opts_t one_d = {0}; /* tp rank 0's 1-D blocks: the host's buffers */
    const gpt_units_t all = {0, {0}, {0}};
    const param_grid_t g = param_grid_tp(pc->tp, 0, one_d);
    if (param_table_build_at(&t, model, g.sizes, g.coord, &all, one_d, NULL)) return 0;
    const size_t bytes = 2 * (size_t)pc->tp * (t.total + 1) * sizeof(float);
    param_table_free(&t);
    return bytes;
}

int engine_ckpt_prepare(engine_shared_t *sh, perr_t *err) {
    const engine_run_t *run = sh->run;
    const ckpt_state_t *in = run->resume;
    if (!in && !run->save) return 0;
    const size_t total = sh->global.total;
    if ((in && in->total != total) || (run->save && run->save->total != total))
        return perr_set(err, "dp: a checkpoint state of %zu elements for a model of %zu",
                        in && in->total != total ? in->total : run->save->total, total);
    sh->m_local = engine_part_buffers(sh);
    sh->v_local = engine_part_buffers(sh);
    if (!sh->m_local || !sh->v_local) return perr_set(err, "dp: out of memory");
    if (!in) return 0;
    /* engine_train cuts params_full into the tp blocks that every replica or
     * shard starts from: the checkpoint's values instead of the initial ones */
    memcpy(sh->params_full, in->params, total * sizeof(float));
    engine_cut_parts(sh, in->adam_m, sh->m_local);
    engine_cut_parts(sh, in->adam_v, sh->v_local);
    return 0;
}

void engine_ckpt_setup_rank(engine_rank_t *r) {
    const engine_shared_t *sh = r->sh;
    const ckpt_state_t *in = sh->run->resume;
    if (!in) return;
    const dp_plan_t *p = r->plan;
    const float *m = sh->m_local[r->part], *v = sh->v_local[r->part];
    /* fp16: every rank's scaler moves alike from here (the broken variant
     * keeps the fresh one, as a load that restores no grad_scaler does) */
    if (!sh->run->broken_fp16_scale_lost) gpt_scaler_from_ckpt(r->g, &in->scaler);
    if (p->stage == 0) { /* DDP: every replica holds the whole state */
        gpt_adam_set_values(r->g, 0, m);
        gpt_adam_set_values(r->g, 1, v);
        r->g->adam_t = in->adam_t;
        return;
    }
    for (int b = 0; b < p->nbuckets; b++) {
        size_t lo, hi;
        dp_piece(p, b, engine_bucket_rank(r, b), &lo, &hi);
        const size_t o = p->buckets[b].shard_off;
        if (!p->qblock && !r->shard_m) { /* nvme offload: into the rank's file */
            engine_offload_write(r, 0, o, hi - lo, m + lo);
            engine_offload_write(r, 1, o, hi - lo, v + lo);
            continue;
        }
        if (!p->qblock) {
            memcpy(r->shard_m + o, m + lo, (hi - lo) * sizeof(float));
            memcpy(r->shard_v + o, v + lo, (hi - lo) * sizeof(float));
            continue;
        }
        /* adamw8bit: the checkpoint's values are dequantized states (ckpt.c
         * checked them block by block of the global tensors; the piece's
         * blocks are global ones), so each rebuilds its codes and absmax */
        const engine_adam8_piece_t q = engine_offload_load8(r, b); /* nvme: slot 0 */
        dp_run_t run = dp_runs(p, b, lo, hi);
        while (dp_run_next(&r->g->table, &run))
            if (adam8_from_values(m + run.a, run.e - run.a, p->qblock, 1, q.mq + run.x,
                                  q.ma + run.q, NULL) ||
                adam8_from_values(v + run.a, run.e - run.a, p->qblock, 0, q.vq + run.x,
                                  q.va + run.q, NULL))
                parity_fatal("device %d: %s: the checkpoint's AdamW state is not 8-bit blocks here",
                             r->device, r->g->table.info[run.t].name);
        engine_offload_store8(r, b); /* nvme: into the rank's file */
    }
    r->adam_t = in->adam_t;
}

void engine_ckpt_collect(engine_rank_t *r) {
    engine_shared_t *sh = r->sh;
    engine_run_t *run = sh->run;
    if (!run->save) return;
    const dp_plan_t *p = r->plan;
    for (collect_kind_t k = COLLECT_PARAM; k < COLLECT_NKINDS; k++) engine_collect_part(r, k, sh->local[k], NULL);
    coll_barrier(r->world); /* every rank's pieces are in */
    if (r->device != 0) return;
    engine_join_parts(sh, sh->params_local, run->save->params);
    engine_join_parts(sh, sh->m_local, run->save->adam_m);
    engine_join_parts(sh, sh->v_local, run->save->adam_v);
    run->save->step = engine_first_step(run) + run->steps;
    run->save->adam_t = p->stage == 0 ? r->g->adam_t : r->adam_t;
    gpt_scaler_to_ckpt(r->g, &run->save->scaler);
}

void engine_ckpt_free(engine_shared_t *sh) {
    engine_part_buffers_free(sh, sh->m_local);
    engine_part_buffers_free(sh, sh->v_local);
    sh->m_local = sh->v_local = NULL;
}
