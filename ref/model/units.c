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
#include <string.h>

#include "parity/pmath.h"
#include "parity/runtime.h"
#include "tp.h"
#include "units_internal.h"

/* The residual stream entering unit u (u >= 1). */
static float *stream_in(gpt_slot_t *A, int u) { return u == 1 ? A->emb : A->layer[u - 2].out; }

static void unit_event(gpt_t *g, const gpt_observer_t *obs, int unit, int event) {
    if (event == GPT_FWD_BEGIN || event == GPT_BWD_BEGIN) /* for debuggers: parity devices */
        device_note_pass(event == GPT_FWD_BEGIN ? DEVICE_PASS_FORWARD : DEVICE_PASS_BACKWARD, unit);
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
    /* context parallelism: keep the positions held, in the runs' order
     * (in place: a kept token never moves later) */
    const cp_runs_t *r = &g->local.runs;
    for (int b = 0, at = 0; r->len[0] < T && b < n_seq; b++)
        for (int k = 0; k < r->n; at += r->len[k++]) {
            const size_t from = (size_t)b * T + (size_t)r->t0[k], bytes = (size_t)r->len[k] * 4;
            memmove(A->inputs + at, A->inputs + from, bytes);
            memmove(A->targets + at, A->targets + from, bytes);
        }
    A->n_seq = n_seq;
    A->first_seq = first_seq;
    A->mask_seq = first_seq;
    A->step = step;
    if (obs && obs->batch_tensor) {
        const int64_t shape[1] = {T};
        report_rows(obs, A, "input_ids", ST_I32, A->inputs, 1, shape, -1, 0, 0, r, 0);
        report_rows(obs, A, "labels", ST_I32, A->targets, 1, shape, -1, 0, 0, r, 0);
    }
}

/* ---- unit 0: the embedding ---------------------------------------------- */

static void embedding_unit_forward(gpt_t *g, gpt_slot_t *A, const pass_t *p) {
    const model_config_t *c = &g->cfg;
    const int C = c->hidden;
    /* vocabulary-parallel: each rank looks up the rows it holds (-0
     * elsewhere) and the sum over the group is the owner's row; under
     * sequence parallelism the sum is reduce-scattered to the positions
     * each rank holds */
    float *rows = p->sp ? g->scratch.d_tmp : A->emb;
    embedding_lookup(rows, A->inputs, p->n, C, P_(g, g->table.wte), g->local.vocab0,
                     g->local.vocab);
    if (p->sp)
        sp_reduce_scatter_f32(g, A->emb, rows, p->n_seq, C);
    else if (g->shard.tp > 1)
        tp_sum_f32(g, A->emb, p->nC);
    for (int s = 0, at = 0; s < p->n_seq; s++)
        for (int k = 0; k < p->runs.n; at += p->runs.len[k++])
            embedding_add_positions(A->emb + (size_t)at * C, 1, p->runs.len[k], p->runs.t0[k], C,
                                    P_(g, g->table.wpe));
    if (A->emb_keep) {
        site_mask(g, A, p, A->emb_keep, site_stream("dropout.embedding", -1, A->step));
        dropout_forward(A->emb, A->emb, A->emb_keep, p->nsC, c->hidden_dropout);
    }
}

static void embedding_unit_backward(gpt_t *g, gpt_slot_t *A, const pass_t *p) {
    const model_config_t *c = &g->cfg;
    const float *d = A->d_resid;
    if (A->emb_keep) {
        dropout_backward(g->scratch.d_tmp, d, A->emb_keep, p->nsC, c->hidden_dropout);
        d = g->scratch.d_tmp;
    }
    /* every token's gradient: the word rows held and every position row */
    d = tokens_full(g, p, g->scratch.d_tmp3, d, c->hidden);
    const cp_runs_t *r = &g->local.runs; /* every position the slot holds */
    for (int s = 0, at = 0; s < p->n_seq; s++)
        for (int k = 0; k < r->n; at += r->len[k++])
            embedding_backward(&g->grad_acc[g->table.wte], &g->grad_acc[g->table.wpe],
                               d + (size_t)at * c->hidden, A->inputs + at, 1, r->len[k], r->t0[k],
                               c->hidden, g->local.vocab0, g->local.vocab);
}

/* ---- unit L+1: the head ------------------------------------------------- */

static int head_weight(const gpt_t *g) { return g->cfg.tied ? g->table.wte : g->table.out; }

