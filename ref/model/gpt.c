/* gpt.c - the GPT decoder assembled from its layers (MODEL.md).
 *
 * One microbatch is a forward pass that keeps what the backward needs,
 * then the backward pass, whose parameter gradients go into open exact
 * accumulators (one per tensor). They are rounded once, after the last
 * microbatch of the step, so the microbatch count changes no bit.
 *
 * Residual connections: x_out = x + drop(branch(x)). The gradient that
 * reaches x is d_out + d_branch, one fp32 add, the residual term first.
 *
 * This file: the step's end (rounding, the norm, the update) and the
 * golden step; replica.c builds a replica and its memory.
 */
#include "model/gpt.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "parity/corpus.h"
#include "parity/layers.h"
#include "parity/pmath.h"
#include "parity/runtime.h"

/* ---- open sums ----------------------------------------------------------- */

/* The unit whose backward completes tensor i's gradient: the last of
 * those that add to it (the backward runs from the head down). */
static int grad_last_unit(const param_table_t *t, int i) {
    const int owner = param_unit_of(t, i), other = t->shared_unit[i];
    return other >= 0 && other < owner ? other : owner;
}

unsigned gpt_golden_flags(const model_config_t *cfg) {
    return cfg->micro_batch == cfg->global_batch ? (unsigned)GPT_UNIT_OPEN_SUMS
                                                 : (unsigned)GPT_GRADS_IN_SUMS;
}

void gpt_round_unit_grads(gpt_t *g, int unit) {
    if (!(g->sums_mode & GPT_UNIT_OPEN_SUMS)) return;
    for (int i = 0; i < g->table.count; i++)
        if (grad_last_unit(&g->table, i) == unit)
            acc_round(&g->grad_acc[i], g->grads + g->table.info[i].offset);
}

/* ---- end of step -------------------------------------------------------- */

float mean_token_loss(const model_config_t *c, float loss_sum) {
    return loss_sum / (float)((int64_t)c->global_batch * model_loss_positions(c));
}

float gpt_step_loss(const gpt_t *g) { return mean_token_loss(&g->cfg, sacc_round(&g->loss_acc)); }

/* GPT_GRADS_IN_SUMS: a tensor's sums rounded into `out`, which lies in
 * the same block at or below them (element k of the flat block as fp32
 * overlays the sums of elements below k/2 + 1, read already when the
 * tensors go in offset order): a chunk through a buffer, so no chunk
 * overwrites sums it has not read. */
static void round_in_place(const acc_t *a, float *out) {
    enum { CHUNK = 2048 };
    float buf[CHUNK];
    for (size_t k = 0; k < a->n; k += CHUNK) {
        const size_t n = a->n - k < CHUNK ? a->n - k : CHUNK;
        acc_round_range(a, k, n, buf);
        memcpy(out + k, buf, n * sizeof(float));
    }
}

float gpt_step_round_grads(gpt_t *g) {
    for (int i = 0; i < g->table.count; i++) {
        const param_info_t *p = &g->table.info[i];
        if (g->sums_mode == GPT_GRADS_IN_SUMS)
            round_in_place(&g->grad_acc[i], g->grads + p->offset);
        else if (g->sums_mode != GPT_UNIT_OPEN_SUMS) /* that one rounded unit by unit */
            acc_round(&g->grad_acc[i], g->grads + p->offset);
        gpt_finish_grads(&g->scaler, &g->cfg, g->grads + p->offset, p->numel);
    }
    return gpt_grad_norm(g);
}

float gpt_grad_norm(const gpt_t *g) {
    sacc_t n2; /* exact: the tensors' order changes no bit */
    sacc_init(&n2);
    for (int i = 0; i < g->table.count; i++)
        sacc_add_squares(&n2, g->grads + g->table.info[i].offset, g->table.info[i].numel);
    return pm_sqrtf(sacc_round(&n2));
}

float clip_factor(const model_config_t *c, float grad_norm) {
    if (c->clip_grad > 0.0f && grad_norm > c->clip_grad) return c->clip_grad / (grad_norm + 1e-6f);
    return 1.0f;
}

