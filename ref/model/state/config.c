/* config.c - built-in models, JSON config files, validation.
 *
 * A config file is the same JSON object a dump stores as its "config"
 * metadata, so any dump's config can be fed back in. Fields present
 * override the starting config; "base" names a built-in to start from.
 */
#include "model/gpt.h"

#include <errno.h>
#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "parity/fileio.h"
#include "parity/json.h"
#include "parity/numparse.h"

/* Shared optimizer and dropout settings of the built-ins (the lead's
 * issue #3 notes): AdamW 0.9/0.95, warm-up 2 then cosine to lr/10. */
static void common_defaults(model_config_t *c) {
    memset(c, 0, sizeof *c);
    c->tied = 1;
    c->hidden_dropout = 0.1f;
    c->attention_dropout = 0.1f;
    c->ln_eps = 1e-5f;
    c->seed = 1234;
    c->lr = 1e-3f;
    c->min_lr = 1e-4f;
    c->warmup = 2;
    c->decay_steps = 100;
    c->beta1 = 0.9f;
    c->beta2 = 0.95f;
    c->eps = 1e-8f;
    c->weight_decay = 0.1f;
    c->clip_grad = 1.0f;
    c->optimizer = MODEL_OPT_ADAM;
    c->optimizer_block = ADAM8_DEFAULT_BLOCK; /* inert under adam */
    c->moe_topk = 2; /* Megatron's defaults; inert while moe_experts is 0 */
    c->moe_layer_freq = 1;
}

void model_loss_scaling(const model_config_t *c, float *initial, float *min, int *window,
                        int *hysteresis) {
    *initial = c->initial_loss_scale > 0 ? c->initial_loss_scale : 0x1p32f;
    *min = c->min_loss_scale > 0 ? c->min_loss_scale : 1.0f;
    *window = c->loss_scale_window > 0 ? c->loss_scale_window : 1000;
    *hysteresis = c->hysteresis > 0 ? c->hysteresis : 2;
}

const char *model_precision_name(int precision) {
    return precision == MODEL_BF16 ? "bf16" : precision == MODEL_FP16 ? "fp16" : "fp32";
}

static const char *const builtin_names[] = {"gpt-micro", "gpt-tiny", "gpt-small", "gpt-124m",
                                            "t5-tiny",   "t5-small", "llava-tiny", NULL};

const char *model_arch_name(int arch) {
    return arch == MODEL_T5 ? "t5" : arch == MODEL_LLAVA ? "llava" : "gpt";
}

const char *const *model_builtin_names(void) { return builtin_names; }

const char *model_optimizer_name(int optimizer) {
    return optimizer == MODEL_OPT_ADAMW8BIT ? "adamw8bit" : "adam";
}

