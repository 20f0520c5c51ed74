/* unit_layer.c - a transformer layer as a unit (MODEL.md, forward 3):
 *
 *   resid1 = x + drop(dense(attn(qkv(LN1 x))))      attention block
 *   out    = resid1 + drop(fc2(gelu(fc1(LN2 resid1)))) MLP block
 *
 * Megatron's tensor parallelism: qkv and fc1 are column-parallel (this
 * rank's heads and FFN columns), dense and fc2 row-parallel (their
 * outputs completed across the group, bias after). Sequence parallelism
 * keeps the LayerNorm, dropout and residual regions on the positions
 * this rank holds: all-gather before the column-parallel linears,
 * reduce-scatter after the row-parallel ones. Every form rounds where
 * the golden run rounds (unit_ops.c).
 */
#include <string.h>

#include "units_internal.h"

/* A layer's tensors, in MODEL.md's table order: this kind's own. */
enum {
    P_LN1_W, P_LN1_B, P_QKV_W, P_QKV_B, P_DENSE_W, P_DENSE_B,
    P_LN2_W, P_LN2_B, P_FC1_W, P_FC1_B, P_FC2_W, P_FC2_B, P_PER_LAYER
};

#define LN_(sfx, init) {sfx, 1, {DIM_C, DIM_1}, init, STD_NONE, CUT_REPL, AL_NONE, 0, WHEN_ALWAYS}
static const unit_tensor_t tensors[P_PER_LAYER] = {
    [P_LN1_W] = LN_("input_layernorm.weight", INIT_ONES),
    [P_LN1_B] = LN_("input_layernorm.bias", INIT_ZEROS),
    /* column-parallel: rows of whole heads (qkv rows are head-ordered) */
    [P_QKV_W] = {"self_attention.query_key_value.weight", 2, {DIM_3C, DIM_C}, INIT_NORMAL,
                 STD_SIGMA, CUT_COLPAR, AL_HEADS3, 1, WHEN_ALWAYS},
    [P_QKV_B] = {"self_attention.query_key_value.bias", 1, {DIM_3C, DIM_1}, INIT_ZEROS, STD_NONE,
                 CUT_COLPAR, AL_HEADS3, 0, WHEN_ALWAYS},
    /* row-parallel: input columns of whole heads */
    [P_DENSE_W] = {"self_attention.dense.weight", 2, {DIM_C, DIM_C}, INIT_NORMAL, STD_OUT,
                   CUT_ROWPAR, AL_HEADS, 1, WHEN_ALWAYS},
    [P_DENSE_B] = {"self_attention.dense.bias", 1, {DIM_C, DIM_1}, INIT_ZEROS, STD_NONE, CUT_REPL,
                   AL_NONE, 0, WHEN_ALWAYS},
    [P_LN2_W] = LN_("post_attention_layernorm.weight", INIT_ONES),
    [P_LN2_B] = LN_("post_attention_layernorm.bias", INIT_ZEROS),
    [P_FC1_W] = {"mlp.dense_h_to_4h.weight", 2, {DIM_F, DIM_C}, INIT_NORMAL, STD_SIGMA, CUT_COLPAR,
                 AL_FFN, 1, WHEN_ALWAYS},
    [P_FC1_B] = {"mlp.dense_h_to_4h.bias", 1, {DIM_F, DIM_1}, INIT_ZEROS, STD_NONE, CUT_COLPAR,
                 AL_FFN, 0, WHEN_ALWAYS},
    [P_FC2_W] = {"mlp.dense_4h_to_h.weight", 2, {DIM_C, DIM_F}, INIT_NORMAL, STD_OUT, CUT_ROWPAR,
                 AL_FFN, 1, WHEN_ALWAYS},
    [P_FC2_B] = {"mlp.dense_4h_to_h.bias", 1, {DIM_C, DIM_1}, INIT_ZEROS, STD_NONE, CUT_REPL,
                 AL_NONE, 0, WHEN_ALWAYS},
};
#undef LN_

