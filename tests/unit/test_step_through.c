/* test_step_through.c - step-through mode (runtime.h, stepper.c): one
 * device at a time, in a fixed order, and a focus device that runs only
 * when nobody else can.
 *
 * Each device appends its rank to a shared log once per round, between
 * barriers, and counts how many devices are between a barrier and the
 * next at once. Stepping, that is always one, the log is the same on
 * every run, and a focus device F runs only once every other device
 * waits for it.
 * The threaded run is the control: the same program, where the count
 * may exceed one (not asserted: two cores may serialise it anyway).
 */
#include "parity/coll.h"

#include <sched.h>
#include <stdatomic.h>
#include <string.h>

#include "../harness.h"

enum { WORLD = 4, ROUNDS = 3 };

static group_t *all;
static _Atomic int inside, most_inside, nlog;
static int log_ranks[WORLD * ROUNDS];

static void body(device_t *dev, void *arg) {
    (void)arg;
    for (int round = 0; round < ROUNDS; round++) {
        const int now = atomic_fetch_add(&inside, 1) + 1;
        int m = atomic_load(&most_inside);
        while (now > m && !atomic_compare_exchange_weak(&most_inside, &m, now)) {
        }
        log_ranks[atomic_fetch_add(&nlog, 1)] = dev->rank;
        for (int k = 0; k < 50; k++) sched_yield(); /* room for another device to overlap */
        atomic_fetch_sub(&inside, 1);
        coll_barrier(all);
    }
    /* a ring of non-blocking sends: no false deadlock */
    int32_t out = dev->rank, in = -1;
    coll_request_t *s = coll_isend(all, &out, 1, COLL_I32, (dev->rank + 1) % WORLD, 7);
    coll_recv(all, &in, 1, COLL_I32, (dev->rank + WORLD - 1) % WORLD, 7);
    coll_wait(s);
    if (in != (dev->rank + WORLD - 1) % WORLD) atomic_store(&most_inside, 99);
}

/* One run: the log and the most devices seen running at once. */
static int run(int on, int focus, int out_log[WORLD * ROUNDS]) {
    perr_t e;
    atomic_store(&inside, 0);
    atomic_store(&most_inside, 0);
    atomic_store(&nlog, 0);
    if (devices_set_step_through(on, focus, &e)) return -1;
    int rc = devices_run(WORLD, 0, body, NULL, &e);
    devices_set_step_through(0, -1, &e);
    CHECK(rc == 0, "devices_run: %s", e.msg);
    memcpy(out_log, log_ranks, sizeof log_ranks);
    return atomic_load(&most_inside);
}

static void test_one_at_a_time_and_deterministic(void) {
    int first[WORLD * ROUNDS], again[WORLD * ROUNDS];
    CHECK(run(1, -1, first) == 1, "more than one device ran at once, or the ring failed");
    for (int k = 0; k < 3; k++) {
        CHECK(run(1, -1, again) == 1, "more than one device ran at once");
        CHECK(!memcmp(first, again, sizeof first), "the order changed between runs");
    }
    for (int r = 0; r < WORLD; r++) /* the first round: rank order */
        CHECK(first[r] == r, "round 0, turn %d: device %d, expected %d", r, first[r], r);
    /* the last to arrive completes the barrier and goes on without waiting */
    CHECK(first[WORLD] == WORLD - 1, "round 1 opens with device %d", first[WORLD]);
}

static void test_focus_runs_last(void) {
    for (int focus = 0; focus < WORLD; focus++) {
        int lg[WORLD * ROUNDS];
        CHECK(run(1, focus, lg) == 1, "focus %d: more than one device ran at once", focus);
        /* everyone else runs until it needs the focus device: round 0 ends
         * with it; it completes the barrier, so it keeps the baton and
         * opens round 1 */
        CHECK(lg[WORLD - 1] == focus && lg[WORLD] == focus, "focus %d: turns %d %d, expected %d %d",
              focus, lg[WORLD - 1], lg[WORLD], focus, focus);
        for (int t = 0, seen = 0; t < WORLD - 1; t++) {
            CHECK(lg[t] != focus && !(seen >> lg[t] & 1), "focus %d: turn %d is device %d", focus, t,
                  lg[t]);
            seen |= 1 << lg[t];
        }
    }
}

static void test_threaded_control(void) {
    int lg[WORLD * ROUNDS];
    int most = run(0, -1, lg);
    CHECK(most >= 1 && most <= WORLD, "threaded: %d at once", most);
    printf("  threaded control: at most %d devices between barriers at once\n", most);
}

static void test_focus_outside_world(void) {
    perr_t e;
    CHECK(devices_set_step_through(1, WORLD, &e) == 0, "%s", e.msg);
    int rc = devices_run(WORLD, 0, body, NULL, &e);
    devices_set_step_through(0, -1, &e);
    CHECK(rc != 0 && strstr(e.msg, "step-through: device 4 is not in the run"), "rc %d: %s", rc,
          e.msg);
    CHECK(devices_set_step_through(1, -2, &e) != 0 && strstr(e.msg, "device -2"), "%s", e.msg);
}

int main(void) {
    int ranks[WORLD];
    for (int r = 0; r < WORLD; r++) ranks[r] = r;
    perr_t e;
    all = group_create(ranks, WORLD, "all", &e);
    if (!all) {
        fprintf(stderr, "%s\n", e.msg);
        return 1;
    }
    RUN(test_one_at_a_time_and_deterministic);
    RUN(test_focus_runs_last);
    RUN(test_threaded_control);
    RUN(test_focus_outside_world);
    group_destroy(all);
    return harness_done();
}
