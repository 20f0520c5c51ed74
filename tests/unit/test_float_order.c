/* test_float_order.c - parity's legitimate float executions (float_order.h).
 *
 * The sums: on terms whose float sums depend on the order (1 followed by
 * 2^-24s), each kind gives the value its tree gives by hand, in xsum's
 * one-shot sums and in a contraction's cross-tile sums; bf16 rounds the
 * contraction's inputs and output. Then gpt-micro, two golden steps: under
 * EXACT every tensor equals the default run bit for bit; under each
 * non-exact kind some float tensors change bits and every tensor stays
 * within a small relative distance of the golden one (the largest per
 * kind and tensor class is printed); integer tensors never change; the
 * same order and seed give the same bits, another seed others; bf16's
 * deviations are of bf16's scale and fp32's of fp32's; and the order is
 * per thread: a golden run beside a perturbed one keeps the golden bits.
 * Step times, exact against every kind, are printed for gpt-micro (and
 * gpt-small with PARITY_FLOAT_ORDER_BENCH=1). */
#include "model/gpt.h"
#include "../harness.h"

#include <math.h>
#include <pthread.h>
#include <time.h>

#include "parity/contract.h"
#include "parity/corpus.h"
#include "parity/dump.h"
#include "parity/float_order.h"
#include "parity/pool.h"
#include "parity/tile.h"

enum { STEPS = 2 };
static corpus_t corpus;
static model_config_t micro;

/* ---- the sums ------------------------------------------------------------- */

/* 1 then n copies of 2^-24 (half an ulp of 1): each added to 1 alone is
 * lost (a tie, to even), added to each other first they are exact. */
static void ones_and_halves(float *x, int n) {
    x[0] = 1.0f;
    for (int i = 1; i <= n; i++) x[i] = 0x1p-24f;
}

static float sum_under(const float_order_t *o, const float *x, size_t n) {
    float_order_set(o);
    const float s = xsum_f32(x, n);
    float_order_set(NULL);
    return s;
}

static void test_sum_trees(void) {
    float x[17];
    ones_and_halves(x, 16);
    const float_order_t seq = {FLOAT_ORDER_SEQUENTIAL, 0, 0, 0}, rev = {FLOAT_ORDER_REVERSED, 0, 0, 0},
                        pw = {FLOAT_ORDER_PAIRWISE, 0, 0, 0}, g2 = {FLOAT_ORDER_GROUPED, 2, 0, 0};
    /* exact and reversed: 1 + 16 * 2^-24 = 1 + 2^-20, representable */
    CHECK(xsum_f32(x, 17) == 1.0f + 0x1p-20f, "exact %a", xsum_f32(x, 17));
    CHECK(sum_under(&rev, x, 17) == 1.0f + 0x1p-20f, "reversed %a", sum_under(&rev, x, 17));
    /* sequential: every 2^-24 meets 1 alone and is lost */
    CHECK(sum_under(&seq, x, 17) == 1.0f, "sequential %a", sum_under(&seq, x, 17));
    /* pairwise: halves [0,8) and [8,17); the first half's 1 meets its
     * seven 2^-24s in pairs: ((1 + h) + 2h) + 4h where the pairs (h + h)
     * are exact: (1 + 2^-24) ties to 1, then 1 + 2^-23 and 1 + 2^-22 are
     * exact: 1 + 3 * 2^-23; the second half is 9 * 2^-24 exactly; their
     * sum 1 + 6 * 2^-24 + 9 * 2^-24 = 1 + 15 * 2^-24 = 1 + 7.5 ulps,
     * a tie, to even: 1 + 8 ulps = 1 + 2^-20 */
    CHECK(sum_under(&pw, x, 17) == 1.0f + 0x1p-20f, "pairwise %a", sum_under(&pw, x, 17));
    /* grouped(2): chunks [0,8) (1: all seven lost) and [8,17) (9 * 2^-24):
     * 1 + 4.5 ulps, a tie, to even: 1 + 4 ulps = 1 + 2^-21 */
    CHECK(sum_under(&g2, x, 17) == 1.0f + 0x1p-21f, "grouped(2) %a", sum_under(&g2, x, 17));
    /* random: deterministic for a seed, and across seeds some chunking
     * puts 2^-24s together before they meet 1 */
    int differs = 0;
    for (uint64_t seed = 0; seed < 16; seed++) {
        const float_order_t r = {FLOAT_ORDER_RANDOM, 0, seed, 0};
        const float a = sum_under(&r, x, 17), b = sum_under(&r, x, 17);
        CHECK(a == b, "random(%llu) twice: %a %a", (unsigned long long)seed, a, b);
        /* at most 16 chunk sums, each rounding up at most half an ulp */
        CHECK(a >= 1.0f && a <= 1.0f + 0x1p-19f, "random(%llu) %a", (unsigned long long)seed, a);
        differs += a != 1.0f;
    }
    CHECK(differs > 0, "no seed's chunking changed the sum");
    CHECK(sum_under(&seq, x, 0) == 0.0f && sum_under(&pw, x, 1) == 1.0f, "empty and single sums");
    /* a strided sum takes the same tree */
    float strided[34];
    for (int i = 0; i < 17; i++) strided[2 * i] = x[i], strided[2 * i + 1] = 1e9f;
    float_order_set(&g2);
    CHECK(xsum_f32_strided(strided, 17, 2) == 1.0f + 0x1p-21f, "strided grouped(2)");
    float_order_set(NULL);
}

