/* units.c - the GPT as units over activation slots (model.h, MODEL.md).
 *
 *   unit 0      embedding: x = drop(wte[tokens] + wpe)
 *   unit 1..L   layer l-1: x = x + drop(attn(LN1 x)); x = x + drop(mlp(LN2 x))
 *   unit L+1    head: logits = LNf(x) . wte^T (or output_layer), token losses
 *
 * Each unit's forward keeps what its backward needs in the slot; its
 * backward adds parameter gradients to open exact sums (g->grad_acc) and
 * passes the residual stream's gradient on in slot->d_resid. Residual
 * connections: the gradient that reaches x is d_out + d_branch, one fp32
 * add, the residual term first.
 *
 * The checkpoints a dump or checker sees are listed once, in
 * gpt_report_unit, not interleaved with the maths.
 */
#include "parity/model.h"

#include <stdio.h>
#include <string.h>

#include "parity/layers.h"
#include "parity/rng.h"
#include "parity/runtime.h"
#include "tp.h"

static float *P_(gpt_t *g, int idx) { return g->param_ptr[idx]; }
static float *PL(gpt_t *g, int l, int slot) { return P_(g, param_layer(&g->table, l, slot)); }
static acc_t *GL(gpt_t *g, int l, int slot) { return &g->grad_acc[param_layer(&g->table, l, slot)]; }

/* The dropout streams: keyed by site name and step, never by rank (I3). */
static uint64_t site_stream(const char *site, int l, int64_t step) {
    char name[96];
    if (l >= 0)
        snprintf(name, sizeof name, "layers.%d.%s", l, site);
    else
        snprintf(name, sizeof name, "%s", site);
    return rng_stream_id(name, (uint64_t)step);
}

/* x_out = x + drop(y): the dropout site's mask for the slot's tokens,
 * keyed by their global flat index. */
static void residual_dropout(float *x_out, const float *x, const float *y, uint8_t *keep,
                             size_t count, float p, uint64_t seed, uint64_t stream,
                             uint64_t first_index) {
    if (keep) {
        dropout_mask(keep, count, seed, stream, first_index, p);
        dropout_forward(x_out, y, keep, count, p);
        for (size_t i = 0; i < count; i++) x_out[i] = x[i] + x_out[i];
    } else {
        for (size_t i = 0; i < count; i++) x_out[i] = x[i] + y[i];
    }
}

/* What one unit pass needs to know about its slot's tokens. */
typedef struct {
    int n_seq, n;                 /* sequences, tokens */
    size_t nC;
    uint64_t first_tok;           /* global flat index of the slot's first token */
    linear_tiles_t t_cc, t_cf, t_fc;
    attn_shape_t as;
} pass_t;

static pass_t pass_of(const gpt_t *g, const gpt_slot_t *A) {
    const model_config_t *c = &g->cfg;
    pass_t p;
    p.n_seq = A->n_seq;
    p.n = A->n_seq * c->seq_length;
    p.nC = (size_t)p.n * c->hidden;
    p.first_tok = (uint64_t)A->first_seq * (uint64_t)c->seq_length;
    p.t_cc = (linear_tiles_t){c->tile_tokens, c->tile_features, c->tile_features};
    p.t_cf = (linear_tiles_t){c->tile_tokens, c->tile_features, c->tile_ffn};
    p.t_fc = (linear_tiles_t){c->tile_tokens, c->tile_ffn, c->tile_features};
    p.as = (attn_shape_t){A->n_seq,         c->seq_length, g->local.attn, g->local.heads,
                          c->tile_tokens,   c->attention_dropout, c->heads, g->local.head0};
    return p;
}

/* ---- tensor-parallel linears -------------------------------------------- */

/* Row-parallel: y[n,out] = round(sum over ALL input tiles of x.w^T) + b,
 * this rank holding n_in of the input features. Its partial stays open,
 * the group completes the exact sum, each rank rounds once, then the bias
 * (I4). One rank: the golden linear_forward. */