/* Reported masks first, then activations; `order` is the forward's. */
enum { N_CHECKPOINTS = 11 };
static const unit_checkpoint_t checkpoints[N_CHECKPOINTS] = {
    {"mask", "attention_dropout", ST_U8, 3, {DIM_H, DIM_T, DIM_T}, 2, WHEN_ADROP, CKPT_COMPUTE},
    {"mask", "attention_output_dropout", ST_U8, 2, {DIM_T, DIM_C}, 5, WHEN_HDROP, CKPT_COMPUTE},
    {"mask", "mlp_output_dropout", ST_U8, 2, {DIM_T, DIM_C}, 9, WHEN_HDROP, CKPT_COMPUTE},
    {"act", "input_layernorm.output", ST_F32, 2, {DIM_T, DIM_C}, 0, WHEN_ALWAYS, CKPT_COMPUTE},
    {"act", "self_attention.query_key_value.output", ST_F32, 2, {DIM_T, DIM_3C}, 1, WHEN_ALWAYS, CKPT_TP_ROW_LINEARS},
    {"act", "self_attention.core_attention.output", ST_F32, 2, {DIM_T, DIM_C}, 3, WHEN_ALWAYS, CKPT_CP_ATTENTION},
    {"act", "self_attention.dense.output", ST_F32, 2, {DIM_T, DIM_C}, 4, WHEN_ALWAYS, CKPT_TP_ROW},
    {"act", "post_attention_layernorm.output", ST_F32, 2, {DIM_T, DIM_C}, 6, WHEN_ALWAYS, CKPT_COMPUTE},
    {"act", "mlp.dense_h_to_4h.output", ST_F32, 2, {DIM_T, DIM_F}, 7, WHEN_ALWAYS, CKPT_TP_ROW_LINEARS},
    {"act", "mlp.dense_4h_to_h.output", ST_F32, 2, {DIM_T, DIM_C}, 8, WHEN_ALWAYS, CKPT_TP_ROW},
    {"act", "output", ST_F32, 2, {DIM_T, DIM_C}, 10, WHEN_ALWAYS, CKPT_COMPUTE},
};

static inline float *PL(gpt_t *g, const unit_t *u, int k) { return unit_param(g, u, k); }
static inline acc_t *GL(gpt_t *g, const unit_t *u, int k) { return unit_grad(g, u, k); }

static void layout(gpt_slot_t *A, int l, const slot_dims_t *d, int held, int next_held,
                   carver_t *cv) {
    layer_acts_t *L = &A->layer[l];
    const size_t mb = d->mb, T = d->T, Tc = d->Tc, n = d->n, ns = d->ns, C = d->C, H = d->H;
    const size_t A_ = d->A, F = d->F;
    if (!held) {
        /* the output of a layer another stage runs: where it arrives */
        if (next_held) L->out = CARVE_F(cv, ns * C);
        return;
    }
    L->ln1_xhat = CARVE_F(cv, ns * C);
    L->ln1_rstd = CARVE_F(cv, ns);
    L->ln1_out = CARVE_F(cv, ns * C);
    L->ln1_full = d->sp ? CARVE_F(cv, n * C) : L->ln1_out;
    L->qkv = CARVE_F(cv, n * 3 * A_);
    /* ring: [mb,H,Tc,T], the rank's queries against every key;
     * Ulysses: [mb,H/cp,T,T], every query of its heads: as many */
    L->att_e = CARVE_F(cv, mb * H * Tc * T);
    L->att_ehat = d->adrop ? CARVE_F(cv, mb * H * Tc * T) : L->att_e;
    L->att_z = CARVE_F(cv, mb * H * Tc);
    L->att_keep = d->adrop ? CARVE_U8(cv, mb * H * Tc * T) : NULL;
    L->ctx = CARVE_F(cv, n * A_);
    L->qkv_h = d->ulysses ? CARVE_F(cv, n * 3 * A_) : L->qkv;
    L->ctx_h = d->ulysses ? CARVE_F(cv, n * A_) : L->ctx;
    L->attn_out = CARVE_F(cv, ns * C);
    L->attn_keep = d->hdrop ? CARVE_U8(cv, ns * C) : NULL;
    L->resid1 = CARVE_F(cv, ns * C);
    L->ln2_xhat = CARVE_F(cv, ns * C);
    L->ln2_rstd = CARVE_F(cv, ns);
    L->ln2_out = CARVE_F(cv, ns * C);
    L->ln2_full = d->sp ? CARVE_F(cv, n * C) : L->ln2_out;
    L->fc1_out = CARVE_F(cv, n * F);
    L->gelu_out = CARVE_F(cv, n * F);
    L->gelu_grad = CARVE_F(cv, n * F);
    L->fc2_out = CARVE_F(cv, ns * C);
    L->mlp_keep = d->hdrop ? CARVE_U8(cv, ns * C) : NULL;
    L->out = CARVE_F(cv, ns * C);
}

