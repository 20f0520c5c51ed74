/* config_flags.c - a model config from the model flags (model_flags.h).
 *
 * Moved here from `parity train` so that the oracle (ref/oracle/) reads
 * a model exactly as the program does: one table of flags, one order of
 * application.
 */
#include "parity/model_flags.h"

#include <stddef.h>
#include <string.h>
#include <unistd.h>

#include "parity/numparse.h"

/* OPT_TRUE: a flag without a value that clears its field (untie);
 * OPT_SET: one that sets it to 1; OPT_DROP: probs | position; OPT_OPTIM:
 * adam | adamw8bit; OPT_BF16, OPT_FP16: the precision (no value); OPT_PAD:
 * applied after every other override (model_pad_vocab); OPT_ROUTER: the
 * router's dtype, fp32 (fp64 refused). */
typedef enum {
    OPT_INT, OPT_FLOAT, OPT_U64, OPT_TRUE, OPT_SET, OPT_PAD, OPT_DROP, OPT_OPTIM, OPT_BF16, OPT_FP16,
    OPT_ROUTER
} opt_kind_t;

static int opt_has_value(opt_kind_t k) {
    return k != OPT_TRUE && k != OPT_SET && k != OPT_BF16 && k != OPT_FP16;
}

typedef struct {
    const char *flag;
    opt_kind_t kind;
    size_t offset; /* into model_config_t */
} cfg_opt_t;

#define OFF(f) offsetof(model_config_t, f)
static const cfg_opt_t cfg_opts[] = {
    {"--num-layers", OPT_INT, OFF(layers)},
    {"--encoder-num-layers", OPT_INT, OFF(encoder_layers)},
    {"--encoder-seq-length", OPT_INT, OFF(encoder_seq_length)},
    {"--hidden-size", OPT_INT, OFF(hidden)},
    {"--num-attention-heads", OPT_INT, OFF(heads)},
    {"--ffn-hidden-size", OPT_INT, OFF(ffn)},
    {"--seq-length", OPT_INT, OFF(seq_length)},
    {"--vocab-size", OPT_INT, OFF(vocab)},
    {"--global-batch-size", OPT_INT, OFF(global_batch)},
    {"--micro-batch-size", OPT_INT, OFF(micro_batch)},
    {"--seed", OPT_U64, OFF(seed)},
    {"--untie-embeddings-and-output-weights", OPT_TRUE, OFF(tied)},
    {"--hidden-dropout", OPT_FLOAT, OFF(hidden_dropout)},
    {"--attention-dropout", OPT_FLOAT, OFF(attention_dropout)},
    {"--lr", OPT_FLOAT, OFF(lr)},
    {"--min-lr", OPT_FLOAT, OFF(min_lr)},
    {"--lr-warmup-iters", OPT_INT, OFF(warmup)},
    {"--lr-decay-iters", OPT_INT, OFF(decay_steps)},
    {"--adam-beta1", OPT_FLOAT, OFF(beta1)},
    {"--adam-beta2", OPT_FLOAT, OFF(beta2)},
    {"--adam-eps", OPT_FLOAT, OFF(eps)},
    {"--weight-decay", OPT_FLOAT, OFF(weight_decay)},
    {"--clip-grad", OPT_FLOAT, OFF(clip_grad)},
    {"--optimizer", OPT_OPTIM, OFF(optimizer)},
    {"--optimizer-block", OPT_INT, OFF(optimizer_block)},
    {"--tile-tokens", OPT_INT, OFF(tile_tokens)},
    {"--tile-features", OPT_INT, OFF(tile_features)},
    {"--tile-ffn", OPT_INT, OFF(tile_ffn)},
    {"--num-experts", OPT_INT, OFF(moe_experts)},
    {"--moe-router-topk", OPT_INT, OFF(moe_topk)},
    {"--moe-layer-freq", OPT_INT, OFF(moe_layer_freq)},
    {"--moe-router-pre-softmax", OPT_SET, OFF(moe_pre_softmax)},
    {"--moe-aux-loss-coeff", OPT_FLOAT, OFF(moe_aux_loss_coeff)},
    {"--moe-z-loss-coeff", OPT_FLOAT, OFF(moe_z_loss_coeff)},
    {"--moe-expert-capacity-factor", OPT_FLOAT, OFF(moe_capacity_factor)},
    {"--moe-token-drop-policy", OPT_DROP, OFF(moe_drop_position)},
    {"--moe-router-dtype", OPT_ROUTER, OFF(moe_router_dtype)},
    {"--bf16", OPT_BF16, OFF(precision)},
    {"--fp16", OPT_FP16, OFF(precision)},
    {"--loss-scale", OPT_FLOAT, OFF(loss_scale)},
    {"--initial-loss-scale", OPT_FLOAT, OFF(initial_loss_scale)},
    {"--min-loss-scale", OPT_FLOAT, OFF(min_loss_scale)},
    {"--loss-scale-window", OPT_INT, OFF(loss_scale_window)},
    {"--hysteresis", OPT_INT, OFF(hysteresis)},
    {"--make-vocab-size-divisible-by", OPT_PAD, OFF(vocab)},
};
#undef OFF

