/* model.h - the golden GPT: config, parameters, and one training step.
 *
 * ref/model/MODEL.md is the mathematics; this header is how to drive it.
 * A training step on one device (the golden run) is
 *
 *     gpt_step_begin(g);                          zero the open gradient sums
 *     for each microbatch of the global batch:
 *         gpt_microbatch(g, ...);                 forward + backward, grads stay open
 *     loss = gpt_step_loss(g);                    round(sum of token losses) / (B*T)
 *     norm = gpt_step_round_grads(g);             round every gradient once
 *     gpt_step_update(g, lr, norm);               clip, then AdamW
 *
 * (gpt_train_step does exactly this, with the data of corpus.h.) Every
 * sum is exact (accum.h), so the number of microbatches, and later the
 * number of data-parallel ranks, cannot change a single bit.
 */
#ifndef PARITY_MODEL_H
#define PARITY_MODEL_H

#include <stddef.h>
#include <stdio.h>
#include <stdint.h>

#include "parity/accum.h"
#include "parity/contract.h"
#include "parity/cp.h"
#include "parity/error.h"
#include "parity/placement.h"
#include "parity/runtime.h"
#include "parity/safetensors.h"

/* ---- config ------------------------------------------------------------ */

typedef struct {
    char name[64];
    /* shape */
    int vocab;         /* V */
    int seq_length;    /* T */
    int hidden;        /* C */
    int heads;         /* H; head size D = C / H */
    int layers;        /* L */
    int ffn;           /* F */
    int tied;          /* 1: the LM head is the word embedding */
    /* canonical tiles (I1): tokens | T, features | C and V (whole heads),
     * ffn | F. They belong to the model: a layout may only cut at them. */
    int tile_tokens, tile_features, tile_ffn;
    float hidden_dropout, attention_dropout;
    float ln_eps;
    uint64_t seed;
    /* training */
    int global_batch;  /* B sequences per step */
    int micro_batch;   /* sequences per microbatch; divides B (a replica's:
                          its largest microbatch, model_config_validate_replica) */
    float lr, min_lr;
    int warmup, decay_steps;
    float beta1, beta2, eps, weight_decay, clip_grad; /* clip_grad 0 = off */
    /* the optimizer's state (MODEL.md "Optimizer"): MODEL_OPT_ADAM, fp32 m and
     * v (Megatron's --optimizer adam, which is AdamW); MODEL_OPT_ADAMW8BIT,
     * bitsandbytes-style 8-bit m and v (adamw8bit.c), quantized in blocks
     * of optimizer_block elements of each tensor's GLOBAL flattened index,
     * so every layout quantizes the same blocks (a layout must hold whole
     * blocks: adam8_check_blocks). optimizer_block is the default
     * (ADAM8_DEFAULT_BLOCK) under MODEL_OPT_ADAM. */
    int optimizer;
    int optimizer_block;
    /* mixture of experts (ref/model/units/moe.c, MODEL.md "Mixture of experts"):
     * moe_experts 0 = every MLP dense. Layer l is an MoE layer when
     * l % moe_layer_freq == 0 (Megatron's --moe-layer-freq k). */
    int moe_experts;           /* E (--num-experts) */
    int moe_topk;              /* k (--moe-router-topk) */
    int moe_layer_freq;        /* (--moe-layer-freq) */
    int moe_pre_softmax;       /* 1: softmax over all experts, then top-k
                                  (--moe-router-pre-softmax); 0: top-k logits, then
                                  softmax over those k */
    float moe_aux_loss_coeff;  /* Switch load balancing (--moe-aux-loss-coeff) */
    float moe_z_loss_coeff;    /* (--moe-z-loss-coeff) */
    float moe_capacity_factor; /* 0: dropless (--moe-expert-capacity-factor) */
    int moe_drop_position;     /* over capacity drop by position (1) or by the lowest
                                  router probability (0) (--moe-token-drop-policy) */
    /* encoder-decoder models (MODEL.md "Encoder-decoder models"): the
     * stream of a sequence is seq_length rows, the first
     * encoder_seq_length the encoder's (source tokens), the rest the
     * decoder's (target tokens); layers counts the decoder's layers
     * (Megatron's --num-layers, --encoder-num-layers) */
    int arch;                  /* MODEL_GPT, MODEL_T5, MODEL_LLAVA */
    int encoder_layers;        /* --encoder-num-layers (0 for the GPT) */
    int encoder_seq_length;    /* --encoder-seq-length: P (0 for the GPT) */
    int patch_dim;             /* LLaVA: the values of an image patch (0 otherwise) */
    /* activation recomputation (Megatron's --recompute-*; units.c): how a
     * replica trades memory for a second forward. The same bits either
     * way, so the golden run keeps none; a layout's replica config
     * (engine_replica_config) carries the layout's choice. */
    int recompute;             /* MODEL_RECOMPUTE_NONE, _FULL, _SELECTIVE */
    int recompute_block;       /* full: 1 = the block method (the first recompute_layers
                                  layers of each run of layers a replica holds), 0 =
                                  uniform (every layer, in chunks of recompute_layers) */
    int recompute_layers;      /* full: N (--recompute-num-layers) */
    /* mixed precision (MODEL.md "Mixed precision"; --bf16, --fp16): the
     * dtype activations, their gradients and the parameters' compute copy
     * are rounded to at the defined points; master weights, gradients and
     * AdamW's state stay fp32 */
    int precision;             /* MODEL_FP32, MODEL_BF16, MODEL_FP16 */
    /* fp16's loss scaling (Megatron's flags): loss_scale > 0 is static; 0
     * is dynamic from initial_loss_scale, halved (not below min_loss_scale)
     * once `hysteresis` steps have overflowed, doubled after
     * loss_scale_window steps without. 0 in the last four: Megatron's
     * defaults (2^32, 1, 1000, 2; model_loss_scaling) */
    float loss_scale, initial_loss_scale, min_loss_scale;
    int loss_scale_window, hysteresis;
    /* NeMo's (Apex DistributedFusedAdam's) dtypes, model properties here so
     * the golden run does the same (I4): grad_dtype, the reduced
     * gradients' (grad_sync_dtype: the exact sum rounded to fp32, then to
     * it); optim_dtype, the master weights' and AdamW state's after every
     * update (dtype). MODEL_FP32 or MODEL_BF16. */
    int grad_dtype, optim_dtype;
} model_config_t;
enum { MODEL_FP32 = 0, MODEL_BF16 = 1, MODEL_FP16 = 2 };
/* "fp32", "bf16", "fp16". */
const char *model_precision_name(int precision);
/* The loss scaling c asks for, its zeros replaced by Megatron's defaults. */
void model_loss_scaling(const model_config_t *c, float *initial, float *min, int *window,
                        int *hysteresis);
enum { MODEL_RECOMPUTE_NONE = 0, MODEL_RECOMPUTE_FULL = 1, MODEL_RECOMPUTE_SELECTIVE = 2 };
enum { MODEL_GPT = 0, MODEL_T5 = 1, MODEL_LLAVA = 2 };
enum { MODEL_OPT_ADAM = 0, MODEL_OPT_ADAMW8BIT = 1 };
/* adamw8bit's blocks: bitsandbytes' 8-bit optimizers use 256; the update
 * keeps one block of m and v in fp32 on the stack, so at most 4096. */
enum { ADAM8_DEFAULT_BLOCK = 256, ADAM8_MAX_BLOCK = 4096 };
/* "adam" or "adamw8bit" (--optimizer, the config's optimizer.name). */
const char *model_optimizer_name(int optimizer);
/* The architecture's name in configs and reports: "gpt", "t5", "llava". */
const char *model_arch_name(int arch);
/* The positions of a sequence whose tokens have a loss: T, or the
 * decoder's T - P. */
static inline int model_loss_positions(const model_config_t *c) {
    return c->seq_length - c->encoder_seq_length;
}

