/* test_coll_groups.c - collectives on several groups of one world at
 * once (rectangular groups from a layout and irregular ones side by side),
 * the byte counters, and 32 devices on a 2-core machine.
 */
#include "parity/coll.h"

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "../harness.h"

#if defined(__SANITIZE_THREAD__) || defined(__SANITIZE_ADDRESS__)
#define SANITIZED 1
#else
#define SANITIZED 0
#endif

/* ---- sub-groups of one world, running at the same time ---- */

typedef struct {
    group_t *tp[4], *dp[4], *pp[4], *odd, *even;
    rank_layout_t L;
    int fails[8];
    char msg[8][200];
} sub_t;

#define SFAIL(s, r, ...)                                                            \
    do {                                                                            \
        if ((s)->fails[r]++ == 0) snprintf((s)->msg[r], sizeof (s)->msg[0], __VA_ARGS__); \
    } while (0)

static void sub_main(device_t *dev, void *arg) {
    sub_t *s = arg;
    int r = dev->rank;
    group_t *tp = s->tp[layout_group_id(&s->L, r, "tp")], *dp = s->dp[layout_group_id(&s->L, r, "dp")];
    group_t *pp = s->pp[layout_group_id(&s->L, r, "pp")];
    group_t *mine = group_rank(s->odd) >= 0 ? s->odd : s->even;
    for (int it = 0; it < 40; it++) {
        coll_set_algo(it % 3 == 1 ? COLL_ALGO_RING : COLL_ALGO_DIRECT);
        /* tp: i64 sum of world ranks; dp: gather; pp: broadcast from stage 1; odd/even: xacc sum */
        int64_t v[3] = {r * 1000 + it, -r, it}, out[3];
        coll_all_reduce(tp, v, out, 3, COLL_I64, COLL_SUM);
        int64_t want = 0;
        for (int k = 0; k < group_size(tp); k++) want += group_world_rank(tp, k) * 1000 + it;
        if (out[0] != want || out[2] != it * group_size(tp)) SFAIL(s, r, "tp sum it %d: %lld want %lld", it, (long long)out[0], (long long)want);
        int32_t mine_v = r * 10 + it, all[8];
        coll_all_gather(dp, &mine_v, all, 1, COLL_I32);
        for (int k = 0; k < group_size(dp); k++)
            if (all[k] != group_world_rank(dp, k) * 10 + it) SFAIL(s, r, "dp gather it %d slot %d: %d", it, k, all[k]);
        float b[2] = {(float)r, (float)it};
        coll_broadcast(pp, b, 2, COLL_F32, 1);
        if (b[0] != (float)group_world_rank(pp, 1) || b[1] != (float)it) SFAIL(s, r, "pp bcast it %d: %g", it, b[0]);
        xacc_t x, sum;
        xacc_init(&x);
        xacc_add_f32(&x, ldexpf(1.0f, r * 10 - 40));
        xacc_add_f32(&x, 1.0f);
        coll_all_reduce(mine, &x, &sum, 1, COLL_XACC, COLL_SUM);
        xacc_t ref;
        xacc_init(&ref);
        for (int k = 0; k < group_size(mine); k++) {
            xacc_add_f32(&ref, ldexpf(1.0f, group_world_rank(mine, k) * 10 - 40));
            xacc_add_f32(&ref, 1.0f);
        }
        if (xacc_round_f64(&sum) != xacc_round_f64(&ref)) SFAIL(s, r, "xacc sum it %d", it);
    }
}

