/* schedule.c - learning rate: linear warm-up, then cosine to min_lr.
 *
 * MODEL.md's formula, in fp32 with pmath's cosine. Megatron's decay
 * ratio: (s - warmup) / (decay_steps - warmup). decay_steps = 0 means no
 * decay (lr after warm-up); past decay_steps the rate stays at min_lr. */
#include "model/gpt.h"

#include "parity/pmath.h"

static const float PI_F = 3.14159265358979f; /* pi rounded to fp32 */

float lr_schedule(const model_config_t *c, int64_t s) {
    if (c->warmup > 0 && s < c->warmup) return c->lr * (float)(s + 1) / (float)c->warmup;
    if (c->decay_steps == 0) return c->lr;
    int64_t span = (int64_t)c->decay_steps - c->warmup;
    if (span <= 0 || s >= c->decay_steps) return c->min_lr;
    float ratio = (float)(s - c->warmup) / (float)span;
    float coeff = 0.5f * (1.0f + pm_cosf(PI_F * ratio));
    return c->min_lr + coeff * (c->lr - c->min_lr);
}