/* Whether layer l of c is a mixture-of-experts layer. */
static inline int model_layer_is_moe(const model_config_t *c, int l) {
    return c->moe_experts > 0 && l % c->moe_layer_freq == 0;
}
enum { MODEL_MAX_EXPERTS = 256 };

/* NULL-terminated list of the built-in model names. */
const char *const *model_builtin_names(void);
/* Fills cfg with a built-in model; -1 (message lists the names) if unknown. */
int model_config_builtin(const char *name, model_config_t *cfg, perr_t *err);
/* Loads a JSON config file: the object the dumps store as their "config"
 * metadata. Fields present override cfg (so start from a built-in, or
 * name one with "base"); unknown keys and wrong types are errors naming
 * the key. Does not validate: call model_config_validate. */
int model_config_load(const char *path, model_config_t *cfg, perr_t *err);
/* The same from JSON text (a dump's "config" metadata); `what` names it
 * in messages. */
int model_config_parse(const char *text, size_t len, const char *what, model_config_t *cfg,
                       perr_t *err);
/* Every constraint of MODEL.md, with a message naming the field. Every
 * size and count is checked in 64 bits before any int product of them is
 * formed: layers <= MODEL_MAX_LAYERS (the parameter table's 4 + 12 x layers
 * entries, built before the memory estimate can price the model), tokens a
 * step (global_batch x seq_length) <= MODEL_MAX_TOKENS, and the products
 * the tile calls take as int (micro_batch x seq_length, vocab x hidden,
 * ffn x hidden). */
#define MODEL_MAX_LAYERS 4096
#define MODEL_MAX_TOKENS ((int64_t)1 << 30)
int model_config_validate(const model_config_t *cfg, perr_t *err);
/* The same, except that micro_batch need only be <= global_batch: what a
 * replica needs (gpt_new_ex sizes its activations for micro_batch
 * sequences). Only the golden schedule, gpt_train_step, cuts the batch
 * into equal microbatches; a layout's may differ by one (pconfig.h), and
 * exact sums make any split give the golden bits. */
int model_config_validate_replica(const model_config_t *cfg, perr_t *err);
/* Megatron's --make-vocab-size-divisible-by N: vocab rounded up to a
 * multiple of n. Unlike Megatron (a multiple of n x tp), the padding does
 * not depend on tensor parallelism (I4): the padded rows are ordinary
 * parameters (logits and gradients; no token targets them). n < 1 is an
 * error naming `what` (the flag or the field). */
int model_pad_vocab(model_config_t *cfg, long long n, const char *what, perr_t *err);
/* The config as one line of JSON (malloc'd; the caller frees). */
char *model_config_json(const model_config_t *cfg);

/* ---- parameters -------------------------------------------------------- */

typedef enum { INIT_NORMAL, INIT_ONES, INIT_ZEROS } param_init_t;

typedef struct {
    char name[96];       /* Megatron-style, e.g. layers.0.mlp.dense_h_to_4h.weight */
    int ndim;            /* 1 .. PL_MAX_DIMS */
    int64_t shape[PL_MAX_DIMS]; /* this replica's block (the global shape is pl.shape);
                                   axes past ndim are 1 */
    size_t numel;        /* of the block */
    placement_t pl;      /* the global tensor and how tensor parallelism cuts it */
    size_t offset;       /* into the contiguous parameter block */
    param_init_t init;
    float init_std;      /* INIT_NORMAL: sigma or sigma/sqrt(2L) */
    int weight_decay;    /* 1 for 2-D weights (AdamW decays them) */
    int held;            /* 0: another pipeline stage holds it (shape 0 x 0, numel 0) */
    unsigned reduce;     /* the grid axes (bit a: axis a) its gradient is reduced over:
                            the token axes (dp, cp) its placement neither cuts nor holds
                            partial sums over (placement_reduce_axes) */
} param_info_t;
/* The token axes (dp, cp) a tensor of placement pl is replicated over:
 * its gradient's reduction group. */
unsigned placement_reduce_axes(const placement_t *pl);
/* The same on a grid of these sizes: an expert-parallel axis longer than
 * 1 splits sequences too (its ranks are data-parallel ones). */
unsigned placement_reduce_axes_at(const placement_t *pl, const int sizes[GRID_NAXES]);
/* Those axes as a layout's group name: "dp-cp" (layout.h). */
void placement_reduce_name(unsigned axes, char *buf, size_t cap);

/* Built from the model's unit list (ref/model/units/unit_kind.h): each unit's
 * tensors, its kind's order, one contiguous run of indices. */
typedef struct {
    int count;
    param_info_t *info;  /* [count] */
    size_t total;        /* elements in all tensors */
    int wte, wpe, lnf_w, lnf_b, out; /* indices; out is -1 when tied */
    int n_units;
    int *unit_first;     /* [n_units + 1]: unit u owns tensors unit_first[u] .. unit_first[u+1]-1 */
    int *shared_unit;    /* [count]: another unit that reads the tensor (the head, of the tied
                            word embedding), or -1 */
} param_table_t;
/* The unit owning tensor i; the tensors [*first, *last) of unit u. */
int  param_unit_of(const param_table_t *t, int i);
void param_unit_range(const param_table_t *t, int u, int *first, int *last);

int  param_table_build(param_table_t *t, const model_config_t *cfg, perr_t *err);
/* The heads of one block of an uneven head split (the column-then-row
 * pairs: qkv rows in blocks of lcm(3D, tile_features), the projection's
 * columns in blocks of lcm(D, tile_features)), or 0 when the two blocks
 * hold different numbers of heads (then heads split evenly only). */
int  param_head_unit(const model_config_t *cfg);
/* The table of tensor-parallel rank `tp_rank` of `tp`: every tensor's
 * block (Megatron's column-, row- and vocabulary-parallel cuts; the rest
 * replicated), offsets into the replica's own contiguous block. tp = 1 is
 * param_table_build. Errors say what must divide what. */
int  param_table_build_tp(param_table_t *t, const model_config_t *cfg, int tp, perr_t *err);
/* Pipeline parallelism: the units a replica holds, as chunks of
 * consecutive units [lo[c], hi[c]) (one chunk per stage, v under
 * interleaving). n = 0: every unit (no pipeline). */
enum { GPT_MAX_CHUNKS = 16 };
typedef struct {
    int n;
    int lo[GPT_MAX_CHUNKS], hi[GPT_MAX_CHUNKS];
} gpt_units_t;
/* Whether u holds unit `unit`. */
int  gpt_units_hold(const gpt_units_t *u, int unit);
/* The table of a replica that holds the units `units` of tensor-parallel
 * rank blocks of tp: the tensors of other units keep their index and
 * name but are empty (held = 0), so every index (wte, unit_first) means
 * the same tensor on every stage. The tied word embedding is held by the
 * stages holding unit 0 or the head. */
int  param_table_build_mp(param_table_t *t, const model_config_t *cfg, int tp,
                          const gpt_units_t *units, unsigned opts, perr_t *err);
/* The same on a whole grid: every placement evaluated at the device's
 * grid sizes and coordinates on every axis (grid.h); the blocks are the
 * device's own. param_table_build_mp is this on a grid of tp alone. */
int  param_table_build_at(param_table_t *t, const model_config_t *cfg,
                          const int sizes[GRID_NAXES], const int coord[GRID_NAXES],
                          const gpt_units_t *units, unsigned opts, perr_t *err);
/* Tensor-parallel options (opts of param_table_build_mp, gpt_local_dims,
 * gpt_mem_bytes_*): sequence parallelism; every linear row-parallel
 * (qkv, dense, fc1, fc2 each split on its reduction dimension, its output
 * an open sum completed across tp; attention and the MLP's GeLU on every
 * rank whole), the patterns file's sharding_dim 0. */
enum { GPT_TP_SP = 1u, GPT_TP_ROW_LINEARS = 2u };
/* Context parallelism in the same options: the degree in the bits from
 * GPT_CP_SHIFT up, and Ulysses (all-to-all) instead of the ring. */