void gpt_step_update(gpt_t *g, float lr, float grad_norm) {
    const model_config_t *c = &g->cfg;
    const float factor = clip_factor(c, grad_norm);
    if (factor != 1.0f)
        for (size_t i = 0; i < g->table.total; i++) g->grads[i] = g->grads[i] * factor;
    g->adam_t++;
    const int B = c->optimizer_block;
    size_t qb = 0; /* tensor i's first block: its state's absmax */
    for (int i = 0; i < g->table.count; i++) {
        const param_info_t *p = &g->table.info[i];
        const float wd = p->weight_decay ? c->weight_decay : 0.0f;
        const size_t o = p->offset;
        if (c->optimizer == MODEL_OPT_ADAMW8BIT) {
            adamw8bit_update(g->params + o, g->grads + o, g->adam8_m + o, g->adam8_am + qb,
                             g->adam8_v + o, g->adam8_av + qb, p->numel, B, g->adam_t, lr, c->beta1,
                             c->beta2, c->eps, wd);
            qb += adam8_nblocks(p->numel, B);
        } else {
            adamw_update(g->params + o, g->grads + o, g->adam_m + o, g->adam_v + o, p->numel,
                         g->adam_t, lr, c->beta1, c->beta2, c->eps, wd);
            gpt_round_optim_state(c, g->params + o, g->adam_m + o, g->adam_v + o, p->numel);
        }
    }
    gpt_params_refresh(g);
}

const float *gpt_adam_values(const gpt_t *g, int which, float **buf) {
    *buf = NULL;
    const float *f = which ? g->adam_v : g->adam_m;
    const uint8_t *codes = which ? g->adam8_v : g->adam8_m;
    const float *absmax = which ? g->adam8_av : g->adam8_am;
    if (f || !codes) return f;
    if (!(*buf = malloc((g->table.total + 1) * sizeof(float)))) return NULL;
    size_t qb = 0;
    for (int i = 0; i < g->table.count; i++) { /* each tensor's blocks from its first element */
        const param_info_t *p = &g->table.info[i];
        adam8_dequantize(codes + p->offset, absmax + qb, p->numel, g->cfg.optimizer_block, !which,
                         *buf + p->offset);
        qb += adam8_nblocks(p->numel, g->cfg.optimizer_block);
    }
    return *buf;
}

void gpt_adam_set_values(gpt_t *g, int which, const float *values) {
    float *f = which ? g->adam_v : g->adam_m;
    if (f) {
        memcpy(f, values, g->table.total * sizeof(float));
        return;
    }
    uint8_t *codes = which ? g->adam8_v : g->adam8_m;
    float *absmax = which ? g->adam8_av : g->adam8_am;
    size_t qb = 0;
    for (int i = 0; codes && i < g->table.count; i++) {
        const param_info_t *p = &g->table.info[i];
        if (adam8_from_values(values + p->offset, p->numel, g->cfg.optimizer_block, !which,
                              codes + p->offset, absmax + qb, NULL))
            parity_fatal("%s: an AdamW %s value is not an 8-bit state (checked on load)", p->name,
                         which ? "v" : "m");
        qb += adam8_nblocks(p->numel, g->cfg.optimizer_block);
    }
}

void gpt_step_microbatches(gpt_t *g, const corpus_t *data, int64_t step,
                           const gpt_observer_t *obs) {
    const model_config_t *c = &g->cfg;
    const int B = c->global_batch, mb = c->micro_batch, T = c->seq_length;
    gpt_step_begin(g);
    for (int first = 0; first < B; first += mb) {
        gpt_slot_t *A = &g->slot[0];
        for (int b = 0; b < mb; b++)
            model_sample(c, data, (uint64_t)step * (uint64_t)B + (uint64_t)(first + b),
                         A->inputs + (size_t)b * T, A->targets + (size_t)b * T);
        gpt_microbatch(g, A->inputs, A->targets, mb, first, step, obs);
    }
}

void gpt_train_step(gpt_t *g, const corpus_t *data, int64_t step, const gpt_observer_t *obs,
                    gpt_step_stats_t *stats) {
    const model_config_t *c = &g->cfg;
    gpt_step_microbatches(g, data, step, obs);
    stats->loss = gpt_step_loss(g);
    stats->loss_scale = c->precision == MODEL_FP16 ? g->scaler.scale : 0.0f;
    stats->grad_norm = gpt_step_round_grads(g);
    /* fp16: a step whose gradients overflowed updates nothing, and the
     * schedule counts updates (Megatron's skipped iterations) */
    stats->skipped = loss_scaler_step(&g->scaler, c, !isfinite(stats->grad_norm));
    stats->lr = lr_schedule(c, step - g->scaler.skipped + stats->skipped);
    if (obs && obs->grads_ready) obs->grads_ready(obs->ctx, g);
    if (!stats->skipped) gpt_step_update(g, stats->lr, stats->grad_norm);
}
