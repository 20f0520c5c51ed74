/* unit_encdec.c - an encoder-decoder's units (MODEL.md "Encoder-decoder
 * models"), over one stream of T rows a sequence: the encoder's P source
 * rows, then the decoder's T - P target rows.
 *
 *   encoder layer l   source rows: x = x + drop(attn_src(LN1 x)); x = x + drop(mlp(LN2 x))
 *   encoder final     source rows: x = LNe(x)  (the encoder's output)
 *   decoder layer l   target rows: x = x + drop(attn_causal(LN1 x))
 *                                  x = x + drop(cross(LNx x_target, x_source))
 *                                  x = x + drop(mlp(LN2 x))
 *
 * Each unit changes only its own rows; the others pass through it, so the
 * encoder's output travels with the decoder's hidden states from unit to
 * unit (and stage to stage), as Megatron's pipelined encoder-decoder sent
 * both. Cross-attention is an attention block whose queries are the
 * target rows' and whose keys and values are the source rows' (the
 * encoder's output, not normalised again): ATTN_SOURCE over the stream.
 * The source rows' gradient so collects, in the decoder layers' backward
 * order, each cross-attention's gradient with one fp32 add each: the
 * residual rule (the encoder's output is a residual the decoder layers
 * read and pass on), the same whatever the layout.
 */
#include <string.h>

#include "model/gpt.h"
#include "model/units/unit_layer.h"

/* ---- encoder layer -------------------------------------------------------- */

static const unit_tensor_t layer_tensors[P_PER_LAYER] = {
    LAYER_ATTENTION_TENSORS("input_layernorm", "self_attention"),
    LAYER_LN2_TENSORS,
    LAYER_MLP_TENSORS,
};
static const unit_checkpoint_t layer_checkpoints[LAYER_CHECKPOINTS] = {
    LAYER_ATTENTION_MASKS("attention", 0),
    LAYER_MLP_MASK(6),
    LAYER_ATTENTION_ACTS("input_layernorm", "self_attention", 0),
    LAYER_MLP_CHECKPOINTS(6),
};

/* bidirectional over the source rows, which are all it changes */
static const attn_block_t encoder_self = {
    P_LN1_W, P_LN1_B, P_QKV_W, P_QKV_B, P_DENSE_W, P_DENSE_B, ATTN_SOURCE, ROWS_SOURCE, 0,
    "attention_dropout", "attention_output_dropout"};

static void encoder_forward(gpt_t *g, const unit_t *u, gpt_slot_t *A, const float *x,
                            const pass_t *p) {
    layer_acts_t *LA = &A->layer[unit_acts(u)];
    attn_block_forward(g, u, A, &LA->attn, x, p, &encoder_self);
    ln2_forward(g, u, &LA->mlp, LA->attn.resid1, p);
    mlp_forward(g, u, A, LA, LA->attn.resid1, p, ROWS_SOURCE);
}

static void encoder_backward(gpt_t *g, const unit_t *u, gpt_slot_t *A, const pass_t *p) {
    layer_acts_t *LA = &A->layer[unit_acts(u)];
    ln2_backward(g, u, A, &LA->mlp, p, mlp_backward(g, u, A, LA, p, ROWS_SOURCE));
    attn_block_backward(g, u, A, &LA->attn, p, &encoder_self);
}

const unit_kind_t unit_encoder_layer = {
    .name = "encoder layer",
    .prefix = "encoder.layers.%d.",
    .tensors = layer_tensors,
    .n_tensors = P_PER_LAYER,
    .checkpoints = layer_checkpoints,
    .n_checkpoints = LAYER_CHECKPOINTS,
    .input_grad = "grad_input.encoder.layers.%d",
    .bind = NULL,
    .layout = layer_layout,
    .output = layer_output,
    .forward = encoder_forward,
    .after_forward = NULL,
    .backward = encoder_backward,
    .views = layer_views,
    .attention_blocks = 1,
};

/* ---- encoder final LayerNorm ---------------------------------------------- */

