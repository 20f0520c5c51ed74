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
    int moe_router_dtype;      /* the router's dtype under mixed precision
                                  (--moe-router-dtype, Megatron-core's): MOE_ROUTER_MODEL
                                  (0: the model's dtype, Megatron's default None) or
                                  MOE_ROUTER_FP32 (MOE.md, "Mixed precision") */
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
enum { MOE_ROUTER_MODEL = 0, MOE_ROUTER_FP32 = 1 };
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
/* A parallel layout as the model reads it (gpt_local_dims, the parameter
 * table, gpt_mem_bytes_*); {0} is the golden run's, one device. Built
 * from a layout by pconfig_tp_opts, from a replica's shard by gpt_new_tp. */
typedef struct {
    int sp;           /* Megatron's sequence parallelism over the tp ranks */
    int row_linears;  /* every linear row-parallel (qkv, dense, fc1, fc2 each split
                         on its reduction dimension, its output an open sum completed
                         across tp; attention and the MLP's GeLU on every rank whole),
                         the patterns file's sharding_dim 0 */
    int tp_mode;      /* Colossal-AI's tensor-parallel mode (pconfig.h's pc_tp_mode_t):
                         its placements (params.c) and the stream's features held */
    int expert_tp;    /* expert tensor parallelism's degree etp
                         (--expert-tensor-parallel-size > 1; 0: none): each expert's
                         FFN split over etp tp ranks as the dense MLP's is over tp
                         (fc1 column-parallel, fc2 row-parallel, whole FFN tiles,
                         uneven counts allowed); tp rank t holds piece t mod etp (the
                         expert grid's etp rank, etp fastest), the tp ranks of one
                         piece copies of it; 0: every tp rank runs whole experts */
    int expert_fold;  /* Megatron's MoE parallel folding (pconfig.h's
                         pconfig_ep_folded): the dense axis whose ranks are
                         expert-parallel ranks (GPT_EXPERT_FOLD_TP: etp 1, the tp
                         ranks; GPT_EXPERT_FOLD_CP: the cp ranks), 0: none. They
                         hold the same tokens (whole sequences, the same routing),
                         so rank q of that group runs its share of the experts on
                         every row and the group all-gathers the outputs; the ep
                         axis (lo.ep) nests outside it */
    int expert_fold_n; /* the fold's ranks: its axis's size, or fewer (a run of
                          expert_fold_n consecutive tp ranks, rank t holding piece
                          t mod expert_fold_n of the experts) */
    int cp;           /* context-parallel degree (0 or 1: none) */
    cp_comm_t cp_comm; /* Ulysses (all-to-all) instead of the ring */
    int ep;           /* expert-parallel degree over data-parallel ranks (0 or 1:
                         none), which sizes the experts' receive buffers (moe.c) */
} gpt_layout_opts_t;
#define GPT_EXPERT_FOLD_TP 1
#define GPT_EXPERT_FOLD_CP 2
/* The grid of tensor parallelism alone: every other axis of size 1 but
 * ep's (lo.ep; the device is expert-parallel rank 0), tp columns and
 * under lo.tp_mode as many rows (2-D), and a cube (3-D); the device is
 * tp rank tp_rank. The grid of the tp-only entry points: tools, tests,
 * the estimates, the golden run at tp = 1. */
typedef struct {
    int sizes[GRID_NAXES], coord[GRID_NAXES];
} param_grid_t;
param_grid_t param_grid_tp(int tp, int tp_rank, gpt_layout_opts_t lo);
/* The table of the device at (sizes, coord) of a grid (grid.h) holding
 * the units `units` of layout lo: every placement evaluated at the
 * device's grid sizes and coordinates on every axis, the blocks the
 * device's own (Megatron's column-, row- and vocabulary-parallel cuts;
 * the rest replicated), offsets into the replica's own contiguous block.
 * The tensors of other units keep their index and name but are empty
 * (held = 0), so every index (wte, unit_first) means the same tensor on
 * every stage; the tied word embedding is held by the stages holding unit
 * 0 or the head. units->n = 0: every unit. Errors say what must divide
 * what. param_table_build is this on the grid of one device. */
