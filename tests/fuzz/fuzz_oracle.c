/* fuzz_oracle.c - libFuzzer target for the oracle API (oracle.h) driven
 * with fuzzed arguments.
 *
 * The first byte picks what the rest is:
 *   even   a list of calls on one golden oracle (gpt-micro, one step, run
 *          once per process): oracle_put with a fuzzed name, step, dtype,
 *          shape, placement and rank (the data: the golden tensor's own
 *          bytes, or fuzzed ones), oracle_compare with a fuzzed tolerance,
 *          oracle_rank_of, oracle_run_golden, oracle_golden,
 *          oracle_assembled, oracle_clear;
 *   odd    a dump file for oracle_open_dump (then oracle_run_golden with a
 *          fuzzed count, and every golden tensor read).
 * Properties: every refusal has a message; an accepted put had a valid
 * placement (sizes >= 1 whose product is an int, coordinates inside them,
 * shards of the tensor's axes, rank >= -1) and the block shape torch.chunk
 * gives, and reassembles at its rank; oracle_rank_of is -1 or the
 * row-major rank; a tolerance above ORACLE_MAX_ULP is refused; an infinity
 * never compares equal to a finite golden value; run_golden on the
 * one-step oracle succeeds only for 0 and 1; a dump that opens has a
 * parseable config and readable tensors. */
#include <limits.h>
#include <math.h>
#include <string.h>

#include "fuzz_common.h"
#include "parity/oracle.h"

typedef struct {
    const uint8_t *p;
    size_t n;
} input_t;

static uint64_t take(input_t *in, int bytes) {
    uint64_t v = 0;
    for (int i = 0; i < bytes && in->n; i++, in->p++, in->n--) v |= (uint64_t)in->p[0] << (8 * i);
    return v;
}

/* An int that is mostly small, sometimes an edge, sometimes any 32 bits. */
static int take_int(input_t *in) {
    const uint8_t k = (uint8_t)take(in, 1);
    static const int edge[] = {INT_MIN, INT_MIN + 1, -2, -1, INT_MAX - 1, INT_MAX, 1 << 16,
                               46341 /* its square passes INT_MAX */};
    if (k < 160) return (int)(k % 8) - 1;
    if (k < 224) return edge[k % 8];
    return (int)(uint32_t)take(in, 4);
}

static const char *const NAMES[] = {
    "step0.grad.layers.0.mlp.dense_h_to_4h.weight", /* F32 [64,16] */
    "step0.act.layers.0.mlp.dense_h_to_4h.output",  /* F32 [4,16,64] */
    "step0.input_ids",                              /* I32 [4,16] */
    "step0.loss",                                   /* F32 [1] */
    "init.layers.0.input_layernorm.bias",           /* F32 [16] */
};
enum { NNAMES = sizeof NAMES / sizeof NAMES[0] };

static oracle_t *golden_oracle(void) {
    static oracle_t *o;
    if (o) return o;
    perr_t err;
    const char *args[] = {"--model", "gpt-micro", "--steps", "1"};
    if (!(o = oracle_open(4, args, &err)) || oracle_run_golden(o, 0, &err)) {
        fprintf(stderr, "fuzz_oracle: the golden oracle: %s\n", err.msg);
        abort(); /* the harness, not a finding */
    }
    return o;
}

/* The placement as the fuzzer gave it, and whether it is one (a model of
 * oracle.h's rules written here, not the library's). */
static int take_placement(input_t *in, oracle_placement_t *pl, int tensor_ndim) {
    pl->ndim = (int)(take(in, 1) % 7) - 1; /* -1 .. 5 */
    int ok = pl->ndim >= 0 && pl->ndim <= ORACLE_MAX_MESH;
    int64_t ranks = 1;
    for (int i = 0; i < ORACLE_MAX_MESH; i++) {
        const int m = take_int(in); /* shifted so that small bytes give sizes 1..8 */
        pl->mesh[i] = m > INT_MAX - 2 ? m : m + 2;
        pl->coord[i] = take_int(in);
        pl->shard[i] = take_int(in);
        if (i >= pl->ndim) continue;
        if (pl->mesh[i] < 1 || pl->coord[i] < 0 || pl->coord[i] >= pl->mesh[i]) ok = 0;
        if (pl->mesh[i] >= 1 && (ranks *= pl->mesh[i]) > INT_MAX) ok = 0, ranks = INT_MAX + 1LL;
        if (pl->shard[i] != ORACLE_REPLICATE &&
            (pl->shard[i] < 0 || (tensor_ndim >= 0 && pl->shard[i] >= tensor_ndim)))
            ok = 0;
    }
    return ok;
}

