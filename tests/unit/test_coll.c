/* test_coll.c - every collective, dtype, op and algorithm against a
 * sequential computation written here.
 *
 * Group sizes 1, 2, 3, 4, 7, 8; counts 0, 1, odd, not divisible by n,
 * above the small-message and the pipeline-piece thresholds; in-place
 * forms. fp32 sums are checked bit for bit against the order each
 * algorithm documents in coll.h; everything else is exact, so its
 * expected value does not depend on the order at all, and a second pass
 * with a random permutation of which rank holds which data must give the
 * identical bits. Devices record failures in their own slot; the main
 * thread CHECKs them after the run (the harness is not thread-safe).
 */
#include "parity/coll.h"

#include <math.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "../harness.h"

#if defined(__SANITIZE_THREAD__) || defined(__SANITIZE_ADDRESS__)
#define SANITIZED 1
#else
#define SANITIZED 0
#endif

#define MAXN 8

/* ---- deterministic data ---- */

static uint64_t mix(uint64_t x) {
    x += 0x9e3779b97f4a7c15ULL;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
    return x ^ (x >> 31);
}

static uint64_t h3(int who, size_t k, int salt) {
    return mix(((uint64_t)(unsigned)who << 48) ^ ((uint64_t)k << 12) ^ (uint64_t)(unsigned)salt);
}

/* Wide exponents, so the summation order shows in the low bits. With
 * specials (salt odd): zeros of both signs, infinities, NaN. */
static float gen_f32(int who, size_t k, int salt) {
    uint64_t h = h3(who, k, salt);
    if (salt & 1) {
        switch (h >> 58) {
        case 0: return NAN;
        case 1: case 2: return 0.0f;
        case 3: case 4: return -0.0f;
        case 5: return INFINITY;
        case 6: return -INFINITY;
        default: break;
        }
    }
    float v = ldexpf(1.0f + (float)(h & 0x7fffff) / 8388608.0f, (int)((h >> 23) % 25) - 12);
    return (h >> 40) & 1 ? -v : v;
}

static void canonical(xacc_t *out, const xacc_t *v) {
    xacc_t c;
    xacc_init(&c);
    xacc_merge(&c, v);
    *out = c;
}

/* Element k of contributor `who` (the data, not the rank that holds it). */
static void gen_elem(coll_dtype_t dt, int who, size_t k, int salt, void *out) {
    uint64_t h = h3(who, k, salt ^ 0x5a5a);
    switch (dt) {
    case COLL_F32: { float f = gen_f32(who, k, salt); memcpy(out, &f, 4); break; }
    case COLL_I32: { int32_t v = (int32_t)(uint32_t)h; memcpy(out, &v, 4); break; }
    case COLL_I64: { int64_t v = (int64_t)h; memcpy(out, &v, 8); break; }
    case COLL_XACC: {
        xacc_t a;
        xacc_init(&a);
        for (int t = 0; t < 3; t++) xacc_add_f32(&a, gen_f32(who, k, salt * 7 + t * 2));
        memcpy(out, &a, sizeof a);
        break;
    }
    default: break;
    }
}

/* ---- independent reference reductions ---- */

static float ref_pick(float a, float b, int want_max) {
    if (isnan(a) || isnan(b)) return NAN; /* compared as the canonical NaN below */
    if (a == b) return (signbit(a) != 0) == want_max ? b : a; /* -0 < +0 */
    return (a > b) == want_max ? a : b;
}

typedef struct {
    int n;
    coll_algo_t algo;
    int perm[MAXN]; /* rank j holds contributor perm[j] */
    int exact_only;
    group_t *g;
    int fails[MAXN];
    char msg[MAXN][300];
    long f32_sum_elems, f32_sum_differs_from_direct; /* drift evidence (rank 0) */
} cfg_t;

typedef struct {
    cfg_t *cfg;
    device_t *dev;
    int me, who, n;
} dctx_t;

#define DFAIL(d, ...)                                                                  \
    do {                                                                               \
        if ((d)->cfg->fails[(d)->me]++ == 0)                                           \
            snprintf((d)->cfg->msg[(d)->me], sizeof (d)->cfg->msg[0], __VA_ARGS__);    \
    } while (0)

/* The ranks in summation order for element k (coll.h's documentation):
 * direct: 0..n-1; ring: starting after `first`, ending at it. */
static void order_for(const dctx_t *d, int ring, int first, int *seq) {
    for (int i = 0; i < d->n; i++) seq[i] = ring ? (first + 1 + i) % d->n : i;
}

