/* experts.h - the experts' dispatch family: where an MoE layer's experts
 * run on their input rows. moe.c routes the tokens, lays out each
 * expert's rows (expert-major, then sequence, whole token tiles) in
 * m->x [R,C], combines m->y [R,C] into the output and runs the router's
 * backward; a dispatch style takes the rows to the experts and the
 * outputs back:
 *
 *   experts_local.c   every expert on the rank that routed the rows (the
 *                     golden run's)
 *   experts_ep.c      expert parallelism over dp: each ep rank runs its
 *                     experts for every peer's rows (all-to-all-v there and
 *                     back), under a fold too (then the fold's gather)
 *   experts_folded.c  expert parallelism folded onto tp or cp (Megatron's
 *                     MoE parallel folding): each rank of the fold runs its
 *                     experts on the rows every rank of it laid out alike,
 *                     the outputs all-gathered; the expert grid
 *   experts_run.c     what all of them run: one expert on a block of rows
 *                     (fc1, GeLU, fc2 and back)
 *
 * Expert tensor parallelism (the experts' FFN split over tp, GPT_EXPERT_TP)
 * is no dispatch of its own: it changes how one expert contracts its rows,
 * not where the rows go, and it combines with the local and the expert-
 * parallel dispatch alike (a tp fold needs etp 1, a cp fold etp tp). So it is a property of
 * experts_run.c's block: a style that may run under it carves the open
 * sums (experts_layout_open) and the block completes its FFN contractions
 * over tp where it has them.
 *
 * Every style runs each (expert, sequence) block of rows whole, as the
 * golden run does, and completes every split sum exactly (I1, I2).
 * forward and backward are one call a layer each: the dispatch's
 * collectives bracket a loop over blocks whose chunking differs per style.
 *
 * Adding a style: a file here defining a const experts_style_t (applies:
 * from the replica's extents; layout_scratch: its private buffers into
 * *priv), one line in styles.c's experts_table ahead of the golden local
 * style. */
#ifndef PARITY_MODEL_STYLES_EXPERTS_H
#define PARITY_MODEL_STYLES_EXPERTS_H

#include "model/gpt.h"
#include "model/units/moe.h"
#include "model/units/units_internal.h"

typedef struct {
    style_t base;
    /* m->x [R,C] (the rows moe.c laid out, m->rows_of) -> m->y [R,C]: each
     * row through its expert's fc1, GeLU, fc2 (keeping m->fc1, h, hgrad [R,F]
     * or the style's own for the backward) */
    void (*forward)(gpt_t *g, const pass_t *p, moe_acts_t *m, const moe_params_t *w);
    /* dy [R,C] (the rows' output gradients) -> dx [R,C] (their input
     * gradients); the experts' weight gradients into gr */
    void (*backward)(gpt_t *g, const pass_t *p, moe_acts_t *m, float *dy, float *dx,
                     const moe_params_t *w, const moe_grads_t *gr);
} experts_style_t;

static inline const experts_style_t *experts_style(const gpt_t *g) {
    return (const experts_style_t *)g->styles.style[STYLE_EXPERTS];
}

extern const experts_style_t experts_local, experts_ep, experts_folded;

/* The dispatch's own per-slot activations (moe_acts_t.dispatch) for a slot
 * of extents d, or NULL. A slot is laid out from its extents, not from the
 * chosen styles, so the one style that keeps any (expert parallelism's
 * rows from its peers, experts_ep.c) answers from d. */
void *experts_layout_acts(const slot_dims_t *d, carver_t *cv);

/* ---- experts_folded.c: the expert grid ---------------------------------- */

/* A rank's place in the expert grid: the fold's group (the tp or cp
 * ranks, NULL: none), size and rank; the ep axis's (out of dp); expert
 * rank f + nf q (the fold fastest: Megatron's order) holds El experts. */
typedef struct {
    group_t *fold;
    int nf, f;
    group_t *ep;
    int np, q;
    int El;
} expert_grid_t;
expert_grid_t experts_grid(const gpt_t *g);
/* The fold's gather buffer [R, C], or NULL without a fold. */
void *experts_layout_send(const model_config_t *c, const gpt_local_t *lc, carver_t *cv);
/* buf [R, C]: every fold rank's rows of its experts (for every ep-axis
 * rank j, expert rank f + nf j) to the whole fold group, through send. */
void experts_fold_gather(const gpt_t *g, const moe_acts_t *m, const expert_grid_t *x, float *buf,
                         float *send);

/* ---- experts_run.c: one expert on a block of rows ----------------------- */

/* Where a block's rows and their activations lie (the slot's own m->x ..
 * or a style's), and their gradients. */
typedef struct {
    float *x, *fc1, *h, *hgrad, *y;    /* [rows, C] [rows, F] [rows, F] [rows, F] [rows, C] */
    float *dy, *dh, *dx;               /* [rows, C] [rows, F] [rows, C] */
} expert_rows_t;
/* The expert a block runs: its index in the rank's stacked expert tensors
 * and, under expert tensor parallelism, the open sums its FFN contractions
 * are completed in over tp (experts_layout_open; NULL: the FFN whole). */
typedef struct {
    size_t slot;
    void *open;
} expert_at_t;

/* Expert tensor parallelism's open sums: [n,C] acc storage (one expert's
 * rows at a time, at most every token); NULL when the FFN is whole. */
void *experts_layout_open(const model_config_t *c, const gpt_local_t *lc, carver_t *cv);
/* Rows [r0, r0 + rows) of b through expert e: fc1, GeLU, fc2. */
void expert_rows_forward(gpt_t *g, const pass_t *p, const moe_params_t *w, const expert_rows_t *b,
                         expert_at_t e, int r0, int rows);
/* The same rows back through fc2, GeLU and fc1: dx from dy, the weight
 * gradients into gr. dw_scale > 0: the broken variant
 * GPT_BROKEN_MOE_EDP_SCALE (the weight gradients scaled by it). */
void expert_rows_backward(gpt_t *g, const pass_t *p, const moe_params_t *w,
                          const moe_grads_t *gr, const expert_rows_t *b, expert_at_t e, int r0,
                          int rows, int dw_scale);
/* Every expert in [e0, e1) on its rows of b (m->rows_of), the stacked
 * tensors holding expert e at e - first: the local and folded styles'
 * loop. */
void experts_own_forward(gpt_t *g, const pass_t *p, const moe_acts_t *m, const moe_params_t *w,
                         const expert_rows_t *b, int e0, int e1, int first, void *open);
void experts_own_backward(gpt_t *g, const pass_t *p, const moe_acts_t *m, const moe_params_t *w,
                          const moe_grads_t *gr, const expert_rows_t *b, int e0, int e1,
                          int first, void *open);

#endif