enum { GPT_CP_ULYSSES = 4u, GPT_CP_SHIFT = 17, GPT_CP_MASK = 0x7ff /* cp <= 2047 */ };
/* Expert tensor parallelism (--expert-tensor-parallel-size = tp): each
 * expert's FFN split over the tp group as the dense MLP's is (fc1
 * column-parallel, fc2 row-parallel, whole FFN tiles); without it every
 * tp rank runs whole experts. */
enum { GPT_EXPERT_TP = 8u };
/* Megatron's parallel folding with expert tensor parallelism 1 and
 * ep = tp: the expert-parallel ranks are the tensor-parallel ones. They
 * hold the same tokens (whole sequences, the same routing), so rank q
 * of the tp group runs experts [q E/tp, (q+1) E/tp) on every row and the
 * group all-gathers the outputs: no all-to-all. */
enum { GPT_EXPERT_FOLD_TP = 1u << 16 };
/* Colossal-AI's tensor-parallel mode (pconfig.h's pc_tp_mode_t) in bits
 * GPT_TP_MODE_SHIFT ..+1: its placements (params.c) and the stream's
 * features held (gpt_local_dims). */
enum { GPT_TP_MODE_SHIFT = 28 };
static inline int gpt_opts_tp_mode(unsigned opts) { return (int)(opts >> GPT_TP_MODE_SHIFT & 3u); }
static inline unsigned gpt_cp_opts(int cp, cp_comm_t comm) {
    return ((unsigned)cp << GPT_CP_SHIFT) | (comm == CP_ULYSSES ? GPT_CP_ULYSSES : 0u);
}
static inline int gpt_opts_cp(unsigned opts) {
    const unsigned cp = opts >> GPT_CP_SHIFT & GPT_CP_MASK;
    return cp ? (int)cp : 1;
}
/* Expert parallelism too: its degree in bits GPT_EP_SHIFT .. +11 (0: 1),
 * which sizes the experts' receive buffers (moe.c). */
enum { GPT_EP_SHIFT = 4, GPT_EP_MASK = 0xfff };
static inline int gpt_opts_ep(unsigned opts) {
    const int ep = (int)(opts >> GPT_EP_SHIFT & GPT_EP_MASK);
    return ep ? ep : 1;
}
void param_table_free(param_table_t *t);
/* Index of the tensor named name, or -1. */
int  param_find(const param_table_t *t, const char *name);
/* MODEL.md's initialisation, keyed by (seed, tensor name, GLOBAL flat
 * index): a shard of tensor-parallel rank tp_rank equals the golden
 * slice. */
void params_init(const param_table_t *t, uint64_t seed, float *data);
void params_init_tp(const param_table_t *t, int tp, int tp_rank, uint64_t seed, float *data);
/* The same for the device at (sizes, coord) of a grid (param_table_build_at). */
void params_init_at(const param_table_t *t, const int sizes[GRID_NAXES],
                    const int coord[GRID_NAXES], uint64_t seed, float *data);

/* ---- the model --------------------------------------------------------- */

/* Activations of one layer for one microbatch of n = micro_batch * T tokens,
 * kept for the backward pass. */
typedef struct layer_acts {
    float *ln1_xhat, *ln1_rstd, *ln1_out;  /* [n,C] [n] [n,C] (sequence parallel: [ns,...],
                                              the positions held; ns = n/tp) */
    float *ln1_full;                       /* [n,C] ln1_out of every position (gathered under
                                              sequence parallelism, else ln1_out) */
    float *qkv;                            /* [n,3C] (head, {q,k,v}, d) columns */
    float *att_e, *att_ehat;               /* [b,H,T,T]: e, and e after dropout */
    float *att_z;                          /* [b,H,T] softmax denominators */
    uint8_t *att_keep;                     /* [b,H,T,T] or NULL (p = 0) */
    float *ctx;                            /* [n,C] core attention output */
    float *qkv_h, *ctx_h;                  /* Ulysses: qkv and ctx re-sharded to every
                                              position of heads/cp heads (else qkv, ctx) */
    float *attn_out;                       /* [n,C] dense output, before dropout */
    uint8_t *attn_keep;                    /* [n,C] or NULL */
    float *resid1;                         /* [n,C] x after the attention residual */
    float *ln2_xhat, *ln2_rstd, *ln2_out;  /* [n,C] [n] [n,C] */
    float *ln2_full;                       /* [n,C] as ln1_full */
    float *fc1_out;                        /* [n,F] before GeLU */
    float *gelu_out;                       /* [n,F] */
    float *gelu_grad;                      /* [n,F] GeLU's derivative at fc1_out */
    float *fc2_out;                        /* [n,C] before dropout */
    uint8_t *mlp_keep;                     /* [n,C] or NULL */
    float *out;                            /* [n,C] block output */
    /* an MoE layer's MLP (moe.c; NULL in a dense layer): the router's
     * logits and softmax over every expert, each token's k choices (best
     * first), their weights, whether each is within capacity and its row
     * in the experts' input; the experts' rows (per expert, per sequence,
     * whole token tiles) through fc1, GeLU and fc2; the weighted sum */
    float *moe_logits, *moe_probs;         /* [n,E] */
    int32_t *moe_choice;                   /* [n,k] */
    float *moe_weight;                     /* [n,k] */
    uint8_t *moe_kept;                     /* [n,k] */
    int32_t *moe_row;                      /* [n,k] -1: dropped */
    int32_t *moe_rows_of;                  /* [E+1] expert e's rows: [rows_of[e], rows_of[e+1]) */
    int32_t *moe_ep_rows;                  /* [ep][E+1] every expert-parallel peer's rows_of
                                              (expert parallel; else NULL) */
    /* expert parallel: the rows of this rank's experts from every peer
     * (peer-major, then expert), through fc1, GeLU and fc2 */
    float *moe_ex_x, *moe_ex_fc1, *moe_ex_h, *moe_ex_hgrad, *moe_ex_y; /* [ep*R, C or F] */
    float *moe_x, *moe_fc1, *moe_h, *moe_hgrad, *moe_y; /* [R,C] [R,F] [R,F] [R,F] [R,C] */
    float *moe_out;                        /* [b*T,C] combined, before dropout: every
                                              position of the slot's sequences */
    float *moe_out_held;                   /* [ns,C] its positions held (sequence or context
                                              parallel; else moe_out) */
    float *moe_in;                         /* [b*T,C] the MoE input of every position,
                                              gathered over cp (context parallel; else
                                              ln2_full) */
    /* a decoder layer's cross-attention block: a second attention
     * block's activations (ln1_*: its input, qkv .. resid1), or NULL */
    struct layer_acts *cross;
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
    float *d_logits;                       /* [n,V] */
    float *att_scratch;                    /* attention_scratch_floats() */
    float *row_scratch;                    /* [max(C,V,F) * 2] */
    /* tensor parallelism (tp > 1): open sums the group completes */
    void *open;                            /* acc_storage_bytes(n*C) */
    /* sequence parallelism */
    void *open_local;                      /* acc_storage_bytes(ns*C): a reduce-scatter's share */
    void *ln_part;                         /* 2 x acc_storage_bytes(C): LayerNorm gradients
                                              over the positions held */
    float *sp_buf, *d_tmp3;                /* [n*C] each */
    /* every linear row-parallel: a linear's input columns held
     * [n, max(C,F)/tp], their gradient, and a gather's parts [n, max(C,F)] */
    float *row_in, *row_dx, *row_parts;
    xacc_t *ce_zacc;                       /* [n] open softmax denominators */
    /* context parallelism (attention_cp.c): the ring's key/value blocks
     * [n, 2A] (own, and two being received), the open sums of a block's
     * dK/dV sent to its owner (two in flight) and of this rank's own, of
     * U and dQ [n, A]; dU [n, A] and dZ [n/T.. per head], and rounding
     * room [n, 2A]. Ulysses: the all-to-all's two buffers [n, 3A]. */
    float *cp_kv[3], *cp_du, *cp_dz, *cp_round, *cp_tile;
    int *cp_tiles;                         /* [cp][T/cp/tile]: each rank's global token tiles */
    void **cp_recv;                        /* [cp] the backward's receive requests */
    void *cp_send[2], *cp_own, *cp_open;
    float *ul_send, *ul_recv, *ul_dctx, *ul_dqkv;
    float *ce_tl;                          /* [n] target logits */
    /* mixture of experts' backward (moe.c): the experts' rows' output and
     * hidden gradients [R,C] [R,F], their input gradients [R,C], the
     * router's logit and weight gradients [n,E] [n,k] */
    float *moe_dy, *moe_dh, *moe_dx, *moe_dlogits, *moe_dweight;
    struct moe_claim *moe_claims;          /* [T] one sequence's claims on an expert */
    float *moe_dx_full;                    /* [b*T,C] the MoE input's gradient, every
                                              position (sequence or context parallel) */
    float *moe_dx_router;                  /* [b*T,C] the router's part of it */
    float *moe_dout;                       /* [b*T,C] the output's gradient gathered over cp */
    float *moe_cp_parts;                   /* [b*T,C] an all-gather's parts over cp */
    void *moe_open;                        /* expert tensor parallel: [b*T,C] open sums */
    float *moe_fold;                       /* experts folded onto tp: [R,C] the rows sent */
    float *moe_ex_dy, *moe_ex_dh, *moe_ex_dx; /* expert parallel: [ep*R, C] [ep*R, F] [ep*R, C]
                                              the gradients of the rows this rank's experts ran */
    /* 2-D tensor parallelism (tp2d.c): a SUMMA's open output [n, 3w] and
     * its q open slots (reduce-scatters), the blocks broadcast to it [n, w]
     * [3w, w], a sharded vector's gathered pieces and whole, the
     * sequences' ids and rows over the column [q*n] [q*n, w] (w: the
     * widest column block) */
    void *t2_open, *t2_slots;
    float *t2_a, *t2_b, *t2_vec, *t2_whole, *t2_full;
    int32_t *t2_ids;
    size_t t2_slot;                        /* the elements of one slot */
    layer_acts_t *recompute;               /* full recomputation: one chunk's layers'
                                              activations, shared (recompute_sets) */
    layer_acts_t recompute_core[2];        /* selective: one attention core (att_*) shared by
                                              the self-attention blocks, one by the cross-
                                              attention blocks (a decoder layer runs both
                                              before its views are read) */
    void *block;
} gpt_scratch_t;

