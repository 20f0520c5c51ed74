/* coll_counters.c - per-rank byte counters with nccl-tests' algbw/busbw
 * conventions (documented in coll.h).
 *
 * Counters live in a table indexed by world rank that outlives runs, so
 * the main thread can read them after devices_run returns; each rank only
 * adds to its own row, with relaxed atomics so that reading them while a
 * run is in progress is still race-free.
 */
#include "coll_impl.h"

#include <stdlib.h>
#include <string.h>

/* ---- byte counters ---- */

typedef struct {
    _Atomic uint64_t calls[COLL_NKINDS], bytes[COLL_NKINDS], bus_bytes[COLL_NKINDS];
    _Atomic uint64_t sent[COLL_NKINDS], recv[COLL_NKINDS];
} counters_t;

static _Atomic(counters_t *) counters[PARITY_MAX_DEVICES];

static counters_t *counters_of(int r) {
    counters_t *k = atomic_load_explicit(&counters[r], memory_order_acquire);
    if (k) return k;
    counters_t *mine = calloc(1, sizeof *mine);
    if (!mine) parity_fatal("collectives: out of host memory for counters");
    counters_t *expected = NULL;
    if (atomic_compare_exchange_strong(&counters[r], &expected, mine)) return mine;
    free(mine);
    return expected;
}

double coll_busbw_factor(coll_kind_t kind, int n) {
    switch (kind) {
    case COLL_KIND_ALL_REDUCE: return 2.0 * (n - 1) / n;
    case COLL_KIND_REDUCE_SCATTER:
    case COLL_KIND_ALL_GATHER:
    case COLL_KIND_ALL_TO_ALL:
    case COLL_KIND_ALL_TO_ALL_V: return (double)(n - 1) / n;
    case COLL_KIND_BARRIER: return 0.0;
    default: return 1.0;
    }
}

void coll_count(int r, coll_kind_t kind, uint64_t bytes, double factor, uint64_t sent, uint64_t recvd) {
    counters_t *k = counters_of(r);
    atomic_fetch_add_explicit(&k->calls[kind], 1, memory_order_relaxed);
    atomic_fetch_add_explicit(&k->bytes[kind], bytes, memory_order_relaxed);
    atomic_fetch_add_explicit(&k->bus_bytes[kind], (uint64_t)((double)bytes * factor + 0.5),
                              memory_order_relaxed);
    atomic_fetch_add_explicit(&k->sent[kind], sent, memory_order_relaxed);
    atomic_fetch_add_explicit(&k->recv[kind], recvd, memory_order_relaxed);
}

void coll_count_traffic(int r, coll_kind_t kind, uint64_t sent, uint64_t recvd) {
    counters_t *k = counters_of(r);
    if (sent) atomic_fetch_add_explicit(&k->sent[kind], sent, memory_order_relaxed);
    if (recvd) atomic_fetch_add_explicit(&k->recv[kind], recvd, memory_order_relaxed);
}

void coll_counters_get(int world_rank, coll_counters_t *out) {
    memset(out, 0, sizeof *out);
    if (world_rank < 0 || world_rank >= PARITY_MAX_DEVICES) return;
    counters_t *k = atomic_load_explicit(&counters[world_rank], memory_order_acquire);
    if (!k) return;
    for (int i = 0; i < COLL_NKINDS; i++) {
        out->calls[i] = atomic_load_explicit(&k->calls[i], memory_order_relaxed);
        out->bytes[i] = atomic_load_explicit(&k->bytes[i], memory_order_relaxed);
        out->bus_bytes[i] = atomic_load_explicit(&k->bus_bytes[i], memory_order_relaxed);
        out->sent[i] = atomic_load_explicit(&k->sent[i], memory_order_relaxed);
        out->recv[i] = atomic_load_explicit(&k->recv[i], memory_order_relaxed);
    }
}

void coll_counters_reset(int world_rank) {
    for (int r = 0; r < PARITY_MAX_DEVICES; r++) {
        if (world_rank >= 0 && r != world_rank) continue;
        counters_t *k = atomic_load_explicit(&counters[r], memory_order_acquire);
        if (!k) continue;
        for (int i = 0; i < COLL_NKINDS; i++) {
            atomic_store_explicit(&k->calls[i], 0, memory_order_relaxed);
            atomic_store_explicit(&k->bytes[i], 0, memory_order_relaxed);
            atomic_store_explicit(&k->bus_bytes[i], 0, memory_order_relaxed);
            atomic_store_explicit(&k->sent[i], 0, memory_order_relaxed);
            atomic_store_explicit(&k->recv[i], 0, memory_order_relaxed);
        }
    }
}

void coll_counters_add(int world_rank, coll_kind_t kind, uint64_t bytes, double factor) {
    uint64_t bus = (uint64_t)((double)bytes * factor);
    coll_count(world_rank, kind, bytes, factor, bus, bus);
}
