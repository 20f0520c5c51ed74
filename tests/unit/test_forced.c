/* test_forced.c - the teacher-forced golden step (forced.h): fed the
 * golden run's own tensors it is the golden step, bit for bit; each
 * supplied tensor reaches exactly the units after its boundary; what it
 * refuses, it refuses by name. gpt-micro with dropout, 2 microbatches. */
#include <time.h>

#include "model/gpt.h"
#include "../harness.h"
#include "parity/corpus.h"
#include "parity/dump.h"
#include "parity/forced.h"
#include "parity/tile.h"

enum { STEPS = 3 };

static corpus_t corpus;

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static int micro(model_config_t *c, int precision) {
    perr_t err;
    if (model_config_builtin("gpt-micro", c, &err)) return fprintf(stderr, "%s\n", err.msg), -1;
    c->precision = precision;
    CHECK(c->hidden_dropout > 0 && c->attention_dropout > 0 && c->global_batch == 2 * c->micro_batch,
          "gpt-micro: dropout on, two microbatches");
    return 0;
}

static gpt_t *model(const model_config_t *c) {
    gpt_t *g = NULL;
    perr_t err;
    if (gpt_new(&g, c, &err)) CHECK(0, "gpt_new: %s", err.msg);
    return g;
}

/* Golden steps 0 .. STEPS-1 with every tensor kept; *seconds a step. */
static dump_t *golden_run(const model_config_t *c, double *seconds) {
    gpt_t *g = model(c);
    if (!g) return NULL;
    dump_t *d = dump_new(g, DUMP_TENSORS);
    perr_t err;
    CHECK(d && !dump_add_init(d, g, &err), "golden dump");
    const double t0 = now();
    for (int s = 0; d && s < STEPS; s++) {
        gpt_step_stats_t st;
        CHECK(!dump_golden_step(g, &corpus, s, d, &st, &err), "golden step %d: %s", s, err.msg);
    }
    if (seconds) *seconds = (now() - t0) / STEPS;
    gpt_free(g);
    return d;
}

/* The backend of these tests: the golden dump's tensors of step `step`
 * (the state before it from the step before, or init. and no AdamW
 * state), one of them (`change`) moved: every element by `ulps` units in
 * the last place, or times `scale`. */
typedef struct {
    const st_writer_t *w;
    int64_t step;
    const char *change, *omit; /* omit: a tensor the backend did not write */
    int ulps;
    float scale;
    float *moved;
    int asked, found, bad;
} backend_t;

static const float *backend_get(void *ctx, const char *name, size_t numel) {
    backend_t *b = ctx;
    b->asked++;
    if (b->omit && !strcmp(name, b->omit)) return NULL;
    char full[256];
    const int before = !strncmp(name, "param.", 6) || !strncmp(name, "exp_avg", 7);
    if (before && b->step == 0) {
        if (strncmp(name, "param.", 6)) return NULL; /* AdamW starts from zeros */
        snprintf(full, sizeof full, "init.%s", name + 6);
    } else {
        snprintf(full, sizeof full, "step%lld.%s", (long long)(b->step - before), name);
    }
    const long at = st_writer_find(b->w, full);
    if (at < 0) {
        b->bad++;
        CHECK(0, "the forced step asks for %s, which the golden dump lacks", full);
        return NULL;
    }
    st_tensor_t t;
    const float *x = st_writer_tensor(b->w, (size_t)at, &t);
    if (t.dtype != ST_F32 || st_numel(&t) != numel) {
        b->bad++;
        CHECK(0, "%s: asked for %zu fp32 elements, the dump has %llu of %s", full, numel,
              (unsigned long long)st_numel(&t), st_dtype_name(t.dtype));
        return NULL;
    }
    b->found++;
    if (!b->change || strcmp(name, b->change)) return x;
    free(b->moved);
    b->moved = malloc(numel * sizeof(float));
    for (size_t i = 0; i < numel; i++) {
        uint32_t u;
        memcpy(&u, &x[i], 4);
        u += (uint32_t)b->ulps;
        memcpy(&b->moved[i], &u, 4);
        if (b->scale != 0.0f) b->moved[i] = x[i] * b->scale;
    }
    return b->moved;
}