static void test_subgroups_concurrent(void) {
    sub_t *s = calloc(1, sizeof *s);
    perr_t e;
    CHECK(layout_init(&s->L, "tp-cp-ep-dp-pp", "tp=2,dp=2,pp=2", &e) == 0, "%s", e.msg);
    CHECK(group_create_all(&s->L, "tp", "tp", s->tp, &e) == 0, "%s", e.msg);
    CHECK(group_create_all(&s->L, "dp", "dp", s->dp, &e) == 0, "%s", e.msg);
    CHECK(group_create_all(&s->L, "pp", "pp", s->pp, &e) == 0, "%s", e.msg);
    int odd[] = {0, 3, 5}, even[] = {7, 1, 2, 4, 6}; /* not a rectangle, not sorted */
    s->odd = group_create(odd, 3, "odd", &e);
    s->even = group_create(even, 5, "even", &e);
    CHECK(devices_run(8, 0, sub_main, s, &e) == 0, "%s", e.msg);
    for (int r = 0; r < 8; r++) CHECK(s->fails[r] == 0, "rank %d: %d failures, first: %s", r, s->fails[r], s->msg[r]);
    group_destroy_all(s->tp, 4), group_destroy_all(s->dp, 4), group_destroy_all(s->pp, 4);
    group_destroy(s->odd), group_destroy(s->even);
    free(s);
}

/* ---- byte counters ---- */

static group_t *counter_group;

static void counters_main(device_t *dev, void *arg) {
    (void)arg;
    group_t *g = counter_group;
    int me = group_rank(g);
    float buf[4000] = {0}, out[4000];
    for (int i = 0; i < 3; i++) coll_all_reduce(g, buf, out, 1000, COLL_F32, COLL_SUM);
    coll_broadcast(g, buf, 100, COLL_F32, 1);
    coll_broadcast(g, buf, 100, COLL_F32, 1);
    coll_reduce_scatter(g, buf, out, 10, COLL_F32, COLL_SUM);
    coll_all_gather(g, buf, out, 10, COLL_I64);
    coll_reduce(g, buf, me == 2 ? out : NULL, 50, COLL_I32, COLL_MAX, 2);
    coll_all_to_all(g, buf, out, 5, COLL_F32);
    /* everyone sends me+1 elements to each peer; receives j+1 from rank j */
    size_t scnt[4], sdis[4], rcnt[4] = {1, 2, 3, 4}, rdis[4] = {0, 1, 3, 6};
    for (int j = 0; j < 4; j++) scnt[j] = (size_t)me + 1, sdis[j] = (size_t)j * ((size_t)me + 1);
    coll_all_to_all_v(g, buf, scnt, sdis, out, rcnt, rdis, COLL_F32);
    coll_barrier(g);
    if (me == 0) coll_send(g, buf, 7, COLL_I64, 3, 0);
    if (me == 3) coll_recv(g, out, 7, COLL_I64, 0, 0);
    (void)dev;
}