static const cfg_opt_t *find_opt(const char *flag) {
    for (size_t k = 0; k < sizeof cfg_opts / sizeof cfg_opts[0]; k++)
        if (!strcmp(flag, cfg_opts[k].flag)) return &cfg_opts[k];
    return NULL;
}

int model_flag_known(const char *flag, int *takes_value) {
    const cfg_opt_t *o = find_opt(flag);
    if (o && takes_value) *takes_value = opt_has_value(o->kind);
    return o != NULL;
}

static int apply_opt(model_config_t *c, const cfg_opt_t *o, const char *val, perr_t *err) {
    char *field = (char *)c + o->offset;
    long long v;
    /* the policy's own message for a value such as "--x" (probs or position) */
    if (o->kind == OPT_DROP && !val)
        return perr_set(err, "%s needs a value (probs or position)", o->flag);
    if (opt_has_value(o->kind) && o->kind != OPT_DROP && num_flag_value(o->flag, val, err))
        return -1;
    switch (o->kind) {
    case OPT_INT:
        if (num_parse_int(o->flag, val, -2147483647LL, 2147483647LL, &v, err)) return -1;
        *(int *)field = (int)v;
        return 0;
    case OPT_U64:
        if (num_parse_int(o->flag, val, 0, 9007199254740992LL, &v, err)) return -1;
        *(uint64_t *)field = (uint64_t)v;
        return 0;
    case OPT_FLOAT:
        return num_parse_f32(o->flag, val, (float *)field, err);
    /* a flag without a value turns one thing on; given where the model
     * already has it, it would change nothing: refused, as any flag that
     * cannot apply (flag_applies) */
    case OPT_TRUE:
        if (*(int *)field == 0)
            return perr_set(err, "%s: model %s's output weights are already its own (untied "
                                 "from the embedding)", o->flag, c->name);
        *(int *)field = 0; /* --untie-embeddings-and-output-weights */
        return 0;
    case OPT_SET:
        if (*(int *)field == 1)
            return perr_set(err, "%s: model %s has it already", o->flag, c->name);
        *(int *)field = 1;
        return 0;
    case OPT_BF16:
    case OPT_FP16: { /* one precision: given both, which would win is a guess */
        const int want = o->kind == OPT_BF16 ? MODEL_BF16 : MODEL_FP16;
        if (*(int *)field && *(int *)field != want)
            return perr_set(err, "--bf16 and --fp16: give one");
        if (*(int *)field == want)
            return perr_set(err, "%s: model %s is %s already", o->flag, c->name,
                            model_precision_name(want));
        *(int *)field = want;
        return 0;
    }
    case OPT_DROP:
        if (strcmp(val, "probs") && strcmp(val, "position"))
            return perr_set(err, "%s '%s': expected probs or position", o->flag, val);
        *(int *)field = !strcmp(val, "position");
        return 0;
    case OPT_OPTIM: /* Megatron's --optimizer adam is AdamW, as parity's */
        if (strcmp(val, "adam") && strcmp(val, "adamw8bit"))
            return perr_set(err, "%s '%s': expected adam (AdamW, fp32 state) or adamw8bit (8-bit "
                                 "block-wise state)", o->flag, val);
        *(int *)field = !strcmp(val, "adamw8bit") ? MODEL_OPT_ADAMW8BIT : MODEL_OPT_ADAM;
        return 0;
    case OPT_ROUTER: /* Megatron-core's choices: fp32, fp64 (default: the model's dtype) */
        if (!strcmp(val, "fp64"))
            return perr_set(err, "%s fp64: not built (parity's exact sums round to fp32 once; an "
                                 "fp64 router would need them rounded to fp64); expected fp32, or "
                                 "no flag for the router in the model's dtype", o->flag);
        if (strcmp(val, "fp32"))
            return perr_set(err, "%s '%s': expected fp32 (Megatron-core's fp32 or fp64; no flag: "
                                 "the router in the model's dtype)", o->flag, val);
        *(int *)field = MOE_ROUTER_FP32;
        return 0;
    case OPT_PAD:
        return 0; /* model_config_from_flags, after the other overrides */
    }
    return -1;
}

/* The dynamic loss scaler's knobs: 0 in a config means "the default",
 * so a flag's 0 would silently mean 2^32 (or 1, 1000, 2). */
static int is_scaler_knob(const char *flag) {
    return !strcmp(flag, "--initial-loss-scale") || !strcmp(flag, "--min-loss-scale") ||
           !strcmp(flag, "--loss-scale-window") || !strcmp(flag, "--hysteresis");
}