/* C[0,0] = sum_k A[0,k] * 1 over 17 tiles of tk = 1: the partials are
 * the terms, so the cross-tile sum is the tree's. */
static void test_contract_trees(void) {
    float a[17], b[17], c;
    ones_and_halves(a, 16);
    for (int i = 0; i < 17; i++) b[i] = 1.0f;
    contract_ws_t ws;
    contract_ws_init(&ws);
    struct { float_order_t o; float want; } cases[] = {
        {{FLOAT_ORDER_EXACT, 0, 0, 0}, 1.0f + 0x1p-20f},
        {{FLOAT_ORDER_SEQUENTIAL, 0, 0, 0}, 1.0f},
        {{FLOAT_ORDER_REVERSED, 0, 0, 0}, 1.0f + 0x1p-20f},
        {{FLOAT_ORDER_PAIRWISE, 0, 0, 0}, 1.0f + 0x1p-20f},
        {{FLOAT_ORDER_GROUPED, 2, 0, 0}, 1.0f + 0x1p-21f},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        float_order_set(&cases[i].o);
        contract(CONTRACT_NT, 1, 1, 17, 1, 1, 1, a, 17, b, 17, &c, 1, &ws);
        float_order_set(NULL);
        char name[64];
        CHECK(c == cases[i].want, "%s: %a, want %a", float_order_name(&cases[i].o, name, sizeof name),
              c, cases[i].want);
    }
    /* the weight-gradient form: the call's product, then one fp32 add */
    acc_t acc;
    CHECK(!acc_init(&acc, 1), "acc_init");
    const float_order_t g2 = {FLOAT_ORDER_GROUPED, 2, 0, 0};
    float_order_set(&g2);
    contract_acc(CONTRACT_NT, 1, 1, 17, 1, 1, 1, a, 17, b, 17, &acc, 0, 1, &ws);
    float_order_set(NULL);
    acc_round(&acc, &c);
    CHECK(c == 1.0f + 0x1p-21f, "contract_acc grouped(2): %a", c);
    acc_free(&acc);
    /* bf16: 1 + 2^-9 is not a bfloat16 (8 significant bits): the input
     * 1 + 2^-9 rounds to 1; inputs 1 and 2^-9 are, their fp32 sum
     * 1 + 2^-9 is rounded on output to 1 */
    const float_order_t bf = {FLOAT_ORDER_EXACT, 0, 0, 1};
    float one_more = 1.0f + 0x1p-9f, one = 1.0f, pair[2] = {1.0f, 0x1p-9f}, ones[2] = {1.0f, 1.0f};
    float_order_set(&bf);
    CHECK(!float_order_is_exact(), "exact+bf16 is not the golden arithmetic");
    contract(CONTRACT_NT, 1, 1, 1, 1, 1, 1, &one_more, 1, &one, 1, &c, 1, &ws);
    CHECK(c == 1.0f, "bf16 input rounding: %a", c);
    contract(CONTRACT_NT, 1, 1, 2, 1, 1, 1, pair, 2, ones, 2, &c, 1, &ws);
    CHECK(c == 1.0f, "bf16 output rounding: %a", c);
    float_order_set(NULL);
    contract(CONTRACT_NT, 1, 1, 2, 1, 1, 1, pair, 2, ones, 2, &c, 1, &ws);
    CHECK(c == 1.0f + 0x1p-9f, "fp32 again after the order is reset: %a", c);
    contract_ws_free(&ws);
}

