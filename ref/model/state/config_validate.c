/* config_validate.c - a model config's rules (model_config_validate,
 * model_config_validate_replica), in phases: the shape (sizes, tiles,
 * batch), the training hyperparameters and optimizer, then MoE, the
 * encoder-decoder, mixed precision, and the extents the tile calls take.
 * The first rule broken names its field and flag. */
#include "model/gpt.h"

#include <float.h>
#include <math.h>
#include <stdint.h>

static int validate_moe(const model_config_t *c, perr_t *err) {
    if (c->moe_experts < 0 || c->moe_experts > MODEL_MAX_EXPERTS)
        return perr_set(err, "moe.experts (--num-experts) = %d: expected 0 (dense) to %d",
                        c->moe_experts, MODEL_MAX_EXPERTS);
    if (c->moe_experts == 0) return 0;
    if (c->moe_topk < 1 || c->moe_topk > c->moe_experts)
        return perr_set(err, "moe.topk (--moe-router-topk) = %d: expected 1 to the %d experts",
                        c->moe_topk, c->moe_experts);
    if (c->moe_layer_freq < 1)
        return perr_set(err, "moe.layer_freq (--moe-layer-freq) = %d: expected >= 1",
                        c->moe_layer_freq);
    if (!(c->moe_aux_loss_coeff >= 0.0f && isfinite(c->moe_aux_loss_coeff)))
        return perr_set(err, "moe.aux_loss_coeff (--moe-aux-loss-coeff) = %g: expected a "
                             "finite value >= 0", (double)c->moe_aux_loss_coeff);
    if (!(c->moe_z_loss_coeff >= 0.0f && isfinite(c->moe_z_loss_coeff)))
        return perr_set(err, "moe.z_loss_coeff (--moe-z-loss-coeff) = %g: expected a finite "
                             "value >= 0", (double)c->moe_z_loss_coeff);
    if (!(c->moe_capacity_factor >= 0.0f && c->moe_capacity_factor <= 1e6f))
        return perr_set(err, "moe.capacity_factor (--moe-expert-capacity-factor) = %g: expected "
                             "0 (dropless) or a positive factor up to 1e6",
                        (double)c->moe_capacity_factor);
    return 0;
}

/* An encoder-decoder's encoder (MODEL.md "Encoder-decoder models"). */
static int validate_encoder(const model_config_t *c, perr_t *err) {
    if (c->arch != MODEL_GPT && c->arch != MODEL_T5 && c->arch != MODEL_LLAVA)
        return perr_set(err, "arch = %d: expected gpt, t5 or llava", c->arch);
    if (c->arch == MODEL_LLAVA ? c->patch_dim < 1 || c->patch_dim % c->tile_features
                               : c->patch_dim != 0)
        return perr_set(err, "encoder.patch_dim = %d: %s", c->patch_dim,
                        c->arch == MODEL_LLAVA ? "expected a positive multiple of tiles.features "
                                                 "(the patch embedding's input tiles)"
                                               : "only a LLaVA-style model (arch llava) has image "
                                                 "patches; expected 0");
    if (c->arch == MODEL_GPT) {
        if (c->encoder_layers || c->encoder_seq_length)
            return perr_set(err, "encoder.layers (--encoder-num-layers) = %d, encoder.seq_length "
                                 "(--encoder-seq-length) = %d: a GPT (arch gpt) has no encoder; "
                                 "give arch t5 or leave them 0",
                            c->encoder_layers, c->encoder_seq_length);
        return 0;
    }
    if (c->encoder_layers < 1 || c->encoder_layers > MODEL_MAX_LAYERS)
        return perr_set(err, "encoder.layers (--encoder-num-layers) = %d: expected 1 to %d",
                        c->encoder_layers, MODEL_MAX_LAYERS);
    const int P = c->encoder_seq_length;
    if (P < 1 || P >= c->seq_length || P % c->tile_tokens)
        return perr_set(err, "encoder.seq_length (--encoder-seq-length) = %d: expected a multiple "
                             "of tiles.tokens = %d below seq_length = %d (the stream's source "
                             "rows, then its target rows)",
                        P, c->tile_tokens, c->seq_length);
    if (c->moe_experts)
        return perr_set(err, "moe.experts (--num-experts) = %d: an encoder-decoder (arch %s) has "
                             "dense MLPs only", c->moe_experts, model_arch_name(c->arch));
    return 0;
}

