/* test_oracle.c - the oracle (oracle.h) on the in-tree library: torch.chunk
 * cuts (uneven, empty blocks, nested mesh dimensions), reassembly's
 * ranks, bit-exactness down to the sign of zero, the two tolerance
 * scales, integers always exact, NaN, the execution order of the report,
 * and bad input refused with a message naming what is wrong.
 * tests/test_install.sh runs the same API from an installed copy. */
#include "harness.h"

#include <math.h>

#include "parity/oracle.h"

#define FC "step0.act.layers.0.mlp.dense_h_to_4h.output" /* [4,16,64] */
#define GW "step0.grad.layers.0.mlp.dense_h_to_4h.weight" /* [64,16] */

static oracle_t *open_micro(void) {
    perr_t err;
    const char *args[] = {"--model", "gpt-micro", "--steps", "1"};
    oracle_t *o = oracle_open(4, args, &err);
    CHECK(o != NULL, "open: %s", err.msg);
    if (o && oracle_run_golden(o, 0, &err)) {
        CHECK(0, "run_golden: %s", err.msg);
        oracle_close(o);
        return NULL;
    }
    return o;
}

static const float *golden_f32(oracle_t *o, const char *name, st_tensor_t *t) {
    const void *d = NULL;
    perr_t err;
    CHECK(!oracle_golden(o, name, t, &d, &err), "%s", err.msg);
    return d;
}

/* A global tensor (full name) put whole from rank 0, after fn edits a copy. */
static int put_whole(oracle_t *o, const char *name, void (*fn)(void *data, uint64_t n), perr_t *err) {
    st_tensor_t t;
    const void *d;
    if (oracle_golden(o, name, &t, &d, err)) return -1;
    const size_t bytes = st_numel(&t) * st_dtype_size(t.dtype);
    void *copy = malloc(bytes);
    memcpy(copy, d, bytes);
    if (fn) fn(copy, st_numel(&t));
    int rc = oracle_put(o, name, -1, t.dtype, t.ndim, t.shape, copy, NULL, -1, err);
    free(copy);
    return rc;
}

/* Uneven torch.chunk: 4 rows over 3 ranks are 2, 2 and 0 (an empty
 * block); and two mesh dimensions sharding one axis nest in order. */
static void test_chunk_cuts(void) {
    oracle_t *o = open_micro();
    if (!o) return;
    st_tensor_t t;
    const float *g = golden_f32(o, FC, &t);
    perr_t err;
    for (int r = 0; r < 3; r++) {
        oracle_placement_t pl = {.ndim = 1, .mesh = {3}, .coord = {r}, .shard = {0}};
        int64_t shape[3] = {r < 2 ? 2 : 0, 16, 64};
        CHECK(!oracle_put(o, FC, -1, ST_F32, 3, shape, g + (size_t)r * 2 * 16 * 64, &pl, -1, &err),
              "rank %d: %s", r, err.msg);
    }
    oracle_divergence_t d;
    CHECK(oracle_compare(o, NULL, &d, &err) == 0, "%s", d.report);
    oracle_clear(o);
    /* mesh [2,2], both dimensions Shard(2): rank (a,b) holds columns
     * 32a + 16b .. +16 */
    float block[4 * 16 * 16];
    for (int r = 0; r < 4; r++) {
        const int a = r / 2, b = r % 2;
        oracle_placement_t pl = {.ndim = 2, .mesh = {2, 2}, .coord = {a, b}, .shard = {2, 2}};
        for (int i = 0; i < 4 * 16; i++)
            memcpy(block + i * 16, g + i * 64 + 32 * a + 16 * b, 16 * sizeof(float));
        int64_t shape[3] = {4, 16, 16};
        CHECK(!oracle_put(o, "act.layers.0.mlp.dense_h_to_4h.output", 0, ST_F32, 3, shape, block,
                          &pl, -1, &err), "rank %d: %s", r, err.msg);
    }
    CHECK(oracle_compare(o, NULL, &d, &err) == 0, "%s", d.report);
    const void *v;
    const int32_t *who;
    CHECK(!oracle_assembled(o, FC, &v, &who, &err), "%s", err.msg);
    CHECK(who[15] == 0 && who[16] == 1 && who[32] == 2 && who[63] == 3 && who[64] == 0,
          "who %d %d %d %d %d", who[15], who[16], who[32], who[63], who[64]);
    CHECK(!memcmp(v, g, st_numel(&t) * 4), "the reassembled values are the golden ones");
    oracle_close(o);
}

static void neg_zero_3(void *data, uint64_t n) {
    (void)n;
    ((float *)data)[3] = -0.0f;
}

/* +0 and -0 are 0 ulp apart but not the same bits: bit-exact catches it,
 * a tolerance lets it pass. */
static void test_signed_zero(void) {
    oracle_t *o = open_micro();
    if (!o) return;
    perr_t err;
    oracle_divergence_t d;
    CHECK(!put_whole(o, "init.layers.0.input_layernorm.bias", neg_zero_3, &err), "%s", err.msg);
    CHECK(oracle_compare(o, NULL, &d, &err) == 1 && d.flat == 3 && d.ulp == 0 && d.rank == 0 &&
              d.kind == ORACLE_DIFF_VALUE && d.step == -1, "%s", d.report);
    oracle_tolerance_t one = {1, ORACLE_ULP_ELEMENT};
    CHECK(oracle_compare(o, &one, &d, &err) == 0, "%s", d.report);
    oracle_close(o);
}

