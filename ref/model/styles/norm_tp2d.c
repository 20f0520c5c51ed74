/* norm_tp2d.c - LayerNorm when a row's features are cut over a row of
 * ranks (norm.h): Colossal-AI's 2-D, 2.5-D and 3-D, whose residual stream
 * holds the features of one column block (gpt_local_t.hid), gamma and
 * beta as pieces cut over the stream's vector group (tp2d.h). */
#include "model/styles/norm.h"

#include <string.h>

#include "parity/pmath.h"
#include "model/styles/tp.h"
#include "model/styles/tp2d.h"

/* ---- LayerNorm --------------------------------------------------------------
 * layernorm.c's arithmetic with its row sums completed over the row:
 * each statistic is the exact sum of the row's features over every
 * column, rounded once, then divided by C. */

/* The style's private scratch: a row's open sums [n] and its statistics
 * [n], for up to n token rows. */
typedef struct {
    xacc_t *zacc;
    float *stat;
} norm_tp2d_scratch_t;

static void layout_scratch(void **priv, const model_config_t *c, const gpt_local_t *lc, size_t n,
                           carver_t *cv) {
    (void)c, (void)lc;
    norm_tp2d_scratch_t measure;
    norm_tp2d_scratch_t *S = style_scratch_struct(priv, cv, sizeof *S, &measure);
    S->zacc = (xacc_t *)carve(cv, n * sizeof(xacc_t));
    S->stat = CARVE_F(cv, n);
}

static norm_tp2d_scratch_t *own(gpt_t *g) { return g->styles.scratch[STYLE_NORM]; }

/* out[i] = round(sum over the row group of rows[i, :w]), i < n. */
static void row_sums(gpt_t *g, const float *rows, int n, int w, float *out) {
    xacc_t *s = own(g)->zacc;
    if (g->shard.broken & GPT_BROKEN_TP2D_LN_FP32) { /* Colossal's: fp32 partials all-reduced */
        for (int i = 0; i < n; i++) out[i] = sum_f32(rows + (size_t)i * w, (size_t)w);
        tp_sum_f32(g, out, (size_t)n);
        return;
    }
    for (int i = 0; i < n; i++) {
        xacc_init(&s[i]);
        xacc_add_array_f32(&s[i], rows + (size_t)i * w, (size_t)w);
    }
    tp_sum_xacc(g, s, (size_t)n);
    for (int i = 0; i < n; i++) out[i] = xacc_round_f32(&s[i]);
}

static void forward(gpt_t *g, const pass_t *p, float *y, float *xhat, float *rstd, const float *x,
                    const float *gamma_piece, const float *beta_piece) {
    const int n = p->ns, w = g->local.hid;
    const float fC = (float)g->cfg.hidden, eps = g->cfg.ln_eps;
    float *stat = own(g)->stat;
    row_sums(g, x, n, w, stat);
    for (int i = 0; i < n; i++) {
        const float mu = stat[i] / fC;
        for (int c = 0; c < w; c++) {
            const size_t e = (size_t)i * w + c;
            xhat[e] = x[e] - mu; /* d for now */
            y[e] = xhat[e] * xhat[e];
        }
    }
    row_sums(g, y, n, w, stat);
    const tp2d_vgroup_t v = tp2d_vgroup(g, 0);
    float *gb = g->scratch.tp2d->a; /* gamma then beta, gathered */
    memcpy(gb, tp2d_gather_rows(g, &v, gamma_piece, w, 1), (size_t)w * sizeof(float));
    const float *beta = tp2d_gather_rows(g, &v, beta_piece, w, 1);
    for (int i = 0; i < n; i++) {
        const float r = pm_rsqrtf(stat[i] / fC + eps);
        rstd[i] = r;
        for (int c = 0; c < w; c++) {
            const size_t e = (size_t)i * w + c;
            xhat[e] = xhat[e] * r;
            y[e] = xhat[e] * gb[c] + beta[c];
        }
    }
    act_round(g, y, (size_t)p->ns * g->local.hid);
}

static void backward(gpt_t *g, const pass_t *p, float *dx, acc_t *dgamma, acc_t *dbeta,
                     const float *dy, const float *xhat, const float *rstd,
                     const float *gamma_piece) {
    const int n = p->ns, w = g->local.hid;
    const float fC = (float)g->cfg.hidden;
    const size_t nw = (size_t)n * w;
    for (size_t e = 0; e < nw; e++) dx[e] = dy[e] * xhat[e];
    const tp2d_vgroup_t v = tp2d_vgroup(g, 0);
    tp2d_vector_grad(g, &v, dx, n, w, dgamma);
    tp2d_vector_grad(g, &v, dy, n, w, dbeta);
    const float *gamma = tp2d_gather_rows(g, &v, gamma_piece, w, 1);
    float *prod = g->scratch.d_wide, *a = own(g)->stat, *b = g->scratch.tp2d->a;
    for (int i = 0; i < n; i++)
        for (int c = 0; c < w; c++) {
            const size_t e = (size_t)i * w + c;
            dx[e] = dy[e] * gamma[c]; /* dxhat */
            prod[e] = dx[e] * xhat[e];
        }
    row_sums(g, dx, n, w, a);
    row_sums(g, prod, n, w, b);
    for (int i = 0; i < n; i++) {
        const float ai = a[i] / fC, bi = b[i] / fC, r = rstd[i];
        for (int c = 0; c < w; c++) {
            const size_t e = (size_t)i * w + c;
            dx[e] = ((dx[e] - ai) - xhat[e] * bi) * r;
        }
    }
    act_round(g, dx, nw); /* the dense LayerNorm's point */
}

static int applies(const model_config_t *c, const gpt_local_t *lc) {
    (void)c;
    return lc->t2q > 0;
}

const norm_style_t norm_tp2d = {{"layernorm-2d", STYLE_NORM, applies, layout_scratch}, forward, backward};