static float *output(gpt_slot_t *A, int l) { return A->layer[l].out; }

static void forward(gpt_t *g, const unit_t *u, gpt_slot_t *A, const float *x, const pass_t *p) {
    const int l = u->index;
    const model_config_t *c = &g->cfg;
    const int n = p->n, ns = p->ns, C = c->hidden, F = g->local.ffn, W = g->local.attn;
    const gpt_local_t *lc = &g->local;
    const int rl = lc->row_linears; /* the seconds contract a slice of whole inputs */
    layer_acts_t *LA = &A->layer[l];
    float *scratch = g->scratch.row_scratch;
    if (LA->attn_keep) site_mask(g, A, p, LA->attn_keep, site_stream("attention_output_dropout", l, A->step));
    if (LA->mlp_keep) site_mask(g, A, p, LA->mlp_keep, site_stream("mlp_output_dropout", l, A->step));
    /* attention block */
    layernorm_forward(LA->ln1_out, LA->ln1_xhat, LA->ln1_rstd, x, PL(g, u, P_LN1_W),
                      PL(g, u, P_LN1_B), ns, C, c->ln_eps, scratch);
    tokens_full(g, p, LA->ln1_full, LA->ln1_out, C);
    /* column-parallel: this rank's heads (qkv rows are head-ordered) */
    pair_first_forward(g, p, LA->qkv, LA->ln1_full, PL(g, u, P_QKV_W), PL(g, u, P_QKV_B), C, 3 * W,
                       p->t_cc);
    attention_unit_forward(g, p, LA, site_stream("attention_dropout", l, A->step), A->mask_seq);
    pair_second_forward(g, p, LA->attn_out, LA->ctx, W, rl ? lc->cin0 : 0, rl ? lc->cin : W,
                        PL(g, u, P_DENSE_W), PL(g, u, P_DENSE_B), C, p->t_cc);
    residual_dropout(LA->resid1, x, LA->attn_out, LA->attn_keep, p->nsC, c->hidden_dropout);
    /* MLP block */
    layernorm_forward(LA->ln2_out, LA->ln2_xhat, LA->ln2_rstd, LA->resid1, PL(g, u, P_LN2_W),
                      PL(g, u, P_LN2_B), ns, C, c->ln_eps, scratch);
    tokens_full(g, p, LA->ln2_full, LA->ln2_out, C);
    pair_first_forward(g, p, LA->fc1_out, LA->ln2_full, PL(g, u, P_FC1_W), PL(g, u, P_FC1_B), C, F,
                       p->t_cf);
    gelu_forward(LA->gelu_out, LA->gelu_grad, LA->fc1_out, (size_t)n * F);
    pair_second_forward(g, p, LA->fc2_out, LA->gelu_out, F, rl ? lc->fin0 : 0, rl ? lc->fin : F,
                        PL(g, u, P_FC2_W), PL(g, u, P_FC2_B), C, p->t_fc);
    residual_dropout(LA->out, LA->resid1, LA->fc2_out, LA->mlp_keep, p->nsC, c->hidden_dropout);
}

/* The gradient of a residual branch's input, drop(y): over the tokens
 * held into `held`, then (sequence parallel) gathered to every token. */
static const float *branch_grad(gpt_t *g, const pass_t *p, float *held, float *full,
                                const float *d_res, const uint8_t *keep) {
    const float *d = d_res;
    if (keep) {
        dropout_backward(held, d_res, keep, p->nsC, g->cfg.hidden_dropout);
        d = held;
    }
    return tokens_full(g, p, full, d, g->cfg.hidden);
}

