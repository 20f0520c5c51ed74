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
#include "units_internal.h"

void layer_unit_forward(gpt_t *g, int l, gpt_slot_t *A, const float *x, const pass_t *p) {
    const model_config_t *c = &g->cfg;
    const int n = p->n, ns = p->ns, C = c->hidden, F = g->local.ffn, W = g->local.attn;
    const gpt_local_t *lc = &g->local;
    const int rl = lc->row_linears; /* the seconds contract a slice of whole inputs */
    layer_acts_t *LA = &A->layer[l];
    float *scratch = g->scratch.row_scratch;
    if (LA->attn_keep) site_mask(g, A, p, LA->attn_keep, site_stream("attention_output_dropout", l, A->step));
    if (LA->mlp_keep) site_mask(g, A, p, LA->mlp_keep, site_stream("mlp_output_dropout", l, A->step));
    /* attention block */
    layernorm_forward(LA->ln1_out, LA->ln1_xhat, LA->ln1_rstd, x, PL(g, l, P_LN1_W),
                      PL(g, l, P_LN1_B), ns, C, c->ln_eps, scratch);
    tokens_full(g, p, LA->ln1_full, LA->ln1_out, C);
    /* column-parallel: this rank's heads (qkv rows are head-ordered) */
    pair_first_forward(g, p, LA->qkv, LA->ln1_full, PL(g, l, P_QKV_W), PL(g, l, P_QKV_B), C, 3 * W,
                       p->t_cc);
    attention_unit_forward(g, p, LA, site_stream("attention_dropout", l, A->step), A->mask_seq);
    pair_second_forward(g, p, LA->attn_out, LA->ctx, W, rl ? lc->cin0 : 0, rl ? lc->cin : W,
                        PL(g, l, P_DENSE_W), PL(g, l, P_DENSE_B), C, p->t_cc);
    residual_dropout(LA->resid1, x, LA->attn_out, LA->attn_keep, p->nsC, c->hidden_dropout);
    /* MLP block */
    layernorm_forward(LA->ln2_out, LA->ln2_xhat, LA->ln2_rstd, LA->resid1, PL(g, l, P_LN2_W),
                      PL(g, l, P_LN2_B), ns, C, c->ln_eps, scratch);
    tokens_full(g, p, LA->ln2_full, LA->ln2_out, C);
    pair_first_forward(g, p, LA->fc1_out, LA->ln2_full, PL(g, l, P_FC1_W), PL(g, l, P_FC1_B), C, F,
                       p->t_cf);
    gelu_forward(LA->gelu_out, LA->gelu_grad, LA->fc1_out, (size_t)n * F);
    pair_second_forward(g, p, LA->fc2_out, LA->gelu_out, F, rl ? lc->fin0 : 0, rl ? lc->fin : F,
                        PL(g, l, P_FC2_W), PL(g, l, P_FC2_B), C, p->t_fc);
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

void layer_unit_backward(gpt_t *g, int l, gpt_slot_t *A, const pass_t *p) {
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
    pair_second_backward(g, p, d_w, GL(g, l, P_FC2_W), GL(g, l, P_FC2_B), d_fc2, LA->gelu_out, F,
                         rl ? lc->fin0 : 0, rl ? lc->fin : F, PL(g, l, P_FC2_W), C, p->t_fc);
    gelu_backward(d_w, d_w, LA->gelu_grad, (size_t)p->n * F);
    pair_first_backward(g, p, d_b, GL(g, l, P_FC1_W), GL(g, l, P_FC1_B), d_w, LA->ln2_full,
                        PL(g, l, P_FC1_W), C, F, p->t_cf);
    ln_backward(g, p, d_a, GL(g, l, P_LN2_W), GL(g, l, P_LN2_B), d_b, LA->ln2_xhat, LA->ln2_rstd,
                PL(g, l, P_LN2_W));
    for (size_t i = 0; i < nsC; i++) d_res[i] = d_res[i] + d_a[i];
    /* resid1 = x_in + drop(attn_out) */
    const float *d_dense = branch_grad(g, p, d_a, S->d_tmp3, d_res, LA->attn_keep);
    pair_second_backward(g, p, d_b, GL(g, l, P_DENSE_W), GL(g, l, P_DENSE_B), d_dense, LA->ctx, W,
                         rl ? lc->cin0 : 0, rl ? lc->cin : W, PL(g, l, P_DENSE_W), C, p->t_cc);
    attention_unit_backward(g, p, LA, d_w, d_b);
    pair_first_backward(g, p, d_a, GL(g, l, P_QKV_W), GL(g, l, P_QKV_B), d_w, LA->ln1_full,
                        PL(g, l, P_QKV_W), C, 3 * W, p->t_cc);
    ln_backward(g, p, d_b, GL(g, l, P_LN1_W), GL(g, l, P_LN1_B), d_a, LA->ln1_xhat, LA->ln1_rstd,
                PL(g, l, P_LN1_W));
    for (size_t i = 0; i < nsC; i++) d_res[i] = d_res[i] + d_b[i];
}
