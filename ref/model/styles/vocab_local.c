/* vocab_local.c - the golden vocabulary (vocab.h): every row of the word
 * embedding and the head held, so the lookup, the logits and the
 * softmax need no group. The table's last: it always applies. */
#include "model/styles/vocab.h"

static void embedding_forward(gpt_t *g, const pass_t *p, float *x, const int32_t *tokens,
                              const float *wte, const float *wpe, const vocab_rows_hook_t *hook) {
    embedding_lookup(x, tokens, p->n, g->cfg.hidden, wte, g->local.vocab0, g->local.vocab);
    vocab_rows_and_positions(g, p, x, wpe, hook);
}

static int applies(const model_config_t *c, const gpt_local_t *lc) {
    (void)c, (void)lc;
    return 1;
}

const vocab_style_t vocab_local = {
    {"local", STYLE_VOCAB, applies, vocab_layout_whole},
    embedding_forward,
    vocab_rows_backward,
    vocab_linear_forward,
    vocab_linear_backward,
    vocab_ce_forward_whole,
    vocab_ce_backward,
    vocab_counts_tp_rank0,
};