/* Expected element: over ranks seq (fp32 sums follow it; the exact types
 * fold over contributors 0..n-1 instead, which must not matter). */
static void ref_elem(const dctx_t *d, coll_dtype_t dt, coll_op_t op, const int *seq, size_t k, int salt,
                     void *out) {
    int n = d->n;
    if (dt == COLL_F32) {
        float acc = gen_f32(d->cfg->perm[seq[0]], k, salt);
        for (int i = 1; i < n; i++) {
            float x = gen_f32(d->cfg->perm[seq[i]], k, salt);
            acc = op == COLL_SUM ? acc + x : ref_pick(acc, x, op == COLL_MAX);
        }
        if (isnan(acc) && op != COLL_SUM) {
            uint32_t qnan = 0x7fc00000u;
            memcpy(&acc, &qnan, 4);
        }
        memcpy(out, &acc, 4);
    } else if (dt == COLL_I32 || dt == COLL_I64) {
        int64_t acc = 0;
        uint64_t uacc = 0;
        for (int w = 0; w < n; w++) {
            int64_t x;
            if (dt == COLL_I32) {
                int32_t v;
                gen_elem(dt, w, k, salt, &v);
                x = v;
            } else {
                gen_elem(dt, w, k, salt, &x);
            }
            uacc += (uint64_t)x;
            if (w == 0 || (op == COLL_MAX ? x > acc : x < acc)) acc = x;
        }
        if (op == COLL_SUM) acc = (int64_t)uacc;
        if (dt == COLL_I32) {
            int32_t v = op == COLL_SUM ? (int32_t)(uint32_t)uacc : (int32_t)acc;
            memcpy(out, &v, 4);
        } else {
            memcpy(out, &acc, 8);
        }
    } else { /* xacc: every original fp32 term added to one accumulator */
        xacc_t acc;
        xacc_init(&acc);
        for (int w = 0; w < n; w++)
            for (int t = 0; t < 3; t++) xacc_add_f32(&acc, gen_f32(w, k, salt * 7 + t * 2));
        canonical((xacc_t *)out, &acc);
    }
}

static void *dalloc(const dctx_t *d, size_t bytes) {
    return arena_alloc_or_die(d->dev->arena, bytes, MEM_COMM, "test buffer");
}

static void compare(const dctx_t *d, const char *what, coll_dtype_t dt, coll_op_t op, size_t count,
                    size_t k, const void *got, const void *want) {
    size_t es = coll_dtype_size(dt);
    if (memcmp(got, want, es) == 0) return;
    double g = 0, w = 0;
    if (dt == COLL_F32) g = *(const float *)got, w = *(const float *)want;
    if (dt == COLL_XACC) g = xacc_round_f64(got), w = xacc_round_f64(want);
    DFAIL(d, "n=%d %s %s(%s,%s,count=%zu) rank %d element %zu: got %.9g want %.9g", d->n,
          coll_algo_name(d->cfg->algo), what, coll_dtype_name(dt), coll_op_name(op), count, d->me, k, g, w);
}

/* ---- one test per collective, run on every device ---- */

static int ring(const dctx_t *d) { return d->cfg->algo == COLL_ALGO_RING && d->n > 1; }

static void t_all_reduce(dctx_t *d, coll_dtype_t dt, coll_op_t op, size_t count, int inplace, int salt) {
    size_t es = coll_dtype_size(dt), align = es < 64 ? 64 / es : 1;
    char *send = dalloc(d, count * es), *recv = inplace ? send : dalloc(d, count * es);
    for (size_t k = 0; k < count; k++) gen_elem(dt, d->who, k, salt, send + k * es);
    coll_all_reduce(d->cfg->g, send, recv, count, dt, op);
    size_t L = ((count + (size_t)d->n - 1) / (size_t)d->n + align - 1) / align * align; /* ring chunk */
    int seq[MAXN], dseq[MAXN];
    unsigned char want[sizeof(xacc_t)];
    order_for(d, 0, -1, dseq);
    for (size_t k = 0; k < count; k++) {
        order_for(d, ring(d), ring(d) ? (int)(k / L) : -1, seq);
        ref_elem(d, dt, op, seq, k, salt, want);
        compare(d, "all_reduce", dt, op, count, k, recv + k * es, want);
        if (dt == COLL_F32 && op == COLL_SUM && d->me == 0) { /* does the order show? */
            float direct;
            ref_elem(d, dt, op, dseq, k, salt, &direct);
            d->cfg->f32_sum_elems++;
            d->cfg->f32_sum_differs_from_direct += memcmp(&direct, recv + k * es, 4) != 0;
        }
    }
    if (!inplace) arena_free(d->dev->arena, recv);
    arena_free(d->dev->arena, send);
}

