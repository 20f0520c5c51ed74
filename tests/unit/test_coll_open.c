/* test_coll_open.c - open exact sums (xvec_t) as a collective type.
 *
 * Every result is checked against a sequential reference: one xvec into
 * which every contributor's vector is merged in a fixed order. Equal
 * means the same bits after xvec_round AND the same exact value element
 * by element (xvec_get), compared through the unique fp64 expansion of
 * each value, which does not depend on how an accumulator stores it.
 * The inputs force every path: sums exact in fp64, elements that need
 * their accumulator (2^100 + 2^-100, subnormals beside 1, a whole xacc_t
 * added), cancellations across ranks, sums past FLT_MAX, inf, inf - inf
 * and NaN, signed zeros, lazily zeroed vectors. Group sizes 1, 2, 3, 4,
 * 7, 8, both algorithms, groups built from shuffled world ranks with a
 * shuffled assignment of data, odd counts and offsets, every in-place and
 * out-of-place form; send/recv in a ring, many outstanding into one
 * vector, a chain; byte counters against their formula; and misuse in
 * child processes (the message must name both calls). Devices record
 * failures in their own slot; the main thread CHECKs them.
 */
#include "parity/coll.h"

#include <float.h>
#include <math.h>
#include <poll.h>
#include <signal.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "../harness.h"

#if defined(__SANITIZE_THREAD__) || defined(__SANITIZE_ADDRESS__)
#define SANITIZED 1
#else
#define SANITIZED 0
#endif

#ifdef __SANITIZE_THREAD__
/* TSan sleeps a second at exit while other threads run; the children of
 * the misuse tests exit with peers blocked. */
const char *__tsan_default_options(void);
const char *__tsan_default_options(void) { return "atexit_sleep_ms=0"; }
#endif

#define MAXW 8
#define XB ((uint64_t)sizeof(xacc_t)) /* one exception on the wire */

/* ---- deterministic data ---- */

static uint64_t mix(uint64_t x) {
    x += 0x9e3779b97f4a7c15ULL;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
    return x ^ (x >> 31);
}

static uint64_t h3(int who, size_t k, int salt) {
    return mix(((uint64_t)(unsigned)(who + 1) << 48) ^ ((uint64_t)k << 12) ^ (uint64_t)(unsigned)salt);
}

static float mant(uint64_t h) { return 1.0f + (float)(h & 0x7fffff) / 8388608.0f; }

/* What contributor `who` of n adds to element k: the element's kind comes
 * from (k, salt) alone, so every contributor of an element plays the same
 * game (cancelling, overflowing, ...); the values from who as well. */
static void contribute(xvec_t *v, size_t i, int who, int n, size_t k, int salt) {
    uint64_t kind = h3(-1, k, salt) >> 58, h = h3(who, k, salt);
    float sg = (h >> 63) ? -1.0f : 1.0f, t[2] = {0, 0};
    int nt = 2;
    if (kind < 26) { /* ordinary: exact in fp64 alone, not always together */
        t[0] = sg * ldexpf(mant(h), (int)((h >> 24) % 41) - 20);
        t[1] = ldexpf(mant(h >> 7), (int)((h >> 32) % 41) - 20);
    } else if (kind < 34) { /* wide: needs the accumulator on one rank */
        t[0] = sg * ldexpf(mant(h), 100), t[1] = ldexpf(mant(h >> 9), -100);
    } else if (kind < 42) { /* huge values that cancel across ranks */
        t[0] = (who & 1 ? -1.0f : 1.0f) * ldexpf(1.5f, 100), t[1] = ldexpf(mant(h), -60 - who);
    } else if (kind < 46) { /* past FLT_MAX together: +inf after rounding */
        t[0] = (h >> 62) & 1 ? FLT_MAX : 0.75f * FLT_MAX, nt = 1;
    } else if (kind < 48) { /* one rank's +inf */
        t[0] = who == (int)(k % (size_t)n) ? INFINITY : sg, nt = 1;
    } else if (kind < 49) { /* +inf and -inf: NaN */
        t[0] = who == 0 ? INFINITY : 1.0f, t[1] = who == n - 1 ? -INFINITY : 2.0f;
    } else if (kind < 50) { /* one rank's NaN */
        t[0] = who == (int)(k % (size_t)n) ? NAN : sg, nt = 1;
    } else if (kind < 54) { /* zeros of both signs: +0 */
        t[0] = -0.0f, t[1] = (h >> 62) & 1 ? 0.0f : -0.0f;
    } else if (kind < 58) { /* a whole accumulator added */
        xacc_t a;
        xacc_init(&a);
        xacc_add_f32(&a, sg * ldexpf(mant(h), 60));
        xacc_add_f32(&a, ldexpf(1.0f, -80));
        xvec_add_xacc(v, i, &a);
        nt = 0;
    } else { /* subnormal beside 1: 150 bits */
        t[0] = ldexpf((float)(1 + h % 7), -149), t[1] = sg;
    }
    for (int j = 0; j < nt; j++) xvec_add(v, i, &t[j], 1); /* both terms into element i */
}

