/* ckpt.c - layout-free checkpoints: global tensors in one safetensors
 * file (ckpt.h). A layout reassembles into, and cuts from, the state here;
 * this file knows nothing of layouts. */
#include "model/gpt.h"
#include "parity/ckpt.h"

#include <errno.h>
#include <float.h>
#include <inttypes.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "parity/fileio.h"
#include "parity/json.h"
#include "parity/safetensors.h"
#include "parity/sha256.h"

enum { NKINDS = 3 };
static const char *const kind_prefix[NKINDS] = {"param.", "adam_m.", "adam_v."};

static float **vec(ckpt_state_t *s, int k) {
    return k == 0 ? &s->params : k == 1 ? &s->adam_m : &s->adam_v;
}
static const float *cvec(const ckpt_state_t *s, int k) {
    return k == 0 ? s->params : k == 1 ? s->adam_m : s->adam_v;
}

int ckpt_state_alloc(ckpt_state_t *s, const model_config_t *cfg, perr_t *err) {
    memset(s, 0, sizeof *s);
    param_table_t t;
    if (param_table_build(&t, cfg, err)) return -1;
    s->cfg = *cfg;
    s->total = t.total;
    param_table_free(&t);
    for (int k = 0; k < NKINDS; k++)
        if (!(*vec(s, k) = calloc(s->total + 1, sizeof(float)))) {
            ckpt_state_free(s);
            return perr_set(err, "checkpoint: out of memory");
        }
    return 0;
}

void ckpt_state_free(ckpt_state_t *s) {
    for (int k = 0; k < NKINDS; k++) {
        free(*vec(s, k));
        *vec(s, k) = NULL;
    }
}

void ckpt_state_to_gpt(const ckpt_state_t *s, gpt_t *g) {
    memcpy(g->params, s->params, s->total * sizeof(float));
    gpt_adam_set_values(g, 0, s->adam_m);
    gpt_adam_set_values(g, 1, s->adam_v);
    g->adam_t = s->adam_t;
    gpt_scaler_from_ckpt(g, &s->scaler);
    gpt_params_refresh(g); /* mixed precision: the compute copy of the loaded weights */
}

ckpt_state_t ckpt_state_view_gpt(const gpt_t *g, int64_t next_step, float *scratch[2]) {
    const float *m = gpt_adam_values(g, 0, &scratch[0]), *v = gpt_adam_values(g, 1, &scratch[1]);
    ckpt_state_t s = {g->cfg, next_step, g->adam_t, {0.0f, 0, 0, 0}, g->table.total, g->params, (float *)m,
                      (float *)v};
    gpt_scaler_to_ckpt(g, &s.scaler);
    return s;
}

size_t ckpt_host_bytes(const model_config_t *cfg, int load, int save) {
    param_table_t t;
    if ((!load && !save) || param_table_build(&t, cfg, NULL)) return 0;
    const size_t state = NKINDS * (t.total + 1) * sizeof(float);
    param_table_free(&t);
    /* the state, plus the file in memory: st_open reads it whole, and
     * st_writer copies what it is given */
    return state + state;
}

/* The metadata the digest covers, in this order (ckpt.h): every key but
 * "sha256" itself. A file holds these and "sha256", nothing else. */
static const char *const meta_keys[] = {"format", "config", "step", "adam_t", "backend",
                                        "loss_scaler"};
enum { NMETA = sizeof meta_keys / sizeof meta_keys[0] };
/* The keys a config's file holds: loss_scaler (the last) only under fp16. */
static int nmeta(const model_config_t *c) { return c->precision == MODEL_FP16 ? NMETA : NMETA - 1; }

static void scaler_text(const ckpt_scaler_t *l, char *buf, size_t cap) {
    snprintf(buf, cap, "scale %.9g growth %d hysteresis_left %d skipped %" PRId64, (double)l->scale,
             l->growth, l->hysteresis_left, l->skipped);
}

