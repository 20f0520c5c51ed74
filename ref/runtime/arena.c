/* arena.c - simulated device memory with accounting (see runtime.h).
 *
 * Each allocation is a host block whose first 64 bytes are a header
 * (size, category, name, slot in the live table); the caller gets the
 * 64-byte aligned bytes after it. The live table lets arena_free work in
 * O(1) and lets an out-of-memory report list the largest live blocks,
 * which is the first thing anyone asks when a layout does not fit.
 *
 * A mutex guards the accounting: an arena normally belongs to one device
 * thread, but the main thread may read its figures while it runs.
 */
#include "parity/runtime.h"

#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define ARENA_ALIGN 64
#define HEADER_MAGIC 0x70617279u /* "pary" */
#define NAME_CHARS 40
#define REPORT_TOP 5 /* largest live allocations named in an OOM report */

typedef struct {
    uint32_t magic;
    uint32_t cat;
    size_t bytes;
    size_t slot; /* index in arena->live */
    char name[NAME_CHARS];
} header_t;
_Static_assert(sizeof(header_t) == ARENA_ALIGN, "header must keep 64-byte alignment");

struct arena {
    int device;
    size_t capacity; /* SIZE_MAX when unlimited */
    pthread_mutex_t mu;
    size_t in_use[MEM_NCAT], high_water[MEM_NCAT];
    size_t total, total_high_water;
    header_t **live; /* live blocks, unordered */
    size_t nlive, cap_live;
    /* the last failure's report, allocated by the first failure: 2 KiB
     * in every arena was 32 MiB of zeroed host memory at 16384 devices */
    char *last_error;
    int failed; /* an allocation failed (its report may have found no room) */
};

enum { LAST_ERROR_BYTES = 2048 };
/* The report buffer of a failure, or NULL when the host cannot give
 * even that (arena_last_error then says so). */
static char *error_buffer(arena_t *a) {
    a->failed = 1;
    if (!a->last_error) a->last_error = malloc(LAST_ERROR_BYTES);
    return a->last_error;
}

static const char *const cat_names[MEM_NCAT] = {
    "params", "grads", "optimizer", "activations", "comm", "workspace",
};

const char *mem_cat_name(mem_cat_t cat) {
    return (unsigned)cat < MEM_NCAT ? cat_names[cat] : "total";
}

arena_t *arena_create(int device, size_t capacity) {
    arena_t *a = calloc(1, sizeof *a);
    if (!a) return NULL;
    a->device = device;
    a->capacity = capacity ? capacity : SIZE_MAX;
    pthread_mutex_init(&a->mu, NULL);
    return a;
}

void arena_destroy(arena_t *a) {
    if (!a) return;
    for (size_t i = 0; i < a->nlive; i++) free(a->live[i]);
    free(a->live);
    free(a->last_error);
    pthread_mutex_destroy(&a->mu);
    free(a);
}

/* Human-readable byte counts for reports: "3.00 MiB (3145728 bytes)". */
static void fmt_bytes(char *buf, size_t n, size_t bytes) {
    const char *unit[] = {"B", "KiB", "MiB", "GiB", "TiB"};
    double v = (double)bytes;
    int u = 0;
    while (v >= 1024.0 && u < 4) v /= 1024.0, u++;
    if (u == 0) snprintf(buf, n, "%zu B", bytes);
    else snprintf(buf, n, "%.2f %s (%zu bytes)", v, unit[u], bytes);
}