/* v[off + i] = contributor who's element first + i, i < len. */
static void fill(xvec_t *v, size_t off, size_t len, int who, int n, size_t first, int salt) {
    for (size_t i = 0; i < len; i++) contribute(v, off + i, who, n, first + i, salt);
}

/* A vector of total elements whose [lo, lo + len) holds elements first ..
 * of contributor who and the rest guard values (other elements); left
 * lazily zero when lazy. */
static void make_input(xvec_t *v, size_t total, size_t lo, size_t len, int who, int n, size_t first,
                       int salt, int lazy) {
    if (xvec_init(v, total) != 0) abort();
    if (lazy) return;
    fill(v, 0, lo, who, n, 5000000, salt);
    fill(v, lo, len, who, n, first, salt);
    fill(v, lo + len, total - lo - len, who, n, 6000000, salt);
}

/* The reference: contributors 0 .. n-1 merged in order into one xvec. */
static void reference(xvec_t *ref, int n, size_t first, size_t len, int salt, unsigned lazy) {
    if (xvec_init(ref, len) != 0) abort();
    for (int w = 0; w < n; w++) {
        xvec_t t;
        if (xvec_init(&t, len) != 0) abort();
        if (!((lazy >> w) & 1)) fill(&t, 0, len, w, n, first, salt);
        xvec_merge_range(ref, 0, &t, 0, len);
        xvec_free(&t);
    }
}

/* ---- exact comparison ---- */

/* The exact value as its greedy fp64 expansion: r1 = RN(x), r2 = RN(x -
 * r1), ...: a function of the value alone (and of inf/NaN), whatever
 * words the accumulator keeps it in. */
static int same_value(const xacc_t *a, const xacc_t *b) {
    xacc_t x = *a, y = *b;
    for (int i = 0; i < 40; i++) {
        double dx = xacc_round_f64(&x), dy = xacc_round_f64(&y);
        if (isnan(dx) || isnan(dy)) return isnan(dx) && isnan(dy);
        if (memcmp(&dx, &dy, sizeof dx) != 0) return 0;
        if (dx == 0 || isinf(dx)) return 1;
        xacc_add_f64_exact(&x, -dx);
        xacc_add_f64_exact(&y, -dy);
    }
    return 0;
}

typedef struct {
    int fails[MAXW];
    char msg[MAXW][320];
    long slow_results[MAXW]; /* results held in an accumulator: the path is exercised */
    uint64_t bus[MAXW][COLL_NKINDS], S[MAXW][COLL_NKINDS]; /* expected fp64 counts */
} report_t;

#define RFAIL(rep, r, ...)                                                                 \
    do {                                                                                   \
        if ((rep)->fails[r]++ == 0) snprintf((rep)->msg[r], sizeof (rep)->msg[0], __VA_ARGS__); \
    } while (0)

typedef struct {
    report_t *rep;
    group_t *g;
    int world, me, n, who;
    const int *perm; /* group index -> contributor */
    coll_algo_t algo;
} dctx_t;

/* got[goff ..] against want[woff ..], len elements. */
static void compare(dctx_t *d, const char *what, const xvec_t *got, size_t goff, const xvec_t *want,
                    size_t woff, size_t len) {
    float *rg = malloc((got->n ? got->n : 1) * sizeof(float));
    float *rw = malloc((want->n ? want->n : 1) * sizeof(float));
    xvec_round(got, rg);
    xvec_round(want, rw);
    for (size_t i = 0; i < len; i++) {
        xacc_t a, b;
        xvec_get(got, goff + i, &a);
        xvec_get(want, woff + i, &b);
        d->rep->slow_results[d->world] += xvec_is_slow(got, goff + i);
        if (same_value(&a, &b) && memcmp(&rg[goff + i], &rw[woff + i], sizeof(float)) == 0) continue;
        RFAIL(d->rep, d->world, "n=%d %s %s rank %d element %zu of %zu: got %.17g (%a) want %.17g (%a)", d->n,
              coll_algo_name(d->algo), what, d->me, i, len, xacc_round_f64(&a), rg[goff + i],
              xacc_round_f64(&b), rw[woff + i]);
        break;
    }
    free(rg);
    free(rw);
}

static uint64_t round_bus(uint64_t S, double factor) { return (uint64_t)((double)S * factor + 0.5); }

static void expect_bytes(dctx_t *d, coll_kind_t k, uint64_t S) {
    double n = d->n, f = k == COLL_KIND_ALL_REDUCE ? 2.0 * (n - 1) / n : (n - 1) / n;
    d->rep->S[d->world][k] += S;
    d->rep->bus[d->world][k] += round_bus(S, f);
}

/* ---- all-reduce ---- */

