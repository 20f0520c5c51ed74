/* unit_layer.c - a transformer layer as a unit (MODEL.md, forward 3),
 * dense or mixture-of-experts (two kinds sharing the attention block):
 *
 *   resid1 = x + drop(dense(attn(qkv(LN1 x))))      attention block
 *   out    = resid1 + drop(fc2(gelu(fc1(LN2 resid1)))) MLP block
 *   out    = resid1 + drop(moe(LN2 resid1))          MoE MLP block (moe.c)
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

#include "parity/coll.h"
#include "units_internal.h"

/* A layer's tensors, in MODEL.md's table order: this kind's own. */
enum {
    P_LN1_W, P_LN1_B, P_QKV_W, P_QKV_B, P_DENSE_W, P_DENSE_B,
    P_LN2_W, P_LN2_B, P_FC1_W, P_FC1_B, P_FC2_W, P_FC2_B, P_PER_LAYER
};

#define LN_(sfx, init) {sfx, 1, {DIM_C, DIM_1}, init, STD_NONE, CUT_REPL, AL_NONE, 0, WHEN_ALWAYS}
/* the attention block's tensors and LN2: both kinds' first eight */
#define ATTENTION_TENSORS                                                                  \
    [P_LN1_W] = LN_("input_layernorm.weight", INIT_ONES),                                  \
    [P_LN1_B] = LN_("input_layernorm.bias", INIT_ZEROS),                                   \
    /* column-parallel: rows of whole heads (qkv rows are head-ordered) */                  \
    [P_QKV_W] = {"self_attention.query_key_value.weight", 2, {DIM_3C, DIM_C}, INIT_NORMAL,  \
                 STD_SIGMA, CUT_COLPAR, AL_HEADS3, 1, WHEN_ALWAYS},                         \
    [P_QKV_B] = {"self_attention.query_key_value.bias", 1, {DIM_3C, DIM_1}, INIT_ZEROS,     \
                 STD_NONE, CUT_COLPAR, AL_HEADS3, 0, WHEN_ALWAYS},                          \
    /* row-parallel: input columns of whole heads */                                        \
    [P_DENSE_W] = {"self_attention.dense.weight", 2, {DIM_C, DIM_C}, INIT_NORMAL, STD_OUT,  \
                   CUT_ROWPAR, AL_HEADS, 1, WHEN_ALWAYS},                                   \
    [P_DENSE_B] = {"self_attention.dense.bias", 1, {DIM_C, DIM_1}, INIT_ZEROS, STD_NONE,    \
                   CUT_REPL, AL_NONE, 0, WHEN_ALWAYS},                                      \
    [P_LN2_W] = LN_("post_attention_layernorm.weight", INIT_ONES),                         \
    [P_LN2_B] = LN_("post_attention_layernorm.bias", INIT_ZEROS)
static const unit_tensor_t tensors[P_PER_LAYER] = {
    ATTENTION_TENSORS,
    [P_FC1_W] = {"mlp.dense_h_to_4h.weight", 2, {DIM_F, DIM_C}, INIT_NORMAL, STD_SIGMA, CUT_COLPAR,
                 AL_FFN, 1, WHEN_ALWAYS},
    [P_FC1_B] = {"mlp.dense_h_to_4h.bias", 1, {DIM_F, DIM_1}, INIT_ZEROS, STD_NONE, CUT_COLPAR,
                 AL_FFN, 0, WHEN_ALWAYS},
    [P_FC2_W] = {"mlp.dense_4h_to_h.weight", 2, {DIM_C, DIM_F}, INIT_NORMAL, STD_OUT, CUT_ROWPAR,
                 AL_FFN, 1, WHEN_ALWAYS},
    [P_FC2_B] = {"mlp.dense_4h_to_h.bias", 1, {DIM_C, DIM_1}, INIT_ZEROS, STD_NONE, CUT_REPL,
                 AL_NONE, 0, WHEN_ALWAYS},
};

/* An MoE layer's: the attention block's, then the router and the
 * experts' stacked tensors, cut over expert parallelism's ranks (each
 * holds the experts it runs) and their FFN over tp as the dense MLP's
 * under expert tensor parallelism. */