static const float *nothing(void *ctx, const char *name, size_t numel) {
    (void)name, (void)numel;
    ++*(int *)ctx;
    return NULL;
}

/* Whether tensor `name` (without "step<s>.") of two dumps' step s differs:
 * 1, 0, or -1 when either lacks it. */
static int differs(const st_writer_t *a, const st_writer_t *b, int64_t step, const char *name) {
    char full[256];
    snprintf(full, sizeof full, "step%lld.%s", (long long)step, name);
    const long i = st_writer_find(a, full), j = st_writer_find(b, full);
    if (i < 0 || j < 0) return -1;
    st_tensor_t ta, tb;
    const void *x = st_writer_tensor(a, (size_t)i, &ta), *y = st_writer_tensor(b, (size_t)j, &tb);
    return ta.end != tb.end || memcmp(x, y, ta.end);
}

/* Every tensor of step s of the golden dump against the forced one: the
 * number that differ or are missing (named on stderr), and the forced
 * dump holding nothing else. */
static int compare_step(const st_writer_t *gold, const st_writer_t *forced, int64_t step) {
    char prefix[32];
    const int n = snprintf(prefix, sizeof prefix, "step%lld.", (long long)step);
    int bad = 0, in_gold = 0;
    for (size_t i = 0; i < st_writer_count(gold); i++) {
        st_tensor_t t;
        st_writer_tensor(gold, i, &t);
        if (strncmp(t.name, prefix, (size_t)n)) continue;
        in_gold++;
        const int r = differs(gold, forced, step, t.name + n);
        if (r && bad++ < 5) fprintf(stderr, "  %s: %s\n", t.name, r < 0 ? "missing" : "differs");
    }
    CHECK((size_t)in_gold == st_writer_count(forced), "step %lld: %d golden tensors, %zu forced",
          (long long)step, in_gold, st_writer_count(forced));
    return bad;
}

/* Step `step` on a fresh model from the backend b; the forced dump. */
static dump_t *forced_step(const model_config_t *c, int64_t step, backend_t *b,
                           gpt_step_stats_t *st, double *seconds) {
    gpt_t *g = model(c);
    if (!g) return NULL;
    dump_t *d = dump_new(g, DUMP_TENSORS);
    const forced_inputs_t in = {backend_get, b};
    perr_t err;
    const double t0 = now();
    CHECK(d && !dump_forced_step(g, &corpus, step, &in, d, st, &err), "forced step %lld: %s",
          (long long)step, err.msg);
    if (seconds) *seconds = now() - t0;
    gpt_free(g);
    return d;
}

/* (1) and (4): every step forced with the golden tensors is the golden
 * step, and asks for every boundary's tensor. */
static void forced_is_golden(int precision) {
    model_config_t c;
    if (micro(&c, precision)) return;
    double golden_s = 0, forced_s = 0;
    dump_t *gold = golden_run(&c, &golden_s);
    if (!gold) return;
    gpt_t *g = model(&c);
    const int U = model_num_units(&c), P = g ? g->table.count : 0;
    gpt_free(g);
    for (int s = 0; s < STEPS; s++) {
        backend_t b = {.w = dump_writer(gold), .step = s};
        gpt_step_stats_t st;
        double sec = 0;
        dump_t *f = forced_step(&c, s, &b, &st, &sec);
        forced_s += sec / STEPS;
        if (!f) continue;
        /* a stream and an arriving gradient at each of U-1 boundaries;
         * params, m, v and gradients of every tensor (no m, v before step 0) */
        CHECK(b.asked == 2 * (U - 1) + 4 * P && b.found == b.asked - (s == 0 ? 2 * P : 0) && !b.bad,
              "step %d: asked %d, found %d (units %d, tensors %d)", s, b.asked, b.found, U, P);
        CHECK(compare_step(dump_writer(gold), dump_writer(f), s) == 0,
              "%s step %d forced with the golden tensors is not the golden step",
              model_precision_name(precision), s);
        dump_free(f);
    }
    printf("# %s gpt-micro: golden step %.3f ms, forced step %.3f ms\n",
           model_precision_name(precision), 1e3 * golden_s, 1e3 * forced_s);
    dump_free(gold);
}