/* accum.h's sites: buffered terms (acc_add_rows' rows, sacc_add's array,
 * sacc_add_squares' squares) in the order's tree; incremental adds
 * (acc_add, one call a term) in arrival order whatever the kind. */
static void test_accumulators(void) {
    float x[17], rows[17 * 2], roots[17];
    ones_and_halves(x, 16);
    for (int i = 0; i < 17; i++) {
        rows[2 * i] = x[i], rows[2 * i + 1] = -x[i];
        roots[i] = i == 0 ? 1.0f : 0x1p-12f; /* squares: 1 and 2^-24 */
    }
    const float_order_t g2 = {FLOAT_ORDER_GROUPED, 2, 0, 0}, pw = {FLOAT_ORDER_PAIRWISE, 0, 0, 0};
    const float want = 1.0f + 0x1p-21f; /* test_sum_trees' grouped(2) */
    acc_t a;
    CHECK(!acc_init(&a, 2), "acc_init");
    float_order_set(&g2);
    acc_add_rows(&a, 0, rows, 17, 2, 2);
    float_order_set(NULL);
    float out[2];
    acc_round(&a, out);
    CHECK(out[0] == want && out[1] == -want, "acc_add_rows grouped(2): %a %a", out[0], out[1]);
    acc_zero(&a);
    float_order_set(&pw);
    for (int i = 0; i < 17; i++) acc_add(&a, 0, &x[i], 1);
    float_order_set(NULL);
    acc_round(&a, out);
    CHECK(out[0] == 1.0f, "acc_add term by term under pairwise is sequential: %a", out[0]);
    acc_zero(&a);
    for (int i = 0; i < 17; i++) acc_add(&a, 0, &x[i], 1);
    acc_round(&a, out);
    CHECK(out[0] == 1.0f + 0x1p-20f, "acc_add exact again: %a", out[0]);
    acc_free(&a);
    sacc_t s, q;
    sacc_init(&s);
    sacc_init(&q);
    float_order_set(&g2);
    sacc_add(&s, x, 17);
    sacc_add_squares(&q, roots, 17);
    float_order_set(NULL);
    CHECK(sacc_round(&s) == want && sacc_round(&q) == want, "sacc grouped(2): %a %a", sacc_round(&s),
          sacc_round(&q));
}

/* A contraction spread over pool helpers: they sum in the caller's order
 * (the plan carries it), so the bits are those of one thread, and not the
 * exact ones. 512 x 512 with 8 K tiles: several blocks, so several pieces. */
