/* units_internal.h - what the unit files share (units.c, unit_embedding.c,
 * unit_layer.c, unit_head.c, unit_ops.c, unit_kind.h): a unit pass's view of its slot, and the tensor- and
 * sequence-parallel forms of the operations the units are made of. */
#ifndef PARITY_UNITS_INTERNAL_H
#define PARITY_UNITS_INTERNAL_H

#include <stddef.h>
#include <stdint.h>

#include "parity/layers.h"
#include "model/gpt.h"

static inline float *P_(gpt_t *g, int idx) { return g->param_ptr[idx]; }

/* What one unit pass needs to know about its slot's tokens. The slot
 * holds Tc positions of each sequence (T; context parallelism: its runs),
 * n tokens. The sharded regions (LayerNorm, dropout, residual stream)
 * hold `ns` tokens: all n, or under sequence parallelism positions
 * t0 .. t0+Tl-1 of each sequence. `runs` are the sharded regions'
 * positions, in the order they are stored. */
typedef struct pass {
    int n_seq, n;        /* sequences, tokens */
    int T, Tc, Tl, t0, ns; /* positions per sequence; held by the slot; by the sharded regions;
                              first held (sequence parallelism); tokens held */
    cp_runs_t runs;
    size_t nC, nsC;      /* n*C, ns*C */
    int sp;              /* sequence parallel */
    linear_tiles_t t_cc, t_cf, t_fc;
    attn_shape_t as;
} pass_t;

pass_t unit_pass(const gpt_t *g, const gpt_slot_t *A);

/* checkpoints.c: a batch tensor of the slot to the observer, as the views
 * of the blocks it holds: global per-sequence shape [ndim]; tensor
 * parallelism's cut (axis `cut`, block lo .. lo+ext-1, or cut -1); the
 * positions held along axis `rows` (runs, in storage order; NULL: all). */
void report_rows(const gpt_observer_t *obs, const gpt_slot_t *A, const char *name,
                 st_dtype_t dtype, const void *data, int ndim, const int64_t *shape, int cut,
                 int64_t lo, int64_t ext, const cp_runs_t *runs, int rows);
/* The same for a block of the slot's sequences starting at first_seq
 * (3-D's inner layout holds other sequences than the stream's). */
void report_rows_of(const gpt_observer_t *obs, const gpt_slot_t *A, int first_seq, const char *name,
                    st_dtype_t dtype, const void *data, int ndim, const int64_t *shape, int cut,
                    int64_t lo, int64_t ext, const cp_runs_t *runs, int rows);

/* The dropout stream of a site: keyed by site name and step, never by
 * rank (I3); l < 0 for a site outside the layers. */
uint64_t site_stream(const char *site, int l, int64_t step);
/* keep [ns,C]: the site's mask for the tokens held, keyed by their global
 * flat index (sequence, position, feature). */
void site_mask(const gpt_t *g, const gpt_slot_t *A, const pass_t *p, uint8_t *keep,
               uint64_t stream);
/* x_out = x + drop(y) over the tokens held (keep: an already drawn mask, or NULL). */
/* Mixed precision (MODEL.md "Mixed precision"): x[0..n) rounded to the
 * model's storage dtype, the activations and activation gradients at the
 * points MODEL.md lists (nothing in fp32). Elementwise on final values,
 * so any cut of them (tp, SP, cp, a pipeline stage) rounds alike. */
void act_round(const gpt_t *g, float *x, size_t n);
void residual_dropout(float *x_out, const float *x, const float *y, const uint8_t *keep,
                      size_t count, float prob);

/* Row-parallel linear forward: y [ns,out] (the tokens held) =
 * round(sum over ALL input tiles of x.w^T) + b, x [n,in_local]. */
void rowpar_forward(gpt_t *g, const pass_t *p, float *y, const float *x, const float *w,
                    const float *b, int n_in, int n_out, linear_tiles_t t);
/* Column-parallel linear backward: weight and bias gradients of the rows
 * held, whole; dx [ns,in] (the tokens held) = round(sum over ALL output
 * tiles of dy.w), dy [n,out_local]. */
void colpar_backward(gpt_t *g, const pass_t *p, float *dx, acc_t *dw, acc_t *db, const float *dy,
                     const float *x, const float *w, int n_in, int n_out, linear_tiles_t t);
/* The linears of a pair (qkv then dense, fc1 then fc2), in Megatron's
 * form (the first column-parallel: the rank's output rows whole; the
 * second row-parallel over the rank's columns, completed across tp) or
 * with every linear row-parallel (g->local.row_linears: each contracts
 * the rank's slice of its input features, its output an open sum
 * completed across tp; input gradients of the slice gathered).
 * First: x [n, n_in] whole, y [n, n_out] (Megatron: the rank's rows).
 * Second: x [n, wx], of which the rank contracts columns [c0, c0 + cl). */
void pair_first_forward(gpt_t *g, const pass_t *p, float *y, const float *x, const float *w,
                        const float *b, int n_in, int n_out, linear_tiles_t t);
void pair_first_backward(gpt_t *g, const pass_t *p, float *dx, acc_t *dw, acc_t *db,
                         const float *dy, const float *x, const float *w, int n_in, int n_out,
                         linear_tiles_t t);
