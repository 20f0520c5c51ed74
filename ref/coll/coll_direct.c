/* coll_direct.c - collectives through shared memory, no hand-offs.
 *
 * After the arrival barrier every rank can see every peer's buffers, so
 * each rank does its share of the work by reading (and, for all-reduce,
 * writing) peers' memory directly, and a departure barrier tells everyone
 * that nobody touches their buffers any more. Two barriers per call, and
 * every byte moves once. A small call is done whole by the last rank to
 * arrive, inside the arrival barrier (direct_whole, at the end).
 *
 * Reductions run in blocks that stay in L1: the n source blocks are
 * combined into a small buffer in group order ((x0 + x1) + x2) + ..., and
 * the result is copied out. Going through the buffer also makes every
 * in-place form safe, since a block is fully read before it is written.
 */
#include "coll_impl.h"

#include <stdlib.h>
#include <string.h>

/* Reduction block size. Shrinking it with the group (to keep all n source
 * blocks in L1) measured slower: the per-block copies dominate. */
#define BLOCK_BYTES 8192
/* Calls whose data fits this budget (bytes the one thread reads) are done
 * whole by the last rank to arrive: one barrier instead of two, and no
 * wake-up round for the others to do a few microseconds of work each,
 * which is what costs most when devices outnumber cores. Measured with 2
 * cores: for 4, 8 devices a 4 KiB all-reduce takes 20 / 45 us this way
 * against 29 / 62 us split; with a core per device splitting wins from
 * a few KiB on (4 KiB, 2 devices: 1.6 us split, 3.2 us whole).
 * PARITY_COLL_WHOLE_BYTES overrides (0 disables). */
#define WHOLE_BYTES_SPARE_CORES ((size_t)4 << 10)
#define WHOLE_BYTES_OVERSUBSCRIBED ((size_t)64 << 10)
#define SMALL_GROUP 64 /* pointer tables up to this size live on the stack */

typedef struct {
    const void *small[SMALL_GROUP];
    const void **p;
} ptrs_t;

static const void **ptrs_init(ptrs_t *t, int n) {
    t->p = n <= SMALL_GROUP ? t->small : malloc((size_t)n * sizeof *t->p);
    if (!t->p) parity_fatal("collectives: out of host memory");
    return t->p;
}

static void ptrs_free(ptrs_t *t) {
    if (t->p != t->small) free(t->p);
}

static inline const char *at(const void *base, size_t elem, size_t es) {
    return (const char *)base + elem * es;
}

void coll_chunk(size_t count, int n, int i, size_t align, size_t *lo, size_t *hi) {
    size_t len = (count + (size_t)n - 1) / (size_t)n;
    len = (len + align - 1) / align * align;
    *lo = (size_t)i * len < count ? (size_t)i * len : count;
    *hi = count - *lo < len ? count : *lo + len;
}

/* Each rank's slice of a count-element buffer: equal, line-aligned. */
static void my_slice(const coll_ctx_t *c, size_t count, size_t *lo, size_t *hi) {
    coll_chunk(count, c->n, c->me, coll_align_elems((coll_dtype_t)c->call->dtype), lo, hi);
}

/* out[0 .. hi-lo) = op over ranks j of src_j[lo .. hi), one block at a
 * time; emit(block, first element, length, ctx) copies each block out. */
typedef void (*emit_fn)(const void *blk, size_t first, size_t len, const coll_ctx_t *c, void *arg);

static void reduce_blocks(const coll_ctx_t *c, const void *const *srcs, size_t lo, size_t hi,
                          emit_fn emit, void *arg) {
    alignas(COLL_CACHE_LINE) unsigned char tmp[BLOCK_BYTES];
    size_t es = c->esize, per = BLOCK_BYTES / es;
    ptrs_t t;
    const void **src = ptrs_init(&t, c->n);
    for (size_t b = lo; b < hi; b += per) {
        size_t len = hi - b < per ? hi - b : per;
        for (int j = 0; j < c->n; j++) src[j] = at(srcs[j], b, es);
        coll_reduce_into(tmp, src, c->n, len, (coll_dtype_t)c->call->dtype, (coll_op_t)c->call->op);
        emit(tmp, b, len, c, arg);
    }
    ptrs_free(&t);
}