static void t_all_reduce(dctx_t *d, size_t count, size_t off, int salt, unsigned lazy) {
    size_t total = off + count + 2;
    int lazy_me = (lazy >> d->who) & 1;
    xvec_t v, orig, ref;
    make_input(&v, total, off, count, d->who, d->n, 0, salt, lazy_me);
    make_input(&orig, total, off, count, d->who, d->n, 0, salt, lazy_me);
    reference(&ref, d->n, 0, count, salt, lazy);
    coll_all_reduce_open(d->g, &v, off, count);
    expect_bytes(d, COLL_KIND_ALL_REDUCE, count * 8);
    char what[64];
    snprintf(what, sizeof what, "all_reduce(count=%zu, off=%zu, lazy=%u)", count, off, lazy);
    compare(d, what, &v, off, &ref, 0, count);
    compare(d, what, &v, 0, &orig, 0, off); /* guards untouched */
    compare(d, what, &v, off + count, &orig, off + count, 2);
    xvec_free(&v), xvec_free(&orig), xvec_free(&ref);
}

/* ---- reduce-scatter ----
 * mode 0: a separate recv holding other values outside the range;
 * 1: in place; 2: a separate lazily zeroed recv written whole (claimed);
 * 3: the same, written in part (cleared); 4: recv in the send vector,
 * after send's range. */
static void t_reduce_scatter(dctx_t *d, size_t rc, size_t soff, size_t roff, int mode, int salt) {
    size_t n = (size_t)d->n, span = n * rc, me = (size_t)d->me;
    size_t stotal = soff + span + (mode == 4 ? rc + 3 : 1);
    xvec_t send, sorig, recv, rorig, ref, *rv = &recv;
    make_input(&send, stotal, soff, span, d->who, d->n, 0, salt, 0);
    make_input(&sorig, stotal, soff, span, d->who, d->n, 0, salt, 0);
    if (mode == 1) rv = &send, roff = soff + me * rc;
    if (mode == 4) rv = &send, roff = soff + span + 2;
    size_t rtotal = mode == 2 ? rc : roff + rc + 1;
    if (mode == 2) roff = 0;
    if (mode != 1 && mode != 4) {
        make_input(&recv, rtotal, roff, rc, d->who, d->n, 7000000, salt + 1, mode >= 2);
        make_input(&rorig, rtotal, roff, rc, d->who, d->n, 7000000, salt + 1, mode >= 2);
    }
    reference(&ref, d->n, me * rc, rc, salt, 0);
    coll_reduce_scatter_open(d->g, &send, soff, rv, roff, rc);
    expect_bytes(d, COLL_KIND_REDUCE_SCATTER, span * 8);
    char what[96];
    snprintf(what, sizeof what, "reduce_scatter(rc=%zu, soff=%zu, roff=%zu, mode=%d)", rc, soff, roff, mode);
    compare(d, what, rv, roff, &ref, 0, rc);
    if (mode == 1 || mode == 4) { /* everything else in send is untouched */
        compare(d, what, &send, 0, &sorig, 0, roff);
        compare(d, what, &send, roff + rc, &sorig, roff + rc, stotal - roff - rc);
    } else {
        compare(d, what, &send, 0, &sorig, 0, stotal);
        compare(d, what, &recv, 0, &rorig, 0, roff);
        compare(d, what, &recv, roff + rc, &rorig, roff + rc, rtotal - roff - rc);
        xvec_free(&recv), xvec_free(&rorig);
    }
    xvec_free(&send), xvec_free(&sorig), xvec_free(&ref);
}

static void matrix_cases(dctx_t *d) {
    coll_set_algo(d->algo);
    static const size_t counts[] = {0, 1, 5, 37, 300, 1001, 4099};
    const int nc = (int)(sizeof counts / sizeof counts[0]) - (SANITIZED ? 2 : 0);
    int salt = 11;
    for (int i = 0; i < nc; i++)
        for (size_t off = 0; off < 4; off += 3) t_all_reduce(d, counts[i], off, salt++, 0);
    if (SANITIZED) t_all_reduce(d, 4099, 1, salt++, 0); /* past the small-call path at every n */
    t_all_reduce(d, 37, 1, salt++, 0x5u);  /* contributors 0 and 2 give lazily zeroed vectors */
    t_all_reduce(d, 300, 0, salt++, 0xffu); /* everyone: the sum is +0 */
    for (int i = 0; i < nc - 1; i++)
        for (int mode = 0; mode < 5; mode++)
            t_reduce_scatter(d, counts[i], (size_t)(mode & 1) * 2, (size_t)(mode & 2) / 2, mode, salt++);
    coll_barrier(d->g);
}

typedef struct {
    report_t rep;
    group_t *g;
    int n, perm[MAXW];
    coll_algo_t algo;
} matrix_t;

static void matrix_main(device_t *dev, void *arg) {
    matrix_t *m = arg;
    dctx_t d = {.rep = &m->rep, .g = m->g, .world = dev->rank, .me = group_rank(m->g), .n = m->n,
                .perm = m->perm, .algo = m->algo};
    d.who = m->perm[d.me];
    matrix_cases(&d);
}

static void shuffle(int *a, int n, uint64_t seed) {
    for (int j = 0; j < n; j++) a[j] = j;
    for (int j = n - 1; j > 0; j--) {
        seed = mix(seed);
        int k = (int)(seed % (uint64_t)(j + 1)), t = a[j];
        a[j] = a[k], a[k] = t;
    }
}

