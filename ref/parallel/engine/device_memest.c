/* device_memest.c - engine_memest: a rank's memory before it is
 * allocated (memest.h), from the tables the allocations use: the
 * replica's (gpt_mem_bytes_mp: its stage's tensors, omitting what the
 * ZeRO stage shards, and the activation slots its schedule needs), the
 * rank's own buffers (engine_rank_buffers), and for ZeRO-3 the largest
 * set of units gathered at once (dp_unit_buckets, as optimizer.c gathers
 * them). Pipeline stages differ (the ranks of one stage are alike): a
 * device's estimate is then each category's largest over the stages, a
 * bound for every device. */
#include <string.h>

#include "model/gpt.h"
#include "engine_internal.h"

static void add(memest_dev_t *dev, mem_cat_t c, size_t bytes) {
    size_t *cat = c == MEM_PARAMS      ? &dev->params
                  : c == MEM_GRADS     ? &dev->grads
                  : c == MEM_OPTIMIZER ? &dev->optimizer
                  : c == MEM_COMM      ? &dev->comm
                                       : &dev->workspace;
    *cat += bytes;
}

/* adamw8bit: every device of stage s holds whole quantization blocks
 * (adam8_check_blocks), refused here, before anything runs; engine_train
 * checks each model part again. Only the tensor-cutting axes (tp and its
 * sub-axes, ep; cp with the experts folded onto it) move a device's blocks. */
static int stage_blocks(const model_config_t *cfg, const pconfig_t *pc, const pp_plan_t *pp, int s,
                        const int sizes[GRID_NAXES], perr_t *err) {
    if (cfg->optimizer != MODEL_OPT_ADAMW8BIT) return 0;
    static const grid_axis_t cut[] = {GRID_TP, GRID_TP2, GRID_TP3, GRID_EP, GRID_CP};
    enum { NCUT = sizeof cut / sizeof cut[0] };
    int n = 1;
    for (int k = 0; k < NCUT; k++) n *= sizes[cut[k]];
    for (int i = 0; i < n; i++) {
        int coord[GRID_NAXES] = {0}, rest = i;
        coord[GRID_PP] = s;
        for (int k = 0; k < NCUT; k++) coord[cut[k]] = rest % sizes[cut[k]], rest /= sizes[cut[k]];
        param_table_t t;
        if (param_table_build_at(&t, cfg, sizes, coord, &pp->units[s], pconfig_tp_opts(pc), err))
            return -1;
        const int rc = adam8_check_blocks(&t, cfg, sizes, coord, err);
        param_table_free(&t);
        if (rc) return -1;
    }
    return 0;
}

/* One rank of stage s; *part: its table's elements (for the host's
 * reassembly buffers). */