static void emit_to_all_recv(const void *blk, size_t first, size_t len, const coll_ctx_t *c, void *arg) {
    (void)arg;
    for (int k = 0; k < c->n; k++) { /* start past myself: spreads the writers */
        int j = (c->me + 1 + k) % c->n;
        memcpy((char *)peer_call(c, j)->recv + first * c->esize, blk, len * c->esize);
    }
}

/* Where a reduced range goes: element `first0` of it lands at dst. */
typedef struct {
    char *dst;
    size_t first0;
} place_t;

static void emit_to(const void *blk, size_t first, size_t len, const coll_ctx_t *c, void *arg) {
    const place_t *pl = arg;
    memcpy(pl->dst + (first - pl->first0) * c->esize, blk, len * c->esize);
}

static void send_pointers(const coll_ctx_t *c, const void **p) {
    for (int j = 0; j < c->n; j++) p[j] = peer_call(c, j)->send;
}

/* A rank whose slice is empty (a count below the group's size: most
 * ranks of a world-wide norm or loss sum) builds no pointer table: at
 * 16384 devices the tables were 2 x 128 KiB on every device at once,
 * 4 GiB and O(world^2) work for one scalar. */
void direct_all_reduce(coll_ctx_t *c) {
    coll_call_t *d = c->call;
    size_t lo, hi;
    my_slice(c, d->count, &lo, &hi);
    if (lo < hi) {
        ptrs_t t;
        const void **send = ptrs_init(&t, c->n);
        send_pointers(c, send);
        reduce_blocks(c, send, lo, hi, emit_to_all_recv, NULL);
        ptrs_free(&t);
    }
    coll_barrier_wait(c);
}

void direct_reduce_scatter(coll_ctx_t *c) {
    coll_call_t *d = c->call;
    size_t rc = d->count;
    if (rc) {
        ptrs_t t;
        const void **send = ptrs_init(&t, c->n);
        send_pointers(c, send);
        /* Block `me` of every send buffer, written to my recv. */
        place_t pl = {d->recv, (size_t)c->me * rc};
        reduce_blocks(c, send, pl.first0, pl.first0 + rc, emit_to, &pl);
        ptrs_free(&t);
    }
    coll_barrier_wait(c);
}

void direct_reduce(coll_ctx_t *c) {
    coll_call_t *d = c->call;
    size_t lo, hi;
    my_slice(c, d->count, &lo, &hi);
    if (lo < hi) { /* as all-reduce: no table for an empty slice */
        ptrs_t t;
        const void **send = ptrs_init(&t, c->n);
        send_pointers(c, send);
        place_t pl = {peer_call(c, d->root)->recv, 0};
        reduce_blocks(c, send, lo, hi, emit_to, &pl);
        ptrs_free(&t);
    }
    coll_barrier_wait(c);
}

void direct_all_gather(coll_ctx_t *c) {
    coll_call_t *d = c->call;
    size_t bytes = d->count * c->esize;
    for (int k = 0; k < c->n; k++) {
        int j = (c->me + k) % c->n;
        char *dst = (char *)d->recv + (size_t)j * bytes;
        const void *src = peer_call(c, j)->send;
        if (src != dst && bytes) memcpy(dst, src, bytes);
    }
    coll_barrier_wait(c);
}

void direct_broadcast(coll_ctx_t *c) {
    coll_call_t *d = c->call;
    if (c->me != d->root && d->count) memcpy(d->recv, peer_call(c, d->root)->recv, d->count * c->esize);
    coll_barrier_wait(c);
}

void direct_all_to_all(coll_ctx_t *c) {
    coll_call_t *d = c->call;
    size_t bytes = d->count * c->esize;
    for (int k = 0; k < c->n; k++) {
        int j = (c->me + k) % c->n;
        if (bytes)
            memcpy((char *)d->recv + (size_t)j * bytes,
                   (const char *)peer_call(c, j)->send + (size_t)c->me * bytes, bytes);
    }
    coll_barrier_wait(c);
}

void direct_all_to_all_v(coll_ctx_t *c) {
    coll_call_t *d = c->call;
    size_t es = c->esize;
    for (int k = 0; k < c->n; k++) {
        int j = (c->me + k) % c->n;
        const coll_call_t *p = peer_call(c, j);
        size_t len = d->recv_counts[j]; /* == p->send_counts[me], checked */
        if (len)
            memcpy((char *)d->recv + d->recv_displs[j] * es,
                   (const char *)p->send + p->send_displs[c->me] * es, len * es);
    }
    coll_barrier_wait(c);
}

