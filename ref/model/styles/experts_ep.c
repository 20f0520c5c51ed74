/* experts_ep.c - expert parallelism over dp (Megatron's
 * --expert-model-parallel-size): ep ranks that hold different tokens
 * share the experts, on their own or with a fold (experts_folded.c).
 *
 * The expert grid (experts_grid): ep-axis rank q of np, fold rank f of
 * nf (1: no fold); expert rank r = f + nf q runs experts [r El, (r+1) El),
 * El = E/(nf np), for the rows of every ep-axis peer at its own fold
 * rank. The rows a rank laid out are expert-major, so a peer's experts
 * are one contiguous range of them: an all-to-all-v over the ep axis
 * sends each peer j the range of expert rank f + nf j (whole tiles of
 * whole (expert, sequence) blocks), the owner runs each (peer, expert)
 * chunk as the golden run runs that expert's rows, and a second
 * all-to-all-v returns the outputs to the rows they came from; under a
 * fold the fold group then all-gathers the other fold ranks' ranges
 * (experts_fold_gather). Backward sends the rows' output gradients the
 * same way and returns their input gradients; an expert's weight
 * gradients are added by its owners only (the other ranks add nothing
 * to them), and the expert-data-parallel reduction (the token axes the
 * expert tensors are not cut over) sums them exactly. The routing, the
 * combine and the router stay on the rank that holds the tokens
 * (moe.c). */
#include <string.h>

#include "model/styles/experts.h"
#include "parity/coll.h"

/* The slot's activations of the rows this rank's experts run for its
 * peers (moe_acts_t.dispatch): every peer's rows_of [ep][E+1]; the rows
 * (peer-major, then expert) through fc1, GeLU and fc2 [ep*R, C or F]. */
typedef struct {
    int32_t *peer_rows;
    float *x, *fc1, *h, *hgrad, *y;
} ep_acts_t;

/* Private scratch: those rows' gradients [ep*R, C] [ep*R, F] [ep*R, C],
 * expert tensor parallelism's open sums (or NULL), the fold's gather
 * buffer [R, C] (or NULL). */
typedef struct {
    float *dy, *dh, *dx;
    void *open;
    float *send;
} ep_scratch_t;

void *experts_layout_acts(const slot_dims_t *d, carver_t *cv) {
    if (d->ep <= 1) return NULL;
    const size_t RX = d->ep * d->R, E = d->E, C = d->C, F = d->Fe; /* rows this rank's experts run */
    ep_acts_t a;
    a.peer_rows = (int32_t *)carve(cv, d->ep * (E + 1) * sizeof(int32_t));
    a.x = CARVE_F(cv, RX * C);
    a.fc1 = CARVE_F(cv, RX * F);
    a.h = CARVE_F(cv, RX * F);
    a.hgrad = CARVE_F(cv, RX * F);
    a.y = CARVE_F(cv, RX * C);
    ep_acts_t *at = carve(cv, sizeof a);
    if (at) *at = a;
    return at;
}

static int ep_applies(const model_config_t *c, const gpt_local_t *lc) {
    return c->moe_experts > 0 && lc->ep > 1;
}

static void ep_layout(void **priv, const model_config_t *c, const gpt_local_t *lc, size_t n,
                      carver_t *cv) {
    (void)n;
    const size_t RX = (size_t)lc->ep * moe_rows(c, (size_t)c->micro_batch); /* from every peer */
    const size_t C = (size_t)c->hidden, Fe = (size_t)lc->expert_ffn;
    ep_scratch_t s;
    s.dy = CARVE_F(cv, RX * C);
    s.dh = CARVE_F(cv, RX * Fe);
    s.dx = CARVE_F(cv, RX * C);
    s.open = experts_layout_open(c, lc, cv);
    s.send = experts_layout_send(c, lc, cv);
    ep_scratch_t *at = carve(cv, sizeof s);
    if (at) *at = s;
    *priv = at;
}

typedef struct {
    size_t send_n[MODEL_MAX_EXPERTS], send_at[MODEL_MAX_EXPERTS];
    size_t recv_n[MODEL_MAX_EXPERTS], recv_at[MODEL_MAX_EXPERTS];
} ep_plan_t;

/* Elements of width w per row: what this rank sends each ep-axis peer
 * j (its rows of expert rank f + nf j's experts) and receives from each
 * (their rows of its own), from every peer's rows_of (a->peer_rows). */
static ep_plan_t ep_plan(const gpt_t *g, const moe_acts_t *m, const expert_grid_t *x, size_t w) {
    const int E = g->cfg.moe_experts, El = x->El, me = x->f + x->nf * x->q;
    const ep_acts_t *a = m->dispatch;
    ep_plan_t P;
    size_t at = 0;
    for (int j = 0; j < x->np; j++) {
        const int32_t *mine = m->rows_of, *theirs = a->peer_rows + (size_t)j * (E + 1);
        const int r = x->f + x->nf * j;
        P.send_n[j] = (size_t)(mine[(r + 1) * El] - mine[r * El]) * w;
        P.send_at[j] = (size_t)mine[r * El] * w;
        P.recv_n[j] = (size_t)(theirs[(me + 1) * El] - theirs[me * El]) * w;
        P.recv_at[j] = at;
        at += P.recv_n[j];
    }
    return P;
}