static void test_pool_threads(void) {
    enum { M = 512, N = 512, K = 64 };
    float *a = malloc(sizeof(float) * M * K), *b = malloc(sizeof(float) * N * K);
    float *c[3];
    for (int i = 0; i < 3; i++) c[i] = malloc(sizeof(float) * M * N);
    uint32_t r = 12345;
    for (int i = 0; i < M * K; i++) a[i] = (float)((r = r * 1103515245u + 12345u) >> 8) * 0x1p-24f - 0.5f;
    for (int i = 0; i < N * K; i++) b[i] = (float)((r = r * 1103515245u + 12345u) >> 8) * 0x1p-24f - 0.5f;
    contract_ws_t ws;
    contract_ws_init(&ws);
    const float_order_t r9 = {FLOAT_ORDER_RANDOM, 0, 9, 1};
    perr_t err;
    acc_t acc[2];
    for (int threads = 1; threads <= 2; threads++) {
        CHECK(!pool_set_threads(threads, &err), "%s", err.msg);
        float_order_set(&r9);
        contract(CONTRACT_NT, M, N, K, 4, 8, 8, a, K, b, K, c[threads - 1], N, &ws);
        CHECK(!acc_init(&acc[threads - 1], (size_t)M * N), "acc_init");
        contract_acc(CONTRACT_NT, M, N, K, 4, 8, 8, a, K, b, K, &acc[threads - 1], 0, N, &ws);
        contract_acc(CONTRACT_NT, M, N, K, 4, 8, 8, b, K, a, K, &acc[threads - 1], 0, N, &ws);
        float_order_set(NULL);
    }
    CHECK(!pool_set_threads(1, &err), "%s", err.msg);
    contract(CONTRACT_NT, M, N, K, 4, 8, 8, a, K, b, K, c[2], N, &ws);
    CHECK(!memcmp(c[0], c[1], sizeof(float) * M * N), "two threads changed random(9)+bf16's bits");
    CHECK(memcmp(c[0], c[2], sizeof(float) * M * N), "random(9)+bf16 gave the exact bits");
    float *g0 = malloc(sizeof(float) * M * N), *g1 = malloc(sizeof(float) * M * N);
    acc_round(&acc[0], g0);
    acc_round(&acc[1], g1);
    CHECK(!memcmp(g0, g1, sizeof(float) * M * N), "two threads changed contract_acc's bits");
    free(g0), free(g1), free(a), free(b);
    for (int i = 0; i < 3; i++) free(c[i]);
    acc_free(&acc[0]), acc_free(&acc[1]);
    contract_ws_free(&ws);
}

static void test_names(void) {
    const char *good[] = {"exact", "sequential", "reversed", "pairwise", "grouped(4)",
                          "random(7)+bf16", "exact+bf16"};
    for (size_t i = 0; i < sizeof good / sizeof good[0]; i++) {
        float_order_t o;
        perr_t err;
        char back[64];
        CHECK(!float_order_parse(good[i], &o, &err), "%s: %s", good[i], err.msg);
        CHECK(!strcmp(float_order_name(&o, back, sizeof back), good[i]), "%s named %s", good[i], back);
    }
    const char *bad[] = {"grouped(1)", "grouped", "random()", "random(-1)", "sequential(3)",
                         "pairwise+fp16", "fastest", ""};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        float_order_t o;
        perr_t err = {0};
        CHECK(float_order_parse(bad[i], &o, &err) == -1 && strstr(err.msg, "float order"),
              "'%s' accepted (%s)", bad[i], err.msg);
    }
    char buf[32];
    CHECK(!strcmp(float_order_name(NULL, buf, sizeof buf), "exact"), "NULL is exact");
    const float_order_t g = {FLOAT_ORDER_GROUPED, 3, 0, 0};
    const float_order_t before = float_order_set(&g);
    CHECK(before.kind == FLOAT_ORDER_EXACT && float_order_get()->groups == 3, "set returns the old");
    CHECK(float_order_set(NULL).kind == FLOAT_ORDER_GROUPED && float_order_is_exact(), "reset");
}

/* ---- gpt-micro ------------------------------------------------------------ */

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

/* STEPS golden steps of cfg under order o (NULL: as set, the default);
 * *seconds: the mean step time. */
static dump_t *run(const model_config_t *cfg, const float_order_t *o, int steps, double *seconds) {
    gpt_t *g;
    perr_t err;
    if (gpt_new(&g, cfg, &err)) {
        fprintf(stderr, "gpt_new: %s\n", err.msg);
        return NULL;
    }
    dump_t *d = dump_new(g, DUMP_TENSORS);
    if (dump_add_init(d, g, &err)) fprintf(stderr, "dump_add_init: %s\n", err.msg);
    const float_order_t before = o ? float_order_set(o) : *float_order_get();
    const double t0 = now();
    for (int s = 0; s < steps; s++) {
        gpt_step_stats_t st;
        if (dump_golden_step(g, &corpus, s, d, &st, &err)) fprintf(stderr, "step %d: %s\n", s, err.msg);
    }
    if (seconds) *seconds = (now() - t0) / steps;
    if (o) float_order_set(&before);
    gpt_free(g);
    return d;
}