/* The deliberately broken variant GPT_BROKEN_TP_VOCAB_PAD: Megatron
 * pads the vocabulary to a multiple of 128 x tp, so at tp = 4 a 256-word
 * vocabulary becomes 512, and the padded rows' logits enter the softmax.
 * Emulated with zero rows held by tensor-parallel rank 0: each padded
 * column has logit +0, so it joins the max and adds exp(0 - m) to Z. */
static int padded_columns(const gpt_t *g) {
    if (!(g->shard.broken & GPT_BROKEN_TP_VOCAB_PAD) || g->shard.tp == 1 || g->shard.tp_rank)
        return 0;
    const int unit = 128 * g->shard.tp, V = g->cfg.vocab;
    return (V + unit - 1) / unit * unit - V;
}

static void head_unit_forward(gpt_t *g, gpt_slot_t *A, const float *x, const pass_t *p) {
    const model_config_t *c = &g->cfg;
    const int n = p->n, C = c->hidden, V = g->local.vocab, v0 = g->local.vocab0;
    const int split = g->shard.tp > 1;
    float *scratch = g->scratch.row_scratch, *m = A->ce_max, *Z = A->ce_z, *l = g->scratch.ce_tl;
    layernorm_forward(A->lnf_out, A->lnf_xhat, A->lnf_rstd, x, P_(g, g->table.lnf_w),
                      P_(g, g->table.lnf_b), p->ns, C, c->ln_eps, scratch);
    tokens_full(g, p, A->lnf_full, A->lnf_out, C);
    /* vocabulary-parallel LM head (column-parallel over vocabulary rows) */
    linear_forward(A->logits, A->lnf_full, P_(g, head_weight(g)), NULL, n, C, V, p->t_cc, &g->ws);
    /* cross-entropy's three reductions: max, exact sum of exps, target logit */
    ce_row_max(m, A->logits, n, V);
    const int pad = padded_columns(g);
    for (int i = 0; pad && i < n; i++) m[i] = m[i] > 0.0f ? m[i] : 0.0f;
    if (split) tp_max_f32(g, m, (size_t)n);
    ce_exp_sum(Z, split ? g->scratch.ce_zacc : NULL, A->logits, m, n, V, scratch);
    for (int i = 0; pad && i < n; i++)
        for (int k = 0; k < pad; k++) xacc_add_f32(&g->scratch.ce_zacc[i], pm_expf(0.0f - m[i]));
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
    float *d_logits = g->scratch.d_logits;
    /* 1/N from the GLOBAL token count, once (I4) */
    const int64_t total_tokens = (int64_t)c->global_batch * c->seq_length;
    crossentropy_backward(d_logits, A->logits, A->targets, A->ce_max, A->ce_z, n, V,
                          g->local.vocab0, total_tokens, g->scratch.row_scratch);
    colpar_backward(g, p, g->scratch.d_tmp, &g->grad_acc[head_weight(g)], NULL, d_logits,
                    A->lnf_full, P_(g, head_weight(g)), C, V, p->t_cc);
    ln_backward(g, p, A->d_resid, &g->grad_acc[g->table.lnf_w], &g->grad_acc[g->table.lnf_b],
                g->scratch.d_tmp, A->lnf_xhat, A->lnf_rstd, P_(g, g->table.lnf_w));
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
    const pass_t p = unit_pass(g, A);
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
    const pass_t p = unit_pass(g, A);
    const int L = g->cfg.layers;
    unit_event(g, obs, unit, GPT_BWD_BEGIN);
    if (unit == 0)
        embedding_unit_backward(g, A, &p);
    else if (unit <= L)
        layer_unit_backward(g, unit - 1, A, &p);
    else
        head_unit_backward(g, A, &p);
    if (unit == L && (g->shard.broken & GPT_BROKEN_TP_INPUT_GRAD) && g->shard.tp_rank == 1) {
        uint32_t u; /* the checker control: one bit of the last layer's input gradient */
        memcpy(&u, A->d_resid, sizeof u);
        u ^= 1u;
        memcpy(A->d_resid, &u, sizeof u);
    }
    if (obs && obs->batch_tensor) gpt_report_input_grad(g, unit, s, obs);
    unit_event(g, obs, unit, GPT_BWD_END);
}

void gpt_microbatch(gpt_t *g, const int32_t *inputs, const int32_t *targets, int n_seq,
                    int first_seq, int64_t step, const gpt_observer_t *obs) {
    const int U = gpt_num_units(g);
    gpt_slot_begin(g, 0, inputs, targets, n_seq, first_seq, step, obs);
    for (int u = 0; u < U; u++) gpt_unit_forward(g, u, 0, obs);
    for (int u = U - 1; u >= 0; u--) gpt_unit_backward(g, u, 0, obs);
}