/* Called with a->mu held. */
static void write_oom_report(arena_t *a, size_t bytes, mem_cat_t cat, const char *name) {
    char req[64], capb[64], useb[64];
    fmt_bytes(req, sizeof req, bytes);
    fmt_bytes(capb, sizeof capb, a->capacity);
    fmt_bytes(useb, sizeof useb, a->total);
    char *p = error_buffer(a);
    size_t left = LAST_ERROR_BYTES;
    if (!p) return;
#define EMIT(...)                                                    \
    do {                                                             \
        int k_ = snprintf(p, left, __VA_ARGS__);                     \
        if (k_ < 0 || (size_t)k_ >= left) return;                    \
        p += k_, left -= (size_t)k_;                                 \
    } while (0)
    EMIT("device %d: out of memory: cannot allocate %s for '%s' (%s)\n", a->device, req,
         name ? name : "?", mem_cat_name(cat));
    EMIT("  capacity %s, in use %s:", capb, useb);
    for (int c = 0; c < MEM_NCAT; c++) {
        char b[64];
        fmt_bytes(b, sizeof b, a->in_use[c]);
        EMIT(" %s %s%s", cat_names[c], b, c + 1 < MEM_NCAT ? "," : "\n");
    }
    /* The REPORT_TOP largest live blocks: a partial selection sort over
     * indexes, so the table itself keeps its order. */
    size_t pick[REPORT_TOP];
    size_t npick = 0;
    for (; npick < REPORT_TOP && npick < a->nlive; npick++) {
        size_t best = SIZE_MAX;
        for (size_t i = 0; i < a->nlive; i++) {
            int taken = 0;
            for (size_t j = 0; j < npick; j++) taken |= pick[j] == i;
            if (taken) continue;
            if (best == SIZE_MAX || a->live[i]->bytes > a->live[best]->bytes) best = i;
        }
        pick[npick] = best;
    }
    EMIT("  largest live allocations (%zu live):%s", a->nlive, npick ? "\n" : " none\n");
    for (size_t j = 0; j < npick; j++) {
        const header_t *h = a->live[pick[j]];
        char b[64];
        fmt_bytes(b, sizeof b, h->bytes);
        EMIT("    %-24s %-12s %s\n", h->name, mem_cat_name((mem_cat_t)h->cat), b);
    }
#undef EMIT
}

void *arena_alloc(arena_t *a, size_t bytes, mem_cat_t cat, const char *name) {
    if ((unsigned)cat >= MEM_NCAT) parity_fatal("arena_alloc: category %d is not a mem_cat_t", (int)cat);
    pthread_mutex_lock(&a->mu);
    if (bytes > a->capacity - a->total || bytes > SIZE_MAX - 2 * ARENA_ALIGN) {
        write_oom_report(a, bytes, cat, name);
        pthread_mutex_unlock(&a->mu);
        return NULL;
    }
    if (a->nlive == a->cap_live) {
        size_t ncap = a->cap_live ? 2 * a->cap_live : 64;
        header_t **nl = realloc(a->live, ncap * sizeof *nl);
        if (!nl) goto host_oom;
        a->live = nl, a->cap_live = ncap;
    }
    size_t block = ARENA_ALIGN + (bytes + ARENA_ALIGN - 1) / ARENA_ALIGN * ARENA_ALIGN;
    header_t *h = aligned_alloc(ARENA_ALIGN, block);
    if (!h) goto host_oom;
    memset(h, 0, block);
    h->magic = HEADER_MAGIC;
    h->cat = (uint32_t)cat;
    h->bytes = bytes;
    h->slot = a->nlive;
    snprintf(h->name, sizeof h->name, "%s", name ? name : "?");
    a->live[a->nlive++] = h;
    a->in_use[cat] += bytes;
    a->total += bytes;
    if (a->in_use[cat] > a->high_water[cat]) a->high_water[cat] = a->in_use[cat];
    if (a->total > a->total_high_water) a->total_high_water = a->total;
    pthread_mutex_unlock(&a->mu);
    return h + 1;
host_oom:
    if (error_buffer(a))
        snprintf(a->last_error, LAST_ERROR_BYTES,
                 "device %d: the host itself is out of memory allocating %zu bytes for '%s'",
                 a->device, bytes, name ? name : "?");
    pthread_mutex_unlock(&a->mu);
    return NULL;
}

