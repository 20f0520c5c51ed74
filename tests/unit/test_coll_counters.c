/* test_coll_counters.c - the byte counters by group family and dtype
 * (coll.h): what tells tensor-parallel traffic from data-parallel traffic
 * on one device. Four devices on a tp=2 x dp=2 grid make known calls on
 * their tp, dp and world groups; each family must hold exactly its calls,
 * the families must add up to the totals by kind, a rank keeps at most
 * COLL_MAX_FAMILIES families (the rest under "*"), and reset zeroes them. */
#include <string.h>

#include "../harness.h"
#include "parity/coll.h"
#include "parity/runtime.h"

typedef struct {
    group_t *tp[2], *dp[2], *world;
    group_t *many[12]; /* one-member groups of 12 families, for device 0 */
} grid4_t;

static void grid_main(device_t *dev, void *arg) {
    grid4_t *s = arg;
    group_t *tp = s->tp[dev->rank / 2], *dp = s->dp[dev->rank % 2];
    float f[64] = {0}, out[128];
    xacc_t x[3];
    memset(x, 0, sizeof x);
    coll_all_reduce(tp, f, out, 50, COLL_F32, COLL_SUM);
    coll_all_reduce(tp, f, out, 10, COLL_F32, COLL_MAX);
    coll_all_reduce(tp, x, x, 3, COLL_XACC, COLL_SUM);
    xvec_t v;
    CHECK(xvec_init(&v, 10) == 0, "xvec_init");
    xvec_add(&v, 0, f, 10);
    coll_all_reduce_open(tp, &v, 0, 10);
    xvec_free(&v);
    coll_all_gather(dp, f, out, 5, COLL_F32);
    coll_all_reduce(dp, x, x, 1, COLL_XACC, COLL_SUM); /* the loss: xacc, like tp's sum of exps */
    coll_barrier(s->world);
    if (dev->rank == 0)
        for (int i = 0; i < 12; i++) coll_barrier(s->many[i]);
}

static const coll_tally_t *tally(const coll_counters_t *c, const char *fam, coll_kind_t k,
                                 coll_dtype_t d) {
    static const coll_tally_t zero;
    const coll_family_t *f = coll_counters_family(c, fam);
    return f ? &f->by[k][d] : &zero;
}

static void check_rank(int r) {
    coll_counters_t c;
    coll_counters_get(r, &c);
    const coll_tally_t *t = tally(&c, "tp", COLL_KIND_ALL_REDUCE, COLL_F32);
    CHECK(t->calls == 2 && t->bytes == 240 && t->bus_bytes == 240, "rank %d tp f32: %llu calls, %llu bytes",
          r, (unsigned long long)t->calls, (unsigned long long)t->bytes);
    t = tally(&c, "tp", COLL_KIND_ALL_REDUCE, COLL_XACC);
    CHECK(t->calls == 1 && t->bytes == 3 * sizeof(xacc_t), "rank %d tp xacc", r);
    t = tally(&c, "tp", COLL_KIND_ALL_REDUCE, COLL_XVEC);
    CHECK(t->calls == 1 && t->bytes == 80 && t->sent >= t->bus_bytes, "rank %d tp xvec", r);
    t = tally(&c, "dp", COLL_KIND_ALL_GATHER, COLL_F32);
    CHECK(t->calls == 1 && t->bytes == 40 && t->bus_bytes == 20, "rank %d dp all_gather", r);
    t = tally(&c, "dp", COLL_KIND_ALL_REDUCE, COLL_XACC);
    CHECK(t->calls == 1 && t->bytes == sizeof(xacc_t), "rank %d dp xacc kept apart from tp's", r);
    t = tally(&c, "world", COLL_KIND_BARRIER, COLL_I32);
    CHECK(t->calls == 1, "rank %d world barrier", r);
    /* the families add up to the totals by kind */
    for (int k = 0; k < COLL_NKINDS; k++) {
        uint64_t calls = 0, bytes = 0;
        for (int i = 0; i < c.nfamilies; i++)
            for (int d = 0; d < COLL_NDTYPES; d++)
                calls += c.family[i].by[k][d].calls, bytes += c.family[i].by[k][d].bytes;
        CHECK(calls == c.calls[k] && bytes == c.bytes[k], "rank %d kind %s: families %llu calls, total %llu",
              r, coll_kind_name((coll_kind_t)k), (unsigned long long)calls, (unsigned long long)c.calls[k]);
    }
}

