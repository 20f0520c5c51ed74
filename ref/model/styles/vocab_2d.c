/* vocab_2d.c - Colossal-AI's 2-D and 2.5-D vocabulary (vocab.h, tp2d.c):
 * on a q x q grid the word embedding E [V, C] is cut V over the rows and
 * C over the columns.
 *
 *   embedding: the column's sequences' ids gathered, the row's vocabulary
 *              block looked up (-0 elsewhere), reduce-scattered over the
 *              column; positions from the gathered table
 *   head:      logits [n, V] of the column's vocabulary block, E's blocks
 *              broadcast down the columns and the open sums completed over
 *              the row; the softmax over the row (tp_group, vocab.c)
 */
#include "model/styles/vocab.h"

#include "model/styles/tp2d.h"

/* 2-D's embedding; 3-D's too (its stream is 2-D's layout). LLaVA's hook
 * (the image rows' patch embedding) comes after the lookup's completion
 * and before the positions, as in vocab_rows_and_positions. */
void vocab_tp2d_embedding_forward(gpt_t *g, const pass_t *p, float *x, const int32_t *tokens,
                                  const float *wte, const float *wpe, const vocab_rows_hook_t *hook) {
    tp2d_embedding_lookup(g, p, x, tokens, wte);
    if (hook && hook->fn) hook->fn(g, hook->u, hook->A, p);
    tp2d_embedding_positions(g, p, x, wpe);
}

const float *vocab_tp2d_embedding_backward(gpt_t *g, const pass_t *p, acc_t *dwte, acc_t *dwpe,
                                           const float *d, const int32_t *tokens) {
    tp2d_embedding_backward(g, p, dwte, dwpe, d, tokens);
    return d;
}

static int applies(const model_config_t *c, const gpt_local_t *lc) {
    (void)c;
    return lc->t2q > 0;
}

const vocab_style_t vocab_2d = {
    {"2-d vocabulary blocks", STYLE_VOCAB, applies, vocab_layout_split},
    vocab_tp2d_embedding_forward,
    vocab_tp2d_embedding_backward,
    tp2d_head_logits,
    tp2d_head_backward,
    vocab_ce_forward_tp,
    vocab_ce_backward,
    vocab_counts_tp_rank0,
};
