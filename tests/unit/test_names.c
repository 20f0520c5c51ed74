/* test_names.c - the naming schemes of names.h: every parameter of
 * gpt-micro (2 heads, tied), of a 4-head variant and of an untied one
 * maps to a scheme name and back in every scheme, with its values bit
 * for bit; the GPT-2 schemes' qkv sits where MODEL.md's row order says;
 * detection on each scheme's full list; exports read back; refusals
 * name what they refuse. */
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "../harness.h"
#include "parity/names.h"

static model_config_t config(int heads, int tied) {
    model_config_t c;
    perr_t e;
    model_config_builtin("gpt-micro", &c, NULL);
    c.heads = heads;
    c.tied = tied;
    if (model_config_validate(&c, &e)) fprintf(stderr, "config: %s\n", e.msg);
    return c;
}

/* Distinct, non-trivial values: every element another bit pattern. */
static void fill(float *x, size_t n, uint32_t salt) {
    for (size_t i = 0; i < n; i++) x[i] = (float)(i * 2654435761u % 1000003u + salt) * 0.001f - 3.0f;
}

static void round_trip(const model_config_t *c) {
    param_table_t t;
    perr_t e;
    if (param_table_build(&t, c, &e)) {
        CHECK(0, "table: %s", e.msg);
        return;
    }
    float *in = malloc(t.total * sizeof *in), *sch = malloc(t.total * sizeof *sch),
          *back = malloc(t.total * sizeof *back);
    fill(in, t.total, 7);
    for (int s = 0; s < NAMES_COUNT; s++)
        for (int i = 0; i < t.count; i++) {
            const param_info_t *p = &t.info[i];
            char name[160], pn[160];
            names_map_t m, m2;
            int rc = names_from_parity(c, (names_scheme_t)s, i, name, sizeof name, &m, &e);
            CHECK(rc == 0, "%s %s: %s", names_scheme_name(s), p->name, e.msg);
            if (rc) continue;
            rc = names_to_parity(c, (names_scheme_t)s, name, pn, sizeof pn, &m2, &e);
            CHECK(rc == 0 && !strcmp(pn, p->name) && m2.param == i && !m2.alias,
                  "%s: '%s' -> '%s' -> '%s' (%s)", names_scheme_name(s), p->name, name,
                  rc ? "-" : pn, rc ? e.msg : "");
            CHECK(!memcmp(&m, &m2, sizeof m), "%s %s: the two maps differ", names_scheme_name(s),
                  name);
            CHECK(s != NAMES_MEGATRON_LM || !strcmp(name, p->name), "megatron-lm is parity's");
            size_t numel = 1;
            for (int d = 0; d < m.ndim; d++) numel *= (size_t)m.shape[d];
            CHECK(numel == p->numel, "%s %s: %zu elements, parity's %zu", names_scheme_name(s),
                  name, numel, p->numel);
            names_values_from_parity(c, &m, in + p->offset, sch);
            names_values_to_parity(c, &m, sch, back);
            CHECK(!memcmp(back, in + p->offset, p->numel * sizeof(float)),
                  "%s %s: values do not round trip", names_scheme_name(s), name);
        }
    free(in);
    free(sch);
    free(back);
    param_table_free(&t);
}

static void test_round_trip(void) {
    model_config_t a = config(2, 1), b = config(4, 1), u = config(4, 0);
    round_trip(&a);
    round_trip(&b);
    round_trip(&u);
}

/* MODEL.md: parity's qkv row h·3D + w·D + d; hf-gpt2's c_attn column
 * w·C + h·D + d (Conv1D [C, 3C]), nanogpt's row; megatron-core's per
 * group g = h: [q, k, v], parity's own. Checked element by element. */
