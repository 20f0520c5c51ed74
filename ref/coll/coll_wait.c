/* coll_wait.c - waiting without melting down, and the hang watchdog.
 *
 * A waiter first spins for a short while when every device has its own
 * core: the peer is about to arrive, and a sleep/wake round trip through
 * the kernel costs microseconds. When there are more devices than cores,
 * the peer cannot run until we give up the core, so the waiter yields it
 * for a short while (yield_poll), then sleeps on a futex. Wakers only
 * make the wake syscall when someone sleeps.
 *
 * Every sleep has a deadline: a wait longer than the timeout means a hang,
 * and the watchdog prints, for every device of the run, what it is doing.
 */
#include "coll_impl.h"
#include "parity/numparse.h"

#include <errno.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <sched.h>
#include <unistd.h>
#ifdef __linux__
#include <linux/futex.h>
#include <sys/syscall.h>
#endif

/* ---- the clock, spinning, futexes ---- */

static int64_t now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

static inline void cpu_relax(void) {
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#elif defined(__aarch64__)
    __asm__ __volatile__("yield");
#endif
}

static void sleep_on(_Atomic uint32_t *addr, uint32_t seen, int64_t max_ns) {
#ifdef __linux__
    struct timespec ts = {.tv_sec = max_ns / 1000000000, .tv_nsec = max_ns % 1000000000};
    syscall(SYS_futex, (void *)addr, FUTEX_WAIT_PRIVATE, seen, &ts, NULL, 0);
#else /* no futex: a short nap, re-checked by the caller */
    (void)addr, (void)seen;
    struct timespec ts = {0, max_ns < 50000 ? max_ns : 50000};
    nanosleep(&ts, NULL);
#endif
}

static void wake_all(_Atomic uint32_t *addr) {
#ifdef __linux__
    syscall(SYS_futex, (void *)addr, FUTEX_WAKE_PRIVATE, INT_MAX, NULL, NULL, 0);
#else
    (void)addr;
#endif
}

int coll_cores(void) { return devices_cpus(); }

/* How long to spin before sleeping: 100 us when every device can have a
 * core (runtime pins each device to its own CPU then), not at all when
 * devices outnumber cores, where any spinning made every collective
 * slower (measured with 4, 8 and 32 devices on 2 cores). Spinning longer,
 * or spinning with sched_yield, did not help on a busy machine either:
 * the yield hands the core to the other process for a whole time slice.
 * PARITY_COLL_SPIN_US overrides. */
static _Atomic int64_t cfg_spin = -1;
static _Atomic int cfg_world = -1;

static int64_t spin_ns(void) {
    int world = devices_world();
    int64_t v = atomic_load_explicit(&cfg_spin, memory_order_relaxed);
    if (v >= 0 && atomic_load_explicit(&cfg_world, memory_order_relaxed) == world) return v;
    double us;
    perr_t e;
    if (coll_env_number("PARITY_COLL_SPIN_US", COLL_ENV_MAX_US, 0, &us, &e)) coll_die("%s", e.msg);
    v = us >= 0 ? (int64_t)(us * 1000.0) : world <= coll_cores() ? 100000 : 0;
    atomic_store_explicit(&cfg_spin, v, memory_order_relaxed);
    atomic_store_explicit(&cfg_world, world, memory_order_relaxed);
    return v;
}

static inline int reached(uint32_t value, uint32_t target) { return (int32_t)(value - target) >= 0; }

/* When devices outnumber cores, a waiter first polls with sched_yield for
 * up to 200 us before it sleeps: the peer it waits for is usually another
 * device thread on the same core, and a yield hands the core to it at
 * once, where a futex sleep and wake-up cost several microseconds and a
 * round through the scheduler each. Measured on 2 cores, a 4 KiB
 * all-reduce: 3.9 / 8 us at 4 / 8 devices, against 37 / 82 us sleeping at
 * once (OpenMPI: 17 / 62 us). On a machine busy with other processes a
 * yield hands the core to one of them for a whole time slice (4 KiB at 4
 * devices then took 2 ms a call), so a yield that returns after more than
 * 200 us turns polling off for every device for a while: 1 ms, doubled
 * at each such yield up to 100 ms, halved back at each poll that
 * succeeds. A long yield while another of our devices is computing (not
 * waiting) is explained by that device, which had the core, and does not
 * turn polling off: otherwise the waits of a 64 MiB all-reduce, whose
 * peers reduce chunks for milliseconds, left polling off for the small
 * collectives after it (a 4 KiB all-reduce at 8 devices took 79 us after
 * them, 8 us alone). PARITY_COLL_YIELD_US sets the budget (0: never
 * poll). */
