/* test_oracle.c - the oracle (oracle.h) on the in-tree library: torch.chunk
 * cuts (uneven, empty blocks, nested mesh dimensions), reassembly's
 * ranks, bit-exactness down to the sign of zero, the two tolerance
 * scales, integers always exact, NaN, the execution order of the report,
 * and bad input refused with a message naming what is wrong: step counts
 * past what memory holds, negative ranks and steps, meshes of more ranks
 * than an int counts, a tolerance that wrapped, an infinity inside a
 * tolerance, a dump whose config is another model's.
 * tests/cli/test_install.sh runs the same API from an installed copy. */
#include "model/gpt.h"
#include "../harness.h"

#include <limits.h>
#include <math.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include "parity/dump.h"
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


/* oracle_run_golden(o, steps) in a child with `mem_mb` of memory
 * (PARITY_MEM_AVAILABLE_MB) and 5 s: 0 when refused with a message
 * holding `want` before anything ran, 1 when it ran (or ran on: the
 * alarm ends it), 2 when refused with another message. */
static int run_golden_refused(int steps, const char *mem_mb, const char *want) {
    fflush(NULL);
    pid_t pid = fork();
    if (pid == 0) {
        alarm(5);
        setenv("PARITY_MEM_AVAILABLE_MB", mem_mb, 1);
        perr_t err = {{0}};
        const char *args[] = {"--model", "gpt-micro"};
        oracle_t *o = oracle_open(2, args, &err);
        if (!o) _exit(3);
        int rc = oracle_run_golden(o, steps, &err);
        if (rc && !strstr(err.msg, want)) fprintf(stderr, "    steps %d: %s\n", steps, err.msg);
        _exit(!rc ? 1 : strstr(err.msg, want) ? 0 : 2);
    }
    int status = 0;
    if (pid < 0 || waitpid(pid, &status, 0) != pid) return 1;
    return WIFEXITED(status) ? WEXITSTATUS(status) : 1;
}

/* Step counts: INT_MAX ran until memory ran out; 1000 steps of
 * gpt-micro keep ~300 MB of golden tensors, more than 64 MB allow; a
 * negative count ran the default. */
static void test_step_bounds(void) {
    CHECK(run_golden_refused(INT_MAX, "100000", "steps 2147483647: expected 1 to 1000000") == 0,
          "INT_MAX steps not refused by the --steps bound");
    CHECK(run_golden_refused(1000, "64", "host memory") == 0,
          "1000 steps in 64 MB not refused by the memory estimate");
    CHECK(run_golden_refused(-1, "100000", "steps -1") == 0, "steps -1 not refused");
}

static void put_inf(void *data, uint64_t n) {
    for (uint64_t i = 0; i < n; i++)
        if (((float *)data)[i] > 0) {
            ((float *)data)[i] = INFINITY;
            g_small = (long)i;
            return;
        }
}
static void put_huge(void *data, uint64_t n) {
    (void)n;
    ((float *)data)[0] = 1e30f;
}

/* oracle_rank_of(NULL) was rank 0, a mesh of 2^124 ranks overflowed. */
static void test_rank_of_bounds(void) {
    CHECK(oracle_rank_of(NULL) == -1, "rank_of(NULL) = %d", oracle_rank_of(NULL));
    oracle_placement_t big = {.ndim = 4, .mesh = {INT_MAX, INT_MAX, INT_MAX, INT_MAX},
                              .coord = {1, 1, 1, 1}};
    CHECK(oracle_rank_of(&big) == -1, "a mesh of 2^124 ranks: rank %d", oracle_rank_of(&big));
    oracle_placement_t bad = {.ndim = 1, .mesh = {2}, .coord = {5}, .shard = {0}};
    CHECK(oracle_rank_of(&bad) == -1, "coordinate 5 of 2: rank %d", oracle_rank_of(&bad));
    oracle_placement_t ok = {.ndim = 2, .mesh = {2, 3}, .coord = {1, 2}, .shard = {0, 1}};
    CHECK(oracle_rank_of(&ok) == 5, "rank_of [1,2] of [2,3] = %d", oracle_rank_of(&ok));
}