void *arena_alloc_or_die(arena_t *a, size_t bytes, mem_cat_t cat, const char *name) {
    void *p = arena_alloc(a, bytes, cat, name);
    if (!p) parity_fatal("%s", arena_last_error(a));
    return p;
}

void arena_free(arena_t *a, void *p) {
    if (!p) return;
    header_t *h = (header_t *)p - 1;
    pthread_mutex_lock(&a->mu);
    if (h->magic != HEADER_MAGIC || h->slot >= a->nlive || a->live[h->slot] != h)
        parity_fatal("arena_free: device %d: %p was not allocated by this arena (or was freed twice)",
                     a->device, p);
    a->in_use[h->cat] -= h->bytes;
    a->total -= h->bytes;
    header_t *moved = a->live[--a->nlive];
    a->live[h->slot] = moved;
    moved->slot = h->slot;
    h->magic = 0;
    pthread_mutex_unlock(&a->mu);
    free(h);
}

size_t arena_capacity(const arena_t *a) { return a->capacity == SIZE_MAX ? 0 : a->capacity; }

/* The getters lock a mutex inside a const object: the lock is not part
 * of the arena's observable state. */
#define LOCKED(a, expr)                                              \
    do {                                                             \
        pthread_mutex_t *mu_ = (pthread_mutex_t *)&(a)->mu;          \
        pthread_mutex_lock(mu_);                                     \
        size_t v_ = (expr);                                          \
        pthread_mutex_unlock(mu_);                                   \
        return v_;                                                   \
    } while (0)

size_t arena_in_use(const arena_t *a, mem_cat_t cat) {
    LOCKED(a, (unsigned)cat < MEM_NCAT ? a->in_use[cat] : a->total);
}

size_t arena_high_water(const arena_t *a, mem_cat_t cat) {
    LOCKED(a, (unsigned)cat < MEM_NCAT ? a->high_water[cat] : a->total_high_water);
}

void arena_reset_high_water(arena_t *a) {
    pthread_mutex_lock(&a->mu);
    memcpy(a->high_water, a->in_use, sizeof a->high_water);
    a->total_high_water = a->total;
    pthread_mutex_unlock(&a->mu);
}

void arena_get_stats(const arena_t *a, arena_stats_t *out) {
    pthread_mutex_t *mu = (pthread_mutex_t *)&a->mu;
    pthread_mutex_lock(mu);
    out->device = a->device;
    out->capacity = arena_capacity(a);
    memcpy(out->in_use, a->in_use, sizeof out->in_use);
    memcpy(out->high_water, a->high_water, sizeof out->high_water);
    out->total_in_use = a->total;
    out->total_high_water = a->total_high_water;
    out->live_allocations = a->nlive;
    pthread_mutex_unlock(mu);
}

const char *arena_last_error(const arena_t *a) {
    if (a->last_error) return a->last_error;
    return a->failed ? "an arena allocation failed, and the host had no memory for its report" : "";
}

void arena_print_report(const arena_t *a, FILE *f) {
    arena_stats_t s;
    arena_get_stats(a, &s);
    char b[64];
    if (s.capacity) fmt_bytes(b, sizeof b, s.capacity);
    fprintf(f, "device %d memory (capacity %s):\n", s.device, s.capacity ? b : "unlimited");
    fprintf(f, "  %-12s %28s %28s\n", "category", "in use", "high water");
    for (int c = 0; c <= MEM_NCAT; c++) {
        size_t use = c < MEM_NCAT ? s.in_use[c] : s.total_in_use;
        size_t peak = c < MEM_NCAT ? s.high_water[c] : s.total_high_water;
        char u[64], p[64];
        fmt_bytes(u, sizeof u, use);
        fmt_bytes(p, sizeof p, peak);
        fprintf(f, "  %-12s %28s %28s\n", mem_cat_name((mem_cat_t)c), u, p);
    }
}