int model_config_builtin(const char *name, model_config_t *c, perr_t *err) {
    common_defaults(c);
    if (!strcmp(name, "gpt-micro")) {
        /* Small enough that a full 3-step dump (< 1 MB) lives in golden/. */
        c->vocab = 256, c->seq_length = 16, c->hidden = 16, c->heads = 2, c->layers = 2;
        c->ffn = 64;
        c->tile_tokens = 4, c->tile_features = 8, c->tile_ffn = 16;
        c->global_batch = 4, c->micro_batch = 2;
    } else if (!strcmp(name, "gpt-tiny")) {
        /* Every degree the layout tests use lands on tile boundaries:
         * 8 token tiles per sequence, 8 feature tiles (one head each),
         * 8 ffn tiles, 8 layers, and B = 24 divides by dp in 1,2,3,4,6,8. */
        c->vocab = 256, c->seq_length = 32, c->hidden = 64, c->heads = 8, c->layers = 8;
        c->ffn = 256;
        c->tile_tokens = 4, c->tile_features = 8, c->tile_ffn = 32;
        c->global_batch = 24, c->micro_batch = 24;
    } else if (!strcmp(name, "gpt-124m")) {
        /* GPT-2 small's shape (124M parameters, 50304 = 50257 padded to
         * a multiple of 64); no dropout, as gpt-small. Its tiles admit
         * tp 1, 2, 4, 8 (786 vocabulary tiles, split unevenly where tp
         * does not divide them; 12 feature tiles = 12 heads of 64; 8 ffn
         * tiles) and cp 2 and 4 (8 token tiles). ~5 GB and ~30 s a step
         * on one core. */
        c->vocab = 50304, c->seq_length = 1024, c->hidden = 768, c->heads = 12, c->layers = 12;
        c->ffn = 3072;
        c->tile_tokens = 128, c->tile_features = 64, c->tile_ffn = 384;
        c->global_batch = 1, c->micro_batch = 1;
        c->hidden_dropout = 0.0f, c->attention_dropout = 0.0f;
    } else if (!strcmp(name, "gpt-small")) {
        /* The benchmark model (3,257,856 parameters, 1024 tokens a step);
         * large tiles for speed, no dropout (as the PyTorch anchor). */
        c->vocab = 256, c->seq_length = 128, c->hidden = 256, c->heads = 8, c->layers = 4;
        c->ffn = 1024;
        c->tile_tokens = 128, c->tile_features = 128, c->tile_ffn = 256;
        c->global_batch = 8, c->micro_batch = 8;
        c->hidden_dropout = 0.0f, c->attention_dropout = 0.0f;
    } else if (!strcmp(name, "t5-tiny")) {
        /* An encoder-decoder (MODEL.md "Encoder-decoder models"): 16
         * source then 16 target positions a sequence, 2 encoder and 2
         * decoder layers; 8 heads (tp 2, 4, 8), 8 token tiles (sp). */
        c->arch = MODEL_T5, c->tied = 0; /* T5 v1.1's own LM head */
        c->vocab = 256, c->seq_length = 32, c->hidden = 64, c->heads = 8, c->layers = 2;
        c->encoder_layers = 2, c->encoder_seq_length = 16;
        c->ffn = 256;
        c->tile_tokens = 4, c->tile_features = 8, c->tile_ffn = 32;
        c->global_batch = 8, c->micro_batch = 8;
    } else if (!strcmp(name, "llava-tiny")) {
        /* A LLaVA-style model (MODEL.md "Encoder-decoder models"): 16
         * image patches of 48 values (a ViT of 2 layers and a projector)
         * before 16 text positions of a 2-layer GPT decoder; the loss on
         * the text. t5-tiny's widths and tiles. */
        c->arch = MODEL_LLAVA, c->tied = 0;
        c->vocab = 256, c->seq_length = 32, c->hidden = 64, c->heads = 8, c->layers = 2;
        c->encoder_layers = 2, c->encoder_seq_length = 16, c->patch_dim = 48;
        c->ffn = 256;
        c->tile_tokens = 4, c->tile_features = 8, c->tile_ffn = 32;
        c->global_batch = 8, c->micro_batch = 8;
    } else if (!strcmp(name, "t5-small")) {
        /* The encoder-decoder benchmark: gpt-small's widths, 128 source
         * and 128 target positions, 4 + 4 layers, no dropout. */
        c->arch = MODEL_T5, c->tied = 0;
        c->vocab = 256, c->seq_length = 256, c->hidden = 256, c->heads = 8, c->layers = 4;
        c->encoder_layers = 4, c->encoder_seq_length = 128;
        c->ffn = 1024;
        c->tile_tokens = 128, c->tile_features = 128, c->tile_ffn = 256;
        c->global_batch = 4, c->micro_batch = 4;
        c->hidden_dropout = 0.0f, c->attention_dropout = 0.0f;
    } else {
        char list[256] = "";
        for (const char *const *n = builtin_names; *n; n++) {
            if (n != builtin_names) strncat(list, ", ", sizeof list - strlen(list) - 1);
            strncat(list, *n, sizeof list - strlen(list) - 1);
        }
        return perr_set(err, "unknown model '%s' (built-in models: %s; or give a .json config file)",
                        name, list);
    }
    snprintf(c->name, sizeof c->name, "%s", name);
    return 0;
}

/* ---- JSON config files -------------------------------------------------- */