/* The counters of a run that made only open collectives (and barriers):
 * S and bus_bytes by the formula; sent and recv are the fp64 traffic plus
 * whole accumulators, and what one rank sends another receives. */
static void check_counters(const report_t *rep, int world, int n, const char *what) {
    const coll_kind_t kinds[2] = {COLL_KIND_ALL_REDUCE, COLL_KIND_REDUCE_SCATTER};
    for (int ki = 0; ki < 2; ki++) {
        coll_kind_t k = kinds[ki];
        uint64_t xs = 0, xr = 0;
        for (int r = 0; r < world; r++) {
            coll_counters_t c;
            coll_counters_get(r, &c);
            CHECK(c.bytes[k] == rep->S[r][k] && c.bus_bytes[k] == rep->bus[r][k],
                  "%s %s rank %d: bytes %llu bus %llu, want %llu %llu", what, coll_kind_name(k), r,
                  (unsigned long long)c.bytes[k], (unsigned long long)c.bus_bytes[k],
                  (unsigned long long)rep->S[r][k], (unsigned long long)rep->bus[r][k]);
            CHECK(c.sent[k] >= rep->bus[r][k] && (c.sent[k] - rep->bus[r][k]) % XB == 0 &&
                      c.recv[k] >= rep->bus[r][k] && (c.recv[k] - rep->bus[r][k]) % XB == 0,
                  "%s %s rank %d: sent %llu recv %llu, fp64 part %llu", what, coll_kind_name(k), r,
                  (unsigned long long)c.sent[k], (unsigned long long)c.recv[k],
                  (unsigned long long)rep->bus[r][k]);
            xs += c.sent[k] - rep->bus[r][k], xr += c.recv[k] - rep->bus[r][k];
        }
        CHECK(xs == xr, "%s %s: %llu exception bytes sent, %llu received", what, coll_kind_name(k),
              (unsigned long long)xs, (unsigned long long)xr);
        CHECK(n == 1 ? xs == 0 : xs > 0, "%s %s: %llu exception bytes moved (n=%d)", what,
              coll_kind_name(k), (unsigned long long)xs, n);
    }
}

static void run_matrix(int n, coll_algo_t algo, int shuffled) {
    matrix_t *m = calloc(1, sizeof *m);
    int ranks[MAXW];
    m->n = n, m->algo = algo;
    if (shuffled) {
        shuffle(ranks, n, 777 + (uint64_t)n * 31 + (uint64_t)algo);
        shuffle(m->perm, n, 4242 + (uint64_t)n * 17 + (uint64_t)algo);
    } else {
        for (int j = 0; j < n; j++) ranks[j] = m->perm[j] = j;
    }
    perr_t e;
    m->g = group_create(ranks, n, "open", &e);
    CHECK(m->g, "%s", e.msg);
    coll_counters_reset(-1);
    CHECK(devices_run(n, 0, matrix_main, m, &e) == 0, "%s", e.msg);
    char what[64];
    snprintf(what, sizeof what, "n=%d %s%s", n, coll_algo_name(algo), shuffled ? " shuffled" : "");
    long slow = 0;
    for (int r = 0; r < n; r++) {
        CHECK(m->rep.fails[r] == 0, "%s: %d failures on world rank %d, first: %s", what, m->rep.fails[r], r,
              m->rep.msg[r]);
        slow += m->rep.slow_results[r];
    }
    CHECK(slow > 0, "%s: no result needed its accumulator: the slow path went untested", what);
    check_counters(&m->rep, n, n, what);
    group_destroy(m->g);
    free(m);
}

#define MATRIX_TEST(n)                                                                      \
    static void test_matrix_n##n(void) {                                                    \
        for (int a = 0; a < COLL_NALGOS; a++)                                               \
            for (int s = 0; s < 2; s++)                                                     \
                if (!s || !SANITIZED || n <= 4) run_matrix(n, (coll_algo_t)a, s);           \
    }
MATRIX_TEST(1)
MATRIX_TEST(2)
MATRIX_TEST(3)
MATRIX_TEST(4)
MATRIX_TEST(7)
MATRIX_TEST(8)

/* ---- two irregular groups at once, algorithms changing per call ---- */

typedef struct {
    report_t rep;
    group_t *odd, *even;
    int perm_odd[3], perm_even[5];
} two_t;

static void two_main(device_t *dev, void *arg) {
    two_t *t = arg;
    int in_odd = group_rank(t->odd) >= 0;
    dctx_t d = {.rep = &t->rep, .g = in_odd ? t->odd : t->even, .world = dev->rank, .n = in_odd ? 3 : 5,
                .perm = in_odd ? t->perm_odd : t->perm_even};
    d.me = group_rank(d.g), d.who = d.perm[d.me];
    for (int it = 0; it < 6; it++) {
        d.algo = it % 3 == 1 ? COLL_ALGO_RING : COLL_ALGO_DIRECT;
        coll_set_algo(d.algo);
        t_all_reduce(&d, 200 + (size_t)it * 61, (size_t)it, 900 + it, 0);
        t_reduce_scatter(&d, 40 + (size_t)it, 1, 2, it % 5, 950 + it);
    }
}