enum { YIELD_LONG_NS = 200000, YIELD_QUIET_MIN_NS = 1000000, YIELD_QUIET_MAX_NS = 100000000 };
static _Atomic int64_t cfg_yield = -1;
static _Atomic int64_t yield_quiet_until;                /* no polling before this time (ns) */
static _Atomic int64_t yield_quiet_ns = YIELD_QUIET_MIN_NS; /* the next quiet period */
static _Atomic int waiting_devices; /* device threads inside coll_wword_wait's slow path */

static int64_t yield_budget_ns(void) {
    int64_t v = atomic_load_explicit(&cfg_yield, memory_order_relaxed);
    if (v >= 0) return v;
    double us;
    perr_t e;
    if (coll_env_number("PARITY_COLL_YIELD_US", COLL_ENV_MAX_US, 0, &us, &e)) coll_die("%s", e.msg);
    v = us >= 0 ? (int64_t)(us * 1000.0) : 200000;
    atomic_store_explicit(&cfg_yield, v, memory_order_relaxed);
    return v;
}

/* Polls w with sched_yield (devices outnumbering cores); 1 if it reached
 * target within the budget, 0 to go to sleep. */
static int yield_poll(wword_t *w, uint32_t target, int64_t start) {
    const int64_t budget = yield_budget_ns();
    if (budget <= 0 || devices_world() <= coll_cores() ||
        start < atomic_load_explicit(&yield_quiet_until, memory_order_relaxed))
        return 0;
    for (;;) {
        if (reached(atomic_load_explicit(&w->value, memory_order_acquire), target)) {
            const int64_t q = atomic_load_explicit(&yield_quiet_ns, memory_order_relaxed);
            if (q > YIELD_QUIET_MIN_NS)
                atomic_store_explicit(&yield_quiet_ns, q / 2, memory_order_relaxed);
            return 1;
        }
        /* sampled before the yield: a computing peer that had the core
         * gives it back by entering a wait, so afterwards it counts as
         * waiting */
        const int peer_computing =
            devices_world() > atomic_load_explicit(&waiting_devices, memory_order_relaxed);
        const int64_t t0 = now_ns();
        sched_yield();
        const int64_t t1 = now_ns();
        if (t1 - t0 > YIELD_LONG_NS) { /* the core went elsewhere for a slice */
            if (peer_computing) return 0; /* one of ours had it: not another process */
            const int64_t q = atomic_load_explicit(&yield_quiet_ns, memory_order_relaxed);
            atomic_store_explicit(&yield_quiet_until, t1 + q, memory_order_relaxed);
            atomic_store_explicit(&yield_quiet_ns, q < YIELD_QUIET_MAX_NS / 2 ? 2 * q : YIELD_QUIET_MAX_NS,
                                  memory_order_relaxed);
            return 0;
        }
        if (t1 - start >= budget) return 0;
    }
}

static _Noreturn void watchdog_fire(int64_t waited_ns);
static void step_deadlock_report(void);

static void wait_slow(wword_t *w, uint32_t target);

/* Step-through mode (runtime.h): instead of spinning or sleeping, hand
 * the baton to the next device that can run; it comes back once w has
 * reached target. The watchdog only watches when a timeout was asked
 * for (PARITY_COLL_TIMEOUT, coll_set_timeout): someone stopped in a
 * debugger is not a hang. */
typedef struct {
    wword_t *w;
    uint32_t target;
} wword_goal_t;

static int goal_reached(const void *p) {
    const wword_goal_t *g = p;
    return reached(atomic_load_explicit(&g->w->value, memory_order_acquire), g->target);
}

static _Atomic int timeout_explicit; /* set by PARITY_COLL_TIMEOUT or coll_set_timeout */

static void step_wait(int rank, wword_t *w, uint32_t target) {
    step_set_deadlock_reporter(step_deadlock_report);
    const wword_goal_t goal = {w, target};
    const int64_t start = now_ns(),
                  timeout = atomic_load(&timeout_explicit) ? coll_timeout_ns() : 0;
    if (step_block(rank, goal_reached, &goal, timeout) != 0) watchdog_fire(now_ns() - start);
}

void coll_wword_wait(wword_t *w, uint32_t target) {
    if (reached(atomic_load_explicit(&w->value, memory_order_acquire), target)) return;
    device_t *self = devices_stepping() ? device_self() : NULL;
    if (self) {
        step_wait(self->rank, w, target);
        return;
    }
    atomic_fetch_add_explicit(&waiting_devices, 1, memory_order_relaxed);
    wait_slow(w, target);
    atomic_fetch_sub_explicit(&waiting_devices, 1, memory_order_relaxed);
}