enum { F_LN_W, F_LN_B };
static const unit_tensor_t final_tensors[] = {
    [F_LN_W] = LAYER_LN_("final_layernorm.weight", INIT_ONES),
    [F_LN_B] = LAYER_LN_("final_layernorm.bias", INIT_ZEROS),
};
static const unit_checkpoint_t final_checkpoints[] = {
    {"act", "final_layernorm.output", ST_F32, 2, {DIM_T, DIM_C}, 0, WHEN_ALWAYS, CKPT_COMPUTE},
};

/* Its LayerNorm's xhat and rstd in the MLP part's ln2 fields; the
 * stream in out. */
static void final_layout(gpt_slot_t *A, int l, const slot_dims_t *d, int held, int next_held,
                         carver_t *cv) {
    layer_acts_t *L = &A->layer[l];
    if (held) {
        L->mlp.ln2_xhat = CARVE_F(cv, d->ns * d->C);
        L->mlp.ln2_rstd = CARVE_F(cv, d->ns);
    }
    if (held || next_held) L->out = CARVE_F(cv, d->ns * d->C);
}

static void final_forward(gpt_t *g, const unit_t *u, gpt_slot_t *A, const float *x,
                          const pass_t *p) {
    layer_acts_t *LA = &A->layer[unit_acts(u)];
    const model_config_t *c = &g->cfg;
    /* the replica's norm style: 2-D's statistics span the row's columns */
    ln_forward(g, p, LA->out, LA->mlp.ln2_xhat, LA->mlp.ln2_rstd, x, unit_param(g, u, F_LN_W),
               unit_param(g, u, F_LN_B));
    copy_rows(LA->out, x, p, ROWS_TARGET, c->encoder_seq_length, g->local.hid);
}

/* The source rows' gradient through the LayerNorm (only theirs reach its
 * weights); the target rows' passes as it is. */
static void final_backward(gpt_t *g, const unit_t *u, gpt_slot_t *A, const pass_t *p) {
    layer_acts_t *LA = &A->layer[unit_acts(u)];
    const model_config_t *c = &g->cfg;
    const int C = g->local.hid, P = c->encoder_seq_length; /* C: the stream's features held */
    float *d_a = g->scratch.d_tmp, *d_b = g->scratch.d_tmp2;
    memcpy(d_a, A->d_resid, p->nsC * sizeof(float));
    zero_rows_outside(d_a, p, ROWS_SOURCE, P, C);
    ln_backward(g, p, d_b, unit_grad(g, u, F_LN_W), unit_grad(g, u, F_LN_B), d_a,
                LA->mlp.ln2_xhat, LA->mlp.ln2_rstd, unit_param(g, u, F_LN_W));
    copy_rows(A->d_resid, d_b, p, ROWS_SOURCE, P, C);
}

static void final_views(const gpt_t *g, const unit_t *u, const gpt_slot_t *A,
                        const unit_positions_t *pos, unit_view_t *out) {
    out[0] = unit_stream_view(g, A->layer[unit_acts(u)].out, pos->stream);
}

const unit_kind_t unit_encoder_final = {
    .name = "encoder final layernorm",
    .prefix = "encoder.",
    .tensors = final_tensors,
    .n_tensors = 2,
    .checkpoints = final_checkpoints,
    .n_checkpoints = 1,
    .input_grad = "grad_input.encoder.final_layernorm",
    .bind = NULL,
    .layout = final_layout,
    .output = layer_output,
    .forward = final_forward,
    .after_forward = NULL,
    .backward = final_backward,
    .views = final_views,
};

/* ---- decoder layer -------------------------------------------------------- */

enum { P_X_LN_W = P_PER_LAYER, P_X_LN_B, P_X_QKV_W, P_X_QKV_B, P_X_DENSE_W, P_X_DENSE_B,
       P_PER_DECODER_LAYER };