static int get_int(const json_t *obj, const char *key, const char *path, int *out, perr_t *err) {
    const json_t *v = json_get(obj, key);
    if (!v) return 0;
    int64_t x;
    if (json_type(v) != JSON_NUMBER || json_int64(v, &x) || x < -2147483647 || x > 2147483647)
        return perr_set(err, "%s: field '%s': expected an integer, got %s", path, key,
                        json_type(v) == JSON_NUMBER ? "a non-integral or too large number"
                                                    : json_type_name(json_type(v)));
    *out = (int)x;
    return 0;
}

static int get_float(const json_t *obj, const char *key, const char *path, float *out,
                     perr_t *err) {
    const json_t *v = json_get(obj, key);
    if (!v) return 0;
    if (json_type(v) != JSON_NUMBER)
        return perr_set(err, "%s: field '%s': expected a number, got %s", path, key,
                        json_type_name(json_type(v)));
    char what[300];
    snprintf(what, sizeof what, "%s: field '%s'", path, key);
    return num_to_f32(what, json_number(v), out, err);
}

static int check_keys(const json_t *obj, const char *const *allowed, const char *where,
                      const char *path, perr_t *err) {
    for (size_t i = 0; i < json_len(obj); i++) {
        const char *k = json_key_at(obj, i);
        int ok = 0;
        for (const char *const *a = allowed; *a; a++) ok |= !strcmp(k, *a);
        if (!ok) return perr_set(err, "%s: unknown field '%s%s'", path, where, k);
    }
    return 0;
}

/* "moe": {"experts", "topk", "layer_freq", "pre_softmax", "aux_loss_coeff",
 * "z_loss_coeff", "capacity_factor", "drop_policy": "probs"|"position"} */
static int apply_moe_json(const json_t *m, const char *path, model_config_t *c, perr_t *err) {
    static const char *const keys[] = {"experts",         "topk",        "layer_freq",
                                       "pre_softmax",     "aux_loss_coeff", "z_loss_coeff",
                                       "capacity_factor", "drop_policy", NULL};
    if (json_type(m) != JSON_OBJECT)
        return perr_set(err, "%s: field 'moe': expected an object {experts, topk, ...}", path);
    if (check_keys(m, keys, "moe.", path, err)) return -1;
    if (get_int(m, "experts", path, &c->moe_experts, err) ||
        get_int(m, "topk", path, &c->moe_topk, err) ||
        get_int(m, "layer_freq", path, &c->moe_layer_freq, err) ||
        get_float(m, "aux_loss_coeff", path, &c->moe_aux_loss_coeff, err) ||
        get_float(m, "z_loss_coeff", path, &c->moe_z_loss_coeff, err) ||
        get_float(m, "capacity_factor", path, &c->moe_capacity_factor, err))
        return -1;
    const json_t *pre = json_get(m, "pre_softmax");
    if (pre) {
        if (json_type(pre) != JSON_BOOL)
            return perr_set(err, "%s: field 'moe.pre_softmax': expected true or false", path);
        c->moe_pre_softmax = json_bool(pre);
    }
    const json_t *drop = json_get(m, "drop_policy");
    if (drop) {
        const char *v = json_string(drop);
        if (!v || (strcmp(v, "probs") && strcmp(v, "position")))
            return perr_set(err, "%s: field 'moe.drop_policy': expected \"probs\" or "
                                 "\"position\"", path);
        c->moe_drop_position = !strcmp(v, "position");
    }
    return 0;
}

/* "precision": {"dtype": "fp32"|"bf16"|"fp16", "loss_scale", "initial_loss_scale",
 * "min_loss_scale", "loss_scale_window", "hysteresis"} */