static long g_small; /* the element test_tolerance_scales moves */
static float g_step;
static void move_small(void *data, uint64_t n) {
    (void)n;
    ((float *)data)[g_small] += g_step;
}

/* A small element moved by 4 ulps of the tensor's largest: millions of
 * its own ulps (element scale fails) but within 16 of the tensor's. */
static void test_tolerance_scales(void) {
    oracle_t *o = open_micro();
    if (!o) return;
    st_tensor_t t;
    const float *g = golden_f32(o, GW, &t);
    float big = 0, small = INFINITY;
    for (uint64_t i = 0; i < st_numel(&t); i++) {
        if (fabsf(g[i]) > big) big = fabsf(g[i]);
        if (g[i] != 0 && fabsf(g[i]) < small) small = fabsf(g[i]), g_small = (long)i;
    }
    int e;
    frexpf(big, &e);
    g_step = ldexpf(4, e - 24); /* 4 ulps of big */
    perr_t err;
    oracle_divergence_t d;
    CHECK(!put_whole(o, GW, move_small, &err), "%s", err.msg);
    oracle_tolerance_t el = {16, ORACLE_ULP_ELEMENT}, te = {16, ORACLE_ULP_TENSOR},
                       tight = {2, ORACLE_ULP_TENSOR};
    CHECK(oracle_compare(o, &el, &d, &err) == 1 && d.flat == (uint64_t)g_small && d.ulp > 16,
          "%s", d.report);
    CHECK(oracle_compare(o, &te, &d, &err) == 0, "%s", d.report);
    CHECK(oracle_compare(o, &tight, &d, &err) == 1 && strstr(d.report, "largest element"),
          "%s", d.report);
    oracle_close(o);
}

static void bump_token(void *data, uint64_t n) {
    (void)n;
    ((int32_t *)data)[5] += 1;
}
static void nan_at_7(void *data, uint64_t n) {
    (void)n;
    ((float *)data)[7] = NAN;
}
static void move_one(void *data, uint64_t n) {
    (void)n;
    uint32_t u;
    memcpy(&u, (float *)data + 9, 4);
    u ^= 1;
    memcpy((float *)data + 9, &u, 4);
}

/* Integers are exact under any tolerance; a NaN is a divergence; the
 * report follows execution order, not the order of the puts. */
static void test_integers_nan_order(void) {
    oracle_t *o = open_micro();
    if (!o) return;
    perr_t err;
    oracle_divergence_t d;
    oracle_tolerance_t loose = {1000000, ORACLE_ULP_TENSOR};
    CHECK(!put_whole(o, "step0.input_ids", bump_token, &err), "%s", err.msg);
    CHECK(oracle_compare(o, &loose, &d, &err) == 1 && d.flat == 5 && d.got == d.want + 1,
          "%s", d.report);
    oracle_clear(o);
    CHECK(!put_whole(o, GW, nan_at_7, &err), "%s", err.msg);
    CHECK(oracle_compare(o, &loose, &d, &err) == 1 && d.flat == 7 && isnan(d.got), "%s", d.report);
    oracle_clear(o);
    CHECK(!put_whole(o, GW, move_one, &err) && !put_whole(o, "step0.act.layers.1.output", move_one, &err) &&
              !put_whole(o, "step0.loss", NULL, &err), "%s", err.msg);
    CHECK(oracle_compare(o, NULL, &d, &err) == 1 && !strcmp(d.tensor, "step0.act.layers.1.output") &&
              d.compared == 3 && d.ulp == 1, "%s", d.report);
    oracle_close(o);
}

/* The config a run reports (the dump's "config"), written to a file and
 * opened with --model FILE.json, gives the same golden run. */
static void test_config_file(void) {
    oracle_t *a = open_micro();
    if (!a) return;
    char dir[] = "/tmp/parity-oracle-XXXXXX", path[64];
    CHECK(harness_mkdtemp(dir) == 0, "mkdtemp");
    snprintf(path, sizeof path, "%s/micro.json", dir);
    FILE *f = fopen(path, "w");
    if (f) fputs(oracle_config_json(a), f), fclose(f);
    perr_t err;
    const char *args[] = {"--config", path};
    oracle_t *b = oracle_open(2, args, &err);
    CHECK(b && !oracle_run_golden(b, 1, &err), "%s", err.msg);
    CHECK(b && oracle_count(a) == oracle_count(b), "%d vs %d tensors", oracle_count(a),
          b ? oracle_count(b) : -1);
    for (int i = 0; b && i < oracle_count(a); i++) {
        st_tensor_t ta, tb;
        const void *da, *db;
        oracle_tensor_at(a, i, &ta, &da);
        oracle_tensor_at(b, i, &tb, &db);
        CHECK(!strcmp(ta.name, tb.name) && st_numel(&ta) == st_numel(&tb) &&
                  !memcmp(da, db, st_numel(&ta) * st_dtype_size(ta.dtype)),
              "%s differs", ta.name);
    }
    oracle_close(a);
    oracle_close(b);
    harness_rmtree(dir);
}