/* CLS_BIAS: the parameters that start at zero (biases), which hold only
 * the sum of Adam's updates, each about +-lr whatever the gradient's size:
 * measured against the sum of the steps' lr instead of their own size. */
enum { CLS_ACT, CLS_GRAD, CLS_PARAM, CLS_BIAS, CLS_EXP_AVG, CLS_EXP_AVG_SQ, CLS_LOSS, CLS_INIT,
       CLS_N };
static const char *const cls_names[CLS_N] = {"act", "grad", "param", "bias", "exp_avg",
                                             "exp_avg_sq", "loss", "init"};

static int tensor_class(const char *name) {
    if (!strncmp(name, "init.", 5)) return CLS_INIT;
    const char *dot = strchr(name, '.');
    const char *r = dot ? dot + 1 : name;
    if (!strncmp(r, "act.", 4) || !strcmp(r, "logits")) return CLS_ACT;
    if (!strncmp(r, "grad.", 5) || !strncmp(r, "grad_input.", 11)) return CLS_GRAD;
    if (!strncmp(r, "param.", 6)) return CLS_PARAM; /* or CLS_BIAS: compare() */
    if (!strncmp(r, "exp_avg_sq.", 11)) return CLS_EXP_AVG_SQ;
    if (!strncmp(r, "exp_avg.", 8)) return CLS_EXP_AVG;
    return CLS_LOSS; /* loss, grad_norm, lr */
}

typedef struct {
    double worst[CLS_N];       /* the largest relative distance per class */
    const char *worst_name[CLS_N];
    double key_bias;           /* the masked elements' (below) */
    int float_differ, int_differ, tensors;
} deviation_t;

/* Whether element k of parameter-shaped tensor `name` is in the key part
 * of a qkv bias (rows h*3D + D .. h*3D + 2D): its gradient is exactly
 * zero in the mathematics (MODEL.md, "Notes from the PyTorch reference"),
 * rounding noise in any run, and Adam's m/sqrt(v) turns that noise into
 * updates of up to lr whatever its size, so the updated parameter is
 * noise at lr's scale in every run. Masked from the param class, with
 * its own maximum printed. */
static int head_dim;
static int key_bias_element(const char *name, size_t k) {
    const char *suffix = "query_key_value.bias";
    const size_t n = strlen(name), m = strlen(suffix);
    if (n < m || strcmp(name + n - m, suffix)) return 0;
    const size_t r = k % (size_t)(3 * head_dim);
    return r >= (size_t)head_dim && r < (size_t)(2 * head_dim);
}

/* Whether golden's init.<p> of step<s>.param.<p> is all zeros; *lr_sum:
 * the lr of steps 0 .. s. */
static int zero_init(const st_writer_t *gw, const char *name, double *lr_sum) {
    const char *p = strstr(name, ".param.");
    char buf[256];
    st_tensor_t t;
    snprintf(buf, sizeof buf, "init.%s", p + 7);
    long i = st_writer_find(gw, buf);
    if (i < 0) return 0;
    const float *v = st_writer_tensor(gw, (size_t)i, &t);
    for (size_t k = 0; k < (t.end - t.begin) / 4; k++)
        if (v[k] != 0) return 0;
    *lr_sum = 0;
    for (long s = 0; s <= atol(name + 4); s++) {
        snprintf(buf, sizeof buf, "step%ld.lr", s);
        if ((i = st_writer_find(gw, buf)) >= 0) *lr_sum += *(const float *)st_writer_tensor(gw, (size_t)i, &t);
    }
    return 1;
}

/* Each tensor of d against golden: max|a - b| / max|b| for float tensors
 * (0 when both are all zero; biases: max|a - b| / sum lr), and whether
 * integer tensors are identical. */
