/* names.c - the parameter names and layouts of Megatron-core, Hugging
 * Face GPT-2 and nanoGPT (names.h).
 *
 * One table says, for each parity parameter of the dense GPT, its name
 * in every scheme and how its layout differs; names_to_parity and
 * names_from_parity both read it, so the two directions cannot disagree.
 * A layer's tensors are named after the scheme's layer prefix
 * ("transformer.h.<l>."); the rest are whole names.
 */
#include "parity/names.h"

#include <stdio.h>
#include <string.h>

static const char *const SCHEME[NAMES_COUNT] = {"megatron-lm", "megatron-core", "hf-gpt2",
                                                 "nanogpt"};
/* parity's layer prefix is megatron-lm's */
static const char *const LAYER_PREFIX[NAMES_COUNT] = {"layers.", "decoder.layers.",
                                                       "transformer.h.", "transformer.h."};

/* One parameter: parity's name (a layer's: after "layers.<l>."), its
 * name in megatron-core and in the GPT-2 schemes (hf-gpt2 and nanogpt
 * share names), whether it is a linear's [out, in] weight (hf-gpt2's
 * Conv1D holds it [in, out]) and whether it is the fused qkv (the GPT-2
 * schemes order it q | k | v). */
typedef struct {
    const char *parity, *core, *gpt2;
    int linear, qkv;
} names_row_t;

static const names_row_t LAYER_ROWS[] = {
    {"input_layernorm.weight", "input_layernorm.weight", "ln_1.weight", 0, 0},
    {"input_layernorm.bias", "input_layernorm.bias", "ln_1.bias", 0, 0},
    {"self_attention.query_key_value.weight", "self_attention.linear_qkv.weight",
     "attn.c_attn.weight", 1, 1},
    {"self_attention.query_key_value.bias", "self_attention.linear_qkv.bias", "attn.c_attn.bias",
     0, 1},
    {"self_attention.dense.weight", "self_attention.linear_proj.weight", "attn.c_proj.weight", 1,
     0},
    {"self_attention.dense.bias", "self_attention.linear_proj.bias", "attn.c_proj.bias", 0, 0},
    {"post_attention_layernorm.weight", "pre_mlp_layernorm.weight", "ln_2.weight", 0, 0},
    {"post_attention_layernorm.bias", "pre_mlp_layernorm.bias", "ln_2.bias", 0, 0},
    {"mlp.dense_h_to_4h.weight", "mlp.linear_fc1.weight", "mlp.c_fc.weight", 1, 0},
    {"mlp.dense_h_to_4h.bias", "mlp.linear_fc1.bias", "mlp.c_fc.bias", 0, 0},
    {"mlp.dense_4h_to_h.weight", "mlp.linear_fc2.weight", "mlp.c_proj.weight", 1, 0},
    {"mlp.dense_4h_to_h.bias", "mlp.linear_fc2.bias", "mlp.c_proj.bias", 0, 0},
};
/* The LM head is a linear too, but nn.Linear in both GPT-2 schemes. */
static const names_row_t MODEL_ROWS[] = {
    {"embedding.word_embeddings.weight", "embedding.word_embeddings.weight",
     "transformer.wte.weight", 0, 0},
    {"embedding.position_embeddings.weight", "embedding.position_embeddings.weight",
     "transformer.wpe.weight", 0, 0},
    {"final_layernorm.weight", "decoder.final_layernorm.weight", "transformer.ln_f.weight", 0, 0},
    {"final_layernorm.bias", "decoder.final_layernorm.bias", "transformer.ln_f.bias", 0, 0},
    {"output_layer.weight", "output_layer.weight", "lm_head.weight", 0, 0},
};
enum { N_LAYER_ROWS = sizeof LAYER_ROWS / sizeof *LAYER_ROWS,
       N_MODEL_ROWS = sizeof MODEL_ROWS / sizeof *MODEL_ROWS };

static const char *row_name(const names_row_t *r, names_scheme_t s) {
    return s == NAMES_MEGATRON_LM ? r->parity : s == NAMES_MEGATRON_CORE ? r->core : r->gpt2;
}

const char *names_scheme_name(names_scheme_t s) {
    return (unsigned)s < NAMES_COUNT ? SCHEME[s] : "?";
}

