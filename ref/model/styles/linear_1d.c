/* linear_1d.c - Megatron's 1-D tensor parallelism (linear.h): the first
 * linear of a pair column-parallel (the rank's output rows of w, whole:
 * no sum crosses ranks), the second row-parallel (the rank's input
 * columns; each rank's tiles stay an open exact sum that the group
 * completes, tp.c). With sequence parallelism the completion is a
 * reduce-scatter to the positions each rank holds, and the first's input
 * gradient likewise. With tp = 1 each is the golden layer function: this
 * style is the table's last, it always applies. */
#include "model/styles/linear.h"

#include "model/styles/tp.h"

/* An open-sum accumulator over the tp buffer, cleared lazily. Its
 * exception accumulators (xvec's slow elements) are its own: the caller
 * releases them with acc_free, which leaves the buffer alone. */
static acc_t open_acc(gpt_t *g, size_t count) {
    acc_t a;
    acc_init_with(&a, count, g->scratch.tp->open);
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

/* column-parallel: the rank's output rows, whole */
static void first_forward(gpt_t *g, const pass_t *p, float *y, const float *x, const float *w,
                          const float *b, int n_in, int n_out, linear_tiles_t t) {
    linear_forward(y, x, w, b, p->n, n_in, n_out, t, &g->ws);
    act_round(g, y, (size_t)p->n * n_out);
}

/* The second linear contracts every column of its input, which the first
 * already cut by the rank's heads or FFN columns: c0 = 0, cl = wx. */
static void second_forward(gpt_t *g, const pass_t *p, float *y, const float *x, int wx, int c0,
                           int cl, const float *w, const float *b, int n_out, linear_tiles_t t,
                           int in_kind) {
    (void)wx, (void)c0, (void)in_kind;
    rowpar_forward(g, p, y, x, w, b, cl, n_out, t);
}

/* row-parallel's input gradient: the rank's columns, no sum */
static void second_backward(gpt_t *g, const pass_t *p, float *dx, acc_t *dw, acc_t *db,
                            const float *dy, const float *x, int wx, int c0, int cl,
                            const float *w, int n_out, linear_tiles_t t, int in_kind) {
    (void)c0, (void)in_kind;
    linear_backward(dx, dw, db, dy, x, w, p->n, cl, n_out, t, &g->ws);
    act_round(g, dx, (size_t)p->n * wx);
}

static int applies(const model_config_t *c, const gpt_local_t *lc) {
    (void)c, (void)lc;
    return 1;
}

const linear_style_t linear_1d = {
    {"1-d column/row", STYLE_LINEAR, applies, NULL},
    first_forward, colpar_backward, second_forward, second_backward,
};
