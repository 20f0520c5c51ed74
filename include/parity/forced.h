/* forced.h - a teacher-forced golden step: the local judgment's exact
 * recomputation of every unit from a backend's own inputs (issue 45).
 *
 * dump_forced_step runs step `step` on one device as dump_golden_step
 * does, except that each unit reads, instead of what parity computed
 * before it, the tensor the backend supplied (when it supplied one):
 *
 *   - before the step: the parameters the step starts from ("param.<p>"),
 *     AdamW's state before it ("exp_avg.<p>", "exp_avg_sq.<p>"); the
 *     optimizer has taken `step` steps;
 *   - forward, unit u >= 1: its input stream, the output of unit u-1
 *     ("act.embedding.output", "act.layers.<l>.output"), for the
 *     microbatch's sequences;
 *   - backward: the gradient arriving at unit u's output, the input
 *     gradient of unit u+1 ("grad_input.layers.<l>", "grad_input.head");
 *   - the update: the gradients ("grad.<p>"); the grad norm, clipping and
 *     AdamW are recomputed exactly from them.
 *
 * Names are parity's (dump.h, without the "step<s>." prefix), the arrays
 * float32 in the golden tensor's global shape. Each unit's outputs are
 * then an exact function of the backend's inputs, so a backend's error
 * cannot compound across units or steps: a tensor far from its forced
 * value is wrong in the unit that produced it. With the golden run's own
 * tensors supplied, the forced step is the golden step, bit for bit.
 *
 * What d records (dump_golden_step's names) is parity's recomputation:
 * each activation and input gradient from its unit's supplied inputs,
 * grad.<p> the forced backward's gradients; grad_norm, then param.<p>,
 * exp_avg.<p>, exp_avg_sq.<p> and adam_t after the update, from the
 * supplied gradients and starting state. A tensor not supplied is
 * parity's own: g's parameters and AdamW state as they are (before step
 * 0 AdamW's state is zeros unless supplied), the unit's own input. The
 * supplied values are used as they are (no rounding to the model's
 * dtype) and need only live until dump_forced_step returns; get is asked
 * once per name per call. g is the judge's: a one-device model from
 * gpt_new, left holding the forced step's result. Dense GPT, fp32 or
 * bf16, fp32 AdamW; other models, fp16 and adamw8bit are refused ("...
 * not supported yet"), as a step outside 0 .. INT_MAX-1, changing
 * nothing. d may be NULL. 0, or -1 with err set.
 */
#ifndef PARITY_FORCED_H
#define PARITY_FORCED_H

#include <stddef.h>

#include "parity/dump.h"
#include "parity/error.h"
#include "parity/model.h"

struct corpus;

typedef struct {
    /* The supplied tensor `name` of the step (numel elements, float32),
     * or NULL: parity's own value is used. */
    const float *(*get)(void *ctx, const char *name, size_t numel);
    void *ctx;
} forced_inputs_t;

int dump_forced_step(gpt_t *g, const struct corpus *data, int64_t step,
                     const forced_inputs_t *in, dump_t *d, gpt_step_stats_t *st, perr_t *err);

#endif
