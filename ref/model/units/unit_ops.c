/* unit_ops.c - the operations units are made of, in their tensor- and
 * sequence-parallel forms (units_internal.h). With one rank each is the
 * golden layer function itself; with more, each completes its sums
 * exactly across the group (tp.c), so every form rounds where the golden
 * run rounds. */
#include <stdio.h>
#include <string.h>

#include "model/gpt.h"
#include "parity/rng.h"
#include "parity/pmath.h"
#include "model/styles/tp.h"
#include "model/styles/tp2d.h"
#include "model/styles/tp3d.h"
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

/* An open-sum accumulator over the tp buffer, cleared lazily. Its
 * exception accumulators (xvec's slow elements) are its own: the caller
 * releases them with acc_free, which leaves the buffer alone. */
static acc_t open_acc(gpt_t *g, size_t count) {
    acc_t a;
    acc_init_with(&a, count, g->scratch.open);
    acc_zero(&a);
    return a;
}

void rowpar_forward(gpt_t *g, const pass_t *p, float *y, const float *x, const float *w,
                    const float *b, int n_in, int n_out, linear_tiles_t t) {
    if (g->shard.tp == 1) {
        linear_forward(y, x, w, b, p->n, n_in, n_out, t, &g->ws);
        act_round(g, y, (size_t)p->n * n_out);
        return;
    }
    acc_t open = open_acc(g, (size_t)p->n * n_out);
    if (p->sp) { /* reduce-scatter: each rank completes the positions it holds */
        sp_contract_parts(g, CONTRACT_NT, p->n_seq, n_out, n_in, t.out, t.in, x, n_in, w, n_in,
                          &open);
        sp_complete_open(g, &open, (size_t)p->ns * n_out, y);
    } else { /* all-reduce */
        contract_acc(CONTRACT_NT, p->n, n_out, n_in, t.tokens, t.out, t.in, x, n_in, w, n_in,
                     &open, 0, (size_t)n_out, &g->ws);
        tp_complete_open(g, &open, (size_t)p->n * n_out, y);
    }
    acc_free(&open);
    if (b) linear_add_bias(y, b, p->ns, n_out);
    act_round(g, y, (size_t)p->ns * n_out);
}

void colpar_backward(gpt_t *g, const pass_t *p, float *dx, acc_t *dw, acc_t *db, const float *dy,
                     const float *x, const float *w, int n_in, int n_out, linear_tiles_t t) {
    if (g->shard.tp == 1) {
        linear_backward(dx, dw, db, dy, x, w, p->n, n_in, n_out, t, &g->ws);
        act_round(g, dx, (size_t)p->n * n_in);
        return;
    }
    linear_backward(NULL, dw, db, dy, x, w, p->n, n_in, n_out, t, &g->ws);
    acc_t open = open_acc(g, (size_t)p->n * n_in);
    if (p->sp) {
        sp_contract_parts(g, CONTRACT_NN, p->n_seq, n_in, n_out, t.in, t.out, dy, n_out, w, n_in,
                          &open);
        sp_complete_open(g, &open, (size_t)p->ns * n_in, dx);
    } else {
        contract_acc(CONTRACT_NN, p->n, n_in, n_out, t.tokens, t.in, t.out, dy, n_out, w, n_in,
                     &open, 0, (size_t)n_in, &g->ws);
        tp_complete_open(g, &open, (size_t)p->n * n_in, dx);
    }
    acc_free(&open);
    act_round(g, dx, (size_t)p->ns * n_in);
}

/* x [n, wx] -> its columns [c0, c0 + cl) as [n, cl] in buf (x itself
 * when that is all of it). */
static const float *columns(float *buf, const float *x, int n, int wx, int c0, int cl) {
    if (c0 == 0 && cl == wx) return x;
    for (int i = 0; i < n; i++)
        memcpy(buf + (size_t)i * cl, x + (size_t)i * wx + c0, (size_t)cl * sizeof(float));
    return buf;
}

void pair_first_forward(gpt_t *g, const pass_t *p, float *y, const float *x, const float *w,
                        const float *b, int n_in, int n_out, linear_tiles_t t) {
    const gpt_local_t *lc = &g->local;
    if (lc->t2q && g->shard.tp_mode == 3) { /* 3-D: the first of the pair */
        tp3d_linear_forward(g, p, y, x, w, b, TP2D_HIDDEN, 1, n_out, t);
        return;
    }
    if (lc->t2q) { /* 2-D: SUMMA over the hidden features' blocks */
        tp2d_linear_forward(g, p, y, x, w, b, TP2D_HIDDEN, n_out, t);
        return;
    }
    if (!lc->row_linears) { /* column-parallel: the rank's output rows, whole */
        linear_forward(y, x, w, b, p->n, n_in, n_out, t, &g->ws);
        act_round(g, y, (size_t)p->n * n_out);
        return;
    }
    rowpar_forward(g, p, y, columns(g->scratch.row_in, x, p->n, n_in, lc->cin0, lc->cin), w, b,
                   lc->cin, n_out, t);
}

