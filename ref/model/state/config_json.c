/* config_json.c - a model config from a JSON file (model_config_parse,
 * model_config_load).
 *
 * A config file is the same JSON object a dump stores as its "config"
 * metadata, so any dump's config can be fed back in. Fields present
 * override the starting config; "base" names a built-in to start from.
 * apply_json reads the object in phases, in a fixed order: the identity
 * fields (base first, so the rest override it), the sizes and
 * hyperparameters, then the sections (moe, precision, optimizer,
 * encoder-decoder, dropouts). Every unknown key and wrongly typed value
 * is an error naming the file and the field. */
#include "model/gpt.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "parity/fileio.h"
#include "parity/json.h"
#include "parity/numparse.h"

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
 * "z_loss_coeff", "capacity_factor", "drop_policy": "probs"|"position",
 * "router_dtype": "fp32" (absent: the model's dtype)} */
static int apply_moe_json(const json_t *m, const char *path, model_config_t *c, perr_t *err) {
    static const char *const keys[] = {"experts",         "topk",        "layer_freq",
                                       "pre_softmax",     "aux_loss_coeff", "z_loss_coeff",
                                       "capacity_factor", "drop_policy", "router_dtype", NULL};
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
    const json_t *rd = json_get(m, "router_dtype");
    if (rd) {
        const char *v = json_string(rd);
        if (!v || strcmp(v, "fp32"))
            return perr_set(err, "%s: field 'moe.router_dtype': expected \"fp32\" (absent: the "
                                 "router in the model's dtype)", path);
        c->moe_router_dtype = MOE_ROUTER_FP32;
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

/* base (a built-in to start from), name, tied, seed. */
static int apply_identity_json(const json_t *j, const char *path, model_config_t *c, perr_t *err) {
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
    return 0;
}

/* The sizes, counts and fp32 hyperparameters, the vocabulary's padding
 * (after vocab), the tiles. */
static int apply_sizes_json(const json_t *j, const char *path, model_config_t *c, perr_t *err) {
    static const char *const tiles[] = {"tokens", "features", "ffn", NULL};
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
    return 0;
}

/* The sections: moe, precision, optimizer, arch and encoder, dropouts. */
static int apply_sections_json(const json_t *j, const char *path, model_config_t *c, perr_t *err) {
    static const char *const drops[] = {"hidden", "attention", NULL};
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

static int apply_json(const json_t *j, const char *path, model_config_t *c, perr_t *err) {
    static const char *const top[] = {
        "name", "base", "vocab", "seq_length", "hidden", "heads", "layers", "ffn", "tied",
        "tiles", "dropouts", "ln_eps", "seed", "global_batch", "micro_batch", "lr", "min_lr",
        "warmup", "decay_steps", "beta1", "beta2", "eps", "weight_decay", "clip_grad",
        "make_vocab_size_divisible_by", "moe", "arch", "encoder", "precision", "optimizer", NULL};
    if (json_type(j) != JSON_OBJECT)
        return perr_set(err, "%s: expected a JSON object, got %s", path,
                        json_type_name(json_type(j)));
    if (check_keys(j, top, "", path, err)) return -1;
    if (apply_identity_json(j, path, c, err) || apply_sizes_json(j, path, c, err) ||
        apply_sections_json(j, path, c, err))
        return -1;
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