static void wait_slow(wword_t *w, uint32_t target) {
    int64_t start = now_ns(), spin = spin_ns();
    for (unsigned i = 1; spin > 0; i++) {
        if (reached(atomic_load_explicit(&w->value, memory_order_acquire), target)) return;
        cpu_relax();
        if ((i & 15) == 0 && now_ns() - start >= spin) break;
    }
    if (yield_poll(w, target, start)) return;
    int64_t deadline = start + coll_timeout_ns();
    for (;;) {
        /* Dekker with the waker: either it sees waiters > 0 or we see the
         * new value (both sides seq_cst). */
        atomic_fetch_add(&w->waiters, 1);
        uint32_t v = atomic_load(&w->value);
        if (reached(v, target)) {
            atomic_fetch_sub(&w->waiters, 1);
            return;
        }
        int64_t left = deadline - now_ns();
        if (left <= 0) {
            atomic_fetch_sub(&w->waiters, 1);
            watchdog_fire(now_ns() - start);
        }
        sleep_on(&w->value, v, left);
        atomic_fetch_sub(&w->waiters, 1);
        if (reached(atomic_load_explicit(&w->value, memory_order_acquire), target)) return;
    }
}

void coll_wword_set(wword_t *w, uint32_t value) {
    atomic_store(&w->value, value);
    if (atomic_load(&w->waiters)) wake_all(&w->value);
}

/* Phase p of a group completes when its n-th arrival lands; that member
 * publishes p in gen, which everyone else waits on. The fetch_add chain is
 * a release sequence, so the last arriver has seen every member's writes
 * and passes them on through gen. */
void coll_barrier_hook(coll_ctx_t *c, void (*hook)(coll_ctx_t *)) {
    uint64_t p = ++c->self->phase;
    uint64_t old = atomic_fetch_add_explicit(&c->cs->arrivals, 1, memory_order_acq_rel);
    if (old + 1 == p * (uint64_t)c->n) {
        if (hook) hook(c);
        coll_wword_set(&c->cs->gen, (uint32_t)p);
    } else {
        coll_wword_wait(&c->cs->gen, (uint32_t)p);
    }
}

void coll_barrier_wait(coll_ctx_t *c) { coll_barrier_hook(c, NULL); }

/* ---- the timeout ---- */

static _Atomic int64_t timeout_ns = -1; /* -1: not yet read from the env */

int64_t coll_timeout_ns(void) {
    int64_t t = atomic_load_explicit(&timeout_ns, memory_order_relaxed);
    if (t >= 0) return t;
    const char *env = getenv("PARITY_COLL_TIMEOUT");
    double s = 120.0;
    if (env && *env) {
        char *end;
        s = strtod(env, &end);
        if (!num_is_decimal(env, 1) || *end || !(s > 0) || s > 1e9)
            coll_die("PARITY_COLL_TIMEOUT='%s' is not a timeout: expected a positive number of seconds",
                     env);
    }
    int64_t want = (int64_t)(s * 1e9);
    if (env && *env) atomic_store(&timeout_explicit, 1);
    int64_t expected = -1; /* coll_set_timeout wins over the environment */
    if (!atomic_compare_exchange_strong(&timeout_ns, &expected, want)) return expected;
    return want;
}

double coll_set_timeout(double seconds) {
    double prev = (double)coll_timeout_ns() / 1e9;
    if (!(seconds > 0) || seconds > 1e9)
        parity_fatal("coll_set_timeout: %g is not a timeout: expected a positive number of seconds",
                     seconds);
    atomic_store(&timeout_ns, (int64_t)(seconds * 1e9));
    atomic_store(&timeout_explicit, 1);
    return prev;
}

double coll_get_timeout(void) { return (double)coll_timeout_ns() / 1e9; }

/* ---- activity: what each device is doing, for the report ---- */

coll_activity_t coll_activity[PARITY_MAX_DEVICES];

void coll_activity_enter(int world_rank, group_t *g, coll_kind_t kind, uint64_t seq, int peer,
                         int tag) {
    coll_activity_t *a = &coll_activity[world_rank];
    atomic_store_explicit(&a->kind, (int)kind, memory_order_relaxed);
    atomic_store_explicit(&a->seq, seq, memory_order_relaxed);
    atomic_store_explicit(&a->peer, peer, memory_order_relaxed);
    atomic_store_explicit(&a->tag, tag, memory_order_relaxed);
    atomic_store_explicit(&a->group, g, memory_order_release);
}

