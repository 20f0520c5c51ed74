/* unit_embedding.c - the embedding as a unit kind (MODEL.md, forward 1):
 *
 *   x = drop(wte[tokens] + wpe)
 *
 * The lookup in the replica's vocabulary style (styles/vocab.h): whole,
 * or vocabulary-parallel (each rank looks up the rows it holds, -0
 * elsewhere, and the sum over the group is the owner's row).
 */
#include "model/gpt.h"
#include "model/styles/vocab.h"
#include "model/units/units_internal.h"

static const unit_tensor_t tensors[] = {
    [E_WTE] = {"embedding.word_embeddings.weight", 2, {DIM_V, DIM_C}, INIT_NORMAL, STD_SIGMA,
               CUT_VOCAB, AL_NONE, 1, WHEN_ALWAYS},
    [E_WPE] = {"embedding.position_embeddings.weight", 2, {DIM_T, DIM_C}, INIT_NORMAL, STD_SIGMA,
               CUT_REPL, AL_NONE, 1, WHEN_ALWAYS},
};

const unit_checkpoint_t embedding_checkpoints[] = {
    {"mask", "dropout.embedding", ST_U8, 2, {DIM_T, DIM_C}, 0, WHEN_HDROP, CKPT_COMPUTE},
    {"act", "embedding.output", ST_F32, 2, {DIM_T, DIM_C}, 1, WHEN_ALWAYS, CKPT_TP_VOCAB_EMBEDDING},
};

void embedding_bind(param_table_t *t, const model_config_t *c, int unit, int first) {
    (void)c, (void)unit;
    t->wte = first + E_WTE;
    t->wpe = first + E_WPE;
}

void embedding_layout(gpt_slot_t *A, int index, const slot_dims_t *d, int held, int next_held,
                   carver_t *cv) {
    (void)index;
    if (held || next_held) A->emb = CARVE_F(cv, d->ns * d->C);
    A->emb_keep = d->hdrop && held ? CARVE_U8(cv, d->ns * d->C) : NULL;
}

float *embedding_output(gpt_slot_t *A, int index) {
    (void)index;
    return A->emb;
}

void embedding_unit_forward(gpt_t *g, const unit_t *u, gpt_slot_t *A, const pass_t *p,
                            const int32_t *tokens, embedding_rows_fn rows) {
    const model_config_t *c = &g->cfg;
    const vocab_rows_hook_t hook = {rows, u, A};
    vocab_style(g)->embedding_forward(g, p, A->emb, tokens, unit_param(g, u, E_WTE),
                                      unit_param(g, u, E_WPE), &hook);
    if (A->emb_keep) {
        site_mask(g, A, p, A->emb_keep, site_stream("dropout.embedding", -1, A->step));
        dropout_forward(A->emb, A->emb, A->emb_keep, p->nsC, c->hidden_dropout);
    }
    act_round(g, A->emb, p->nsC);
}

static void forward(gpt_t *g, const unit_t *u, gpt_slot_t *A, const float *x, const pass_t *p) {
    (void)x;
    embedding_unit_forward(g, u, A, p, A->inputs, NULL);
}

const float *embedding_unit_backward(gpt_t *g, const unit_t *u, gpt_slot_t *A, const pass_t *p,
                                     const int32_t *tokens) {
    const model_config_t *c = &g->cfg;
    const float *d = A->d_resid;
    if (A->emb_keep) {
        dropout_backward(g->scratch.d_tmp, d, A->emb_keep, p->nsC, c->hidden_dropout);
        act_round(g, g->scratch.d_tmp, p->nsC);
        d = g->scratch.d_tmp;
    }
    return vocab_style(g)->embedding_backward(g, p, unit_grad(g, u, E_WTE), unit_grad(g, u, E_WPE),
                                              d, tokens);
}

static void backward(gpt_t *g, const unit_t *u, gpt_slot_t *A, const pass_t *p) {
    embedding_unit_backward(g, u, A, p, A->inputs);
}

void embedding_views(const gpt_t *g, const unit_t *u, const gpt_slot_t *A,
                  const unit_positions_t *pos, unit_view_t *out) {
    (void)u;
    out[0] = unit_stream_view(g, A->emb_keep, pos->stream);
    out[1] = unit_stream_view(g, A->emb, pos->stream);
}

const unit_kind_t unit_embedding = {
    .name = "embedding",
    .prefix = "",
    .tensors = tensors,
    .n_tensors = 2,
    .checkpoints = embedding_checkpoints,
    .n_checkpoints = 2,
    .input_grad = NULL,
    .bind = embedding_bind,
    .layout = embedding_layout,
    .output = embedding_output,
    .forward = forward,
    .after_forward = NULL,
    .backward = backward,
    .views = embedding_views,
};
