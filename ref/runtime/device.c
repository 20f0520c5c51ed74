/* device.c - device threads: launch, join, device_self (see runtime.h).
 *
 * Threads are created first and held at a start gate; only when every
 * thread exists does any of them run fn. A thread that cannot be created
 * therefore never leaves its peers waiting in a collective for a rank
 * that does not exist: the gate opens with "abort" and nobody runs.
 */
#include "parity/runtime.h"
#include "runtime_internal.h"

#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static _Thread_local device_t *self;

static pthread_mutex_t run_mu = PTHREAD_MUTEX_INITIALIZER;
static int run_active;                       /* guarded by run_mu */
static _Atomic int run_world;                /* 0 when no run */
static _Atomic int run_cpus;                 /* CPUs the run may use */
static _Atomic int states[PARITY_MAX_DEVICES]; /* device_state_t per rank */

typedef struct {
    device_t dev;
    pthread_t thread;
    device_main_fn fn;
    void *arg;
    struct gate *gate;
} slot_t;

struct gate {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int open, abort;
};

/* A device thread's stack (address space; only touched pages are
 * resident). glibc's default is RLIMIT_STACK, 8 MiB: 128 GiB of address
 * space and commit charge at 16384 devices. Measured (NOTES-scale.md,
 * smaps of a 4096-device gpt check): 81 KiB resident a device stack, of
 * which 61 KiB is OpenBLAS's static TLS that glibc places (and zeroes) at
 * the stack's top and 20 KiB the deepest call chain; the largest frames a
 * device can reach are tables sized by PARITY_MAX_DEVICES (a rank layout
 * and a rank list, 96 KiB at 16384). 1 MiB keeps several times that.
 * Sanitizers multiply frames (ASan's redzones): they keep the default. */
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define DEVICE_STACK_BYTES ((size_t)0)
#else
#define DEVICE_STACK_BYTES ((size_t)1 << 20)
#endif

device_t *device_self(void) { return self; }

void device_bind_thread(device_t *dev) { self = dev; }

int devices_world(void) { return atomic_load(&run_world); }

int devices_cpus(void) {
    int n = atomic_load(&run_cpus);
    if (n > 0) return n;
    cpu_set_t set; /* outside a run: this thread's own mask */
    return sched_getaffinity(0, sizeof set, &set) == 0 ? CPU_COUNT(&set) : 1;
}

device_state_t device_state(int rank) {
    if (rank < 0 || rank >= PARITY_MAX_DEVICES) return DEVICE_NOT_STARTED;
    return (device_state_t)atomic_load(&states[rank]);
}

/* When every device can have a CPU of its own, give it one, as MPI binds
 * ranks to cores. Otherwise a device that sleeps in a collective is woken
 * onto its waker's CPU (the scheduler's wake-affine placement) and the two
 * then take turns on one core while the other runs something else:
 * measured on a busy 2-core machine, a 2-device all-reduce went from 1.2
 * to 200 us that way; on 16 cores pinning doubled all-reduce busbw at 8
 * and 16 devices. A single device is never pinned (nothing to wait for).
 * PARITY_PIN=0 turns it off. Returns the CPU count, or 0 for no pinning. */
static int pin_devices(int world, cpu_set_t *allowed, int *first) {
    if (sched_getaffinity(0, sizeof *allowed, allowed) != 0) return 0;
    int n = CPU_COUNT(allowed);
    atomic_store(&run_cpus, n); /* before pinning narrows the threads' masks */
    const char *env = getenv("PARITY_PIN");
    if ((env && !strcmp(env, "0")) || world < 2 || world > n) return 0;
    /* Start at the CPU we run on, so that runs started side by side from
     * different CPUs do not all stack their device 0 on CPU 0. */
    int here = sched_getcpu(), k = 0;
    *first = 0;
    for (int cpu = 0; cpu < CPU_SETSIZE && cpu <= here; cpu++)
        if (CPU_ISSET(cpu, allowed)) *first = k++;
    return n;
}

