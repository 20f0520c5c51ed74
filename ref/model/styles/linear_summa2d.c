/* linear_summa2d.c - Colossal-AI's 2-D (Optimus) and 2.5-D (Tesseract)
 * linears (linear.h): SUMMA over the q x q grid of a depth layer, one
 * open exact sum over every input block, rounded once (tp2d.c has the
 * arithmetic). One style serves both modes: a 2.5-D depth layer is a 2-D
 * grid over its own block of sequences (gpt_shard_t.tp_dep), so the
 * linears' arithmetic, broadcasts and reductions are 2-D's; only which
 * sequences a rank holds differs, and that is in its extents. Both
 * linears of a pair are the same SUMMA product; in_kind says which
 * blocks cut x's features. */
#include "model/styles/linear.h"

#include "model/styles/tp2d.h"
#include "model/styles/tp3d.h"

static void first_forward(gpt_t *g, const pass_t *p, float *y, const float *x, const float *w,
                          const float *b, int n_in, int n_out, linear_tiles_t t) {
    (void)n_in;
    tp2d_linear_forward(g, p, y, x, w, b, TP2D_HIDDEN, n_out, t);
}

static void first_backward(gpt_t *g, const pass_t *p, float *dx, acc_t *dw, acc_t *db,
                           const float *dy, const float *x, const float *w, int n_in, int n_out,
                           linear_tiles_t t) {
    (void)n_in;
    tp2d_linear_backward(g, p, dx, dw, db, dy, x, w, TP2D_HIDDEN, n_out, t);
}

static void second_forward(gpt_t *g, const pass_t *p, float *y, const float *x, int wx, int c0,
                           int cl, const float *w, const float *b, int n_out, linear_tiles_t t,
                           int in_kind) {
    (void)wx, (void)c0, (void)cl;
    tp2d_linear_forward(g, p, y, x, w, b, in_kind, n_out, t);
}

static void second_backward(gpt_t *g, const pass_t *p, float *dx, acc_t *dw, acc_t *db,
                            const float *dy, const float *x, int wx, int c0, int cl,
                            const float *w, int n_out, linear_tiles_t t, int in_kind) {
    (void)wx, (void)c0, (void)cl;
    tp2d_linear_backward(g, p, dx, dw, db, dy, x, w, in_kind, n_out, t);
}

static int applies(const model_config_t *c, const gpt_local_t *lc) {
    (void)c;
    return lc->t2q && !tp3d_extents(lc);
}

const linear_style_t linear_summa2d = {
    {"summa-2d", STYLE_LINEAR, applies, NULL},
    first_forward, first_backward, second_forward, second_backward,
};