/* in_kind: what x's features are (TP2D_HEADS: attention's, TP2D_FFN),
 * for 2-D's blocks (tp2d.h). */
void pair_second_forward(gpt_t *g, const pass_t *p, float *y, const float *x, int wx, int c0,
                         int cl, const float *w, const float *b, int n_out, linear_tiles_t t,
                         int in_kind);
/* dx [n, wx]: whole when the rank contracts all of x, else gathered. */
void pair_second_backward(gpt_t *g, const pass_t *p, float *dx, acc_t *dw, acc_t *db,
                          const float *dy, const float *x, int wx, int c0, int cl, const float *w,
                          int n_out, linear_tiles_t t, int in_kind);
/* full [n,w] from the tokens held [ns,w]: the same pointer without
 * sequence parallelism, else gathered into `buf`. */
const float *tokens_full(gpt_t *g, const pass_t *p, float *buf, const float *held, int w);
/* LayerNorm backward over the tokens held; under sequence parallelism
 * gamma/beta gradients of the positions held are completed across tp. */
/* LayerNorm over the tokens held (p->ns): layernorm.c, or 2-D's over the
 * row's features. */
void ln_forward(gpt_t *g, const pass_t *p, float *y, float *xhat, float *rstd, const float *x,
                const float *gamma, const float *beta);
void ln_backward(gpt_t *g, const pass_t *p, float *dx, acc_t *dgamma, acc_t *dbeta,
                 const float *dy, const float *xhat, const float *rstd, const float *gamma);

#include "model/units/unit_kind.h"

/* unit_embedding.c: the embedding's pieces, which the LLaVA-style patch
 * embedding (unit_llava.c) is made of. Its tensors' first two are the
 * word and position embeddings. Forward: the lookup of `tokens` (the
 * slot's inputs, or a copy whose rows that look up no word are -1),
 * completed over tp; `rows` (or NULL) then sets rows of A->emb (the
 * tokens held); positions added; dropout. Backward: the word rows of
 * `tokens` and every position row; returns the gradient of every
 * position (gathered under sequence parallelism). */
enum { E_WTE, E_WPE };
typedef void (*embedding_rows_fn)(gpt_t *g, const unit_t *u, gpt_slot_t *A, const pass_t *p);
void embedding_unit_forward(gpt_t *g, const unit_t *u, gpt_slot_t *A, const pass_t *p,
                            const int32_t *tokens, embedding_rows_fn rows);
const float *embedding_unit_backward(gpt_t *g, const unit_t *u, gpt_slot_t *A, const pass_t *p,
                                     const int32_t *tokens);
extern const unit_checkpoint_t embedding_checkpoints[];
void   embedding_bind(param_table_t *t, const model_config_t *c, int unit, int first);
void   embedding_layout(gpt_slot_t *A, int index, const slot_dims_t *d, int held, int next_held,
                        carver_t *cv);
float *embedding_output(gpt_slot_t *A, int index);
void   embedding_views(const gpt_t *g, const unit_t *u, const gpt_slot_t *A,
                       const unit_positions_t *pos, unit_view_t *out);

/* moe.c: an MoE layer's MLP (MODEL.md, "Mixture of experts"). Its
 * tensors: the router [E,C], the experts' stacked fc1 [E,F,C] and bias
 * [E,F], fc2 [E,C,F] and bias [E,C]. */
typedef struct {
    const float *router, *fc1_w, *fc1_b, *fc2_w, *fc2_b;
} moe_params_t;
typedef struct {
    acc_t *router, *fc1_w, *fc1_b, *fc2_w, *fc2_b;
} moe_grads_t;
/* An expert's capacity in one sequence (dropless: T). */
int    moe_capacity(const model_config_t *c);
/* The experts' input rows a slot of n_seq sequences may need (R). */
size_t moe_rows(const model_config_t *c, size_t n_seq);
size_t moe_claims_bytes(const model_config_t *c);
void   moe_layout(layer_acts_t *L, const slot_dims_t *d, carver_t *cv);
/* ma->out [n,C] from x [n,C] (pure); the statistics after it (once). */
void   moe_forward(gpt_t *g, const pass_t *p, struct moe_acts *ma, const float *x,
                   const moe_params_t *w);
void   moe_after_forward(gpt_t *g, const pass_t *p, const struct moe_acts *ma, int l);
/* dx [n,C] from dout [n,C] (moe_out's gradient) and x; gradients into gr. */
void   moe_backward(gpt_t *g, const pass_t *p, struct moe_acts *ma, float *dx, const float *dout,
                    const float *x, const moe_params_t *w, const moe_grads_t *gr);

/* units.c: the activation sets a replica's scratch needs for full
 * recomputation (a set per recomputed layer kind and place in its longest
 * chunk, gpt_recompute_chunk; 0 without), and their layout into sets
 * [recompute_sets] (measures when cv->base is NULL; sets may then be NULL). */
int  recompute_sets(const model_config_t *c, const gpt_units_t *units);
void recompute_layout(layer_acts_t *sets, const model_config_t *c, const gpt_units_t *units,
                      const slot_dims_t *d, carver_t *cv);

#endif
