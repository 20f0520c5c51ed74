/* experts_run.c - one expert on a block of its rows, as every dispatch
 * style runs it (experts.h): fc1, GeLU, fc2 and back, whole (expert,
 * sequence) blocks of whole token tiles, as the golden run.
 *
 * Expert tensor parallelism (an open-sum buffer given): each tp rank
 * holds the FFN columns the dense MLP's cut gives it, of every expert:
 * fc1 column-parallel, fc2 row-parallel. fc2's output and fc1's input
 * gradient contract the FFN: each rank's tiles stay an open sum, the tp
 * group (or, with etp < tp, the etp group: the tp ranks of tp_rank / etp)
 * adds them exactly and every rank rounds once, where the golden run
 * rounds its sum over all tiles (tp.c). The tp ranks hold the same
 * tokens and routing, so they run the same rows in the same order.
 *
 * Mixed precision: an expert rounds where the dense MLP does (MODEL.md
 * "Mixed precision"): fc1's output (after its bias), GeLU's, fc2's (after
 * the completion and the bias); backward, fc2's input gradient, GeLU's
 * and fc1's. The weight gradients stay fp32. Whichever rank runs a block
 * (its own, an ep peer, a tp rank of the fold), the same rounding. */
#include "model/styles/experts.h"
#include "model/styles/tp.h"
#include "parity/coll.h"

void *experts_layout_open(const model_config_t *c, const gpt_local_t *lc, carver_t *cv) {
    const size_t nT = (size_t)c->micro_batch * (size_t)c->seq_length; /* whole sequences */
    return lc->expert_ffn < c->ffn ? carve(cv, acc_storage_bytes(nT * (size_t)c->hidden)) : NULL;
}

/* out [rows, N] = round(sum over the group of A.B's tiles), K the
 * rank's share of the contracted axis */
static void etp_contract(gpt_t *g, void *open_at, contract_form_t form, float *out, int rows, int N,
                         int K, int tm, int tn, int tk, const float *A, int lda, const float *B,
                         int ldb) {
    acc_t open;
    acc_init_with(&open, (size_t)rows * N, open_at);
    acc_zero(&open);
    contract_acc(form, rows, N, K, tm, tn, tk, A, lda, B, ldb, &open, 0, (size_t)N, &g->ws);
    if (g->shard.etp_group) { /* etp < tp: the sum over this rank's etp group, rounded once */
        coll_all_reduce_open(g->shard.etp_group, &open.x, 0, (size_t)rows * N);
        acc_round(&open, out);
    } else {
        tp_complete_open(g, &open, (size_t)rows * N, out);
    }
    acc_free(&open);
}

void expert_rows_forward(gpt_t *g, const pass_t *p, const moe_params_t *w, const expert_rows_t *b,
                         expert_at_t e, int r0, int rows) {
    const int C = g->cfg.hidden, F = g->local.expert_ffn;
    float *fc1 = b->fc1 + (size_t)r0 * F, *h = b->h + (size_t)r0 * F, *y = b->y + (size_t)r0 * C;
    const float *w2 = w->fc2_w + e.slot * C * F;
    linear_forward(fc1, b->x + (size_t)r0 * C, w->fc1_w + e.slot * F * C,
                   w->fc1_b + e.slot * F, rows, C, F, p->t_cf, &g->ws);
    act_round(g, fc1, (size_t)rows * F);
    gelu_forward(h, b->hgrad + (size_t)r0 * F, fc1, (size_t)rows * F);
    act_round(g, h, (size_t)rows * F);
    if (!e.open) {
        linear_forward(y, h, w2, w->fc2_b + e.slot * C, rows, F, C, p->t_fc, &g->ws);
    } else {
        etp_contract(g, e.open, CONTRACT_NT, y, rows, C, F, p->t_fc.tokens, p->t_fc.out,
                     p->t_fc.in, h, F, w2, F);
        linear_add_bias(y, w->fc2_b + e.slot * C, rows, C);
    }
    act_round(g, y, (size_t)rows * C);
}

/* An expert linear's backward over its rows: dx for every row (an open
 * sum completed over tp when its output axis is the rank's FFN columns:
 * open); under context parallelism every cp rank runs the whole MoE
 * (the same bits), so each token tile's weight and bias partials are
 * added by one cp rank only (tile index mod cp), and the gradient
 * reduction over cp sums them exactly: the golden sums, whatever rank
 * added which tile. */