static int compare(const dump_t *golden, const dump_t *d, deviation_t *dev) {
    memset(dev, 0, sizeof *dev);
    const st_writer_t *gw = dump_writer(golden), *dw = dump_writer(d);
    if (st_writer_count(gw) != st_writer_count(dw)) return -1;
    for (size_t i = 0; i < st_writer_count(gw); i++) {
        st_tensor_t gt, dt;
        const void *gv = st_writer_tensor(gw, i, &gt), *dv = st_writer_tensor(dw, i, &dt);
        if (strcmp(gt.name, dt.name) || gt.end - gt.begin != dt.end - dt.begin) return -1;
        const size_t bytes = gt.end - gt.begin;
        dev->tensors++;
        const int same = !memcmp(gv, dv, bytes);
        if (gt.dtype != ST_F32) {
            dev->int_differ += !same;
            continue;
        }
        dev->float_differ += !same;
        const float *a = dv, *b = gv;
        int c = tensor_class(gt.name);
        double lr_sum = 0;
        if (c == CLS_PARAM && zero_init(gw, gt.name, &lr_sum)) c = CLS_BIAS;
        double num = 0, den = 0, masked = 0;
        for (size_t k = 0; k < bytes / 4; k++) {
            const double e = fabs((double)a[k] - (double)b[k]);
            den = fabs((double)b[k]) > den ? fabs((double)b[k]) : den;
            if (c == CLS_BIAS && key_bias_element(gt.name, k))
                masked = e > masked || e != e ? e : masked;
            else
                num = e > num || e != e ? e : num;
        }
        if (c == CLS_BIAS) den = lr_sum;
        const double rel = num == 0 ? 0 : den == 0 ? INFINITY : num / den;
        if (masked > 0 && masked / den > dev->key_bias) dev->key_bias = masked / den;
        if (rel > dev->worst[c] || rel != rel) dev->worst[c] = rel, dev->worst_name[c] = gt.name;
    }
    return 0;
}

static dump_t *golden;

static void test_exact_is_golden(void) {
    const float_order_t exact = {FLOAT_ORDER_EXACT, 0, 0, 0};
    dump_t *d = run(&micro, &exact, STEPS, NULL);
    deviation_t dev;
    CHECK(d && !compare(golden, d, &dev), "same tensors");
    CHECK(dev.float_differ == 0 && dev.int_differ == 0, "EXACT changed %d float and %d int tensors",
          dev.float_differ, dev.int_differ);
    CHECK(dev.tensors > 50, "only %d tensors compared", dev.tensors);
    dump_free(d);
}

static void print_dev(const char *name, const deviation_t *dev) {
    printf("  %-18s %3d/%d float tensors differ; max rel:", name, dev->float_differ, dev->tensors);
    for (int c = 0; c < CLS_N - 1; c++) printf(" %s %.2e", cls_names[c], dev->worst[c]);
    printf(" (key bias %.2e)\n", dev->key_bias);
}

static double worst_of(const deviation_t *dev) {
    double w = 0;
    for (int c = 0; c < CLS_N; c++) w = dev->worst[c] > w || dev->worst[c] != dev->worst[c] ? dev->worst[c] : w;
    return w;
}

/* Every kind, fp32 then bf16: bits change, deviations stay of the
 * precision's scale. fp32's bound: 2^-12 relative (4096 float epsilons
 * of the tensor's largest element) after two steps; bf16's: between
 * 2^-12 and 2^-4 (bf16's epsilon is 2^-8; the parameters' deviation
 * reaches 2 lr where bf16's noise flips a small gradient's sign, which
 * Adam's first steps turn into a whole +-lr). */