void coll_activity_exit(int world_rank) {
    atomic_store_explicit(&coll_activity[world_rank].group, NULL, memory_order_relaxed);
}

static _Atomic int dying;

static _Noreturn void wait_for_exit(void) {
    for (;;) pause(); /* the thread that got in first is reporting and exiting */
}

_Noreturn void coll_die(const char *fmt, ...) {
    if (atomic_exchange(&dying, 1)) wait_for_exit();
    char msg[2048];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    parity_fatal("%s", msg);
}

static void describe(int r, char *buf, size_t n) {
    device_state_t st = device_state(r);
    group_t *g = atomic_load_explicit(&coll_activity[r].group, memory_order_acquire);
    if (st == DEVICE_FINISHED) {
        snprintf(buf, n, "finished");
    } else if (st == DEVICE_NOT_STARTED) {
        snprintf(buf, n, "not started");
    } else if (!g) {
        snprintf(buf, n, "running (not in a collective)");
    } else {
        coll_activity_t *a = &coll_activity[r];
        coll_kind_t kind = (coll_kind_t)atomic_load_explicit(&a->kind, memory_order_relaxed);
        int peer = atomic_load_explicit(&a->peer, memory_order_relaxed);
        int tag = atomic_load_explicit(&a->tag, memory_order_relaxed);
        unsigned long long seq = atomic_load_explicit(&a->seq, memory_order_relaxed);
        int me = group_index_of(g, r);
        if (kind == COLL_KIND_SEND || kind == COLL_KIND_RECV)
            snprintf(buf, n, "waiting in %s %s rank %d (world %d) tag %d, group '%s' (rank %d of %d)",
                     coll_kind_name(kind), kind == COLL_KIND_SEND ? "to" : "from", peer,
                     group_world_rank(g, peer), tag, group_name(g), me, group_size(g));
        else
            snprintf(buf, n, "waiting in %s call #%llu of group '%s' (rank %d of %d)",
                     coll_kind_name(kind), seq, group_name(g), me, group_size(g));
    }
}

/* Members of the waiting thread's collective that are not in that same
 * call: the likely culprits, named first. */
static void print_missing(int me_world) {
    coll_activity_t *a = &coll_activity[me_world];
    group_t *g = atomic_load_explicit(&a->group, memory_order_acquire);
    coll_kind_t kind = (coll_kind_t)atomic_load_explicit(&a->kind, memory_order_relaxed);
    if (!g || kind == COLL_KIND_SEND || kind == COLL_KIND_RECV) return;
    uint64_t seq = atomic_load_explicit(&a->seq, memory_order_relaxed);
    for (int j = 0; j < group_size(g); j++) {
        int w = group_world_rank(g, j);
        coll_activity_t *b = &coll_activity[w];
        if (atomic_load_explicit(&b->group, memory_order_acquire) == g &&
            atomic_load_explicit(&b->seq, memory_order_relaxed) == seq)
            continue;
        char what[256];
        describe(w, what, sizeof what);
        fprintf(stderr, "parity: %s call #%llu of group '%s' has no rank %d (world %d), which is %s\n",
                coll_kind_name(kind), (unsigned long long)seq, group_name(g), j, w, what);
    }
}

static void print_every_device(void) {
    char what[256];
    fprintf(stderr, "parity: what every device is doing:\n");
    for (int r = 0; r < devices_world(); r++) {
        describe(r, what, sizeof what);
        fprintf(stderr, "  device %d: %s\n", r, what);
    }
}

/* Step-through found that no device can run: the same report as the
 * watchdog's, at once instead of after the timeout. */
static void step_deadlock_report(void) {
    if (atomic_exchange(&dying, 1)) wait_for_exit();
    device_t *d = device_self();
    fprintf(stderr, "parity: step-through: no device can run, and not every device has finished "
                    "(a deadlock, found when device %d handed the baton on)\n",
            d ? d->rank : -1);
    if (d) print_missing(d->rank);
    print_every_device();
    parity_fatal("collective deadlock (see the report above)");
}

static _Noreturn void watchdog_fire(int64_t waited_ns) {
    if (atomic_exchange(&dying, 1)) wait_for_exit();
    device_t *d = device_self();
    char what[256];
    describe(d ? d->rank : 0, what, sizeof what);
    fprintf(stderr, "parity: collective watchdog: device %d waited %.1f s (timeout %.1f s, "
                    "PARITY_COLL_TIMEOUT): %s\n",
            d ? d->rank : -1, (double)waited_ns / 1e9, (double)coll_timeout_ns() / 1e9, what);
    if (d) print_missing(d->rank);
    print_every_device();
    parity_fatal("collective hang (see the report above)");
}
