/* moe_experts.c - where an MoE layer's experts run on their input rows
 * (moe.c lays the rows out and combines the outputs): on the rank that
 * routed them, with each expert's FFN split over tp (expert tensor
 * parallelism), on their owners across the ep group (expert parallelism:
 * the rows sent and returned by all-to-all-v), or on the tp rank that
 * owns the expert (parallel folding onto tp: the outputs all-gathered).
 * Every form runs each (expert, sequence) block of rows whole, as the
 * golden run does, and completes every split sum exactly (I1, I2).
 */
#include <string.h>

#include "model/gpt.h"
#include "parity/coll.h"
#include "model/styles/tp.h"
#include "model/units/units_internal.h"

/* ---- the experts' rows ------------------------------------------------------ */

/* Where an expert's rows and their activations lie: the rank's own
 * (moe_x ...) or, under expert parallelism, those it runs for its peers
 * (moe_ex_x ...); and their gradients. */
typedef struct {
    float *x, *fc1, *h, *hgrad, *y;
    float *dy, *dh, *dx;
} expert_rows_t;

/* Expert tensor parallelism (g->local.expert_ffn < ffn): each tp rank
 * holds the FFN columns the dense MLP's cut gives it, of every expert:
 * fc1 column-parallel, fc2 row-parallel. fc2's output and fc1's input
 * gradient contract the FFN: each rank's tiles stay an open sum, the tp
 * group adds them exactly and every rank rounds once, where the golden
 * run rounds its sum over all tiles (tp.c). The tp ranks hold the same
 * tokens and routing, so they run the same rows in the same order. */
static int experts_cut(const gpt_t *g) { return g->local.expert_ffn < g->cfg.ffn; }

/* out [rows, N] = round(sum over the group of A.B's tiles), K the
 * rank's share of the contracted axis */
static void etp_contract(gpt_t *g, contract_form_t form, float *out, int rows, int N, int K,
                         int tm, int tn, int tk, const float *A, int lda, const float *B, int ldb) {
    acc_t open;
    acc_init_with(&open, (size_t)rows * N, g->scratch.moe_open);
    acc_zero(&open);
    contract_acc(form, rows, N, K, tm, tn, tk, A, lda, B, ldb, &open, 0, (size_t)N, &g->ws);
    tp_complete_open(g, &open, (size_t)rows * N, out);
    acc_free(&open);
}

/* Where expert e lies in the rank's stacked expert tensors: they hold
 * the experts it runs (expert parallelism: its ep rank's E/ep, from the
 * first; else all). */
static size_t expert_slot(const gpt_t *g, int e) {
    const int ep = g->shard.ep, E = g->cfg.moe_experts;
    if (g->shard.expert_fold) return (size_t)(e - g->shard.tp_rank * (E / g->shard.tp));
    return (size_t)(ep > 1 ? e - g->shard.ep_rank * (E / ep) : e);
}

/* The experts a rank runs on its own rows: all, or (folded onto tp) its
 * tp rank's; expert parallelism over dp runs its in ep_forward and
 * ep_backward instead. */
static void own_experts(const gpt_t *g, int *e0, int *e1) {
    const int E = g->cfg.moe_experts;
    if (!g->shard.expert_fold) {
        *e0 = 0, *e1 = E;
        return;
    }
    const int El = E / g->shard.tp;
    *e0 = g->shard.tp_rank * El, *e1 = *e0 + El;
}

/* Expert e on rows [r0, r0 + rows) of b: fc1, GeLU, fc2 (the rank's
 * FFN columns F of them). */
static void expert_rows_forward(gpt_t *g, const pass_t *p, const moe_params_t *w,
                                const expert_rows_t *b, int e_global, int r0, int rows) {
    const int C = g->cfg.hidden, F = g->local.expert_ffn;
    const size_t e = expert_slot(g, e_global);
    float *fc1 = b->fc1 + (size_t)r0 * F, *h = b->h + (size_t)r0 * F, *y = b->y + (size_t)r0 * C;
    const float *w2 = w->fc2_w + e * C * F;
    linear_forward(fc1, b->x + (size_t)r0 * C, w->fc1_w + e * F * C,
                   w->fc1_b + e * F, rows, C, F, p->t_cf, &g->ws);
    gelu_forward(h, b->hgrad + (size_t)r0 * F, fc1, (size_t)rows * F);
    if (!experts_cut(g)) {
        linear_forward(y, h, w2, w->fc2_b + e * C, rows, F, C, p->t_fc, &g->ws);
        return;
    }
    etp_contract(g, CONTRACT_NT, y, rows, C, F, p->t_fc.tokens, p->t_fc.out, p->t_fc.in, h, F,
                 w2, F);
    linear_add_bias(y, w->fc2_b + e * C, rows, C);
}

