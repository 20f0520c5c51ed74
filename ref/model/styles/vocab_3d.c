/* vocab_3d.c - Colossal-AI's 3-D vocabulary (vocab.h, tp3d.c): the
 * embedding is 2-D's (vocab_2d.c) on the stream's layout; the head is a
 * first linear of a pair (E [V, C]: V over tp2 then tp3, C over tp), so
 * its logits are in the inner layout: the sequences of block
 * tp3 * q + tp, the vocabulary cut over tp2.
 *
 *   softmax:  completed over tp2 (tp_col_group), the ranks of one row's
 *             vocabulary blocks
 *   targets:  the inner layout's sequences', gathered from the stream's
 *             blocks (tp3d_inner_targets)
 *   the loss: tp2 coordinate 0's copy counts
 */
#include "model/styles/vocab.h"

#include "model/styles/tp3d.h"

static void head_forward(gpt_t *g, const pass_t *p, float *logits, const float *x, const float *e) {
    tp3d_linear_forward(g, p, logits, x, e, NULL, TP2D_HIDDEN, 1, g->local.vocab, p->t_cc);
}

static void head_backward(gpt_t *g, const pass_t *p, float *dx, acc_t *de, const float *dlogits,
                          const float *x, const float *e) {
    tp3d_linear_backward(g, p, dx, de, NULL, dlogits, x, e, TP2D_HIDDEN, 1, g->local.vocab,
                         p->t_cc);
}

/* The targets are gathered between the softmax and the target logit, as
 * the collectives have always run. */
static void ce_forward(gpt_t *g, const pass_t *p, float *loss, float *m, float *Z,
                       const float *logits, const int32_t *targets) {
    group_t *row = g->shard.tp_col_group;
    vocab_ce_softmax(g, p, row, m, Z, logits);
    vocab_ce_loss(g, p, row, loss, m, Z, logits, tp3d_inner_targets(g, p, targets));
}

static float *ce_backward(gpt_t *g, const pass_t *p, const float *logits, const int32_t *targets,
                          const float *m, const float *Z, int64_t total_tokens) {
    return vocab_ce_backward(g, p, logits, tp3d_inner_targets(g, p, targets), m, Z, total_tokens);
}

static int counts_loss(const gpt_t *g) { return g->shard.tp_row == 0; }

/* 3-D cuts a microbatch's sequences into q^2 blocks, 2-D and 2.5-D into
 * q (q >= 2: pconfig refuses less). */
static int applies(const model_config_t *c, const gpt_local_t *lc) {
    (void)c;
    return lc->t2q > 1 && lc->t2blocks == lc->t2q * lc->t2q;
}

const vocab_style_t vocab_3d = {
    {"3-d vocabulary blocks", STYLE_VOCAB, applies, vocab_layout_split},
    vocab_tp2d_embedding_forward,
    vocab_tp2d_embedding_backward,
    head_forward,
    head_backward,
    ce_forward,
    ce_backward,
    counts_loss,
};