/* torch.chunk's cut of each sharded axis, mesh dimensions in order. */
static void chunk_block(const st_tensor_t *g, const oracle_placement_t *pl, int64_t *ext) {
    for (int d = 0; d < g->ndim; d++) ext[d] = g->shape[d];
    for (int i = 0; i < pl->ndim; i++) {
        const int a = pl->shard[i];
        if (a == ORACLE_REPLICATE) continue;
        const int64_t chunk = (ext[a] + pl->mesh[i] - 1) / pl->mesh[i];
        const int64_t start = chunk * pl->coord[i] < ext[a] ? chunk * pl->coord[i] : ext[a];
        ext[a] = ext[a] - start < chunk ? ext[a] - start : chunk;
    }
}

static int last_inf; /* the last accepted put holds +-inf where the golden value is finite */

static void op_put(oracle_t *o, input_t *in) {
    const uint8_t which = (uint8_t)take(in, 1);
    const char *full = NAMES[which % NNAMES];
    st_tensor_t g;
    const void *gd;
    perr_t err = {{0}};
    FUZZ_REQUIRE(!oracle_golden(o, full, &g, &gd, &err));
    const int shortname = which & 0x80 && strncmp(full, "init.", 5);
    const char *name = shortname ? full + strlen("step0.") : full;
    int64_t step = shortname ? 0 : -1;
    if (which & 0x40) step = (int64_t)take(in, 8);
    st_dtype_t dtype = (which & 0x20) ? (st_dtype_t)(take(in, 1) % 20) : g.dtype;
    oracle_placement_t pl;
    const int pl_ok = take_placement(in, &pl, g.ndim);
    int rank = (take(in, 1) & 3) ? -1 : take_int(in);
    int64_t ext[ST_MAX_DIMS], shape[ST_MAX_DIMS];
    int ndim = g.ndim;
    if (pl_ok) chunk_block(&g, &pl, ext);
    else memcpy(ext, g.shape, sizeof ext);
    memcpy(shape, ext, sizeof shape);
    const uint8_t how = (uint8_t)take(in, 1);
    if (how & 1) ndim = (int)(take(in, 1) % 12) - 2;
    if (how & 2) shape[take(in, 1) % ST_MAX_DIMS] = (int64_t)take(in, 8);
    /* the data: the golden values with some elements replaced, as large as
     * the golden tensor (an accepted block is never larger) */
    const size_t es = st_dtype_size(g.dtype), bytes = st_numel(&g) * es;
    unsigned char *data = malloc(bytes ? bytes : 1);
    if (!data) abort();
    memcpy(data, gd, bytes);
    uint64_t used = 1; /* the elements a block of ext takes from data */
    for (int d = 0; d < g.ndim; d++) used *= (uint64_t)ext[d];
    for (int k = (int)(take(in, 1) % 4); k > 0 && used; k--) {
        const size_t at = (size_t)(take(in, 4) % used) * es;
        if (g.dtype == ST_F32 && (take(in, 1) & 1)) {
            const float inf = (take(in, 1) & 1) ? INFINITY : -INFINITY;
            memcpy(data + at, &inf, 4);
        } else {
            for (size_t b = 0; b < es; b++) data[at + b] = (unsigned char)take(in, 1);
        }
    }
    int has_inf = 0; /* gpt-micro's golden values are all finite */
    for (uint64_t i = 0; g.dtype == ST_F32 && i < used && !has_inf; i++) {
        float f;
        memcpy(&f, data + i * 4, 4);
        has_inf = isinf(f);
    }
    const int rc = oracle_put(o, name, step, dtype, ndim, shape, (how & 4) ? NULL : data, &pl,
                              rank, &err);
    FUZZ_REQUIRE(rc == 0 || rc == -1);
    if (rc) {
        FUZZ_REQUIRE(err.msg[0] != 0);
    } else {
        FUZZ_REQUIRE(pl_ok && rank >= -1 && dtype == g.dtype && ndim == g.ndim);
        for (int d = 0; d < ndim; d++) FUZZ_REQUIRE(shape[d] == ext[d]);
        const int want = rank >= 0 ? rank : oracle_rank_of(&pl);
        FUZZ_REQUIRE(want >= 0);
        const void *v;
        const int32_t *who;
        FUZZ_REQUIRE(!oracle_assembled(o, full, &v, &who, &err));
        uint64_t mine = 0, block = 1;
        for (int d = 0; d < ndim; d++) block *= (uint64_t)ext[d];
        for (uint64_t i = 0; i < st_numel(&g); i++) mine += who[i] == want;
        /* an earlier lower rank's copy of a replicated element wins */
        FUZZ_REQUIRE(mine <= block);
        last_inf |= has_inf;
    }
    free(data);
}