/* Format 2 (CKPT_FORMAT): each metadata key and value of meta_keys, in
 * that order, each followed by a 0 byte, then every tensor's bytes in file
 * order (the three vectors, whole, because the table's offsets tile each
 * one in table order). Format 1 (CKPT_FORMAT_V1): the tensors only.
 * meta[i] is meta_keys[i]'s value; NULL for format 1. */
static void state_digest(const ckpt_state_t *s, const char *const *meta, char hex[65]) {
    sha256_ctx_t c;
    uint8_t d[32];
    sha256_init(&c);
    for (int i = 0; meta && i < nmeta(&s->cfg); i++) {
        sha256_update(&c, meta_keys[i], strlen(meta_keys[i]) + 1);
        sha256_update(&c, meta[i], strlen(meta[i]) + 1);
    }
    for (int k = 0; k < NKINDS; k++) sha256_update(&c, cvec(s, k), s->total * sizeof(float));
    sha256_final(&c, d);
    sha256_to_hex(d, hex);
}

char *ckpt_file_path(const char *dir) {
    size_t n = strlen(dir) + sizeof CKPT_FILE + 2;
    char *p = malloc(n);
    if (p) snprintf(p, n, "%s/%s", dir, CKPT_FILE);
    return p;
}

/* ---- saving --------------------------------------------------------------- */

int ckpt_check_save_dir(const char *dir, const char *flag, perr_t *err) {
    struct stat sb;
    if (!*dir) return perr_set(err, "%s: expected a directory, got an empty path", flag);
    if (stat(dir, &sb) == 0) {
        if (!S_ISDIR(sb.st_mode))
            return perr_set(err, "%s '%s': not a directory (a checkpoint is a directory holding %s)",
                            flag, dir, CKPT_FILE);
        char *file = ckpt_file_path(dir);
        if (!file) return perr_set(err, "%s: out of memory", flag);
        int rc = pio_check_output(file, flag, err);
        free(file);
        return rc;
    }
    if (errno != ENOENT)
        return perr_set(err, "%s '%s': cannot stat: %s", flag, dir, strerror(errno));
    /* created after the run: its parent must take it */
    char *parent = strdup(dir);
    if (!parent) return perr_set(err, "%s: out of memory", flag);
    char *slash = strrchr(parent, '/');
    while (slash && slash > parent && slash[1] == 0) { /* "a/b/" names b */
        *slash = 0;
        slash = strrchr(parent, '/');
    }
    const char *p = !slash ? "." : slash == parent ? "/" : (*slash = 0, parent);
    int ok = stat(p, &sb) == 0 && S_ISDIR(sb.st_mode) && access(p, W_OK | X_OK) == 0;
    int rc = ok ? 0
                : perr_set(err, "%s '%s': cannot create the directory: '%s' is not a writable "
                                "directory",
                           flag, dir, p);
    free(parent);
    return rc;
}

static int add_tensors(st_writer_t *w, const param_table_t *t, const ckpt_state_t *s,
                       perr_t *err) {
    char name[160];
    for (int k = 0; k < NKINDS; k++)
        for (int i = 0; i < t->count; i++) {
            const param_info_t *p = &t->info[i];
            snprintf(name, sizeof name, "%s%s", kind_prefix[k], p->name);
            if (st_writer_add(w, name, ST_F32, p->ndim, p->shape, cvec(s, k) + p->offset, err))
                return -1;
        }
    return 0;
}

static int set_metadata(st_writer_t *w, const ckpt_state_t *s, const char *backend, perr_t *err) {
    char step[32], adam_t[32], scaler[128], hex[65];
    char *cfg = model_config_json(&s->cfg);
    if (!cfg) return perr_set(err, "checkpoint: out of memory");
    snprintf(step, sizeof step, "%" PRId64, s->step);
    snprintf(adam_t, sizeof adam_t, "%d", s->adam_t);
    scaler_text(&s->scaler, scaler, sizeof scaler);
    const char *meta[NMETA] = {CKPT_FORMAT, cfg, step, adam_t, backend ? backend : "unknown", scaler};
    state_digest(s, meta, hex);
    int rc = 0;
    for (int i = 0; i < nmeta(&s->cfg) && !rc; i++)
        rc = st_writer_set_metadata(w, meta_keys[i], meta[i], err);
    if (!rc) rc = st_writer_set_metadata(w, "sha256", hex, err);
    free(cfg);
    return rc ? -1 : 0;
}

