/* test_adamw8bit.c - the 8-bit AdamW state (adamw8bit.c), each property
 * against an independent computation:
 *  - the maps: 256 distinct entries, code 0 = 0, +-1 where the block's
 *    absmax lands, every entry the correctly rounded fp32 of its rational
 *    (checked in long double), monotone by sorted index;
 *  - quantization: the nearest entry, ties to the lower one;
 *  - a state's dequantized values rebuild the very codes and absmax
 *    (what checkpoints rely on), and a value that is no state is refused;
 *  - the update: the first step's parameters are fp32 AdamW's (m = v = 0
 *    dequantize exactly), later ones differ (the flag is used); splitting
 *    a tensor at a block boundary changes no bit, splitting it inside a
 *    block does (the per-shard bug);
 *  - the config: JSON round trip, validation naming the field;
 *  - memory: the optimizer category is 2 bytes an element plus absmax,
 *    estimated exactly, and measured so after a step (golden and ZeRO-1).
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../harness.h"
#include "parity/corpus.h"
#include "parity/engine.h"
#include "parity/memest.h"
#include "model/gpt.h"
#include "parity/runtime.h"
#include "parity/tile.h"

static uint32_t bits(float f) {
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return u;
}

/* xorshift: test data, not the model's generator */
static uint64_t rng = 88172645463325252ull;
static float uniform(void) { /* [-1, 1) */
    rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
    return (float)((double)(rng >> 11) / 4503599627370496.0 - 1.0);
}

/* The map's rationals, written out again: row i of 7, 2^j midpoints,
 * j = i (signed) or i + 1. */
static int in_map(float x, int is_signed) {
    const float *m = adam8_map(is_signed);
    for (int c = 0; c < 256; c++)
        if (bits(m[c]) == bits(x)) return 1;
    return 0;
}

static void test_maps(void) {
    for (int s = 0; s < 2; s++) {
        const float *m = adam8_map(s);
        CHECK(bits(m[0]) == 0, "signed %d: code 0 is %a, not +0", s, (double)m[0]);
        CHECK(in_map(1.0f, s), "signed %d: 1 missing", s);
        if (s) CHECK(in_map(-1.0f, s), "signed: -1 missing");
        int neg = 0;
        for (int c = 0; c < 256; c++) {
            neg += m[c] < 0.0f;
            CHECK(m[c] >= -1.0f && m[c] <= 1.0f, "code %d: %g outside [-1, 1]", c, (double)m[c]);
            for (int d = c + 1; d < 256; d++)
                CHECK(bits(m[c]) != bits(m[d]), "codes %d and %d share %g", c, d, (double)m[c]);
        }
        CHECK(neg == (s ? 127 : 0), "signed %d: %d negative entries", s, neg);
        /* every positive entry of row i, midpoint k, is the nearest fp32 */
        for (int i = 0; i < 7; i++) {
            const int j = s ? i : i + 1;
            for (long k = 0; k < (1L << j); k++) {
                const long double r = (long double)((2L << j) + 18 * k + 9) /
                                      ((long double)(2L << j) * powl(10.0L, 7 - i));
                const float f = (float)(double)r; /* a candidate, maybe 1 ulp off */
                float best = f;
                const float near[2] = {nextafterf(f, 0.0f), nextafterf(f, 2.0f)};
                for (int q = 0; q < 2; q++)
                    if (fabsl((long double)near[q] - r) < fabsl((long double)best - r)) best = near[q];
                CHECK(in_map(best, s), "signed %d row %d k %ld: %a is not in the map", s, i, k,
                      (double)best);
                if (s && i > 0) CHECK(in_map(-best, s), "signed row %d k %ld: -%a missing", i, k, (double)best);
            }
        }
    }
}

