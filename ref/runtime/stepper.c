/* stepper.c - step-through mode: the devices of a run take turns.
 *
 * For a classroom or a debugger, the threaded run has two problems: a
 * breakpoint in one device leaves the others running on until they
 * block, and who runs when depends on the OS scheduler. In step-through
 * mode exactly one device runs at a time. It holds the baton until it
 * must wait for another device (a collective's barrier, a ring hand-off,
 * a receive: every wait of the collectives goes through one function,
 * coll_wword_wait), or until it finishes; then it hands the baton to the
 * next device that can make progress, in a fixed order:
 *
 *   round robin (default): the first runnable device after the holder,
 *       by world rank, wrapping around;
 *   focus F (--step-through=F): the same order with F left out, and F
 *       only when no other device can run: everybody else runs freely up
 *       to the point where they need F, then F gets control.
 *
 * A device is runnable when it has not started yet, or when the
 * condition it waits for now holds (the blocked device's ready(ctx),
 * evaluated by the device handing over, under the stepper's lock). No
 * device runnable while some are still blocked is a deadlock, found at
 * once rather than after the watchdog's timeout: the reporter the
 * collectives registered prints what every device waits for.
 *
 * The same code runs with the same data, and every reduction is exact
 * (I2), so the bits equal the threaded run's; only the interleaving
 * differs, and it is now a function of the program alone.
 */
#include "parity/runtime.h"
#include "runtime_internal.h"
#include "parity/numparse.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

typedef enum { SLOT_WAITING_TO_START, SLOT_RUNNING, SLOT_BLOCKED, SLOT_DONE } slot_state_t;

typedef struct {
    pthread_cond_t cv; /* signalled when this device gets the baton */
    slot_state_t state;
    step_ready_fn ready; /* SLOT_BLOCKED: what it waits for */
    const void *ctx;
} step_slot_t;

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static step_slot_t *slots; /* [world] while a stepping run is on, under mu */
static int world, focus, holder;
static _Atomic int stepping; /* the current run steps */
/* The mode for the next runs: -1 until devices_set_step_through. */
static int set_on = -1, set_focus = -1;
static _Atomic(step_deadlock_fn) deadlock_reporter;

/* ---- the mode -------------------------------------------------------------- */

static int env_int(const char *name, long lo, long hi, long *out, perr_t *e) {
    const char *v = getenv(name);
    *out = -1;
    if (!v || !*v) return 0;
    char *end;
    errno = 0;
    long x = strtol(v, &end, 10);
    if (!num_is_decimal(v, 0) || *end || errno || x < lo || x > hi)
        return perr_set(e, "%s='%.100s' is not valid: expected an integer from %ld to %ld", name, v,
                        lo, hi);
    *out = x;
    return 0;
}

int devices_step_env(int *on, int *focus_out, perr_t *e) {
    long v, f;
    if (env_int("PARITY_STEP_THROUGH", 0, 1, &v, e) ||
        env_int("PARITY_STEP_THROUGH_DEVICE", 0, PARITY_MAX_DEVICES - 1, &f, e))
        return -1;
    *focus_out = (int)f;
    *on = v == 1 || f >= 0; /* naming a device implies the mode */
    return 0;
}

int devices_set_step_through(int on, int focus_device, perr_t *e) {
    if (focus_device < -1 || focus_device >= PARITY_MAX_DEVICES)
        return perr_set(e, "step-through: device %d is not a device: expected 0 .. %d",
                        focus_device, PARITY_MAX_DEVICES - 1);
    pthread_mutex_lock(&mu);
    set_on = on != 0 || focus_device >= 0;
    set_focus = focus_device;
    pthread_mutex_unlock(&mu);
    return 0;
}

int devices_stepping(void) { return atomic_load_explicit(&stepping, memory_order_relaxed); }

void step_set_deadlock_reporter(step_deadlock_fn fn) { atomic_store(&deadlock_reporter, fn); }

/* ---- the baton ------------------------------------------------------------- */

static int runnable(const step_slot_t *s) {
    return s->state == SLOT_WAITING_TO_START || (s->state == SLOT_BLOCKED && s->ready(s->ctx));
}

/* The next holder after `from` in the fixed order, or -1. Under mu. */
static int pick(int from) {
    for (int i = 1; i <= world; i++) {
        const int d = (from + i) % world;
        if (d != focus && runnable(&slots[d])) return d;
    }
    return focus >= 0 && runnable(&slots[focus]) ? focus : -1;
}

static _Noreturn void deadlock(void) {
    pthread_mutex_unlock(&mu);
    step_deadlock_fn report = atomic_load(&deadlock_reporter);
    if (report) report();
    parity_fatal("step-through: no device can run, and not every device has finished "
                 "(a deadlock: a device waits for one that will never get there)");
}