int ckpt_save(const char *dir, const ckpt_state_t *s, const char *backend, perr_t *err) {
    param_table_t t;
    if (param_table_build(&t, &s->cfg, err)) return -1;
    if (t.total != s->total) {
        param_table_free(&t);
        return perr_set(err, "checkpoint: state of %zu elements for a table of %zu", s->total,
                        t.total);
    }
    if (s->step < 0 || s->step > CKPT_MAX_STEP || s->adam_t + s->scaler.skipped != s->step) {
        param_table_free(&t);
        return perr_set(err, "checkpoint: step %" PRId64 " with AdamW count %d and %" PRId64
                             " skipped: a checkpoint holds a step in [0, %" PRId64 "] equal to "
                             "its AdamW count plus the loss scaler's skipped steps",
                        s->step, s->adam_t, s->scaler.skipped, CKPT_MAX_STEP);
    }
    st_writer_t *w = st_writer_new();
    char *file = ckpt_file_path(dir);
    int rc = -1, made_dir = 0;
    if (!w || !file) {
        perr_set(err, "checkpoint: out of memory");
        goto out;
    }
    if (add_tensors(w, &t, s, err) || set_metadata(w, s, backend, err)) goto out;
    if (mkdir(dir, 0777) == 0) made_dir = 1, pio_txn_made_dir(dir); /* removed if the run fails */
    else if (errno != EEXIST) {
        perr_set(err, "--save '%s': cannot create the directory: %s", dir, strerror(errno));
        goto out;
    }
    if (st_writer_save(w, file, err)) {
        if (made_dir) rmdir(dir); /* ours, and empty: the temporary file is gone */
        goto out;
    }
    rc = 0;
out:
    free(file);
    if (w) st_writer_free(w);
    param_table_free(&t);
    return rc;
}

/* ---- loading --------------------------------------------------------------- */

/* Keys whose values cannot change a bit of the run (ckpt.h). */
static int ignored_key(const char *path) {
    return !strcmp(path, "name") || !strcmp(path, "micro_batch");
}

static void value_text(const json_t *v, char *out, size_t cap) {
    switch (json_type(v)) {
    case JSON_NUMBER: snprintf(out, cap, "%.9g", json_number(v)); break;
    case JSON_BOOL: snprintf(out, cap, "%s", json_bool(v) ? "true" : "false"); break;
    case JSON_STRING: snprintf(out, cap, "\"%s\"", json_string(v)); break;
    default: snprintf(out, cap, "%s", json_type_name(json_type(v))); break;
    }
}

/* A field model_config_json writes only when it is not its default: what
 * its absence means, or NULL. */
static const char *absent_means(const char *path) {
    return !strcmp(path, "moe.router_dtype") ? "the model's dtype, --moe-router-dtype's default"
                                              : NULL;
}

/* The first field (dotted path: "tiles.tokens") where the checkpoint's
 * config `a` and the run's `b` differ, in b's order, then a's extras. */