/* Mixed precision: the dtype, and loss scaling only where fp16 needs it
 * (Megatron ignores it in bf16; here a flag that would do nothing is an
 * error). Built for the GPT (dense and MoE layers) and the encoder-decoders (MODEL.md
 * "Mixed precision"). */
static int validate_precision(const model_config_t *c, perr_t *err) {
    if (c->precision < MODEL_FP32 || c->precision > MODEL_FP16)
        return perr_set(err, "precision.dtype: %d, expected fp32, bf16 or fp16", c->precision);
    /* NeMo's dtypes, as Apex's DistributedFusedAdam keeps them: the state
     * (master weights, m, v) stored in optim_dtype, the gradients synced
     * in grad_dtype, still loss-scaled under --fp16 (MODEL.md) */
    const struct { const char *field, *nemo; int v; } dts[] = {
        {"grad_dtype", "grad_sync_dtype", c->grad_dtype}, {"optim_dtype", "dtype", c->optim_dtype}};
    for (int k = 0; k < 2; k++)
        if (dts[k].v < MODEL_FP32 || dts[k].v > MODEL_FP16)
            return perr_set(err, "precision.%s (NeMo's %s): %d, expected fp32, bf16 or fp16",
                            dts[k].field, dts[k].nemo, dts[k].v);
    /* the router's dtype (MOE.md, "Mixed precision"): fp32 changes
     * something only where the model's dtype is not fp32 */
    if (c->moe_router_dtype != MOE_ROUTER_MODEL && c->moe_router_dtype != MOE_ROUTER_FP32)
        return perr_set(err, "moe.router_dtype: %d, expected fp32 or the model's dtype",
                        c->moe_router_dtype);
    if (c->moe_router_dtype == MOE_ROUTER_FP32 && c->precision == MODEL_FP32)
        return perr_set(err, "moe.router_dtype (--moe-router-dtype) fp32: the model is fp32 "
                             "already (the router's dtype is a choice under --bf16 or --fp16)");
    struct { const char *flag; double v; } scaling[] = {
        {"--loss-scale", c->loss_scale}, {"--initial-loss-scale", c->initial_loss_scale},
        {"--min-loss-scale", c->min_loss_scale}, {"--loss-scale-window", c->loss_scale_window},
        {"--hysteresis", c->hysteresis}};
    for (size_t i = 0; i < sizeof scaling / sizeof scaling[0]; i++) {
        if (scaling[i].v != 0 && c->precision != MODEL_FP16)
            return perr_set(err, "%s: loss scaling is for --fp16 (the model is %s)",
                            scaling[i].flag, model_precision_name(c->precision));
        if (!(scaling[i].v >= 0 && scaling[i].v <= 0x1p127))
            return perr_set(err, "%s: %g, expected a finite value >= 0 (0: %s)", scaling[i].flag,
                            scaling[i].v, i ? "Megatron's default" : "dynamic scaling");
        /* the dynamic scaler's knobs: a static scale never moves */
        if (i && scaling[i].v != 0 && c->loss_scale != 0)
            return perr_set(err, "%s: a knob of the dynamic loss scaler, but --loss-scale %g is "
                                 "static (never grown or backed off); give --loss-scale 0 or leave "
                                 "it out for dynamic scaling", scaling[i].flag,
                            (double)c->loss_scale);
    }
    if (c->optim_dtype != MODEL_FP32 && c->optimizer != MODEL_OPT_ADAM)
        return perr_set(err, "precision.optim_dtype (NeMo's dtype, --dtype): a bf16/fp16 state is for "
                             "--optimizer adam (adamw8bit keeps its own 8-bit state)");
    float initial, min;
    int window, hysteresis;
    model_loss_scaling(c, &initial, &min, &window, &hysteresis);
    if (min > initial)
        return perr_set(err, "--min-loss-scale: %g exceeds --initial-loss-scale %g", (double)min,
                        (double)initial);
    return 0;
}

/* whole_microbatches: micro_batch must divide global_batch (the golden
 * schedule, gpt_train_step); else it need only not exceed it (a replica
 * sized for a layout's largest microbatch, model.h). */