static void test_quantize_nearest(void) {
    for (int s = 0; s < 2; s++) {
        const float *m = adam8_map(s);
        for (int n = 0; n < 20000; n++) {
            float x = uniform();
            if (!s) x = fabsf(x);
            if (n % 5 == 0) x *= 1e-5f; /* the dense region near 0 */
            const int c = adam8_quantize(x, s);
            for (int d = 0; d < 256; d++) {
                const double dc = fabs((double)m[c] - x), dd = fabs((double)m[d] - x);
                CHECK(dc < dd || (dc == dd && m[c] <= m[d]) || d == c,
                      "x %a: code %d (%a) but %d (%a) is nearer or a lower tie", (double)x, c,
                      (double)m[c], d, (double)m[d]);
            }
        }
        /* a float on a midpoint goes to the lower entry */
        float sorted[256];
        memcpy(sorted, m, sizeof sorted);
        for (int a = 1; a < 256; a++)
            for (int b = a; b > 0 && sorted[b] < sorted[b - 1]; b--) {
                const float t = sorted[b];
                sorted[b] = sorted[b - 1], sorted[b - 1] = t;
            }
        int ties = 0;
        for (int k = 0; k < 255; k++) {
            const double mid = ((double)sorted[k] + sorted[k + 1]) / 2;
            if ((double)(float)mid != mid) continue;
            ties++;
            CHECK(bits(m[adam8_quantize((float)mid, s)]) == bits(sorted[k]),
                  "tie %a between %a and %a", mid, (double)sorted[k], (double)sorted[k + 1]);
        }
        CHECK(ties > 0, "signed %d: no midpoint is a float, ties untested", s);
        CHECK(bits(m[adam8_quantize(1.0f, s)]) == bits(1.0f), "1 is not exact");
        CHECK(!s || bits(m[adam8_quantize(-1.0f, s)]) == bits(-1.0f), "-1 is not exact");
    }
}

enum { N = 1000, BLK = 64 };

static void random_state(float *p, float *g, size_t n) {
    for (size_t i = 0; i < n; i++) p[i] = uniform(), g[i] = uniform() * 1e-2f;
}

/* Three steps of adamw8bit on [0, n): codes and absmax out. */
static void three_steps(float *p, const float *g, uint8_t *mq, float *ma, uint8_t *vq, float *va,
                        size_t n) {
    for (int t = 1; t <= 3; t++)
        adamw8bit_update(p, g, mq, ma, vq, va, n, BLK, t, 1e-3f, 0.9f, 0.95f, 1e-8f, 0.1f);
}

static void test_values_are_the_state(void) {
    static float p[N], g[N], ma[N], va[N], d[N], ma2[N];
    static uint8_t mq[N], vq[N], mq2[N];
    random_state(p, g, N);
    memset(mq, 0, N), memset(vq, 0, N), memset(ma, 0, sizeof ma), memset(va, 0, sizeof va);
    three_steps(p, g, mq, ma, vq, va, N);
    const size_t nb = adam8_nblocks(N, BLK);
    for (int s = 0; s < 2; s++) {
        const uint8_t *q = s ? mq : vq;
        const float *a = s ? ma : va;
        adam8_dequantize(q, a, N, BLK, s, d);
        for (size_t b = 0; b < nb; b++) { /* the absmax is the block's largest |value| */
            float top = 0;
            for (size_t i = b * BLK; i < N && i < (b + 1) * BLK; i++)
                top = fabsf(d[i]) > top ? fabsf(d[i]) : top;
            CHECK(bits(top) == bits(a[b]), "block %zu: largest |value| %a, absmax %a", b,
                  (double)top, (double)a[b]);
        }
        size_t bad = 0;
        CHECK(adam8_from_values(d, N, BLK, s, mq2, ma2, &bad) == 0, "signed %d: refused at %zu", s, bad);
        CHECK(!memcmp(mq2, q, N) && !memcmp(ma2, a, nb * sizeof(float)),
              "signed %d: the values did not rebuild the state", s);
        d[7] = nextafterf(d[7], 2.0f); /* between two codes' values */
        CHECK(adam8_from_values(d, N, BLK, s, mq2, ma2, &bad) == -1 && bad == 7,
              "signed %d: a value that is no state was taken (bad %zu)", s, bad);
    }
}