/* A put at a mesh of 2^124 ranks, or from rank -5, was accepted. */
static void test_put_rank_bounds(void) {
    oracle_t *o = open_micro();
    if (!o) return;
    st_tensor_t t;
    const float *g = golden_f32(o, GW, &t);
    oracle_placement_t big = {.ndim = 4, .mesh = {INT_MAX, INT_MAX, INT_MAX, INT_MAX},
                              .coord = {1, 1, 1, 1},
                              .shard = {ORACLE_REPLICATE, ORACLE_REPLICATE, ORACLE_REPLICATE,
                                        ORACLE_REPLICATE}};
    REFUSED(oracle_put(o, GW, -1, ST_F32, 2, t.shape, g, &big, -1, &e_),
            "a mesh of more than 2147483647 ranks");
    oracle_clear(o);
    REFUSED(oracle_put(o, GW, -1, ST_F32, 2, t.shape, g, NULL, -5, &e_), "rank -5");
    oracle_clear(o);
    REFUSED(oracle_put(o, GW, -1, ST_F32, 2, t.shape, g, NULL, INT_MIN, &e_), "rank -2147483648");
    oracle_close(o);
}

/* max_ulp -1 cast to uint64 passed a 1e30 error. */
static void test_tolerance_wrap(void) {
    oracle_t *o = open_micro();
    if (!o) return;
    perr_t err;
    oracle_divergence_t d;
    CHECK(!put_whole(o, GW, put_huge, &err), "%s", err.msg);
    oracle_tolerance_t wrapped = {(uint64_t)-1, ORACLE_ULP_ELEMENT},
                       wrapped_t = {(uint64_t)1 << 63, ORACLE_ULP_TENSOR};
    REFUSED(oracle_compare(o, &wrapped, &d, &e_), "max_ulp 18446744073709551615");
    REFUSED(oracle_compare(o, &wrapped_t, &d, &e_), "max_ulp 9223372036854775808");
    oracle_tolerance_t most = {ORACLE_MAX_ULP, ORACLE_ULP_ELEMENT};
    CHECK(oracle_compare(o, &most, &d, &err) == 0, "2^63-1 ulp: %s", err.msg);
    oracle_close(o);
}

/* +inf is fewer than 2^31 ulps above a positive float, and passed such a
 * tolerance: no tolerance makes an overflow that float. */
static void test_inf_in_tolerance(void) {
    oracle_t *o = open_micro();
    if (!o) return;
    perr_t err;
    oracle_divergence_t d;
    CHECK(!put_whole(o, GW, put_inf, &err), "%s", err.msg);
    oracle_tolerance_t wide = {(uint64_t)1 << 31, ORACLE_ULP_ELEMENT},
                       wide_t = {(uint64_t)1 << 31, ORACLE_ULP_TENSOR};
    CHECK(oracle_compare(o, &wide, &d, &err) == 1 && d.flat == (uint64_t)g_small && isinf(d.got),
          "+inf within 2^31 ulp of the element: %s", d.report);
    CHECK(oracle_compare(o, &wide_t, &d, &err) == 1 && d.flat == (uint64_t)g_small,
          "+inf within 2^31 ulp of the tensor: %s", d.report);
    oracle_close(o);
}

/* A dump of gpt-micro's initial parameters with `config` (NULL: its own)
 * in its metadata, at path; with `wide` also an F64 tensor step0.wide [1]
 * holding *wide. */
static int write_dump(const char *path, const model_config_t *config, const double *wide,
                      perr_t *err) {
    model_config_t cfg;
    model_config_builtin("gpt-micro", &cfg, NULL);
    gpt_t *g = NULL;
    if (gpt_new(&g, &cfg, err)) return -1;
    dump_t *d = dump_new(g, DUMP_TENSORS);
    st_writer_t *w = st_writer_new();
    int rc = !d || !w || dump_add_init(d, g, err);
    char *json = model_config_json(config ? config : &cfg);
    for (size_t i = 0; !rc && i < st_writer_count(dump_writer(d)); i++) {
        st_tensor_t t;
        const void *data = st_writer_tensor(dump_writer(d), i, &t);
        rc = st_writer_add(w, t.name, t.dtype, t.ndim, t.shape, data, err);
    }
    const int64_t one = 1;
    if (!rc && wide) rc = st_writer_add(w, "step0.wide", ST_F64, 1, &one, wide, err);
    if (!rc) rc = !json || st_writer_set_metadata(w, "config", json, err) ||
                  st_writer_set_metadata(w, "format", "parity-dump-1", err) ||
                  st_writer_save(w, path, err);
    free(json);
    st_writer_free(w);
    dump_free(d);
    gpt_free(g);
    return rc ? -1 : 0;
}