/* The chunk of peer j's rows of expert e in the owner's buffers: its
 * first row and count. */
static void ep_chunk(const gpt_t *g, const moe_acts_t *m, const expert_grid_t *x,
                     const ep_plan_t *P, int j, int e, int *row0, int *rows) {
    const int E = g->cfg.moe_experts, e0 = (x->f + x->nf * x->q) * x->El;
    const ep_acts_t *a = m->dispatch;
    const int32_t *theirs = a->peer_rows + (size_t)j * (E + 1);
    *row0 = (int)(P->recv_at[j] / (size_t)g->cfg.hidden) + (theirs[e] - theirs[e0]);
    *rows = theirs[e + 1] - theirs[e];
}

/* Every (peer, expert) chunk this rank owns through its experts:
 * forward (b->y set) or backward. */
static void ep_run(gpt_t *g, const pass_t *p, const moe_acts_t *m, const moe_params_t *w,
                   const moe_grads_t *gr, const expert_grid_t *x, const ep_plan_t *P,
                   const expert_rows_t *b, int dw_scale) {
    const ep_scratch_t *s = g->styles.scratch[STYLE_EXPERTS];
    const int e0 = (x->f + x->nf * x->q) * x->El;
    for (int j = 0; j < x->np; j++)
        for (int e = e0; e < e0 + x->El; e++) {
            int r0, rows;
            ep_chunk(g, m, x, P, j, e, &r0, &rows);
            const expert_at_t at = {(size_t)(e - e0), s->open};
            if (rows && b->y) expert_rows_forward(g, p, w, b, at, r0, rows);
            else if (rows) expert_rows_backward(g, p, w, gr, b, at, r0, rows, dw_scale);
        }
}

static void ep_forward(gpt_t *g, const pass_t *p, moe_acts_t *m, const moe_params_t *w) {
    const int E = g->cfg.moe_experts, C = g->cfg.hidden;
    const ep_scratch_t *s = g->styles.scratch[STYLE_EXPERTS];
    const ep_acts_t *a = m->dispatch;
    const expert_grid_t x = experts_grid(g);
    int32_t *mine = a->peer_rows + (size_t)x.q * (E + 1);
    memcpy(mine, m->rows_of, (size_t)(E + 1) * sizeof(int32_t));
    coll_all_gather(x.ep, mine, a->peer_rows, (size_t)E + 1, COLL_I32);
    const ep_plan_t P = ep_plan(g, m, &x, (size_t)C);
    coll_all_to_all_v(x.ep, m->x, P.send_n, P.send_at, a->x, P.recv_n, P.recv_at, COLL_F32);
    const expert_rows_t b = {a->x, a->fc1, a->h, a->hgrad, a->y, NULL, NULL, NULL};
    ep_run(g, p, m, w, NULL, &x, &P, &b, 0);
    coll_all_to_all_v(x.ep, a->y, P.recv_n, P.recv_at, m->y, P.send_n, P.send_at, COLL_F32);
    if (x.nf > 1) experts_fold_gather(g, m, &x, m->y, s->send);
}

/* The rows' output gradients dy to the experts' owners, their input
 * gradients back into dx. */
static void ep_backward(gpt_t *g, const pass_t *p, moe_acts_t *m, float *dy, float *dx,
                        const moe_params_t *w, const moe_grads_t *gr) {
    const ep_scratch_t *s = g->styles.scratch[STYLE_EXPERTS];
    const ep_acts_t *a = m->dispatch;
    const expert_grid_t x = experts_grid(g);
    /* the broken variant: the weight gradients scaled by ep */
    const int dw_scale = g->shard.broken & GPT_BROKEN_MOE_EDP_SCALE ? x.np : 0;
    const ep_plan_t P = ep_plan(g, m, &x, (size_t)g->cfg.hidden);
    coll_all_to_all_v(x.ep, dy, P.send_n, P.send_at, s->dy, P.recv_n, P.recv_at, COLL_F32);
    const expert_rows_t b = {a->x, NULL, a->h, a->hgrad, NULL, s->dy, s->dh, s->dx};
    ep_run(g, p, m, w, gr, &x, &P, &b, dw_scale);
    coll_all_to_all_v(x.ep, s->dx, P.recv_n, P.recv_at, dx, P.send_n, P.send_at, COLL_F32);
    if (x.nf > 1) experts_fold_gather(g, m, &x, dx, s->send);
}

const experts_style_t experts_ep = {
    .base = {.name = "expert parallel", .family = STYLE_EXPERTS, .applies = ep_applies,
             .layout_scratch = ep_layout},
    .forward = ep_forward,
    .backward = ep_backward,
};