static void test_two_groups_concurrent(void) {
    two_t *t = calloc(1, sizeof *t);
    int odd[] = {0, 3, 5}, even[] = {7, 1, 2, 4, 6}; /* not a rectangle, not sorted */
    perr_t e;
    t->odd = group_create(odd, 3, "odd", &e);
    t->even = group_create(even, 5, "even", &e);
    shuffle(t->perm_odd, 3, 99), shuffle(t->perm_even, 5, 98);
    CHECK(devices_run(8, 0, two_main, t, &e) == 0, "%s", e.msg);
    for (int r = 0; r < 8; r++) CHECK(t->rep.fails[r] == 0, "world rank %d: %s", r, t->rep.msg[r]);
    group_destroy(t->odd), group_destroy(t->even);
    free(t);
}

/* ---- send / recv ---- */

typedef struct {
    report_t rep;
    group_t *g;
    int n, perm[MAXW];
} p2p_t;

static dctx_t p2p_ctx(p2p_t *t, device_t *dev) {
    dctx_t d = {.rep = &t->rep, .g = t->g, .world = dev->rank, .me = group_rank(t->g), .n = t->n,
                .perm = t->perm};
    d.who = t->perm[d.me];
    return d;
}

/* Ring rounds with non-blocking pairs, waited send first (the delivery
 * happens on whichever thread posts second): acc[1 ..] adds r-1's data of
 * every round. */
static void ring_main(device_t *dev, void *arg) {
    p2p_t *t = arg;
    dctx_t d = p2p_ctx(t, dev);
    const size_t L = 77;
    int n = d.n, prev = (d.me + n - 1) % n, next = (d.me + 1) % n;
    xvec_t acc, want;
    xvec_init(&acc, L + 2);
    xvec_init(&want, L);
    for (int round = 0; round < 6; round++) {
        xvec_t v, pv;
        make_input(&v, L + 3, 2, L, d.who, n, 0, 300 + round, 0);
        coll_request_t *r[2];
        r[0] = coll_isend_open(t->g, &v, 2, L, next, round);
        r[1] = coll_irecv_open(t->g, &acc, 1, L, prev, round);
        coll_wait_all(2, r);
        make_input(&pv, L, 0, L, t->perm[prev], n, 0, 300 + round, 0);
        xvec_merge_range(&want, 0, &pv, 0, L);
        xvec_free(&v), xvec_free(&pv);
    }
    xvec_t zero;
    xvec_init(&zero, 2);
    compare(&d, "ring recv", &acc, 1, &want, 0, L);
    compare(&d, "ring guard", &acc, 0, &zero, 0, 1);
    compare(&d, "ring guard", &acc, L + 1, &zero, 1, 1);
    xvec_free(&acc), xvec_free(&want), xvec_free(&zero);
}

/* Every rank posts a receive from every rank (itself included) into ONE
 * range of one lazily zeroed vector, then sends to every rank, then waits
 * in a shuffled order: the sum of all contributions, as an all-reduce. */
static void many_main(device_t *dev, void *arg) {
    p2p_t *t = arg;
    dctx_t d = p2p_ctx(t, dev);
    const size_t L = 301;
    int n = d.n;
    xvec_t v, acc, ref;
    make_input(&v, L, 0, L, d.who, n, 0, 61, 0);
    xvec_init(&acc, L);
    reference(&ref, n, 0, L, 61, 0);
    coll_request_t *req[2 * MAXW];
    int order[2 * MAXW];
    for (int j = 0; j < n; j++) req[j] = coll_irecv_open(t->g, &acc, 0, L, j, 9);
    for (int j = 0; j < n; j++) req[n + j] = coll_isend_open(t->g, &v, 0, L, (d.me + j) % n, 9);
    shuffle(order, 2 * n, 5 + (uint64_t)d.me);
    for (int i = 0; i < 2 * n; i++) coll_wait(req[order[i]]);
    compare(&d, "many outstanding", &acc, 0, &ref, 0, L);
    xvec_free(&v), xvec_free(&acc), xvec_free(&ref);
}

/* One vector sent from while being received into (three of each
 * outstanding), then a blocking chain: rank i adds what rank i-1 passes
 * on and passes the total on, so the last rank holds everyone's sum. */
