/* unit_kind.h - a unit kind as data: what it owns and what it does.
 *
 * The model is a list of unit instances (kind + index, e.g. layer 3),
 * built from the config by gpt_unit_at (units.c). Everything that walks
 * the model walks that list: the parameter table (params.c, from each
 * kind's tensors), dispatch (units.c, through the kind's functions), the
 * activation slot's layout (replica.c, through the kind's layout), the
 * checkpoints a dump and the checker see (checkpoints.c, from the kind's
 * checkpoint list) and the dump-size estimate (gpt_batch_bytes_per_seq).
 * A new kind (an encoder layer, an MoE layer) is one more table.
 *
 * forward is pure: it reads the parameters and the slot's input and
 * writes only the slot's activations (and the shared scratch); it adds
 * to no loss, calls no observer and counts nothing, so it may run twice
 * (recomputation). after_forward does what must happen once per forward:
 * the head's loss sum. Reporting checkpoints to observers is generic
 * (gpt_unit_after_forward), from the kind's list.
 */
#ifndef PARITY_UNIT_KIND_H
#define PARITY_UNIT_KIND_H

#include <stddef.h>
#include <stdint.h>

#include "model/gpt.h"

/* Sizes a kind's shapes are made of, as functions of the config. */
typedef enum { DIM_1, DIM_V, DIM_T, DIM_C, DIM_3C, DIM_F, DIM_H, DIM_2, DIM_E, DIM_K, DIM_PATCH } unit_dim_t;
int64_t unit_dim(const model_config_t *c, unit_dim_t d);

/* How tensor parallelism cuts a tensor: replicated; column-parallel (its
 * output rows, whole); row-parallel (its input columns); vocabulary rows.
 * align: the block the cut keeps whole. With every linear row-parallel
 * (gpt_layout_opts_t.row_linears) each 2-D linear weight is cut on its input axis
 * at that axis's canonical tile, and column-parallel biases are whole.
 * The stacked expert tensors ([E, ...]) are cut over expert parallelism's
 * ep ranks on their expert axis; CUT_EXPERT_FFN cuts their FFN axis like
 * the dense MLP's under expert tensor parallelism (.expert_tp) too,
 * CUT_EXPERT keeps each expert whole on every tp rank. */
typedef enum { CUT_REPL, CUT_COLPAR, CUT_ROWPAR, CUT_VOCAB,
               CUT_EXPERT_FFN, CUT_EXPERT } unit_cut_t;
typedef enum { AL_NONE, AL_HEADS3, AL_HEADS, AL_FFN } unit_align_t;
/* Init scale: none, sigma, or sigma/sqrt(2L) (residual-branch outputs). */
typedef enum { STD_NONE, STD_SIGMA, STD_OUT } unit_std_t;
/* When a tensor or checkpoint exists. */
enum { WHEN_ALWAYS = 0, WHEN_UNTIED = 1, WHEN_HDROP = 2, WHEN_ADROP = 4 };

typedef struct {
    const char *suffix;     /* after the instance prefix */
    int ndim;               /* 1 .. PL_MAX_DIMS */
    unit_dim_t dim[PL_MAX_DIMS]; /* the global shape (unused axes: DIM_1 or 0) */
    param_init_t init;
    unit_std_t std;
    unit_cut_t cut;
    unit_align_t align;
    int weight_decay;       /* Megatron's rule: every 2-D weight */
    unsigned when;
} unit_tensor_t;

/* A checkpoint: the dump's name is cls "." prefix suffix (cls "" : prefix
 * suffix), its per-sequence global shape dim[], its forward position
 * `order` within the unit (the checker's execution order), and what
 * writes it last under a layout (the checker's divergence report). */
typedef struct {
    const char *cls;        /* "act", "mask" or "" */
    const char *suffix;
    st_dtype_t dtype;
    int ndim;
    unit_dim_t dim[3];
    int order;
    unsigned when;
    ckpt_writer_t writer;   /* what last writes it under a layout (model.h) */
} unit_checkpoint_t;

enum { UNIT_MAX_CHECKPOINTS = 32 };
/* The runtime part of a checkpoint a slot holds: its data and which
 * block of the global tensor (checkpoints.c's report_rows). */
typedef struct {
    const void *data;       /* NULL: not kept */
    int cut;                /* the axis tensor parallelism cuts (-1: none) */
    int64_t lo, ext;
    const cp_runs_t *runs;  /* the positions held along axis `rows`, NULL: all */
    int rows;
    int seq_shift;          /* its sequences: the slot's, moved by this many (3-D's inner layout) */
} unit_view_t;
/* 3-D tensor parallelism's inner layout (tp3d.c) holds the sequences of
 * block tp_dep*q + tp_rank, the stream those of tp_dep*q + tp_row: the
 * first's index minus the second's (0 in every other mode), in
 * sequences (gpt_local_t.inner_shift counts blocks). */
static inline int unit_inner_shift(const gpt_t *g, int n_seq) {
    return g->local.inner_shift * n_seq;
}
/* A [T, C] tensor of the residual stream's width: its features held (all,
 * or 2-D tensor parallelism's column block) at positions `runs`. */
static inline unit_view_t unit_stream_view(const gpt_t *g, const void *data, const cp_runs_t *runs) {
    const int split = g->local.hid < g->cfg.hidden;
    return (unit_view_t){data, split ? 1 : -1, split ? g->local.hid0 : 0, split ? g->local.hid : 0,
                         runs, 0, 0};
}
/* What a kind's views may point at: the residual stream's positions and
 * the slot's. */
