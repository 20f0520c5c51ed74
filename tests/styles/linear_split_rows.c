/* linear_split_rows.c - a test-only linear style (tests/styles.mk): the
 * style the built-in table would choose for the replica, run on the
 * token rows in two parts. Registered ahead of the table by a
 * constructor, so every replica of `parity` linked with it (the golden
 * run's too) runs its linears this way, through the library's style
 * hook alone (style_register, styles_builtin).
 *
 * Why the bits cannot change, in every style: each output row depends
 * only on its input row (the contraction runs over features, whose tiles
 * and exact sums are untouched), and the weight and bias gradients are
 * exact open sums over the rows, so adding the two parts' is adding all
 * of them. The parts are cut where every rank's rows line up:
 *   - 2-D (SUMMA) broadcasts and reduces blocks of the same rows along
 *     a row or a column of ranks: each part is a SUMMA of its rows;
 *   - 3-D gathers the input's rows over one group and reduce-scatters the
 *     output's over another: member m's block of the gathered rows is
 *     member m's output, so when every rank cuts at the same row each
 *     part keeps that correspondence (its first k rows stay first);
 *   - sequence parallelism holds [n_seq][Tl] positions of the sequences
 *     and reduce-scatters in that order, so a part is whole sequences
 *     (a slot of one sequence runs unsplit); elsewhere a part is whole
 *     token tiles (I1: the same tile calls), which also splits a slot of
 *     one sequence, as 3-D's q^2 blocks of four sequences give.
 * Every rank of a group has the same n and n_seq, so all cut alike. */
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>

#include "model/styles/linear.h"
#include "model/styles/style.h"

static atomic_long parts_run; /* linears run in two parts, every replica of the process */

static const linear_style_t *inner(const gpt_t *g) {
    return (const linear_style_t *)styles_builtin(STYLE_LINEAR, &g->cfg, &g->local);
}

/* A part of pass p: its pass, and its first row of the tokens (n rows)
 * and of the tokens held (ns rows). */
typedef struct {
    pass_t p;
    size_t full0, held0;
} part_t;

/* p cut in two; 0 when it is too small to cut. */
static int cut(const gpt_t *g, const pass_t *p, part_t out[2]) {
    int full, held, seqs[2] = {p->n_seq, p->n_seq}; /* n_seq is read by sequence parallelism only */
    if (p->sp) { /* whole sequences */
        if (p->n_seq < 2) return 0;
        seqs[0] = p->n_seq / 2, seqs[1] = p->n_seq - seqs[0];
        full = seqs[0] * p->Tc, held = seqs[0] * p->Tl;
    } else { /* whole token tiles */
        const int tiles = p->n / g->cfg.tile_tokens;
        if (tiles < 2) return 0;
        full = held = tiles / 2 * g->cfg.tile_tokens;
    }
    const size_t hid = (size_t)g->local.hid;
    for (int k = 0; k < 2; k++) {
        pass_t q = *p;
        q.n_seq = seqs[k];
        q.n = k ? p->n - full : full;
        q.ns = k ? p->ns - held : held;
        q.nC = (size_t)q.n * hid, q.nsC = (size_t)q.ns * hid;
        out[k] = (part_t){q, k ? (size_t)full : 0, k ? (size_t)held : 0};
    }
    atomic_fetch_add(&parts_run, 1);
    return 1;
}

/* first: x [n, n_in], y [n, n_out]; backward dx [ns, n_in] */
static void first_forward(gpt_t *g, const pass_t *p, float *y, const float *x, const float *w,
                          const float *b, int n_in, int n_out, linear_tiles_t t) {
    part_t q[2];
    if (!cut(g, p, q)) {
        inner(g)->first_forward(g, p, y, x, w, b, n_in, n_out, t);
        return;
    }
    for (int k = 0; k < 2; k++)
        inner(g)->first_forward(g, &q[k].p, y + q[k].full0 * n_out, x + q[k].full0 * n_in, w, b,
                                n_in, n_out, t);
}

static void first_backward(gpt_t *g, const pass_t *p, float *dx, acc_t *dw, acc_t *db,
                           const float *dy, const float *x, const float *w, int n_in, int n_out,
                           linear_tiles_t t) {
    part_t q[2];
    if (!cut(g, p, q)) {
        inner(g)->first_backward(g, p, dx, dw, db, dy, x, w, n_in, n_out, t);
        return;
    }
    for (int k = 0; k < 2; k++)
        inner(g)->first_backward(g, &q[k].p, dx + q[k].held0 * n_in, dw, db,
                                 dy + q[k].full0 * n_out, x + q[k].full0 * n_in, w, n_in, n_out, t);
}

/* second: x [n, wx], y [ns, n_out]; backward dy [n, n_out], dx [n, wx] */
static void second_forward(gpt_t *g, const pass_t *p, float *y, const float *x, int wx, int c0,
                           int cl, const float *w, const float *b, int n_out, linear_tiles_t t,
                           int in_kind) {
    part_t q[2];
    if (!cut(g, p, q)) {
        inner(g)->second_forward(g, p, y, x, wx, c0, cl, w, b, n_out, t, in_kind);
        return;
    }
    for (int k = 0; k < 2; k++)
        inner(g)->second_forward(g, &q[k].p, y + q[k].held0 * n_out, x + q[k].full0 * wx, wx, c0,
                                 cl, w, b, n_out, t, in_kind);
}

static void second_backward(gpt_t *g, const pass_t *p, float *dx, acc_t *dw, acc_t *db,
                            const float *dy, const float *x, int wx, int c0, int cl,
                            const float *w, int n_out, linear_tiles_t t, int in_kind) {
    part_t q[2];
    if (!cut(g, p, q)) {
        inner(g)->second_backward(g, p, dx, dw, db, dy, x, wx, c0, cl, w, n_out, t, in_kind);
        return;
    }
    for (int k = 0; k < 2; k++)
        inner(g)->second_backward(g, &q[k].p, dx + q[k].full0 * wx, dw, db,
                                  dy + q[k].full0 * n_out, x + q[k].full0 * wx, wx, c0, cl, w,
                                  n_out, t, in_kind);
}

static int applies(const model_config_t *c, const gpt_local_t *lc) {
    (void)c, (void)lc;
    return 1;
}

/* the wrapped style's scratch is the family's: its bodies read it there */
static void layout_scratch(void **priv, const model_config_t *c, const gpt_local_t *lc, size_t n,
                           carver_t *cv) {
    const style_t *s = styles_builtin(STYLE_LINEAR, c, lc);
    if (s->layout_scratch) s->layout_scratch(priv, c, lc, n, cv);
}

static const linear_style_t split_rows = {
    {"split-rows", STYLE_LINEAR, applies, layout_scratch},
    first_forward, first_backward, second_forward, second_backward,
};

static void report(void) {
    fprintf(stderr, "split-rows: %ld linears run in two parts\n", (long)atomic_load(&parts_run));
}

__attribute__((constructor)) static void use_split_rows(void) {
    if (style_register(&split_rows.base) || atexit(report)) abort();
}
