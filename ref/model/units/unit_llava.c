/* unit_llava.c - a LLaVA-style model's image side (MODEL.md
 * "Encoder-decoder models"), over one stream of T rows a sequence: P
 * image patches, then the text.
 *
 *   patch embedding   image rows: x = Wp . picture + bp + wpe; text rows: wte[tok] + wpe
 *   encoder layers    (unit_encdec.c) bidirectional over the image rows
 *   projector         image rows: x = W2 . gelu(W1 . x + b1) + b2 (the decoder's width)
 *   layers, head      the GPT's, causal over every row (the patches a prefix),
 *                     the loss on the text rows
 *
 * The synthetic image of a sequence shows its text: patch p is the
 * picture of text byte p mod (T - P), a fixed random vector of that byte
 * (llava_picture), so the decoder can learn to read it. An image row's
 * token is that byte, which it does not look up (slot->words: -1).
 */
#include <string.h>

#include "model/gpt.h"
#include "model/units/unit_layer.h"

/* ---- patch embedding ------------------------------------------------------ */

enum { E_PATCH_W = E_WPE + 1, E_PATCH_B };
static const unit_tensor_t patch_tensors[] = {
    [E_WTE] = {"embedding.word_embeddings.weight", 2, {DIM_V, DIM_C}, INIT_NORMAL, STD_SIGMA,
               CUT_VOCAB, AL_NONE, 1, WHEN_ALWAYS},
    [E_WPE] = {"embedding.position_embeddings.weight", 2, {DIM_T, DIM_C}, INIT_NORMAL, STD_SIGMA,
               CUT_REPL, AL_NONE, 1, WHEN_ALWAYS},
    [E_PATCH_W] = {"vision.patch_embedding.weight", 2, {DIM_C, DIM_PATCH}, INIT_NORMAL, STD_SIGMA,
                   CUT_REPL, AL_NONE, 1, WHEN_ALWAYS},
    [E_PATCH_B] = {"vision.patch_embedding.bias", 1, {DIM_C, DIM_1}, INIT_ZEROS, STD_NONE,
                   CUT_REPL, AL_NONE, 0, WHEN_ALWAYS},
};

static void patch_layout(gpt_slot_t *A, int index, const slot_dims_t *d, int held, int next_held,
                         carver_t *cv) {
    embedding_layout(A, index, d, held, next_held, cv);
    A->words = held ? (int32_t *)carve(cv, d->n * sizeof(int32_t)) : NULL;
    A->pictures = held ? CARVE_F(cv, d->n * d->patch) : NULL;
    A->picture_rows = held ? (int32_t *)carve(cv, d->n * sizeof(int32_t)) : NULL;
}

/* The image rows among `runs` of n_seq sequences (a subset of the
 * positions the slot holds, sequence parallelism's): their storage rows
 * (A->picture_rows) and the pictures of their tokens (A->pictures
 * [k, patch_dim]), k returned. */
static int image_rows(const gpt_t *g, gpt_slot_t *A, const cp_runs_t *runs, int n_seq) {
    int32_t *at = A->picture_rows;
    float *pictures = A->pictures;
    const int P = g->cfg.encoder_seq_length, D = g->cfg.patch_dim, Tc = g->local.seq_held;
    const cp_runs_t *all = &g->local.runs; /* the order of A->inputs' positions */
    int k = 0;
    for (int s = 0, row = 0; s < n_seq; s++)
        for (int r = 0; r < runs->n; r++)
            for (int t = runs->t0[r]; t < runs->t0[r] + runs->len[r]; t++, row++) {
                if (t >= P) continue;
                int i = 0; /* t's place among the slot's positions */
                for (int q = 0; q < all->n; i += all->len[q++])
                    if (t >= all->t0[q] && t < all->t0[q] + all->len[q]) {
                        i += t - all->t0[q];
                        break;
                    }
                llava_picture(&g->cfg, A->inputs[(size_t)s * Tc + i], pictures + (size_t)k * D);
                at[k++] = (int32_t)row;
            }
    return k;
}

static linear_tiles_t patch_tiles(const model_config_t *c) {
    return (linear_tiles_t){c->tile_tokens, c->tile_features, c->tile_features};
}

/* After the lookup: the image rows held get the patch embedding of their
 * pictures (the same on every tensor-parallel rank; 2-D: the column's
 * features, from its block of Wp, whole output tiles as golden's, once
 * Wp has a 2-D placement: styles/MODES.md). */
