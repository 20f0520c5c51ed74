/* test_model_config.c - configs, the parameter table, init, the learning
 * rate schedule, AdamW and the data, each against an independent
 * computation from MODEL.md's formulas. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../harness.h"
#include "parity/corpus.h"
#include "model/gpt.h"
#include "parity/pmath.h"

/* MODEL.md's parameter count, from the shapes alone. */
static size_t expected_params(const model_config_t *c) {
    size_t V = c->vocab, T = c->seq_length, C = c->hidden, F = c->ffn, L = c->layers;
    const size_t attention = 2 * C + 3 * C * C + 3 * C + C * C + C; /* LN, qkv, projection */
    size_t per_layer = attention + 2 * C + F * C + F + C * F + C;
    size_t n = V * C + T * C + L * per_layer + 2 * C + (c->tied ? 0 : V * C);
    if (c->arch == MODEL_T5) /* encoder layers, its final LN, each decoder layer's cross-attention */
        n += (size_t)c->encoder_layers * per_layer + 2 * C + L * attention;
    if (c->arch == MODEL_LLAVA) /* the patch embedding, encoder layers, the projector (C -> F -> C) */
        n += C * (size_t)c->patch_dim + C + (size_t)c->encoder_layers * per_layer + F * C + F + C * F + C;
    return n;
}

static void test_builtins(void) {
    perr_t err;
    for (const char *const *n = model_builtin_names(); *n; n++) {
        model_config_t c;
        CHECK(!model_config_builtin(*n, &c, &err), "%s: %s", *n, err.msg);
        CHECK(!model_config_validate(&c, &err), "%s invalid: %s", *n, err.msg);
        param_table_t t;
        CHECK(!param_table_build(&t, &c, &err), "%s", err.msg);
        CHECK(t.total == expected_params(&c), "%s: %zu params, expected %zu", *n, t.total,
              expected_params(&c));
        param_table_free(&t);
    }
    model_config_t c;
    model_config_builtin("gpt-small", &c, &err);
    param_table_t t;
    param_table_build(&t, &c, &err);
    CHECK(t.total == 3257856, "gpt-small has %zu parameters, the issue says 3,257,856", t.total);
    param_table_free(&t);
    /* gpt-tiny admits the layouts later issues test */
    model_config_builtin("gpt-tiny", &c, &err);
    CHECK(c.heads == 8 && c.layers >= 8, "gpt-tiny heads %d layers %d", c.heads, c.layers);
    CHECK((c.hidden / c.tile_features) % 8 == 0 && (c.seq_length / c.tile_tokens) % 8 == 0,
          "gpt-tiny tile counts %d x %d", c.hidden / c.tile_features, c.seq_length / c.tile_tokens);
    int dps[] = {1, 2, 3, 4, 6, 8};
    for (int i = 0; i < 6; i++)
        CHECK(c.global_batch % dps[i] == 0, "dp %d does not divide batch %d", dps[i],
              c.global_batch);
    CHECK(model_config_builtin("gpt-huge", &c, &err) == -1 && strstr(err.msg, "gpt-tiny"),
          "unknown model message: %s", err.msg);
}

static void expect_invalid(model_config_t c, const char *field) {
    perr_t err = {{0}};
    int rc = model_config_validate(&c, &err);
    CHECK(rc == -1 && strstr(err.msg, field), "expected an error naming %s, got rc %d '%s'",
          field, rc, err.msg);
}