static void test_update_uses_8_bits(void) {
    static float p8[N], p32[N], g[N], m[N], v[N], ma[N], va[N];
    static uint8_t mq[N], vq[N];
    random_state(p8, g, N);
    memcpy(p32, p8, sizeof p8);
    memset(m, 0, sizeof m), memset(v, 0, sizeof v), memset(mq, 0, N), memset(vq, 0, N);
    memset(ma, 0, sizeof ma), memset(va, 0, sizeof va);
    adamw8bit_update(p8, g, mq, ma, vq, va, N, BLK, 1, 1e-3f, 0.9f, 0.95f, 1e-8f, 0.1f);
    adamw_update(p32, g, m, v, N, 1, 1e-3f, 0.9f, 0.95f, 1e-8f, 0.1f);
    CHECK(!memcmp(p8, p32, sizeof p8), "step 1: m = v = 0 are exact, the parameters must agree");
    adamw8bit_update(p8, g, mq, ma, vq, va, N, BLK, 2, 1e-3f, 0.9f, 0.95f, 1e-8f, 0.1f);
    adamw_update(p32, g, m, v, N, 2, 1e-3f, 0.9f, 0.95f, 1e-8f, 0.1f);
    CHECK(memcmp(p8, p32, sizeof p8), "step 2: the 8-bit state changed no parameter bit");
}

/* The same tensor updated whole, in two calls split at a block boundary
 * (ZeRO's aligned pieces), and split inside a block (per-shard blocks). */
static void test_blocks_not_layout(void) {
    static float p[3][N], g[N], ma[3][N], va[3][N];
    static uint8_t mq[3][N], vq[3][N];
    random_state(p[0], g, N);
    memcpy(p[1], p[0], sizeof p[0]), memcpy(p[2], p[0], sizeof p[0]);
    memset(mq, 0, sizeof mq), memset(vq, 0, sizeof vq), memset(ma, 0, sizeof ma), memset(va, 0, sizeof va);
    three_steps(p[0], g, mq[0], ma[0], vq[0], va[0], N);
    const size_t cut[3] = {0, 5 * BLK, 5 * BLK + 17}; /* [1]: a boundary, [2]: inside block 5 */
    for (int k = 1; k < 3; k++) {
        const size_t c = cut[k], qb = adam8_nblocks(c, BLK);
        for (int t = 1; t <= 3; t++) {
            adamw8bit_update(p[k], g, mq[k], ma[k], vq[k], va[k], c, BLK, t, 1e-3f, 0.9f, 0.95f,
                             1e-8f, 0.1f);
            adamw8bit_update(p[k] + c, g + c, mq[k] + c, ma[k] + qb, vq[k] + c, va[k] + qb, N - c,
                             BLK, t, 1e-3f, 0.9f, 0.95f, 1e-8f, 0.1f);
        }
    }
    CHECK(!memcmp(p[1], p[0], sizeof p[0]) && !memcmp(mq[1], mq[0], N) && !memcmp(vq[1], vq[0], N),
          "a split at a block boundary changed bits");
    CHECK(memcmp(p[2], p[0], sizeof p[0]) && memcmp(mq[2], mq[0], N),
          "a split inside a block changed nothing: the blocks would not matter");
}

static void test_config(void) {
    model_config_t c, back;
    perr_t err;
    model_config_builtin("gpt-micro", &c, &err);
    CHECK(c.optimizer == MODEL_OPT_ADAM && c.optimizer_block == ADAM8_DEFAULT_BLOCK, "defaults");
    char *adam = model_config_json(&c);
    CHECK(adam && !strstr(adam, "optimizer"), "adam's JSON changed: %s", adam);
    free(adam);
    c.optimizer = MODEL_OPT_ADAMW8BIT, c.optimizer_block = 48;
    char *js = model_config_json(&c);
    char path[] = "/tmp/parity-adam8-XXXXXX";
    const int fd = mkstemp(path);
    CHECK(fd >= 0 && js && write(fd, js, strlen(js)) == (ssize_t)strlen(js), "write");
    if (fd >= 0) close(fd);
    model_config_builtin("gpt-tiny", &back, &err);
    CHECK(model_config_load(path, &back, &err) == 0, "%s", err.msg);
    CHECK(back.optimizer == MODEL_OPT_ADAMW8BIT && back.optimizer_block == 48,
          "round trip: %d %d from %s", back.optimizer, back.optimizer_block, js);
    unlink(path);
    free(js);
    c.optimizer_block = 0;
    CHECK(model_config_validate(&c, &err) && strstr(err.msg, "--optimizer-block"), "%s", err.msg);
    c.optimizer_block = ADAM8_MAX_BLOCK + 1;
    CHECK(model_config_validate(&c, &err) && strstr(err.msg, "optimizer.block"), "%s", err.msg);
    c.optimizer = MODEL_OPT_ADAM, c.optimizer_block = 64;
    CHECK(model_config_validate(&c, &err) && strstr(err.msg, "only --optimizer adamw8bit"), "%s",
          err.msg);
}