static void same_vector_and_chain_main(device_t *dev, void *arg) {
    p2p_t *t = arg;
    dctx_t d = p2p_ctx(t, dev);
    const size_t L = 50;
    int n = d.n, prev = (d.me + n - 1) % n, next = (d.me + 1) % n;
    xvec_t v, want, pv;
    xvec_init(&v, 2 * L); /* [0, L) is sent, [L, 2L) receives */
    fill(&v, 0, L, d.who, n, 0, 71);
    coll_request_t *r[6];
    for (int k = 0; k < 3; k++) {
        r[2 * k] = coll_irecv_open(t->g, &v, L, L, prev, k);
        r[2 * k + 1] = coll_isend_open(t->g, &v, 0, L, next, k);
    }
    coll_wait_all(6, r);
    make_input(&pv, L, 0, L, t->perm[prev], n, 0, 71, 0);
    xvec_init(&want, L);
    for (int k = 0; k < 3; k++) xvec_merge_range(&want, 0, &pv, 0, L);
    compare(&d, "send from and receive into one vector", &v, L, &want, 0, L);
    xvec_free(&want), xvec_free(&pv);

    xvec_t acc, ref;
    make_input(&acc, L, 0, L, d.who, n, 0, 81, 0);
    if (d.me > 0) coll_recv_open(t->g, &acc, 0, L, d.me - 1, 1);
    if (d.me < n - 1) coll_send_open(t->g, &acc, 0, L, d.me + 1, 1);
    if (d.me == n - 1) {
        reference(&ref, n, 0, L, 81, 0);
        compare(&d, "chain", &acc, 0, &ref, 0, L);
        xvec_free(&ref);
    }
    xvec_free(&acc), xvec_free(&v);
}

static void run_p2p(int n, device_main_fn fn, const char *what) {
    p2p_t *t = calloc(1, sizeof *t);
    int ranks[MAXW];
    t->n = n;
    shuffle(ranks, n, 31 + (uint64_t)n);
    shuffle(t->perm, n, 37 + (uint64_t)n);
    perr_t e;
    t->g = group_create(ranks, n, "p2p", &e);
    CHECK(devices_run(n, 0, fn, t, &e) == 0, "%s", e.msg);
    for (int r = 0; r < n; r++) CHECK(t->rep.fails[r] == 0, "%s n=%d world rank %d: %s", what, n, r, t->rep.msg[r]);
    group_destroy(t->g);
    free(t);
}

static void test_p2p_ring(void) {
    run_p2p(2, ring_main, "ring");
    run_p2p(5, ring_main, "ring");
}

static void test_p2p_many_outstanding(void) {
    run_p2p(1, many_main, "many");
    run_p2p(8, many_main, "many");
}

static void test_p2p_same_vector_and_chain(void) {
    run_p2p(3, same_vector_and_chain_main, "same vector / chain");
    run_p2p(7, same_vector_and_chain_main, "same vector / chain");
}

/* ---- byte counters on hand-made exceptions ----
 * n = 2, 20000 elements: slices and ring chunks are [0, 10000) and
 * [10000, 20000), large enough for the split direct path. Rank 0 has a
 * slow element in slice 1 (15000). Direct: rank 1 pulls it with slice 1
 * (0 -> 1), then rank 0 pulls the finished slice 1 (1 -> 0). Ring: rank 1
 * reduces chunk 1 from rank 0's input (0 -> 1), rank 0 takes the finished
 * chunk from rank 1 (1 -> 0). Either way one xacc_t each way. Then a
 * reduce-scatter of blocks of 10000: rank 1 pulls block 1 from rank 0,
 * and a send of 10 elements with 2 slow ones. */

static group_t *counter_group;

static void slow_at(xvec_t *v, size_t i) {
    xacc_t a;
    xacc_init(&a);
    xacc_add_f32(&a, 3.0f);
    xvec_add_xacc(v, i, &a);
}

static void counters_main(device_t *dev, void *arg) {
    coll_set_algo(*(coll_algo_t *)arg);
    int me = group_rank(counter_group);
    xvec_t v, r;
    xvec_init(&v, 20000), xvec_init(&r, 10000);
    float one = 1.0f;
    xvec_add(&v, 7, &one, 1);
    if (me == 0) slow_at(&v, 15000);
    coll_all_reduce_open(counter_group, &v, 0, 20000);
    xvec_zero(&v);
    xvec_add(&v, 7, &one, 1);
    if (me == 0) slow_at(&v, 15000);
    coll_reduce_scatter_open(counter_group, &v, 0, &r, 0, 10000);
    if (me == 0) {
        slow_at(&v, 2), slow_at(&v, 5);
        coll_send_open(counter_group, &v, 0, 10, 1, 0);
    } else {
        coll_recv_open(counter_group, &r, 0, 10, 0, 0);
    }
    xvec_free(&v), xvec_free(&r);
    (void)dev;
}