static int validate_shape(const model_config_t *c, int whole_microbatches, perr_t *err) {
    struct { const char *field, *flag; int v; } pos[] = {
        {"vocab", "--vocab-size", c->vocab},
        {"seq_length", "--seq-length", c->seq_length},
        {"hidden", "--hidden-size", c->hidden},
        {"heads", "--num-attention-heads", c->heads},
        {"layers", "--num-layers", c->layers},
        {"ffn", "--ffn-hidden-size", c->ffn},
        {"tiles.tokens", "--tile-tokens", c->tile_tokens},
        {"tiles.features", "--tile-features", c->tile_features},
        {"tiles.ffn", "--tile-ffn", c->tile_ffn},
        {"global_batch", "--global-batch-size", c->global_batch},
        {"micro_batch", "--micro-batch-size", c->micro_batch}};
    for (size_t i = 0; i < sizeof pos / sizeof pos[0]; i++)
        if (pos[i].v <= 0)
            return perr_set(err, "%s (%s) = %d: must be a positive integer", pos[i].field,
                            pos[i].flag, pos[i].v);
    /* Sizes and counts in 64 bits, before anything multiplies them in int
     * (the parameter table's 4 + 12 x layers tensors, token counts): each
     * limit names its field. The products of two sizes are checked below. */
    if (c->layers > MODEL_MAX_LAYERS)
        return perr_set(err, "layers (--num-layers) = %d: expected at most %d (the parameter "
                             "table holds 12 tensors a layer)",
                        c->layers, MODEL_MAX_LAYERS);
    if ((int64_t)c->global_batch * c->seq_length > MODEL_MAX_TOKENS)
        return perr_set(err, "global_batch (--global-batch-size) = %d x seq_length "
                             "(--seq-length) = %d: expected at most %lld tokens a step",
                        c->global_batch, c->seq_length, (long long)MODEL_MAX_TOKENS);
    if (c->hidden % c->heads)
        return perr_set(err,
                        "hidden (--hidden-size) = %d is not a multiple of heads "
                        "(--num-attention-heads) = %d",
                        c->hidden, c->heads);
    int D = c->hidden / c->heads;
    if (c->seq_length % c->tile_tokens)
        return perr_set(err, "tiles.tokens (--tile-tokens) = %d does not divide seq_length = %d",
                        c->tile_tokens, c->seq_length);
    if (c->hidden % c->tile_features)
        return perr_set(err, "tiles.features (--tile-features) = %d does not divide hidden = %d",
                        c->tile_features, c->hidden);
    if (c->vocab % c->tile_features)
        return perr_set(err, "tiles.features (--tile-features) = %d does not divide vocab = %d",
                        c->tile_features, c->vocab);
    if (c->tile_features % D)
        return perr_set(err,
                        "tiles.features (--tile-features) = %d must hold whole heads: it is not "
                        "a multiple of the head size hidden/heads = %d",
                        c->tile_features, D);
    if (c->ffn % c->tile_ffn)
        return perr_set(err, "tiles.ffn (--tile-ffn) = %d does not divide ffn = %d", c->tile_ffn,
                        c->ffn);
    if (!whole_microbatches && c->micro_batch > c->global_batch)
        return perr_set(err,
                        "micro_batch (--micro-batch-size) = %d exceeds global_batch "
                        "(--global-batch-size) = %d",
                        c->micro_batch, c->global_batch);
    if (whole_microbatches && c->global_batch % c->micro_batch)
        return perr_set(err,
                        "micro_batch (--micro-batch-size) = %d does not divide global_batch "
                        "(--global-batch-size) = %d",
                        c->micro_batch, c->global_batch);
    return 0;
}

/* The dropouts, the schedule and AdamW's hyperparameters (finite, in
 * range), the optimizer and its block. */