/* ---- tensor parallelism -------------------------------------------------
 * Which piece of the model a replica holds (Megatron's 1-D tensor
 * parallelism) and the group it completes its sums with. The golden run
 * is gpt_shard_none(): the whole model, no group. */
typedef struct {
    int tp, tp_rank;
    int sp;                 /* sequence parallel: LayerNorm, dropout and residual regions
                               hold positions tp_rank*T/tp .. of every sequence */
    group_t *tp_group;      /* NULL when tp == 1 */
    unsigned broken;        /* GPT_BROKEN_*: deliberately broken variants (checker controls) */
    gpt_units_t units;      /* pipeline parallelism: the units held (n = 0: all) */
    int row_linears;        /* every linear row-parallel (GPT_TP_ROW_LINEARS) */
    int cp, cp_rank;        /* context parallelism: the positions held (cp.h) */
    cp_comm_t cp_comm;      /* ring (p2p) or Ulysses (all-to-all) */
    group_t *cp_group;      /* NULL when cp == 1 */
    int ep, ep_rank;        /* expert parallelism: this rank runs experts
                               [ep_rank*E/ep, (ep_rank+1)*E/ep) for its ep group's tokens */
    group_t *ep_group;      /* NULL when ep == 1 */
    int expert_tp;          /* experts' FFN split over tp_group (GPT_EXPERT_TP) */
    int expert_fold;        /* experts split over tp_group (GPT_EXPERT_FOLD_TP) */
    /* Colossal-AI's 2-D and 2.5-D tensor parallelism (tp2d.c; pconfig.h's
     * tp_mode): tp x tp devices per depth layer, tp_rank the column and
     * tp_group the row (ranks with the same sequences, every column);
     * tp_row the row and tp_col_group the column; the sequences' block is
     * tp_dep * tp + tp_row of tp * tp_depth. tp_mode 0: Megatron's 1-D. */
    int tp_mode, tp_row, tp_depth, tp_dep;
    group_t *tp_col_group;
    /* 3-D (tp3d.c): tp_row and tp_dep are the tp2 and tp3 coordinates,
     * tp_dep_group the tp3 axis's group, tp_vec_group the stream's
     * sequence blocks (tp2-tp3) and the inner layout's (tp-tp3) */
    group_t *tp_dep_group, *tp_vec_group[2];
    int on_grid;            /* 1: grid_sizes/grid_coord are the device's place on the run's
                               grid, and its parameter table and init evaluate every
                               placement there (param_table_build_at); 0: a grid of tp alone */
    int grid_sizes[GRID_NAXES], grid_coord[GRID_NAXES];
} gpt_shard_t;
/* Modelled on real bugs: plain fp32 sums in the row-parallel all-reduce
 * (the order-dependent reduction of Megatron-LM issue 1736 and its kin);
 * a vocabulary padded to a multiple of 128 x tp whose padded columns
 * enter the softmax (Megatron-LM issue 1754: the padding depends on tp). */
enum { GPT_BROKEN_TP_FP32_SUMS = 1u, GPT_BROKEN_TP_VOCAB_PAD = 2u };
/* Modelled on flash-attention-style ring kernels: the ring merges each
 * arriving block's partial softmax with online rescaling in arrival
 * order (fp32 running max, sum and output), which is not layout-free. */
enum { GPT_BROKEN_CP_ONLINE_SOFTMAX = 4u };
/* A checker control, not a model of one bug: tensor-parallel rank 1
 * flips the lowest bit of the first element of the last layer's input
 * gradient, as a rank with a stale or half-reduced backward buffer would;
 * the checker must name that unit's grad_input, not a later parameter. */
enum { GPT_BROKEN_TP_INPUT_GRAD = 8u };
/* MoE routing bugs (moe.c), each modelled on a real one:
 * LOCAL_CAPACITY: capacity and dropping over the tokens a rank holds
 *   (Megatron's get_capacity on local tokens), not per sequence;
 * TIE_ORDER: equal router scores and equal weights in the capacity
 *   selection go to the higher expert and the later token (a top-k whose
 *   tie order is the device's, as torch.topk's is unspecified);
 * AUX_LOCAL: the load-balancing loss over the rank's tokens, scaled by
 *   their count (Megatron PR 5047's kind), not per sequence. */
/* EDP_SCALE: expert weight gradients multiplied by the expert-parallel
 *   degree on their owners (DeepSpeed PR 5259: EP=2 gave 2x gradients);
 * ROUTER_TP: under sequence parallelism each tp rank adds the router
 *   weight gradient of its own positions only and nothing completes it
 *   over tp (torchtitan PR 2416: the router lost its Partial placement). */
enum {
    GPT_BROKEN_MOE_LOCAL_CAPACITY = 16u,
    GPT_BROKEN_MOE_TIE_ORDER = 32u,
    GPT_BROKEN_MOE_AUX_LOCAL = 64u,
    GPT_BROKEN_MOE_EDP_SCALE = 128u,
    GPT_BROKEN_MOE_ROUTER_TP = 256u,
    /* NORM_TP: the gradient norm keeps an expert tensor only on tp rank 0,
     * the filter for tp-duplicated tensors (Megatron-LM PR 5916: the norm
     * filter used the tp rank, not the expert-tp rank): with the experts
     * folded onto tp, the other tp ranks' experts drop out of the norm */
    GPT_BROKEN_MOE_NORM_TP = 512u
};
/* 2-D tensor parallelism (tp2d.c), each modelled on Colossal-AI's layers:
 * LN_FP32: LayerNorm's statistics as fp32 partial sums all-reduced over
 *   the row (LayerNorm2D's all_reduce of each rank's sum);
 * SUMMA_ROUNDED: SUMMA rounds each step's product to fp32 and adds it to
 *   the output step by step (Matmul_AB_2D's C += A.B). */