static void t_reduce_scatter(dctx_t *d, coll_dtype_t dt, coll_op_t op, size_t rc, int inplace, int salt) {
    size_t es = coll_dtype_size(dt), total = rc * (size_t)d->n;
    char *send = dalloc(d, total * es);
    char *recv = inplace ? send + (size_t)d->me * rc * es : dalloc(d, rc * es);
    for (size_t k = 0; k < total; k++) gen_elem(dt, d->who, k, salt, send + k * es);
    coll_reduce_scatter(d->cfg->g, send, recv, rc, dt, op);
    int seq[MAXN];
    order_for(d, ring(d), d->me, seq); /* block `me` is ring chunk `me` */
    unsigned char want[sizeof(xacc_t)];
    for (size_t k = 0; k < rc; k++) {
        ref_elem(d, dt, op, seq, (size_t)d->me * rc + k, salt, want);
        compare(d, "reduce_scatter", dt, op, rc, k, recv + k * es, want);
    }
    if (!inplace) arena_free(d->dev->arena, recv);
    arena_free(d->dev->arena, send);
}

static void t_reduce(dctx_t *d, coll_dtype_t dt, coll_op_t op, size_t count, int inplace, int root, int salt) {
    size_t es = coll_dtype_size(dt);
    char *send = dalloc(d, count * es), *recv = NULL;
    if (d->me == root) recv = inplace ? send : dalloc(d, count * es);
    for (size_t k = 0; k < count; k++) gen_elem(dt, d->who, k, salt, send + k * es);
    coll_reduce(d->cfg->g, send, recv, count, dt, op, root);
    if (d->me == root) {
        int seq[MAXN];
        order_for(d, ring(d), root, seq);
        unsigned char want[sizeof(xacc_t)];
        for (size_t k = 0; k < count; k++) {
            ref_elem(d, dt, op, seq, k, salt, want);
            compare(d, "reduce", dt, op, count, k, recv + k * es, want);
        }
        if (!inplace) arena_free(d->dev->arena, recv);
    }
    arena_free(d->dev->arena, send);
}

static void t_all_gather(dctx_t *d, coll_dtype_t dt, size_t sc, int inplace, int salt) {
    size_t es = coll_dtype_size(dt);
    char *recv = dalloc(d, (size_t)d->n * sc * es);
    memset(recv, 0xcd, (size_t)d->n * sc * es);
    char *send = inplace ? recv + (size_t)d->me * sc * es : dalloc(d, sc * es);
    for (size_t k = 0; k < sc; k++) gen_elem(dt, d->who, k, salt, send + k * es);
    coll_all_gather(d->cfg->g, send, recv, sc, dt);
    unsigned char want[sizeof(xacc_t)];
    for (int j = 0; j < d->n; j++)
        for (size_t k = 0; k < sc; k++) {
            gen_elem(dt, d->cfg->perm[j], k, salt, want);
            compare(d, "all_gather", dt, COLL_SUM, sc, (size_t)j * sc + k, recv + ((size_t)j * sc + k) * es, want);
        }
    if (!inplace) arena_free(d->dev->arena, send);
    arena_free(d->dev->arena, recv);
}

static void t_broadcast(dctx_t *d, coll_dtype_t dt, size_t count, int root, int salt) {
    size_t es = coll_dtype_size(dt);
    char *buf = dalloc(d, count * es);
    if (d->me == root)
        for (size_t k = 0; k < count; k++) gen_elem(dt, d->who, k, salt, buf + k * es);
    else
        memset(buf, 0xcd, count * es);
    coll_broadcast(d->cfg->g, buf, count, dt, root);
    unsigned char want[sizeof(xacc_t)];
    for (size_t k = 0; k < count; k++) {
        gen_elem(dt, d->cfg->perm[root], k, salt, want);
        compare(d, "broadcast", dt, COLL_SUM, count, k, buf + k * es, want);
    }
    arena_free(d->dev->arena, buf);
}