static int apply_precision_json(const json_t *m, const char *path, model_config_t *c, perr_t *err) {
    static const char *const keys[] = {"dtype", "loss_scale", "initial_loss_scale", "min_loss_scale",
                                       "loss_scale_window", "hysteresis", "grad_dtype",
                                       "optim_dtype", NULL};
    if (json_type(m) != JSON_OBJECT)
        return perr_set(err, "%s: field 'precision': expected an object {dtype, loss_scale, ...}",
                        path);
    if (check_keys(m, keys, "precision.", path, err) ||
        get_float(m, "loss_scale", path, &c->loss_scale, err) ||
        get_float(m, "initial_loss_scale", path, &c->initial_loss_scale, err) ||
        get_float(m, "min_loss_scale", path, &c->min_loss_scale, err) ||
        get_int(m, "loss_scale_window", path, &c->loss_scale_window, err) ||
        get_int(m, "hysteresis", path, &c->hysteresis, err))
        return -1;
    const char *names[] = {"dtype", "grad_dtype", "optim_dtype"};
    int *fields[] = {&c->precision, &c->grad_dtype, &c->optim_dtype};
    for (int f = 0; f < 3; f++) {
        const json_t *dt = json_get(m, names[f]);
        if (!dt) continue;
        const char *v = json_string(dt);
        int k = 0;
        while (k <= MODEL_FP16 && (!v || strcmp(v, model_precision_name(k)))) k++;
        if (k > MODEL_FP16)
            return perr_set(err, "%s: field 'precision.%s': expected \"fp32\", \"bf16\" or "
                                 "\"fp16\"", path, names[f]);
        *fields[f] = k;
    }
    return 0;
}

/* "optimizer": {"name": "adam"|"adamw8bit", "block": N} */
static int apply_optimizer_json(const json_t *o, const char *path, model_config_t *c,
                                perr_t *err) {
    static const char *const keys[] = {"name", "block", NULL};
    if (json_type(o) != JSON_OBJECT)
        return perr_set(err, "%s: field 'optimizer': expected an object {name, block}", path);
    if (check_keys(o, keys, "optimizer.", path, err)) return -1;
    const json_t *name = json_get(o, "name");
    if (name) {
        const char *v = json_string(name);
        if (!v || (strcmp(v, "adam") && strcmp(v, "adamw8bit")))
            return perr_set(err, "%s: field 'optimizer.name': expected \"adam\" or \"adamw8bit\"",
                            path);
        c->optimizer = !strcmp(v, "adamw8bit") ? MODEL_OPT_ADAMW8BIT : MODEL_OPT_ADAM;
    }
    return get_int(o, "block", path, &c->optimizer_block, err);
}

