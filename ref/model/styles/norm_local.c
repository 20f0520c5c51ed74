/* norm_local.c - LayerNorm with every feature of a row held (norm.h):
 * layernorm.c itself over the tokens held. The golden run and Megatron's
 * 1-D; under sequence parallelism each rank holds some positions, so
 * gamma's and beta's gradients over them are completed across tp before
 * they join the step's open sums (exact: any grouping). The table's last
 * norm style: it always applies. */
#include "model/styles/norm.h"

#include "model/styles/tp.h"

/* The style's own buffer (sequence parallelism only): a microbatch's
 * gamma and beta gradients over the positions held, 2 x
 * acc_storage_bytes(C); else NULL. */
static void layout_scratch(void **priv, const model_config_t *c, const gpt_local_t *lc, size_t n,
                           carver_t *cv) {
    (void)n;
    *priv = lc->seq_parts > 1 ? carve(cv, 2 * acc_storage_bytes((size_t)c->hidden)) : NULL;
}

static void forward(gpt_t *g, const pass_t *p, float *y, float *xhat, float *rstd, const float *x,
                    const float *gamma, const float *beta) {
    layernorm_forward(y, xhat, rstd, x, gamma, beta, p->ns, g->cfg.hidden, g->cfg.ln_eps,
                      g->scratch.row_scratch);
    act_round(g, y, (size_t)p->ns * g->local.hid);
}

static void backward(gpt_t *g, const pass_t *p, float *dx, acc_t *dgamma, acc_t *dbeta,
                     const float *dy, const float *xhat, const float *rstd, const float *gamma) {
    const int C = g->cfg.hidden;
    float *scratch = g->scratch.row_scratch;
    if (!p->sp) {
        layernorm_backward(dx, dgamma, dbeta, dy, xhat, rstd, gamma, p->n, C, scratch);
        act_round(g, dx, (size_t)p->n * C);
        return;
    }
    acc_t pg, pb;
    char *part = g->styles.scratch[STYLE_NORM];
    acc_init_with(&pg, (size_t)C, part);
    acc_init_with(&pb, (size_t)C, part + acc_storage_bytes((size_t)C));
    acc_zero(&pg);
    acc_zero(&pb);
    layernorm_backward(dx, &pg, &pb, dy, xhat, rstd, gamma, p->ns, C, scratch);
    tp_all_reduce_acc(g, &pg);
    tp_all_reduce_acc(g, &pb);
    acc_merge(dgamma, &pg);
    acc_merge(dbeta, &pb);
    acc_free(&pg); /* their exception accumulators; the buffer stays */
    acc_free(&pb);
    act_round(g, dx, (size_t)p->ns * C);
}

static int applies(const model_config_t *c, const gpt_local_t *lc) {
    (void)c, (void)lc;
    return 1;
}

const norm_style_t norm_local = {{"layernorm", STYLE_NORM, applies, layout_scratch}, forward, backward};