enum { GPT_BROKEN_TP2D_LN_FP32 = 1024u, GPT_BROKEN_TP2D_SUMMA_ROUNDED = 2048u };
/* 3-D (tp3d.c): NO_SWAP: the second linear of a pair keeps the first's
 * input and output groups (Colossal's 3-D layers swap them after every
 * linear). */
enum { GPT_BROKEN_TP3D_NO_SWAP = 4096u };
static inline gpt_shard_t gpt_shard_none(void) {
    return (gpt_shard_t){.tp = 1, .cp = 1};
}

/* 2-D tensor parallelism: at most this many rows and columns; the
 * block tables' kinds (gpt_local_t.t2w). */
enum { GPT_TP2D_MAX_Q = 32 };
enum { TP2D_HIDDEN, TP2D_HEADS, TP2D_FFN, TP2D_VOCAB };
/* A replica's extents of the tensor-parallel axes. */
typedef struct {
    int heads, head0;       /* attention heads held, and the first one's global index */
    int attn;               /* heads * D: core attention width held */
    int ffn, ffn0;          /* FFN columns held, and the first one */
    int vocab, vocab0;      /* vocabulary rows held, and the first one */
    int seq_parts, seq_part; /* sequence parallelism: positions seq_part*T/seq_parts ..
                               of every sequence in the sharded regions (1, 0: all) */
    int row_linears;        /* every linear row-parallel: heads, attn, ffn are whole, and */
    int cin, cin0;          /* the hidden features this rank contracts (qkv, dense, fc1) */
    int fin, fin0;          /* the FFN features it contracts (fc2); 0 without row_linears */
    /* context parallelism: every token tensor of a slot holds seq_held
     * positions of each sequence, the runs `runs` in order (cp.h; T and
     * [0, T) without it); Ulysses attends heads/cp of the heads held over
     * every position, from head att_head0 */
    int cp, cp_rank, ulysses;
    int ep;                 /* expert-parallel degree (its rank: gpt_shard_t.ep_rank) */
    int expert_ffn, expert_ffn0; /* the experts' FFN columns held: the dense MLP's under
                                    expert tensor parallelism (GPT_EXPERT_TP), else all */
    int expert_fold;        /* experts split over the tp ranks (GPT_EXPERT_FOLD_TP) */
    int seq_held;
    cp_runs_t runs;
    int att_heads, att_head0;
    /* the residual stream's features held: all (hid = hidden), or 2-D's
     * column block [hid0, hid0 + hid) */
    int hid, hid0;
    /* 2-D (tp2d.c): q = tp, each column k's block widths of the hidden
     * features, the attention features (whole heads), the FFN and the
     * vocabulary (t2w[TP2D_*][k], offsets t2o), and the word embedding's
     * rows this rank holds (its row's vocabulary block) */
    int recompute;          /* the replica config's MODEL_RECOMPUTE_* */
    int t2q;
    int t2blocks;           /* the blocks a microbatch's sequences are cut into that a slot is
                               sized for: 2-D q (2.5-D q too: an upper bound), 3-D q^2; else 1 */
    int t2w[4][GPT_TP2D_MAX_Q], t2o[4][GPT_TP2D_MAX_Q];
    int emb_vocab, emb_vocab0;
} gpt_local_t;

/* One replica's block of a batch-shaped checkpoint: n_seq sequences at
 * index first_seq of the global batch, each a tensor of global shape
 * `shape` [ndim] of which this replica holds the block lo[d] ..
 * lo[d]+ext[d]-1 along every axis (the whole tensor unless tensor
 * parallelism cuts it: qkv, core attention and FFN columns, logits,
 * attention masks by head). data is [n_seq][ext...] row-major. Blocks of
 * several replicas that overlap must be equal: the collectors compare
 * them. */
typedef struct {
    const char *name;
    st_dtype_t dtype;
    const void *data;
    int first_seq, n_seq;
    int ndim;
    int64_t shape[3], lo[3], ext[3];
} gpt_view_t;

/* A step's routing statistics (moe.c), over the sequences this replica
 * ran: per MoE layer and expert, the tokens routed to it (before
 * capacity) and dropped by it; the auxiliary losses' sums (their
 * values: moe_loss_values). */
typedef struct {
    int64_t *routed, *dropped; /* [L][E] (rows of dense layers stay 0), or NULL */
    xacc_t aux, z;             /* exact sums: over sequences of sum_e P_e f_e (P_e the
                                  sequence's summed probabilities, f_e its routed
                                  count); over tokens of logsumexp^2 */
} gpt_moe_stats_t;

/* Watches a step, for dumps and checkers. Both hooks may be NULL. */
typedef struct gpt gpt_t;

/* fp16's loss scaler (model.h's config fields; Megatron's
 * DynamicGradScaler): the scale the loss gradient is multiplied by, the
 * clean steps since it last grew, the overflowing steps it still
 * tolerates before it shrinks, and the steps skipped so far. Every rank
 * updates its copy from the same global gradient norm, so all agree. */
typedef struct {
    float scale;
    int growth, hysteresis_left;
    int64_t skipped;
} loss_scaler_t;
void loss_scaler_init(loss_scaler_t *s, const model_config_t *c);
/* After a step's gradients are rounded, unscaled and their global norm
 * known: found_inf = the norm is not finite. Returns 1 when the step must
 * be skipped (fp16 only: no update, the learning rate's schedule does not
 * advance), and moves the scale. */
int  loss_scaler_step(loss_scaler_t *s, const model_config_t *c, int found_inf);
/* fp16: grads[0..n) *= 1 / scale (exact for a power of two); else nothing. */
void loss_scaler_unscale(const loss_scaler_t *s, const model_config_t *c, float *grads, size_t n);
typedef struct {
    void *ctx;
    /* A batch-shaped tensor of one microbatch, as a shard (gpt_view_t).
     * Names: "input_ids", "labels", "logits", "act.<checkpoint>",
     * "mask.<site>" (MODEL.md, train dump format). */
    void (*batch_tensor)(void *ctx, const gpt_view_t *v);
    /* After gpt_step_round_grads: g->grads holds the rounded gradients,
     * before clipping. */
    void (*grads_ready)(void *ctx, const gpt_t *g);
    /* Around each unit's forward and backward within gpt_microbatch:
     * unit 0 is the embedding (word and position embeddings), units
     * 1..L the layers, unit L+1 the head (final LayerNorm and LM head,
     * whose weight is the word embedding when tied). After GPT_BWD_END
     * the unit's gradient contributions of this microbatch are all in
     * g->grad_acc. Parallel modes use it to gather sharded parameters
     * just in time (ZeRO-3) and to reduce finished gradient buckets while
     * the backward pass goes on. */
    void (*unit)(void *ctx, gpt_t *g, int unit, int event);
} gpt_observer_t;

enum { GPT_FWD_BEGIN, GPT_FWD_END, GPT_BWD_BEGIN, GPT_BWD_END };