static void test_counters_exceptions(void) {
    perr_t e;
    int ranks[] = {1, 0};
    counter_group = group_create(ranks, 2, "counted", &e);
    for (int a = 0; a < COLL_NALGOS; a++) {
        coll_algo_t algo = (coll_algo_t)a;
        coll_counters_reset(-1);
        CHECK(devices_run(2, 0, counters_main, &algo, &e) == 0, "%s", e.msg);
        for (int g = 0; g < 2; g++) { /* group rank g is world rank ranks[g] */
            coll_counters_t c;
            coll_counters_get(ranks[g], &c);
            const char *an = coll_algo_name(algo);
            CHECK(c.calls[COLL_KIND_ALL_REDUCE] == 1 && c.bytes[COLL_KIND_ALL_REDUCE] == 160000 &&
                      c.bus_bytes[COLL_KIND_ALL_REDUCE] == 160000,
                  "%s all_reduce S", an);
            CHECK(c.sent[COLL_KIND_ALL_REDUCE] == 160000 + XB && c.recv[COLL_KIND_ALL_REDUCE] == 160000 + XB,
                  "%s all_reduce rank %d: sent %llu recv %llu, want %llu each", an, g,
                  (unsigned long long)c.sent[COLL_KIND_ALL_REDUCE], (unsigned long long)c.recv[COLL_KIND_ALL_REDUCE],
                  (unsigned long long)(160000 + XB));
            CHECK(c.bytes[COLL_KIND_REDUCE_SCATTER] == 160000 && c.bus_bytes[COLL_KIND_REDUCE_SCATTER] == 80000,
                  "%s reduce_scatter S", an);
            CHECK(c.sent[COLL_KIND_REDUCE_SCATTER] == 80000 + (g == 0 ? XB : 0) &&
                      c.recv[COLL_KIND_REDUCE_SCATTER] == 80000 + (g == 1 ? XB : 0),
                  "%s reduce_scatter rank %d: sent %llu recv %llu", an, g,
                  (unsigned long long)c.sent[COLL_KIND_REDUCE_SCATTER],
                  (unsigned long long)c.recv[COLL_KIND_REDUCE_SCATTER]);
            CHECK(g == 0 ? c.bytes[COLL_KIND_SEND] == 80 && c.sent[COLL_KIND_SEND] == 80 + 2 * XB
                         : c.bytes[COLL_KIND_RECV] == 80 && c.recv[COLL_KIND_RECV] == 80 + 2 * XB,
                  "%s p2p rank %d: send %llu/%llu recv %llu/%llu", an, g, (unsigned long long)c.bytes[COLL_KIND_SEND],
                  (unsigned long long)c.sent[COLL_KIND_SEND], (unsigned long long)c.bytes[COLL_KIND_RECV],
                  (unsigned long long)c.recv[COLL_KIND_RECV]);
        }
    }
    group_destroy(counter_group);
}

/* ---- misuse, in child processes ---- */

typedef struct {
    int hung, exited, status;
    char err[8192];
} outcome_t;

static group_t *case_group;

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* Runs fn on n devices of group "g" (world ranks 0..n-1 in the order
 * given) in a child; returns its exit and its stderr. */
static outcome_t run_case(const int *ranks, int n, device_main_fn fn) {
    outcome_t o;
    memset(&o, 0, sizeof o);
    int p[2];
    if (pipe(p) != 0) return o;
    fflush(stdout), fflush(stderr);
    pid_t pid = fork();
    if (pid == 0) {
        close(p[0]), dup2(p[1], 2), close(p[1]);
        perr_t e;
        case_group = group_create(ranks, n, "g", &e);
        if (!case_group || devices_run(n, 0, fn, NULL, &e) != 0) fprintf(stderr, "%s\n", e.msg), _exit(1);
        _exit(0);
    }
    close(p[1]);
    size_t len = 0;
    double deadline = now_s() + 60.0;
    for (;;) {
        struct pollfd pf = {.fd = p[0], .events = POLLIN};
        int left_ms = (int)((deadline - now_s()) * 1000);
        if (left_ms <= 0) {
            o.hung = 1, kill(pid, SIGKILL);
            break;
        }
        if (poll(&pf, 1, left_ms) <= 0) continue;
        char chunk[1024];
        ssize_t k = read(p[0], chunk, sizeof chunk);
        if (k <= 0) break;
        if (len + (size_t)k >= sizeof o.err) len = 0;
        memcpy(o.err + len, chunk, (size_t)k), len += (size_t)k;
    }
    o.err[len] = 0;
    close(p[0]);
    int st;
    waitpid(pid, &st, 0);
    o.exited = WIFEXITED(st), o.status = o.exited ? WEXITSTATUS(st) : -1;
    return o;
}

/* A clean failure (an exit, no signal, no hang) whose message says text. */
#define CHECK_FAILS_WITH(o, text)                                                                     \
    do {                                                                                              \
        CHECK(!(o).hung && (o).exited && (o).status != 0, "hung=%d exited=%d status=%d\n%s", (o).hung, \
              (o).exited, (o).status, (o).err);                                                       \
        CHECK(strstr((o).err, text) != NULL, "want: %s\nmessage:\n%s", text, (o).err);               \
    } while (0)

static void f32_vs_open(device_t *dev, void *arg) {
    (void)arg;
    xvec_t v;
    xvec_init(&v, 4);
    float x[4] = {0}, y[4];
    if (dev->rank == 0) coll_all_reduce(case_group, x, y, 4, COLL_F32, COLL_SUM);
    else coll_all_reduce_open(case_group, &v, 0, 4);
}

static void count_mismatch(device_t *dev, void *arg) {
    (void)arg;
    xvec_t v;
    xvec_init(&v, 8);
    coll_barrier(case_group);
    coll_all_reduce_open(case_group, &v, 0, dev->rank == 1 ? 6 : 8);
}