enum { P_ROUTER = P_FC1_W, P_EXP_FC1_W, P_EXP_FC1_B, P_EXP_FC2_W, P_EXP_FC2_B, P_PER_MOE_LAYER };
static const unit_tensor_t moe_tensors[P_PER_MOE_LAYER] = {
    ATTENTION_TENSORS,
    [P_ROUTER] = {"mlp.router.weight", 2, {DIM_E, DIM_C}, INIT_NORMAL, STD_SIGMA, CUT_REPL,
                  AL_NONE, 1, WHEN_ALWAYS},
    [P_EXP_FC1_W] = {"mlp.experts.linear_fc1.weight", 3, {DIM_E, DIM_F, DIM_C}, INIT_NORMAL,
                     STD_SIGMA, CUT_EXPERT_FFN, AL_FFN, 1, WHEN_ALWAYS},
    [P_EXP_FC1_B] = {"mlp.experts.linear_fc1.bias", 2, {DIM_E, DIM_F}, INIT_ZEROS, STD_NONE,
                     CUT_EXPERT_FFN, AL_FFN, 0, WHEN_ALWAYS},
    [P_EXP_FC2_W] = {"mlp.experts.linear_fc2.weight", 3, {DIM_E, DIM_C, DIM_F}, INIT_NORMAL,
                     STD_OUT, CUT_EXPERT_FFN, AL_FFN, 1, WHEN_ALWAYS},
    [P_EXP_FC2_B] = {"mlp.experts.linear_fc2.bias", 2, {DIM_E, DIM_C}, INIT_ZEROS, STD_NONE,
                     CUT_EXPERT, AL_NONE, 0, WHEN_ALWAYS},
};
#undef ATTENTION_TENSORS
#undef LN_

/* Reported masks first, then activations; `order` is the forward's. */
enum { N_CHECKPOINTS = 11, N_MOE_CHECKPOINTS = 14 };
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
/* An MoE layer's: the routing is part of what the checker compares
 * (every layout must make the golden run's choices: experts, weights,
 * drops). Masks first, as the dense kind's. */
static const unit_checkpoint_t moe_checkpoints[N_MOE_CHECKPOINTS] = {
    {"mask", "attention_dropout", ST_U8, 3, {DIM_H, DIM_T, DIM_T}, 2, WHEN_ADROP, CKPT_COMPUTE},
    {"mask", "attention_output_dropout", ST_U8, 2, {DIM_T, DIM_C}, 5, WHEN_HDROP, CKPT_COMPUTE},
    {"mask", "mlp_output_dropout", ST_U8, 2, {DIM_T, DIM_C}, 12, WHEN_HDROP, CKPT_COMPUTE},
    {"mask", "mlp.router.kept", ST_U8, 2, {DIM_T, DIM_K}, 10, WHEN_ALWAYS, CKPT_COMPUTE},
    {"act", "input_layernorm.output", ST_F32, 2, {DIM_T, DIM_C}, 0, WHEN_ALWAYS, CKPT_COMPUTE},
    {"act", "self_attention.query_key_value.output", ST_F32, 2, {DIM_T, DIM_3C}, 1, WHEN_ALWAYS, CKPT_TP_ROW_LINEARS},
    {"act", "self_attention.core_attention.output", ST_F32, 2, {DIM_T, DIM_C}, 3, WHEN_ALWAYS, CKPT_CP_ATTENTION},
    {"act", "self_attention.dense.output", ST_F32, 2, {DIM_T, DIM_C}, 4, WHEN_ALWAYS, CKPT_TP_ROW},
    {"act", "post_attention_layernorm.output", ST_F32, 2, {DIM_T, DIM_C}, 6, WHEN_ALWAYS, CKPT_COMPUTE},
    {"act", "mlp.router.logits", ST_F32, 2, {DIM_T, DIM_E}, 7, WHEN_ALWAYS, CKPT_COMPUTE},
    {"act", "mlp.router.choice", ST_I32, 2, {DIM_T, DIM_K}, 8, WHEN_ALWAYS, CKPT_COMPUTE},
    {"act", "mlp.router.weight", ST_F32, 2, {DIM_T, DIM_K}, 9, WHEN_ALWAYS, CKPT_COMPUTE},
    {"act", "mlp.experts.output", ST_F32, 2, {DIM_T, DIM_C}, 11, WHEN_ALWAYS, CKPT_COMPUTE},
    {"act", "output", ST_F32, 2, {DIM_T, DIM_C}, 13, WHEN_ALWAYS, CKPT_COMPUTE},
};

