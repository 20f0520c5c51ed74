/* forced.c - a teacher-forced golden step (forced.h): the golden step of
 * dump_golden_step with each unit reading the backend's tensor at its
 * boundary instead of parity's.
 *
 *   before:   params := param.<p>;  m, v := exp_avg.<p>, exp_avg_sq.<p>;  t := step
 *   forward:  unit u >= 1 reads x_u := act.<unit u-1>.output  [mb sequences of B,T,C]
 *   backward: unit u < U-1 starts from d_out_u := grad_input.<unit u+1>
 *   update:   grads := grad.<p>;  norm, clip, AdamW from them
 *
 * No unit's maths changes and no hook enters units.c: the boundaries are
 * the slot buffers the golden schedule already passes between units, and
 * the observer's unit events (GPT_FWD_BEGIN, GPT_BWD_BEGIN) come exactly
 * when the next unit is about to read them. At GPT_FWD_BEGIN of unit u the
 * previous unit's output (gpt_slot_stream) was already reported to the
 * dump, so the dump holds parity's recomputation of unit u-1 and unit u
 * runs from the backend's input; likewise d_resid at GPT_BWD_BEGIN, after
 * unit u+1 reported its input gradient. The gradients the dump records
 * (grad.<p>) are parity's, of the forced backward; the update then runs
 * from the backend's. Supplied values are taken as they are (no rounding
 * to the model's dtype: a bf16 backend's are bf16 values already), so the
 * golden run's own tensors give the golden step's bits.
 *
 * Built for what the golden one-device GPT is: dense layers, fp32 or
 * bf16, fp32 AdamW. fp16's loss scale enters every gradient and its
 * skipped steps move the schedule, 8-bit AdamW's state is codes, and the
 * encoder-decoder and MoE units pass more than the residual stream: those
 * are refused by name.
 */
#include "model/gpt.h"
#include "parity/forced.h"

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "parity/corpus.h"
#include "model/units/unit_kind.h"

/* What the step's units read, fetched once before it runs. */
typedef struct {
    gpt_observer_t inner;   /* the dump's observer (or nothing) */
    const float **stream;   /* [U]: unit u's input stream [B,T,C], or NULL: parity's */
    const float **d_out;    /* [U]: the gradient arriving at unit u's output [B,T,C], or NULL */
    size_t seq;             /* T*C: one sequence of either */
} forced_t;

static void pass_batch(void *ctx, const gpt_view_t *v) {
    const forced_t *f = ctx;
    if (f->inner.batch_tensor) f->inner.batch_tensor(f->inner.ctx, v);
}

/* The golden schedule runs every microbatch in slot 0: its sequences
 * first_seq .. first_seq + n_seq - 1 of the supplied global tensors. */
static void force_unit(void *ctx, gpt_t *g, int unit, int event) {
    const forced_t *f = ctx;
    const gpt_slot_t *A = &g->slot[0];
    const size_t at = (size_t)A->first_seq * f->seq, n = (size_t)A->n_seq * f->seq;
    if (event == GPT_FWD_BEGIN && f->stream[unit])
        memcpy(gpt_slot_stream(g, 0, unit), f->stream[unit] + at, n * sizeof(float));
    else if (event == GPT_BWD_BEGIN && f->d_out[unit])
        memcpy(A->d_resid, f->d_out[unit] + at, n * sizeof(float));
    if (f->inner.unit) f->inner.unit(f->inner.ctx, g, unit, event);
}

static const float *get(const forced_inputs_t *in, const char *name, size_t numel) {
    return in && in->get ? in->get(in->ctx, name, numel) : NULL;
}

/* The name of the residual stream unit u leaves: its kind's output checkpoint. */
static void stream_name(const model_config_t *c, int u, char *buf, size_t cap) {
    const unit_t x = model_unit_at(c, u);
    char prefix[64];
    unit_prefix(&x, prefix, sizeof prefix);
    snprintf(buf, cap, "act.%s%s", x.kind == &unit_embedding ? "embedding." : prefix, "output");
}

