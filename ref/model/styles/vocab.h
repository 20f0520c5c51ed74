/* vocab.h - the vocabulary family of styles: the word embedding's lookup,
 * the LM head's logits and the cross-entropy's softmax reductions, each
 * in the form a layout cuts the vocabulary (style.h, gpt.h's style_t).
 *
 *   vocab_local.c  the golden arithmetic: every vocabulary row held
 *   vocab_1d.c     Megatron's vocabulary-parallel embedding (the rows held
 *                  looked up, -0 elsewhere, summed over tp; reduce-scattered
 *                  under sequence parallelism) and parallel cross-entropy
 *                  (max, exact sum of exps and target logit over tp)
 *   vocab_2d.c     Colossal-AI's 2-D and 2.5-D (tp2d.c: the row's vocabulary
 *                  block, the column's features)
 *   vocab_3d.c     Colossal-AI's 3-D (tp3d.c: logits in the inner layout,
 *                  their vocabulary over tp2)
 *   vocab.c        what the styles share: the golden lookup and position
 *                  rows, the cross-entropy completed over a group, the
 *                  broken variant GPT_BROKEN_TP_VOCAB_PAD, their scratch
 *
 * The head and embedding units (units/unit_head.c, unit_embedding.c) call
 * through vocab_style(g). A new form is a file defining a const
 * vocab_style_t and one line in styles.c's vocab_table (most specific
 * first). Shapes: n token rows of the slot (p->n), ns held by the sharded
 * regions (p->ns), hid the stream's features held (g->local.hid), V the
 * vocabulary rows held (g->local.vocab, from g->local.vocab0). */
#ifndef PARITY_MODEL_STYLES_VOCAB_H
#define PARITY_MODEL_STYLES_VOCAB_H

#include "model/gpt.h"
#include "model/units/units_internal.h"

/* LLaVA's image rows: set between the words' sum and the positions
 * (NULL fn: none). */
typedef struct {
    embedding_rows_fn fn;
    const unit_t *u;
    gpt_slot_t *A;
} vocab_rows_hook_t;

typedef struct vocab_style {
    style_t base;
    /* x [ns, hid] = the sum over the vocabulary's group of wte's rows
     * held [V, hid] looked up by tokens [n] (-1: no word), then the
     * hook's rows, then + wpe's rows of the positions held. */
    void (*embedding_forward)(gpt_t *g, const pass_t *p, float *x, const int32_t *tokens,
                              const float *wte, const float *wpe, const vocab_rows_hook_t *hook);
    /* dwte += the rows held of d's rows, dwpe += every position's; d
     * [ns, hid]. Returns d's rows for every token the embedding's
     * gradient reaches here ([n, hid], gathered under sequence
     * parallelism; 2-D: d itself). */
    const float *(*embedding_backward)(gpt_t *g, const pass_t *p, acc_t *dwte, acc_t *dwpe,
                                       const float *d, const int32_t *tokens);
    /* logits [n, V] = x [n, hid] . e^T, e the head weight held. */
    void (*head_forward)(gpt_t *g, const pass_t *p, float *logits, const float *x, const float *e);
    /* dx [n, hid] = dlogits . e; de += dlogits^T . x (left open). */
    void (*head_backward)(gpt_t *g, const pass_t *p, float *dx, acc_t *de, const float *dlogits,
                          const float *x, const float *e);
    /* The softmax of each row of logits over the whole vocabulary (the
     * columns of every rank that holds a block of it): m, Z [n] its max
     * and denominator, loss [n] each token's (m + log Z) - logit of its
     * target (targets [n]: the slot's; 3-D maps them to its logits'
     * rows, the inner layout's sequences). */
    void (*crossentropy_forward)(gpt_t *g, const pass_t *p, float *loss, float *m, float *Z,
                                 const float *logits, const int32_t *targets);
    /* The logits' gradient [n, V] (the style's scratch, valid until the
     * next call) of the mean loss over total_tokens. */
    float *(*crossentropy_backward)(gpt_t *g, const pass_t *p, const float *logits,
                                    const int32_t *targets, const float *m, const float *Z,
                                    int64_t total_tokens);
    /* Whether this replica's token losses are the copy a global loss sum
     * counts (one rank of those that share a row's loss). */
    int (*counts_loss)(const gpt_t *g);
} vocab_style_t;

static inline const vocab_style_t *vocab_style(const gpt_t *g) {
    return (const vocab_style_t *)g->styles.style[STYLE_VOCAB];
}