static void test_validation(void) {
    model_config_t c, d;
    perr_t err;
    model_config_builtin("gpt-tiny", &c, &err);
    d = c, d.tile_tokens = 5, expect_invalid(d, "tiles.tokens");
    d = c, d.tile_features = 12, expect_invalid(d, "tiles.features");
    d = c, d.tile_features = 4, expect_invalid(d, "head size"); /* D = 8 */
    d = c, d.tile_ffn = 48, expect_invalid(d, "tiles.ffn");
    d = c, d.heads = 6, expect_invalid(d, "heads");
    d = c, d.micro_batch = 5, expect_invalid(d, "micro_batch");
    d = c, d.hidden_dropout = 1.0f, expect_invalid(d, "dropouts.hidden");
    d = c, d.layers = 0, expect_invalid(d, "layers");
    d = c, d.beta2 = 1.0f, expect_invalid(d, "beta2");
    d = c, d.vocab = 250, expect_invalid(d, "vocab");
    /* infinities pass a plain "> 0" test; found by make fuzz */
    d = c, d.ln_eps = INFINITY, expect_invalid(d, "ln_eps");
    d = c, d.lr = INFINITY, expect_invalid(d, "lr");
    d = c, d.min_lr = INFINITY, expect_invalid(d, "min_lr");
    d = c, d.eps = INFINITY, expect_invalid(d, "eps");
    d = c, d.weight_decay = INFINITY, expect_invalid(d, "weight_decay");
    d = c, d.clip_grad = INFINITY, expect_invalid(d, "clip_grad");
    /* 4 + 12 x layers wrapped an int: a crash, or -2147483640 tensors */
    d = c, d.layers = 357913942, expect_invalid(d, "layers (--num-layers) = 357913942");
    d = c, d.layers = 178956971, expect_invalid(d, "layers (--num-layers) = 178956971");
    d = c, d.layers = MODEL_MAX_LAYERS;
    CHECK(!model_config_validate(&d, &err), "%d layers: %s", d.layers, err.msg);
    d = c, d.global_batch = (1 << 30) / d.seq_length + d.micro_batch;
    expect_invalid(d, "global_batch (--global-batch-size)");
    param_table_t t;
    d = c, d.layers = 357913942;
    CHECK(param_table_build(&t, &d, &err) == -1 && strstr(err.msg, "layers"),
          "param_table_build of an unvalidated 357913942 layers: %s", err.msg);
}

static void write_file(const char *path, const char *text) {
    FILE *f = fopen(path, "w");
    fputs(text, f);
    fclose(f);
}