struct gpt {
    model_config_t cfg;
    gpt_shard_t shard;
    gpt_local_t local;
    param_table_t table;
    float *params;       /* [total], or NULL when a parallel mode owns them: the
                            master weights (fp32) */
    float *params_lp;    /* mixed precision: [total] their compute copy, rounded to the
                            model's dtype (gpt_params_refresh); else NULL */
    float **param_ptr;   /* [count] where each tensor's values are read: params (or
                            params_lp) + offset, or a gathered shard (ZeRO-3) */
    float *grads;        /* [total] rounded gradients of the last step */
    acc_t *grad_acc;     /* [count] open exact gradient sums */
    float *adam_m, *adam_v; /* [total] fp32 AdamW state (NULL under adamw8bit) */
    uint8_t *adam8_m, *adam8_v; /* adamw8bit: [total] the codes of m and v */
    float *adam8_am, *adam8_av; /* adamw8bit: [adam8_table_blocks] each block's absmax */
    int adam_t;          /* AdamW steps taken */
    loss_scaler_t scaler; /* fp16's loss scale (inert otherwise) */
    sacc_t loss_acc;     /* sum of token losses of this step */
    gpt_moe_stats_t moe; /* routing statistics of this step (MoE layers) */
    gpt_slot_t *slot;    /* [n_slots] activation slots */
    int n_slots;
    gpt_scratch_t scratch;
    contract_ws_t ws;
    struct arena *arena; /* where the replica's memory came from, or NULL */
    void **acc_storage;  /* [count] the memory behind grad_acc (NULL: in acc_pool) */
    void *acc_pool;      /* GPT_UNIT_OPEN_SUMS / GPT_GRADS_IN_SUMS: every tensor's open
                            sums (and the latter's grads), or NULL */
    unsigned sums_mode;  /* GPT_UNIT_OPEN_SUMS, GPT_GRADS_IN_SUMS or 0 */
};

/* Whether this replica's token losses are the copy a global loss sum
 * counts: tp rank 0's of a tensor-parallel group (its ranks share the
 * loss), 3-D's tp2 coordinate 0 (its logits' vocabulary is cut over tp2). */
static inline int gpt_counts_loss(const gpt_t *g) {
    return g->shard.tp_mode == 3 ? g->shard.tp_row == 0 : g->shard.tp_rank == 0;
}

/* Allocates everything for cfg (validated first) and initialises the
 * parameters (params_init) and the optimizer state (zeros). */
int  gpt_new(gpt_t **out, const model_config_t *cfg, perr_t *err);

/* What a replica leaves out (a sharded parallel mode keeps its own
 * shards instead; GPT_NO_INIT: parameters allocated, the caller fills
 * them) and where its memory comes from. */
enum { GPT_NO_PARAMS = 1, GPT_NO_GRADS = 2, GPT_NO_OPTIMIZER = 4, GPT_NO_INIT = 8 };
/* GPT_UNIT_OPEN_SUMS: open gradient sums only where a reduction is open
 * (DESIGN.md), for a step of ONE microbatch whose gradients need no
 * reduction after the backward (one device, or a group of one). A
 * tensor's sums are open from the first backward that adds to it until
 * the backward of the last unit that adds to it, which rounds them into
 * g->grads (gpt_unit_backward) before the next unit's backward begins.
 * Tensors one unit writes take turns over one pool sized for the largest
 * unit's; a tensor two units write (the tied word embedding: head and
 * embedding) keeps its own. Same bits: an exact sum rounds the same
 * whenever it is rounded; gpt_step_round_grads then only takes the norm.
 * Needs the gradients (not with GPT_NO_GRADS). */
enum { GPT_UNIT_OPEN_SUMS = 16 };
/* GPT_GRADS_IN_SUMS: for steps of several microbatches, where every sum
 * stays open until the step's end (gpt_step_round_grads rounds them all,
 * no reduction follows): the rounded gradients live in the first half of
 * the open sums' memory, one block [total] of fp64 whose tensor i starts
 * at element offset_i, so gradient and open sum cost 8 bytes a parameter
 * instead of 12. Rounding walks the tensors in offset order, a chunk at a
 * time through a small buffer, so it only overwrites sums already read.
 * g->grads is valid from gpt_step_round_grads to the next step's first
 * backward. Needs the gradients. */
enum { GPT_GRADS_IN_SUMS = 32 };
/* What gpt_new asks for cfg: GPT_UNIT_OPEN_SUMS when a step is one
 * microbatch, else GPT_GRADS_IN_SUMS (every sum stays open across the
 * microbatches: that is the reduction then open). The golden estimate
 * uses the same. */
unsigned gpt_golden_flags(const model_config_t *cfg);
/* Inside gpt_unit_backward: with GPT_UNIT_OPEN_SUMS, rounds the gradients
 * whose last unit is `unit`; else nothing. */
void gpt_round_unit_grads(gpt_t *g, int unit);
struct arena;
/* As gpt_new, with memory from `arena` (NULL: malloc) in the categories
 * params, grads (rounded gradients and the open exact sums), optimizer
 * and activations, so the device's memory report shows the model; an
 * arena too small is an error carrying the arena's report. A replica's
 * cfg->micro_batch need only be <= the batch (model_config_validate_replica). */
int  gpt_new_ex(gpt_t **out, const model_config_t *cfg, unsigned omit, struct arena *arena,
                perr_t *err);
/* As gpt_new_ex, for one tensor-parallel piece: its parameter blocks,
 * activations and the open-sum buffers its collectives need. */
int  gpt_new_tp(gpt_t **out, const model_config_t *cfg, const gpt_shard_t *shard, unsigned omit,
                struct arena *arena, perr_t *err);
/* The tensor-parallel extents of rank tp_rank of tp, and the positions
 * context-parallel rank cp_rank holds (opts' cp; the error says what must
 * divide what under sequence or context parallelism; param_table_build_tp
 * checks the cuts of heads, feature, FFN and vocabulary tiles). */
int  gpt_local_dims(const model_config_t *cfg, int tp, int tp_rank, int cp_rank, unsigned opts,
                    gpt_local_t *out, perr_t *err);
/* The bytes gpt_new_ex(cfg, omit) takes from its arena, by category, as the
 * arena counts them (grads: rounded gradients; open_sums: the open exact
 * sums, also in the arena's grads category), computed from the tables the
 * allocation uses without allocating them: a memory estimate before a run
 * (memest.h). Outside the arena a replica also mallocs its contraction
 * workspace (contract.h, under a megabyte) and small bookkeeping. */
typedef struct {
    size_t params, grads, open_sums, optimizer, activations;
} gpt_mem_t;
int  gpt_mem_bytes(const model_config_t *cfg, unsigned omit, gpt_mem_t *out, perr_t *err);
/* Full activation recomputation (cfg->recompute, units.c): layer unit u of
 * a replica holding `units` is recomputed in the chunk [*first, *last]
 * (uniform: chunks of recompute_layers from the first layer of each run
 * of layers the replica holds; block: the run's first recompute_layers
 * layers, each alone); the chunk's last keeps its output in the slot, the
 * others nothing. 1, or 0 when u keeps its activations. */
int  gpt_recompute_chunk(const model_config_t *cfg, const gpt_units_t *units, int u, int *first,
                         int *last);
/* Recomputation's repeats in one backward of a replica holding `units`,
 * for the communication formulas (tp and cp reports, plan_comm): returns
 * the layers whose whole forward runs again, collectives included (full:
 * those gpt_recompute_chunk puts in a chunk, the block method's first
 * recompute_layers of each run of layers only). When not NULL, *held:
 * the layers held (units that take and give the residual stream); *cores:
 * those whose attention core runs again (full: the recomputed ones;
 * selective: every layer held). */
int  gpt_recomputed_layers(const model_config_t *cfg, const gpt_units_t *units, int *held,
                           int *cores);
/* The same for one rank of tensor parallelism over tp ranks (sp: with
 * sequence parallelism). */
int  gpt_mem_bytes_tp(const model_config_t *cfg, int tp, unsigned opts, unsigned omit,
                      gpt_mem_t *out, perr_t *err);
/* The same for a replica holding `units` (pipeline parallelism) with
 * n_slots activation slots of its largest chunk (0: one slot of every
 * unit held, as gpt_new_tp makes). */
int  gpt_mem_bytes_mp(const model_config_t *cfg, int tp, unsigned opts, const gpt_units_t *units,
                      int n_slots, unsigned omit, gpt_mem_t *out, perr_t *err);
void gpt_free(gpt_t *g);

/* Activation slots: n >= 1 (gpt_new makes one). Existing slots' contents
 * are lost. Memory as gpt_new_ex's activations. */
