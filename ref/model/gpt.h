/* gpt.h - the model of one replica inside the library (private: not
 * installed): its activations and scratch (acts.h), shard and extents
 * (shard.h), the styles, the units and the step, the optimizers.
 * include/parity/model.h is the public part: config, parameters, the
 * observer and the statistics. */
#ifndef PARITY_MODEL_GPT_H
#define PARITY_MODEL_GPT_H

#include "parity/model.h"

/* Hands out 64-byte aligned pieces of one block (replica.c); with base
 * NULL it only measures, so the same code sizes and carves a slot or the
 * scratch. */
typedef struct {
    char *base;
    size_t used;
} carver_t;
void *carve(carver_t *cv, size_t bytes);
#define CARVE_F(cv, n) ((float *)carve(cv, (size_t)(n) * sizeof(float)))
#define CARVE_U8(cv, n) ((uint8_t *)carve(cv, (size_t)(n)))

#include "model/acts.h"  /* layer_acts_t, gpt_slot_t, gpt_scratch_t */
#include "model/shard.h" /* gpt_shard_t, gpt_local_t */

/* ---- styles (model/styles/style.h) -------------------------------------
 * A style is one way a layout does one family's arithmetic: the linear
 * pairs, LayerNorm, the vocabulary (embedding, head, cross-entropy), the
 * attention core, the experts' dispatch. A replica's styles are chosen
 * once from its extents (styles_choose); unit code calls through them. */
typedef enum {
    STYLE_LINEAR,
    STYLE_NORM,
    STYLE_VOCAB,
    STYLE_ATTENTION,
    STYLE_EXPERTS,
    STYLE_NFAMILIES
} style_family_t;
typedef struct style {
    const char *name;       /* in reports: "1-d column/row", "summa-2d", "ring" */
    style_family_t family;
    /* whether it does its family's arithmetic for a replica with these
     * extents: a family's first style that applies is chosen */
    int (*applies)(const model_config_t *c, const gpt_local_t *lc);
    /* its private scratch for up to n token rows (NULL: none): carves
     * (cv->base NULL: measures) and keeps the pieces in *priv */
    void (*layout_scratch)(void **priv, const model_config_t *c, const gpt_local_t *lc,
                           size_t n, carver_t *cv);
} style_t;
/* The styles chosen for a replica and their private scratch. A family's
 * own header casts style[f] to its table of operations (a struct whose
 * first member is the style_t). */
/* A style's private scratch struct of `bytes`, carved in the scratch
 * block and kept in *priv; measuring (cv->base NULL): *priv NULL, and the
 * caller's `measure` to fill and drop. */
static inline void *style_scratch_struct(void **priv, carver_t *cv, size_t bytes, void *measure) {
    void *s = carve(cv, bytes);
    *priv = s;
    return s ? s : measure;
}
typedef struct {
    const style_t *style[STYLE_NFAMILIES];
    void *scratch[STYLE_NFAMILIES];
} gpt_styles_t;


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
/* fp16's scaler from and into a checkpoint's (ckpt.h's ckpt_scaler_t;
 * every rank of a layout restores its own copy); other precisions keep
 * the initial, inert one and save zeros. */
struct ckpt_scaler;
void gpt_scaler_from_ckpt(gpt_t *g, const struct ckpt_scaler *s);
void gpt_scaler_to_ckpt(const gpt_t *g, struct ckpt_scaler *s);
/* After a step's gradients are rounded, unscaled and their global norm
 * known: found_inf = the norm is not finite. Returns 1 when the step must
 * be skipped (fp16 only: no update, the learning rate's schedule does not
 * advance), and moves the scale. */
int  loss_scaler_step(loss_scaler_t *s, const model_config_t *c, int found_inf);
/* fp16: grads[0..n) *= 1 / scale (exact for a power of two); else nothing. */
void loss_scaler_unscale(const loss_scaler_t *s, const model_config_t *c, float *grads, size_t n);
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
    gpt_styles_t styles; /* the styles chosen for this replica (style.h) */
    contract_ws_t ws;
    struct arena *arena; /* where the replica's memory came from, or NULL */
    void **acc_storage;  /* [count] the memory behind grad_acc (NULL: in acc_pool) */
    void *acc_pool;      /* GPT_UNIT_OPEN_SUMS / GPT_GRADS_IN_SUMS: every tensor's open
                            sums (and the latter's grads), or NULL */
    unsigned sums_mode;  /* GPT_UNIT_OPEN_SUMS, GPT_GRADS_IN_SUMS or 0 */
};