/* The one-device dense GPT the golden run is, or -1 naming what is not. */
static int forceable(const gpt_t *g, int64_t step, perr_t *err) {
    const model_config_t *c = &g->cfg;
    if (step < 0 || step >= INT_MAX) /* AdamW's count is an int */
        return perr_set(err, "dump_forced_step: step %lld, expected 0 .. %d", (long long)step,
                        INT_MAX - 1);
    if (c->arch != MODEL_GPT || c->moe_experts > 0)
        return perr_set(err, "dump_forced_step: a %s model%s: not supported yet (the dense GPT only)",
                        model_arch_name(c->arch), c->moe_experts > 0 ? " with experts" : "");
    if (c->precision == MODEL_FP16)
        return perr_set(err, "dump_forced_step: precision fp16: not supported yet (its loss scale "
                             "is in every gradient and its skipped steps move the schedule)");
    if (c->optimizer != MODEL_OPT_ADAM)
        return perr_set(err, "dump_forced_step: optimizer %s: not supported yet (fp32 AdamW only)",
                        model_optimizer_name(c->optimizer));
    if (c->recompute == MODEL_RECOMPUTE_FULL) /* the golden run keeps none (model.h) */
        return perr_set(err, "dump_forced_step: recompute full: not supported yet (a recomputed "
                             "chunk's later layers would read parity's streams, not the backend's)");
    const gpt_shard_t *s = &g->shard;
    if (s->tp != 1 || s->cp != 1 || s->ep > 1 || s->units.n || !g->params || !g->grads ||
        !g->adam_m || g->n_slots < 1)
        return perr_set(err, "dump_forced_step: model '%s' is not a whole one-device model with "
                             "its parameters, gradients and AdamW state (gpt_new's)", c->name);
    for (int u = 0; u < model_num_units(c); u++) {
        const unit_kind_t *k = model_unit_at(c, u).kind;
        if (k != &unit_embedding && k != &unit_layer && k != &unit_head)
            return perr_set(err, "dump_forced_step: unit %d is a %s: not supported yet (the dense "
                                 "GPT's embedding, layers and head only)", u, k->name);
    }
    return 0;
}

/* The supplied tensors `<prefix><param>` copied over x [total]; one not
 * supplied keeps x's, or with `zero` becomes zeros. */
static void force_params(const gpt_t *g, const forced_inputs_t *in, const char *prefix, float *x,
                         int zero) {
    char name[160];
    for (int i = 0; i < g->table.count; i++) {
        const param_info_t *p = &g->table.info[i];
        snprintf(name, sizeof name, "%s%s", prefix, p->name);
        const float *v = get(in, name, p->numel);
        if (v) memcpy(x + p->offset, v, p->numel * sizeof(float));
        else if (zero) memset(x + p->offset, 0, p->numel * sizeof(float));
    }
}

int dump_forced_step(gpt_t *g, const struct corpus *data, int64_t step,
                     const forced_inputs_t *in, dump_t *d, gpt_step_stats_t *st, perr_t *err) {
    if (forceable(g, step, err)) return -1;
    const model_config_t *c = &g->cfg;
    const int U = model_num_units(c);
    const size_t seq = (size_t)c->seq_length * (size_t)c->hidden;
    const size_t batch = (size_t)c->global_batch * seq;
    forced_t f = {.seq = seq};
    f.stream = calloc((size_t)U, sizeof *f.stream);
    f.d_out = calloc((size_t)U, sizeof *f.d_out);
    if (!f.stream || !f.d_out) {
        free(f.stream), free(f.d_out);
        return perr_set(err, "dump_forced_step: out of memory");
    }
    char name[160];
    for (int u = 0; u + 1 < U; u++) { /* the boundary between units u and u+1 */
        stream_name(c, u, name, sizeof name);
        f.stream[u + 1] = get(in, name, batch);
        const unit_t next = model_unit_at(c, u + 1);
        snprintf(name, sizeof name, next.kind->input_grad, next.index);
        f.d_out[u] = get(in, name, batch);
    }
    /* the state the step starts from: the master weights (and their
     * compute copy), AdamW's m and v after `step` updates (none before
     * step 0: zeros, whatever g held, as the bias correction's t = 1
     * assumes) */
    force_params(g, in, "param.", g->params, 0);
    gpt_params_refresh(g);
    force_params(g, in, "exp_avg.", g->adam_m, step == 0);
    force_params(g, in, "exp_avg_sq.", g->adam_v, step == 0);
    g->adam_t = (int)step;
    gpt_observer_t obs = {.ctx = &f, .batch_tensor = pass_batch, .unit = force_unit};
    if (d) dump_begin_step(d, step, &f.inner);
    gpt_step_microbatches(g, data, step, &obs);
    st->loss = gpt_step_loss(g);
    st->loss_scale = 0.0f, st->skipped = 0; /* no fp16 */
    st->grad_norm = gpt_step_round_grads(g);
    st->lr = lr_schedule(c, step);
    if (f.inner.grads_ready) f.inner.grads_ready(f.inner.ctx, g); /* parity's, of the forced backward */
    force_params(g, in, "grad.", g->grads, 0);
    st->grad_norm = gpt_grad_norm(g); /* of the gradients the update reads */
    gpt_step_update(g, st->lr, st->grad_norm);
    free(f.stream), free(f.d_out);
    return d ? dump_end_step(d, g, st, err) : 0;
}