int   gpt_set_slots(gpt_t *g, int n, perr_t *err);
/* Pipeline stages: n slots, each able to hold any one chunk of the units
 * held (sized for the largest), laid out for chunk 0. */
int   gpt_set_stage_slots(gpt_t *g, int n, perr_t *err);
/* Lays slot s out for chunk c: that chunk's activations and the buffer
 * its input arrives in. Whatever the slot held is dropped; a no-op when
 * it already holds chunk c. */
void  gpt_slot_use_chunk(gpt_t *g, int s, int c);

void  gpt_step_begin(gpt_t *g);

/* ---- units --------------------------------------------------------------
 * The model is a list of units, each a forward/backward pair over one
 * activation slot: unit 0 the embedding, units 1..L the layers, unit L+1
 * the head (final LayerNorm, LM head, loss). A unit's forward reads the
 * previous unit's output from the slot and its backward reads and writes
 * the slot's residual-stream gradient, so a schedule may interleave
 * units of different microbatches (different slots) freely. */
int   model_num_units(const model_config_t *cfg);
static inline int gpt_num_units(const gpt_t *g) { return model_num_units(&g->cfg); }
/* Loads n_seq sequences (n_seq <= micro_batch) at index first_seq of step
 * `step`'s global batch into slot s. inputs/targets are [n_seq, T]. */
void  gpt_slot_begin(gpt_t *g, int s, const int32_t *inputs, const int32_t *targets, int n_seq,
                     int first_seq, int64_t step, const gpt_observer_t *obs);
/* The unit's forward (gpt_unit_forward_pure) between the observer's
 * GPT_FWD_BEGIN and GPT_FWD_END, then gpt_unit_after_forward. */
void  gpt_unit_forward(gpt_t *g, int unit, int s, const gpt_observer_t *obs);
/* The forward alone, pure: reads the parameters and the slot's input,
 * writes the slot's activations (and the shared scratch); adds to no
 * loss, calls no observer, counts nothing. Running it again gives the
 * same bits (recomputation). */
void  gpt_unit_forward_pure(gpt_t *g, int unit, int s);
/* What happens once per forward: the head's token losses into the loss
 * sum, then the unit's checkpoints to the observer (gpt_report_unit). */
void  gpt_unit_after_forward(gpt_t *g, int unit, int s, const gpt_observer_t *obs);
/* Parameter gradients go into g->grad_acc, left open. */
void  gpt_unit_backward(gpt_t *g, int unit, int s, const gpt_observer_t *obs);
/* The golden schedule of one microbatch, in slot 0: gpt_slot_begin, every
 * unit forward, every unit backward. Gradients and the loss sum stay open. */
void  gpt_microbatch(gpt_t *g, const int32_t *inputs, const int32_t *targets, int n_seq,
                     int first_seq, int64_t step, const gpt_observer_t *obs);
/* Reports the checkpoints a unit's forward pass left in slot s to the
 * observer's batch_tensor hook (called by gpt_unit_forward). */
void  gpt_report_unit(const gpt_t *g, int unit, int s, const gpt_observer_t *obs);
/* Reports the gradient with respect to a unit's input (units 1..L+1),
 * which its backward pass left in slot s's d_resid, as
 * "grad_input.layers.<l>" or "grad_input.head" (called by
 * gpt_unit_backward). */
void  gpt_report_input_grad(const gpt_t *g, int unit, int s, const gpt_observer_t *obs);
/* The checkpoints of the unit kinds, without a config (the checker):
 * the forward position of a batch tensor's name ("act.layers.3.output",
 * "mask.dropout.embedding", "logits"): *unit orders the units (kind
 * order, then index), *order the checkpoint within its unit; -1 when no
 * kind has it. The backward position of a parameter's name or of a
 * unit's input gradient ("layers.3.mlp.dense_4h_to_h.bias",
 * "grad_input.layers.3", "grad_input.head"): the last unit's is 0, units
 * before it higher; 0 when no kind has it. */
int   gpt_checkpoint_position(const char *name, long *unit, long *order);
long  gpt_backward_position(const char *name);
/* A parameter's place in its unit kind's table ("layers.3.mlp.dense_4h_to_h.bias":
 * 11), the forward order its unit uses it in; the backward produces the
 * gradients roughly in reverse. -1 when no kind has it. */
int   gpt_param_position(const char *name);
/* The bytes of one sequence's batch tensors a dump collects: input ids,
 * labels, every unit's checkpoints present under cfg (dropout masks only
 * with dropout) and every unit's input gradient. */
size_t gpt_batch_bytes_per_seq(const model_config_t *cfg);
/* What a schedule or a report asks of unit u instead of its index:
 * whether it reads the residual stream of the unit before it (else it
 * starts the chain: the embedding), whether it leaves one for the unit
 * after it (else it ends the chain: the head, which turns it into the
 * loss). */
int   model_unit_takes_stream(const model_config_t *cfg, int u);
int   model_unit_gives_stream(const model_config_t *cfg, int u);
/* The unit whose forward reports the batch tensor `name` (a checkpoint:
 * "act.layers.3.output", "logits") or whose backward reports it (an
 * input gradient: "grad_input.head"); -1: no unit's ("input_ids"). */
int   model_batch_unit(const model_config_t *cfg, const char *name);
/* A unit's name in reports, from its kind: "the embedding", "layer 3",
 * "the head" ("the" for a kind whose prefix has no index). */
void  model_unit_name(const model_config_t *cfg, int u, char *buf, size_t cap);
/* What writes a checkpoint last under a layout (the checker's report of
 * the first divergence): its unit's own compute or a mode's collective. */
typedef enum {
    CKPT_COMPUTE = 0,
    CKPT_TP_ROW,             /* a row-parallel linear's output: tp completes its open sums */
    CKPT_TP_ROW_LINEARS,     /* the same, only with every linear row-parallel */
    CKPT_TP_VOCAB_EMBEDDING, /* the vocabulary-parallel embedding: tp sums the rows held */
    CKPT_TP_VOCAB_HEAD,      /* the vocabulary-parallel LM head and its softmax reductions */
    CKPT_CP_ATTENTION,       /* context parallelism's exchange around the core attention */
} ckpt_writer_t;
/* The checkpoint named name ("act.layers.3.mlp.dense_4h_to_h.output"):
 * its name within its unit ("mlp.dense_4h_to_h.output") and what writes
 * it; -1 when no kind has it. */
int   gpt_checkpoint_writer(const char *name, const char **suffix, ckpt_writer_t *writer);
/* The residual stream entering unit u (one that takes a stream) in slot
 * s: the previous unit's output, where a pipeline chunk starting at u
 * receives its input and a chunk ending before u sends its output. */
float *gpt_slot_stream(gpt_t *g, int s, int u);
/* The loss from the rounded exact sum of every token loss of the step:
 * divided once by the global token count B*T (I4). */
float mean_token_loss(const model_config_t *cfg, float loss_sum);
/* round(sum of every token loss of the step) / (B*T). */
float gpt_step_loss(const gpt_t *g);
/* The step's auxiliary MoE losses as they enter the objective (moe.c):
 * load balancing a*E/(k*T^2*B) * sum_s sum_e P_se f_se and the z-loss
 * z/(B*T) * sum_t lse_t^2, each from its exact sum (0 without MoE). */
void  moe_loss_values(const model_config_t *c, const gpt_moe_stats_t *st, double *aux,
                      double *zloss);
/* Prints a step's routing statistics, one line per MoE layer (tokens
 * routed to each expert before capacity, tokens dropped) and the
 * auxiliary losses; nothing for a dense model. gpt_moe_print_step: the
 * golden run's (g->moe); a layout's come summed over its devices
 * (engine_run_t.moe_steps). */
void  moe_print_stats(const model_config_t *c, const gpt_moe_stats_t *st, FILE *f);
static inline void gpt_moe_print_step(const gpt_t *g, FILE *f) { moe_print_stats(&g->cfg, &g->moe, f); }
/* Rounds every gradient once into g->grads; returns the global norm
 * pm_sqrtf(round(sum g*g)) before clipping. */