static void rowpar_forward(gpt_t *g, float *y, const float *x, const float *w, const float *b,
                           int n, int n_in, int n_out, linear_tiles_t t) {
    if (g->shard.tp == 1) {
        linear_forward(y, x, w, b, n, n_in, n_out, t, &g->ws);
        return;
    }
    const size_t cnt = (size_t)n * n_out;
    acc_t open;
    acc_init_with(&open, cnt, g->scratch.open);
    acc_zero(&open);
    contract_acc(CONTRACT_NT, n, n_out, n_in, t.tokens, t.out, t.in, x, n_in, w, n_in, &open, 0,
                 (size_t)n_out, &g->ws);
    tp_complete_open(g, &open, cnt, y);
    if (b) linear_add_bias(y, b, n, n_out);
}

/* Column-parallel backward: this rank holds n_out of the output features,
 * so its weight and bias gradients are whole, and the input gradient
 * dx[n,in] = round(sum over ALL output tiles of dy.w) is completed across
 * the group as in rowpar_forward. */
static void colpar_backward(gpt_t *g, float *dx, acc_t *dw, acc_t *db, const float *dy,
                            const float *x, const float *w, int n, int n_in, int n_out,
                            linear_tiles_t t) {
    if (g->shard.tp == 1) {
        linear_backward(dx, dw, db, dy, x, w, n, n_in, n_out, t, &g->ws);
        return;
    }
    linear_backward(NULL, dw, db, dy, x, w, n, n_in, n_out, t, &g->ws);
    const size_t cnt = (size_t)n * n_in;
    acc_t open;
    acc_init_with(&open, cnt, g->scratch.open);
    acc_zero(&open);
    contract_acc(CONTRACT_NN, n, n_in, n_out, t.tokens, t.in, t.out, dy, n_out, w, n_in, &open, 0,
                 (size_t)n_in, &g->ws);
    tp_complete_open(g, &open, cnt, dx);
}

/* The residual stream entering unit u (u >= 1). */
static float *stream_in(gpt_slot_t *A, int u) { return u == 1 ? A->emb : A->layer[u - 2].out; }

static void unit_event(gpt_t *g, const gpt_observer_t *obs, int unit, int event) {
    if (obs && obs->unit) obs->unit(obs->ctx, g, unit, event);
}

void gpt_step_begin(gpt_t *g) {
    for (int i = 0; i < g->table.count; i++) acc_zero(&g->grad_acc[i]);
    sacc_init(&g->loss_acc);
}

void gpt_slot_begin(gpt_t *g, int s, const int32_t *inputs, const int32_t *targets, int n_seq,
                    int first_seq, int64_t step, const gpt_observer_t *obs) {
    const model_config_t *c = &g->cfg;
    const int T = c->seq_length, V = c->vocab, n = n_seq * T;
    gpt_slot_t *A = &g->slot[s];
    if (s < 0 || s >= g->n_slots)
        parity_fatal("gpt_slot_begin: slot %d of %d", s, g->n_slots);
    if (n_seq <= 0 || n_seq > c->micro_batch || first_seq < 0 ||
        first_seq + n_seq > c->global_batch)
        parity_fatal("gpt_slot_begin: sequences %d..%d do not fit micro_batch %d / batch %d",
                     first_seq, first_seq + n_seq - 1, c->micro_batch, c->global_batch);
    for (int i = 0; i < n; i++)
        if (inputs[i] < 0 || inputs[i] >= V || targets[i] < 0 || targets[i] >= V)
            parity_fatal("gpt_slot_begin: token %d outside the vocabulary [0, %d)", i, V);
    if (A->inputs != inputs) memcpy(A->inputs, inputs, (size_t)n * sizeof(int32_t));
    if (A->targets != targets) memcpy(A->targets, targets, (size_t)n * sizeof(int32_t));
    A->n_seq = n_seq;
    A->first_seq = first_seq;
    A->step = step;
    if (obs && obs->batch_tensor) {
        gpt_view_t v = {"input_ids", ST_I32, A->inputs, first_seq, n_seq, 1, {T}, {0}, {T}};
        obs->batch_tensor(obs->ctx, &v);
        v.name = "labels", v.data = A->targets;
        obs->batch_tensor(obs->ctx, &v);
    }
}

/* ---- unit 0: the embedding ---------------------------------------------- */