/* Whether this replica's token losses are the copy a global loss sum
 * counts: one of the ranks that share a row's loss, as its vocabulary
 * style says (styles/vocab.h: tp rank 0 of a tensor-parallel group, 3-D's
 * tp2 coordinate 0, whose logits' vocabulary is cut over tp2). */
int gpt_counts_loss(const gpt_t *g);

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
 * context-parallel rank cp_rank holds (lo.cp; the error says what must
 * divide what under sequence or context parallelism; param_table_build_at
 * checks the cuts of heads, feature, FFN and vocabulary tiles).
 * state/extents.c. */
int  gpt_local_dims(const model_config_t *cfg, int tp, int tp_rank, int cp_rank,
                    gpt_layout_opts_t lo, gpt_local_t *out, perr_t *err);
/* Completes lc (from gpt_local_dims) with what the shard's 2-D and 3-D
 * coordinates decide: the word embedding's rows (its row's vocabulary
 * block; 3-D: piece tp_dep of it), 3-D's heads, FFN and vocabulary of its
 * tp2 block and its inner layout's sequence shift. Nothing in 1-D. */
void gpt_local_place(const model_config_t *cfg, const gpt_shard_t *shard, gpt_local_t *lc);
/* The layout a replica's shard describes (its named fields, as
 * pconfig_tp_opts gives a run's), and whether the shard has the group of
 * every axis it splits (the error names the axis). extents.c. */
gpt_layout_opts_t gpt_shard_layout(const gpt_shard_t *shard);
int gpt_shard_check_groups(const gpt_shard_t *shard, perr_t *err);
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
/* The attention blocks of the units a replica holds (a T5 decoder layer
 * has two), for the context-parallel formulas; *cores (when not NULL):
 * those whose core runs again in the backward (full: the recomputed
 * layers'; selective: every one). */
int  gpt_attention_blocks(const model_config_t *cfg, const gpt_units_t *units, int *cores);
/* The blocks of the layers full recomputation runs again (each layer's
 * attention blocks and its MLP: 2 a GPT layer, 3 a T5 decoder layer), for
 * the tensor-parallel formulas (a recomputed block's forward collective). */
int  gpt_recomputed_blocks(const model_config_t *cfg, const gpt_units_t *units);
/* The same for one rank of tensor parallelism over tp ranks (sp: with
 * sequence parallelism). */
int  gpt_mem_bytes_tp(const model_config_t *cfg, int tp, gpt_layout_opts_t lo, unsigned omit,
                      gpt_mem_t *out, perr_t *err);
/* The same for a replica holding `units` (pipeline parallelism) with
 * n_slots activation slots of its largest chunk (0: one slot of every
 * unit held, as gpt_new_tp makes). */
int  gpt_mem_bytes_mp(const model_config_t *cfg, int tp, gpt_layout_opts_t lo,
                      const gpt_units_t *units, int n_slots, unsigned omit, gpt_mem_t *out,
                      perr_t *err);
/* What gpt_new_tp takes from its arena for table t and extents lc: one
 * sum for the allocation (replica.c) and for the estimates (gpt_mem_bytes*,
 * state/extents.c), so they cannot drift apart. One activation slot of
 * every unit held, or n_slots of the largest chunk. */
void gpt_mem_of(const model_config_t *cfg, const param_table_t *t, unsigned omit,
                const gpt_local_t *lc, int tp, const gpt_units_t *units, int n_slots, gpt_mem_t *m);
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


/* ---- queries for the engine (query.c) ----------------------------------
 * What the engine asks a replica about its extents, so that it reads no
 * gpt_local_t or gpt_shard_t field itself. */
/* Floats of the residual stream a slot of n_seq sequences holds:
 * n_seq * seq_held / seq_parts positions, hid features each (2-D: the
 * column's block). */
size_t gpt_stream_floats(const gpt_t *g, int n_seq);
/* The blocks a rank's microbatch of sequences is cut into across tensor
 * parallelism (2-D: tp, 2.5-D: tp * depth; 1 without) and this replica's
 * block (2.5-D: depth * tp + row). */
int  gpt_batch_blocks(const gpt_t *g, int *block);
/* Whether the tensor-parallel ranks hold different sequences (2-D, 2.5-D,
 * 3-D): the loss is then summed over every device, not the gradient group. */
int  gpt_tp_cuts_batch(const gpt_t *g);
/* Pipeline chunk c's units [*lo, *hi). */
void gpt_chunk_units(const gpt_t *g, int c, int *lo, int *hi);

#endif