/* A flag that cannot apply to the model it is given for is refused,
 * naming it and why (CONTRIBUTING, "Files, flags and bad input"), never
 * accepted and ignored: here, after every override (--num-experts may
 * come after --moe-router-topk), is where what the model has is known.
 * The layout's flags against the model: engine_check_model. */
static int flag_applies(const cfg_opt_t *o, const model_config_t *c, perr_t *err) {
    const char *f = o->flag;
    const void *field = (const char *)c + o->offset;
    if (!strncmp(f, "--moe-", 6) && c->moe_experts == 0)
        return perr_set(err, "%s: model %s has no experts (a dense MLP in every layer); give "
                             "--num-experts E for a mixture of experts", f, c->name);
    if (!strcmp(f, "--moe-token-drop-policy") && !(c->moe_capacity_factor > 0.0f))
        return perr_set(err, "%s: the experts are dropless (--moe-expert-capacity-factor 0): no "
                             "token is dropped, so there is nothing to choose by", f);
    if (!strncmp(f, "--encoder-", 10) && c->arch == MODEL_GPT)
        return perr_set(err, "%s: model %s is decoder-only: a GPT (arch gpt) has no encoder", f,
                        c->name);
    if (!strcmp(f, "--optimizer-block") && c->optimizer != MODEL_OPT_ADAMW8BIT)
        return perr_set(err, "%s: only --optimizer adamw8bit quantizes its state in blocks (the "
                             "optimizer is %s)", f, model_optimizer_name(c->optimizer));
    /* validate refuses a nonzero scale without fp16; a 0 (dynamic, or a
     * knob's default) would be ignored there */
    if ((is_scaler_knob(f) || !strcmp(f, "--loss-scale")) && c->precision != MODEL_FP16)
        return perr_set(err, "%s: loss scaling is for --fp16 (the model is %s)", f,
                        model_precision_name(c->precision));
    if (is_scaler_knob(f) &&
        (o->kind == OPT_FLOAT ? *(const float *)field == 0.0f : *(const int *)field == 0))
        return perr_set(err, "%s: 0 is no setting of the dynamic loss scaler (leave the flag out "
                             "for its default)", f);
    return 0;
}

int model_config_base(const char *model, model_config_t *cfg, perr_t *err) {
    perr_t e;
    if (!model_config_builtin(model, cfg, &e)) return 0;
    const char *ext = strrchr(model, '.');
    if (access(model, F_OK) && !(ext && !strcmp(ext, ".json")))
        return perr_set(err, "--model: %s", e.msg);
    model_config_builtin("gpt-tiny", cfg, NULL);
    model_config_t empty = *cfg;
    empty.vocab = empty.seq_length = empty.hidden = empty.heads = empty.layers = 0;
    empty.ffn = empty.tile_tokens = empty.tile_features = empty.tile_ffn = 0;
    empty.global_batch = empty.micro_batch = 0;
    const char *base = strrchr(model, '/');
    snprintf(empty.name, sizeof empty.name, "%s", base ? base + 1 : model);
    char *dot = strrchr(empty.name, '.');
    if (dot && !strcmp(dot, ".json")) *dot = 0;
    *cfg = empty;
    return model_config_load(model, cfg, err);
}

int model_config_from_flags(const char *model, int n, const char *const *flag,
                            const char *const *val, model_config_t *cfg, int *micro_given,
                            perr_t *err) {
    perr_t e;
    if (model_config_base(model, cfg, err)) return -1;
    int micro = 0, pad_at = -1;
    for (int k = 0; k < n; k++) {
        const cfg_opt_t *o = find_opt(flag[k]);
        if (!o) return perr_set(err, "'%s' is not a model flag", flag[k]);
        if (apply_opt(cfg, o, val[k], err)) return -1;
        if (o->offset == offsetof(model_config_t, micro_batch)) micro = 1;
        if (o->kind == OPT_PAD) pad_at = k;
    }
    if (pad_at >= 0) { /* after --vocab-size wherever it stands */
        long long v;
        if (num_parse_int(flag[pad_at], val[pad_at], -2147483647LL, 2147483647LL, &v, err) ||
            model_pad_vocab(cfg, v, flag[pad_at], err))
            return -1;
    }
    /* A global batch the built-in's micro batch does not fit: one microbatch
     * (the golden schedule's; a layout's come from --accum-degree). */
    if (!micro && cfg->global_batch > 0 &&
        (cfg->micro_batch > cfg->global_batch || cfg->global_batch % cfg->micro_batch))
        cfg->micro_batch = cfg->global_batch;
    if (micro_given) *micro_given = micro;
    if (model_config_validate(cfg, &e)) return perr_set(err, "invalid config: %s", e.msg);
    for (int k = 0; k < n; k++)
        if (flag_applies(find_opt(flag[k]), cfg, err)) return -1;
    return 0;
}
