/* acts.h - a replica's activations and backward scratch (private; gpt.h
 * includes it): the parts a layer keeps for its backward (attention,
 * MLP, MoE), one activation slot (gpt_slot_t) and the scratch the slots
 * share (gpt_scratch_t). Laid out by replica.c's layout_slot and
 * layout_scratch; the units carve their own parts. */
#ifndef PARITY_MODEL_ACTS_H
#define PARITY_MODEL_ACTS_H

#include "parity/model.h"

/* ---- the model --------------------------------------------------------- */

/* The activations a layer kind keeps for the backward pass, for one
 * microbatch of n = micro_batch * T tokens, in parts carved by the code
 * that uses them: an attention block's (unit_layer.c; its core's own
 * layout by the attention style, styles/attention.h), an MLP's, an MoE
 * layer's (moe.c), a decoder layer's second attention block. */
typedef struct {
    float *ln1_xhat, *ln1_rstd, *ln1_out;  /* [n,C] [n] [n,C] (sequence parallel: [ns,...],
                                              the positions held; ns = n/tp) */
    float *ln1_full;                       /* [n,C] ln1_out of every position (gathered under
                                              sequence parallelism, else ln1_out) */
    float *qkv;                            /* [n,3C] (head, {q,k,v}, d) columns */
    float *att_e, *att_ehat;               /* [b,H,T,T]: e, and e after dropout */
    float *att_z;                          /* [b,H,T] softmax denominators */
    uint8_t *att_keep;                     /* [b,H,T,T] or NULL (p = 0) */
    float *ctx;                            /* [n,C] core attention output */
    float *core_qkv, *core_ctx;            /* qkv and ctx as the attention style's core reads
                                              and writes them ([n,3C] [n,C]: Ulysses' re-shard
                                              to every position of heads/cp heads; else qkv,
                                              ctx themselves) */
    float *attn_out;                       /* [n,C] dense output, before dropout */
    uint8_t *attn_keep;                    /* [n,C] or NULL */
    float *resid1;                         /* [n,C] x after the attention residual */
} attn_acts_t;

/* LN2 and a dense MLP's (an MoE layer's LN2 and output dropout mask too;
 * LLaVA's projector: its input gathered in ln2_full, the MLP; an
 * encoder's final LayerNorm: its xhat and rstd in ln2's). */
typedef struct {
    float *ln2_xhat, *ln2_rstd, *ln2_out;  /* [n,C] [n] [n,C] */
    float *ln2_full;                       /* [n,C] as ln1_full */
    float *fc1_out;                        /* [n,F] before GeLU */
    float *gelu_out;                       /* [n,F] */
    float *gelu_grad;                      /* [n,F] GeLU's derivative at fc1_out */
    float *fc2_out;                        /* [n,C] before dropout */
    uint8_t *mlp_keep;                     /* [n,C] or NULL */
} mlp_acts_t;

typedef struct layer_acts {
    attn_acts_t attn;                      /* the (self-)attention block */
    mlp_acts_t mlp;                        /* LN2 and the MLP */
    float *out;                            /* [n,C] the unit's output: the residual stream it
                                              leaves (every layer-like kind's) */
    struct moe_acts *moe;                  /* an MoE layer's MLP (units/moe.h), or NULL */
    /* a decoder layer's cross-attention block: a second attention part
     * (ln1_*: its input, qkv .. resid1), carved in the slot, or NULL */
    attn_acts_t *cross;
} layer_acts_t;

/* One in-flight microbatch: what its forward pass keeps for its backward
 * pass (an activation slot). The golden schedule uses one; a pipeline
 * stage keeps as many as its schedule has microbatches in flight. */
typedef struct {
    int n_seq, first_seq;                  /* sequences of the global batch */
    int mask_seq;                          /* the sequence index dropout masks are keyed by:
                                              first_seq (I3; a broken variant changes it) */
    int chunk;                             /* the chunk of units the slot is laid out for
                                              (-1: every unit held) */
    int64_t step;
    int32_t *inputs, *targets;             /* [n]: the positions held (room for whole
                                              sequences, which gpt_slot_begin compacts) */
    int32_t *words;                        /* LLaVA: inputs with the image rows -1 (they look
                                              up no word), else NULL */
    float *pictures;                       /* LLaVA: [n, patch_dim] the image rows' pictures */
    int32_t *picture_rows;                 /* LLaVA: [n] their rows in the slot */
    float *emb;                            /* [n,C] embedding output (after dropout) */
    uint8_t *emb_keep;                     /* [n,C] or NULL */
    layer_acts_t *layer;                   /* [units]: unit u's at u - 1 */
    float *lnf_xhat, *lnf_rstd, *lnf_out;  /* [n,C] [n] [n,C] */
    float *lnf_full;                       /* [n,C] as ln1_full */
    float *logits;                         /* [n,V] */
    float *token_loss;                     /* [n] */
    float *ce_max, *ce_z;                  /* [n] the softmax's max and denominator, kept
                                              for the backward pass */
    float *d_resid;                        /* [n,C] gradient of the residual stream at the
                                              boundary of the unit whose backward runs */
    void *block;                           /* the one allocation behind all of it */
} gpt_slot_t;

/* Backward scratch, shared by the slots (one unit pass runs at a time). */
typedef struct {
    float *d_tmp, *d_tmp2;                 /* [n,C] each */
    float *d_wide;                         /* [n,max(3C,F)] */
    float *att_scratch;                    /* attention_scratch_floats(): the golden core's
                                              backward, which every attention style runs or
                                              borrows from (styles/attention.h) */
    float *row_scratch;                    /* [max(C,V,F) * 2] */
    /* 1-D tensor and sequence parallelism's buffers (tp.h): the open sums
     * tp completes, a reduce-scatter's share, a gather's parts; shared by
     * the linear, norm and vocabulary families' 1-D forms; NULL at tp 1 */
    struct tp_scratch *tp;
    float *d_tmp3;                         /* [n*C] a gathered gradient (sequence parallel;
                                              an encoder-decoder's source rows' gradient) */
    struct moe_scratch *moe;               /* an MoE model's backward (units/moe.h), or NULL */
    /* 2-D, 2.5-D and 3-D tensor parallelism's buffers (tp2d.h: SUMMA's
     * open output and slots, the broadcast blocks, a sharded vector's
     * pieces, the sequences over the column), shared by the linear, norm
     * and vocabulary families' 2-D and 3-D styles; NULL in other layouts */
    struct tp2d_scratch *tp2d;
    layer_acts_t *recompute;               /* full recomputation: one chunk's layers'
                                              activations, shared (recompute_sets) */
    attn_acts_t recompute_core[2];         /* selective: one attention core (att_*) shared by
                                              the self-attention blocks, one by the cross-
                                              attention blocks (a decoder layer runs both
                                              before its views are read) */
    void *block;
} gpt_scratch_t;

#endif