static inline float *PL(gpt_t *g, const unit_t *u, int k) { return unit_param(g, u, k); }
static inline acc_t *GL(gpt_t *g, const unit_t *u, int k) { return unit_grad(g, u, k); }

/* The attention block's activations and LN2's (both kinds). */
static void attention_layout(layer_acts_t *L, const slot_dims_t *d, carver_t *cv) {
    const size_t mb = d->mb, T = d->T, Tc = d->Tc, n = d->n, ns = d->ns, C = d->C, H = d->H;
    const size_t A_ = d->A;
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
}

static void layout(gpt_slot_t *A, int l, const slot_dims_t *d, int held, int next_held,
                   carver_t *cv) {
    layer_acts_t *L = &A->layer[l];
    const size_t n = d->n, ns = d->ns, C = d->C, F = d->F;
    if (!held) {
        /* the output of a layer another stage runs: where it arrives */
        if (next_held) L->out = CARVE_F(cv, ns * C);
        return;
    }
    attention_layout(L, d, cv);
    L->fc1_out = CARVE_F(cv, n * F);
    L->gelu_out = CARVE_F(cv, n * F);
    L->gelu_grad = CARVE_F(cv, n * F);
    L->fc2_out = CARVE_F(cv, ns * C);
    L->mlp_keep = d->hdrop ? CARVE_U8(cv, ns * C) : NULL;
    L->out = CARVE_F(cv, ns * C);
}

static void moe_layer_layout(gpt_slot_t *A, int l, const slot_dims_t *d, int held, int next_held,
                             carver_t *cv) {
    layer_acts_t *L = &A->layer[l];
    if (!held) {
        if (next_held) L->out = CARVE_F(cv, d->ns * d->C);
        return;
    }
    attention_layout(L, d, cv);
    moe_layout(L, d, cv);
    L->mlp_keep = d->hdrop ? CARVE_U8(cv, d->ns * d->C) : NULL;
    L->out = CARVE_F(cv, d->ns * d->C);
}

static float *output(gpt_slot_t *A, int l) { return A->layer[l].out; }

/* Both kinds: the dropout masks, the attention block, and LN2 (its
 * output gathered to every position under sequence parallelism). */
static void attention_block_forward(gpt_t *g, const unit_t *u, gpt_slot_t *A, const float *x,
                                    const pass_t *p) {
    const int l = u->index;
    const model_config_t *c = &g->cfg;
    const int C = c->hidden, W = g->local.attn;
    const gpt_local_t *lc = &g->local;
    const int rl = lc->row_linears; /* the seconds contract a slice of whole inputs */
    layer_acts_t *LA = &A->layer[l];
    float *scratch = g->scratch.row_scratch;
    if (LA->attn_keep) site_mask(g, A, p, LA->attn_keep, site_stream("attention_output_dropout", l, A->step));
    if (LA->mlp_keep) site_mask(g, A, p, LA->mlp_keep, site_stream("mlp_output_dropout", l, A->step));
    layernorm_forward(LA->ln1_out, LA->ln1_xhat, LA->ln1_rstd, x, PL(g, u, P_LN1_W),
                      PL(g, u, P_LN1_B), p->ns, C, c->ln_eps, scratch);
    tokens_full(g, p, LA->ln1_full, LA->ln1_out, C);
    /* column-parallel: this rank's heads (qkv rows are head-ordered) */
    pair_first_forward(g, p, LA->qkv, LA->ln1_full, PL(g, u, P_QKV_W), PL(g, u, P_QKV_B), C, 3 * W,
                       p->t_cc);
    attention_unit_forward(g, p, LA, site_stream("attention_dropout", l, A->step), A->mask_seq);
    pair_second_forward(g, p, LA->attn_out, LA->ctx, W, rl ? lc->cin0 : 0, rl ? lc->cin : W,
                        PL(g, u, P_DENSE_W), PL(g, u, P_DENSE_B), C, p->t_cc);
    residual_dropout(LA->resid1, x, LA->attn_out, LA->attn_keep, p->nsC, c->hidden_dropout);
    layernorm_forward(LA->ln2_out, LA->ln2_xhat, LA->ln2_rstd, LA->resid1, PL(g, u, P_LN2_W),
                      PL(g, u, P_LN2_B), p->ns, C, c->ln_eps, scratch);
    tokens_full(g, p, LA->ln2_full, LA->ln2_out, C);
}