/* Hands the baton on from `me` (under mu); a deadlock when nobody can
 * take it while some device is still blocked. */
static void hand_over(int me) {
    const int next = pick(me);
    if (next < 0) {
        for (int d = 0; d < world; d++)
            if (slots[d].state != SLOT_DONE) deadlock();
        holder = -1; /* everyone finished */
        atomic_store_explicit(&parity_debug.baton, -1, memory_order_relaxed);
        return;
    }
    holder = next;
    atomic_store_explicit(&parity_debug.baton, next, memory_order_relaxed);
    pthread_cond_signal(&slots[next].cv);
}

/* Waits (under mu) until `me` holds the baton; timeout_ns 0: forever. */
static int await_baton(int me, int64_t timeout_ns) {
    struct timespec until;
    if (timeout_ns > 0) {
        clock_gettime(CLOCK_MONOTONIC, &until);
        until.tv_sec += (time_t)(timeout_ns / 1000000000);
        until.tv_nsec += (long)(timeout_ns % 1000000000);
        if (until.tv_nsec >= 1000000000) until.tv_sec++, until.tv_nsec -= 1000000000;
    }
    while (holder != me) {
        if (timeout_ns <= 0) {
            pthread_cond_wait(&slots[me].cv, &mu);
        } else if (pthread_cond_timedwait(&slots[me].cv, &mu, &until) == ETIMEDOUT &&
                   holder != me) {
            return -1;
        }
    }
    slots[me].state = SLOT_RUNNING;
    return 0;
}

int step_run_begin(int n, perr_t *e) {
    pthread_mutex_lock(&mu);
    int on = set_on, f = set_focus;
    pthread_mutex_unlock(&mu);
    if (on < 0 && devices_step_env(&on, &f, e)) return -1;
    atomic_store_explicit(&parity_debug.baton, -1, memory_order_relaxed);
    if (!on) return 0;
    if (f >= n)
        return perr_set(e, "step-through: device %d is not in the run: expected 0 .. %d (%d devices)",
                        f, n - 1, n);
    step_slot_t *s = calloc((size_t)n, sizeof *s);
    if (!s) return perr_set(e, "step-through: out of host memory for %d devices", n);
    pthread_condattr_t attr;
    pthread_condattr_init(&attr);
    pthread_condattr_setclock(&attr, CLOCK_MONOTONIC);
    for (int d = 0; d < n; d++) pthread_cond_init(&s[d].cv, &attr);
    pthread_condattr_destroy(&attr);
    pthread_mutex_lock(&mu);
    slots = s;
    world = n;
    focus = f;
    holder = pick(n - 1); /* the first in the order: device 0, or 1 when 0 is the focus */
    atomic_store_explicit(&parity_debug.baton, holder, memory_order_relaxed);
    atomic_store(&stepping, 1);
    pthread_mutex_unlock(&mu);
    return 0;
}

void step_run_end(void) {
    pthread_mutex_lock(&mu);
    step_slot_t *s = slots;
    const int n = world;
    slots = NULL;
    world = 0;
    atomic_store(&stepping, 0);
    pthread_mutex_unlock(&mu);
    if (!s) return;
    for (int d = 0; d < n; d++) pthread_cond_destroy(&s[d].cv);
    free(s);
}

void step_device_start(int rank) {
    if (!devices_stepping()) return;
    pthread_mutex_lock(&mu);
    await_baton(rank, 0);
    pthread_mutex_unlock(&mu);
}

void step_device_finish(int rank) {
    if (!devices_stepping()) return;
    pthread_mutex_lock(&mu);
    slots[rank].state = SLOT_DONE;
    hand_over(rank);
    pthread_mutex_unlock(&mu);
}

int step_block(int rank, step_ready_fn ready, const void *ctx, int64_t timeout_ns) {
    pthread_mutex_lock(&mu);
    step_slot_t *me = &slots[rank];
    me->state = SLOT_BLOCKED;
    me->ready = ready;
    me->ctx = ctx;
    atomic_store_explicit(&parity_debug.dev[rank].blocked, 1, memory_order_relaxed);
    hand_over(rank);
    const int rc = await_baton(rank, timeout_ns);
    atomic_store_explicit(&parity_debug.dev[rank].blocked, 0, memory_order_relaxed);
    me->ready = NULL;
    me->ctx = NULL;
    pthread_mutex_unlock(&mu);
    return rc;
}

int step_holder(void) {
    pthread_mutex_lock(&mu);
    const int h = slots ? holder : -1;
    pthread_mutex_unlock(&mu);
    return h;
}
