/* unit_layer.h - a transformer layer's pieces, shared by the layer kinds:
 * the GPT's dense and MoE layers (unit_layer.c) and an encoder-decoder's
 * encoder and decoder layers (unit_encdec.c).
 *
 *   attention block   resid1 = x + drop(dense(attn(qkv(LN x))))
 *   LN2               ln2 = LN2(resid)
 *   MLP block         out = resid + drop(fc2(gelu(fc1(ln2))))
 *
 * An encoder-decoder's layers change only their own rows of the stream
 * (MODEL.md "Encoder-decoder models"): a block's branch output is zeroed
 * on the other rows, which so pass through it unchanged, and so is the
 * branch's gradient there before its backward, so that no other row's
 * value reaches a parameter gradient.
 */
#ifndef PARITY_UNIT_LAYER_H
#define PARITY_UNIT_LAYER_H

#include "model/gpt.h"
#include "model/units/units_internal.h"

/* A layer's tensors, in MODEL.md's table order. */
enum {
    P_LN1_W, P_LN1_B, P_QKV_W, P_QKV_B, P_DENSE_W, P_DENSE_B,
    P_LN2_W, P_LN2_B, P_FC1_W, P_FC1_B, P_FC2_W, P_FC2_B, P_PER_LAYER
};

#define LAYER_LN_(sfx, init) {sfx, 1, {DIM_C, DIM_1}, init, STD_NONE, CUT_REPL, AL_NONE, 0, WHEN_ALWAYS}
/* An attention block's six tensors under a name ("self_attention") and
 * its LayerNorm's ("input_layernorm"): column-parallel qkv rows of whole
 * heads (head-ordered), a row-parallel projection over whole heads. */
#define LAYER_ATTENTION_TENSORS(ln, attn)                                                   \
    LAYER_LN_(ln ".weight", INIT_ONES), LAYER_LN_(ln ".bias", INIT_ZEROS),                 \
    {attn ".query_key_value.weight", 2, {DIM_3C, DIM_C}, INIT_NORMAL, STD_SIGMA, CUT_COLPAR, \
     AL_HEADS3, 1, WHEN_ALWAYS},                                                            \
    {attn ".query_key_value.bias", 1, {DIM_3C, DIM_1}, INIT_ZEROS, STD_NONE, CUT_COLPAR,     \
     AL_HEADS3, 0, WHEN_ALWAYS},                                                            \
    {attn ".dense.weight", 2, {DIM_C, DIM_C}, INIT_NORMAL, STD_OUT, CUT_ROWPAR, AL_HEADS, 1, \
     WHEN_ALWAYS},                                                                          \
    {attn ".dense.bias", 1, {DIM_C, DIM_1}, INIT_ZEROS, STD_NONE, CUT_REPL, AL_NONE, 0,      \
     WHEN_ALWAYS}
/* LN2 and the dense MLP (fc1 column-parallel, fc2 row-parallel). */
#define LAYER_LN2_TENSORS                                                                   \
    LAYER_LN_("post_attention_layernorm.weight", INIT_ONES),                               \
    LAYER_LN_("post_attention_layernorm.bias", INIT_ZEROS)
#define LAYER_MLP_TENSORS                                                                   \
    {"mlp.dense_h_to_4h.weight", 2, {DIM_F, DIM_C}, INIT_NORMAL, STD_SIGMA, CUT_COLPAR,      \
     AL_FFN, 1, WHEN_ALWAYS},                                                               \
    {"mlp.dense_h_to_4h.bias", 1, {DIM_F, DIM_1}, INIT_ZEROS, STD_NONE, CUT_COLPAR, AL_FFN,  \
     0, WHEN_ALWAYS},                                                                       \
    {"mlp.dense_4h_to_h.weight", 2, {DIM_C, DIM_F}, INIT_NORMAL, STD_OUT, CUT_ROWPAR,        \
     AL_FFN, 1, WHEN_ALWAYS},                                                               \
    {"mlp.dense_4h_to_h.bias", 1, {DIM_C, DIM_1}, INIT_ZEROS, STD_NONE, CUT_REPL, AL_NONE,   \
     0, WHEN_ALWAYS}
/* A dense layer's checkpoints: masks, then activations; orders are the
 * forward's, an attention block's from `a` (0), the MLP's from `m` (6). */
#define LAYER_ATTENTION_MASKS(attn, a)                                                       \
    {"mask", attn "_dropout", ST_U8, 3, {DIM_H, DIM_T, DIM_T}, a + 2, WHEN_ADROP, CKPT_COMPUTE}, \
    {"mask", attn "_output_dropout", ST_U8, 2, {DIM_T, DIM_C}, a + 5, WHEN_HDROP, CKPT_COMPUTE}
#define LAYER_ATTENTION_ACTS(ln, attn, a)                                                    \
    {"act", ln ".output", ST_F32, 2, {DIM_T, DIM_C}, a, WHEN_ALWAYS, CKPT_COMPUTE},          \
    {"act", attn ".query_key_value.output", ST_F32, 2, {DIM_T, DIM_3C}, a + 1, WHEN_ALWAYS,  \
     CKPT_TP_ROW_LINEARS},                                                                  \
    {"act", attn ".core_attention.output", ST_F32, 2, {DIM_T, DIM_C}, a + 3, WHEN_ALWAYS,    \
     CKPT_CP_ATTENTION},                                                                    \
    {"act", attn ".dense.output", ST_F32, 2, {DIM_T, DIM_C}, a + 4, WHEN_ALWAYS, CKPT_TP_ROW}