static int apply_json(const json_t *j, const char *path, model_config_t *c, perr_t *err) {
    static const char *const top[] = {
        "name", "base", "vocab", "seq_length", "hidden", "heads", "layers", "ffn", "tied",
        "tiles", "dropouts", "ln_eps", "seed", "global_batch", "micro_batch", "lr", "min_lr",
        "warmup", "decay_steps", "beta1", "beta2", "eps", "weight_decay", "clip_grad",
        "make_vocab_size_divisible_by", "moe", "arch", "encoder", "precision", "optimizer", NULL};
    static const char *const tiles[] = {"tokens", "features", "ffn", NULL};
    static const char *const drops[] = {"hidden", "attention", NULL};
    if (json_type(j) != JSON_OBJECT)
        return perr_set(err, "%s: expected a JSON object, got %s", path,
                        json_type_name(json_type(j)));
    if (check_keys(j, top, "", path, err)) return -1;
    const json_t *base = json_get(j, "base");
    if (base) {
        if (!json_string(base))
            return perr_set(err, "%s: field 'base': expected a model name string", path);
        perr_t e2;
        if (model_config_builtin(json_string(base), c, &e2))
            return perr_set(err, "%s: field 'base': %s", path, e2.msg);
    }
    const json_t *name = json_get(j, "name");
    if (name) {
        if (!json_string(name))
            return perr_set(err, "%s: field 'name': expected a string, got %s", path,
                            json_type_name(json_type(name)));
        const size_t len = json_string_len(name);
        /* cutting a longer name could split a UTF-8 sequence and make the
         * config's own JSON unreadable: refuse it instead */
        if (len >= sizeof c->name || strlen(json_string(name)) != len)
            return perr_set(err, "%s: field 'name': expected at most %zu bytes without U+0000, got %zu",
                            path, sizeof c->name - 1, len);
        memcpy(c->name, json_string(name), len + 1);
    }
    const json_t *tied = json_get(j, "tied");
    if (tied) {
        if (json_type(tied) != JSON_BOOL)
            return perr_set(err, "%s: field 'tied': expected true or false, got %s", path,
                            json_type_name(json_type(tied)));
        c->tied = json_bool(tied);
    }
    const json_t *seed = json_get(j, "seed");
    if (seed) {
        int64_t s;
        if (json_type(seed) != JSON_NUMBER || json_int64(seed, &s) || s < 0)
            return perr_set(err, "%s: field 'seed': expected a non-negative integer", path);
        c->seed = (uint64_t)s;
    }
    struct { const char *k; int *p; } ints[] = {
        {"vocab", &c->vocab}, {"seq_length", &c->seq_length}, {"hidden", &c->hidden},
        {"heads", &c->heads}, {"layers", &c->layers}, {"ffn", &c->ffn},
        {"global_batch", &c->global_batch}, {"micro_batch", &c->micro_batch},
        {"warmup", &c->warmup}, {"decay_steps", &c->decay_steps}};
    for (size_t i = 0; i < sizeof ints / sizeof ints[0]; i++)
        if (get_int(j, ints[i].k, path, ints[i].p, err)) return -1;
    if (json_get(j, "make_vocab_size_divisible_by")) { /* after vocab, and only here: not stored */
        int n = 0;
        char what[300];
        snprintf(what, sizeof what, "%s: field 'make_vocab_size_divisible_by'", path);
        if (get_int(j, "make_vocab_size_divisible_by", path, &n, err) ||
            model_pad_vocab(c, n, what, err))
            return -1;
    }
    struct { const char *k; float *p; } floats[] = {
        {"ln_eps", &c->ln_eps}, {"lr", &c->lr}, {"min_lr", &c->min_lr}, {"beta1", &c->beta1},
        {"beta2", &c->beta2}, {"eps", &c->eps}, {"weight_decay", &c->weight_decay},
        {"clip_grad", &c->clip_grad}};
    for (size_t i = 0; i < sizeof floats / sizeof floats[0]; i++)
        if (get_float(j, floats[i].k, path, floats[i].p, err)) return -1;
    const json_t *t = json_get(j, "tiles");
    if (t) {
        if (json_type(t) != JSON_OBJECT)
            return perr_set(err, "%s: field 'tiles': expected an object {tokens, features, ffn}",
                            path);
        if (check_keys(t, tiles, "tiles.", path, err)) return -1;
        if (get_int(t, "tokens", path, &c->tile_tokens, err) ||
            get_int(t, "features", path, &c->tile_features, err) ||
            get_int(t, "ffn", path, &c->tile_ffn, err))
            return -1;
    }
    if (json_get(j, "moe") && apply_moe_json(json_get(j, "moe"), path, c, err)) return -1;
    if (json_get(j, "precision") && apply_precision_json(json_get(j, "precision"), path, c, err))
        return -1;
    /* no "optimizer": fp32 AdamW, the config every file before it meant,
     * and the one model_config_json leaves out (so a round trip from any
     * starting config, even a zeroed one, is exact) */
    if (!json_get(j, "optimizer")) c->optimizer = MODEL_OPT_ADAM, c->optimizer_block = ADAM8_DEFAULT_BLOCK;
    else if (apply_optimizer_json(json_get(j, "optimizer"), path, c, err)) return -1;
    const json_t *arch = json_get(j, "arch");
    if (arch) {
        const char *v = json_string(arch);
        if (!v || (strcmp(v, "gpt") && strcmp(v, "t5") && strcmp(v, "llava")))
            return perr_set(err, "%s: field 'arch': expected \"gpt\", \"t5\" or \"llava\"", path);
        c->arch = !strcmp(v, "t5") ? MODEL_T5 : !strcmp(v, "llava") ? MODEL_LLAVA : MODEL_GPT;
    }
    const json_t *enc = json_get(j, "encoder");
    if (enc) {
        static const char *const keys[] = {"layers", "seq_length", "patch_dim", NULL};
        if (json_type(enc) != JSON_OBJECT)
            return perr_set(err, "%s: field 'encoder': expected an object {layers, seq_length, "
                                 "patch_dim}", path);
        if (check_keys(enc, keys, "encoder.", path, err) ||
            get_int(enc, "layers", path, &c->encoder_layers, err) ||
            get_int(enc, "seq_length", path, &c->encoder_seq_length, err) ||
            get_int(enc, "patch_dim", path, &c->patch_dim, err))
            return -1;
    }
    const json_t *d = json_get(j, "dropouts");
    if (d) {
        if (json_type(d) != JSON_OBJECT)
            return perr_set(err, "%s: field 'dropouts': expected an object {hidden, attention}",
                            path);
        if (check_keys(d, drops, "dropouts.", path, err)) return -1;
        if (get_float(d, "hidden", path, &c->hidden_dropout, err) ||
            get_float(d, "attention", path, &c->attention_dropout, err))
            return -1;
    }
    return 0;
}