static int config_diff(const json_t *a, const json_t *b, const char *prefix, const char *who,
                       perr_t *err) {
    char path[128], va[96], vb[96];
    for (size_t i = 0; i < json_len(b); i++) {
        const char *key = json_key_at(b, i);
        const json_t *x = json_get(a, key), *y = json_at(b, i);
        snprintf(path, sizeof path, "%s%s", prefix, key);
        if (ignored_key(path)) continue;
        if (!x && !strcmp(path, "optimizer")) /* written only when not adam */
            return perr_set(err, "%s: the checkpoint's model differs from this run's: field "
                                 "'optimizer' is absent (adam) in the checkpoint, %s here "
                                 "(--optimizer)",
                            who, json_string(json_get(y, "name")) ? json_string(json_get(y, "name")) : "?");
        if (!x && absent_means(path)) {
            value_text(y, vb, sizeof vb);
            return perr_set(err, "%s: the checkpoint's model differs from this run's: field "
                                 "'%s' is absent (%s) in the checkpoint, %s here",
                            who, path, absent_means(path), vb);
        }
        if (!x)
            return perr_set(err, "%s: the checkpoint's config has no field '%s' (this "
                                 "run's is not the model it saved)",
                            who, path);
        if (json_type(y) == JSON_OBJECT && json_type(x) == JSON_OBJECT) {
            char sub[130];
            snprintf(sub, sizeof sub, "%s.", path);
            if (config_diff(x, y, sub, who, err)) return -1;
            continue;
        }
        int same = json_type(x) == json_type(y);
        if (same && json_type(y) == JSON_NUMBER) same = json_number(x) == json_number(y);
        if (same && json_type(y) == JSON_BOOL) same = json_bool(x) == json_bool(y);
        if (same && json_type(y) == JSON_STRING) same = !strcmp(json_string(x), json_string(y));
        if (!same) {
            value_text(x, va, sizeof va);
            value_text(y, vb, sizeof vb);
            return perr_set(err, "%s: the checkpoint's model differs from this run's: "
                                 "field '%s' is %s in the checkpoint, %s here",
                            who, path, va, vb);
        }
    }
    for (size_t i = 0; i < json_len(a); i++) {
        snprintf(path, sizeof path, "%s%s", prefix, json_key_at(a, i));
        if (!json_get(b, json_key_at(a, i)) && absent_means(path)) {
            value_text(json_at(a, i), va, sizeof va);
            return perr_set(err, "%s: the checkpoint's model differs from this run's: field "
                                 "'%s' is %s in the checkpoint, absent (%s) here",
                            who, path, va, absent_means(path));
        }
        if (!*prefix && !strcmp(json_key_at(a, i), "optimizer") && !json_get(b, "optimizer")) {
            const char *name = json_string(json_get(json_at(a, i), "name"));
            return perr_set(err, "%s: the checkpoint's model differs from this run's: field "
                                 "'optimizer' is %s in the checkpoint, absent (adam) here "
                                 "(--optimizer)",
                            who, name ? name : "?");
        } else if (!json_get(b, json_key_at(a, i)))
            return perr_set(err, "%s: the checkpoint's config has a field '%s%s' this "
                                 "version does not know",
                            who, prefix, json_key_at(a, i));
    }
    return 0;
}

/* "precision" is written only when it is not fp32 (model_config_json):
 * its absence is fp32, so a mismatch is said as one. */
static const char *saved_precision(const json_t *config) {
    const json_t *p = json_get(config, "precision");
    const char *d = p && json_type(p) == JSON_OBJECT ? json_string(json_get(p, "dtype")) : NULL;
    return d ? d : p ? "?" : "fp32";
}

static int check_config(const st_file_t *f, const model_config_t *cfg, const char *who,
                        perr_t *err) {
    const char *saved = st_metadata(f, "config");
    if (!saved) return perr_set(err, "%s: %s has no \"config\" metadata", who, CKPT_FILE);
    perr_t jerr;
    json_t *a = json_parse(saved, strlen(saved), &jerr);
    if (!a)
        return perr_set(err, "%s: the \"config\" metadata is malformed JSON: %s", who,
                        jerr.msg);
    char *mine = model_config_json(cfg);
    json_t *b = mine ? json_parse(mine, strlen(mine), &jerr) : NULL;
    free(mine);
    int rc = !b ? perr_set(err, "checkpoint: out of memory")
             : json_type(a) != JSON_OBJECT
                 ? perr_set(err, "%s: the \"config\" metadata is not a JSON object", who)
                 : strcmp(saved_precision(a), model_precision_name(cfg->precision))
                     ? perr_set(err, "%s: the checkpoint's model differs from this run's: its "
                                     "precision is %s, here %s (--bf16, --fp16)", who,
                                saved_precision(a), model_precision_name(cfg->precision))
                     : config_diff(a, b, "", who, err);
    json_free(a);
    json_free(b);
    return rc;
}