static void rs_vs_f32_rs(device_t *dev, void *arg) {
    (void)arg;
    xvec_t s, r;
    xvec_init(&s, 9), xvec_init(&r, 3);
    float x[9] = {0}, y[3];
    if (dev->rank == 2) coll_reduce_scatter(case_group, x, y, 3, COLL_F32, COLL_SUM);
    else coll_reduce_scatter_open(case_group, &s, 0, &r, 0, 3);
}

static void algo_mismatch(device_t *dev, void *arg) {
    (void)arg;
    xvec_t v;
    xvec_init(&v, 4);
    coll_set_algo(dev->rank == 1 ? COLL_ALGO_RING : COLL_ALGO_DIRECT);
    coll_all_reduce_open(case_group, &v, 0, 4);
}

static void plain_with_xvec(device_t *dev, void *arg) {
    (void)dev, (void)arg;
    double x[4] = {0}, y[4];
    coll_all_reduce(case_group, x, y, 4, COLL_XVEC, COLL_SUM);
}

static void outside(device_t *dev, void *arg) {
    (void)dev, (void)arg;
    xvec_t v;
    xvec_init(&v, 8);
    coll_all_reduce_open(case_group, &v, 2, 8);
}

static void rs_overlap(device_t *dev, void *arg) {
    (void)dev, (void)arg;
    xvec_t v;
    xvec_init(&v, 12);
    coll_reduce_scatter_open(case_group, &v, 0, &v, 3, 4); /* rank 0's block is at 0 */
}

static void p2p_open_vs_f32(device_t *dev, void *arg) {
    (void)dev, (void)arg;
    xvec_t v;
    xvec_init(&v, 4);
    float f[4] = {0};
    if (group_rank(case_group) == 0) coll_send_open(case_group, &v, 0, 4, 1, 3);
    else coll_recv(case_group, f, 4, COLL_F32, 0, 3);
}

static void missing_rank(device_t *dev, void *arg) {
    (void)arg;
    coll_set_timeout(0.5);
    xvec_t v;
    xvec_init(&v, 4);
    if (dev->rank != 2) coll_all_reduce_open(case_group, &v, 0, 4);
}

static void test_misuse(void) {
    static const int two[] = {0, 1}, three[] = {0, 1, 2}, swapped[] = {1, 0};
    static const struct {
        const int *ranks;
        int n;
        device_main_fn fn;
        const char *want, *also;
    } cases[] = {
        {two, 2, f32_vs_open, "collective mismatch in group 'g' call #1: rank 0 (world 0) called all_reduce(f32, "
                              "sum, count=4) but rank 1 (world 1) called all_reduce(xvec, sum, count=4)", NULL},
        {swapped, 2, count_mismatch, "call #2: rank 0 (world 1) called all_reduce(xvec, sum, count=6) but rank 1 "
                                     "(world 0) called all_reduce(xvec, sum, count=8)", NULL},
        {three, 3, rs_vs_f32_rs, "rank 0 (world 0) called reduce_scatter(xvec, sum, recv_count=3) but rank 2 "
                                 "(world 2) called reduce_scatter(f32, sum, recv_count=3)", NULL},
        {two, 2, algo_mismatch, "called all_reduce(xvec, sum, count=4, algo=direct) but rank 1 (world 1) called "
                                "all_reduce(xvec, sum, count=4, algo=ring)", NULL},
        {two, 2, plain_with_xvec, "xvec (open exact sums) has entry points of its own", NULL},
        {two, 2, outside, "v elements [2, 10) are outside the xvec of 8 elements", NULL},
        {three, 3, rs_overlap, "recv elements [3, 7) overlap send's [0, 12)", NULL},
        {two, 2, p2p_open_vs_f32, "p2p mismatch in group 'g' (tag 3): rank 0 (world 0) sends 4 xvec to rank 1 but "
                                  "rank 1 (world 1) receives 4 f32 from rank 0", NULL},
        {three, 3, missing_rank, "device 0: waiting in all_reduce call #1 of group 'g' (rank 0 of 3)",
         "all_reduce call #1 of group 'g' has no rank 2 (world 2), which is finished"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        outcome_t o = run_case(cases[i].ranks, cases[i].n, cases[i].fn);
        CHECK_FAILS_WITH(o, cases[i].want);
        if (cases[i].also) CHECK(strstr(o.err, cases[i].also), "want: %s\nmessage:\n%s", cases[i].also, o.err);
    }
}

int main(void) {
    RUN(test_matrix_n1);
    RUN(test_matrix_n2);
    RUN(test_matrix_n3);
    RUN(test_matrix_n4);
    RUN(test_matrix_n7);
    RUN(test_matrix_n8);
    RUN(test_two_groups_concurrent);
    RUN(test_p2p_ring);
    RUN(test_p2p_many_outstanding);
    RUN(test_p2p_same_vector_and_chain);
    RUN(test_counters_exceptions);
    RUN(test_misuse);
    return harness_done();
}