static void test_forced_golden_fp32(void) { forced_is_golden(MODEL_FP32); }
static void test_forced_golden_bf16(void) { forced_is_golden(MODEL_BF16); }

/* The number of step s's golden tensors that differ in d or it lacks. */
static int step_diffs(const st_writer_t *gold, const st_writer_t *d, int64_t step) {
    char prefix[32];
    const int n = snprintf(prefix, sizeof prefix, "step%lld.", (long long)step);
    int diff = 0;
    for (size_t i = 0; i < st_writer_count(gold); i++) {
        st_tensor_t t;
        st_writer_tensor(gold, i, &t);
        if (!strncmp(t.name, prefix, (size_t)n)) diff += differs(gold, d, step, t.name + n) != 0;
    }
    return diff;
}

/* (2) Nothing supplied: parity's own values, so a model stepped by forced
 * steps alone is the golden run. */
static void test_nothing_supplied(void) {
    model_config_t c;
    if (micro(&c, MODEL_FP32)) return;
    dump_t *gold = golden_run(&c, NULL);
    gpt_t *g = model(&c);
    dump_t *d = g ? dump_new(g, DUMP_TENSORS) : NULL;
    if (!gold || !d) return;
    int asked = 0;
    const forced_inputs_t none = {nothing, &asked};
    perr_t err;
    for (int s = 0; s < STEPS; s++) { /* step 0 without inputs at all */
        gpt_step_stats_t st;
        CHECK(!dump_forced_step(g, &corpus, s, s ? &none : NULL, d, &st, &err), "%s", err.msg);
        const int diff = step_diffs(dump_writer(gold), dump_writer(d), s);
        CHECK(diff == 0, "step %d with nothing supplied: %d tensors differ from golden", s, diff);
    }
    CHECK(asked > 0, "the getter was asked");
    dump_free(d);
    gpt_free(g);
    dump_free(gold);
}

/* The forced step depends on its inputs alone: one model forced through
 * the steps in any order (step 0's AdamW state from nothing) gives each
 * golden step. */
static void test_inputs_alone(void) {
    model_config_t c;
    if (micro(&c, MODEL_FP32)) return;
    dump_t *gold = golden_run(&c, NULL);
    gpt_t *g = model(&c);
    if (!gold || !g) return;
    static const int order[] = {2, 0, 1, 0};
    for (int k = 0; k < 4; k++) {
        const int s = order[k];
        backend_t b = {.w = dump_writer(gold), .step = s};
        const forced_inputs_t in = {backend_get, &b};
        dump_t *d = dump_new(g, DUMP_TENSORS);
        gpt_step_stats_t st;
        perr_t err;
        CHECK(d && !dump_forced_step(g, &corpus, s, &in, d, &st, &err), "%s", err.msg);
        CHECK(d && compare_step(dump_writer(gold), dump_writer(d), s) == 0,
              "step %d forced after step %d on one model is not golden", s, k ? order[k - 1] : -1);
        dump_free(d);
    }
    gpt_free(g);
    dump_free(gold);
}

/* (3) A moved input reaches exactly the units after its boundary. */
typedef struct {
    const char *change, *omit;
    int ulps;
    float scale;
    const char *const *same, *const *moved; /* NULL-terminated names (without "step1.") */
} locality_t;

static void check_locality(const st_writer_t *gold, const model_config_t *c, const locality_t *x) {
    backend_t b = {.w = gold, .step = 1, .change = x->change, .omit = x->omit, .ulps = x->ulps,
                   .scale = x->scale};
    gpt_step_stats_t st;
    dump_t *f = forced_step(c, 1, &b, &st, NULL);
    free(b.moved);
    if (!f) return;
    for (int k = 0; x->same[k]; k++)
        CHECK(differs(gold, dump_writer(f), 1, x->same[k]) == 0, "%s moved: %s changed (or missing)",
              x->change, x->same[k]);
    for (int k = 0; x->moved[k]; k++)
        CHECK(differs(gold, dump_writer(f), 1, x->moved[k]) == 1, "%s moved: %s did not change",
              x->change, x->moved[k]);
    dump_free(f);
}