static int validate_training(const model_config_t *c, perr_t *err) {
    if (!(c->hidden_dropout >= 0.0f && c->hidden_dropout < 1.0f))
        return perr_set(err, "dropouts.hidden (--hidden-dropout) = %g: expected 0 <= p < 1",
                        (double)c->hidden_dropout);
    if (!(c->attention_dropout >= 0.0f && c->attention_dropout < 1.0f))
        return perr_set(err, "dropouts.attention (--attention-dropout) = %g: expected 0 <= p < 1",
                        (double)c->attention_dropout);
    /* ranges below are closed to infinity too: an inf hyperparameter turns
     * every value into inf or NaN, and its config would not read back */
    if (!(c->ln_eps > 0.0f && isfinite(c->ln_eps)))
        return perr_set(err, "ln_eps = %g: expected a finite value > 0", (double)c->ln_eps);
    if (!(c->lr >= 0.0f && isfinite(c->lr)))
        return perr_set(err, "lr (--lr) = %g: expected a finite value >= 0", (double)c->lr);
    if (!(c->min_lr >= 0.0f && isfinite(c->min_lr)))
        return perr_set(err, "min_lr (--min-lr) = %g: expected a finite value >= 0",
                        (double)c->min_lr);
    if (c->warmup < 0)
        return perr_set(err, "warmup (--lr-warmup-iters) = %d: expected >= 0", c->warmup);
    /* the warm-up computes lr * (step + 1) in fp32 before dividing by
     * the warm-up length (MODEL.md), so that product must stay finite */
    if (c->warmup > 0 && !isfinite(c->lr * (float)c->warmup))
        return perr_set(err, "lr (--lr) = %g: lr x warmup (--lr-warmup-iters %d) overflows fp32 in "
                             "the warm-up schedule; expected lr <= %g",
                        (double)c->lr, c->warmup, (double)(FLT_MAX / (float)c->warmup));
    if (c->decay_steps < 0)
        return perr_set(err, "decay_steps (--lr-decay-iters) = %d: expected >= 0",
                        c->decay_steps);
    if (!(c->beta1 >= 0.0f && c->beta1 < 1.0f))
        return perr_set(err, "beta1 (--adam-beta1) = %g: expected 0 <= beta1 < 1",
                        (double)c->beta1);
    if (!(c->beta2 >= 0.0f && c->beta2 < 1.0f))
        return perr_set(err, "beta2 (--adam-beta2) = %g: expected 0 <= beta2 < 1",
                        (double)c->beta2);
    if (!(c->eps > 0.0f && isfinite(c->eps)))
        return perr_set(err, "eps (--adam-eps) = %g: expected a finite value > 0", (double)c->eps);
    if (!(c->weight_decay >= 0.0f && isfinite(c->weight_decay)))
        return perr_set(err, "weight_decay (--weight-decay) = %g: expected a finite value >= 0",
                        (double)c->weight_decay);
    if (!(c->clip_grad >= 0.0f && isfinite(c->clip_grad)))
        return perr_set(err,
                        "clip_grad (--clip-grad) = %g: expected a finite value >= 0 (0 turns "
                        "clipping off)",
                        (double)c->clip_grad);
    if (c->optimizer != MODEL_OPT_ADAM && c->optimizer != MODEL_OPT_ADAMW8BIT)
        return perr_set(err, "optimizer = %d: expected adam or adamw8bit", c->optimizer);
    if (c->optimizer == MODEL_OPT_ADAM && c->optimizer_block != ADAM8_DEFAULT_BLOCK)
        return perr_set(err, "optimizer.block (--optimizer-block) = %d: only --optimizer "
                             "adamw8bit quantizes its state in blocks", c->optimizer_block);
    if (c->optimizer_block < 1 || c->optimizer_block > ADAM8_MAX_BLOCK)
        return perr_set(err, "optimizer.block (--optimizer-block) = %d: expected 1 to %d elements",
                        c->optimizer_block, ADAM8_MAX_BLOCK);
    return 0;
}

static int validate(const model_config_t *c, int whole_microbatches, perr_t *err) {
    if (validate_shape(c, whole_microbatches, err) || validate_training(c, err)) return -1;
    if (validate_moe(c, err)) return -1;
    if (validate_encoder(c, err)) return -1;
    if (validate_precision(c, err)) return -1;
    /* Element counts are size_t, but tile calls take int extents. */
    if ((int64_t)c->micro_batch * c->seq_length > (1 << 24) ||
        (int64_t)c->vocab * c->hidden > (1 << 30) || (int64_t)c->ffn * c->hidden > (1 << 30))
        return perr_set(err, "model too large for this reference implementation "
                             "(micro_batch*seq_length <= 2^24, vocab*hidden and ffn*hidden <= 2^30)");
    return 0;
}

int model_config_validate(const model_config_t *c, perr_t *err) { return validate(c, 1, err); }

int model_config_validate_replica(const model_config_t *c, perr_t *err) {
    return validate(c, 0, err);
}