static void embedding_unit_forward(gpt_t *g, gpt_slot_t *A, const pass_t *p) {
    const model_config_t *c = &g->cfg;
    /* vocabulary-parallel: each rank looks up the rows it holds (-0
     * elsewhere) and the sum over the group is the owner's row */
    embedding_lookup(A->emb, A->inputs, p->n, c->hidden, P_(g, g->table.wte), g->local.vocab0,
                     g->local.vocab);
    if (g->shard.tp > 1) tp_sum_f32(g, A->emb, p->nC);
    embedding_add_positions(A->emb, p->n_seq, c->seq_length, c->hidden, P_(g, g->table.wpe));
    if (A->emb_keep) {
        dropout_mask(A->emb_keep, p->nC, c->seed, site_stream("dropout.embedding", -1, A->step),
                     p->first_tok * (uint64_t)c->hidden, c->hidden_dropout);
        dropout_forward(A->emb, A->emb, A->emb_keep, p->nC, c->hidden_dropout);
    }
}

static void embedding_unit_backward(gpt_t *g, gpt_slot_t *A, const pass_t *p) {
    const model_config_t *c = &g->cfg;
    float *d = A->d_resid;
    if (A->emb_keep) {
        dropout_backward(g->scratch.d_tmp, d, A->emb_keep, p->nC, c->hidden_dropout);
        d = g->scratch.d_tmp;
    }
    embedding_backward(&g->grad_acc[g->table.wte], &g->grad_acc[g->table.wpe], d, A->inputs,
                       p->n_seq, c->seq_length, c->hidden, g->local.vocab0, g->local.vocab);
}

/* ---- units 1..L: the transformer layers --------------------------------- */

static void layer_unit_forward(gpt_t *g, int l, gpt_slot_t *A, const float *x, const pass_t *p) {
    const model_config_t *c = &g->cfg;
    const int n = p->n, C = c->hidden, F = g->local.ffn, W = g->local.attn;
    const float ph = c->hidden_dropout;
    layer_acts_t *LA = &A->layer[l];
    contract_ws_t *ws = &g->ws;
    float *scratch = g->scratch.row_scratch;
    layernorm_forward(LA->ln1_out, LA->ln1_xhat, LA->ln1_rstd, x, PL(g, l, P_LN1_W),
                      PL(g, l, P_LN1_B), n, C, c->ln_eps, scratch);
    /* column-parallel: this rank's heads (qkv rows are head-ordered) */
    linear_forward(LA->qkv, LA->ln1_out, PL(g, l, P_QKV_W), PL(g, l, P_QKV_B), n, C, 3 * W, p->t_cc,
                   ws);
    if (LA->att_keep)
        attention_mask(LA->att_keep, &p->as, A->first_seq, c->seed,
                       site_stream("attention_dropout", l, A->step));
    attention_forward(LA->ctx, LA->att_e, LA->att_ehat, LA->att_z, LA->qkv, LA->att_keep, &p->as,
                      ws);
    rowpar_forward(g, LA->attn_out, LA->ctx, PL(g, l, P_DENSE_W), PL(g, l, P_DENSE_B), n, W, C,
                   p->t_cc);
    residual_dropout(LA->resid1, x, LA->attn_out, LA->attn_keep, p->nC, ph, c->seed,
                     site_stream("attention_output_dropout", l, A->step), p->first_tok * C);
    layernorm_forward(LA->ln2_out, LA->ln2_xhat, LA->ln2_rstd, LA->resid1, PL(g, l, P_LN2_W),
                      PL(g, l, P_LN2_B), n, C, c->ln_eps, scratch);
    linear_forward(LA->fc1_out, LA->ln2_out, PL(g, l, P_FC1_W), PL(g, l, P_FC1_B), n, C, F, p->t_cf,
                   ws);
    gelu_forward(LA->gelu_out, LA->gelu_grad, LA->fc1_out, (size_t)n * F);
    rowpar_forward(g, LA->fc2_out, LA->gelu_out, PL(g, l, P_FC2_W), PL(g, l, P_FC2_B), n, F, C,
                   p->t_fc);
    residual_dropout(LA->out, LA->resid1, LA->fc2_out, LA->mlp_keep, p->nC, ph, c->seed,
                     site_stream("mlp_output_dropout", l, A->step), p->first_tok * C);
}

