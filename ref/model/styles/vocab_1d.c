/* vocab_1d.c - Megatron's vocabulary-parallel embedding and parallel
 * cross-entropy (vocab.h): tensor-parallel rank r holds vocabulary rows
 * [vocab0, vocab0 + vocab) of the word embedding and of the head.
 *
 *   embedding: each rank looks up the rows it holds (-0 elsewhere); the
 *              fp32 sum over tp is the owner's row, exactly (all-reduce,
 *              or under sequence parallelism a reduce-scatter to the
 *              positions each rank holds)
 *   head:      column-parallel over the rows: logits [n, V] of the rows
 *              held; the softmax's max, denominator and target logit
 *              completed over tp (vocab.c)
 */
#include "model/styles/vocab.h"

#include "model/styles/tp.h"

static void embedding_forward(gpt_t *g, const pass_t *p, float *x, const int32_t *tokens,
                              const float *wte, const float *wpe, const vocab_rows_hook_t *hook) {
    const int C = g->cfg.hidden;
    float *looked = p->sp ? g->scratch.d_tmp : x; /* [n, C] */
    embedding_lookup(looked, tokens, p->n, C, wte, g->local.vocab0, g->local.vocab);
    if (p->sp)
        sp_reduce_scatter_f32(g, x, looked, p->n_seq, C);
    else
        tp_sum_f32(g, x, p->nC);
    vocab_rows_and_positions(g, p, x, wpe, hook);
}

/* The vocabulary cut over tp > 1: every rank holds whole tiles of it and
 * none all of them (a degree leaving a rank without a tile is refused). */
static int applies(const model_config_t *c, const gpt_local_t *lc) {
    return lc->vocab < c->vocab;
}

const vocab_style_t vocab_1d = {
    {"1-d vocabulary-parallel", STYLE_VOCAB, applies, vocab_layout_split},
    embedding_forward,
    vocab_rows_backward,
    vocab_linear_forward,
    vocab_linear_backward,
    vocab_ce_forward_tp,
    vocab_ce_backward,
    vocab_counts_tp_rank0,
};