float gpt_step_round_grads(gpt_t *g);
/* That norm of whatever g->grads holds now: pm_sqrtf(round(exact sum of
 * g*g)) over every tensor (a teacher-forced step's, of the backend's
 * gradients, forced.h). */
float gpt_grad_norm(const gpt_t *g);
/* MODEL.md's clipping: every gradient is multiplied by this factor
 * (exactly 1.0f, and no multiply, when the norm is within clip_grad). */
float clip_factor(const model_config_t *cfg, float grad_norm);
/* Global-norm clipping with grad_norm, then one AdamW step at lr. */
void  gpt_step_update(gpt_t *g, float lr, float grad_norm);

/* Global sample s of the model's task, inputs/targets [T] (corpus.h):
 * the GPT's next byte of the corpus; an encoder-decoder's (arch t5)
 * source x = P bytes of the corpus in the source rows, and in the target
 * rows the source reversed, y_t = x[P-1 - t mod P], teacher-forced:
 * inputs [x, BOS, y_0 .. y_{T-P-2}], targets [0 (no loss) x P, y].
 * LLaVA: the text rows are the GPT's sample of T - P bytes; image row p
 * holds the byte its patch shows, text input p mod (T - P) (the picture,
 * llava_picture), target 0 (no loss). */
struct corpus;
enum { MODEL_BOS = 2 }; /* the decoder's first input: STX, a byte no text holds */
/* LLaVA's synthetic images: the patch_dim values of the picture of byte
 * b, normal(0, 1) from the seed, stream "llava.pictures", counter
 * b * patch_dim + i. */
void llava_picture(const model_config_t *c, int32_t b, float *out);
void model_sample(const model_config_t *c, const struct corpus *data, uint64_t s,
                  int32_t *inputs, int32_t *targets);

/* Data (corpus.h) + the phases above, for step `step` (0-based). */
typedef struct {
    float loss, lr, grad_norm;
    double seconds; /* layouts: the step's wall time, barrier to barrier */
    float loss_scale; /* fp16: the scale this step's backward used (else 0) */
    int skipped;      /* fp16: the step overflowed and made no update */
} gpt_step_stats_t;
/* Mixed precision: params_lp := params rounded to the model's dtype (a
 * replica's whole block; nothing without a compute copy). After anything
 * writes the master weights: initialisation, an update, a checkpoint. */
void gpt_params_refresh(gpt_t *g);
/* A gathered block of master weights (ZeRO-3) rounded in place to the
 * model's dtype: the compute copy a unit runs with. */
void gpt_round_params(const model_config_t *c, float *p, size_t n);
/* x[0..n) rounded in place to a MODEL_FP32/BF16/FP16 dtype (fp32: nothing). */
void model_round_to(int dtype, float *x, size_t n);
/* After an update of n elements: the master weights and AdamW's state
 * rounded to c->optim_dtype (NeMo's dtype; fp32: nothing). */
void gpt_round_optim_state(const model_config_t *c, float *p, float *m, float *v, size_t n);
/* The reduced gradients grads[0..n) made what the optimizer reads: rounded
 * to c->grad_dtype, then unscaled by the fp16 loss scale. */
void gpt_finish_grads(const loss_scaler_t *s, const model_config_t *c, float *grads, size_t n);
/* gpt_step_begin, then every microbatch of step `step`'s global batch
 * (data: corpus.h) through gpt_microbatch in slot 0: the golden step up
 * to its open gradient sums and loss sum (gpt_train_step's first half). */
void gpt_step_microbatches(gpt_t *g, const struct corpus *data, int64_t step,
                           const gpt_observer_t *obs);
void gpt_train_step(gpt_t *g, const struct corpus *data, int64_t step,
                    const gpt_observer_t *obs, gpt_step_stats_t *stats);

/* ---- optimizer --------------------------------------------------------- */

/* MODEL.md's learning rate for 0-based step s (fp32, pm_cosf). */
float lr_schedule(const model_config_t *cfg, int64_t s);
/* pm_sqrtf's bits (IEEE sqrt is correctly rounded) from the hardware
 * instruction, for AdamW's per-element root. */
float adamw_sqrtf(float x);
/* One AdamW update of n elements (step t counted from 1). */
void  adamw_update(float *p, const float *g, float *m, float *v, size_t n, int t, float lr,
                   float beta1, float beta2, float eps, float weight_decay);

/* ---- adamw8bit (adamw8bit.c, MODEL.md "8-bit AdamW") -------------------
 * m and v are stored as one byte a value, a code into a 256-entry dynamic
 * quantization map, times their block's absmax (fp32): blocks of
 * cfg->optimizer_block elements of each tensor's global flattened index.
 * A step dequantizes a block, runs adamw_update's arithmetic in fp32 on
 * it, and requantizes: absmax = max |x| over the block (exact, order-
 * free), code = the map entry nearest x / absmax (ties to the lower
 * entry), both exact IEEE operations. A layout that holds whole blocks
 * therefore computes the golden bits. Code 0 is 0 in both maps, so zeroed
 * memory is the initial state (m = v = 0, absmax 0). */
/* value of code c, c = 0..255: m's signed map (bitsandbytes' signed
 * dynamic map, its smallest negative entry replaced by -1) or v's
 * unsigned one; built once from exact rationals, correctly rounded. */
const float *adam8_map(int is_signed);
/* The code whose value is nearest x, ties to the lower value. */
uint8_t adam8_quantize(float x, int is_signed);
static inline size_t adam8_nblocks(size_t n, int block) {
    return (n + (size_t)block - 1) / (size_t)block;
}
/* The absmax entries of a table's state: its tensors' blocks, each
 * tensor's from its first element (a block never spans two tensors). */
size_t adam8_table_blocks(const param_table_t *t, int block);
/* values[i] = map[codes[i]] * absmax[i / block] for i < n. */
void  adam8_dequantize(const uint8_t *codes, const float *absmax, size_t n, int block, int is_signed,
                       float *values);
/* The state whose dequantization is exactly `values` (a checkpoint holds
 * dequantized moments: with -1 and 1 in the maps, a block's absmax is its
 * largest |value|, so they are the whole state). -1 when some value is
 * no code times its block's absmax (*bad: its index): not a state. */
int   adam8_from_values(const float *values, size_t n, int block, int is_signed, uint8_t *codes,
                        float *absmax, size_t *bad);
/* adamw_update on n elements whose state starts at a block boundary:
 * codes mq, vq [n], absmax ma, va [adam8_nblocks(n, block)]. */
void  adamw8bit_update(float *p, const float *g, uint8_t *mq, float *ma, uint8_t *vq, float *va,
                       size_t n, int block, int t, float lr, float beta1, float beta2, float eps,
                       float weight_decay);
/* Whether a layout's blocks of table t (a device's, at grid sizes and
 * coord) are whole quantization blocks of cfg: every run of the device's
 * block of a tensor that is contiguous in the global flattened tensor
 * must start at a multiple of optimizer_block and end at one or at the
 * tensor's end. The message names the tensor, the cut and the block size. */
int   adam8_check_blocks(const param_table_t *t, const model_config_t *cfg,
                         const int sizes[GRID_NAXES], const int coord[GRID_NAXES], perr_t *err);
/* A replica's AdamW state as fp32 values [total], which = 0: m, 1: v:
 * its own vector (fp32 AdamW) or, under adamw8bit, the dequantized state
 * in *buf (malloc'd here, the caller frees it; NULL when out of memory).
 * NULL without optimizer state. */
const float *gpt_adam_values(const gpt_t *g, int which, float **buf);
/* The reverse: the state from fp32 values (a checkpoint's, which
 * ckpt_load checked are 8-bit states under adamw8bit). */
void  gpt_adam_set_values(gpt_t *g, int which, const float *values);

#endif