/* ---- expert parallelism ---------------------------------------------------
 *
 * Rank q of the ep group runs experts [q El, (q+1) El), El = E/ep, for
 * every peer's tokens. The rows a rank laid out are expert-major, so a
 * peer's experts are one contiguous range of them: an all-to-all-v sends
 * each peer its range (whole tiles of whole (expert, sequence) blocks),
 * the owner runs each (peer, expert) chunk as the golden run runs that
 * expert's rows, and a second all-to-all-v returns the outputs to the
 * rows they came from. Backward sends the rows' output gradients the
 * same way and returns their input gradients; an expert's weight
 * gradients are added by its owners only (the other ranks add nothing
 * to them), and the data-parallel reduction, which spans the ep ranks,
 * sums them exactly. The routing, the combine and the router stay on
 * the rank that holds the tokens. */

typedef struct {
    size_t send_n[MODEL_MAX_EXPERTS], send_at[MODEL_MAX_EXPERTS];
    size_t recv_n[MODEL_MAX_EXPERTS], recv_at[MODEL_MAX_EXPERTS];
} ep_plan_t;

/* Elements of width w per row: what this rank sends each peer (its rows
 * of the peer's experts) and receives from each (their rows of its own),
 * from every peer's rows_of (LA->moe_ep_rows). */
static ep_plan_t ep_plan(const gpt_t *g, const layer_acts_t *LA, size_t w) {
    const int E = g->cfg.moe_experts, ep = g->shard.ep, q = g->shard.ep_rank, El = E / ep;
    ep_plan_t P;
    size_t at = 0;
    for (int j = 0; j < ep; j++) {
        const int32_t *mine = LA->moe_rows_of, *theirs = LA->moe_ep_rows + (size_t)j * (E + 1);
        P.send_n[j] = (size_t)(mine[(j + 1) * El] - mine[j * El]) * w;
        P.send_at[j] = (size_t)mine[j * El] * w;
        P.recv_n[j] = (size_t)(theirs[(q + 1) * El] - theirs[q * El]) * w;
        P.recv_at[j] = at;
        at += P.recv_n[j];
    }
    return P;
}

/* The chunk of peer j's rows of expert e in the owner's buffers: its
 * first row and count. */
static void ep_chunk(const gpt_t *g, const layer_acts_t *LA, const ep_plan_t *P, int j, int e,
                     int *row0, int *rows) {
    const int E = g->cfg.moe_experts, El = E / g->shard.ep, q = g->shard.ep_rank;
    const int32_t *theirs = LA->moe_ep_rows + (size_t)j * (E + 1);
    *row0 = (int)(P->recv_at[j] / (size_t)g->cfg.hidden) + (theirs[e] - theirs[q * El]);
    *rows = theirs[e + 1] - theirs[e];
}

static void ep_forward(gpt_t *g, const pass_t *p, layer_acts_t *LA, const moe_params_t *w) {
    const model_config_t *c = &g->cfg;
    const int E = c->moe_experts, C = c->hidden, ep = g->shard.ep;
    const int q = g->shard.ep_rank, El = E / ep;
    int32_t *mine = LA->moe_ep_rows + (size_t)q * (E + 1);
    memcpy(mine, LA->moe_rows_of, (size_t)(E + 1) * sizeof(int32_t));
    coll_all_gather(g->shard.ep_group, mine, LA->moe_ep_rows, (size_t)E + 1, COLL_I32);
    const ep_plan_t P = ep_plan(g, LA, (size_t)C);
    coll_all_to_all_v(g->shard.ep_group, LA->moe_x, P.send_n, P.send_at, LA->moe_ex_x, P.recv_n,
                      P.recv_at, COLL_F32);
    const expert_rows_t b = {LA->moe_ex_x, LA->moe_ex_fc1, LA->moe_ex_h, LA->moe_ex_hgrad,
                             LA->moe_ex_y, NULL, NULL, NULL};
    for (int j = 0; j < ep; j++)
        for (int e = q * El; e < (q + 1) * El; e++) {
            int r0, rows;
            ep_chunk(g, LA, &P, j, e, &r0, &rows);
            if (rows) expert_rows_forward(g, p, w, &b, e, r0, rows);
        }
    coll_all_to_all_v(g->shard.ep_group, LA->moe_ex_y, P.recv_n, P.recv_at, LA->moe_y, P.send_n,
                      P.send_at, COLL_F32);
}