static void op_compare(oracle_t *o, input_t *in) {
    const uint8_t k = (uint8_t)take(in, 1);
    oracle_tolerance_t tol = {0, ORACLE_ULP_ELEMENT};
    if (k & 1) tol.max_ulp = take(in, 8);
    else tol.max_ulp = take(in, 1);
    if (k & 2) tol.scale = take_int(in);
    else tol.scale = (k >> 2) & 1;
    oracle_divergence_t d;
    perr_t err = {{0}};
    const int rc = oracle_compare(o, (k & 8) ? NULL : &tol, &d, &err);
    FUZZ_REQUIRE(rc >= -1 && rc <= 1);
    if (rc < 0) FUZZ_REQUIRE(err.msg[0] != 0);
    if (!(k & 8) && tol.max_ulp > ORACLE_MAX_ULP) FUZZ_REQUIRE(rc == -1);
    if (last_inf && rc != -1) FUZZ_REQUIRE(rc == 1); /* an infinity never matches */
    if (rc == 1) {
        FUZZ_REQUIRE(memchr(d.report, 0, sizeof d.report) && d.report[0]);
        FUZZ_REQUIRE(d.kind == ORACLE_DIFF_VALUE || d.kind == ORACLE_DIFF_MISSING);
        FUZZ_REQUIRE(d.flat < d.numel && d.ndiff >= 1 && d.ndiff <= d.numel);
    }
}

static void op_rank_of(input_t *in) {
    oracle_placement_t pl;
    const int ok = take_placement(in, &pl, -1);
    const int r = oracle_rank_of((take(in, 1) & 7) ? &pl : NULL);
    if (r == -1) return;
    FUZZ_REQUIRE(ok && r >= 0);
    int64_t want = 0;
    for (int i = 0; i < pl.ndim; i++) want = want * pl.mesh[i] + pl.coord[i];
    FUZZ_REQUIRE(want == r);
}

static void op_misc(oracle_t *o, input_t *in) {
    perr_t err = {{0}};
    const uint8_t k = (uint8_t)take(in, 1);
    if (k % 4 == 0) {
        const int steps = take_int(in);
        const int rc = oracle_run_golden(o, steps, &err);
        FUZZ_REQUIRE(rc == 0 ? steps == 0 || steps == 1 : err.msg[0] != 0);
    } else if (k % 4 == 1) {
        char name[64];
        size_t n = (size_t)take(in, 1) % sizeof name;
        for (size_t i = 0; i < n; i++) name[i] = (char)take(in, 1);
        name[n < sizeof name ? n : sizeof name - 1] = 0;
        st_tensor_t t;
        const void *d;
        if (oracle_golden(o, (k & 4) ? name : NAMES[k % NNAMES], &t, &d, &err))
            FUZZ_REQUIRE(err.msg[0] != 0);
        else
            FUZZ_REQUIRE(d != NULL || st_numel(&t) == 0);
    } else if (k % 4 == 2) {
        const void *v;
        const int32_t *who;
        if (!oracle_assembled(o, NAMES[k % NNAMES], &v, &who, &err)) {
            st_tensor_t t;
            FUZZ_REQUIRE(!oracle_golden(o, NAMES[k % NNAMES], &t, NULL, &err));
            for (uint64_t i = 0; i < st_numel(&t); i++) FUZZ_REQUIRE(who[i] >= -1);
        } else {
            FUZZ_REQUIRE(err.msg[0] != 0);
        }
    } else {
        oracle_clear(o);
        last_inf = 0;
    }
}

static void fuzz_calls(input_t *in) {
    oracle_t *o = golden_oracle();
    oracle_clear(o);
    last_inf = 0;
    for (int ops = 0; in->n && ops < 64; ops++) {
        switch (take(in, 1) % 4) {
        case 0: op_put(o, in); break;
        case 1: op_compare(o, in); break;
        case 2: op_rank_of(in); break;
        default: op_misc(o, in); break;
        }
    }
}

static void fuzz_dump(const uint8_t *data, size_t size, int steps) {
    char path[64];
    const int fd = fuzz_memfile(data, size, path);
    perr_t err = {{0}};
    oracle_t *o = oracle_open_dump(path, &err);
    close(fd);
    if (!o) {
        FUZZ_REQUIRE(err.msg[0] != 0);
        return;
    }
    const char *cfg = oracle_config_json(o);
    FUZZ_REQUIRE(cfg && cfg[0] == '{');
    if (oracle_run_golden(o, steps, &err)) FUZZ_REQUIRE(err.msg[0] != 0);
    for (int i = 0; i < oracle_count(o); i++) {
        st_tensor_t t;
        const void *d;
        FUZZ_REQUIRE(!oracle_tensor_at(o, i, &t, &d));
        FUZZ_REQUIRE(d != NULL || st_numel(&t) == 0);
    }
    FUZZ_REQUIRE(oracle_tensor_at(o, oracle_count(o), NULL, NULL) == -1);
    oracle_close(o);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 1) return 0;
    if (data[0] & 1) {
        if (size < 2) return 0;
        fuzz_dump(data + 2, size - 2, (int)(int8_t)data[1]);
        return 0;
    }
    input_t in = {data + 1, size - 1};
    fuzz_calls(&in);
    return 0;
}