void pair_first_backward(gpt_t *g, const pass_t *p, float *dx, acc_t *dw, acc_t *db,
                         const float *dy, const float *x, const float *w, int n_in, int n_out,
                         linear_tiles_t t) {
    const gpt_local_t *lc = &g->local;
    if (lc->t2q && g->shard.tp_mode == 3) {
        tp3d_linear_backward(g, p, dx, dw, db, dy, x, w, TP2D_HIDDEN, 1, n_out, t);
        return;
    }
    if (lc->t2q) {
        tp2d_linear_backward(g, p, dx, dw, db, dy, x, w, TP2D_HIDDEN, n_out, t);
        return;
    }
    if (!lc->row_linears) {
        colpar_backward(g, p, dx, dw, db, dy, x, w, n_in, n_out, t);
        return;
    }
    /* the weight's columns held, whole; the input gradient's columns held,
     * gathered: a copy, no sum */
    linear_backward(g->scratch.row_dx, dw, db, dy,
                    columns(g->scratch.row_in, x, p->n, n_in, lc->cin0, lc->cin), w, p->n, lc->cin,
                    n_out, t, &g->ws);
    tp_gather_cols(g, dx, g->scratch.row_dx, p->n, lc->cin);
    act_round(g, dx, (size_t)p->n * n_in);
}

void pair_second_forward(gpt_t *g, const pass_t *p, float *y, const float *x, int wx, int c0,
                         int cl, const float *w, const float *b, int n_out, linear_tiles_t t,
                         int in_kind) {
    if (g->local.t2q && g->shard.tp_mode == 3) {
        tp3d_linear_forward(g, p, y, x, w, b, in_kind, 0, n_out, t);
        return;
    }
    if (g->local.t2q) {
        tp2d_linear_forward(g, p, y, x, w, b, in_kind, n_out, t);
        return;
    }
    rowpar_forward(g, p, y, columns(g->scratch.row_in, x, p->n, wx, c0, cl), w, b, cl, n_out, t);
}

void pair_second_backward(gpt_t *g, const pass_t *p, float *dx, acc_t *dw, acc_t *db,
                          const float *dy, const float *x, int wx, int c0, int cl, const float *w,
                          int n_out, linear_tiles_t t, int in_kind) {
    if (g->local.t2q && g->shard.tp_mode == 3) {
        tp3d_linear_backward(g, p, dx, dw, db, dy, x, w, in_kind, 0, n_out, t);
        return;
    }
    if (g->local.t2q) {
        tp2d_linear_backward(g, p, dx, dw, db, dy, x, w, in_kind, n_out, t);
        return;
    }
    const int gather = cl < wx;
    linear_backward(gather ? g->scratch.row_dx : dx, dw, db, dy,
                    columns(g->scratch.row_in, x, p->n, wx, c0, cl), w, p->n, cl, n_out, t, &g->ws);
    if (gather) tp_gather_cols(g, dx, g->scratch.row_dx, p->n, cl);
    act_round(g, dx, (size_t)p->n * wx);
}

const float *tokens_full(gpt_t *g, const pass_t *p, float *buf, const float *held, int w) {
    if (!p->sp) return held;
    sp_gather(g, buf, held, p->n_seq, w);
    return buf;
}

void ln_forward(gpt_t *g, const pass_t *p, float *y, float *xhat, float *rstd, const float *x,
                const float *gamma, const float *beta) {
    if (g->local.t2q)
        tp2d_layernorm_forward(g, p, y, xhat, rstd, x, gamma, beta);
    else
        layernorm_forward(y, xhat, rstd, x, gamma, beta, p->ns, g->cfg.hidden, g->cfg.ln_eps,
                          g->scratch.row_scratch);
    act_round(g, y, (size_t)p->ns * g->local.hid);
}

void ln_backward(gpt_t *g, const pass_t *p, float *dx, acc_t *dgamma, acc_t *dbeta,
                 const float *dy, const float *xhat, const float *rstd, const float *gamma) {
    const int C = g->cfg.hidden;
    float *scratch = g->scratch.row_scratch;
    if (g->local.t2q) {
        tp2d_layernorm_backward(g, p, dx, dgamma, dbeta, dy, xhat, rstd, gamma);
        return;
    }
    if (!p->sp) {
        layernorm_backward(dx, dgamma, dbeta, dy, xhat, rstd, gamma, p->n, C, scratch);
        act_round(g, dx, (size_t)p->n * C);
        return;
    }
    /* this microbatch's sums over the positions held, completed across tp
     * before they join the step's open sums (exact: any grouping) */
    acc_t pg, pb;
    char *part = g->scratch.ln_part;
    acc_init_with(&pg, (size_t)C, part);
    acc_init_with(&pb, (size_t)C, part + acc_storage_bytes((size_t)C));
    acc_zero(&pg);
    acc_zero(&pb);
    layernorm_backward(dx, &pg, &pb, dy, xhat, rstd, gamma, p->ns, C, scratch);
    tp_all_reduce_acc(g, &pg);
    tp_all_reduce_acc(g, &pb);
    acc_merge(dgamma, &pg);
    acc_merge(dbeta, &pb);
    acc_free(&pg); /* their exception accumulators; the buffer stays */
    acc_free(&pb);
    act_round(g, dx, (size_t)p->ns * C);
}