typedef struct {
    const cp_runs_t *stream, *all;
    const cp_runs_t *whole; /* every position of a sequence, in order (an MoE's
                               tensors: routing takes whole sequences) */
    int inner_shift;        /* the inner layout's sequences: unit_inner_shift */
} unit_positions_t;

/* The extents a slot is laid out with. */
typedef struct {
    size_t mb, T, Tc, n, ns, C, H, A, F, V;
    int hdrop, adrop, sp;
    const struct style *attention; /* the replica's attention style (styles/attention.h):
                                      lays out its core's own activations */
    int core_shared;    /* selective recomputation: attention's core (scores, softmax,
                           dropout) lives in the scratch's one set, not the slot */
    size_t E, K, R, Fe; /* experts, top-k, the experts' input rows (moe_rows), and
                           the FFN width of them held (gpt_local_t.expert_ffn) */
    size_t cp, ep;      /* context- and expert-parallel degrees */
    size_t patch;       /* LLaVA: the values of an image patch (cfg.patch_dim) */
} slot_dims_t;

typedef struct unit_kind unit_kind_t;
typedef struct pass pass_t; /* units_internal.h */
/* One unit of the model: its kind, its index among its kind's instances
 * (layer l), its place in the model and its first tensor's index. */
typedef struct {
    const unit_kind_t *kind;
    int index, unit, first;
} unit_t;
struct unit_kind {
    const char *name;
    const char *prefix;             /* instance prefix: "" or e.g. "layers.%d." */
    const unit_tensor_t *tensors;
    int n_tensors;
    const unit_checkpoint_t *checkpoints;
    int n_checkpoints;
    const char *input_grad;         /* the name of its input's gradient ("%d": the index), or
                                       NULL: it has no input */
    /* after the table is built: the kind's named indices (param_table_t's
     * wte, ...) from its first tensor's index */
    void (*bind)(param_table_t *t, const model_config_t *c, int unit, int first);
    /* the slot's activations (index: unit_acts): held, the unit runs
     * here; else only where its output arrives when the next unit runs
     * here (next_held) */
    void (*layout)(gpt_slot_t *A, int index, const slot_dims_t *d, int held, int next_held,
                   carver_t *cv);
    /* the residual stream it leaves in the slot (index: unit_acts; NULL: none) */
    float *(*output)(gpt_slot_t *A, int index);
    void (*forward)(gpt_t *g, const unit_t *u, gpt_slot_t *A, const float *x,
                    const pass_t *p);
    void (*after_forward)(gpt_t *g, const unit_t *u, gpt_slot_t *A, const pass_t *p); /* or NULL */
    void (*backward)(gpt_t *g, const unit_t *u, gpt_slot_t *A, const pass_t *p);
    /* the views of its checkpoints [n_checkpoints], in the list's order */
    void (*views)(const gpt_t *g, const unit_t *u, const gpt_slot_t *A,
                  const unit_positions_t *pos, unit_view_t *out);
    /* the attention blocks it runs (a decoder layer: self- and cross-
     * attention), for the context-parallel formulas (gpt_attention_blocks) */
    int attention_blocks;
};

extern const unit_kind_t unit_embedding, unit_layer, unit_moe_layer, unit_head;
/* unit_encdec.c: an encoder-decoder's (MODEL.md "Encoder-decoder models") */
extern const unit_kind_t unit_encoder_layer, unit_encoder_final, unit_decoder_layer;
/* unit_llava.c: a LLaVA-style model's image side */
extern const unit_kind_t unit_patch_embedding, unit_projector;

/* The model's description: the kinds in order, each with a count (0: the
 * config has none). Unit u of the model (first: -1; gpt_unit binds it to
 * a table). */
typedef struct {
    const unit_kind_t *kind;
    int (*count)(const model_config_t *c);
    /* or NULL; else instance i's kind: `kind` or one of `alts` (the
     * layers: dense, MoE or an encoder-decoder's decoder layer) */
    const unit_kind_t *(*kind_at)(const model_config_t *c, int i);
    const unit_kind_t *alts[2];
} model_run_t;
int model_count_one(const model_config_t *c);    /* 1 */
int model_count_layers(const model_config_t *c); /* c->layers */
/* The unit's activations in a slot: A->layer[unit - 1] (the embedding's
 * and the head's are the slot's own fields). A kind's layout and output
 * take this index. */
static inline int unit_acts(const unit_t *u) { return u->unit - 1; }
/* Replaces the model's description by list[0 .. n) (NULL: the GPT's:
 * embedding, layers x L, head): a model of other kinds, e.g. a test's
 * own kind (tests/layouts/test_custom_unit.c) with no edit of the parallel code.
 * Process-wide: set before any model is built, never while one runs.
 * The pipeline plan splits the config's layers over stages (pp_plan.c):
 * a description keeps one unit before and one after `layers` units per
 * layer. -1: n out of range. */
enum { MODEL_MAX_RUNS = 16 };
int    model_set_runs(const model_run_t *list, int n);
int    model_num_units(const model_config_t *c);
unit_t model_unit_at(const model_config_t *c, int u);
unit_t gpt_unit(const gpt_t *g, int u);
/* The instance prefix of a unit ("layers.3."). */
void   unit_prefix(const unit_t *u, char *buf, size_t cap);
/* Whether a tensor or checkpoint's `when` holds for c. */
int    unit_when(const model_config_t *c, unsigned when);
/* Tensor k of a unit (the kind's order): its values and open gradient sum. */
static inline float *unit_param(gpt_t *g, const unit_t *u, int k) { return g->param_ptr[u->first + k]; }
static inline acc_t *unit_grad(gpt_t *g, const unit_t *u, int k) { return &g->grad_acc[u->first + k]; }

#endif
