/* experts_folded.c - expert parallelism folded onto ranks that hold the
 * same rows (Megatron-core's MoE parallel folding; pconfig.h's
 * pconfig_ep_folded): the tp ranks (GPT_EXPERT_FOLD_TP, etp 1) or the cp
 * ranks (GPT_EXPERT_FOLD_CP; etp = tp). parity's MoE runs whole
 * sequences on every tp and cp rank of a data-parallel replica, so they
 * route alike and lay out the same rows.
 *
 * The expert grid (experts_grid): fold rank f of nf, ep-axis rank q of
 * np (the ep ranks out of dp, experts_ep.c), expert rank f + nf q (the
 * fold fastest, Megatron's "tp-ep-dp-pp" order for experts), El = E /
 * (nf np) experts each. With np 1 (this file's style) rank f runs its
 * experts on its own rows (whole blocks, as the golden run) and the
 * fold group all-gathers each rank's range of rows (contiguous: the rows
 * are expert-major), the outputs forward and the input gradients
 * backward. Copies only. */
#include <string.h>

#include "model/styles/experts.h"
#include "parity/coll.h"

/* Private scratch: the rows' hidden gradients [R,F], the rows sent [R,C]
 * (the collective sends from one buffer and receives into another), and
 * expert tensor parallelism's open sums (NULL under a tp fold: etp 1). */
typedef struct {
    float *dh, *send;
    void *open;
} folded_scratch_t;

expert_grid_t experts_grid(const gpt_t *g) {
    const gpt_shard_t *s = &g->shard;
    expert_grid_t x = {NULL, 1, 0, s->ep_group, s->ep > 1 ? s->ep : 1, s->ep > 1 ? s->ep_rank : 0, 0};
    if (g->local.expert_fold == GPT_EXPERT_FOLD_TP && s->fold_group) /* a run of tp ranks */
        x.fold = s->fold_group, x.nf = s->expert_fold_n, x.f = s->tp_rank % s->expert_fold_n;
    else if (g->local.expert_fold == GPT_EXPERT_FOLD_TP)
        x.fold = s->tp_group, x.nf = s->tp, x.f = s->tp_rank;
    else if (g->local.expert_fold == GPT_EXPERT_FOLD_CP)
        x.fold = s->cp_group, x.nf = s->cp, x.f = s->cp_rank;
    x.El = g->cfg.moe_experts / (x.nf * x.np);
    return x;
}

static int folded_applies(const model_config_t *c, const gpt_local_t *lc) {
    return c->moe_experts > 0 && lc->expert_fold;
}

void *experts_layout_send(const model_config_t *c, const gpt_local_t *lc, carver_t *cv) {
    return lc->expert_fold ? CARVE_F(cv, moe_rows(c, (size_t)c->micro_batch) * (size_t)c->hidden)
                           : NULL;
}

static void folded_layout(void **priv, const model_config_t *c, const gpt_local_t *lc, size_t n,
                          carver_t *cv) {
    (void)n;
    const size_t R = moe_rows(c, (size_t)c->micro_batch);
    folded_scratch_t s;
    s.dh = CARVE_F(cv, R * (size_t)lc->expert_ffn);
    s.send = experts_layout_send(c, lc, cv);
    s.open = experts_layout_open(c, lc, cv);
    folded_scratch_t *at = carve(cv, sizeof s);
    if (at) *at = s;
    *priv = at;
}

/* For each ep-axis rank j: rows [rows_of[r El], rows_of[(r+1) El]) of
 * buf [R, C], r = f + nf j, from each fold rank f (send: [R, C]). */
void experts_fold_gather(const gpt_t *g, const moe_acts_t *m, const expert_grid_t *x, float *buf,
                         float *send) {
    const int C = g->cfg.hidden, El = x->El;
    for (int j = 0; j < x->np; j++) {
        size_t n[MODEL_MAX_EXPERTS], at[MODEL_MAX_EXPERTS];
        for (int f = 0; f < x->nf; f++) {
            const int r = f + x->nf * j;
            at[f] = (size_t)m->rows_of[r * El] * C;
            n[f] = f == x->f ? 0 : ((size_t)m->rows_of[(r + 1) * El] * C - at[f]);
        }
        const int me = x->f + x->nf * j;
        const size_t mine = (size_t)m->rows_of[(me + 1) * El] * C - at[x->f];
        memcpy(send + at[x->f], buf + at[x->f], mine * sizeof(float));
        size_t out[MODEL_MAX_EXPERTS], out_at[MODEL_MAX_EXPERTS];
        for (int f = 0; f < x->nf; f++) out[f] = f == x->f ? 0 : mine, out_at[f] = at[x->f];
        coll_all_to_all_v(x->fold, send, out, out_at, buf, n, at, COLL_F32);
    }
}

static void folded_forward(gpt_t *g, const pass_t *p, moe_acts_t *m, const moe_params_t *w) {
    const folded_scratch_t *s = g->styles.scratch[STYLE_EXPERTS];
    const expert_rows_t own = {m->x, m->fc1, m->h, m->hgrad, m->y, NULL, NULL, NULL};
    const expert_grid_t x = experts_grid(g);
    const int e0 = x.f * x.El;
    experts_own_forward(g, p, m, w, &own, e0, e0 + x.El, e0, s->open);
    experts_fold_gather(g, m, &x, m->y, s->send);
}

static void folded_backward(gpt_t *g, const pass_t *p, moe_acts_t *m, float *dy, float *dx,
                            const moe_params_t *w, const moe_grads_t *gr) {
    const folded_scratch_t *s = g->styles.scratch[STYLE_EXPERTS];
    const expert_rows_t own = {m->x, NULL, m->h, m->hgrad, NULL, dy, s->dh, dx};
    const expert_grid_t x = experts_grid(g);
    const int e0 = x.f * x.El;
    experts_own_backward(g, p, m, w, gr, &own, e0, e0 + x.El, e0, s->open);
    experts_fold_gather(g, m, &x, dx, s->send);
}

const experts_style_t experts_folded = {
    .base = {.name = "folded", .family = STYLE_EXPERTS, .applies = folded_applies,
             .layout_scratch = folded_layout},
    .forward = folded_forward,
    .backward = folded_backward,
};