static const unit_tensor_t decoder_tensors[P_PER_DECODER_LAYER] = {
    LAYER_ATTENTION_TENSORS("input_layernorm", "self_attention"),
    LAYER_LN2_TENSORS,
    LAYER_MLP_TENSORS,
    LAYER_ATTENTION_TENSORS("pre_cross_attn_layernorm", "cross_attention"),
};
/* the dense layer's, its MLP after the cross-attention (orders 6 .. 11) */
enum { DECODER_CHECKPOINTS = LAYER_CHECKPOINTS + 6 };
static const unit_checkpoint_t decoder_checkpoints[DECODER_CHECKPOINTS] = {
    LAYER_ATTENTION_MASKS("attention", 0),
    LAYER_MLP_MASK(12),
    LAYER_ATTENTION_ACTS("input_layernorm", "self_attention", 0),
    LAYER_MLP_CHECKPOINTS(12),
    LAYER_ATTENTION_MASKS("cross_attention", 6),
    LAYER_ATTENTION_ACTS("pre_cross_attn_layernorm", "cross_attention", 6),
};

/* causal over the target rows, which are all it changes */
static const attn_block_t decoder_self = {
    P_LN1_W, P_LN1_B, P_QKV_W, P_QKV_B, P_DENSE_W, P_DENSE_B, ATTN_CAUSAL_TARGET, ROWS_TARGET, 0,
    "attention_dropout", "attention_output_dropout"};
static const attn_block_t decoder_cross = {
    P_X_LN_W, P_X_LN_B, P_X_QKV_W, P_X_QKV_B, P_X_DENSE_W, P_X_DENSE_B, ATTN_SOURCE, ROWS_TARGET, 1,
    "cross_attention_dropout", "cross_attention_output_dropout"};

/* The dense layer's activations and, carved in the slot, a second
 * attention part for the cross-attention. */
static void decoder_layout(gpt_slot_t *A, int l, const slot_dims_t *d, int held, int next_held,
                           carver_t *cv) {
    layer_layout(A, l, d, held, next_held, cv);
    if (!held) return;
    attn_acts_t measure, *X = carve(cv, sizeof *X);
    if (!X) X = &measure; /* measuring */
    memset(X, 0, sizeof *X);
    layer_attention_layout(X, d, cv);
    A->layer[l].cross = X == &measure ? NULL : X;
}

static void decoder_forward(gpt_t *g, const unit_t *u, gpt_slot_t *A, const float *x,
                            const pass_t *p) {
    layer_acts_t *LA = &A->layer[unit_acts(u)];
    attn_acts_t *X = LA->cross;
    attn_block_forward(g, u, A, &LA->attn, x, p, &decoder_self);
    attn_block_forward(g, u, A, X, LA->attn.resid1, p, &decoder_cross);
    ln2_forward(g, u, &LA->mlp, X->resid1, p);
    mlp_forward(g, u, A, LA, X->resid1, p, ROWS_TARGET);
}

static void decoder_backward(gpt_t *g, const unit_t *u, gpt_slot_t *A, const pass_t *p) {
    layer_acts_t *LA = &A->layer[unit_acts(u)];
    ln2_backward(g, u, A, &LA->mlp, p, mlp_backward(g, u, A, LA, p, ROWS_TARGET));
    attn_block_backward(g, u, A, LA->cross, p, &decoder_cross);
    attn_block_backward(g, u, A, &LA->attn, p, &decoder_self);
}

static void decoder_views(const gpt_t *g, const unit_t *u, const gpt_slot_t *A,
                          const unit_positions_t *pos, unit_view_t *out) {
    const layer_acts_t *LA = &A->layer[unit_acts(u)];
    layer_views(g, u, A, pos, out);
    layer_attention_views(g, LA->cross, pos, out + LAYER_CHECKPOINTS, out + LAYER_CHECKPOINTS + 2);
}

const unit_kind_t unit_decoder_layer = {
    .name = "decoder layer",
    .prefix = "decoder.layers.%d.",
    .tensors = decoder_tensors,
    .n_tensors = P_PER_DECODER_LAYER,
    .checkpoints = decoder_checkpoints,
    .n_checkpoints = DECODER_CHECKPOINTS,
    .input_grad = "grad_input.decoder.layers.%d",
    .bind = NULL,
    .layout = decoder_layout,
    .output = layer_output,
    .forward = decoder_forward,
    .after_forward = NULL,
    .backward = decoder_backward,
    .views = decoder_views,
    .attention_blocks = 2,
};
