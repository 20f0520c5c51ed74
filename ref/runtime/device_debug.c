/* device_debug.c - what every device is doing, in one table a debugger
 * can read (runtime.h, parity_debug).
 *
 * ref/debug/parity_gdb.py prints it (`parity devices`): each device's
 * coordinates on the grid, its thread, the step, pass, unit, microbatch
 * and chunk it is in, and whether it holds the step-through baton. The
 * collectives keep, beside it, the call each device waits in
 * (coll_activity, coll_wait.c): `parity where`. A device thread writes
 * only its own entry, with relaxed atomics, so that the watchdog may read
 * it from another thread; a debugger reads it with every thread stopped.
 */
#include "parity/runtime.h"

#include <unistd.h>
#include <sys/syscall.h>

parity_debug_t parity_debug;

static device_debug_t *mine(void) {
    device_t *d = device_self();
    return d ? &parity_debug.dev[d->rank] : NULL;
}

void device_debug_begin(int world) {
    atomic_store_explicit(&parity_debug.world, world, memory_order_relaxed);
    for (int r = 0; r < world; r++) {
        device_debug_t *e = &parity_debug.dev[r];
        atomic_store_explicit(&e->tid, 0, memory_order_relaxed);
        atomic_store_explicit(&e->step, -1, memory_order_relaxed);
        atomic_store_explicit(&e->pass, DEVICE_PASS_SETUP, memory_order_relaxed);
        atomic_store_explicit(&e->unit, -1, memory_order_relaxed);
        atomic_store_explicit(&e->mb, -1, memory_order_relaxed);
        atomic_store_explicit(&e->chunk, -1, memory_order_relaxed);
        atomic_store_explicit(&e->blocked, 0, memory_order_relaxed);
    }
}

void device_debug_end(void) {
    const int world = atomic_load_explicit(&parity_debug.world, memory_order_relaxed);
    for (int r = 0; r < world; r++)
        atomic_store_explicit(&parity_debug.dev[r].has_coords, 0, memory_order_relaxed);
    atomic_store_explicit(&parity_debug.world, 0, memory_order_relaxed);
}

void device_debug_thread(int rank) {
    atomic_store_explicit(&parity_debug.dev[rank].tid, (int)syscall(SYS_gettid),
                          memory_order_relaxed);
}

void device_note_coords(int rank, const int coord[DEVICE_DEBUG_AXES],
                        const int sizes[DEVICE_DEBUG_AXES]) {
    if (rank < 0 || rank >= PARITY_MAX_DEVICES) return;
    device_debug_t *e = &parity_debug.dev[rank];
    for (int a = 0; a < DEVICE_DEBUG_AXES; a++) {
        atomic_store_explicit(&e->coord[a], coord[a], memory_order_relaxed);
        atomic_store_explicit(&parity_debug.grid[a], sizes[a], memory_order_relaxed);
    }
    atomic_store_explicit(&e->has_coords, 1, memory_order_relaxed);
}

void device_note_step(int64_t step) {
    device_debug_t *e = mine();
    if (e) atomic_store_explicit(&e->step, step, memory_order_relaxed);
}

void device_note_pass(device_pass_t pass, int unit) {
    device_debug_t *e = mine();
    if (!e) return;
    atomic_store_explicit(&e->pass, (int)pass, memory_order_relaxed);
    atomic_store_explicit(&e->unit, unit, memory_order_relaxed);
}

void device_note_microbatch(int mb, int chunk) {
    device_debug_t *e = mine();
    if (!e) return;
    atomic_store_explicit(&e->mb, mb, memory_order_relaxed);
    atomic_store_explicit(&e->chunk, chunk, memory_order_relaxed);
}

const char *device_pass_name(device_pass_t p) {
    static const char *const names[] = {"setup", "forward", "backward", "gradient reduction",
                                        "optimizer", "finished"};
    return (unsigned)p < sizeof names / sizeof names[0] ? names[p] : "?";
}