static void patch_rows(gpt_t *g, const unit_t *u, gpt_slot_t *A, const pass_t *p) {
    const model_config_t *c = &g->cfg;
    const int C = g->local.hid, D = c->patch_dim; /* C: the stream's features held */
    float *y = g->scratch.d_tmp; /* [n, C]: the lookup's rows are already completed */
    const int k = image_rows(g, A, &p->runs, p->n_seq);
    if (k) linear_forward(y, A->pictures, unit_param(g, u, E_PATCH_W), unit_param(g, u, E_PATCH_B),
                          k, D, C, patch_tiles(c), &g->ws);
    act_round(g, y, (size_t)k * C); /* a linear's output (Megatron's LLaVA: the model's dtype) */
    for (int i = 0; i < k; i++)
        memcpy(A->emb + (size_t)A->picture_rows[i] * C, y + (size_t)i * C, C * sizeof(float));
}

/* The words looked up: the inputs, -1 on the image rows (every position
 * the slot holds). */
static void words(const gpt_t *g, gpt_slot_t *A, const pass_t *p) {
    const cp_runs_t *r = &g->local.runs;
    const int P = g->cfg.encoder_seq_length;
    for (int s = 0, row = 0; s < p->n_seq; s++)
        for (int k = 0; k < r->n; k++)
            for (int t = r->t0[k]; t < r->t0[k] + r->len[k]; t++, row++)
                A->words[row] = t < P ? -1 : A->inputs[row];
}

static void patch_forward(gpt_t *g, const unit_t *u, gpt_slot_t *A, const float *x,
                          const pass_t *p) {
    (void)x;
    words(g, A, p);
    embedding_unit_forward(g, u, A, p, A->words, patch_rows);
}

/* The patch embedding's gradients from every image row's: whole on every
 * tensor-parallel rank (the gradient is gathered to every position); 2-D:
 * the column's features of the row's sequences, to be completed over the
 * column once Wp has a 2-D placement (styles/MODES.md). */
static void patch_backward(gpt_t *g, const unit_t *u, gpt_slot_t *A, const pass_t *p) {
    const model_config_t *c = &g->cfg;
    const int C = g->local.hid, D = c->patch_dim; /* C: the stream's features held */
    const float *d = embedding_unit_backward(g, u, A, p, A->words);
    float *dy = g->scratch.d_tmp2; /* [n, C]: not the embedding backward's */
    const int k = image_rows(g, A, &g->local.runs, p->n_seq);
    for (int i = 0; i < k; i++)
        memcpy(dy + (size_t)i * C, d + (size_t)A->picture_rows[i] * C, C * sizeof(float));
    if (k) linear_backward(NULL, unit_grad(g, u, E_PATCH_W), unit_grad(g, u, E_PATCH_B), dy,
                           A->pictures, unit_param(g, u, E_PATCH_W), k, D, C, patch_tiles(c), &g->ws);
}

const unit_kind_t unit_patch_embedding = {
    .name = "patch embedding",
    .prefix = "",
    .tensors = patch_tensors,
    .n_tensors = 4,
    .checkpoints = embedding_checkpoints,
    .n_checkpoints = 2,
    .input_grad = NULL,
    .bind = embedding_bind,
    .layout = patch_layout,
    .output = embedding_output,
    .forward = patch_forward,
    .after_forward = NULL,
    .backward = patch_backward,
    .views = embedding_views,
};

/* ---- projector ------------------------------------------------------------ */

enum { J_FC1_W, J_FC1_B, J_FC2_W, J_FC2_B };
static const unit_tensor_t projector_tensors[] = {
    [J_FC1_W] = {"linear_fc1.weight", 2, {DIM_F, DIM_C}, INIT_NORMAL, STD_SIGMA, CUT_COLPAR,
                 AL_FFN, 1, WHEN_ALWAYS},
    [J_FC1_B] = {"linear_fc1.bias", 1, {DIM_F, DIM_1}, INIT_ZEROS, STD_NONE, CUT_COLPAR, AL_FFN,
                 0, WHEN_ALWAYS},
    [J_FC2_W] = {"linear_fc2.weight", 2, {DIM_C, DIM_F}, INIT_NORMAL, STD_SIGMA, CUT_ROWPAR,
                 AL_FFN, 1, WHEN_ALWAYS},
    [J_FC2_B] = {"linear_fc2.bias", 1, {DIM_C, DIM_1}, INIT_ZEROS, STD_NONE, CUT_REPL, AL_NONE,
                 0, WHEN_ALWAYS},
};
static const unit_checkpoint_t projector_checkpoints[] = {
    {"act", "linear_fc1.output", ST_F32, 2, {DIM_T, DIM_F}, 0, WHEN_ALWAYS, CKPT_TP_ROW_LINEARS},
    {"act", "output", ST_F32, 2, {DIM_T, DIM_C}, 1, WHEN_ALWAYS, CKPT_TP_ROW},
};

/* Its input gathered in the MLP part's ln2_full, the MLP's fields, the
 * stream in out. */