static void test_qkv_layouts(void) {
    model_config_t c = config(4, 1);
    param_table_t t;
    perr_t e;
    param_table_build(&t, &c, &e);
    const int i = param_find(&t, "layers.1.self_attention.query_key_value.weight");
    const int64_t C = c.hidden, D = C / c.heads;
    float *in = malloc(t.info[i].numel * sizeof *in), *out = malloc(t.info[i].numel * sizeof *out);
    fill(in, t.info[i].numel, 3);
    for (int s = NAMES_MEGATRON_CORE; s < NAMES_COUNT; s++) {
        char name[160];
        names_map_t m;
        names_from_parity(&c, (names_scheme_t)s, i, name, sizeof name, &m, &e);
        names_values_from_parity(&c, &m, in, out);
        int bad = 0;
        for (int64_t h = 0; h < c.heads; h++)
            for (int64_t w = 0; w < 3; w++)
                for (int64_t d = 0; d < D; d++)
                    for (int64_t k = 0; k < C; k++) {
                        const float want = in[(h * 3 * D + w * D + d) * C + k];
                        const int64_t col = w * C + h * D + d;
                        const float got = s == NAMES_HF_GPT2   ? out[k * 3 * C + col]
                                          : s == NAMES_NANOGPT ? out[col * C + k]
                                                               : out[(h * 3 * D + w * D + d) * C + k];
                        bad += memcmp(&got, &want, sizeof got) != 0;
                    }
        CHECK(bad == 0, "%s %s: %d elements not where the layout puts them", names_scheme_name(s),
              name, bad);
        CHECK(s != NAMES_HF_GPT2 || (m.shape[0] == C && m.shape[1] == 3 * C), "hf-gpt2 [C, 3C]");
    }
    free(in);
    free(out);
    param_table_free(&t);
}

/* Each scheme's full list, with shapes, detects it; names alone tell
 * the Megatron schemes apart, not hf-gpt2 from nanogpt. */
static void test_detect(void) {
    model_config_t c = config(4, 0);
    param_table_t t;
    perr_t e;
    param_table_build(&t, &c, &e);
    static char names[NAMES_COUNT][64][160];
    const char *list[64];
    int ndim[64];
    int64_t shp[64][2];
    const int64_t *shape[64];
    for (int s = 0; s < NAMES_COUNT; s++) {
        for (int i = 0; i < t.count; i++) {
            names_map_t m;
            names_from_parity(&c, (names_scheme_t)s, i, names[s][i], 160, &m, &e);
            list[i] = names[s][i];
            ndim[i] = m.ndim, shp[i][0] = m.shape[0], shp[i][1] = m.shape[1], shape[i] = shp[i];
        }
        names_scheme_t got = NAMES_COUNT;
        int rc = names_detect_shapes(&c, list, ndim, shape, t.count, &got, &e);
        CHECK(rc == 0 && got == (names_scheme_t)s, "%s: detected %s (%s)", names_scheme_name(s),
              rc ? "none" : names_scheme_name(got), rc ? e.msg : "");
        rc = names_detect(&c, list, t.count, &got, &e);
        if (s <= NAMES_MEGATRON_CORE)
            CHECK(rc == 0 && got == (names_scheme_t)s, "%s by names: %s", names_scheme_name(s),
                  rc ? e.msg : names_scheme_name(got));
        else
            CHECK(rc < 0 && strstr(e.msg, "hf-gpt2") && strstr(e.msg, "nanogpt"),
                  "%s by names alone must be ambiguous: %s", names_scheme_name(s),
                  rc ? e.msg : names_scheme_name(got));
    }
    /* a name no scheme knows, and a list mixing schemes */
    const char *unknown[] = {"transformer.h.0.attn.c_attn.weight", "h.0.attn.bias"};
    names_scheme_t got;
    int rc = names_detect(&c, unknown, 2, &got, &e);
    CHECK(rc < 0 && strstr(e.msg, "'h.0.attn.bias'"), "unknown name: %s", rc ? e.msg : "detected");
    const char *mixed[] = {"decoder.layers.0.input_layernorm.weight", "layers.0.input_layernorm.bias"};
    rc = names_detect(&c, mixed, 2, &got, &e);
    CHECK(rc < 0 && strstr(e.msg, "mix schemes") && strstr(e.msg, "layers.0.input_layernorm.bias"),
          "mixed: %s", rc ? e.msg : "detected");
    /* the shapes: nanogpt's list with hf-gpt2's Conv1D shape for c_attn */
    for (int i = 0; i < t.count; i++) {
        names_map_t m;
        names_from_parity(&c, NAMES_NANOGPT, i, names[0][i], 160, &m, &e);
        list[i] = names[0][i];
        ndim[i] = m.ndim, shp[i][0] = m.shape[0], shp[i][1] = m.shape[1], shape[i] = shp[i];
    }
    const int q = param_find(&t, "layers.0.self_attention.query_key_value.weight");
    shp[q][0] = c.hidden, shp[q][1] = 3 * c.hidden; /* c_attn [C, 3C], the rest nn.Linear */
    rc = names_detect_shapes(&c, list, ndim, shape, t.count, &got, &e);
    CHECK(rc < 0, "a list of mixed layouts detected as %s", rc ? "-" : names_scheme_name(got));
    param_table_free(&t);
}