static void backward(gpt_t *g, const unit_t *u, gpt_slot_t *A, const pass_t *p) {
    const int l = u->index;
    const model_config_t *c = &g->cfg;
    const int C = c->hidden, F = g->local.ffn, W = g->local.attn;
    const gpt_local_t *lc = &g->local;
    const int rl = lc->row_linears;
    const size_t nsC = p->nsC;
    layer_acts_t *LA = &A->layer[l];
    gpt_scratch_t *S = &g->scratch;
    float *d_res = A->d_resid, *d_a = S->d_tmp, *d_b = S->d_tmp2, *d_w = S->d_wide;
    /* out = resid1 + drop(fc2_out); the row-parallel backward needs every
     * token's gradient (its bias gradient is then whole on every rank) */
    const float *d_fc2 = branch_grad(g, p, d_a, S->d_tmp3, d_res, LA->mlp_keep);
    pair_second_backward(g, p, d_w, GL(g, u, P_FC2_W), GL(g, u, P_FC2_B), d_fc2, LA->gelu_out, F,
                         rl ? lc->fin0 : 0, rl ? lc->fin : F, PL(g, u, P_FC2_W), C, p->t_fc);
    gelu_backward(d_w, d_w, LA->gelu_grad, (size_t)p->n * F);
    pair_first_backward(g, p, d_b, GL(g, u, P_FC1_W), GL(g, u, P_FC1_B), d_w, LA->ln2_full,
                        PL(g, u, P_FC1_W), C, F, p->t_cf);
    ln_backward(g, p, d_a, GL(g, u, P_LN2_W), GL(g, u, P_LN2_B), d_b, LA->ln2_xhat, LA->ln2_rstd,
                PL(g, u, P_LN2_W));
    for (size_t i = 0; i < nsC; i++) d_res[i] = d_res[i] + d_a[i];
    /* resid1 = x_in + drop(attn_out) */
    const float *d_dense = branch_grad(g, p, d_a, S->d_tmp3, d_res, LA->attn_keep);
    pair_second_backward(g, p, d_b, GL(g, u, P_DENSE_W), GL(g, u, P_DENSE_B), d_dense, LA->ctx, W,
                         rl ? lc->cin0 : 0, rl ? lc->cin : W, PL(g, u, P_DENSE_W), C, p->t_cc);
    attention_unit_backward(g, p, LA, d_w, d_b);
    pair_first_backward(g, p, d_a, GL(g, u, P_QKV_W), GL(g, u, P_QKV_B), d_w, LA->ln1_full,
                        PL(g, u, P_QKV_W), C, 3 * W, p->t_cc);
    ln_backward(g, p, d_b, GL(g, u, P_LN1_W), GL(g, u, P_LN1_B), d_a, LA->ln1_xhat, LA->ln1_rstd,
                PL(g, u, P_LN1_W));
    for (size_t i = 0; i < nsC; i++) d_res[i] = d_res[i] + d_b[i];
    if (l == c->layers - 1 && (g->shard.broken & GPT_BROKEN_TP_INPUT_GRAD) && g->shard.tp_rank == 1) {
        uint32_t bits; /* the checker control: one bit of the last layer's input gradient */
        memcpy(&bits, A->d_resid, sizeof bits);
        bits ^= 1u;
        memcpy(A->d_resid, &bits, sizeof bits);
    }
}

static void views(const gpt_t *g, const unit_t *u, const gpt_slot_t *A,
                  const unit_positions_t *pos, unit_view_t *out) {
    const gpt_local_t *lc = &g->local;
    const layer_acts_t *LA = &A->layer[u->index];
    const int64_t W = lc->attn, D = lc->heads ? W / lc->heads : 0;
    const unit_view_t v[N_CHECKPOINTS] = {
        /* ring: the rank's query rows (axis 1) of its heads; Ulysses:
         * every row of the heads it attends */
        {LA->att_keep, 0, lc->att_head0, lc->att_heads, lc->ulysses ? NULL : pos->all, 1},
        {LA->attn_keep, -1, 0, 0, pos->stream, 0},
        {LA->mlp_keep, -1, 0, 0, pos->stream, 0},
        {LA->ln1_full, -1, 0, 0, pos->all, 0},
        {LA->qkv, 1, 3 * D * lc->head0, 3 * W, pos->all, 0},
        {LA->ctx, 1, D * lc->head0, W, pos->all, 0},
        {LA->attn_out, -1, 0, 0, pos->stream, 0},
        {LA->ln2_full, -1, 0, 0, pos->all, 0},
        {LA->fc1_out, 1, lc->ffn0, lc->ffn, pos->all, 0},
        {LA->fc2_out, -1, 0, 0, pos->stream, 0},
        {LA->out, -1, 0, 0, pos->stream, 0},
    };
    memcpy(out, v, sizeof v);
}

const unit_kind_t unit_layer = {
    .name = "layer",
    .prefix = "layers.%d.",
    .tensors = tensors,
    .n_tensors = P_PER_LAYER,
    .checkpoints = checkpoints,
    .n_checkpoints = N_CHECKPOINTS,
    .input_grad = "grad_input.layers.%d",
    .bind = NULL,
    .layout = layout,
    .output = output,
    .forward = forward,
    .after_forward = NULL,
    .backward = backward,
    .views = views,
};
