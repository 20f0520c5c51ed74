/* experts_folded.c - expert parallelism folded onto the tp ranks
 * (GPT_EXPERT_FOLD_TP: ep = tp, etp 1).
 *
 * The tp ranks hold the same tokens and routing, so each lays out the
 * same rows: rank q runs experts [q El, (q+1) El), El = E/tp, on its own
 * rows (whole blocks, as the golden run), and the group all-gathers each
 * rank's range of rows (contiguous: the rows are expert-major), the
 * outputs forward and the input gradients backward. Copies only. */
#include <string.h>

#include "model/styles/experts.h"
#include "parity/coll.h"

/* Private scratch: the rows' hidden gradients [R,F], the rows sent [R,C]
 * (the collective sends from one buffer and receives into another), and
 * expert tensor parallelism's open sums (NULL: folding runs with etp 1,
 * but a replica built with both still completes its sums). */
typedef struct {
    float *dh, *send;
    void *open;
} folded_scratch_t;

static int folded_applies(const model_config_t *c, const gpt_local_t *lc) {
    return c->moe_experts > 0 && lc->expert_fold;
}

static void folded_layout(void **priv, const model_config_t *c, const gpt_local_t *lc, size_t n,
                          carver_t *cv) {
    (void)n;
    const size_t R = moe_rows(c, (size_t)c->micro_batch);
    folded_scratch_t s;
    s.dh = CARVE_F(cv, R * (size_t)lc->expert_ffn);
    s.send = CARVE_F(cv, R * (size_t)c->hidden);
    s.open = experts_layout_open(c, lc, cv);
    folded_scratch_t *at = carve(cv, sizeof s);
    if (at) *at = s;
    *priv = at;
}

/* The experts of tp rank me: [me El, (me+1) El). */
static int folded_first(const gpt_t *g) {
    return g->shard.tp_rank * (g->cfg.moe_experts / g->shard.tp);
}

/* rows [rows_of[q El], rows_of[(q+1) El]) of buf [R, C] from each rank q */
static void fold_gather_rows(gpt_t *g, const moe_acts_t *m, float *buf) {
    const folded_scratch_t *s = g->styles.scratch[STYLE_EXPERTS];
    const int E = g->cfg.moe_experts, C = g->cfg.hidden, tp = g->shard.tp, me = g->shard.tp_rank;
    const int El = E / tp;
    size_t n[MODEL_MAX_EXPERTS], at[MODEL_MAX_EXPERTS];
    for (int q = 0; q < tp; q++) {
        at[q] = (size_t)m->rows_of[q * El] * C;
        n[q] = q == me ? 0 : ((size_t)m->rows_of[(q + 1) * El] * C - at[q]);
    }
    const size_t mine = (size_t)m->rows_of[(me + 1) * El] * C - at[me];
    memcpy(s->send + at[me], buf + at[me], mine * sizeof(float));
    size_t out[MODEL_MAX_EXPERTS], out_at[MODEL_MAX_EXPERTS];
    for (int q = 0; q < tp; q++) out[q] = q == me ? 0 : mine, out_at[q] = at[me];
    coll_all_to_all_v(g->shard.tp_group, s->send, out, out_at, buf, n, at, COLL_F32);
}

static void folded_forward(gpt_t *g, const pass_t *p, moe_acts_t *m, const moe_params_t *w) {
    const folded_scratch_t *s = g->styles.scratch[STYLE_EXPERTS];
    const expert_rows_t own = {m->x, m->fc1, m->h, m->hgrad, m->y, NULL, NULL, NULL};
    const int e0 = folded_first(g), El = g->cfg.moe_experts / g->shard.tp;
    experts_own_forward(g, p, m, w, &own, e0, e0 + El, e0, s->open);
    fold_gather_rows(g, m, m->y);
}

static void folded_backward(gpt_t *g, const pass_t *p, moe_acts_t *m, float *dy, float *dx,
                            const moe_params_t *w, const moe_grads_t *gr) {
    const folded_scratch_t *s = g->styles.scratch[STYLE_EXPERTS];
    const expert_rows_t own = {m->x, NULL, m->h, m->hgrad, NULL, dy, s->dh, dx};
    const int e0 = folded_first(g), El = g->cfg.moe_experts / g->shard.tp;
    experts_own_backward(g, p, m, w, gr, &own, e0, e0 + El, e0, s->open);
    fold_gather_rows(g, m, dx);
}

const experts_style_t experts_folded = {
    .base = {.name = "folded onto tp", .family = STYLE_EXPERTS, .applies = folded_applies,
             .layout_scratch = folded_layout},
    .forward = folded_forward,
    .backward = folded_backward,
};