/* The tied head: lm_head.weight is the word embedding's alias in the
 * GPT-2 schemes; Megatron has no output_layer.weight then. */
static void test_tied_head(void) {
    model_config_t c = config(2, 1), u = config(2, 0);
    char pn[160];
    names_map_t m;
    perr_t e;
    for (int s = NAMES_HF_GPT2; s <= NAMES_NANOGPT; s++) {
        int rc = names_to_parity(&c, (names_scheme_t)s, "lm_head.weight", pn, sizeof pn, &m, &e);
        CHECK(rc == 0 && m.alias && !strcmp(pn, "embedding.word_embeddings.weight"),
              "%s tied lm_head: %s", names_scheme_name(s), rc ? e.msg : pn);
        rc = names_to_parity(&u, (names_scheme_t)s, "lm_head.weight", pn, sizeof pn, &m, &e);
        CHECK(rc == 0 && !m.alias && !strcmp(pn, "output_layer.weight"), "%s untied: %s",
              names_scheme_name(s), rc ? e.msg : pn);
    }
    int exported = 0;
    CHECK(names_tied_head(&c, NAMES_NANOGPT, &exported) && exported, "nanogpt writes it");
    CHECK(names_tied_head(&c, NAMES_HF_GPT2, &exported) && !exported, "hf-gpt2 does not");
    CHECK(!names_tied_head(&u, NAMES_NANOGPT, NULL), "untied: no alias");
    int rc = names_to_parity(&c, NAMES_MEGATRON_CORE, "output_layer.weight", pn, sizeof pn, &m, &e);
    CHECK(rc < 0 && strstr(e.msg, "output_layer.weight") && strstr(e.msg, "tied"),
          "megatron-core tied output_layer: %s", rc ? e.msg : pn);
}

static void expect_refused(int rc, const perr_t *e, const char *want, const char *what) {
    CHECK(rc < 0 && strstr(e->msg, want), "%s: %s (expected a message naming '%s')", what,
          rc ? e->msg : "accepted", want);
}

static void test_refusals(void) {
    model_config_t c = config(2, 1), moe = c, t5;
    perr_t e;
    char pn[160], name[160];
    names_map_t m;
    names_scheme_t s;
    expect_refused(names_scheme_parse("hf", &s, &e), &e, "'hf'", "unknown scheme");
    expect_refused(names_scheme_parse("hf", &s, &e), &e, "nanogpt", "the choices");
    moe.moe_experts = 2;
    model_config_builtin("t5-tiny", &t5, NULL);
    for (int k = NAMES_MEGATRON_CORE; k < NAMES_COUNT; k++) {
        expect_refused(names_from_parity(&moe, (names_scheme_t)k, 0, name, sizeof name, &m, &e),
                       &e, "mixture of experts", "MoE");
        expect_refused(names_to_parity(&t5, (names_scheme_t)k, "x", pn, sizeof pn, &m, &e), &e,
                       "t5", "T5");
    }
    CHECK(!names_from_parity(&t5, NAMES_MEGATRON_LM, 0, name, sizeof name, &m, &e),
          "megatron-lm names any model: %s", e.msg);
    const char *bad[] = {"transformer.h.2.ln_1.weight", "transformer.h.01.ln_1.weight",
                         "transformer.h.-1.ln_1.weight", "transformer.h.0.ln_3.weight",
                         "decoder.layers.0.input_layernorm.weight"};
    for (size_t k = 0; k < sizeof bad / sizeof *bad; k++) {
        char want[200];
        snprintf(want, sizeof want, "'%s'", bad[k]);
        expect_refused(names_to_parity(&c, NAMES_HF_GPT2, bad[k], pn, sizeof pn, &m, &e), &e, want,
                       bad[k]);
    }
    expect_refused(names_from_parity(&c, NAMES_HF_GPT2, 99, name, sizeof name, &m, &e), &e, "99",
                   "index out of range");
}

/* An export read back is the vector it came from, in every scheme; the
 * scheme is found from the file's parity.names; a declared other one is
 * refused. */