static void t_all_to_all(dctx_t *d, coll_dtype_t dt, size_t cnt, int salt) {
    size_t es = coll_dtype_size(dt), total = cnt * (size_t)d->n;
    char *send = dalloc(d, total * es), *recv = dalloc(d, total * es);
    for (size_t k = 0; k < total; k++) gen_elem(dt, d->who, k, salt, send + k * es);
    coll_all_to_all(d->cfg->g, send, recv, cnt, dt);
    unsigned char want[sizeof(xacc_t)];
    for (int j = 0; j < d->n; j++)
        for (size_t k = 0; k < cnt; k++) {
            gen_elem(dt, d->cfg->perm[j], (size_t)d->me * cnt + k, salt, want);
            compare(d, "all_to_all", dt, COLL_SUM, cnt, (size_t)j * cnt + k, recv + ((size_t)j * cnt + k) * es, want);
        }
    arena_free(d->dev->arena, recv);
    arena_free(d->dev->arena, send);
}

/* Uneven counts (zeros included) and gaps between the blocks. */
static size_t a2av_count(int from, int to, int salt) { return (size_t)((from * 3 + to * 5 + salt) % 7); }

static void t_all_to_all_v(dctx_t *d, coll_dtype_t dt, int salt) {
    size_t es = coll_dtype_size(dt), sc[MAXN], sd[MAXN], rc[MAXN], rd[MAXN], st = 0, rt = 0;
    for (int j = 0; j < d->n; j++) {
        sc[j] = a2av_count(d->me, j, salt), sd[j] = st + (size_t)j, st = sd[j] + sc[j];
        rc[j] = a2av_count(j, d->me, salt), rd[j] = rt + 2 * (size_t)j, rt = rd[j] + rc[j];
    }
    char *send = dalloc(d, st * es + 1), *recv = dalloc(d, rt * es + 1);
    for (int j = 0; j < d->n; j++)
        for (size_t k = 0; k < sc[j]; k++) gen_elem(dt, d->who, (size_t)j * 1000 + k, salt, send + (sd[j] + k) * es);
    coll_all_to_all_v(d->cfg->g, send, sc, sd, recv, rc, rd, dt);
    unsigned char want[sizeof(xacc_t)];
    for (int j = 0; j < d->n; j++)
        for (size_t k = 0; k < rc[j]; k++) {
            gen_elem(dt, d->cfg->perm[j], (size_t)d->me * 1000 + k, salt, want);
            compare(d, "all_to_all_v", dt, COLL_SUM, rc[j], k, recv + (rd[j] + k) * es, want);
        }
    arena_free(d->dev->arena, recv);
    arena_free(d->dev->arena, send);
}

static void matrix_main(device_t *dev, void *arg) {
    cfg_t *cfg = arg;
    dctx_t d = {.cfg = cfg, .dev = dev, .me = group_rank(cfg->g), .n = cfg->n};
    d.who = cfg->perm[d.me];
    coll_set_algo(cfg->algo);
    /* 3000 f32 is above the direct all-reduce's small-buffer path (8 KiB);
     * sanitized builds rely on 1000 xacc elements for that. */
    const size_t counts[] = {0, 1, 5, 37, 1000, 70000, 3000};
    const int ncounts = sizeof counts / sizeof counts[0] - SANITIZED;
    struct { coll_dtype_t dt; coll_op_t op; } combos[] = {
        {COLL_F32, COLL_SUM}, {COLL_F32, COLL_MAX}, {COLL_F32, COLL_MIN}, {COLL_I32, COLL_SUM},
        {COLL_I32, COLL_MAX}, {COLL_I32, COLL_MIN}, {COLL_I64, COLL_SUM}, {COLL_I64, COLL_MAX},
        {COLL_I64, COLL_MIN}, {COLL_XACC, COLL_SUM},
    };
    int salt = 2;
    for (size_t ci = 0; ci < sizeof combos / sizeof combos[0]; ci++) {
        coll_dtype_t dt = combos[ci].dt;
        coll_op_t op = combos[ci].op;
        if (cfg->exact_only && dt == COLL_F32 && op == COLL_SUM) continue;
        /* sanitized builds (TSan is ~10x slower): max/min once per width */
        if (SANITIZED && op == COLL_MIN && dt != COLL_F32) continue;
        if (SANITIZED && op == COLL_MAX && dt == COLL_I32) continue;
        for (int i = 0; i < ncounts; i++) {
            size_t count = counts[i];
            int s = salt + (op != COLL_SUM); /* specials for max/min */
            salt += 2;
            if (count > 5000) {
                /* Above one ring pipeline piece (COLL_PIPE_BYTES): sums only. */
                if (op != COLL_SUM || dt == COLL_I32 || dt == COLL_I64 || cfg->exact_only) continue;
                if (dt == COLL_XACC) count = 4000;
                t_all_reduce(&d, dt, op, count, 0, s);
                t_reduce(&d, dt, op, count, (int)ci & 1, (int)(count + ci) % d.n, s);
                continue;
            }
            for (int inplace = 0; inplace < 2; inplace++) {
                t_all_reduce(&d, dt, op, count, inplace, s);
                t_reduce_scatter(&d, dt, op, count / 4 + inplace, inplace, s);
                t_reduce(&d, dt, op, count, inplace, (int)(count + ci) % d.n, s);
            }
        }
    }
    const coll_dtype_t moved[] = {COLL_F32, COLL_I64, COLL_XACC};
    for (int mi = 0; mi < 3; mi++) {
        for (int i = 0; i < ncounts; i++) {
            size_t count = counts[i] > 5000 && moved[mi] == COLL_XACC ? 4000 : counts[i];
            size_t part = count > 5000 ? count / 64 : count / 2; /* checks grow with n^2 */
            t_all_gather(&d, moved[mi], part, 0, salt);
            t_all_gather(&d, moved[mi], part + 1, 1, salt + 2);
            t_broadcast(&d, moved[mi], count, (i + mi) % d.n, salt + 4);
            t_all_to_all(&d, moved[mi], part / 4, salt + 6);
            salt += 8;
        }
        t_all_to_all_v(&d, moved[mi], salt);
        t_all_to_all_v(&d, moved[mi], salt + 1);
        salt += 2;
    }
    coll_barrier(cfg->g);
}