static int stage_memest(const model_config_t *cfg, const pconfig_t *pc, const pp_plan_t *pp, int s,
                        memest_dev_t *dev, size_t *part, perr_t *err) {
    const int tp = pconfig_model_tp(pc, s); /* an encoder mesh's stages: etp; 2-D: q */
    gpt_mem_t g;
    if (gpt_mem_bytes_mp(cfg, tp, pconfig_tp_opts(pc), &pp->units[s], engine_stage_slots(pp, s, NULL),
                         engine_replica_flags(pc, pp, pc->zero_stage), &g, err))
        return -1;
    param_table_t t;
    dp_plan_t p;
    const param_grid_t at = param_grid_tp(tp, 0, pconfig_tp_opts(pc));
    if (param_table_build_at(&t, cfg, at.sizes, at.coord, &pp->units[s], pconfig_tp_opts(pc), err))
        return -1;
    int sizes[GRID_NAXES];
    pconfig_grid_sizes(pc, sizes);
    if (pc->tp_mode == PC_TP_1D) sizes[GRID_TP] = tp;
    if (stage_blocks(cfg, pc, pp, s, sizes, err) ||
        dp_plan_build_grid(&p, &t, cfg, sizes, pc->zero_stage, pc->bucket_cap_mb, err)) {
        param_table_free(&t);
        return -1;
    }
    *part = t.total + 1;
    *dev = (memest_dev_t){.params = g.params, .grads = g.grads, .open_sums = g.open_sums,
                          .optimizer = g.optimizer, .activations = g.activations};
    engine_buf_t bufs[ENGINE_NBUFS];
    engine_rank_buffers(&p, pc, NULL, bufs);
    for (int k = 0; k < ENGINE_NBUFS; k++)
        if (bufs[k].want && bufs[k].host) dev->host += bufs[k].bytes; /* cpu offload */
        else if (bufs[k].want) add(dev, bufs[k].cat, bufs[k].bytes);
    if (p.stage == 3) { /* a unit's buckets live from its begin event to its end */
        size_t most = 0, before = 0;
        for (int u = 0; u < p.nunits; u++) {
            int bs[DP_UNIT_MAX_BUCKETS], k = dp_unit_buckets(&p, u, bs);
            size_t bytes = 0;
            for (int i = 0; i < k; i++) bytes += dp_gathered_bytes(&p, bs[i]);
            /* --overlap-param-gather: the next unit's, prefetched meanwhile */
            const size_t held = pc->overlap_param_gather ? bytes + before : bytes;
            if (held > most) most = held;
            before = bytes;
        }
        dev->params += most;
    }
    dp_plan_free(&p);
    param_table_free(&t);
    return 0;
}

int engine_memest(const model_config_t *model, const pconfig_t *pc, memest_dev_t *dev, size_t *all,
                  size_t *host, perr_t *err) {
    memset(dev, 0, sizeof *dev);
    *host = *all = 0;
    if (engine_check_model(model, pc, err)) return -1;
    model_config_t cfg;
    engine_replica_config(model, pc, &cfg);
    pp_plan_t pp;
    param_table_t whole;
    if (model_config_validate_replica(&cfg, err) || pp_plan_build(&pp, &cfg, pc, err) ||
        param_table_build(&whole, &cfg, err))
        return -1;
    size_t parts = 0;
    for (int s = 0; s < pp.pp; s++) {
        const size_t ranks_per_stage = (size_t)(pc->dp > 0 ? pc->dp : 1) *
                                       (size_t)(pc->cp > 0 ? pc->cp : 1) * (size_t)pconfig_stage_tp(pc, s);
        memest_dev_t d;
        size_t part;
        if (stage_memest(&cfg, pc, &pp, s, &d, &part, err)) {
            param_table_free(&whole);
            return -1;
        }
        memest_sum(&d);
        *all += d.total * ranks_per_stage;
        *host += d.host * ranks_per_stage; /* cpu offload's host arenas */
        /* stages differ by category (the first holds the most activations,
         * the last the head): the bound of every device, category by category */
        size_t *mine[] = {&dev->params, &dev->grads, &dev->open_sums, &dev->optimizer,
                          &dev->activations, &dev->comm, &dev->workspace};
        const size_t theirs[] = {d.params, d.grads, d.open_sums, d.optimizer, d.activations, d.comm,
                                 d.workspace};
        for (int c = 0; c < 7; c++)
            if (theirs[c] > *mine[c]) *mine[c] = theirs[c];
        if (d.host > dev->host) dev->host = d.host;
        parts += part * (size_t)pconfig_stage_tp(pc, s);
        /* adamw8bit under DDP: collecting m or v dequantizes every
         * replica's state into a host vector at once (collect.c) */
        if (cfg.optimizer == MODEL_OPT_ADAMW8BIT && pc->zero_stage == 0)
            *host += ranks_per_stage * part * sizeof(float);
    }
    /* engine_train's reassembly of global parameters, gradients and AdamW's
     * m and v, and of every model part's (stage x tp rank), each with the
     * int32 writer of every element when a dump collects them */
    *host += 4 * ((whole.total + 1) + parts) * (sizeof(float) + sizeof(int32_t));
    param_table_free(&whole);
    return 0;
}