int names_scheme_parse(const char *s, names_scheme_t *out, perr_t *err) {
    for (int k = 0; s && k < NAMES_COUNT; k++)
        if (!strcmp(s, SCHEME[k])) {
            *out = (names_scheme_t)k;
            return 0;
        }
    return perr_set(err, "--names '%s': expected megatron-lm, megatron-core, hf-gpt2 or nanogpt",
                    s ? s : "(none)");
}

/* The three other schemes name the dense GPT's tensors only. */
static int check_model(const model_config_t *c, names_scheme_t s, perr_t *err) {
    if ((unsigned)s >= NAMES_COUNT) return perr_set(err, "names: scheme %d is none", (int)s);
    if (s == NAMES_MEGATRON_LM || (c->arch == MODEL_GPT && c->moe_experts == 0)) return 0;
    return perr_set(err, "--names %s names the dense GPT's parameters; model %s is %s (use "
                         "megatron-lm, parity's own names)", SCHEME[s], c->name,
                    c->arch != MODEL_GPT ? model_arch_name(c->arch) : "a mixture of experts");
}

static void fill_map(const param_info_t *p, int param, names_scheme_t s, const names_row_t *r,
                     names_map_t *m) {
    memset(m, 0, sizeof *m);
    m->param = param;
    m->transpose = r && r->linear && s == NAMES_HF_GPT2;
    m->qkv = r && r->qkv && (s == NAMES_HF_GPT2 || s == NAMES_NANOGPT);
    m->ndim = p->pl.ndim;
    for (int d = 0; d < m->ndim; d++) m->shape[d] = p->pl.shape[d];
    if (m->transpose) m->shape[0] = p->pl.shape[1], m->shape[1] = p->pl.shape[0];
}

/* The row of parity's name pn (layer l, or -1 for a model row), or NULL. */
static const names_row_t *parity_row(const char *pn, int *l) {
    *l = -1;
    for (int k = 0; k < N_MODEL_ROWS; k++)
        if (!strcmp(pn, MODEL_ROWS[k].parity)) return &MODEL_ROWS[k];
    int at = 0;
    if (sscanf(pn, "layers.%d.%n", l, &at) != 1 || !at) return NULL;
    for (int k = 0; k < N_LAYER_ROWS; k++)
        if (!strcmp(pn + at, LAYER_ROWS[k].parity)) return &LAYER_ROWS[k];
    return NULL;
}

int names_from_parity(const model_config_t *c, names_scheme_t s, int param, char *name,
                      size_t cap, names_map_t *map, perr_t *err) {
    if (check_model(c, s, err)) return -1;
    param_table_t t;
    if (param_table_build(&t, c, err)) return -1;
    int rc = 0, l;
    if (param < 0 || param >= t.count) {
        rc = perr_set(err, "names: parameter %d: model %s has %d", param, c->name, t.count);
    } else {
        const param_info_t *p = &t.info[param];
        const names_row_t *r = s == NAMES_MEGATRON_LM ? NULL : parity_row(p->name, &l);
        int n = 0;
        if (s == NAMES_MEGATRON_LM) n = snprintf(name, cap, "%s", p->name);
        else if (!r) rc = perr_set(err, "names: %s has no name for parameter '%s'", SCHEME[s], p->name);
        else if (l < 0) n = snprintf(name, cap, "%s", row_name(r, s));
        else n = snprintf(name, cap, "%s%d.%s", LAYER_PREFIX[s], l, row_name(r, s));
        if (!rc && (n < 0 || (size_t)n >= cap))
            rc = perr_set(err, "names: the name of '%s' does not fit %zu bytes", p->name, cap);
        if (!rc && map) fill_map(p, param, s, r, map);
    }
    param_table_free(&t);
    return rc;
}

const char *names_tied_head(const model_config_t *c, names_scheme_t s, int *exported) {
    if (exported) *exported = c->tied && s == NAMES_NANOGPT;
    return c->tied && (s == NAMES_HF_GPT2 || s == NAMES_NANOGPT) ? "lm_head.weight" : NULL;
}