/* A dump whose config is another model's than its tensors' is refused,
 * naming the first tensor or parameter that disagrees. */
static void test_dump_config(void) {
    char dir[] = "/tmp/parity-oracle-XXXXXX", path[64];
    CHECK(harness_mkdtemp(dir) == 0, "mkdtemp");
    snprintf(path, sizeof path, "%s/d.safetensors", dir);
    perr_t err;
    CHECK(!write_dump(path, NULL, NULL, &err), "%s", err.msg);
    oracle_t *o = oracle_open_dump(path, &err);
    CHECK(o != NULL, "its own config: %s", err.msg);
    oracle_close(o);
    model_config_t c;
    const char *want[3] = {"tensor 'init.layers.1.input_layernorm.weight': its config has no "
                           "parameter 'layers.1.input_layernorm.weight'",
                           "its config's parameter 'layers.2.input_layernorm.weight' has no "
                           "tensor 'init.layers.2.input_layernorm.weight'",
                           "tensor 'init.layers.0.mlp.dense_h_to_4h.weight' is F32 [64,16], its "
                           "config's parameter 'layers.0.mlp.dense_h_to_4h.weight' is F32 [32,16]"};
    for (int k = 0; k < 3; k++) {
        model_config_builtin("gpt-micro", &c, NULL);
        if (k == 0) c.layers = 1;
        if (k == 1) c.layers = 3;
        if (k == 2) c.ffn = 32;
        CHECK(!write_dump(path, &c, NULL, &err), "%s", err.msg);
        o = oracle_open_dump(path, &err);
        CHECK(!o && strstr(err.msg, want[k]), "case %d: %s", k, o ? "opened" : err.msg);
        oracle_close(o);
    }
    harness_rmtree(dir);
}

/* A tensor-scale tolerance is max_ulp ULPs of the tensor's largest
 * element: 2^62 of 1e308's (2^971 each) is no finite distance, and would
 * pass every value. */
static void test_tolerance_not_finite(void) {
    char dir[] = "/tmp/parity-oracle-XXXXXX", path[64];
    CHECK(harness_mkdtemp(dir) == 0, "mkdtemp");
    snprintf(path, sizeof path, "%s/d.safetensors", dir);
    perr_t err;
    const double wide = 1e308, off = -1e308;
    CHECK(!write_dump(path, NULL, &wide, &err), "%s", err.msg);
    oracle_t *o = oracle_open_dump(path, &err);
    CHECK(o && !oracle_run_golden(o, 1, &err), "%s", err.msg);
    const int64_t one = 1;
    oracle_divergence_t d;
    CHECK(o && !oracle_put(o, "step0.wide", -1, ST_F64, 1, &one, &off, NULL, -1, &err), "%s",
          err.msg);
    oracle_tolerance_t huge = {(uint64_t)1 << 62, ORACLE_ULP_TENSOR};
    REFUSED(oracle_compare(o, &huge, &d, &e_), "is not a finite distance");
    oracle_close(o);
    harness_rmtree(dir);
}

int main(void) {
    RUN(test_chunk_cuts);
    RUN(test_signed_zero);
    RUN(test_tolerance_scales);
    RUN(test_integers_nan_order);
    RUN(test_config_file);
    RUN(test_bad_input);
    RUN(test_step_bounds);
    RUN(test_rank_of_bounds);
    RUN(test_put_rank_bounds);
    RUN(test_tolerance_wrap);
    RUN(test_inf_in_tolerance);
    RUN(test_dump_config);
    RUN(test_tolerance_not_finite);
    return harness_done();
}
