/* vocab.c - what the vocabulary styles share (vocab.h): the golden
 * lookup's position rows and backward, the golden head, and the
 * cross-entropy whose three reductions a group completes:
 *
 *   m_i = max_j logits[i,j]                    all-reduce max
 *   Z_i = round(sum_j exp(logits[i,j] - m_i))  exact sums all-reduced, rounded once
 *   l_i = logits[i, target_i]                  fp32 sum: every rank but the
 *                                              owner adds -0, so it is exact
 *   loss_i = (m_i + log Z_i) - l_i
 *
 * Max is exact and the sums are exact, so any cut of the vocabulary gives
 * the golden bits (I2). */
#include "model/styles/vocab.h"

#include "parity/coll.h"
#include "parity/pmath.h"

static void layout(void **priv, const gpt_local_t *lc, size_t n, int split, carver_t *cv) {
    vocab_scratch_t *S = carve(cv, sizeof *S);
    float *d_logits = CARVE_F(cv, n * (size_t)lc->vocab);
    xacc_t *zacc = split ? (xacc_t *)carve(cv, n * sizeof(xacc_t)) : NULL;
    float *tl = CARVE_F(cv, n);
    if (S) *S = (vocab_scratch_t){d_logits, tl, zacc};
    *priv = S;
}

void vocab_layout_whole(void **priv, const model_config_t *c, const gpt_local_t *lc, size_t n,
                        carver_t *cv) {
    (void)c;
    layout(priv, lc, n, 0, cv);
}

void vocab_layout_split(void **priv, const model_config_t *c, const gpt_local_t *lc, size_t n,
                        carver_t *cv) {
    (void)c;
    layout(priv, lc, n, 1, cv);
}

void vocab_rows_and_positions(gpt_t *g, const pass_t *p, float *x, const float *wpe,
                              const vocab_rows_hook_t *hook) {
    const int C = g->cfg.hidden;
    if (hook && hook->fn) hook->fn(g, hook->u, hook->A, p);
    for (int s = 0, at = 0; s < p->n_seq; s++)
        for (int k = 0; k < p->runs.n; at += p->runs.len[k++])
            embedding_add_positions(x + (size_t)at * C, 1, p->runs.len[k], p->runs.t0[k], C, wpe);
}

const float *vocab_rows_backward(gpt_t *g, const pass_t *p, acc_t *dwte, acc_t *dwpe,
                                 const float *d, const int32_t *tokens) {
    const int C = g->cfg.hidden;
    /* every token's gradient: the word rows held and every position row */
    d = tokens_full(g, p, g->scratch.d_tmp3, d, C);
    const cp_runs_t *r = &g->local.runs; /* every position the slot holds */
    for (int s = 0, at = 0; s < p->n_seq; s++)
        for (int k = 0; k < r->n; at += r->len[k++])
            embedding_backward(dwte, dwpe, d + (size_t)at * C, tokens + at, 1, r->len[k], r->t0[k],
                               C, g->local.vocab0, g->local.vocab);
    return d;
}

void vocab_linear_forward(gpt_t *g, const pass_t *p, float *logits, const float *x, const float *e) {
    linear_forward(logits, x, e, NULL, p->n, g->local.hid, g->local.vocab, p->t_cc, &g->ws);
}

void vocab_linear_backward(gpt_t *g, const pass_t *p, float *dx, acc_t *de, const float *dlogits,
                           const float *x, const float *e) {
    colpar_backward(g, p, dx, de, NULL, dlogits, x, e, g->cfg.hidden, g->local.vocab, p->t_cc);
}

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

void vocab_ce_softmax(gpt_t *g, const pass_t *p, group_t *grp, float *m, float *Z,
                      const float *logits) {
    const int n = p->n, V = g->local.vocab;
    xacc_t *zacc = grp ? vocab_scratch(g)->zacc : NULL;
    ce_row_max(m, logits, n, V);
    const int pad = grp ? padded_columns(g) : 0;
    for (int i = 0; pad && i < n; i++) m[i] = m[i] > 0.0f ? m[i] : 0.0f;
    if (grp) coll_all_reduce(grp, m, m, (size_t)n, COLL_F32, COLL_MAX);
    ce_exp_sum(Z, zacc, logits, m, n, V, g->scratch.row_scratch);
    for (int i = 0; pad && i < n; i++)
        for (int k = 0; k < pad; k++) xacc_add_f32(&zacc[i], pm_expf(0.0f - m[i]));
    if (grp) {
        coll_all_reduce(grp, zacc, zacc, (size_t)n, COLL_XACC, COLL_SUM);
        for (int i = 0; i < n; i++) Z[i] = xacc_round_f32(&zacc[i]);
    }
}

void vocab_ce_loss(gpt_t *g, const pass_t *p, group_t *grp, float *loss, const float *m,
                   const float *Z, const float *logits, const int32_t *targets) {
    const int n = p->n;
    float *l = vocab_scratch(g)->tl;
    ce_target_logit(l, logits, targets, n, g->local.vocab, g->local.vocab0);
    if (grp) coll_all_reduce(grp, l, l, (size_t)n, COLL_F32, COLL_SUM);
    ce_loss(loss, m, Z, l, n);
}

void vocab_ce_forward_whole(gpt_t *g, const pass_t *p, float *loss, float *m, float *Z,
                            const float *logits, const int32_t *targets) {
    vocab_ce_softmax(g, p, NULL, m, Z, logits);
    vocab_ce_loss(g, p, NULL, loss, m, Z, logits, targets);
}

void vocab_ce_forward_tp(gpt_t *g, const pass_t *p, float *loss, float *m, float *Z,
                         const float *logits, const int32_t *targets) {
    vocab_ce_softmax(g, p, g->shard.tp_group, m, Z, logits);
    vocab_ce_loss(g, p, g->shard.tp_group, loss, m, Z, logits, targets);
}

float *vocab_ce_backward(gpt_t *g, const pass_t *p, const float *logits, const int32_t *targets,
                         const float *m, const float *Z, int64_t total_tokens) {
    float *d_logits = vocab_scratch(g)->d_logits;
    crossentropy_backward(d_logits, logits, targets, m, Z, p->n, g->local.vocab, g->local.vocab0,
                          total_tokens, g->scratch.row_scratch);
    return d_logits;
}

int vocab_counts_tp_rank0(const gpt_t *g) { return g->shard.tp_rank == 0; }

int gpt_counts_loss(const gpt_t *g) { return vocab_style(g)->counts_loss(g); }