/* The first number in a /proc file, or -1. */
static long proc_long(const char *path) {
    FILE *f = fopen(path, "r");
    long v = -1;
    if (f) {
        if (fscanf(f, "%ld", &v) != 1) v = -1;
        fclose(f);
    }
    return v;
}

void host_limits_read(host_limits_t *h) {
    h->maps = -1;
    FILE *f = fopen("/proc/self/maps", "r");
    if (f) {
        h->maps = 0;
        for (int ch; (ch = fgetc(f)) != EOF;) h->maps += ch == '\n';
        fclose(f);
    }
    h->max_maps = proc_long("/proc/sys/vm/max_map_count");
    /* /proc/loadavg's 4th field is running/total scheduling entities */
    long running;
    h->threads = -1;
    if ((f = fopen("/proc/loadavg", "r"))) {
        if (fscanf(f, "%*s %*s %*s %ld/%ld", &running, &h->threads) != 2) h->threads = -1;
        fclose(f);
    }
    h->pid_max = proc_long("/proc/sys/kernel/pid_max");
    h->threads_max = proc_long("/proc/sys/kernel/threads-max");
}

int devices_check_limits(int world, const host_limits_t *h, perr_t *err) {
    const long maps = h->maps + 2L * world + DEVICES_MAP_HEADROOM;
    if (h->max_maps > 0 && h->maps >= 0 && maps > h->max_maps)
        return perr_set(err,
                        "devices_run: %d devices need about %ld memory mappings (2 a device "
                        "thread's stack, %ld in use, %d headroom), more than vm.max_map_count = "
                        "%ld (/proc/sys/vm/max_map_count); raise it or run fewer devices",
                        world, maps, h->maps, DEVICES_MAP_HEADROOM, h->max_maps);
    const struct { const char *name; long max; } lim[] = {
        {"kernel.pid_max (/proc/sys/kernel/pid_max)", h->pid_max},
        {"kernel.threads-max (/proc/sys/kernel/threads-max)", h->threads_max}};
    for (size_t k = 0; k < sizeof lim / sizeof lim[0]; k++)
        if (lim[k].max > 0 && h->threads >= 0 &&
            h->threads + (long)world + DEVICES_THREAD_HEADROOM > lim[k].max)
            return perr_set(err,
                            "devices_run: %d device threads beside the %ld threads on this host "
                            "(%d headroom) exceed %s = %ld; raise it or run fewer devices",
                            world, h->threads, DEVICES_THREAD_HEADROOM, lim[k].name, lim[k].max);
    return 0;
}

static void *device_thread(void *p) {
    slot_t *s = p;
    struct gate *g = s->gate;
    pthread_mutex_lock(&g->mu);
    while (!g->open) pthread_cond_wait(&g->cv, &g->mu);
    int abort = g->abort;
    pthread_mutex_unlock(&g->mu);
    if (abort) return NULL;
    self = &s->dev;
    device_debug_thread(s->dev.rank);
    step_device_start(s->dev.rank); /* step-through: wait for the baton */
    atomic_store(&states[s->dev.rank], DEVICE_RUNNING);
    s->fn(&s->dev, s->arg);
    device_note_pass(DEVICE_PASS_DONE, -1);
    atomic_store(&states[s->dev.rank], DEVICE_FINISHED);
    step_device_finish(s->dev.rank);
    self = NULL;
    return NULL;
}

static void open_gate(struct gate *g, int abort) {
    pthread_mutex_lock(&g->mu);
    g->open = 1;
    g->abort = abort;
    pthread_cond_broadcast(&g->cv);
    pthread_mutex_unlock(&g->mu);
}