static void test_config_files(void) {
    perr_t err;
    char path[] = "/tmp/parity-cfg-XXXXXX";
    int fd = mkstemp(path);
    CHECK(fd >= 0, "mkstemp");
    if (fd < 0) return;
    close(fd);
    /* round trip: the dump's config JSON is a config file */
    model_config_t a, b;
    model_config_builtin("gpt-tiny", &a, &err);
    a.tied = 0, a.seed = 77, a.lr = 3e-4f, a.attention_dropout = 0.05f, a.tile_ffn = 64;
    char *j = model_config_json(&a);
    write_file(path, j);
    free(j);
    memset(&b, 0, sizeof b);
    CHECK(!model_config_load(path, &b, &err), "%s", err.msg);
    CHECK(!memcmp(&a, &b, sizeof a), "config JSON round trip changed the config");
    /* base + override */
    write_file(path, "{\"base\": \"gpt-micro\", \"layers\": 3, \"dropouts\": {\"hidden\": 0}}");
    memset(&b, 0, sizeof b);
    CHECK(!model_config_load(path, &b, &err), "%s", err.msg);
    CHECK(b.layers == 3 && b.hidden == 16 && b.hidden_dropout == 0.0f &&
              b.attention_dropout == 0.1f,
          "base+override: layers %d hidden %d", b.layers, b.hidden);
    /* errors name the field or say what is wrong */
    struct { const char *text, *want; } bad[] = {
        {"{\"layers\": 2,", "malformed JSON"},
        {"{\"layers\": \"two\"}", "'layers'"},
        {"{\"layers\": 2.5}", "'layers'"},
        {"{\"hiden\": 64}", "'hiden'"},
        {"{\"tiles\": {\"token\": 4}}", "'tiles.token'"},
        {"{\"tied\": 1}", "'tied'"},
        {"{\"ln_eps\": 1e206}", "'ln_eps': 1e+206 is beyond fp32"}, /* was inf */
        /* was cut to 63 bytes, splitting the last character (make fuzz) */
        {"{\"name\": \"\\u00e9123456789012345678901234567890123456789012345678901234567890123\"}",
         "'name': expected at most 63 bytes"},
        {"{\"name\": \"a\\u0000b\"}", "'name'"},
        {"{\"dropouts\": {\"hidden\": -1e39}}", "'hidden'"},
        {"{\"base\": \"gpt-nope\"}", "'base'"},
        {"[1, 2]", "object"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        write_file(path, bad[i].text);
        model_config_builtin("gpt-tiny", &b, &err);
        int rc = model_config_load(path, &b, &err);
        CHECK(rc == -1 && strstr(err.msg, bad[i].want), "%s: rc %d '%s' (wanted '%s')",
              bad[i].text, rc, err.msg, bad[i].want);
    }
    unlink(path);
    CHECK(model_config_load(path, &b, &err) == -1 && strstr(err.msg, path),
          "a missing file's message should name it: %s", err.msg);
}

static void test_init(void) {
    model_config_t c;
    perr_t err;
    model_config_builtin("gpt-tiny", &c, &err);
    param_table_t t;
    param_table_build(&t, &c, &err);
    float *p = malloc(t.total * 4), *q = malloc(t.total * 4);
    params_init(&t, 1234, p);
    params_init(&t, 1234, q);
    CHECK(!memcmp(p, q, t.total * 4), "init is not reproducible");
    for (int i = 0; i < t.count; i++) {
        const param_info_t *in = &t.info[i];
        const float *x = p + in->offset;
        if (in->init != INIT_NORMAL) {
            float want = in->init == INIT_ONES ? 1.0f : 0.0f;
            for (size_t k = 0; k < in->numel; k++)
                if (x[k] != want) {
                    CHECK(0, "%s[%zu] = %g, want %g", in->name, k, (double)x[k], (double)want);
                    break;
                }
            continue;
        }
        double s = 0, s2 = 0;
        for (size_t k = 0; k < in->numel; k++) s += x[k], s2 += (double)x[k] * x[k];
        double n = (double)in->numel, mean = s / n, sd = sqrt(s2 / n - mean * mean);
        int residual_out = strstr(in->name, "dense.weight") || strstr(in->name, "4h_to_h.weight");
        double want = residual_out ? 0.02 / sqrt(2.0 * c.layers) : 0.02;
        CHECK(fabs(sd / want - 1) < 6 / sqrt(2 * n) && fabs(mean) < 6 * want / sqrt(n),
              "%s: mean %g sd %g, want N(0, %g)", in->name, mean, sd, want);
        CHECK(in->weight_decay == 1 && in->ndim == 2, "%s should be a decayed 2-D weight",
              in->name);
    }
    /* keyed by name: two tensors of the same shape get different values */
    int q0 = param_find(&t, "layers.0.self_attention.query_key_value.weight"),
        q1 = param_find(&t, "layers.1.self_attention.query_key_value.weight");
    CHECK(memcmp(p + t.info[q0].offset, p + t.info[q1].offset, 64 * 4),
          "layers 0 and 1 start from the same query_key_value weights");
    free(p), free(q);
    param_table_free(&t);
}

static void test_schedule(void) {
    model_config_t c;
    perr_t err;
    model_config_builtin("gpt-tiny", &c, &err);
    c.lr = 1e-3f, c.min_lr = 1e-4f, c.warmup = 2, c.decay_steps = 100;
    for (int s = 0; s < 120; s++) {
        double want;
        if (s < c.warmup)
            want = (double)c.lr * (s + 1) / c.warmup;
        else if (s >= c.decay_steps)
            want = c.min_lr;
        else
            want = c.min_lr + 0.5 * (1 + cos(M_PI * (s - c.warmup) / (double)(c.decay_steps - c.warmup))) *
                                  ((double)c.lr - c.min_lr);
        float got = lr_schedule(&c, s);
        CHECK(fabs(got - want) <= 1e-6 * want, "step %d: lr %.9g, want %.9g", s, (double)got, want);
    }
    c.decay_steps = 0;
    CHECK(lr_schedule(&c, 50) == c.lr, "decay_steps 0 must keep lr");
    c.warmup = 0, c.decay_steps = 10;
    CHECK(lr_schedule(&c, 0) == c.lr, "no warm-up: step 0 at lr");
}

static void test_adamw(void) {
    enum { N = 5 };
    float p[N] = {0.5f, -0.25f, 1e-3f, 0, 2}, g[N] = {0.1f, -0.2f, 1e-6f, 0.3f, 0};
    float m[N] = {0}, v[N] = {0};
    double pd[N], md[N] = {0}, vd[N] = {0};
    for (int i = 0; i < N; i++) pd[i] = p[i];
    const double b1 = 0.9, b2 = 0.95, eps = 1e-8, wd = 0.1, lr = 1e-3;
    for (int t = 1; t <= 3; t++) {
        adamw_update(p, g, m, v, N, t, (float)lr, 0.9f, 0.95f, 1e-8f, 0.1f);
        for (int i = 0; i < N; i++) {
            md[i] = b1 * md[i] + (1 - b1) * g[i];
            vd[i] = b2 * vd[i] + (1 - b2) * (double)g[i] * g[i];
            double u = (md[i] / (1 - pow(b1, t))) / (sqrt(vd[i] / (1 - pow(b2, t))) + eps);
            pd[i] = pd[i] - lr * (u + wd * pd[i]);
        }
    }
    for (int i = 0; i < N; i++)
        CHECK(fabs(p[i] - pd[i]) <= 1e-6 * (fabs(pd[i]) + 1e-3), "p[%d] %.9g vs %.9g", i,
              (double)p[i], pd[i]);
}

/* The bias correction's early stop (adamw.c: once beta^i <= 2^-26) gives
 * the bits of the whole loop of fp64 products, through adamw_update. */
static void test_adamw_bias_correction(void) {
    const float betas[] = {0.0f, 0.5f, 0.9f, 0.95f, 0.98f, 0.999f, 0.9999f};
    for (size_t k = 0; k < sizeof betas / sizeof betas[0]; k++) {
        double pw = 1.0;
        int bad = 0;
        for (int t = 1; t <= 200000 && !bad; t++) {
            pw *= (double)betas[k];
            if (t > 3000 && t % 991) continue;
            const float bc = (float)(1.0 - pw);
            /* m = 0, v = 0, g = 1, lr = 1, no decay: p = -(om1 / bc1) / (sqrt(om2 / bc2) + eps)
             * with the same beta for both moments */
            float p = 0.0f, g = 1.0f, m = 0.0f, v = 0.0f;
            adamw_update(&p, &g, &m, &v, 1, t, 1.0f, betas[k], betas[k], 1e-8f, 0.0f);
            const float om = 1.0f - betas[k];
            const float want = 0.0f - 1.0f * ((om / bc) / (adamw_sqrtf(om / bc) + 1e-8f));
            bad = memcmp(&p, &want, sizeof p) != 0;
            CHECK(!bad, "beta %g t %d: update %a, the whole loop gives %a", (double)betas[k], t,
                  (double)p, (double)want);
        }
    }
}

/* adamw_sqrtf (hardware IEEE sqrt) gives pm_sqrtf's bits everywhere. */
static void test_adamw_sqrt(void) {
    uint32_t u = 12345;
    int bad = 0;
    for (long i = 0; i < 2000000; i++) {
        u = u * 1664525u + 1013904223u;
        uint32_t b = i < 1000 ? (uint32_t)i : (i < 2000 ? 0x7f7fffffu - (uint32_t)i : u);
        float x;
        memcpy(&x, &b, 4);
        float a = adamw_sqrtf(x), p = pm_sqrtf(x);
        if (memcmp(&a, &p, 4) && bad++ < 3)
            CHECK(0, "x = %a (0x%08x): adamw_sqrtf %a, pm_sqrtf %a", (double)x, b, (double)a,
                  (double)p);
    }
}

static void test_corpus(void) {
    perr_t err;
    char path[256];
    CHECK(!corpus_default_path(path, sizeof path, &err), "%s", err.msg);
    corpus_t c;
    if (corpus_load(&c, path, &err)) {
        CHECK(0, "%s", err.msg);
        return;
    }
    CHECK(c.n >= 30000 && c.n <= 100000, "corpus is %zu bytes, expected 30-100 KB", c.n);
    CHECK(!corpus_check(&c, 256, 32, &err), "%s", err.msg);
    CHECK(corpus_check(&c, 255, 32, &err) == -1 && strstr(err.msg, "vocab"), "%s", err.msg);
    int32_t in[32], tg[32];
    uint64_t samples[] = {0, 1, 23, 1000, 123456789};
    for (int k = 0; k < 5; k++) {
        corpus_sample(&c, samples[k], 32, in, tg);
        size_t start = (size_t)((samples[k] * 32) % (c.n - 33));
        for (int t = 0; t < 32; t++)
            if (in[t] != c.bytes[start + t] || tg[t] != c.bytes[start + t + 1]) {
                CHECK(0, "sample %llu token %d", (unsigned long long)samples[k], t);
                break;
            }
    }
    corpus_free(&c);
    CHECK(corpus_load(&c, "/nonexistent/corpus.txt", &err) == -1 &&
              strstr(err.msg, "/nonexistent/corpus.txt"),
          "%s", err.msg);
}

int main(void) {
    RUN(test_builtins);
    RUN(test_validation);
    RUN(test_config_files);
    RUN(test_init);
    RUN(test_schedule);
    RUN(test_adamw);
    RUN(test_adamw_sqrt);
    RUN(test_adamw_bias_correction);
    RUN(test_corpus);
    return harness_done();
}