static void forward(gpt_t *g, const unit_t *u, gpt_slot_t *A, const float *x, const pass_t *p) {
    const model_config_t *c = &g->cfg;
    const int n = p->n, C = c->hidden, F = g->local.ffn;
    const gpt_local_t *lc = &g->local;
    const int rl = lc->row_linears;
    layer_acts_t *LA = &A->layer[u->index];
    attention_block_forward(g, u, A, x, p);
    pair_first_forward(g, p, LA->fc1_out, LA->ln2_full, PL(g, u, P_FC1_W), PL(g, u, P_FC1_B), C, F,
                       p->t_cf);
    gelu_forward(LA->gelu_out, LA->gelu_grad, LA->fc1_out, (size_t)n * F);
    pair_second_forward(g, p, LA->fc2_out, LA->gelu_out, F, rl ? lc->fin0 : 0, rl ? lc->fin : F,
                        PL(g, u, P_FC2_W), PL(g, u, P_FC2_B), C, p->t_fc);
    residual_dropout(LA->out, LA->resid1, LA->fc2_out, LA->mlp_keep, p->nsC, c->hidden_dropout);
}

static moe_params_t moe_params(gpt_t *g, const unit_t *u) {
    return (moe_params_t){PL(g, u, P_ROUTER), PL(g, u, P_EXP_FC1_W), PL(g, u, P_EXP_FC1_B),
                          PL(g, u, P_EXP_FC2_W), PL(g, u, P_EXP_FC2_B)};
}

/* Routing is per sequence, so an MoE runs on every position of the
 * slot's sequences: the pass of whole sequences. Every tensor- and
 * context-parallel rank runs the (replicated) router and experts on all
 * of them, the same bits on each; their gradients are then whole and
 * equal on the tp ranks (as a replicated LayerNorm's without SP) and
 * split into whole tiles over the cp ranks (moe.c). */
static pass_t whole_sequences(const pass_t *p, int C) {
    pass_t w = *p;
    w.Tc = w.Tl = p->T, w.t0 = 0, w.sp = 0;
    w.n = w.ns = p->n_seq * p->T;
    w.nC = w.nsC = (size_t)w.n * C;
    w.runs = (cp_runs_t){.n = 1, .t0 = {0}, .len = {p->T}};
    return w;
}

/* rows of every position [n_seq*T, w] -> those at `runs` of each sequence
 * [n_seq*sum(runs), w], in the runs' order */
static void rows_at_runs(float *dst, const float *whole, const cp_runs_t *runs, int n_seq, int T,
                         int w) {
    size_t at = 0;
    for (int s = 0; s < n_seq; s++)
        for (int k = 0; k < runs->n; k++) {
            const size_t len = (size_t)runs->len[k] * w;
            memcpy(dst + at, whole + ((size_t)s * T + runs->t0[k]) * w, len * sizeof(float));
            at += len;
        }
}

/* The rows of the positions this cp rank holds [n_seq*Tc, w] (the runs'
 * order) -> every position [n_seq*T, w], gathered over cp (at cp = 1:
 * held itself). */
static const float *cp_whole(gpt_t *g, const pass_t *p, float *whole, const float *held, int w) {
    const int cp = g->local.cp;
    if (cp == 1) return held;
    const size_t count = (size_t)p->n_seq * p->Tc * w;
    float *parts = g->scratch.moe_cp_parts, *mine = parts + (size_t)g->local.cp_rank * count;
    memcpy(mine, held, count * sizeof(float));
    coll_all_gather(g->shard.cp_group, mine, parts, count, COLL_F32);
    const cp_comm_t comm = g->local.ulysses ? CP_ULYSSES : CP_RING;
    for (int r = 0; r < cp; r++) {
        const cp_runs_t runs = cp_runs(cp, r, p->T, comm);
        const float *part = parts + (size_t)r * count;
        for (int s = 0; s < p->n_seq; s++)
            for (int k = 0, at = 0; k < runs.n; at += runs.len[k++])
                memcpy(whole + ((size_t)s * p->T + runs.t0[k]) * w,
                       part + ((size_t)s * p->Tc + at) * w,
                       (size_t)runs.len[k] * w * sizeof(float));
    }
    return whole;
}