int devices_run(int world, size_t arena_capacity, device_main_fn fn, void *arg, perr_t *err) {
    if (world < 1 || world > PARITY_MAX_DEVICES)
        return perr_set(err, "devices_run: world must be between 1 and %d devices, got %d",
                        PARITY_MAX_DEVICES, world);
    if (!fn) return perr_set(err, "devices_run: no device function given");
    pthread_mutex_lock(&run_mu);
    if (run_active) {
        pthread_mutex_unlock(&run_mu);
        return perr_set(err, "devices_run: a run is already in progress (runs do not nest)");
    }
    if (group_registry_check(world, err) != 0) {
        pthread_mutex_unlock(&run_mu);
        return -1;
    }
    host_limits_t lim;
    host_limits_read(&lim);
    if (world > 1 && devices_check_limits(world, &lim, err) != 0) {
        pthread_mutex_unlock(&run_mu);
        return -1;
    }
    if (runtime_run_begin(world, err) != 0) {
        pthread_mutex_unlock(&run_mu);
        return -1;
    }
    if (step_run_begin(world, err) != 0) {
        runtime_run_end();
        pthread_mutex_unlock(&run_mu);
        return -1;
    }
    run_active = 1;
    pthread_mutex_unlock(&run_mu);

    int rc = 0;
    struct gate gate = {.open = 0, .abort = 0};
    pthread_mutex_init(&gate.mu, NULL);
    pthread_cond_init(&gate.cv, NULL);
    slot_t *slots = calloc((size_t)world, sizeof *slots);
    if (!slots) {
        rc = perr_set(err, "devices_run: out of host memory for %d devices", world);
        goto done;
    }
    /* across processes only this process's device gets an arena and a thread */
    const int lo = runtime_run_distributed() ? runtime_process_rank() : 0;
    const int hi = runtime_run_distributed() ? lo + 1 : world;
    for (int r = 0; r < world; r++) {
        atomic_store(&states[r], DEVICE_NOT_STARTED);
        if (r < lo || r >= hi) continue;
        slots[r].dev.arena = arena_create(r, arena_capacity);
        if (!slots[r].dev.arena) {
            rc = perr_set(err, "devices_run: out of host memory creating the arena of device %d", r);
            goto free_arenas;
        }
        slots[r].dev.rank = r;
        slots[r].dev.world = world;
        slots[r].fn = fn;
        slots[r].arg = arg;
        slots[r].gate = &gate;
    }
    device_debug_begin(world);
    atomic_store(&run_world, world);
    cpu_set_t allowed;
    int first = 0, ncpu = pin_devices(hi - lo, &allowed, &first);
    int started = lo;
    for (; started < hi; started++) {
        pthread_attr_t attr;
        pthread_attr_init(&attr);
        if (DEVICE_STACK_BYTES) pthread_attr_setstacksize(&attr, DEVICE_STACK_BYTES);
        if (ncpu) { /* device r on the (first + r)-th CPU we may use */
            cpu_set_t one;
            CPU_ZERO(&one);
            int want = (first + started - lo) % ncpu;
            for (int cpu = 0, k = 0; cpu < CPU_SETSIZE; cpu++)
                if (CPU_ISSET(cpu, &allowed) && k++ == want) CPU_SET(cpu, &one);
            pthread_attr_setaffinity_np(&attr, sizeof one, &one);
        }
        int bad = pthread_create(&slots[started].thread, &attr, device_thread, &slots[started]);
        pthread_attr_destroy(&attr);
        if (bad != 0) {
            rc = perr_set(err, "devices_run: could not start the thread of device %d of %d", started,
                          world);
            break;
        }
    }
    open_gate(&gate, rc != 0);
    for (int r = lo; r < started; r++) pthread_join(slots[r].thread, NULL);
    atomic_store(&run_world, 0);
    atomic_store(&run_cpus, 0);
free_arenas:
    for (int r = 0; r < world; r++) arena_destroy(slots[r].dev.arena);
    free(slots);
done:
    step_run_end();
    runtime_run_end();
    device_debug_end();
    pthread_cond_destroy(&gate.cv);
    pthread_mutex_destroy(&gate.mu);
    pthread_mutex_lock(&run_mu);
    run_active = 0;
    pthread_mutex_unlock(&run_mu);
    return rc;
}
