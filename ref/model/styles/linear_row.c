/* linear_row.c - every linear row-parallel (gpt_layout_opts_t.row_linears; the JSON
 * patterns' sharding_dim 0; linear.h): attention and GeLU run whole on
 * every rank, and each linear contracts the rank's slice of its input
 * features [c0, c0 + cl): its output an open exact sum completed across
 * tp (rowpar_forward), its input gradient the slice's, gathered (a copy,
 * no sum). Never with sequence parallelism (gpt_local_dims refuses it). */
#include "model/styles/linear.h"

#include <string.h>

#include "model/styles/tp.h"

/* The style's own buffers, for n token rows: a linear's input columns
 * held and their gradient [n, max(cin, fin)], a gather's parts
 * [n, max(C, F)]. */
typedef struct {
    float *in, *dx, *parts;
} row_scratch_t;

static row_scratch_t *scratch_of(gpt_t *g) { return g->styles.scratch[STYLE_LINEAR]; }

static void layout_scratch(void **priv, const model_config_t *c, const gpt_local_t *lc, size_t n,
                           carver_t *cv) {
    const size_t C = (size_t)c->hidden, F = (size_t)lc->ffn;
    const size_t held = n * (size_t)(lc->cin > lc->fin ? lc->cin : lc->fin);
    row_scratch_t *S = carve(cv, sizeof *S);
    float *in = CARVE_F(cv, held), *dx = CARVE_F(cv, held), *parts = CARVE_F(cv, n * (C > F ? C : F));
    if (S) *S = (row_scratch_t){in, dx, parts};
    *priv = S;
}

/* x [n, wx] -> its columns [c0, c0 + cl) as [n, cl] in buf (x itself
 * when that is all of it). */
static const float *columns(float *buf, const float *x, int n, int wx, int c0, int cl) {
    if (c0 == 0 && cl == wx) return x;
    for (int i = 0; i < n; i++)
        memcpy(buf + (size_t)i * cl, x + (size_t)i * wx + c0, (size_t)cl * sizeof(float));
    return buf;
}

static void second_forward(gpt_t *g, const pass_t *p, float *y, const float *x, int wx, int c0,
                           int cl, const float *w, const float *b, int n_out, linear_tiles_t t,
                           int in_kind) {
    (void)in_kind;
    rowpar_forward(g, p, y, columns(scratch_of(g)->in, x, p->n, wx, c0, cl), w, b, cl, n_out, t);
}

/* the weight's columns held, whole; the input gradient's columns held,
 * gathered */
static void second_backward(gpt_t *g, const pass_t *p, float *dx, acc_t *dw, acc_t *db,
                            const float *dy, const float *x, int wx, int c0, int cl,
                            const float *w, int n_out, linear_tiles_t t, int in_kind) {
    (void)in_kind;
    row_scratch_t *S = scratch_of(g);
    const int gather = cl < wx;
    linear_backward(gather ? S->dx : dx, dw, db, dy, columns(S->in, x, p->n, wx, c0, cl), w, p->n,
                    cl, n_out, t, &g->ws);
    if (gather) tp_gather_cols(g, dx, S->dx, p->n, cl, S->parts);
    act_round(g, dx, (size_t)p->n * wx);
}

/* The first of a pair is a second over the hidden features' slice. */
static void first_forward(gpt_t *g, const pass_t *p, float *y, const float *x, const float *w,
                          const float *b, int n_in, int n_out, linear_tiles_t t) {
    second_forward(g, p, y, x, n_in, g->local.cin0, g->local.cin, w, b, n_out, t, TP2D_HIDDEN);
}

static void first_backward(gpt_t *g, const pass_t *p, float *dx, acc_t *dw, acc_t *db,
                           const float *dy, const float *x, const float *w, int n_in, int n_out,
                           linear_tiles_t t) {
    second_backward(g, p, dx, dw, db, dy, x, n_in, g->local.cin0, g->local.cin, w, n_out, t,
                    TP2D_HIDDEN);
}

static int applies(const model_config_t *c, const gpt_local_t *lc) {
    (void)c;
    return lc->row_linears && !lc->t2q;
}

const linear_style_t linear_row = {
    {"row-parallel", STYLE_LINEAR, applies, layout_scratch},
    first_forward, first_backward, second_forward, second_backward,
};
