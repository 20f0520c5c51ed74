/* unit_ops.c - the operations units are made of, in their tensor- and
 * sequence-parallel forms (units_internal.h). With one rank each is the
 * golden layer function itself; with more, each completes its sums
 * exactly across the group (tp.c), so every form rounds where the golden
 * run rounds. The linears and LayerNorm call through the replica's
 * styles (model/styles/linear.h, norm.h; rowpar_forward and
 * colpar_backward are linear_1d.c's). */
#include <stdio.h>

#include "model/gpt.h"
#include "parity/rng.h"
#include "parity/pmath.h"
#include "model/styles/linear.h"
#include "model/styles/norm.h"
#include "model/styles/tp.h"
#include "model/units/units_internal.h"

pass_t unit_pass(const gpt_t *g, const gpt_slot_t *A) {
    const model_config_t *c = &g->cfg;
    pass_t p;
    p.n_seq = A->n_seq;
    p.T = c->seq_length;
    p.Tc = g->local.seq_held;
    p.n = A->n_seq * p.Tc;
    p.sp = g->local.seq_parts > 1;
    p.Tl = p.Tc / g->local.seq_parts;
    p.t0 = g->local.seq_part * p.Tl;
    p.runs = p.sp ? cp_runs_slice(&g->local.runs, p.t0, p.Tl) : g->local.runs;
    p.ns = p.n_seq * p.Tl;
    p.nC = (size_t)p.n * g->local.hid; /* the stream's features held: all, or 2-D's column */
    p.nsC = (size_t)p.ns * g->local.hid;
    p.t_cc = (linear_tiles_t){c->tile_tokens, c->tile_features, c->tile_features};
    p.t_cf = (linear_tiles_t){c->tile_tokens, c->tile_features, c->tile_ffn};
    p.t_fc = (linear_tiles_t){c->tile_tokens, c->tile_ffn, c->tile_features};
    p.as = (attn_shape_t){A->n_seq,         c->seq_length, g->local.attn, g->local.heads,
                          c->tile_tokens,   c->attention_dropout, c->heads, g->local.head0, NULL,
                          ATTN_CAUSAL, 0};
    return p;
}

uint64_t site_stream(const char *site, int l, int64_t step) {
    char name[96];
    if (l >= 0)
        snprintf(name, sizeof name, "layers.%d.%s", l, site);
    else
        snprintf(name, sizeof name, "%s", site);
    return rng_stream_id(name, (uint64_t)step);
}

void site_mask(const gpt_t *g, const gpt_slot_t *A, const pass_t *p, uint8_t *keep,
               uint64_t stream) {
    const uint64_t C = (uint64_t)g->cfg.hidden, w = (uint64_t)g->local.hid, c0 = (uint64_t)g->local.hid0;
    size_t at = 0;
    for (int s = 0; s < p->n_seq; s++)
        for (int k = 0; k < p->runs.n; k++) {
            const uint64_t first =
                ((uint64_t)(A->mask_seq + s) * (uint64_t)p->T + (uint64_t)p->runs.t0[k]) * C;
            if (w == C) { /* whole rows: one run */
                const uint64_t run = (uint64_t)p->runs.len[k] * C;
                dropout_mask(keep + at, (size_t)run, g->cfg.seed, stream, first, g->cfg.hidden_dropout);
                at += run;
                continue;
            }
            for (int t = 0; t < p->runs.len[k]; t++, at += w) /* 2-D: the column's features */
                dropout_mask(keep + at, (size_t)w, g->cfg.seed, stream, first + (uint64_t)t * C + c0,
                             g->cfg.hidden_dropout);
        }
}

void act_round(const gpt_t *g, float *x, size_t n) {
    if (g->cfg.precision == MODEL_BF16) pm_round_bf16_array(x, n);
    else if (g->cfg.precision == MODEL_FP16) pm_round_fp16_array(x, n);
}

void residual_dropout(float *x_out, const float *x, const float *y, const uint8_t *keep,
                      size_t count, float prob) {
    if (keep) {
        dropout_forward(x_out, y, keep, count, prob);
        for (size_t i = 0; i < count; i++) x_out[i] = x[i] + x_out[i];
    } else {
        for (size_t i = 0; i < count; i++) x_out[i] = x[i] + y[i];
    }
}

/* The pair's linears and LayerNorm, as the replica's styles do them
 * (model/styles/linear.h, norm.h). */
void pair_first_forward(gpt_t *g, const pass_t *p, float *y, const float *x, const float *w,
                        const float *b, int n_in, int n_out, linear_tiles_t t) {
    linear_style(g)->first_forward(g, p, y, x, w, b, n_in, n_out, t);
}

void pair_first_backward(gpt_t *g, const pass_t *p, float *dx, acc_t *dw, acc_t *db,
                         const float *dy, const float *x, const float *w, int n_in, int n_out,
                         linear_tiles_t t) {
    linear_style(g)->first_backward(g, p, dx, dw, db, dy, x, w, n_in, n_out, t);
}

void pair_second_forward(gpt_t *g, const pass_t *p, float *y, const float *x, int wx, int c0,
                         int cl, const float *w, const float *b, int n_out, linear_tiles_t t,
                         int in_kind) {
    linear_style(g)->second_forward(g, p, y, x, wx, c0, cl, w, b, n_out, t, in_kind);
}

void pair_second_backward(gpt_t *g, const pass_t *p, float *dx, acc_t *dw, acc_t *db,
                          const float *dy, const float *x, int wx, int c0, int cl, const float *w,
                          int n_out, linear_tiles_t t, int in_kind) {
    linear_style(g)->second_backward(g, p, dx, dw, db, dy, x, wx, c0, cl, w, n_out, t, in_kind);
}

const float *tokens_full(gpt_t *g, const pass_t *p, float *buf, const float *held, int w) {
    if (!p->sp) return held;
    sp_gather(g, buf, held, p->n_seq, w);
    return buf;
}

void ln_forward(gpt_t *g, const pass_t *p, float *y, float *xhat, float *rstd, const float *x,
                const float *gamma, const float *beta) {
    norm_style(g)->forward(g, p, y, xhat, rstd, x, gamma, beta);
}

void ln_backward(gpt_t *g, const pass_t *p, float *dx, acc_t *dgamma, acc_t *dbeta,
                 const float *dy, const float *xhat, const float *rstd, const float *gamma) {
    norm_style(g)->backward(g, p, dx, dgamma, dbeta, dy, xhat, rstd, gamma);
}