static void run_matrix(int n, coll_algo_t algo, int shuffle) {
    cfg_t *cfg = calloc(1, sizeof *cfg);
    cfg->n = n, cfg->algo = algo, cfg->exact_only = shuffle;
    for (int j = 0; j < n; j++) cfg->perm[j] = j;
    if (shuffle) { /* a fixed random permutation of who holds which data */
        uint64_t s = 12345 + (uint64_t)n * 7 + (uint64_t)algo;
        for (int j = n - 1; j > 0; j--) {
            s = mix(s);
            int k = (int)(s % (uint64_t)(j + 1)), t = cfg->perm[j];
            cfg->perm[j] = cfg->perm[k], cfg->perm[k] = t;
        }
    }
    int ranks[MAXN];
    for (int j = 0; j < n; j++) ranks[j] = j;
    perr_t e;
    cfg->g = group_create(ranks, n, "all", &e);
    int rc = devices_run(n, 0, matrix_main, cfg, &e);
    CHECK(rc == 0, "devices_run: %s", e.msg);
    for (int j = 0; j < n; j++)
        CHECK(cfg->fails[j] == 0, "n=%d %s%s: %d failures on rank %d, first: %s", n, coll_algo_name(algo),
              shuffle ? " shuffled" : "", cfg->fails[j], j, cfg->msg[j]);
    if (!shuffle && algo == COLL_ALGO_RING && n >= 3)
        CHECK(cfg->f32_sum_differs_from_direct > 0,
              "ring fp32 sums should differ from the direct order somewhere (%ld of %ld equal)",
              cfg->f32_sum_elems - cfg->f32_sum_differs_from_direct, cfg->f32_sum_elems);
    if (!shuffle && n >= 3)
        printf("  n=%d %-6s: fp32 sums differing from the direct order: %ld of %ld elements\n", n,
               coll_algo_name(algo), cfg->f32_sum_differs_from_direct, cfg->f32_sum_elems);
    group_destroy(cfg->g);
    free(cfg);
}

#define MATRIX_TEST(n)                                                                 \
    static void test_matrix_n##n(void) {                                               \
        for (int a = 0; a < COLL_NALGOS; a++)                                          \
            for (int shuffle = 0; shuffle < 2; shuffle++)                              \
                if (!shuffle || !SANITIZED || n <= 4) run_matrix(n, (coll_algo_t)a, shuffle); \
    }
MATRIX_TEST(1)
MATRIX_TEST(2)
MATRIX_TEST(3)
MATRIX_TEST(4)
MATRIX_TEST(7)
MATRIX_TEST(8)

int main(void) {
    RUN(test_matrix_n1);
    RUN(test_matrix_n2);
    RUN(test_matrix_n3);
    RUN(test_matrix_n4);
    RUN(test_matrix_n7);
    if (!SANITIZED) RUN(test_matrix_n8); /* sanitized: 8 devices run in the sub-group test */
    return harness_done();
}