/* ---- small calls, done whole by the last rank to arrive ---- */

static size_t whole_budget(int n) {
    static _Atomic long env_budget = -2; /* -2: not read yet, -1: unset */
    long b = atomic_load_explicit(&env_budget, memory_order_relaxed);
    if (b == -2) {
        double v;
        perr_t e;
        if (coll_env_number("PARITY_COLL_WHOLE_BYTES", COLL_ENV_MAX_BYTES, 1, &v, &e)) coll_die("%s", e.msg);
        b = (long)v;
        atomic_store_explicit(&env_budget, b, memory_order_relaxed);
    }
    if (b >= 0) return (size_t)b;
    return n <= coll_cores() ? WHOLE_BYTES_SPARE_CORES : WHOLE_BYTES_OVERSUBSCRIBED;
}

int direct_whole_eligible(const coll_call_t *d, int n) {
    size_t es = coll_dtype_size((coll_dtype_t)d->dtype), nn = (size_t)n;
    size_t budget = whole_budget(n), count = d->count;
    if (n == 1 || d->kind == COLL_KIND_BARRIER) return 1;
    if (count > budget / es / nn / nn + 1) return 0; /* no overflow below */
    switch (d->kind) {
    case COLL_KIND_ALL_REDUCE:
    case COLL_KIND_BROADCAST:
    case COLL_KIND_REDUCE: return count * es * nn <= budget;
    case COLL_KIND_REDUCE_SCATTER:
    case COLL_KIND_ALL_GATHER:
    case COLL_KIND_ALL_TO_ALL: return count * es * nn * nn <= budget;
    default: return 0; /* all_to_all_v: no member knows the others' counts */
    }
}

/* Every member's output, written by this one thread. In-place forms are
 * safe: reductions go block by block through a buffer, and copies never
 * read a block that an earlier copy of this call wrote. */
void direct_whole(coll_ctx_t *c) {
    coll_call_t *d = c->call;
    size_t es = c->esize, count = d->count, bytes = count * es;
    int n = c->n;
    ptrs_t t;
    const void **send = ptrs_init(&t, n);
    send_pointers(c, send);
    switch (d->kind) {
    case COLL_KIND_ALL_REDUCE:
        reduce_blocks(c, send, 0, count, emit_to_all_recv, NULL);
        break;
    case COLL_KIND_REDUCE: {
        place_t pl = {peer_call(c, d->root)->recv, 0};
        reduce_blocks(c, send, 0, count, emit_to, &pl);
        break;
    }
    case COLL_KIND_REDUCE_SCATTER:
        for (int j = 0; j < n; j++) {
            place_t pl = {peer_call(c, j)->recv, (size_t)j * count};
            reduce_blocks(c, send, pl.first0, pl.first0 + count, emit_to, &pl);
        }
        break;
    case COLL_KIND_BROADCAST: {
        const void *src = peer_call(c, d->root)->recv;
        for (int j = 0; j < n; j++)
            if (j != d->root && bytes) memcpy(peer_call(c, j)->recv, src, bytes);
        break;
    }
    case COLL_KIND_ALL_GATHER:
        for (int j = 0; j < n; j++)
            for (int i = 0; i < n; i++) {
                char *dst = (char *)peer_call(c, j)->recv + (size_t)i * bytes;
                if (bytes && dst != send[i]) memcpy(dst, send[i], bytes);
            }
        break;
    case COLL_KIND_ALL_TO_ALL:
        for (int j = 0; j < n; j++)
            for (int i = 0; i < n; i++)
                if (bytes)
                    memcpy((char *)peer_call(c, j)->recv + (size_t)i * bytes,
                           (const char *)send[i] + (size_t)j * bytes, bytes);
        break;
    case COLL_KIND_ALL_TO_ALL_V: /* n == 1 */
        if (d->recv_counts[0])
            memcpy((char *)d->recv + d->recv_displs[0] * es, (const char *)d->send + d->send_displs[0] * es,
                   d->recv_counts[0] * es);
        break;
    default: break;
    }
    ptrs_free(&t);
}
