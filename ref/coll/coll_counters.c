/* coll_counters.c - per-rank byte counters with nccl-tests' algbw/busbw
 * conventions (documented in coll.h).
 *
 * Counters live in a table indexed by world rank that outlives runs, so
 * the main thread can read them after devices_run returns. A row is
 * added to by its rank's threads and, for the exception payload of open
 * sums, by the peers that move it (coll_open.c), so every field is a
 * relaxed atomic: reading them while a run is in progress is race-free.
 * A row's families are allocated when first used and never move: a
 * lookup reads the published ones without a lock, and only registering a
 * new one (a handful per rank, ever) takes the mutex.
 */
#include "coll_impl.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- byte counters ---- */

typedef struct {
    _Atomic uint64_t calls, bytes, bus_bytes, sent, recv;
} tally_t;

/* A family's tallies come in a row per kind, allocated on the kind's
 * first call: a family uses two or three of the ten kinds, and the full
 * table (2 KiB a family, 10 KiB a device) was 160 MiB at 16384 devices. */
typedef struct {
    char name[COLL_FAMILY_NAME];
    _Atomic(tally_t *) by[COLL_NKINDS]; /* [COLL_NDTYPES] each, or NULL */
} family_t;

typedef struct {
    _Atomic uint64_t calls[COLL_NKINDS], bytes[COLL_NKINDS], bus_bytes[COLL_NKINDS];
    _Atomic uint64_t sent[COLL_NKINDS], recv[COLL_NKINDS];
    _Atomic int nfamilies;                        /* published entries of family[] */
    _Atomic(family_t *) family[COLL_MAX_FAMILIES];
} counters_t;

static _Atomic(counters_t *) counters[PARITY_MAX_DEVICES];
static pthread_mutex_t family_mu = PTHREAD_MUTEX_INITIALIZER; /* registers families */

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

/* A group's family: its name without the trailing index, truncated. */
static size_t family_of(const group_t *g, char out[COLL_FAMILY_NAME]) {
    const char *name = g ? g->name : "";
    size_t len = strlen(name);
    while (len > 0 && name[len - 1] >= '0' && name[len - 1] <= '9') len--;
    if (len > COLL_FAMILY_NAME - 1) len = COLL_FAMILY_NAME - 1;
    memcpy(out, name, len);
    out[len] = 0;
    return len;
}

static family_t *find_family(counters_t *k, int n, const char *name) {
    for (int i = 0; i < n; i++) {
        family_t *f = atomic_load_explicit(&k->family[i], memory_order_relaxed);
        if (!strcmp(f->name, name)) return f;
    }
    return NULL;
}

/* Registers under the mutex; the last slot is the catch-all "*". */
static family_t *add_family(counters_t *k, const char *name) {
    pthread_mutex_lock(&family_mu);
    int n = atomic_load_explicit(&k->nfamilies, memory_order_relaxed);
    family_t *f = find_family(k, n, name);
    if (!f && n == COLL_MAX_FAMILIES) f = find_family(k, n, "*");
    if (!f) { /* a slot a reset left behind is reused: its tallies are zero */
        f = atomic_load_explicit(&k->family[n], memory_order_relaxed);
        if (!f && !(f = calloc(1, sizeof *f)))
            parity_fatal("collectives: out of host memory for counters");
        snprintf(f->name, sizeof f->name, "%s", n == COLL_MAX_FAMILIES - 1 ? "*" : name);
        atomic_store_explicit(&k->family[n], f, memory_order_relaxed);
        atomic_store_explicit(&k->nfamilies, n + 1, memory_order_release);
    }
    pthread_mutex_unlock(&family_mu);
    return f;
}

/* The family's row of `kind`, published once (a racing copy is dropped),
 * as counters_of publishes a rank's counters. */
static tally_t *row_of(family_t *f, coll_kind_t kind) {
    tally_t *row = atomic_load_explicit(&f->by[kind], memory_order_acquire);
    if (row) return row;
    tally_t *mine = calloc(COLL_NDTYPES, sizeof *mine);
    if (!mine) parity_fatal("collectives: out of host memory for counters");
    tally_t *expected = NULL;
    if (atomic_compare_exchange_strong(&f->by[kind], &expected, mine)) return mine;
    free(mine);
    return expected;
}

static tally_t *tally_of(counters_t *k, const group_t *g, coll_kind_t kind, coll_dtype_t dt) {
    char name[COLL_FAMILY_NAME];
    family_of(g, name);
    int n = atomic_load_explicit(&k->nfamilies, memory_order_acquire);
    family_t *f = find_family(k, n, name);
    if (!f) f = n == COLL_MAX_FAMILIES ? find_family(k, n, "*") : add_family(k, name);
    return &row_of(f, kind)[(unsigned)dt < COLL_NDTYPES ? dt : COLL_I32];
}