static void test_kinds(void) {
    const float_order_t kinds[] = {
        {FLOAT_ORDER_SEQUENTIAL, 0, 0, 0}, {FLOAT_ORDER_REVERSED, 0, 0, 0},
        {FLOAT_ORDER_PAIRWISE, 0, 0, 0},   {FLOAT_ORDER_GROUPED, 2, 0, 0},
        {FLOAT_ORDER_GROUPED, 4, 0, 0},    {FLOAT_ORDER_RANDOM, 0, 1, 0},
        {FLOAT_ORDER_RANDOM, 0, 2, 0},
    };
    const int nk = (int)(sizeof kinds / sizeof kinds[0]);
    double fp32_worst = 0, bf16_least = INFINITY, bf16_worst = 0;
    for (int bf = 0; bf <= 1; bf++)
        for (int k = 0; k < nk + bf; k++) { /* bf16 also with exact sums */
            float_order_t o = k < nk ? kinds[k] : (float_order_t){FLOAT_ORDER_EXACT, 0, 0, 0};
            o.bf16 = bf;
            char name[48];
            float_order_name(&o, name, sizeof name);
            dump_t *d = run(&micro, &o, STEPS, NULL);
            deviation_t dev;
            CHECK(d && !compare(golden, d, &dev), "%s: same tensors", name);
            print_dev(name, &dev);
            CHECK(dev.float_differ > 0, "%s: no float tensor changed a bit", name);
            CHECK(dev.int_differ == 0, "%s: %d integer tensors changed", name, dev.int_differ);
            CHECK(dev.worst[CLS_INIT] == 0, "%s: the initial parameters changed", name);
            const double bias = dev.worst[CLS_BIAS];
            dev.worst[CLS_BIAS] = 0; /* bounded on its own scale below */
            const double w = worst_of(&dev);
            if (!bf) {
                fp32_worst = w > fp32_worst ? w : fp32_worst;
                CHECK(bias < 0x1p-12, "%s: biases at %.3g of the steps' lr", name, bias);
                for (int c = 0; c < CLS_N; c++)
                    CHECK(dev.worst[c] < 0x1p-12, "%s: %s %s at %.3g, beyond fp32's scale", name,
                          cls_names[c], dev.worst_name[c], dev.worst[c]);
            } else {
                bf16_least = w < bf16_least ? w : bf16_least;
                bf16_worst = w > bf16_worst ? w : bf16_worst;
                /* a flipped sign moves a bias by up to 2 lr a step */
                CHECK(bias > 0x1p-12 && bias <= 2.0, "%s: biases at %.3g of the steps' lr", name, bias);
                CHECK(w > 0x1p-12 && w < 0x1p-4, "%s: worst %.3g is not of bf16's scale", name, w);
                for (int c = CLS_ACT; c <= CLS_GRAD; c++) /* the forward and backward's own */
                    CHECK(dev.worst[c] > 0x1p-12 && dev.worst[c] < 0x1p-4,
                          "%s: %s %s at %.3g, not of bf16's scale", name, cls_names[c],
                          dev.worst_name[c] ? dev.worst_name[c] : "-", dev.worst[c]);
            }
            dump_free(d);
        }
    printf("  fp32 kinds: worst relative deviation %.3g; bf16: %.3g to %.3g\n", fp32_worst,
           bf16_least, bf16_worst);
    CHECK(bf16_least > 4 * fp32_worst, "bf16's least %.3g is not clearly above fp32's worst %.3g",
          bf16_least, fp32_worst);
}

/* The same order and seed twice: the same bits; another seed: others. */
static void test_seeds(void) {
    const float_order_t r7 = {FLOAT_ORDER_RANDOM, 0, 7, 0}, r8 = {FLOAT_ORDER_RANDOM, 0, 8, 0};
    dump_t *a = run(&micro, &r7, STEPS, NULL), *b = run(&micro, &r7, STEPS, NULL),
           *c = run(&micro, &r8, STEPS, NULL);
    deviation_t ab, ac;
    CHECK(a && b && c && !compare(a, b, &ab) && !compare(a, c, &ac), "runs");
    CHECK(ab.float_differ == 0, "random(7) twice: %d tensors differ", ab.float_differ);
    CHECK(ac.float_differ > 0, "random(7) and random(8) agree bit for bit");
    const float_order_t p = {FLOAT_ORDER_PAIRWISE, 0, 0, 1};
    dump_t *d = run(&micro, &p, STEPS, NULL), *e = run(&micro, &p, STEPS, NULL);
    CHECK(d && e && !compare(d, e, &ab) && ab.float_differ == 0, "pairwise+bf16 twice differs");
    dump_free(a), dump_free(b), dump_free(c), dump_free(d), dump_free(e);
}

/* Two threads at once: one under random(3)+bf16, one with no order set. */
typedef struct {
    const float_order_t *o;
    dump_t *d;
} job_t;

