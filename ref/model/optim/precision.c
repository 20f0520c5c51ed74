/* precision.c - mixed precision's state outside the kernels (MODEL.md
 * "Mixed precision"): the parameters' compute copy and fp16's loss
 * scaler.
 *
 * The master weights, the gradients and AdamW's state stay fp32; the
 * forward and backward read a copy of the weights rounded to the model's
 * dtype, refreshed whenever the master weights change. Rounding is
 * elementwise, so a replica's block, a ZeRO-3 gather or the golden run's
 * whole model round alike.
 *
 * Loss scaling follows Megatron's DynamicGradScaler: the loss gradient is
 * multiplied by the scale once (unit_head.c), the rounded gradients by its
 * inverse before their norm; a step whose global norm is not finite is
 * skipped, and the scale halves once `hysteresis` steps have overflowed
 * (not below the minimum), doubling after loss_scale_window clean steps.
 * The norm is the exact global one every rank computes alike (I2), so
 * every layout skips the same steps with the same scales. */
#include "model/gpt.h"

#include <math.h>

#include "parity/ckpt.h"
#include "parity/pmath.h"

void model_round_to(int dtype, float *x, size_t n) {
    if (dtype == MODEL_BF16) pm_round_bf16_array(x, n);
    else if (dtype == MODEL_FP16) pm_round_fp16_array(x, n);
}

void gpt_round_params(const model_config_t *c, float *p, size_t n) { model_round_to(c->precision, p, n); }

void gpt_round_optim_state(const model_config_t *c, float *p, float *m, float *v, size_t n) {
    model_round_to(c->optim_dtype, p, n);
    model_round_to(c->optim_dtype, m, n);
    model_round_to(c->optim_dtype, v, n);
}

void gpt_finish_grads(const loss_scaler_t *s, const model_config_t *c, float *grads, size_t n) {
    model_round_to(c->grad_dtype, grads, n); /* NeMo's grad_sync_dtype: the sum synced in it */
    loss_scaler_unscale(s, c, grads, n);
}

void gpt_params_refresh(gpt_t *g) {
    if (!g->params_lp || !g->params) return;
    for (size_t i = 0; i < g->table.total; i++) g->params_lp[i] = g->params[i];
    gpt_round_params(&g->cfg, g->params_lp, g->table.total);
}

void gpt_scaler_from_ckpt(gpt_t *g, const ckpt_scaler_t *s) {
    if (g->cfg.precision != MODEL_FP16) return;
    g->scaler = (loss_scaler_t){s->scale, s->growth, s->hysteresis_left, s->skipped};
}

void gpt_scaler_to_ckpt(const gpt_t *g, ckpt_scaler_t *s) {
    const loss_scaler_t *l = &g->scaler;
    *s = g->cfg.precision == MODEL_FP16
             ? (ckpt_scaler_t){l->scale, l->growth, l->hysteresis_left, l->skipped}
             : (ckpt_scaler_t){0.0f, 0, 0, 0};
}

void loss_scaler_init(loss_scaler_t *s, const model_config_t *c) {
    float initial, min;
    int window, hysteresis;
    model_loss_scaling(c, &initial, &min, &window, &hysteresis);
    s->scale = c->loss_scale > 0.0f ? c->loss_scale : initial;
    s->growth = 0;
    s->hysteresis_left = hysteresis;
    s->skipped = 0;
}

int loss_scaler_step(loss_scaler_t *s, const model_config_t *c, int found_inf) {
    if (c->precision != MODEL_FP16) return 0;
    float initial, min;
    int window, hysteresis;
    model_loss_scaling(c, &initial, &min, &window, &hysteresis);
    if (found_inf) s->skipped++;
    if (c->loss_scale > 0.0f) return found_inf; /* static: skip, keep the scale */
    if (found_inf) {
        s->growth = 0;
        if (--s->hysteresis_left <= 0) {
            const float half = s->scale * 0.5f;
            s->scale = half > min ? half : min;
        }
        return 1;
    }
    if (++s->growth == window) {
        s->growth = 0;
        s->hysteresis_left = hysteresis;
        s->scale = s->scale * 2.0f;
    }
    return 0;
}

void loss_scaler_unscale(const loss_scaler_t *s, const model_config_t *c, float *grads, size_t n) {
    if (c->precision != MODEL_FP16) return;
    const float inv = 1.0f / s->scale;
    for (size_t i = 0; i < n; i++) grads[i] = grads[i] * inv;
}