static void test_export_read(void) {
    char dir[] = "/tmp/test_names.XXXXXX";
    if (harness_mkdtemp(dir)) return;
    model_config_t c = config(4, 1);
    param_table_t t;
    perr_t e;
    param_table_build(&t, &c, &e);
    float *in = malloc(t.total * sizeof *in), *back = malloc(t.total * sizeof *back);
    fill(in, t.total, 11);
    for (int s = 0; s < NAMES_COUNT; s++) {
        char sub[600], file[700];
        snprintf(sub, sizeof sub, "%s/%s", dir, names_scheme_name(s));
        snprintf(file, sizeof file, "%s/model.safetensors", sub);
        int rc = names_weights_export(&c, (names_scheme_t)s, in, sub, &e);
        CHECK(rc == 0, "export %s: %s", names_scheme_name(s), e.msg);
        memset(back, 0, t.total * sizeof *back);
        names_scheme_t got = NAMES_COUNT;
        rc = names_weights_read(&c, file, 0, &got, back, &e);
        CHECK(rc == 0 && got == (names_scheme_t)s && !memcmp(in, back, t.total * sizeof *in),
              "read %s back: %s", names_scheme_name(s), rc ? e.msg : "values differ");
        names_scheme_t other = (names_scheme_t)((s + 1) % NAMES_COUNT);
        rc = names_weights_read(&c, file, 1, &other, back, &e);
        CHECK(rc < 0 && strstr(e.msg, "parity.names"), "declared other scheme: %s",
              rc ? e.msg : "accepted");
    }
    free(in);
    free(back);
    param_table_free(&t);
    harness_rmtree(dir);
}

/* parity's own names take every model: a mixture of experts' 3-axis
 * expert weights keep all three axes in the map (its shape held two:
 * the export read past it and wrote [E, F, 0]), and their export reads
 * back bit for bit. */
static void test_moe_megatron_lm(void) {
    model_config_t c = config(2, 1);
    perr_t e;
    c.moe_experts = 2;
    c.moe_topk = 1;
    c.moe_layer_freq = 1;
    if (model_config_validate(&c, &e)) {
        CHECK(0, "MoE config: %s", e.msg);
        return;
    }
    param_table_t t;
    if (param_table_build(&t, &c, &e)) {
        CHECK(0, "table: %s", e.msg);
        return;
    }
    int three = 0;
    for (int i = 0; i < t.count; i++) {
        const param_info_t *p = &t.info[i];
        char name[160];
        names_map_t m;
        const int rc = names_from_parity(&c, NAMES_MEGATRON_LM, i, name, sizeof name, &m, &e);
        CHECK(rc == 0, "%s: %s", p->name, e.msg);
        if (rc) continue;
        size_t numel = 1;
        for (int d = 0; d < m.ndim; d++) numel *= (size_t)m.shape[d];
        three += m.ndim == 3;
        CHECK(m.ndim == p->pl.ndim && numel == p->numel, "%s: map %d-D of %zu elements, parity's "
              "%d-D of %zu", p->name, m.ndim, numel, p->pl.ndim, p->numel);
    }
    CHECK(three > 0, "the MoE model has 3-axis expert weights");
    char dir[] = "/tmp/test_names_moe.XXXXXX";
    if (harness_mkdtemp(dir)) {
        param_table_free(&t);
        return;
    }
    float *in = malloc(t.total * sizeof *in), *back = calloc(t.total, sizeof *back);
    fill(in, t.total, 13);
    char file[600];
    snprintf(file, sizeof file, "%s/model.safetensors", dir);
    names_scheme_t got = NAMES_COUNT;
    int rc = names_weights_export(&c, NAMES_MEGATRON_LM, in, dir, &e);
    CHECK(rc == 0, "export: %s", e.msg);
    if (!rc) rc = names_weights_read(&c, file, 0, &got, back, &e);
    CHECK(rc == 0 && got == NAMES_MEGATRON_LM && !memcmp(in, back, t.total * sizeof *in),
          "MoE export read back: %s", rc ? e.msg : "values differ");
    free(in);
    free(back);
    param_table_free(&t);
    harness_rmtree(dir);
}

int main(void) {
    RUN(test_round_trip);
    RUN(test_qkv_layouts);
    RUN(test_detect);
    RUN(test_tied_head);
    RUN(test_refusals);
    RUN(test_export_read);
    RUN(test_moe_megatron_lm);
    return harness_done();
}