static void test_locality(void) {
    model_config_t c;
    if (micro(&c, MODEL_FP32)) return;
    dump_t *gold = golden_run(&c, NULL);
    if (!gold) return;
    const st_writer_t *w = dump_writer(gold);
    CHECK(c.layers == 2, "gpt-micro has 2 layers");
    /* layer 1's input: layer 0 and the embedding are upstream, and their
     * backward starts from the supplied (golden) arriving gradients; the
     * head reads the supplied layer 1 output (fwd) or, not supplied,
     * parity's from the moved input (fwd_open); the update reads the
     * supplied gradients */
    static const char *const fwd_same[] = {
        "act.embedding.output", "act.layers.0.output", "act.layers.0.self_attention.query_key_value.output",
        "mask.dropout.embedding", "grad.layers.0.mlp.dense_4h_to_h.weight",
        "grad.layers.0.self_attention.query_key_value.weight", "grad_input.layers.0",
        "grad.embedding.position_embeddings.weight", "param.layers.1.mlp.dense_4h_to_h.weight",
        "exp_avg.layers.1.mlp.dense_4h_to_h.weight", "grad_norm", "logits", "loss",
        "act.final_layernorm.output", "grad_input.head", NULL};
    static const char *const fwd_moved[] = {
        "act.layers.1.output", "act.layers.1.self_attention.query_key_value.output",
        "grad_input.layers.1", "grad.layers.1.mlp.dense_4h_to_h.weight", NULL};
    const locality_t fwd = {"act.layers.0.output", NULL, 3, 0.0f, fwd_same, fwd_moved};
    static const char *const open_same[] = {
        "act.layers.0.output", "grad.layers.0.mlp.dense_4h_to_h.weight", "grad_input.layers.0",
        "param.layers.1.mlp.dense_4h_to_h.weight", NULL};
    /* (the loss, a mean of 64 token losses, may round a few ulps away) */
    static const char *const open_moved[] = {
        "act.layers.1.output", "logits", "act.final_layernorm.output", "grad_input.head",
        "grad_input.layers.1", "grad.final_layernorm.weight", "grad.embedding.word_embeddings.weight",
        NULL};
    const locality_t fwd_open = {"act.layers.0.output", "act.layers.1.output", 3, 0.0f, open_same,
                                 open_moved};
    /* the gradient arriving at layer 0: layer 0's own gradients only */
    static const char *const bwd_same[] = {
        "act.layers.1.output", "logits", "loss", "grad_input.head", "grad_input.layers.1",
        "grad.layers.1.mlp.dense_4h_to_h.weight", "grad.layers.1.input_layernorm.weight",
        "grad.final_layernorm.weight", "grad.embedding.position_embeddings.weight",
        "param.layers.0.mlp.dense_4h_to_h.weight", "grad_norm", NULL};
    static const char *const bwd_moved[] = {
        "grad.layers.0.mlp.dense_4h_to_h.weight", "grad.layers.0.self_attention.query_key_value.weight",
        "grad.layers.0.input_layernorm.weight", "grad_input.layers.0", NULL};
    const locality_t bwd = {"grad_input.layers.1", NULL, 3, 0.0f, bwd_same, bwd_moved};
    /* the update's gradients: the norm, that tensor's update and state;
     * parity's own gradients (the forced backward's) stay */
    static const char *const upd_same[] = {
        "logits", "loss", "grad_input.layers.0", "grad.layers.1.mlp.dense_4h_to_h.weight", NULL};
    static const char *const upd_moved[] = {
        "grad_norm", "param.layers.1.mlp.dense_4h_to_h.weight",
        "exp_avg.layers.1.mlp.dense_4h_to_h.weight", "exp_avg_sq.layers.1.mlp.dense_4h_to_h.weight",
        NULL};
    const locality_t upd = {"grad.layers.1.mlp.dense_4h_to_h.weight", NULL, 0, 1.5f, upd_same, upd_moved};
    /* the parameters the step starts from: everything downstream of them */
    static const char *const par_same[] = {
        "act.embedding.output", "act.layers.0.output", "mask.dropout.embedding", "logits",
        "grad_input.head", "param.layers.1.mlp.dense_4h_to_h.weight", NULL};
    static const char *const par_moved[] = {
        "act.layers.1.output", "grad.layers.1.mlp.dense_4h_to_h.weight", "grad_input.layers.1",
        "param.layers.1.mlp.dense_h_to_4h.weight", NULL};
    const locality_t par = {"param.layers.1.mlp.dense_h_to_4h.weight", NULL, 2, 0.0f, par_same, par_moved};
    const locality_t *all[] = {&fwd, &fwd_open, &bwd, &upd, &par};
    for (int k = 0; k < 5; k++) {
        for (int i = 0; all[k]->same[i]; i++) /* the names exist: a typo must not pass */
            CHECK(differs(w, w, 1, all[k]->same[i]) == 0, "no golden tensor %s", all[k]->same[i]);
        check_locality(w, &c, all[k]);
    }
    dump_free(gold);
}

