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