/* ---- expert parallelism folded onto the tp ranks -------------------------
 *
 * The tp ranks hold the same tokens and routing, so each lays out the
 * same rows: rank q runs experts [q El, (q+1) El), El = E/tp, on its own
 * rows (whole blocks, as the golden run), and the group all-gathers each
 * rank's range of rows (contiguous: the rows are expert-major), the
 * outputs forward and the input gradients backward. Copies only. */

/* rows [rows_of[q El], rows_of[(q+1) El]) of buf [R, C] from each rank
 * q, through the scratch (the collective sends from one buffer and
 * receives into another) */
static void fold_gather_rows(gpt_t *g, const layer_acts_t *LA, float *buf) {
    const int E = g->cfg.moe_experts, C = g->cfg.hidden, tp = g->shard.tp, me = g->shard.tp_rank;
    const int El = E / tp;
    size_t n[MODEL_MAX_EXPERTS], at[MODEL_MAX_EXPERTS];
    for (int q = 0; q < tp; q++) {
        at[q] = (size_t)LA->moe_rows_of[q * El] * C;
        n[q] = q == me ? 0 : ((size_t)LA->moe_rows_of[(q + 1) * El] * C - at[q]);
    }
    const size_t mine = (size_t)LA->moe_rows_of[(me + 1) * El] * C - at[me];
    float *send = g->scratch.moe_fold;
    memcpy(send + at[me], buf + at[me], mine * sizeof(float));
    size_t out[MODEL_MAX_EXPERTS], out_at[MODEL_MAX_EXPERTS];
    for (int q = 0; q < tp; q++) out[q] = q == me ? 0 : mine, out_at[q] = at[me];
    coll_all_to_all_v(g->shard.tp_group, send, out, out_at, buf, n, at, COLL_F32);
}

/* An expert linear's backward over its rows: dx for every row (an open
 * sum completed over tp when its output axis is the rank's FFN columns:
 * dx_open); under context parallelism every cp rank runs the whole MoE
 * (the same bits), so each token tile's weight and bias partials are
 * added by one cp rank only (tile index mod cp), and the gradient
 * reduction over cp sums them exactly: the golden sums, whatever rank
 * added which tile. */
static void expert_backward(gpt_t *g, float *dx, int dx_open, acc_t *dw, size_t dw_at, acc_t *db,
                            size_t db_at, float *dy, const float *x, const float *w, int row0,
                            int rows, int n_in, int n_out, linear_tiles_t t) {
    const int cp = g->local.cp, tm = t.tokens;
    const int edp_bug = (g->shard.broken & GPT_BROKEN_MOE_EDP_SCALE) && g->shard.ep > 1;
    if (dx_open) {
        etp_contract(g, CONTRACT_NN, dx, rows, n_in, n_out, tm, t.in, t.out, dy, n_out, w, n_in);
        dx = NULL;
    }
    if (cp == 1 && !edp_bug) {
        linear_backward_at(dx, dw, dw_at, db, db_at, dy, x, w, rows, n_in, n_out, t, &g->ws);
        return;
    }
    if (dx) linear_backward_at(dx, NULL, 0, NULL, 0, dy, x, w, rows, n_in, n_out, t, &g->ws);
    if (edp_bug) /* the broken variant: the weight gradients scaled by ep, dx left alone */
        for (size_t i = 0; i < (size_t)rows * n_out; i++) dy[i] = dy[i] * (float)g->shard.ep;
    for (int i = 0; i < rows / tm; i++)
        if ((row0 / tm + i) % cp == g->local.cp_rank)
            linear_backward_at(NULL, dw, dw_at, db, db_at, dy + (size_t)i * tm * n_out,
                               x + (size_t)i * tm * n_in, w, tm, n_in, n_out, t, &g->ws);
}

/* Expert e's rows [r0, r0 + rows) of b back through fc2, GeLU and fc1:
 * dx from dy, the weight gradients into gr. */