/* A layer number as parity writes it: decimal, no sign or leading zero. */
static int layer_number(const char *s, int layers, int *l, const char **rest) {
    const char *p = s;
    long v = 0;
    while (*p >= '0' && *p <= '9' && v < 1000000) v = v * 10 + (*p++ - '0');
    if (p == s || *p != '.' || (s[0] == '0' && p - s > 1) || v >= layers) return -1;
    *l = (int)v;
    *rest = p + 1;
    return 0;
}

/* The row of scheme s's name, its layer (or -1) and parity's name. */
static const names_row_t *scheme_row(const model_config_t *c, names_scheme_t s, const char *name,
                                     int *l, char *pn, size_t cap) {
    *l = -1;
    for (int k = 0; k < N_MODEL_ROWS; k++)
        if (!strcmp(name, row_name(&MODEL_ROWS[k], s))) {
            snprintf(pn, cap, "%s", MODEL_ROWS[k].parity);
            return &MODEL_ROWS[k];
        }
    const size_t np = strlen(LAYER_PREFIX[s]);
    const char *rest;
    if (strncmp(name, LAYER_PREFIX[s], np) || layer_number(name + np, c->layers, l, &rest))
        return NULL;
    for (int k = 0; k < N_LAYER_ROWS; k++)
        if (!strcmp(rest, row_name(&LAYER_ROWS[k], s))) {
            snprintf(pn, cap, "layers.%d.%s", *l, LAYER_ROWS[k].parity);
            return &LAYER_ROWS[k];
        }
    return NULL;
}

int names_to_parity(const model_config_t *c, names_scheme_t s, const char *name, char *parity,
                    size_t cap, names_map_t *map, perr_t *err) {
    if (!name) return perr_set(err, "names: no name");
    if (check_model(c, s, err)) return -1;
    param_table_t t;
    if (param_table_build(&t, c, err)) return -1;
    char pn[128];
    int l = -1, i = -1, alias = 0;
    const names_row_t *r = NULL;
    if (s == NAMES_MEGATRON_LM) {
        snprintf(pn, sizeof pn, "%s", name);
    } else if ((r = scheme_row(c, s, name, &l, pn, sizeof pn)) == NULL) {
        pn[0] = 0;
    } else if (!strcmp(pn, "output_layer.weight") && c->tied) {
        /* the tied head: a GPT-2 scheme's lm_head.weight is the word
         * embedding under its other key; Megatron has no such tensor */
        const char *head = names_tied_head(c, s, NULL);
        if (head && !strcmp(name, head)) {
            snprintf(pn, sizeof pn, "%s", MODEL_ROWS[0].parity);
            r = &MODEL_ROWS[0];
            alias = 1;
        }
    }
    if (pn[0]) i = param_find(&t, pn);
    int rc = 0;
    if (i < 0) {
        char esc[ST_ESCAPE_CAP(96)];
        rc = perr_set(err, "'%s' is not a parameter of model %s in the %s names (%s%s)",
                      st_escape(name, esc, sizeof esc), c->name, SCHEME[s],
                      s == NAMES_MEGATRON_LM ? "parity's: layers.<l>.self_attention.query_key_value.weight, ..."
                      : s == NAMES_MEGATRON_CORE ? "decoder.layers.<l>.self_attention.linear_qkv.weight, ..."
                                                 : "transformer.h.<l>.attn.c_attn.weight, ...",
                      c->tied && !strcmp(pn, "output_layer.weight") ? "; the head is tied to the "
                                                                      "word embedding" : "");
    } else {
        int n = snprintf(parity, cap, "%s", pn);
        if (n < 0 || (size_t)n >= cap)
            rc = perr_set(err, "names: '%s' does not fit %zu bytes", pn, cap);
        if (!rc && map) {
            fill_map(&t.info[i], i, s, r, map);
            map->alias = alias;
        }
    }
    param_table_free(&t);
    return rc;
}

/* The GPT-2 schemes' fused-qkv row (or column) of parity's row p:
 * parity's (head h, which w, d) is their (which w, head h, d). */
static int64_t qkv_scheme_row(const model_config_t *c, int64_t p) {
    const int64_t C = c->hidden, D = C / c->heads;
    const int64_t h = p / (3 * D), w = p / D % 3, d = p % D;
    return w * C + h * D + d;
}

/* Parity's tensor is [R, K] (K = 1 for a vector, the product of the
 * later axes for an expert's 3-axis weight, which no scheme transposes);
 * the scheme's holds parity's element (p, k) at scheme_at. */