static void layer_unit_backward(gpt_t *g, int l, gpt_slot_t *A, const pass_t *p) {
    const model_config_t *c = &g->cfg;
    const int n = p->n, C = c->hidden, F = g->local.ffn, W = g->local.attn;
    const float ph = c->hidden_dropout;
    const size_t nC = p->nC;
    layer_acts_t *LA = &A->layer[l];
    contract_ws_t *ws = &g->ws;
    float *scratch = g->scratch.row_scratch;
    float *d_res = A->d_resid, *d_a = g->scratch.d_tmp, *d_b = g->scratch.d_tmp2;
    float *d_w = g->scratch.d_wide;
    /* out = resid1 + drop(fc2_out) */
    if (LA->mlp_keep) dropout_backward(d_a, d_res, LA->mlp_keep, nC, ph);
    const float *d_fc2 = LA->mlp_keep ? d_a : d_res;
    linear_backward(d_w, GL(g, l, P_FC2_W), GL(g, l, P_FC2_B), d_fc2, LA->gelu_out,
                    PL(g, l, P_FC2_W), n, F, C, p->t_fc, ws);
    gelu_backward(d_w, d_w, LA->gelu_grad, (size_t)n * F);
    colpar_backward(g, d_b, GL(g, l, P_FC1_W), GL(g, l, P_FC1_B), d_w, LA->ln2_out,
                    PL(g, l, P_FC1_W), n, C, F, p->t_cf);
    layernorm_backward(d_a, GL(g, l, P_LN2_W), GL(g, l, P_LN2_B), d_b, LA->ln2_xhat, LA->ln2_rstd,
                       PL(g, l, P_LN2_W), n, C, scratch);
    for (size_t i = 0; i < nC; i++) d_res[i] = d_res[i] + d_a[i];
    /* resid1 = x_in + drop(attn_out) */
    if (LA->attn_keep) dropout_backward(d_a, d_res, LA->attn_keep, nC, ph);
    const float *d_dense = LA->attn_keep ? d_a : d_res;
    linear_backward(d_b, GL(g, l, P_DENSE_W), GL(g, l, P_DENSE_B), d_dense, LA->ctx,
                    PL(g, l, P_DENSE_W), n, W, C, p->t_cc, ws);
    attention_backward(d_w, d_b, LA->ctx, LA->att_e, LA->att_ehat, LA->att_z, LA->qkv, LA->att_keep,
                       &p->as, g->scratch.att_scratch, ws);
    colpar_backward(g, d_a, GL(g, l, P_QKV_W), GL(g, l, P_QKV_B), d_w, LA->ln1_out,
                    PL(g, l, P_QKV_W), n, C, 3 * W, p->t_cc);
    layernorm_backward(d_b, GL(g, l, P_LN1_W), GL(g, l, P_LN1_B), d_a, LA->ln1_xhat, LA->ln1_rstd,
                       PL(g, l, P_LN1_W), n, C, scratch);
    for (size_t i = 0; i < nC; i++) d_res[i] = d_res[i] + d_b[i];
}

/* ---- unit L+1: the head ------------------------------------------------- */

static int head_weight(const gpt_t *g) { return g->cfg.tied ? g->table.wte : g->table.out; }

static void head_unit_forward(gpt_t *g, gpt_slot_t *A, const float *x, const pass_t *p) {
    const model_config_t *c = &g->cfg;
    const int n = p->n, C = c->hidden, V = g->local.vocab, v0 = g->local.vocab0;
    const int split = g->shard.tp > 1;
    float *scratch = g->scratch.row_scratch, *m = A->ce_max, *Z = A->ce_z, *l = g->scratch.ce_tl;
    layernorm_forward(A->lnf_out, A->lnf_xhat, A->lnf_rstd, x, P_(g, g->table.lnf_w),
                      P_(g, g->table.lnf_b), n, C, c->ln_eps, scratch);
    /* vocabulary-parallel LM head (column-parallel over vocabulary rows) */
    linear_forward(A->logits, A->lnf_out, P_(g, head_weight(g)), NULL, n, C, V, p->t_cc, &g->ws);
    /* cross-entropy's three reductions: max, exact sum of exps, target logit */
    ce_row_max(m, A->logits, n, V);
    if (split) tp_max_f32(g, m, (size_t)n);
    ce_exp_sum(Z, split ? g->scratch.ce_zacc : NULL, A->logits, m, n, V, scratch);
    if (split) {
        tp_sum_xacc(g, g->scratch.ce_zacc, (size_t)n);
        for (int i = 0; i < n; i++) Z[i] = xacc_round_f32(&g->scratch.ce_zacc[i]);
    }
    ce_target_logit(l, A->logits, A->targets, n, V, v0);
    if (split) tp_sum_f32(g, l, (size_t)n);
    ce_loss(A->token_loss, m, Z, l, n);
    sacc_add(&g->loss_acc, A->token_loss, (size_t)n);
}