static void add(_Atomic uint64_t *x, uint64_t v) {
    if (v) atomic_fetch_add_explicit(x, v, memory_order_relaxed);
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

void coll_count(int r, const group_t *g, coll_kind_t kind, coll_dtype_t dt, uint64_t bytes,
                double factor, uint64_t sent, uint64_t recvd) {
    counters_t *k = counters_of(r);
    const uint64_t bus = (uint64_t)((double)bytes * factor + 0.5);
    add(&k->calls[kind], 1), add(&k->bytes[kind], bytes), add(&k->bus_bytes[kind], bus);
    add(&k->sent[kind], sent), add(&k->recv[kind], recvd);
    tally_t *t = tally_of(k, g, kind, dt);
    add(&t->calls, 1), add(&t->bytes, bytes), add(&t->bus_bytes, bus);
    add(&t->sent, sent), add(&t->recv, recvd);
}

void coll_count_traffic(int r, const group_t *g, coll_kind_t kind, coll_dtype_t dt, uint64_t sent,
                        uint64_t recvd) {
    counters_t *k = counters_of(r);
    add(&k->sent[kind], sent), add(&k->recv[kind], recvd);
    tally_t *t = tally_of(k, g, kind, dt);
    add(&t->sent, sent), add(&t->recv, recvd);
}

static uint64_t get(_Atomic uint64_t *x) { return atomic_load_explicit(x, memory_order_relaxed); }

static void get_tally(tally_t *t, coll_tally_t *out) {
    *out = (coll_tally_t){get(&t->calls), get(&t->bytes), get(&t->bus_bytes), get(&t->sent),
                          get(&t->recv)};
}

void coll_counters_get(int world_rank, coll_counters_t *out) {
    memset(out, 0, sizeof *out);
    if (world_rank < 0 || world_rank >= PARITY_MAX_DEVICES) return;
    counters_t *k = atomic_load_explicit(&counters[world_rank], memory_order_acquire);
    if (!k) return;
    for (int i = 0; i < COLL_NKINDS; i++) {
        out->calls[i] = get(&k->calls[i]);
        out->bytes[i] = get(&k->bytes[i]);
        out->bus_bytes[i] = get(&k->bus_bytes[i]);
        out->sent[i] = get(&k->sent[i]);
        out->recv[i] = get(&k->recv[i]);
    }
    out->nfamilies = atomic_load_explicit(&k->nfamilies, memory_order_acquire);
    for (int i = 0; i < out->nfamilies; i++) {
        family_t *f = atomic_load_explicit(&k->family[i], memory_order_relaxed);
        memcpy(out->family[i].name, f->name, sizeof f->name);
        for (int a = 0; a < COLL_NKINDS; a++) {
            tally_t *row = atomic_load_explicit(&f->by[a], memory_order_acquire);
            for (int b = 0; row && b < COLL_NDTYPES; b++) get_tally(&row[b], &out->family[i].by[a][b]);
        }
    }
}

const coll_family_t *coll_counters_family(const coll_counters_t *c, const char *family) {
    for (int i = 0; i < c->nfamilies; i++)
        if (!strcmp(c->family[i].name, family)) return &c->family[i];
    return NULL;
}

static void zero(_Atomic uint64_t *x) { atomic_store_explicit(x, 0, memory_order_relaxed); }

/* Zeroes the tallies and forgets the families' names (a long process,
 * such as a test running many layouts, must not fill the table with the
 * groups of earlier runs); their memory stays for the next ones. */
static void reset_row(counters_t *k) {
    for (int i = 0; i < COLL_NKINDS; i++) {
        zero(&k->calls[i]), zero(&k->bytes[i]), zero(&k->bus_bytes[i]);
        zero(&k->sent[i]), zero(&k->recv[i]);
    }
    pthread_mutex_lock(&family_mu);
    int n = atomic_load_explicit(&k->nfamilies, memory_order_acquire);
    atomic_store_explicit(&k->nfamilies, 0, memory_order_release);
    pthread_mutex_unlock(&family_mu);
    for (int i = 0; i < n; i++) {
        family_t *f = atomic_load_explicit(&k->family[i], memory_order_relaxed);
        for (int a = 0; a < COLL_NKINDS; a++) {
            tally_t *row = atomic_load_explicit(&f->by[a], memory_order_acquire);
            for (int b = 0; row && b < COLL_NDTYPES; b++) {
                tally_t *t = &row[b];
                zero(&t->calls), zero(&t->bytes), zero(&t->bus_bytes), zero(&t->sent), zero(&t->recv);
            }
        }
    }
}

void coll_counters_reset(int world_rank) {
    for (int r = 0; r < PARITY_MAX_DEVICES; r++) {
        if (world_rank >= 0 && r != world_rank) continue;
        counters_t *k = atomic_load_explicit(&counters[r], memory_order_acquire);
        if (k) reset_row(k);
    }
}

void coll_counters_add(int world_rank, coll_kind_t kind, uint64_t bytes, double factor) {
    uint64_t bus = (uint64_t)((double)bytes * factor);
    coll_count(world_rank, NULL, kind, COLL_XVEC, bytes, factor, bus, bus);
}