#define LAYER_MLP_CHECKPOINTS(m)                                                             \
    {"act", "post_attention_layernorm.output", ST_F32, 2, {DIM_T, DIM_C}, m, WHEN_ALWAYS,    \
     CKPT_COMPUTE},                                                                         \
    {"act", "mlp.dense_h_to_4h.output", ST_F32, 2, {DIM_T, DIM_F}, m + 1, WHEN_ALWAYS,       \
     CKPT_TP_ROW_LINEARS},                                                                  \
    {"act", "mlp.dense_4h_to_h.output", ST_F32, 2, {DIM_T, DIM_C}, m + 2, WHEN_ALWAYS,       \
     CKPT_TP_ROW},                                                                          \
    {"act", "output", ST_F32, 2, {DIM_T, DIM_C}, m + 4, WHEN_ALWAYS, CKPT_COMPUTE}
#define LAYER_MLP_MASK(m)                                                                    \
    {"mask", "mlp_output_dropout", ST_U8, 2, {DIM_T, DIM_C}, m + 3, WHEN_HDROP, CKPT_COMPUTE}
enum { LAYER_CHECKPOINTS = 11 };

/* The rows of the stream a block changes (the others pass through). */
typedef enum { ROWS_ALL, ROWS_SOURCE, ROWS_TARGET } layer_rows_t;

/* An attention block: its tensors (indices in its kind's table), the
 * keys its queries attend, the rows it changes, and whether it is a
 * cross-attention (the source rows enter its qkv linear as they are, the
 * encoder's output, and only its target rows are normalised first). */
typedef struct {
    int ln_w, ln_b, qkv_w, qkv_b, dense_w, dense_b;
    attn_mask_t mask;
    layer_rows_t rows;
    int cross;
    const char *att_site, *out_site; /* its dropout sites */
} attn_block_t;
/* The GPT's self-attention: P_LN1_W .. P_DENSE_B, causal, every row. */
extern const attn_block_t layer_self_attention;

/* Activations: an attention part (its core: scores, softmax and
 * dropout, laid out by layer_core_layout unless slot_dims_t.core_shared;
 * the core's own layout by the attention style); LN2's; the dense MLP's
 * and the layer's output. */
void layer_core_layout(attn_acts_t *L, const slot_dims_t *d, carver_t *cv);
void layer_attention_layout(attn_acts_t *L, const slot_dims_t *d, carver_t *cv);
void layer_ln2_layout(mlp_acts_t *L, const slot_dims_t *d, carver_t *cv);
void layer_mlp_layout(layer_acts_t *L, const slot_dims_t *d, carver_t *cv);

/* LA->resid1 = x + drop(block(x)); backward: A->d_resid from the
 * gradient of LA->resid1 to that of x. */
void attn_block_forward(gpt_t *g, const unit_t *u, gpt_slot_t *A, attn_acts_t *LA,
                        const float *x, const pass_t *p, const attn_block_t *b);
void attn_block_backward(gpt_t *g, const unit_t *u, gpt_slot_t *A, attn_acts_t *LA,
                         const pass_t *p, const attn_block_t *b);
/* M->ln2_full = LN2(x) (gathered under sequence parallelism); backward:
 * A->d_resid += the gradient through LN2 of d_ln2 (LN2's output's). */
void ln2_forward(gpt_t *g, const unit_t *u, mlp_acts_t *M, const float *x, const pass_t *p);
void ln2_backward(gpt_t *g, const unit_t *u, gpt_slot_t *A, mlp_acts_t *M, const pass_t *p,
                  const float *d_ln2);
/* LA->out = x + drop(mlp(LA->mlp.ln2_full)) on `rows`; backward: from
 * A->d_resid (LA->out's gradient), returns the gradient of LN2's output
 * (the tokens held, in the scratch). */
void mlp_forward(gpt_t *g, const unit_t *u, gpt_slot_t *A, layer_acts_t *LA, const float *x,
                 const pass_t *p, layer_rows_t rows);
const float *mlp_backward(gpt_t *g, const unit_t *u, gpt_slot_t *A, layer_acts_t *LA,
                          const pass_t *p, layer_rows_t rows);
/* The checkpoints' views of an attention block [6] (its two masks, then
 * its LayerNorm's output, qkv, core attention and projection) and of the
 * dense MLP with the output [5] (its mask, LN2, fc1, fc2, out). */
void layer_attention_views(const gpt_t *g, const attn_acts_t *LA, const unit_positions_t *pos,
                           unit_view_t *masks, unit_view_t *acts);
void layer_mlp_views(const gpt_t *g, const layer_acts_t *LA, const unit_positions_t *pos,
                     unit_view_t *mask, unit_view_t *acts);

/* A dense layer's whole: activations, output, checkpoint views. */
void   layer_layout(gpt_slot_t *A, int l, const slot_dims_t *d, int held, int next_held,
                    carver_t *cv);
float *layer_output(gpt_slot_t *A, int l);
void   layer_views(const gpt_t *g, const unit_t *u, const gpt_slot_t *A,
                   const unit_positions_t *pos, unit_view_t *out);

/* The rows held of the stream (p's positions of each sequence; source
 * rows: positions below the encoder's P): zero those outside `rows` of
 * y [ns, w]; copy those in `rows` of src into dst [ns, w]. */
void zero_rows_outside(float *y, const pass_t *p, layer_rows_t rows, int P, int w);
void copy_rows(float *dst, const float *src, const pass_t *p, layer_rows_t rows, int P, int w);

#endif