/* A decimal metadata value in [0, max]. */
static int meta_int(const st_file_t *f, const char *key, int64_t max, int64_t *out, const char *who,
                    perr_t *err) {
    const char *v = st_metadata(f, key);
    if (!v) return perr_set(err, "%s: %s has no \"%s\" metadata", who, CKPT_FILE, key);
    char *end;
    errno = 0;
    long long x = strtoll(v, &end, 10);
    if (errno || end == v || *end || x < 0 || x > max || *v < '0' || *v > '9')
        return perr_set(err, "%s: metadata \"%s\": expected an integer in [0, %" PRId64
                             "], got '%s'",
                        who, key, max, v);
    *out = x;
    return 0;
}

/* Checks every tensor's presence and shape (s NULL: before the state is
 * allocated, so a config whose table the file does not hold allocates
 * nothing), or copies them into s. */
/* "[4, 8]": a shape for a message. */
static void shape_text(int ndim, const int64_t *shape, char *buf, size_t cap) {
    int at = snprintf(buf, cap, "[");
    for (int d = 0; d < ndim && at > 0 && (size_t)at < cap; d++)
        at += snprintf(buf + at, cap - (size_t)at, "%s%lld", d ? ", " : "", (long long)shape[d]);
    if (at > 0 && (size_t)at < cap) snprintf(buf + at, cap - (size_t)at, "]");
}

static int load_tensors(const st_file_t *f, const param_table_t *t, ckpt_state_t *s,
                        const char *who, perr_t *err) {
    char name[160];
    for (int k = 0; k < NKINDS; k++)
        for (int i = 0; i < t->count; i++) {
            const param_info_t *p = &t->info[i];
            snprintf(name, sizeof name, "%s%s", kind_prefix[k], p->name);
            const st_tensor_t *x = st_find(f, name);
            if (!x) return perr_set(err, "%s: tensor '%s' is missing", who, name);
            int ok = x->dtype == ST_F32 && x->ndim == p->ndim;
            for (int d = 0; ok && d < p->ndim; d++) ok = x->shape[d] == p->shape[d];
            if (!ok) {
                char want[96], got[96];
                shape_text(p->ndim, p->shape, want, sizeof want);
                shape_text(x->ndim, x->shape, got, sizeof got);
                return perr_set(err, "%s: tensor '%s': expected F32 %s, got %s %s", who, name, want,
                                st_dtype_name(x->dtype), got);
            }
            if (s) memcpy(*vec(s, k) + p->offset, st_data(f, x), p->numel * sizeof(float));
        }
    if (st_count(f) != (size_t)(NKINDS * t->count))
        for (size_t i = 0; i < st_count(f); i++) {
            const char *n = st_tensor(f, i)->name;
            int known = 0;
            for (int k = 0; k < NKINDS && !known; k++) {
                size_t len = strlen(kind_prefix[k]);
                known = !strncmp(n, kind_prefix[k], len) && param_find(t, n + len) >= 0;
            }
            if (!known)
                return perr_set(err, "%s: unexpected tensor '%s' (not a parameter or "
                                     "AdamW state of this model)",
                                who, n);
        }
    return 0;
}

/* The metadata holds the config's meta_keys and "sha256", nothing else. */
static int check_meta_keys(const st_file_t *f, const model_config_t *cfg, const char *who,
                           perr_t *err) {
    for (size_t i = 0; i < st_metadata_count(f); i++) {
        const char *k = st_metadata_key_at(f, i);
        int known = !strcmp(k, "sha256");
        for (int j = 0; j < nmeta(cfg) && !known; j++) known = !strcmp(k, meta_keys[j]);
        if (!known)
            return perr_set(err, "%s: %s has metadata \"%.64s\" that no parity checkpoint of "
                                 "this run's precision holds",
                            who, CKPT_FILE, k);
    }
    for (int j = 0; j < nmeta(cfg); j++)
        if (!st_metadata(f, meta_keys[j]))
            return perr_set(err, "%s: %s has no \"%s\" metadata", who, CKPT_FILE, meta_keys[j]);
    return 0;
}