#define REFUSED(call, want)                                                                    \
    do {                                                                                       \
        perr_t e_ = {{0}};                                                                     \
        int rc_ = (call);                                                                      \
        CHECK(rc_ < 0 && strstr(e_.msg, want), "%s: rc %d, message \"%s\" lacks \"%s\"", #call, \
              rc_, e_.msg, want);                                                              \
    } while (0)

static void test_bad_input(void) {
    perr_t err;
    const char *bad[][4] = {{"--model", "gpt-micro", "--steps", NULL},
                            {"--model", "gpt-micro", "--backend", "gpu"},
                            {"--model", "/nonexistent/m.json", NULL, NULL},
                            {"--model", "gpt-micro", "--data", "/nonexistent/corpus"},
                            {"--model", "gpt-micro", "--data-parallel-size", "2"},
                            {"--model", "gpt-micro", "--config", "gpt-tiny"}};
    const char *want[] = {"--steps", "--backend", "m.json", "/nonexistent/corpus",
                          "unknown option '--data-parallel-size'", "--config given twice"};
    for (int k = 0; k < 6; k++) {
        int n = 0;
        while (n < 4 && bad[k][n]) n++;
        oracle_t *o = oracle_open(n, bad[k], &err);
        CHECK(!o && strstr(err.msg, want[k]), "case %d: %s", k, o ? "opened" : err.msg);
        oracle_close(o);
    }
    CHECK(!oracle_open_dump("/nonexistent.safetensors", &err) && strstr(err.msg, "nonexistent"),
          "%s", err.msg);

    const char *args[] = {"--model", "gpt-micro"};
    oracle_t *o = oracle_open(2, args, &err);
    if (!o) return;
    int64_t shape[2] = {64, 16};
    float zeros[64 * 16] = {0};
    REFUSED(oracle_put(o, "loss", 0, ST_F32, 1, shape, zeros, NULL, -1, &e_), "no golden run yet");
    CHECK(!oracle_run_golden(o, 1, &err), "%s", err.msg);
    REFUSED(oracle_run_golden(o, 2, &e_), "holds 1 step already");
    REFUSED(oracle_compare(o, NULL, NULL, &e_), "nothing to compare");
    oracle_placement_t pl = {.ndim = 1, .mesh = {2}, .coord = {2}, .shard = {0}};
    REFUSED(oracle_put(o, GW, -1, ST_F32, 2, shape, zeros, &pl, -1, &e_), "coordinate 2");
    pl.coord[0] = 0, pl.mesh[0] = 0;
    REFUSED(oracle_put(o, GW, -1, ST_F32, 2, shape, zeros, &pl, -1, &e_), "has size 0");
    pl.ndim = 5;
    REFUSED(oracle_put(o, GW, -1, ST_F32, 2, shape, zeros, &pl, -1, &e_), "5 mesh dimensions");
    REFUSED(oracle_put(o, GW, -1, ST_I32, 2, shape, zeros, NULL, -1, &e_), "dtype I32");
    REFUSED(oracle_put(o, GW, -1, ST_F32, 1, shape, zeros, NULL, -1, &e_), "a block of shape [64]");
    REFUSED(oracle_put(o, GW, -1, ST_F32, 2, NULL, zeros, NULL, -1, &e_), "a block of shape");
    REFUSED(oracle_put(o, GW, -1, ST_F32, 2, shape, NULL, NULL, -1, &e_), "no data");
    REFUSED(oracle_put(o, "loss", -2, ST_F32, 1, shape, zeros, NULL, -1, &e_), "step -2");
    REFUSED(oracle_put(o, "loss", 1, ST_F32, 1, shape, zeros, NULL, -1, &e_), "step1.loss");
    REFUSED(oracle_put(o, NULL, 0, ST_F32, 1, shape, zeros, NULL, -1, &e_), "no tensor name");
    CHECK(!oracle_put(o, GW, -1, ST_F32, 2, shape, zeros, NULL, 3, &err), "%s", err.msg);
    REFUSED(oracle_put(o, GW, -1, ST_F32, 2, shape, zeros, NULL, 3, &e_), "rank 3 put a block");
    oracle_tolerance_t odd = {1, 7};
    REFUSED(oracle_compare(o, &odd, NULL, &e_), "scale 7");
    REFUSED(oracle_golden(o, "step0.nothing", NULL, NULL, &e_), "not a golden tensor");
    CHECK(!oracle_golden(o, "step0.loss", NULL, NULL, &err), "%s", err.msg); /* NULL outputs */
    REFUSED(oracle_assembled(o, "step0.loss", NULL, NULL, &e_), "no block of it was put");
    oracle_close(o);
}

int main(void) {
    RUN(test_chunk_cuts);
    RUN(test_signed_zero);
    RUN(test_tolerance_scales);
    RUN(test_integers_nan_order);
    RUN(test_config_file);
    RUN(test_bad_input);
    return harness_done();
}