int model_config_parse(const char *text, size_t len, const char *what, model_config_t *c,
                       perr_t *err) {
    perr_t jerr;
    json_t *j = json_parse(text, len, &jerr);
    if (!j) return perr_set(err, "model config '%s': malformed JSON: %s", what, jerr.msg);
    int rc = apply_json(j, what, c, err);
    json_free(j);
    return rc;
}

int model_config_load(const char *path, model_config_t *c, perr_t *err) {
    size_t len;
    char *text = pio_read_text(path, "model config", (size_t)64 << 20, &len, err);
    if (!text) return -1;
    int rc = model_config_parse(text, len, path, c, err);
    free(text);
    return rc;
}

int model_pad_vocab(model_config_t *c, long long n, const char *what, perr_t *err) {
    if (n < 1) return perr_set(err, "%s = %lld: expected >= 1", what, n);
    const long long v = (c->vocab + n - 1) / n * n;
    if (c->vocab < 1 || v > 2147483647LL)
        return perr_set(err, "%s = %lld: vocab %d cannot be padded to a multiple of it", what, n,
                        c->vocab);
    c->vocab = (int)v;
    return 0;
}

/* ---- validation --------------------------------------------------------- */

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
 * error). Built for the dense GPT (MODEL.md "Mixed precision"). */