/* fp16's "loss_scaler": the text scaler_text writes, a finite positive
 * scale, counts that a run could reach. */
static int check_scaler(const st_file_t *f, const model_config_t *cfg, ckpt_scaler_t *l,
                        const char *who, perr_t *err) {
    *l = (ckpt_scaler_t){0.0f, 0, 0, 0};
    if (cfg->precision != MODEL_FP16) return 0;
    const char *v = st_metadata(f, "loss_scaler");
    float scale;
    int growth, hyst, end = -1;
    long long skipped;
    char back[128];
    if (sscanf(v, "scale %f growth %d hysteresis_left %d skipped %lld%n", &scale, &growth, &hyst,
               &skipped, &end) == 4 && end >= 0 && !v[end] && scale > 0.0f && scale <= FLT_MAX &&
        growth >= 0 && skipped >= 0 && skipped <= CKPT_MAX_STEP) {
        *l = (ckpt_scaler_t){scale, growth, hyst, skipped};
        scaler_text(l, back, sizeof back);
        if (!strcmp(back, v)) return 0; /* written by scaler_text, digit for digit */
    }
    return perr_set(err, "%s: metadata \"loss_scaler\": expected \"scale S growth G "
                         "hysteresis_left H skipped K\" (S > 0 finite, G, K >= 0), got '%.96s'",
                    who, v);
}

/* The scalars against each other and the run (ckpt.h): the AdamW count is
 * the step less the steps fp16's scaler skipped (parity's AdamW updates
 * once every other step), and the step leaves room for the count's int.
 * The backend is one parity has. */
static int check_scalars(const st_file_t *f, const model_config_t *cfg, int64_t *step,
                         int64_t *adam_t, ckpt_scaler_t *l, const char *who, perr_t *err) {
    if (meta_int(f, "step", CKPT_MAX_STEP, step, who, err) ||
        meta_int(f, "adam_t", CKPT_MAX_STEP, adam_t, who, err) ||
        check_scaler(f, cfg, l, who, err))
        return -1;
    if (*adam_t + l->skipped != *step)
        return perr_set(err, "%s: metadata \"adam_t\" = %" PRId64 " differs from \"step\" = %" PRId64
                             "%s (parity's AdamW updates once a step the loss scaler does not skip: "
                             "a checkpoint's AdamW count is its step less the skipped steps)",
                        who, *adam_t, *step, cfg->precision == MODEL_FP16 ? " less the skipped steps" : "");
    const char *b = st_metadata(f, "backend");
    if (strcmp(b, "openblas") && strcmp(b, "portable") && strcmp(b, "unknown"))
        return perr_set(err, "%s: metadata \"backend\": expected openblas, portable or unknown, "
                             "got '%.32s'",
                        who, b);
    return 0;
}

/* adamw8bit: each moment tensor, block by block of its global flattened
 * index, must be a dequantized 8-bit state (model.h: the values are the
 * whole state), or the run could not continue from it bit for bit. */
static int check_adam8(const ckpt_state_t *s, const param_table_t *t, const char *who,
                       perr_t *err) {
    if (s->cfg.optimizer != MODEL_OPT_ADAMW8BIT) return 0;
    const size_t B = (size_t)s->cfg.optimizer_block;
    uint8_t codes[ADAM8_MAX_BLOCK];
    for (int k = 1; k < NKINDS; k++)
        for (int i = 0; i < t->count; i++) {
            const param_info_t *p = &t->info[i];
            const float *x = cvec(s, k) + p->offset;
            for (size_t lo = 0, bad; lo < p->numel; lo += B) {
                float absmax;
                const size_t len = p->numel - lo < B ? p->numel - lo : B;
                if (adam8_from_values(x + lo, len, (int)B, k == 1, codes, &absmax, &bad))
                    return perr_set(err, "%s: tensor '%s%s': element %zu (%.9g) is no 8-bit "
                                         "state value of optimizer adamw8bit (a code of its map "
                                         "times its block's absmax): not a checkpoint parity wrote",
                                    who, kind_prefix[k], p->name, lo + bad, (double)x[lo + bad]);
            }
        }
    return 0;
}

