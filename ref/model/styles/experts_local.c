/* experts_local.c - the golden dispatch: every expert runs on the rank
 * that routed its rows, in place (m->x .. m->y), expert after expert.
 * Under expert tensor parallelism each tp rank runs every expert on the
 * same rows with its FFN columns (experts_run.c completes the sums). */
#include "model/styles/experts.h"

/* Private scratch: the rows' hidden gradients [R,F] and expert tensor
 * parallelism's open sums (or NULL). */
typedef struct {
    float *dh;
    void *open;
} local_scratch_t;

static int local_applies(const model_config_t *c, const gpt_local_t *lc) {
    (void)c, (void)lc;
    return 1;
}

static void local_layout(void **priv, const model_config_t *c, const gpt_local_t *lc, size_t n,
                         carver_t *cv) {
    (void)n;
    if (c->moe_experts <= 0) return;
    const size_t R = moe_rows(c, (size_t)c->micro_batch);
    local_scratch_t s = {CARVE_F(cv, R * (size_t)lc->expert_ffn), experts_layout_open(c, lc, cv)};
    local_scratch_t *at = carve(cv, sizeof s);
    if (at) *at = s;
    *priv = at;
}

static void local_forward(gpt_t *g, const pass_t *p, moe_acts_t *m, const moe_params_t *w) {
    const local_scratch_t *s = g->styles.scratch[STYLE_EXPERTS];
    const expert_rows_t own = {m->x, m->fc1, m->h, m->hgrad, m->y, NULL, NULL, NULL};
    experts_own_forward(g, p, m, w, &own, 0, g->cfg.moe_experts, 0, s->open);
}

static void local_backward(gpt_t *g, const pass_t *p, moe_acts_t *m, float *dy, float *dx,
                           const moe_params_t *w, const moe_grads_t *gr) {
    const local_scratch_t *s = g->styles.scratch[STYLE_EXPERTS];
    const expert_rows_t own = {m->x, NULL, m->h, m->hgrad, NULL, dy, s->dh, dx};
    experts_own_backward(g, p, m, w, gr, &own, 0, g->cfg.moe_experts, 0, s->open);
}

const experts_style_t experts_local = {
    .base = {.name = "local", .family = STYLE_EXPERTS, .applies = local_applies,
             .layout_scratch = local_layout},
    .forward = local_forward,
    .backward = local_backward,
};