static void parity_dims(const names_map_t *m, int64_t *R, int64_t *K) {
    int64_t a = m->ndim > 0 ? m->shape[0] : 1, b = 1;
    for (int d = 1; d < m->ndim; d++) b *= m->shape[d];
    *R = m->transpose ? b : a;
    *K = m->transpose ? a : b;
}

static int64_t scheme_at(const model_config_t *c, const names_map_t *m, int64_t R, int64_t K,
                         int64_t p, int64_t k) {
    const int64_t s = m->qkv ? qkv_scheme_row(c, p) : p;
    return m->transpose ? k * R + s : s * K + k;
}

void names_values_to_parity(const model_config_t *c, const names_map_t *m, const float *in,
                            float *out) {
    int64_t R, K;
    parity_dims(m, &R, &K);
    for (int64_t p = 0; p < R; p++)
        for (int64_t k = 0; k < K; k++) out[p * K + k] = in[scheme_at(c, m, R, K, p, k)];
}

void names_values_from_parity(const model_config_t *c, const names_map_t *m, const float *in,
                              float *out) {
    int64_t R, K;
    parity_dims(m, &R, &K);
    for (int64_t p = 0; p < R; p++)
        for (int64_t k = 0; k < K; k++) out[scheme_at(c, m, R, K, p, k)] = in[p * K + k];
}

/* Whether scheme s names every name (with the shapes, when given);
 * *bad: the first it does not. */
static int fits(const model_config_t *c, names_scheme_t s, const char *const *names,
                const int *ndim, const int64_t *const *shape, int n, int *bad) {
    char pn[128];
    names_map_t m;
    perr_t e;
    for (int k = 0; k < n; k++) {
        int ok = !names_to_parity(c, s, names[k], pn, sizeof pn, &m, &e);
        if (ok && ndim && shape) {
            ok = ndim[k] == m.ndim;
            for (int d = 0; ok && d < m.ndim; d++) ok = shape[k][d] == m.shape[d];
        }
        if (!ok) {
            *bad = k;
            return 0;
        }
    }
    return 1;
}

int names_detect_shapes(const model_config_t *c, const char *const *names, const int *ndim,
                        const int64_t *const *shape, int n, names_scheme_t *out, perr_t *err) {
    if (n < 1 || !names) return perr_set(err, "names: no tensor names to detect a scheme from");
    int fit[NAMES_COUNT], nfit = 0, bad[NAMES_COUNT] = {0}, best = 0;
    for (int s = 0; s < NAMES_COUNT; s++) {
        perr_t e;
        if (check_model(c, (names_scheme_t)s, &e)) {
            bad[s] = -1;
            continue;
        }
        if (fits(c, (names_scheme_t)s, names, ndim, shape, n, &bad[s])) fit[nfit++] = s;
        else if (bad[s] > bad[best] || bad[best] < 0) best = s; /* the one that got furthest */
    }
    char esc[ST_ESCAPE_CAP(96)];
    if (nfit == 1) {
        *out = (names_scheme_t)fit[0];
        return 0;
    }
    if (nfit > 1)
        return perr_set(err, "the %d tensor names fit both %s and %s%s: declare the scheme "
                             "(--names, or the file's parity.names)", n, SCHEME[fit[0]],
                        SCHEME[fit[1]], ndim ? "" : " (they share names; the shapes decide)");
    if (bad[best] == 0)
        return perr_set(err, "'%s' is %s in no naming scheme of model %s (megatron-lm, "
                             "megatron-core, hf-gpt2, nanogpt)",
                        st_escape(names[0], esc, sizeof esc), ndim ? "a name or shape" : "a name",
                        c->name);
    return perr_set(err, "'%s' is not %s of model %s in %s, which names the %d before it; no "
                         "scheme names all %d (the names mix schemes)",
                    st_escape(names[bad[best]], esc, sizeof esc),
                    ndim ? "a name (of that shape)" : "a name", c->name, SCHEME[best], bad[best], n);
}

int names_detect(const model_config_t *c, const char *const *names, int n, names_scheme_t *out,
                 perr_t *err) {
    return names_detect_shapes(c, names, NULL, NULL, n, out, err);
}