static void test_families(void) {
    perr_t e;
    grid4_t s;
    int tp0[] = {0, 1}, tp1[] = {2, 3}, dp0[] = {0, 2}, dp1[] = {1, 3}, all[] = {0, 1, 2, 3};
    s.tp[0] = group_create(tp0, 2, "tp0", &e), s.tp[1] = group_create(tp1, 2, "tp1", &e);
    s.dp[0] = group_create(dp0, 2, "dp0", &e), s.dp[1] = group_create(dp1, 2, "dp1", &e);
    s.world = group_create(all, 4, "world", &e);
    for (int i = 0; i < 12; i++) {
        char name[16];
        snprintf(name, sizeof name, "fam%c7", 'a' + i); /* family "fama", "famb", ... */
        int zero = 0;
        s.many[i] = group_create(&zero, 1, name, &e);
    }
    coll_counters_reset(-1);
    CHECK(devices_run(4, 0, grid_main, &s, &e) == 0, "%s", e.msg);
    for (int r = 0; r < 4; r++) check_rank(r);
    coll_counters_t c;
    coll_counters_get(0, &c);
    CHECK(c.nfamilies == COLL_MAX_FAMILIES, "device 0: %d families", c.nfamilies);
    const coll_family_t *rest = coll_counters_family(&c, "*");
    CHECK(rest && !strcmp(c.family[COLL_MAX_FAMILIES - 1].name, "*"), "the last family is \"*\"");
    /* tp, dp, world, then fama..famd named; fame..faml (8 barriers) in "*" */
    CHECK(rest && rest->by[COLL_KIND_BARRIER][COLL_I32].calls == 8, "\"*\" holds %llu barriers",
          rest ? (unsigned long long)rest->by[COLL_KIND_BARRIER][COLL_I32].calls : 0ull);
    CHECK(coll_counters_family(&c, "famd") && !coll_counters_family(&c, "fame"), "named families");
    coll_counters_reset(-1);
    coll_counters_get(0, &c);
    CHECK(c.calls[COLL_KIND_ALL_REDUCE] == 0 && tally(&c, "tp", COLL_KIND_ALL_REDUCE, COLL_F32)->calls == 0,
          "reset zeroes the families too");
    for (int i = 0; i < 2; i++) group_destroy(s.tp[i]), group_destroy(s.dp[i]);
    group_destroy(s.world);
    for (int i = 0; i < 12; i++) group_destroy(s.many[i]);
}

/* Collectives built above the layer name no group: family "", xvec. */
static void add_main(device_t *dev, void *arg) {
    (void)arg;
    coll_counters_add(dev->rank, COLL_KIND_REDUCE_SCATTER, 800, 0.5);
}

static void test_added(void) {
    perr_t e;
    coll_counters_reset(-1);
    CHECK(devices_run(1, 0, add_main, NULL, &e) == 0, "%s", e.msg);
    coll_counters_t c;
    coll_counters_get(0, &c);
    const coll_tally_t *t = tally(&c, "", COLL_KIND_REDUCE_SCATTER, COLL_XVEC);
    CHECK(t->calls == 1 && t->bytes == 800 && t->bus_bytes == 400, "coll_counters_add: %llu bytes",
          (unsigned long long)t->bytes);
    coll_counters_reset(-1);
}

int main(void) {
    RUN(test_families);
    RUN(test_added);
    return harness_done();
}