/* The styles of the built-in table (styles.c lists them). */
extern const vocab_style_t vocab_3d, vocab_2d, vocab_1d, vocab_local;

/* ---- what the styles share (vocab.c) ----------------------------------- */

/* Every vocabulary style's private scratch (g->styles.scratch[STYLE_VOCAB]):
 * the logits' gradient [n, V], the target logits [n], and where the
 * vocabulary is split over a group the open softmax denominators [n]
 * (else NULL). */
typedef struct {
    float *d_logits;
    float *tl;
    xacc_t *zacc;
} vocab_scratch_t;
/* A style's layout_scratch for n rows (measures when cv->base is NULL):
 * whole, every row held; split, the softmax completed over a group. */
void vocab_layout_whole(void **priv, const model_config_t *c, const gpt_local_t *lc, size_t n,
                        carver_t *cv);
void vocab_layout_split(void **priv, const model_config_t *c, const gpt_local_t *lc, size_t n,
                        carver_t *cv);
static inline vocab_scratch_t *vocab_scratch(const gpt_t *g) {
    return (vocab_scratch_t *)g->styles.scratch[STYLE_VOCAB];
}

/* The golden pieces around the words' sum: the hook's rows, then x
 * [ns, C] += wpe's rows of the positions held (p->runs). */
void vocab_rows_and_positions(gpt_t *g, const pass_t *p, float *x, const float *wpe,
                              const vocab_rows_hook_t *hook);
/* The golden embedding backward over every position the slot holds:
 * d [ns, C] gathered to [n, C] under sequence parallelism, then the rows
 * held of wte and every row of wpe. */
const float *vocab_rows_backward(gpt_t *g, const pass_t *p, acc_t *dwte, acc_t *dwpe,
                                 const float *d, const int32_t *tokens);
/* The golden head: logits [n, V] = x [n, C] . e^T (the rows held), and
 * its column-parallel backward (units_internal.h's colpar_backward). */
void vocab_linear_forward(gpt_t *g, const pass_t *p, float *logits, const float *x, const float *e);
void vocab_linear_backward(gpt_t *g, const pass_t *p, float *dx, acc_t *de, const float *dlogits,
                           const float *x, const float *e);
/* The cross-entropy's reductions over grp, the ranks whose vocabulary
 * blocks make one row of logits (NULL: this rank holds every row):
 *   softmax: m = max (reduce: max), Z = round(exact sum of exp(x - m))
 *            (reduce: exact sum), GPT_BROKEN_TP_VOCAB_PAD's columns in both
 *   loss:    the target logit (reduce: sum, -0 where not held), then
 *            loss = (m + log Z) - logit
 * in that order (3-D gathers its targets between the two). */
void vocab_ce_softmax(gpt_t *g, const pass_t *p, group_t *grp, float *m, float *Z,
                      const float *logits);
void vocab_ce_loss(gpt_t *g, const pass_t *p, group_t *grp, float *loss, const float *m,
                   const float *Z, const float *logits, const int32_t *targets);
/* crossentropy_forward: softmax then loss, over no group (every row
 * held) or over the tensor-parallel group (1-D; 2-D's row). */
void vocab_ce_forward_whole(gpt_t *g, const pass_t *p, float *loss, float *m, float *Z,
                            const float *logits, const int32_t *targets);
void vocab_ce_forward_tp(gpt_t *g, const pass_t *p, float *loss, float *m, float *Z,
                         const float *logits, const int32_t *targets);
/* The logits' gradient into the scratch's d_logits. */
float *vocab_ce_backward(gpt_t *g, const pass_t *p, const float *logits, const int32_t *targets,
                         const float *m, const float *Z, int64_t total_tokens);
/* counts_loss where every rank of the tensor-parallel group shares the
 * loss: its rank 0 (every replica without one). */
int vocab_counts_tp_rank0(const gpt_t *g);

/* 2-D's embedding (vocab_2d.c), 3-D's too: its stream is 2-D's layout. */
void vocab_tp2d_embedding_forward(gpt_t *g, const pass_t *p, float *x, const int32_t *tokens,
                                  const float *wte, const float *wpe, const vocab_rows_hook_t *hook);
const float *vocab_tp2d_embedding_backward(gpt_t *g, const pass_t *p, acc_t *dwte, acc_t *dwpe,
                                           const float *d, const int32_t *tokens);

#endif