static void expert_backward(gpt_t *g, float *dx, void *open, acc_t *dw, size_t dw_at, acc_t *db,
                            size_t db_at, float *dy, const float *x, const float *w, int row0,
                            int rows, int n_in, int n_out, linear_tiles_t t, int dw_scale) {
    /* folded onto cp, each cp rank holds other experts and adds all its
     * tiles; broken (GPT_BROKEN_MOE_FOLD_CP): split over cp anyway, as if
     * the cp ranks held the same experts (a wrong expert-data group) */
    const int fold_cp = g->local.expert_fold == GPT_EXPERT_FOLD_CP &&
                        !(g->shard.broken & GPT_BROKEN_MOE_FOLD_CP);
    const int cp = fold_cp ? 1 : g->local.cp, tm = t.tokens;
    if (open) {
        etp_contract(g, open, CONTRACT_NN, dx, rows, n_in, n_out, tm, t.in, t.out, dy, n_out, w,
                     n_in);
        dx = NULL;
    }
    if (cp == 1 && !dw_scale) {
        linear_backward_at(dx, dw, dw_at, db, db_at, dy, x, w, rows, n_in, n_out, t, &g->ws);
        return;
    }
    if (dx) linear_backward_at(dx, NULL, 0, NULL, 0, dy, x, w, rows, n_in, n_out, t, &g->ws);
    if (dw_scale) /* the broken variant: the weight gradients scaled, dx left alone */
        for (size_t i = 0; i < (size_t)rows * n_out; i++) dy[i] = dy[i] * (float)dw_scale;
    for (int i = 0; i < rows / tm; i++)
        if ((row0 / tm + i) % cp == (cp > 1 ? g->local.cp_rank : 0))
            linear_backward_at(NULL, dw, dw_at, db, db_at, dy + (size_t)i * tm * n_out,
                               x + (size_t)i * tm * n_in, w, tm, n_in, n_out, t, &g->ws);
}

void expert_rows_backward(gpt_t *g, const pass_t *p, const moe_params_t *w,
                          const moe_grads_t *gr, const expert_rows_t *b, expert_at_t e, int r0,
                          int rows, int dw_scale) {
    const int C = g->cfg.hidden, F = g->local.expert_ffn;
    const size_t s = e.slot;
    float *dh = b->dh + (size_t)r0 * F;
    expert_backward(g, dh, NULL, gr->fc2_w, s * C * F, gr->fc2_b, s * C, b->dy + (size_t)r0 * C,
                    b->h + (size_t)r0 * F, w->fc2_w + s * C * F, r0, rows, F, C, p->t_fc,
                    dw_scale);
    act_round(g, dh, (size_t)rows * F);
    gelu_backward(dh, dh, b->hgrad + (size_t)r0 * F, (size_t)rows * F);
    act_round(g, dh, (size_t)rows * F);
    expert_backward(g, b->dx + (size_t)r0 * C, e.open, gr->fc1_w, s * F * C, gr->fc1_b, s * F, dh,
                    b->x + (size_t)r0 * C, w->fc1_w + s * F * C, r0, rows, C, F, p->t_cf,
                    dw_scale);
    act_round(g, b->dx + (size_t)r0 * C, (size_t)rows * C);
}

void experts_own_forward(gpt_t *g, const pass_t *p, const moe_acts_t *m, const moe_params_t *w,
                         const expert_rows_t *b, int e0, int e1, int first, void *open) {
    for (int e = e0; e < e1; e++) {
        const int r0 = m->rows_of[e], rows = m->rows_of[e + 1] - r0;
        if (rows) expert_rows_forward(g, p, w, b, (expert_at_t){(size_t)(e - first), open}, r0, rows);
    }
}

void experts_own_backward(gpt_t *g, const pass_t *p, const moe_acts_t *m, const moe_params_t *w,
                          const moe_grads_t *gr, const expert_rows_t *b, int e0, int e1,
                          int first, void *open) {
    for (int e = e0; e < e1; e++) {
        const int r0 = m->rows_of[e], rows = m->rows_of[e + 1] - r0;
        if (rows)
            expert_rows_backward(g, p, w, gr, b, (expert_at_t){(size_t)(e - first), open}, r0,
                                 rows, 0);
    }
}
