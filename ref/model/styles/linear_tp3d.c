/* linear_tp3d.c - Colossal-AI's 3-D linears (linear.h): the first of a
 * pair maps the stream's layout to the inner one, the second back, the
 * input and output groups swapping (tp3d.c has the arithmetic). */
#include "model/styles/linear.h"

#include "model/styles/tp3d.h"

static void first_forward(gpt_t *g, const pass_t *p, float *y, const float *x, const float *w,
                          const float *b, int n_in, int n_out, linear_tiles_t t) {
    (void)n_in;
    tp3d_linear_forward(g, p, y, x, w, b, TP2D_HIDDEN, 1, n_out, t);
}

static void first_backward(gpt_t *g, const pass_t *p, float *dx, acc_t *dw, acc_t *db,
                           const float *dy, const float *x, const float *w, int n_in, int n_out,
                           linear_tiles_t t) {
    (void)n_in;
    tp3d_linear_backward(g, p, dx, dw, db, dy, x, w, TP2D_HIDDEN, 1, n_out, t);
}

static void second_forward(gpt_t *g, const pass_t *p, float *y, const float *x, int wx, int c0,
                           int cl, const float *w, const float *b, int n_out, linear_tiles_t t,
                           int in_kind) {
    (void)wx, (void)c0, (void)cl;
    tp3d_linear_forward(g, p, y, x, w, b, in_kind, 0, n_out, t);
}

static void second_backward(gpt_t *g, const pass_t *p, float *dx, acc_t *dw, acc_t *db,
                            const float *dy, const float *x, int wx, int c0, int cl,
                            const float *w, int n_out, linear_tiles_t t, int in_kind) {
    (void)wx, (void)c0, (void)cl;
    tp3d_linear_backward(g, p, dx, dw, db, dy, x, w, in_kind, 0, n_out, t);
}

static int applies(const model_config_t *c, const gpt_local_t *lc) {
    (void)c;
    return tp3d_extents(lc);
}

const linear_style_t linear_tp3d = {
    {"3-d", STYLE_LINEAR, applies, NULL},
    first_forward, first_backward, second_forward, second_backward,
};
