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

#include "model/gpt.h"
#include "parity/coll.h"
#include "model/styles/attention.h"
#include "model/units/moe.h"
#include "model/units/unit_layer.h"

static const unit_tensor_t tensors[P_PER_LAYER] = {
    LAYER_ATTENTION_TENSORS("input_layernorm", "self_attention"),
    LAYER_LN2_TENSORS,
    LAYER_MLP_TENSORS,
};

/* An MoE layer's: the attention block's, then the router and the
 * experts' stacked tensors, cut over expert parallelism's ranks (each
 * holds the experts it runs) and their FFN over tp as the dense MLP's
 * under expert tensor parallelism. */
enum { P_ROUTER = P_FC1_W, P_EXP_FC1_W, P_EXP_FC1_B, P_EXP_FC2_W, P_EXP_FC2_B, P_PER_MOE_LAYER };
static const unit_tensor_t moe_tensors[P_PER_MOE_LAYER] = {
    LAYER_ATTENTION_TENSORS("input_layernorm", "self_attention"),
    LAYER_LN2_TENSORS,
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

/* Reported masks first, then activations; `order` is the forward's. */
enum { N_MOE_CHECKPOINTS = 14 };
static const unit_checkpoint_t checkpoints[LAYER_CHECKPOINTS] = {
    LAYER_ATTENTION_MASKS("attention", 0),
    LAYER_MLP_MASK(6),
    LAYER_ATTENTION_ACTS("input_layernorm", "self_attention", 0),
    LAYER_MLP_CHECKPOINTS(6),
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

const attn_block_t layer_self_attention = {
    P_LN1_W, P_LN1_B, P_QKV_W, P_QKV_B, P_DENSE_W, P_DENSE_B, ATTN_CAUSAL, ROWS_ALL, 0,
    "attention_dropout", "attention_output_dropout"};

/* ---- activations ---------------------------------------------------------- */

void layer_core_layout(attn_acts_t *L, const slot_dims_t *d, carver_t *cv) {
    const size_t mb = d->mb, T = d->T, Tc = d->Tc, H = d->H;
    /* ring: [mb,H,Tc,T], the rank's queries against every key;
     * Ulysses: [mb,H/cp,T,T], every query of its heads: as many */
    L->att_e = CARVE_F(cv, mb * H * Tc * T);
    L->att_ehat = d->adrop ? CARVE_F(cv, mb * H * Tc * T) : L->att_e;
    L->att_z = CARVE_F(cv, mb * H * Tc);
    L->att_keep = d->adrop ? CARVE_U8(cv, mb * H * Tc * T) : NULL;
}

void layer_attention_layout(attn_acts_t *L, const slot_dims_t *d, carver_t *cv) {
    const size_t n = d->n, ns = d->ns, C = d->C, A_ = d->A;
    L->ln1_xhat = CARVE_F(cv, ns * C);
    L->ln1_rstd = CARVE_F(cv, ns);
    L->ln1_out = CARVE_F(cv, ns * C);
    L->ln1_full = d->sp ? CARVE_F(cv, n * C) : L->ln1_out;
    L->qkv = CARVE_F(cv, n * 3 * A_);
    if (!d->core_shared) layer_core_layout(L, d, cv); /* else attn_core_bind's */
    L->ctx = CARVE_F(cv, n * A_);
    L->core_qkv = L->qkv, L->core_ctx = L->ctx; /* unless the style keeps its own */
    const attention_style_t *st = attention_style_of(d->attention);
    if (st->layout_acts) st->layout_acts(L, d, cv);
    L->attn_out = CARVE_F(cv, ns * C);
    L->attn_keep = d->hdrop ? CARVE_U8(cv, ns * C) : NULL;
    L->resid1 = CARVE_F(cv, ns * C);
}

void layer_ln2_layout(mlp_acts_t *L, const slot_dims_t *d, carver_t *cv) {
    const size_t n = d->n, ns = d->ns, C = d->C;
    L->ln2_xhat = CARVE_F(cv, ns * C);
    L->ln2_rstd = CARVE_F(cv, ns);
    L->ln2_out = CARVE_F(cv, ns * C);
    L->ln2_full = d->sp ? CARVE_F(cv, n * C) : L->ln2_out;
}

void layer_mlp_layout(layer_acts_t *L, const slot_dims_t *d, carver_t *cv) {
    const size_t n = d->n, ns = d->ns, C = d->C, F = d->F;
    mlp_acts_t *M = &L->mlp;
    M->fc1_out = CARVE_F(cv, n * F);
    M->gelu_out = CARVE_F(cv, n * F);
    M->gelu_grad = CARVE_F(cv, n * F);
    M->fc2_out = CARVE_F(cv, ns * C);
    M->mlp_keep = d->hdrop ? CARVE_U8(cv, ns * C) : NULL;
    L->out = CARVE_F(cv, ns * C);
}

/* A layer another stage runs keeps only where its output arrives (when
 * the next unit runs here); 1: the layer runs here. */
static int layer_held(layer_acts_t *L, const slot_dims_t *d, int held, int next_held, carver_t *cv) {
    if (!held && next_held) L->out = CARVE_F(cv, d->ns * d->C);
    return held;
}

void layer_layout(gpt_slot_t *A, int l, const slot_dims_t *d, int held, int next_held,
                  carver_t *cv) {
    layer_acts_t *L = &A->layer[l];
    if (!layer_held(L, d, held, next_held, cv)) return;
    layer_attention_layout(&L->attn, d, cv);
    layer_ln2_layout(&L->mlp, d, cv);
    layer_mlp_layout(L, d, cv);
}

static void moe_layer_layout(gpt_slot_t *A, int l, const slot_dims_t *d, int held, int next_held,
                             carver_t *cv) {
    layer_acts_t *L = &A->layer[l];
    if (!layer_held(L, d, held, next_held, cv)) return;
    layer_attention_layout(&L->attn, d, cv);
    layer_ln2_layout(&L->mlp, d, cv);
    moe_layout(L, d, cv);
    L->mlp.mlp_keep = d->hdrop ? CARVE_U8(cv, d->ns * d->C) : NULL;
    L->out = CARVE_F(cv, d->ns * d->C);
}

float *layer_output(gpt_slot_t *A, int l) { return A->layer[l].out; }

/* ---- the stream's rows ---------------------------------------------------- */

/* Calls fn on each held row of p (storage index, global position). */
#define FOR_HELD_ROWS(p, at, pos)                                                          \
    for (size_t at = 0, s_ = 0; s_ < (size_t)(p)->n_seq; s_++)                             \
        for (int k_ = 0; k_ < (p)->runs.n; k_++)                                           \
            for (int pos = (p)->runs.t0[k_]; pos < (p)->runs.t0[k_] + (p)->runs.len[k_];   \
                 pos++, at++)

void zero_rows_outside(float *y, const pass_t *p, layer_rows_t rows, int P, int w) {
    if (rows == ROWS_ALL) return;
    FOR_HELD_ROWS(p, at, pos)
        if ((pos < P) != (rows == ROWS_SOURCE)) memset(y + at * w, 0, (size_t)w * sizeof(float));
}

void copy_rows(float *dst, const float *src, const pass_t *p, layer_rows_t rows, int P, int w) {
    FOR_HELD_ROWS(p, at, pos)
        if (rows == ROWS_ALL || (pos < P) == (rows == ROWS_SOURCE))
            memcpy(dst + at * w, src + at * w, (size_t)w * sizeof(float));
}

/* ---- the blocks ----------------------------------------------------------- */

/* The pass of an attention block: its mask over the stream. */
static pass_t block_pass(const gpt_t *g, const pass_t *p, const attn_block_t *b) {
    pass_t q = *p;
    q.as.mask = b->mask;
    q.as.prefix = g->cfg.encoder_seq_length;
    return q;
}

/* Selective recomputation: an attention block's core (scores, softmax,
 * dropout) is the scratch's one set while the block runs, which every
 * block overwrites; 1 when bound. */
static int core_bind(gpt_t *g, attn_acts_t *LA, const attn_block_t *b) {
    if (g->local.recompute != MODEL_RECOMPUTE_SELECTIVE) return 0;
    const attn_acts_t *core = &g->scratch.recompute_core[b->cross ? 1 : 0];
    LA->att_e = core->att_e, LA->att_ehat = core->att_ehat;
    LA->att_z = core->att_z, LA->att_keep = core->att_keep;
    return 1;
}

/* ctx from qkv: the attention style's core, its dropout mask keyed by
 * the layer's site, the step and the slot's global sequences (I3), so a
 * second run (the backward's, selective) gives the first's bits. Mixed
 * precision: the core as FlashAttention runs it, in fp32; its output
 * rounded. */
static void core_forward(gpt_t *g, const gpt_slot_t *A, attn_acts_t *LA, const pass_t *p,
                         const attn_block_t *b, int l) {
    attention_style(g)->forward(g, p, LA, site_stream(b->att_site, l, A->step),
                                A->mask_seq + unit_inner_shift(g, A->n_seq));
    act_round(g, LA->ctx, (size_t)p->n * g->local.attn);
}

void attn_block_forward(gpt_t *g, const unit_t *u, gpt_slot_t *A, attn_acts_t *LA,
                        const float *x, const pass_t *p0, const attn_block_t *b) {
    const int l = unit_acts(u), P = g->cfg.encoder_seq_length;
    const model_config_t *c = &g->cfg;
    const int C = g->local.hid, W = g->local.attn; /* C: the stream's features held */
    const gpt_local_t *lc = &g->local;
    const int rl = lc->row_linears; /* the seconds contract a slice of whole inputs */
    const pass_t q = block_pass(g, p0, b), *p = &q;
    if (LA->attn_keep) site_mask(g, A, p, LA->attn_keep, site_stream(b->out_site, l, A->step));
    ln_forward(g, p, LA->ln1_out, LA->ln1_xhat, LA->ln1_rstd, x, PL(g, u, b->ln_w),
               PL(g, u, b->ln_b));
    if (b->cross) copy_rows(LA->ln1_out, x, p, ROWS_SOURCE, P, C); /* the encoder's output as it is */
    tokens_full(g, p, LA->ln1_full, LA->ln1_out, C);
    /* column-parallel: this rank's heads (qkv rows are head-ordered) */
    pair_first_forward(g, p, LA->qkv, LA->ln1_full, PL(g, u, b->qkv_w), PL(g, u, b->qkv_b), C,
                       3 * W, p->t_cc);
    core_bind(g, LA, b);
    core_forward(g, A, LA, p, b, l);
    pair_second_forward(g, p, LA->attn_out, LA->ctx, W, rl ? lc->cin0 : 0, rl ? lc->cin : W,
                        PL(g, u, b->dense_w), PL(g, u, b->dense_b), C, p->t_cc, TP2D_HEADS);
    zero_rows_outside(LA->attn_out, p, b->rows, P, C);
    residual_dropout(LA->resid1, x, LA->attn_out, LA->attn_keep, p->nsC, c->hidden_dropout);
    act_round(g, LA->resid1, p->nsC);
}

void ln2_forward(gpt_t *g, const unit_t *u, mlp_acts_t *M, const float *x, const pass_t *p) {
    const int C = g->local.hid;
    ln_forward(g, p, M->ln2_out, M->ln2_xhat, M->ln2_rstd, x, PL(g, u, P_LN2_W),
               PL(g, u, P_LN2_B));
    tokens_full(g, p, M->ln2_full, M->ln2_out, C);
}

void mlp_forward(gpt_t *g, const unit_t *u, gpt_slot_t *A, layer_acts_t *LA, const float *x,
                 const pass_t *p, layer_rows_t rows) {
    const model_config_t *c = &g->cfg;
    const int n = p->n, C = g->local.hid, F = g->local.ffn;
    const gpt_local_t *lc = &g->local;
    const int rl = lc->row_linears;
    mlp_acts_t *M = &LA->mlp;
    if (M->mlp_keep)
        site_mask(g, A, p, M->mlp_keep, site_stream("mlp_output_dropout", unit_acts(u), A->step));
    pair_first_forward(g, p, M->fc1_out, M->ln2_full, PL(g, u, P_FC1_W), PL(g, u, P_FC1_B), C, F,
                       p->t_cf);
    gelu_forward(M->gelu_out, M->gelu_grad, M->fc1_out, (size_t)n * F);
    act_round(g, M->gelu_out, (size_t)n * F);
    pair_second_forward(g, p, M->fc2_out, M->gelu_out, F, rl ? lc->fin0 : 0, rl ? lc->fin : F,
                        PL(g, u, P_FC2_W), PL(g, u, P_FC2_B), C, p->t_fc, TP2D_FFN);
    zero_rows_outside(M->fc2_out, p, rows, c->encoder_seq_length, C);
    residual_dropout(LA->out, x, M->fc2_out, M->mlp_keep, p->nsC, c->hidden_dropout);
    act_round(g, LA->out, p->nsC);
}

static void forward(gpt_t *g, const unit_t *u, gpt_slot_t *A, const float *x, const pass_t *p) {
    layer_acts_t *LA = &A->layer[unit_acts(u)];
    attn_block_forward(g, u, A, &LA->attn, x, p, &layer_self_attention);
    ln2_forward(g, u, &LA->mlp, LA->attn.resid1, p);
    mlp_forward(g, u, A, LA, LA->attn.resid1, p, ROWS_ALL);
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
    float *parts = g->scratch.moe->cp_parts, *mine = parts + (size_t)g->local.cp_rank * count;
    memcpy(mine, held, count * sizeof(float));
    coll_all_gather(g->shard.cp_group, mine, parts, count, COLL_F32);
    const cp_comm_t comm = attention_style(g)->comm; /* who holds which positions */
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
    layer_acts_t *LA = &A->layer[unit_acts(u)];
    const int C = g->cfg.hidden;
    uint8_t *keep = LA->mlp.mlp_keep;
    if (keep) site_mask(g, A, p, keep, site_stream("mlp_output_dropout", unit_acts(u), A->step));
    attn_block_forward(g, u, A, &LA->attn, x, p, &layer_self_attention);
    ln2_forward(g, u, &LA->mlp, LA->attn.resid1, p);
    const moe_params_t w = moe_params(g, u);
    const pass_t whole = whole_sequences(p, C);
    moe_acts_t *ma = LA->moe;
    moe_forward(g, &whole, ma, cp_whole(g, p, ma->in, LA->mlp.ln2_full, C), &w);
    if (ma->out_held != ma->out) rows_at_runs(ma->out_held, ma->out, &p->runs, p->n_seq, p->T, C);
    residual_dropout(LA->out, LA->attn.resid1, ma->out_held, keep, p->nsC,
                     g->cfg.hidden_dropout);
    act_round(g, LA->out, p->nsC); /* the residual sum, as the dense layer's */
}

static void moe_layer_after_forward(gpt_t *g, const unit_t *u, gpt_slot_t *A, const pass_t *p) {
    const pass_t whole = whole_sequences(p, g->cfg.hidden);
    moe_after_forward(g, &whole, A->layer[unit_acts(u)].moe, u->index);
}

/* The gradient of a residual branch's input, drop(y), on the rows the
 * branch changes (zero on the others): over the tokens held into `held`,
 * then (sequence parallel) gathered to every token. */
static const float *branch_grad(gpt_t *g, const pass_t *p, float *held, float *full,
                                const float *d_res, const uint8_t *keep, layer_rows_t rows) {
    const float *d = d_res;
    if (keep) {
        dropout_backward(held, d_res, keep, p->nsC, g->cfg.hidden_dropout);
        act_round(g, held, p->nsC);
        d = held;
    } else if (rows != ROWS_ALL) {
        memcpy(held, d_res, p->nsC * sizeof(float));
        d = held;
    }
    zero_rows_outside(held, p, rows, g->cfg.encoder_seq_length, g->local.hid);
    return tokens_full(g, p, full, d, g->local.hid);
}

void ln2_backward(gpt_t *g, const unit_t *u, gpt_slot_t *A, mlp_acts_t *M, const pass_t *p,
                  const float *d_ln2) {
    float *d_res = A->d_resid, *d_a = g->scratch.d_tmp;
    ln_backward(g, p, d_a, GL(g, u, P_LN2_W), GL(g, u, P_LN2_B), d_ln2, M->ln2_xhat, M->ln2_rstd,
                PL(g, u, P_LN2_W));
    for (size_t i = 0; i < p->nsC; i++) d_res[i] = d_res[i] + d_a[i];
    act_round(g, d_res, p->nsC);
}

void attn_block_backward(gpt_t *g, const unit_t *u, gpt_slot_t *A, attn_acts_t *LA,
                         const pass_t *p0, const attn_block_t *b) {
    const model_config_t *c = &g->cfg;
    const int C = g->local.hid, W = g->local.attn, P = c->encoder_seq_length;
    const gpt_local_t *lc = &g->local;
    const int rl = lc->row_linears;
    const pass_t q = block_pass(g, p0, b), *p = &q;
    const size_t nsC = p->nsC;
    gpt_scratch_t *S = &g->scratch;
    float *d_res = A->d_resid, *d_a = S->d_tmp, *d_b = S->d_tmp2, *d_w = S->d_wide;
    /* selective: the core again, before the backward's scratch fills */
    if (core_bind(g, LA, b)) core_forward(g, A, LA, p, b, unit_acts(u));
    /* resid1 = x_in + drop(attn_out) */
    const float *d_dense = branch_grad(g, p, d_a, S->d_tmp3, d_res, LA->attn_keep, b->rows);
    pair_second_backward(g, p, d_b, GL(g, u, b->dense_w), GL(g, u, b->dense_b), d_dense, LA->ctx,
                         W, rl ? lc->cin0 : 0, rl ? lc->cin : W, PL(g, u, b->dense_w), C, p->t_cc,
                         TP2D_HEADS);
    attention_style(g)->backward(g, p, LA, d_w, d_b);
    act_round(g, d_w, (size_t)p->n * 3 * W);
    pair_first_backward(g, p, d_a, GL(g, u, b->qkv_w), GL(g, u, b->qkv_b), d_w, LA->ln1_full,
                        PL(g, u, b->qkv_w), C, 3 * W, p->t_cc);
    if (b->cross) { /* the source rows' gradient skips the LayerNorm */
        memcpy(S->d_tmp3, d_a, nsC * sizeof(float));
        zero_rows_outside(d_a, p, ROWS_TARGET, P, C);
    }
    ln_backward(g, p, d_b, GL(g, u, b->ln_w), GL(g, u, b->ln_b), d_a, LA->ln1_xhat, LA->ln1_rstd,
                PL(g, u, b->ln_w));
    if (b->cross) copy_rows(d_b, S->d_tmp3, p, ROWS_SOURCE, P, C);
    for (size_t i = 0; i < nsC; i++) d_res[i] = d_res[i] + d_b[i];
    act_round(g, d_res, nsC);
}

/* The GPT layers' own: the checker's control on the last layer. */
static void broken_input_grad(gpt_t *g, const unit_t *u, gpt_slot_t *A) {
    if (u->index == g->cfg.layers - 1 && (g->shard.broken & GPT_BROKEN_TP_INPUT_GRAD) &&
        g->shard.tp_rank == 1) {
        uint32_t bits; /* the checker control: one bit of the last layer's input gradient */
        memcpy(&bits, A->d_resid, sizeof bits);
        bits ^= 1u;
        memcpy(A->d_resid, &bits, sizeof bits);
    }
}

const float *mlp_backward(gpt_t *g, const unit_t *u, gpt_slot_t *A, layer_acts_t *LA,
                          const pass_t *p, layer_rows_t rows) {
    const int C = g->local.hid, F = g->local.ffn;
    const gpt_local_t *lc = &g->local;
    const int rl = lc->row_linears;
    gpt_scratch_t *S = &g->scratch;
    float *d_a = S->d_tmp, *d_b = S->d_tmp2, *d_w = S->d_wide;
    const mlp_acts_t *M = &LA->mlp;
    /* out = x + drop(fc2_out); the row-parallel backward needs every
     * token's gradient (its bias gradient is then whole on every rank) */
    const float *d_fc2 = branch_grad(g, p, d_a, S->d_tmp3, A->d_resid, M->mlp_keep, rows);
    pair_second_backward(g, p, d_w, GL(g, u, P_FC2_W), GL(g, u, P_FC2_B), d_fc2, M->gelu_out, F,
                         rl ? lc->fin0 : 0, rl ? lc->fin : F, PL(g, u, P_FC2_W), C, p->t_fc,
                         TP2D_FFN);
    gelu_backward(d_w, d_w, M->gelu_grad, (size_t)p->n * F);
    act_round(g, d_w, (size_t)p->n * F);
    pair_first_backward(g, p, d_b, GL(g, u, P_FC1_W), GL(g, u, P_FC1_B), d_w, M->ln2_full,
                        PL(g, u, P_FC1_W), C, F, p->t_cf);
    return d_b;
}

static void backward(gpt_t *g, const unit_t *u, gpt_slot_t *A, const pass_t *p) {
    layer_acts_t *LA = &A->layer[unit_acts(u)];
    ln2_backward(g, u, A, &LA->mlp, p, mlp_backward(g, u, A, LA, p, ROWS_ALL));
    attn_block_backward(g, u, A, &LA->attn, p, &layer_self_attention);
    broken_input_grad(g, u, A);
}

static void moe_layer_backward(gpt_t *g, const unit_t *u, gpt_slot_t *A, const pass_t *p) {
    layer_acts_t *LA = &A->layer[unit_acts(u)];
    gpt_scratch_t *S = &g->scratch;
    const float *d_moe =
        branch_grad(g, p, S->d_tmp, S->d_tmp3, A->d_resid, LA->mlp.mlp_keep, ROWS_ALL);
    const moe_params_t w = moe_params(g, u);
    const moe_grads_t gr = {GL(g, u, P_ROUTER), GL(g, u, P_EXP_FC1_W), GL(g, u, P_EXP_FC1_B),
                            GL(g, u, P_EXP_FC2_W), GL(g, u, P_EXP_FC2_B)};
    const moe_scratch_t *ms = S->moe;
    const int C = g->cfg.hidden, whole_held = ms->dx_full == NULL; /* no sp, no cp */
    const pass_t whole = whole_sequences(p, C);
    moe_backward(g, &whole, LA->moe, whole_held ? S->d_tmp2 : ms->dx_full,
                 cp_whole(g, p, ms->dout, d_moe, C), LA->moe->in, &w, &gr);
    if (!whole_held) rows_at_runs(S->d_tmp2, ms->dx_full, &p->runs, p->n_seq, p->T, C);
    ln2_backward(g, u, A, &LA->mlp, p, S->d_tmp2);
    attn_block_backward(g, u, A, &LA->attn, p, &layer_self_attention);
    broken_input_grad(g, u, A);
}

/* ---- views ---------------------------------------------------------------- */

void layer_attention_views(const gpt_t *g, const attn_acts_t *LA, const unit_positions_t *pos,
                           unit_view_t *masks, unit_view_t *acts) {
    const gpt_local_t *lc = &g->local;
    const int64_t W = lc->attn, D = lc->heads ? W / lc->heads : 0;
    /* the query rows (axis 1) of the heads the core attends, as its
     * style holds them (the slot's positions, or every row) */
    const int inner = pos->inner_shift;
    masks[0] = (unit_view_t){LA->att_keep, 0, lc->att_head0, lc->att_heads,
                             attention_style(g)->mask_rows(pos), 1, inner};
    masks[1] = unit_stream_view(g, LA->attn_keep, pos->stream);
    acts[0] = unit_stream_view(g, LA->ln1_full, pos->all);
    acts[1] = (unit_view_t){LA->qkv, 1, 3 * D * lc->head0, 3 * W, pos->all, 0, inner};
    acts[2] = (unit_view_t){LA->ctx, 1, D * lc->head0, W, pos->all, 0, inner};
    acts[3] = unit_stream_view(g, LA->attn_out, pos->stream);
}

void layer_mlp_views(const gpt_t *g, const layer_acts_t *LA, const unit_positions_t *pos,
                     unit_view_t *mask, unit_view_t *acts) {
    const gpt_local_t *lc = &g->local;
    const mlp_acts_t *M = &LA->mlp;
    mask[0] = unit_stream_view(g, M->mlp_keep, pos->stream);
    acts[0] = unit_stream_view(g, M->ln2_full, pos->all);
    acts[1] = (unit_view_t){M->fc1_out, 1, lc->ffn0, lc->ffn, pos->all, 0, pos->inner_shift};
    acts[2] = unit_stream_view(g, M->fc2_out, pos->stream);
    acts[3] = unit_stream_view(g, LA->out, pos->stream);
}

/* In the tables' order: masks (attention's two, the MLP's, an MoE's
 * routing), the attention block's activations, then the MLP's. */
void layer_views(const gpt_t *g, const unit_t *u, const gpt_slot_t *A,
                  const unit_positions_t *pos, unit_view_t *out) {
    const layer_acts_t *LA = &A->layer[unit_acts(u)];
    if (u->kind != &unit_moe_layer) {
        unit_view_t mlp[4];
        layer_attention_views(g, &LA->attn, pos, out, out + 3);
        layer_mlp_views(g, LA, pos, out + 2, mlp);
        out[7] = mlp[0], out[8] = mlp[1], out[9] = mlp[2], out[10] = mlp[3];
        return;
    }
    unit_view_t mask[1], mlp[4];
    layer_attention_views(g, &LA->attn, pos, out, out + 4);
    layer_mlp_views(g, LA, pos, mask, mlp);
    out[2] = mask[0];
    out[3] = (unit_view_t){LA->moe->kept, -1, 0, 0, pos->whole, 0, 0};
    out[8] = mlp[0]; /* LN2 */
    const void *moe[4] = {LA->moe->logits, LA->moe->choice, LA->moe->weight, LA->moe->out};
    for (int i = 0; i < 4; i++) out[9 + i] = (unit_view_t){moe[i], -1, 0, 0, pos->whole, 0, 0};
    out[13] = mlp[3]; /* the output */
}

const unit_kind_t unit_layer = {
    .name = "layer",
    .prefix = "layers.%d.",
    .tensors = tensors,
    .n_tensors = P_PER_LAYER,
    .checkpoints = checkpoints,
    .n_checkpoints = LAYER_CHECKPOINTS,
    .input_grad = "grad_input.layers.%d",
    .bind = NULL,
    .layout = layer_layout,
    .output = layer_output,
    .forward = forward,
    .after_forward = NULL,
    .backward = backward,
    .views = layer_views,
    .attention_blocks = 1,
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
    .output = layer_output,
    .forward = moe_layer_forward,
    .after_forward = moe_layer_after_forward,
    .backward = moe_layer_backward,
    .views = layer_views,
    .attention_blocks = 1,
};