/* What it cannot force yet, it refuses by name, changing nothing. */
static void refused(const char *builtin, int precision, int optimizer, const char *says) {
    model_config_t c;
    perr_t err;
    if (model_config_builtin(builtin, &c, &err)) {
        CHECK(0, "%s", err.msg);
        return;
    }
    c.precision = precision, c.optimizer = optimizer;
    gpt_t *g = model(&c);
    if (!g) return;
    gpt_step_stats_t st;
    err.msg[0] = 0;
    const int rc = dump_forced_step(g, &corpus, 0, NULL, NULL, &st, &err);
    CHECK(rc == -1 && strstr(err.msg, "not supported yet") && strstr(err.msg, says),
          "%s: rc %d, message '%s'", builtin, rc, err.msg);
    CHECK(g->adam_t == 0, "a refused step changes nothing");
    gpt_free(g);
}

static void test_refusals(void) {
    refused("gpt-micro", MODEL_FP16, MODEL_OPT_ADAM, "fp16");
    refused("gpt-micro", MODEL_FP32, MODEL_OPT_ADAMW8BIT, "adamw8bit");
    refused("t5-tiny", MODEL_FP32, MODEL_OPT_ADAM, "t5");
    refused("llava-tiny", MODEL_FP32, MODEL_OPT_ADAM, "llava");
    model_config_t c;
    if (micro(&c, MODEL_FP32)) return;
    c.recompute = MODEL_RECOMPUTE_FULL, c.recompute_layers = 2;
    gpt_t *g = model(&c);
    gpt_step_stats_t st;
    perr_t err;
    CHECK(g && dump_forced_step(g, &corpus, 0, NULL, NULL, &st, &err) == -1 &&
              strstr(err.msg, "recompute full: not supported yet"), "recompute: %s", err.msg);
    gpt_free(g);
    c.recompute = MODEL_RECOMPUTE_NONE;
    g = model(&c);
    CHECK(g && dump_forced_step(g, &corpus, -1, NULL, NULL, &st, &err) == -1 &&
              strstr(err.msg, "step -1, expected 0 .."), "a negative step: %s", err.msg);
    gpt_free(g);
}

int main(void) {
    perr_t err;
    if (tile_init(&err) || corpus_load(&corpus, "ref/data/corpus.txt", &err)) {
        fprintf(stderr, "%s\n", err.msg);
        return 1;
    }
    RUN(test_forced_golden_fp32);
    RUN(test_forced_golden_bf16);
    RUN(test_nothing_supplied);
    RUN(test_inputs_alone);
    RUN(test_locality);
    RUN(test_refusals);
    corpus_free(&corpus);
    return harness_done();
}