static void head_unit_backward(gpt_t *g, gpt_slot_t *A, const pass_t *p) {
    const model_config_t *c = &g->cfg;
    const int n = p->n, C = c->hidden, V = g->local.vocab;
    float *scratch = g->scratch.row_scratch, *d_logits = g->scratch.d_logits;
    /* 1/N from the GLOBAL token count, once (I4) */
    const int64_t total_tokens = (int64_t)c->global_batch * c->seq_length;
    crossentropy_backward(d_logits, A->logits, A->targets, A->ce_max, A->ce_z, n, V,
                          g->local.vocab0, total_tokens, scratch);
    colpar_backward(g, g->scratch.d_tmp, &g->grad_acc[head_weight(g)], NULL, d_logits, A->lnf_out,
                    P_(g, head_weight(g)), n, C, V, p->t_cc);
    layernorm_backward(A->d_resid, &g->grad_acc[g->table.lnf_w], &g->grad_acc[g->table.lnf_b],
                       g->scratch.d_tmp, A->lnf_xhat, A->lnf_rstd, P_(g, g->table.lnf_w), n, C,
                       scratch);
}

/* ---- dispatch and the golden schedule ----------------------------------- */

static gpt_slot_t *slot_at(gpt_t *g, int unit, int s) {
    if (unit < 0 || unit >= gpt_num_units(g) || s < 0 || s >= g->n_slots)
        parity_fatal("unit %d / slot %d out of range (%d units, %d slots)", unit, s,
                     gpt_num_units(g), g->n_slots);
    return &g->slot[s];
}

void gpt_unit_forward(gpt_t *g, int unit, int s, const gpt_observer_t *obs) {
    gpt_slot_t *A = slot_at(g, unit, s);
    const pass_t p = pass_of(g, A);
    const int L = g->cfg.layers;
    unit_event(g, obs, unit, GPT_FWD_BEGIN);
    if (unit == 0)
        embedding_unit_forward(g, A, &p);
    else if (unit <= L)
        layer_unit_forward(g, unit - 1, A, stream_in(A, unit), &p);
    else
        head_unit_forward(g, A, stream_in(A, unit), &p);
    unit_event(g, obs, unit, GPT_FWD_END);
    if (obs && obs->batch_tensor) gpt_report_unit(g, unit, s, obs);
}

void gpt_unit_backward(gpt_t *g, int unit, int s, const gpt_observer_t *obs) {
    gpt_slot_t *A = slot_at(g, unit, s);
    const pass_t p = pass_of(g, A);
    const int L = g->cfg.layers;
    unit_event(g, obs, unit, GPT_BWD_BEGIN);
    if (unit == 0)
        embedding_unit_backward(g, A, &p);
    else if (unit <= L)
        layer_unit_backward(g, unit - 1, A, &p);
    else
        head_unit_backward(g, A, &p);
    unit_event(g, obs, unit, GPT_BWD_END);
}

void gpt_microbatch(gpt_t *g, const int32_t *inputs, const int32_t *targets, int n_seq,
                    int first_seq, int64_t step, const gpt_observer_t *obs) {
    const int U = gpt_num_units(g);
    gpt_slot_begin(g, 0, inputs, targets, n_seq, first_seq, step, obs);
    for (int u = 0; u < U; u++) gpt_unit_forward(g, u, 0, obs);
    for (int u = U - 1; u >= 0; u--) gpt_unit_backward(g, u, 0, obs);
}