static void *thread_run(void *arg) {
    job_t *j = arg;
    for (int i = 0; i < 3; i++) { /* overlapping for longer than one run */
        dump_free(j->d);
        j->d = run(&micro, j->o, STEPS, NULL);
    }
    return NULL;
}

static void test_per_thread(void) {
    const float_order_t r3 = {FLOAT_ORDER_RANDOM, 0, 3, 1};
    dump_t *solo = run(&micro, &r3, STEPS, NULL);
    job_t noisy = {&r3, NULL}, exact = {NULL, NULL};
    pthread_t t1, t2;
    CHECK(!pthread_create(&t1, NULL, thread_run, &noisy) && !pthread_create(&t2, NULL, thread_run, &exact),
          "pthread_create");
    pthread_join(t1, NULL);
    pthread_join(t2, NULL);
    deviation_t de, dn;
    CHECK(exact.d && noisy.d && solo && !compare(golden, exact.d, &de) && !compare(solo, noisy.d, &dn),
          "runs");
    CHECK(de.float_differ == 0 && de.int_differ == 0,
          "the thread without an order lost the golden bits in %d tensors", de.float_differ);
    CHECK(dn.float_differ == 0, "random(3)+bf16 beside a golden run differs from it alone in %d",
          dn.float_differ);
    CHECK(float_order_is_exact(), "this thread's order was left changed");
    dump_free(solo), dump_free(noisy.d), dump_free(exact.d);
}

/* Step times: exact against every kind (printed, not judged). */
static void bench(const char *model, int steps) {
    model_config_t cfg;
    perr_t err;
    if (model_config_builtin(model, &cfg, &err)) {
        CHECK(0, "%s", err.msg);
        return;
    }
    const float_order_t kinds[] = {
        {FLOAT_ORDER_EXACT, 0, 0, 0},      {FLOAT_ORDER_SEQUENTIAL, 0, 0, 0},
        {FLOAT_ORDER_REVERSED, 0, 0, 0},   {FLOAT_ORDER_PAIRWISE, 0, 0, 0},
        {FLOAT_ORDER_GROUPED, 4, 0, 0},    {FLOAT_ORDER_RANDOM, 0, 1, 0},
        {FLOAT_ORDER_SEQUENTIAL, 0, 0, 1}, {FLOAT_ORDER_EXACT, 0, 0, 1},
    };
    printf("  %s step time (ms, mean of %d):", model, steps);
    for (size_t k = 0; k < sizeof kinds / sizeof kinds[0]; k++) {
        double best = INFINITY;
        for (int rep = 0; rep < 2; rep++) {
            double s;
            dump_t *d = run(&cfg, &kinds[k], steps, &s);
            dump_free(d);
            best = s < best ? s : best;
        }
        char name[48];
        printf(" %s %.2f", float_order_name(&kinds[k], name, sizeof name), best * 1e3);
    }
    printf("\n");
}

static void test_step_times(void) {
    bench("gpt-micro", STEPS);
    const char *b = getenv("PARITY_FLOAT_ORDER_BENCH");
    if (b && *b == '1') bench("gpt-small", 2);
}

int main(void) {
    perr_t err;
    if (!getenv("PARITY_BACKEND")) setenv("PARITY_BACKEND", "portable", 1);
    if (tile_init(&err) || model_config_builtin("gpt-micro", &micro, &err) ||
        corpus_load(&corpus, "ref/data/corpus.txt", &err)) {
        fprintf(stderr, "setup: %s\n", err.msg);
        return 1;
    }
    RUN(test_sum_trees);
    RUN(test_contract_trees);
    RUN(test_accumulators);
    RUN(test_pool_threads);
    RUN(test_names);
    head_dim = micro.hidden / micro.heads;
    golden = run(&micro, NULL, STEPS, NULL);
    if (!golden) return 1;
    RUN(test_exact_is_golden);
    RUN(test_kinds);
    RUN(test_seeds);
    RUN(test_per_thread);
    RUN(test_step_times);
    dump_free(golden);
    corpus_free(&corpus);
    return harness_done();
}