static void moe_layer_forward(gpt_t *g, const unit_t *u, gpt_slot_t *A, const float *x,
                              const pass_t *p) {
    layer_acts_t *LA = &A->layer[u->index];
    const int C = g->cfg.hidden;
    attention_block_forward(g, u, A, x, p);
    const moe_params_t w = moe_params(g, u);
    const pass_t whole = whole_sequences(p, C);
    moe_forward(g, &whole, LA, cp_whole(g, p, LA->moe_in, LA->ln2_full, C), &w);
    if (LA->moe_out_held != LA->moe_out)
        rows_at_runs(LA->moe_out_held, LA->moe_out, &p->runs, p->n_seq, p->T, C);
    residual_dropout(LA->out, LA->resid1, LA->moe_out_held, LA->mlp_keep, p->nsC,
                     g->cfg.hidden_dropout);
}

static void moe_layer_after_forward(gpt_t *g, const unit_t *u, gpt_slot_t *A, const pass_t *p) {
    const pass_t whole = whole_sequences(p, g->cfg.hidden);
    moe_after_forward(g, &whole, &A->layer[u->index], u->index);
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

/* Both kinds, after the MLP's backward left the gradient of LN2's
 * (gathered) output in d_ln2: LN2, the attention residual and block,
 * LN1; the residual stream's gradient ends in A->d_resid. */
static void attention_block_backward(gpt_t *g, const unit_t *u, gpt_slot_t *A, const pass_t *p,
                                     const float *d_ln2) {
    const int l = u->index;
    const model_config_t *c = &g->cfg;
    const int C = c->hidden, W = g->local.attn;
    const gpt_local_t *lc = &g->local;
    const int rl = lc->row_linears;
    const size_t nsC = p->nsC;
    layer_acts_t *LA = &A->layer[l];
    gpt_scratch_t *S = &g->scratch;
    float *d_res = A->d_resid, *d_a = S->d_tmp, *d_b = S->d_tmp2, *d_w = S->d_wide;
    ln_backward(g, p, d_a, GL(g, u, P_LN2_W), GL(g, u, P_LN2_B), d_ln2, LA->ln2_xhat, LA->ln2_rstd,
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

static void backward(gpt_t *g, const unit_t *u, gpt_slot_t *A, const pass_t *p) {
    const int C = g->cfg.hidden, F = g->local.ffn;
    const gpt_local_t *lc = &g->local;
    const int rl = lc->row_linears;
    layer_acts_t *LA = &A->layer[u->index];
    gpt_scratch_t *S = &g->scratch;
    float *d_a = S->d_tmp, *d_b = S->d_tmp2, *d_w = S->d_wide;
    /* out = resid1 + drop(fc2_out); the row-parallel backward needs every
     * token's gradient (its bias gradient is then whole on every rank) */
    const float *d_fc2 = branch_grad(g, p, d_a, S->d_tmp3, A->d_resid, LA->mlp_keep);
    pair_second_backward(g, p, d_w, GL(g, u, P_FC2_W), GL(g, u, P_FC2_B), d_fc2, LA->gelu_out, F,
                         rl ? lc->fin0 : 0, rl ? lc->fin : F, PL(g, u, P_FC2_W), C, p->t_fc);
    gelu_backward(d_w, d_w, LA->gelu_grad, (size_t)p->n * F);
    pair_first_backward(g, p, d_b, GL(g, u, P_FC1_W), GL(g, u, P_FC1_B), d_w, LA->ln2_full,
                        PL(g, u, P_FC1_W), C, F, p->t_cf);
    attention_block_backward(g, u, A, p, d_b);
}

static void moe_layer_backward(gpt_t *g, const unit_t *u, gpt_slot_t *A, const pass_t *p) {
    layer_acts_t *LA = &A->layer[u->index];
    gpt_scratch_t *S = &g->scratch;
    const float *d_moe = branch_grad(g, p, S->d_tmp, S->d_tmp3, A->d_resid, LA->mlp_keep);
    const moe_params_t w = moe_params(g, u);
    const moe_grads_t gr = {GL(g, u, P_ROUTER), GL(g, u, P_EXP_FC1_W), GL(g, u, P_EXP_FC1_B),
                            GL(g, u, P_EXP_FC2_W), GL(g, u, P_EXP_FC2_B)};
    const int C = g->cfg.hidden, whole_held = S->moe_dx_full == NULL; /* no sp, no cp */
    const pass_t whole = whole_sequences(p, C);
    moe_backward(g, &whole, LA, whole_held ? S->d_tmp2 : S->moe_dx_full,
                 cp_whole(g, p, S->moe_dout, d_moe, C), LA->moe_in, &w, &gr);
    if (!whole_held) rows_at_runs(S->d_tmp2, S->moe_dx_full, &p->runs, p->n_seq, p->T, C);
    attention_block_backward(g, u, A, p, S->d_tmp2);
}

/* The attention block's views, in both tables' order of its checkpoints
 * (masks, then activations), around the MLP's. */
static void views(const gpt_t *g, const unit_t *u, const gpt_slot_t *A,
                  const unit_positions_t *pos, unit_view_t *out) {
    const gpt_local_t *lc = &g->local;
    const layer_acts_t *LA = &A->layer[u->index];
    const int64_t W = lc->attn, D = lc->heads ? W / lc->heads : 0;
    const int moe = u->kind == &unit_moe_layer;
    /* ring: the rank's query rows (axis 1) of its heads; Ulysses: every
     * row of the heads it attends */
    const unit_view_t att_mask = {LA->att_keep, 0, lc->att_head0, lc->att_heads,
                                  lc->ulysses ? NULL : pos->all, 1};
    const unit_view_t stream_mask = {LA->attn_keep, -1, 0, 0, pos->stream, 0};
    const unit_view_t mlp_mask = {LA->mlp_keep, -1, 0, 0, pos->stream, 0};
    const unit_view_t attention[5] = {
        {LA->ln1_full, -1, 0, 0, pos->all, 0},
        {LA->qkv, 1, 3 * D * lc->head0, 3 * W, pos->all, 0},
        {LA->ctx, 1, D * lc->head0, W, pos->all, 0},
        {LA->attn_out, -1, 0, 0, pos->stream, 0},
        {LA->ln2_full, -1, 0, 0, pos->all, 0},
    };
    int k = 0;
    out[k++] = att_mask, out[k++] = stream_mask, out[k++] = mlp_mask;
    if (moe) out[k++] = (unit_view_t){LA->moe_kept, -1, 0, 0, pos->whole, 0};
    for (int i = 0; i < 5; i++) out[k++] = attention[i];
    if (moe) {
        const void *mlp[4] = {LA->moe_logits, LA->moe_choice, LA->moe_weight, LA->moe_out};
        for (int i = 0; i < 4; i++) out[k++] = (unit_view_t){mlp[i], -1, 0, 0, pos->whole, 0};
    } else {
        out[k++] = (unit_view_t){LA->fc1_out, 1, lc->ffn0, lc->ffn, pos->all, 0};
        out[k++] = (unit_view_t){LA->fc2_out, -1, 0, 0, pos->stream, 0};
    }
    out[k++] = (unit_view_t){LA->out, -1, 0, 0, pos->stream, 0};
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

/* The same layer with a mixture of experts for its MLP: the same prefix
 * and input, so a model's layers may mix the two (--moe-layer-freq). */
const unit_kind_t unit_moe_layer = {
    .name = "moe layer",
    .prefix = "layers.%d.",
    .tensors = moe_tensors,
    .n_tensors = P_PER_MOE_LAYER,
    .checkpoints = moe_checkpoints,
    .n_checkpoints = N_MOE_CHECKPOINTS,
    .input_grad = "grad_input.layers.%d",
    .bind = NULL,
    .layout = moe_layer_layout,
    .output = output,
    .forward = moe_layer_forward,
    .after_forward = moe_layer_after_forward,
    .backward = moe_layer_backward,
    .views = views,
};