int  param_table_build_at(param_table_t *t, const model_config_t *cfg,
                          const int sizes[GRID_NAXES], const int coord[GRID_NAXES],
                          const gpt_units_t *units, gpt_layout_opts_t lo, perr_t *err);
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
    GPT_BROKEN_MOE_NORM_TP = 512u,
    /* ROUTER_LOWP: the router in the model's dtype (bf16 logits, weights
     * and combine products) where the model asks --moe-router-dtype fp32
     * (Megatron-core before moe_router_dtype, and its default None: bf16
     * router logits flip near-tied routing decisions); a bit of its own,
     * clear of the 2-D/3-D ones below */
    GPT_BROKEN_MOE_ROUTER_LOWP = 1u << 20
};
/* 2-D tensor parallelism (tp2d.c), each modelled on Colossal-AI's layers:
 * LN_FP32: LayerNorm's statistics as fp32 partial sums all-reduced over
 *   the row (LayerNorm2D's all_reduce of each rank's sum);
 * SUMMA_ROUNDED: SUMMA rounds each step's product to fp32 and adds it to
 *   the output step by step (Matmul_AB_2D's C += A.B);
 * SUMMA_LOWP: mixed precision's form of it, a naive amp's: each step's
 *   product rounded to the model's dtype S and the running sum held in S
 *   (torch.matmul under autocast returns bf16, and C += A.B adds bf16). */
enum {
    GPT_BROKEN_TP2D_LN_FP32 = 1024u,
    GPT_BROKEN_TP2D_SUMMA_ROUNDED = 2048u,
    GPT_BROKEN_TP2D_SUMMA_LOWP = 1u << 24 /* far from the others' bits: branches add them */
};
/* 3-D (tp3d.c): NO_SWAP: the second linear of a pair keeps the first's
 * input and output groups (Colossal's 3-D layers swap them after every
 * linear). */
enum { GPT_BROKEN_TP3D_NO_SWAP = 4096u };
/* 2-D x context parallelism (attention_cp.c): CP_RING_GROUP: the ring's
 * K/V blocks pass over the tp column group instead of the cp group (a
 * wrong process group, the kind Colossal-AI's 2-D x sequence-parallel
 * process groups were reported for). */
enum { GPT_BROKEN_TP2D_CP_RING_GROUP = 1u << 21 };
/* Full recomputation and context parallelism of the wider models:
 * MOE_RECOMPUTE_AUX: an MoE layer whose forward the backward replays
 *   registers its load-balancing and z losses again in the replay, and
 *   their gradients reach the router twice (Megatron-LM 1330 and 1514:
 *   the recomputed forward registered the aux loss a second time, there
 *   doubling its logged value);
 * CP_CAUSAL_RING: the ring takes every attention block as causal (its
 *   tile skipping and softmax spans), the GPT's mask, for an encoder's
 *   bidirectional and a decoder's cross-attention too (the zigzag ring is
 *   built for causal masks; Megatron-core runs no CP for T5). */
enum { GPT_BROKEN_MOE_RECOMPUTE_AUX = 1u << 22, GPT_BROKEN_CP_CAUSAL_RING = 1u << 23 };
/* FOLD_CP (experts_run.c): with the experts folded onto cp (each cp rank
 * holds other experts) the expert weight gradients are still split over
 * cp by token tile, as when the cp ranks hold the same experts: the
 * expert-data-parallel group taken as the dense one (dp x cp) instead of
 * dp, Megatron-core's wrong-EDP-group bug class. */
enum { GPT_BROKEN_MOE_FOLD_CP = 16384u };

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

/* The model of one replica: opaque here (ref/model/gpt.h). */
typedef struct gpt gpt_t;

/* Watches a step, for dumps and checkers. Both hooks may be NULL. */
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

/* Data (corpus.h) + the phases above, for step `step` (0-based). */
typedef struct {
    float loss, lr, grad_norm;
    double seconds; /* layouts: the step's wall time, barrier to barrier */
    float loss_scale; /* fp16: the scale this step's backward used (else 0) */
    int skipped;      /* fp16: the step overflowed and made no update */
} gpt_step_stats_t;

#endif