int ckpt_load_file(const char *file, const char *who, const model_config_t *cfg, ckpt_state_t *s,
                   char **backend, perr_t *err) {
    memset(s, 0, sizeof *s);
    if (backend) *backend = NULL;
    perr_t serr;
    st_file_t *f = st_open(file, &serr);
    if (!f) return perr_set(err, "%s: %s", who, serr.msg);
    param_table_t t;
    int have_table = 0, rc = -1;
    int64_t step, adam_t;
    ckpt_scaler_t scaler;
    char hex[65];
    const char *fmt = st_metadata(f, "format"), *digest = st_metadata(f, "sha256");
    const int v1 = fmt && !strcmp(fmt, CKPT_FORMAT_V1);
    if (!fmt || (strcmp(fmt, CKPT_FORMAT) && !v1)) {
        perr_set(err, "%s: %s is not a parity checkpoint (format '%.64s', expected '%s')", who,
                 CKPT_FILE, fmt ? fmt : "(none)", CKPT_FORMAT);
        goto out;
    }
    if (check_config(f, cfg, who, err) || check_meta_keys(f, cfg, who, err) ||
        check_scalars(f, cfg, &step, &adam_t, &scaler, who, err))
        goto out;
    if (param_table_build(&t, cfg, err)) goto out;
    have_table = 1;
    if (load_tensors(f, &t, NULL, who, err) || ckpt_state_alloc(s, cfg, err) ||
        load_tensors(f, &t, s, who, err))
        goto out;
    const char *meta[NMETA] = {0};
    for (int i = 0; i < nmeta(cfg); i++) meta[i] = st_metadata(f, meta_keys[i]);
    state_digest(s, v1 ? NULL : meta, hex);
    if (!digest || strcmp(digest, hex)) {
        perr_set(err, "%s: %s is corrupt: the SHA-256 of its %s is %s, the metadata says %.64s",
                 who, CKPT_FILE, v1 ? "tensors" : "metadata and tensors", hex,
                 digest ? digest : "(none)");
        goto out;
    }
    if (check_adam8(s, &t, who, err)) goto out;
    s->step = step;
    s->adam_t = (int)adam_t;
    s->scaler = scaler;
    if (backend && !(*backend = strdup(st_metadata(f, "backend")))) {
        perr_set(err, "checkpoint: out of memory");
        goto out;
    }
    rc = 0;
out:
    if (rc) ckpt_state_free(s);
    if (have_table) param_table_free(&t);
    st_close(f);
    return rc;
}

int ckpt_load(const char *dir, const model_config_t *cfg, ckpt_state_t *s, char **backend,
              perr_t *err) {
    memset(s, 0, sizeof *s);
    if (backend) *backend = NULL;
    size_t n = strlen(dir) + 16;
    char *who = malloc(n), *file = ckpt_file_path(dir);
    int rc = -1;
    struct stat sb;
    if (who) snprintf(who, n, "--load '%s'", dir);
    if (!who || !file)
        perr_set(err, "checkpoint: out of memory");
    else if (stat(dir, &sb))
        perr_set(err, "%s: cannot open the checkpoint: %s", who, strerror(errno));
    else if (!S_ISDIR(sb.st_mode))
        perr_set(err, "%s: not a directory (a checkpoint is a directory holding %s)", who,
                 CKPT_FILE);
    else
        rc = ckpt_load_file(file, who, cfg, s, backend, err);
    free(who);
    free(file);
    return rc;
}
