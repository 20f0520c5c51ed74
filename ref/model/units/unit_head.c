/* unit_head.c - the head as a unit kind (MODEL.md, forward 4-5):
 *
 *   logits = LNf(x) . wte^T (or output_layer), token losses
 *
 * The forward computes the token losses into the slot; after_forward
 * adds them to the step's loss sum, once, so the forward may run again.
 */
#include <string.h>

#include "model/gpt.h"
#include "model/styles/vocab.h"
#include "model/units/units_internal.h"

enum { H_LNF_W, H_LNF_B, H_OUT };

static const unit_tensor_t tensors[] = {
    [H_LNF_W] = {"final_layernorm.weight", 1, {DIM_C, DIM_1}, INIT_ONES, STD_NONE, CUT_REPL,
                 AL_NONE, 0, WHEN_ALWAYS},
    [H_LNF_B] = {"final_layernorm.bias", 1, {DIM_C, DIM_1}, INIT_ZEROS, STD_NONE, CUT_REPL,
                 AL_NONE, 0, WHEN_ALWAYS},
    [H_OUT] = {"output_layer.weight", 2, {DIM_V, DIM_C}, INIT_NORMAL, STD_SIGMA, CUT_VOCAB,
               AL_NONE, 1, WHEN_UNTIED},
};

static const unit_checkpoint_t checkpoints[] = {
    {"act", "final_layernorm.output", ST_F32, 2, {DIM_T, DIM_C}, 0, WHEN_ALWAYS, CKPT_COMPUTE},
    {"", "logits", ST_F32, 2, {DIM_T, DIM_V}, 1, WHEN_ALWAYS, CKPT_TP_VOCAB_HEAD},
};

/* The tied word embedding is read here too: a pipeline stage holding the
 * head holds it. */
static void bind(param_table_t *t, const model_config_t *c, int unit, int first) {
    t->lnf_w = first + H_LNF_W;
    t->lnf_b = first + H_LNF_B;
    t->out = c->tied ? -1 : first + H_OUT;
    if (c->tied) t->shared_unit[t->wte] = unit;
}

static void layout(gpt_slot_t *A, int index, const slot_dims_t *d, int held, int next_held,
                   carver_t *cv) {
    (void)index, (void)next_held;
    if (!held) return;
    const size_t n = d->n, ns = d->ns, C = d->C;
    A->lnf_xhat = CARVE_F(cv, ns * C);
    A->lnf_rstd = CARVE_F(cv, ns);
    A->lnf_out = CARVE_F(cv, ns * C);
    A->lnf_full = d->sp ? CARVE_F(cv, n * C) : A->lnf_out;
    A->logits = CARVE_F(cv, n * d->V);
    A->token_loss = CARVE_F(cv, n);
    A->ce_max = CARVE_F(cv, n);
    A->ce_z = CARVE_F(cv, n);
}

/* An encoder-decoder's source rows have no loss (their "targets" are
 * placeholders): their token losses and logit gradients are zeros. x
 * holds every position the slot holds (g->local.runs) of its sequences,
 * w values each. */
static void zero_source_rows(const gpt_t *g, float *x, const pass_t *p, int P, int w) {
    const cp_runs_t *r = &g->local.runs;
    for (int s = 0, at = 0; P && s < p->n_seq; s++)
        for (int k = 0; k < r->n; k++)
            for (int t = r->t0[k]; t < r->t0[k] + r->len[k]; t++, at++)
                if (t < P) memset(x + (size_t)at * w, 0, (size_t)w * sizeof(float));
}

static int head_weight(const gpt_t *g) { return g->cfg.tied ? g->table.wte : g->table.out; }

/* logits = LNf(x) . wte^T in the replica's vocabulary style, then the
 * cross-entropy's reductions (max, exact sum of exps, target logit) over
 * the ranks that hold a row's vocabulary blocks. */
static void forward(gpt_t *g, const unit_t *u, gpt_slot_t *A, const float *x, const pass_t *p) {
    const model_config_t *c = &g->cfg;
    const vocab_style_t *vs = vocab_style(g);
    ln_forward(g, p, A->lnf_out, A->lnf_xhat, A->lnf_rstd, x, unit_param(g, u, H_LNF_W),
               unit_param(g, u, H_LNF_B));
    tokens_full(g, p, A->lnf_full, A->lnf_out, g->local.hid);
    vs->head_forward(g, p, A->logits, A->lnf_full, P_(g, head_weight(g)));
    act_round(g, A->logits, (size_t)p->n * g->local.vocab); /* the loss in fp32 from them */
    vs->crossentropy_forward(g, p, A->token_loss, A->ce_max, A->ce_z, A->logits, A->targets);
    zero_source_rows(g, A->token_loss, p, c->encoder_seq_length, 1);
}

static void after_forward(gpt_t *g, const unit_t *u, gpt_slot_t *A, const pass_t *p) {
    (void)u;
    sacc_add(&g->loss_acc, A->token_loss, (size_t)p->n);
}

static void backward(gpt_t *g, const unit_t *u, gpt_slot_t *A, const pass_t *p) {
    const model_config_t *c = &g->cfg;
    const vocab_style_t *vs = vocab_style(g);
    const int n = p->n, V = g->local.vocab;
    /* 1/N from the GLOBAL count of tokens with a loss, once (I4) */
    const int64_t total_tokens = (int64_t)c->global_batch * model_loss_positions(c);
    float *d_logits = vs->crossentropy_backward(g, p, A->logits, A->targets, A->ce_max, A->ce_z,
                                                total_tokens); /* [n, V] */
    zero_source_rows(g, d_logits, p, c->encoder_seq_length, V);
    /* fp16: the loss scale, once, here (I4): every gradient below is scaled */
    if (c->precision == MODEL_FP16)
        for (size_t i = 0; i < (size_t)n * V; i++) d_logits[i] = d_logits[i] * g->scaler.scale;
    act_round(g, d_logits, (size_t)n * V);
    vs->head_backward(g, p, g->scratch.d_tmp, &g->grad_acc[head_weight(g)], d_logits, A->lnf_full,
                      P_(g, head_weight(g)));
    ln_backward(g, p, A->d_resid, unit_grad(g, u, H_LNF_W), unit_grad(g, u, H_LNF_B),
                g->scratch.d_tmp, A->lnf_xhat, A->lnf_rstd, unit_param(g, u, H_LNF_W));
}

static void views(const gpt_t *g, const unit_t *u, const gpt_slot_t *A,
                  const unit_positions_t *pos, unit_view_t *out) {
    (void)u;
    out[0] = unit_stream_view(g, A->lnf_full, pos->all);
    out[1] = (unit_view_t){A->logits, 1, g->local.vocab0, g->local.vocab, pos->all, 0,
                           pos->inner_shift};
}

const unit_kind_t unit_head = {
    .name = "head",
    .prefix = "",
    .tensors = tensors,
    .n_tensors = 3,
    .checkpoints = checkpoints,
    .n_checkpoints = 2,
    .input_grad = "grad_input.head",
    .bind = bind,
    .layout = layout,
    .output = NULL,
    .forward = forward,
    .after_forward = after_forward,
    .backward = backward,
    .views = views,
};