static int validate_precision(const model_config_t *c, perr_t *err) {
    if (c->precision < MODEL_FP32 || c->precision > MODEL_FP16)
        return perr_set(err, "precision.dtype: %d, expected fp32, bf16 or fp16", c->precision);
    /* NeMo's dtypes: bf16 (fp16 state or gradients would need the loss
     * scale where Apex keeps them, which is not built) */
    const struct { const char *field, *nemo; int v; } dts[] = {
        {"grad_dtype", "grad_sync_dtype", c->grad_dtype}, {"optim_dtype", "dtype", c->optim_dtype}};
    for (int k = 0; k < 2; k++)
        if (dts[k].v != MODEL_FP32 && dts[k].v != MODEL_BF16)
            return perr_set(err, "precision.%s (NeMo's %s): %s, expected fp32 or bf16", dts[k].field,
                            dts[k].nemo, dts[k].v == MODEL_FP16 ? "fp16" : "unknown");
    if (c->precision && (c->moe_experts > 0 || c->arch != MODEL_GPT))
        return perr_set(err, "--%s: mixed precision is built for the dense GPT, not for %s yet",
                        model_precision_name(c->precision),
                        c->moe_experts > 0 ? "MoE layers" : "encoder-decoders");
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
        return perr_set(err, "precision.optim_dtype (NeMo's dtype, --dtype): bf16 state is for "
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
static int validate(const model_config_t *c, int whole_microbatches, perr_t *err) {
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

/* A name as a JSON string body: quotes, backslashes and control bytes
 * become '_' (names are labels, never parsed back for meaning). */
static void json_safe_name(const char *in, char *out, size_t cap) {
    size_t i = 0;
    for (; in[i] && i + 1 < cap; i++) {
        unsigned char ch = (unsigned char)in[i];
        out[i] = (ch < 0x20 || ch == '"' || ch == '\\') ? '_' : (char)ch;
    }
    out[i] = 0;
}

char *model_config_json(const model_config_t *c) {
    size_t cap = 2048;
    char *s = malloc(cap);
    if (!s) return NULL;
    char name[sizeof c->name];
    json_safe_name(c->name, name, sizeof name);
    snprintf(s, cap,
             "{\"name\": \"%s\", \"vocab\": %d, \"seq_length\": %d, \"hidden\": %d, "
             "\"heads\": %d, \"layers\": %d, \"ffn\": %d, "
             "\"tiles\": {\"tokens\": %d, \"features\": %d, \"ffn\": %d}, "
             "\"tied\": %s, \"dropouts\": {\"hidden\": %.9g, \"attention\": %.9g}, "
             "\"ln_eps\": %.9g, \"seed\": %llu, \"global_batch\": %d, \"micro_batch\": %d, "
             "\"lr\": %.9g, \"min_lr\": %.9g, \"warmup\": %d, \"decay_steps\": %d, "
             "\"beta1\": %.9g, \"beta2\": %.9g, \"eps\": %.9g, \"weight_decay\": %.9g, "
             "\"clip_grad\": %.9g}",
             name, c->vocab, c->seq_length, c->hidden, c->heads, c->layers, c->ffn,
             c->tile_tokens, c->tile_features, c->tile_ffn, c->tied ? "true" : "false",
             (double)c->hidden_dropout, (double)c->attention_dropout, (double)c->ln_eps,
             (unsigned long long)c->seed, c->global_batch, c->micro_batch, (double)c->lr,
             (double)c->min_lr, c->warmup, c->decay_steps, (double)c->beta1, (double)c->beta2,
             (double)c->eps, (double)c->weight_decay, (double)c->clip_grad);
    { /* always, inert fields too: the JSON is the whole config (a round trip) */
        const size_t at = strlen(s) - 1; /* over the closing brace */
        snprintf(s + at, cap - at,
                 ", \"moe\": {\"experts\": %d, \"topk\": %d, \"layer_freq\": %d, "
                 "\"pre_softmax\": %s, \"aux_loss_coeff\": %.9g, \"z_loss_coeff\": %.9g, "
                 "\"capacity_factor\": %.9g, \"drop_policy\": \"%s\"}}",
                 c->moe_experts, c->moe_topk, c->moe_layer_freq,
                 c->moe_pre_softmax ? "true" : "false", (double)c->moe_aux_loss_coeff,
                 (double)c->moe_z_loss_coeff, (double)c->moe_capacity_factor,
                 c->moe_drop_position ? "position" : "probs");
    }
    if (c->precision || c->grad_dtype || c->optim_dtype) { /* fp32's JSON stays as it was */
        const size_t at = strlen(s) - 1;
        snprintf(s + at, cap - at, ", \"precision\": {\"dtype\": \"%s\", \"loss_scale\": %.9g, "
                 "\"initial_loss_scale\": %.9g, \"min_loss_scale\": %.9g, \"loss_scale_window\": "
                 "%d, \"hysteresis\": %d, \"grad_dtype\": \"%s\", \"optim_dtype\": \"%s\"}}",
                 model_precision_name(c->precision), (double)c->loss_scale,
                 (double)c->initial_loss_scale, (double)c->min_loss_scale, c->loss_scale_window,
                 c->hysteresis, model_precision_name(c->grad_dtype),
                 model_precision_name(c->optim_dtype));
    }
    if (c->optimizer != MODEL_OPT_ADAM) { /* adam's JSON stays as it was (golden/'s dumps) */
        const size_t at = strlen(s) - 1;
        snprintf(s + at, cap - at, ", \"optimizer\": {\"name\": \"%s\", \"block\": %d}}",
                 model_optimizer_name(c->optimizer), c->optimizer_block);
    }
    if (c->arch != MODEL_GPT) { /* the GPT's JSON stays as it was (golden/'s dumps) */
        const size_t at = strlen(s) - 1;
        snprintf(s + at, cap - at, ", \"arch\": \"%s\", \"encoder\": {\"layers\": %d, "
                 "\"seq_length\": %d, \"patch_dim\": %d}}", model_arch_name(c->arch),
                 c->encoder_layers, c->encoder_seq_length, c->patch_dim);
    }
    return s;
}
