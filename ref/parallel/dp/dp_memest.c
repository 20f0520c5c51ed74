/* dp_memest.c - a data-parallel rank's memory before it is allocated
 * (memest.h), from the tables the allocations use: the replica's
 * (gpt_mem_bytes, omitting what the ZeRO stage shards), the rank's own
 * buffers (dp_rank_buffers), and for ZeRO-3 the largest set of units
 * gathered at once (dp_unit_buckets, as dp_zero.c gathers them). */
#include <string.h>

#include "dp_internal.h"

int dp_memest(const model_config_t *model, const pconfig_t *pc, memest_dev_t *dev, size_t *host,
              perr_t *err) {
    memset(dev, 0, sizeof *dev);
    *host = 0;
    model_config_t cfg;
    dp_replica_config(model, pc, &cfg);
    gpt_mem_t g;
    const int tp = pc->tp > 0 ? pc->tp : 1;
    if (gpt_mem_bytes_tp(&cfg, tp, pc->sequence_parallel, dp_replica_omits(pc->zero_stage), &g, err))
        return -1;
    param_table_t t;
    dp_plan_t p;
    if (param_table_build_tp(&t, &cfg, tp, err)) return -1;
    if (dp_plan_build(&p, &t, &cfg, pc->dp, pc->zero_stage, pc->bucket_cap_mb, err)) {
        param_table_free(&t);
        return -1;
    }
    *dev = (memest_dev_t){.params = g.params, .grads = g.grads, .open_sums = g.open_sums,
                          .optimizer = g.optimizer, .activations = g.activations};
    dp_buf_t bufs[DP_NBUFS];
    dp_rank_buffers(&p, pc, NULL, bufs);
    for (int k = 0; k < DP_NBUFS; k++) {
        if (!bufs[k].want) continue;
        size_t *cat = bufs[k].cat == MEM_PARAMS      ? &dev->params
                      : bufs[k].cat == MEM_GRADS     ? &dev->grads
                      : bufs[k].cat == MEM_OPTIMIZER ? &dev->optimizer
                      : bufs[k].cat == MEM_COMM      ? &dev->comm
                                                     : &dev->workspace;
        *cat += bufs[k].bytes;
    }
    if (p.stage == 3) { /* a unit's buckets live from its begin event to its end */
        size_t most = 0;
        for (int u = 0; u < p.nunits; u++) {
            int bs[2], k = dp_unit_buckets(&p, u, bs);
            size_t bytes = 0;
            for (int i = 0; i < k; i++) bytes += dp_gathered_bytes(&p, bs[i]);
            if (bytes > most) most = bytes;
        }
        dev->params += most;
    }
    /* dp_train's reassembly of global parameters and gradients, and of
     * every tensor-parallel rank's (t is one rank's table) */
    param_table_t whole;
    if (param_table_build(&whole, &cfg, err)) {
        dp_plan_free(&p);
        param_table_free(&t);
        return -1;
    }
    *host = 2 * ((whole.total + 1) + (size_t)tp * (t.total + 1)) * sizeof(float);
    param_table_free(&whole);
    dp_plan_free(&p);
    param_table_free(&t);
    return 0;
}