static void expert_rows_backward(gpt_t *g, const pass_t *p, const moe_params_t *w,
                                 const moe_grads_t *gr, const expert_rows_t *b, int e_global,
                                 int r0, int rows) {
    const int C = g->cfg.hidden, F = g->local.expert_ffn;
    const size_t e = expert_slot(g, e_global);
    float *dh = b->dh + (size_t)r0 * F;
    expert_backward(g, dh, 0, gr->fc2_w, e * C * F, gr->fc2_b, e * C,
                    b->dy + (size_t)r0 * C, b->h + (size_t)r0 * F, w->fc2_w + e * C * F,
                    r0, rows, F, C, p->t_fc);
    gelu_backward(dh, dh, b->hgrad + (size_t)r0 * F, (size_t)rows * F);
    expert_backward(g, b->dx + (size_t)r0 * C, experts_cut(g), gr->fc1_w, e * F * C,
                    gr->fc1_b, e * F, dh, b->x + (size_t)r0 * C,
                    w->fc1_w + e * F * C, r0, rows, C, F, p->t_cf);
}

/* Expert parallel: the rows' output gradients (S->moe_dy) to the
 * experts' owners, their input gradients back into S->moe_dx. */
static void ep_backward(gpt_t *g, const pass_t *p, layer_acts_t *LA, const moe_params_t *w,
                        const moe_grads_t *gr) {
    const model_config_t *c = &g->cfg;
    const int E = c->moe_experts, C = c->hidden, ep = g->shard.ep;
    const int q = g->shard.ep_rank, El = E / ep;
    gpt_scratch_t *S = &g->scratch;
    const ep_plan_t P = ep_plan(g, LA, (size_t)C);
    coll_all_to_all_v(g->shard.ep_group, S->moe_dy, P.send_n, P.send_at, S->moe_ex_dy, P.recv_n,
                      P.recv_at, COLL_F32);
    const expert_rows_t b = {LA->moe_ex_x, NULL, LA->moe_ex_h, LA->moe_ex_hgrad, NULL,
                             S->moe_ex_dy, S->moe_ex_dh, S->moe_ex_dx};
    for (int j = 0; j < ep; j++)
        for (int e = q * El; e < (q + 1) * El; e++) {
            int r0, rows;
            ep_chunk(g, LA, &P, j, e, &r0, &rows);
            if (rows) expert_rows_backward(g, p, w, gr, &b, e, r0, rows);
        }
    coll_all_to_all_v(g->shard.ep_group, S->moe_ex_dx, P.recv_n, P.recv_at, S->moe_dx, P.send_n,
                      P.send_at, COLL_F32);
}

/* ---- the MoE's entry points ------------------------------------------------ */

void moe_experts_forward(gpt_t *g, const pass_t *p, layer_acts_t *LA, const moe_params_t *w) {
    if (g->shard.ep > 1) {
        ep_forward(g, p, LA, w);
        return;
    }
    const expert_rows_t own = {LA->moe_x, LA->moe_fc1, LA->moe_h, LA->moe_hgrad, LA->moe_y,
                               NULL, NULL, NULL};
    int e0, e1;
    own_experts(g, &e0, &e1);
    for (int e = e0; e < e1; e++) {
        const int r0 = LA->moe_rows_of[e], rows = LA->moe_rows_of[e + 1] - r0;
        if (rows) expert_rows_forward(g, p, w, &own, e, r0, rows);
    }
    if (g->shard.expert_fold) fold_gather_rows(g, LA, LA->moe_y);
}

void moe_experts_backward(gpt_t *g, const pass_t *p, layer_acts_t *LA, const moe_params_t *w,
                          const moe_grads_t *gr) {
    gpt_scratch_t *S = &g->scratch;
    if (g->shard.ep > 1) {
        ep_backward(g, p, LA, w, gr);
        return;
    }
    const expert_rows_t own = {LA->moe_x, NULL, LA->moe_h, LA->moe_hgrad, NULL,
                               S->moe_dy, S->moe_dh, S->moe_dx};
    int e0, e1;
    own_experts(g, &e0, &e1);
    for (int e = e0; e < e1; e++) {
        const int r0 = LA->moe_rows_of[e], rows = LA->moe_rows_of[e + 1] - r0;
        if (rows) expert_rows_backward(g, p, w, gr, &own, e, r0, rows);
    }
    if (g->shard.expert_fold) fold_gather_rows(g, LA, S->moe_dx);
}