static corpus_t corpus;

/* The optimizer category: exactly its formula, estimated and measured. */
static void test_memory(void) {
    model_config_t c;
    perr_t err;
    model_config_builtin("gpt-tiny", &c, &err);
    gpt_mem_t m32, m8;
    CHECK(gpt_mem_bytes(&c, 0, &m32, &err) == 0, "%s", err.msg);
    c.optimizer = MODEL_OPT_ADAMW8BIT, c.optimizer_block = 32;
    CHECK(gpt_mem_bytes(&c, 0, &m8, &err) == 0, "%s", err.msg);
    param_table_t t;
    CHECK(param_table_build(&t, &c, &err) == 0, "%s", err.msg);
    size_t blocks = 0;
    for (int i = 0; i < t.count; i++) blocks += (t.info[i].numel + 31) / 32;
    CHECK(m8.optimizer == 2 * t.total + 2 * 4 * blocks, "optimizer %zu bytes, want %zu", m8.optimizer,
          2 * t.total + 2 * 4 * blocks);
    CHECK(m32.optimizer == 8 * t.total && 3 * m8.optimizer < m32.optimizer, "fp32 %zu, 8-bit %zu",
          m32.optimizer, m8.optimizer);
    /* golden and dp 2 ZeRO-1: the estimate is the measured high-water */
    for (int dp = 1; dp <= 2; dp++) {
        pconfig_t pc;
        pconfig_defaults(&pc);
        pc.dp = dp, pc.zero_stage = dp > 1, pc.given |= PC_GIVEN_DP | PC_GIVEN_ZERO;
        CHECK(pconfig_validate(&pc, c.global_batch, &err) == 0, "%s", err.msg);
        memest_t est;
        CHECK(memest_layout(&c, &pc, &est, &err) == 0, "%s", err.msg);
        device_report_t rep[2];
        engine_run_t run = {.model = c, .pc = pc, .steps = 1, .data = &corpus,
                            .algo = COLL_ALGO_RING, .reports = rep};
        CHECK(engine_train(&run, &err) == 0, "%s", err.msg);
        for (int d = 0; d < dp; d++)
            CHECK(rep[d].peak[MEM_OPTIMIZER] == est.max_dev.optimizer,
                  "dp %d device %d: optimizer measured %zu, estimated %zu", dp, d,
                  rep[d].peak[MEM_OPTIMIZER], est.max_dev.optimizer);
        if (dp == 2)
            CHECK(est.max_dev.optimizer < m8.optimizer, "ZeRO-1 shards nothing: %zu of %zu",
                  est.max_dev.optimizer, m8.optimizer);
    }
    param_table_free(&t);
}

int main(void) {
    perr_t err;
    if (tile_init(&err) || corpus_load(&corpus, "ref/data/corpus.txt", &err)) {
        fprintf(stderr, "%s\n", err.msg);
        return 1;
    }
    RUN(test_maps);
    RUN(test_quantize_nearest);
    RUN(test_values_are_the_state);
    RUN(test_update_uses_8_bits);
    RUN(test_blocks_not_layout);
    RUN(test_config);
    RUN(test_memory);
    corpus_free(&corpus);
    return harness_done();
}