static void projector_layout(gpt_slot_t *A, int l, const slot_dims_t *d, int held, int next_held,
                             carver_t *cv) {
    layer_acts_t *L = &A->layer[l];
    if (held) {
        L->mlp.ln2_full = d->sp ? CARVE_F(cv, d->n * d->C) : NULL;
        layer_mlp_layout(L, d, cv);
    } else if (next_held) {
        L->out = CARVE_F(cv, d->ns * d->C);
    }
}

static void projector_forward(gpt_t *g, const unit_t *u, gpt_slot_t *A, const float *x,
                              const pass_t *p) {
    layer_acts_t *L = &A->layer[unit_acts(u)];
    mlp_acts_t *LA = &L->mlp;
    const model_config_t *c = &g->cfg;
    const int n = p->n, C = g->local.hid, F = g->local.ffn; /* C: the stream's features held */
    const gpt_local_t *lc = &g->local;
    const int rl = lc->row_linears;
    /* gathered under sequence parallelism, else the input itself (the
     * previous unit's output, which the slot keeps for the backward) */
    float *full = (float *)tokens_full(g, p, LA->ln2_full, x, C);
    LA->ln2_full = full;
    pair_first_forward(g, p, LA->fc1_out, full, unit_param(g, u, J_FC1_W),
                       unit_param(g, u, J_FC1_B), C, F, p->t_cf);
    gelu_forward(LA->gelu_out, LA->gelu_grad, LA->fc1_out, (size_t)n * F);
    act_round(g, LA->gelu_out, (size_t)n * F); /* the MLP's points (mlp_forward) */
    pair_second_forward(g, p, LA->fc2_out, LA->gelu_out, F, rl ? lc->fin0 : 0, rl ? lc->fin : F,
                        unit_param(g, u, J_FC2_W), unit_param(g, u, J_FC2_B), C, p->t_fc, TP2D_FFN);
    memcpy(L->out, x, p->nsC * sizeof(float)); /* the text rows pass */
    copy_rows(L->out, LA->fc2_out, p, ROWS_SOURCE, c->encoder_seq_length, C);
}

/* The image rows' gradient through the MLP (no residual: it replaces
 * them); the text rows' passes as it is. */
static void projector_backward(gpt_t *g, const unit_t *u, gpt_slot_t *A, const pass_t *p) {
    const mlp_acts_t *LA = &A->layer[unit_acts(u)].mlp;
    const model_config_t *c = &g->cfg;
    const int C = g->local.hid, F = g->local.ffn, P = c->encoder_seq_length;
    const gpt_local_t *lc = &g->local;
    const int rl = lc->row_linears;
    gpt_scratch_t *S = &g->scratch;
    float *d_a = S->d_tmp, *d_b = S->d_tmp2, *d_w = S->d_wide;
    memcpy(d_a, A->d_resid, p->nsC * sizeof(float));
    zero_rows_outside(d_a, p, ROWS_SOURCE, P, C);
    const float *d_full = tokens_full(g, p, S->d_tmp3, d_a, C);
    pair_second_backward(g, p, d_w, unit_grad(g, u, J_FC2_W), unit_grad(g, u, J_FC2_B), d_full,
                         LA->gelu_out, F, rl ? lc->fin0 : 0, rl ? lc->fin : F,
                         unit_param(g, u, J_FC2_W), C, p->t_fc, TP2D_FFN);
    gelu_backward(d_w, d_w, LA->gelu_grad, (size_t)p->n * F);
    act_round(g, d_w, (size_t)p->n * F);
    pair_first_backward(g, p, d_b, unit_grad(g, u, J_FC1_W), unit_grad(g, u, J_FC1_B), d_w,
                        LA->ln2_full, unit_param(g, u, J_FC1_W), C, F, p->t_cf);
    copy_rows(A->d_resid, d_b, p, ROWS_SOURCE, P, C);
}

static void projector_views(const gpt_t *g, const unit_t *u, const gpt_slot_t *A,
                            const unit_positions_t *pos, unit_view_t *out) {
    const layer_acts_t *LA = &A->layer[unit_acts(u)];
    out[0] = (unit_view_t){LA->mlp.fc1_out, 1, g->local.ffn0, g->local.ffn, pos->all, 0,
                           pos->inner_shift};
    out[1] = unit_stream_view(g, LA->out, pos->stream);
}

const unit_kind_t unit_projector = {
    .name = "projector",
    .prefix = "projector.",
    .tensors = projector_tensors,
    .n_tensors = 4,
    .checkpoints = projector_checkpoints,
    .n_checkpoints = 2,
    .input_grad = "grad_input.projector",
    .bind = NULL,
    .layout = projector_layout,
    .output = layer_output,
    .forward = projector_forward,
    .after_forward = NULL,
    .backward = projector_backward,
    .views = projector_views,
};