static void test_counters(void) {
    perr_t e;
    int ranks[] = {0, 1, 2, 3};
    counter_group = group_create(ranks, 4, "counted", &e);
    coll_counters_reset(-1);
    CHECK(devices_run(4, 0, counters_main, NULL, &e) == 0, "%s", e.msg);
    for (int r = 0; r < 4; r++) {
        coll_counters_t c;
        coll_counters_get(r, &c);
        CHECK(c.calls[COLL_KIND_ALL_REDUCE] == 3 && c.bytes[COLL_KIND_ALL_REDUCE] == 3 * 4000, "all_reduce bytes");
        CHECK(c.bus_bytes[COLL_KIND_ALL_REDUCE] == 3 * 6000 && c.sent[COLL_KIND_ALL_REDUCE] == 3 * 6000 &&
                  c.recv[COLL_KIND_ALL_REDUCE] == 3 * 6000,
              "all_reduce busbw bytes 2(n-1)/n: %llu", (unsigned long long)c.bus_bytes[COLL_KIND_ALL_REDUCE]);
        CHECK(c.bytes[COLL_KIND_BROADCAST] == 800 && c.sent[COLL_KIND_BROADCAST] == (r == 1 ? 800u : 0u) &&
                  c.recv[COLL_KIND_BROADCAST] == (r == 1 ? 0u : 800u),
              "broadcast: root sends, others receive (rank %d)", r);
        CHECK(c.bytes[COLL_KIND_REDUCE_SCATTER] == 160 && c.bus_bytes[COLL_KIND_REDUCE_SCATTER] == 120, "reduce_scatter");
        CHECK(c.bytes[COLL_KIND_ALL_GATHER] == 320 && c.sent[COLL_KIND_ALL_GATHER] == 240, "all_gather");
        CHECK(c.sent[COLL_KIND_REDUCE] == (r == 2 ? 0u : 200u) && c.recv[COLL_KIND_REDUCE] == (r == 2 ? 200u : 0u), "reduce");
        CHECK(c.bytes[COLL_KIND_ALL_TO_ALL] == 80 && c.sent[COLL_KIND_ALL_TO_ALL] == 60, "all_to_all");
        uint64_t me1 = (uint64_t)r + 1;
        CHECK(c.bytes[COLL_KIND_ALL_TO_ALL_V] == 16 * me1 && c.sent[COLL_KIND_ALL_TO_ALL_V] == 12 * me1 &&
                  c.recv[COLL_KIND_ALL_TO_ALL_V] == 4 * (10 - me1),
              "a2av rank %d: bytes %llu sent %llu recv %llu", r, (unsigned long long)c.bytes[COLL_KIND_ALL_TO_ALL_V],
              (unsigned long long)c.sent[COLL_KIND_ALL_TO_ALL_V], (unsigned long long)c.recv[COLL_KIND_ALL_TO_ALL_V]);
        CHECK(c.calls[COLL_KIND_BARRIER] == 1, "barrier");
        CHECK(c.sent[COLL_KIND_SEND] == (r == 0 ? 56u : 0u) && c.recv[COLL_KIND_RECV] == (r == 3 ? 56u : 0u), "p2p");
    }
    CHECK(fabs(coll_busbw_factor(COLL_KIND_ALL_REDUCE, 8) - 1.75) < 1e-12, "factor");
    CHECK(fabs(coll_busbw_factor(COLL_KIND_ALL_GATHER, 8) - 0.875) < 1e-12, "factor");
    CHECK(coll_busbw_factor(COLL_KIND_BROADCAST, 8) == 1.0, "factor");
    coll_counters_reset(-1);
    coll_counters_t z;
    coll_counters_get(0, &z);
    CHECK(z.calls[COLL_KIND_ALL_REDUCE] == 0, "reset");
    group_destroy(counter_group);
}

/* ---- 32 devices on 2 cores ---- */

typedef struct {
    group_t *g;
    int iters, bad[32];
} many_t;

static void many_main(device_t *dev, void *arg) {
    many_t *m = arg;
    int32_t v[256], out[256];
    for (int it = 0; it < m->iters; it++) {
        for (int k = 0; k < 256; k++) v[k] = dev->rank * 256 + k + it;
        coll_all_reduce(m->g, v, out, 256, COLL_I32, COLL_SUM);
        for (int k = 0; k < 256; k++) /* sum over r of r*256 + k + it */
            m->bad[dev->rank] += out[k] != 256 * (31 * 32 / 2) + 32 * (k + it);
    }
}

static void test_32_devices(void) {
    many_t m = {.iters = SANITIZED ? 300 : 2000};
    int ranks[32];
    for (int r = 0; r < 32; r++) ranks[r] = r;
    perr_t e;
    m.g = group_create(ranks, 32, "world32", &e);
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    CHECK(devices_run(32, 0, many_main, &m, &e) == 0, "%s", e.msg);
    clock_gettime(CLOCK_MONOTONIC, &t1);
    double s = (double)(t1.tv_sec - t0.tv_sec) + (double)(t1.tv_nsec - t0.tv_nsec) * 1e-9;
    int bad = 0;
    for (int r = 0; r < 32; r++) bad += m.bad[r];
    CHECK(bad == 0, "%d wrong elements", bad);
    printf("  32 devices: %d all-reduces of 1 KiB (i32) in %.2f s = %.1f us each\n", m.iters, s, s / m.iters * 1e6);
    CHECK(s < 30.0, "32-device all-reduce loop took %.1f s", s);
    group_destroy(m.g);
}

int main(void) {
    RUN(test_subgroups_concurrent);
    RUN(test_counters);
    RUN(test_32_devices);
    return harness_done();
}
