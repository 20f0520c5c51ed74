/* coll.c - the collective entry points: argument checks, sequencing and
 * the agreement check (see coll.h).
 *
 * Each call goes: bind (who am I in this group), validate my own
 * arguments, publish my call record, arrival barrier (whose last arriver
 * checks that every member made the same call), run the algorithm, count
 * bytes. No data moves before the agreement check, so a mismatched count
 * can never read past a peer's buffer: it stops the program with both
 * calls named.
 */
#include "coll_impl.h"
#include "mpi/net.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- describing calls in error messages ---- */

void coll_format_call(char *buf, size_t n, const coll_call_t *d, int show_algo) {
    const char *k = coll_kind_name((coll_kind_t)d->kind), *t = coll_dtype_name((coll_dtype_t)d->dtype);
    const char *o = coll_op_name((coll_op_t)d->op);
    int w;
    switch (d->kind) {
    case COLL_KIND_ALL_REDUCE:
        w = snprintf(buf, n, "%s(%s, %s, count=%zu", k, t, o, d->count); break;
    case COLL_KIND_REDUCE_SCATTER:
        w = snprintf(buf, n, "%s(%s, %s, recv_count=%zu", k, t, o, d->count); break;
    case COLL_KIND_REDUCE:
        w = snprintf(buf, n, "%s(%s, %s, count=%zu, root=%d", k, t, o, d->count, d->root); break;
    case COLL_KIND_ALL_GATHER:
        w = snprintf(buf, n, "%s(%s, send_count=%zu", k, t, d->count); break;
    case COLL_KIND_BROADCAST:
        w = snprintf(buf, n, "%s(%s, count=%zu, root=%d", k, t, d->count, d->root); break;
    case COLL_KIND_ALL_TO_ALL:
        w = snprintf(buf, n, "%s(%s, count_per_peer=%zu", k, t, d->count); break;
    case COLL_KIND_ALL_TO_ALL_V: w = snprintf(buf, n, "%s(%s", k, t); break;
    default: w = snprintf(buf, n, "%s(", k); break;
    }
    if (w < 0 || (size_t)w >= n) return;
    if (show_algo)
        snprintf(buf + w, n - (size_t)w, "%salgo=%s)", d->kind == COLL_KIND_BARRIER ? "" : ", ",
                 coll_algo_name((coll_algo_t)d->algo));
    else
        snprintf(buf + w, n - (size_t)w, ")");
}

int coll_same_call(const coll_call_t *a, const coll_call_t *b) {
    return a->kind == b->kind && a->dtype == b->dtype && a->op == b->op && a->count == b->count &&
           a->root == b->root && a->algo == b->algo;
}

/* Run by the last member to arrive, while every record is published and
 * nobody has touched any data yet: one check serves the whole group (the
 * others stay in the barrier until it passes, or the process exits). */
static void check_agreement(const coll_ctx_t *c) {
    const coll_call_t *a = peer_call(c, 0);
    for (int j = 1; j < c->n; j++) {
        const coll_call_t *b = peer_call(c, j);
        if (coll_same_call(a, b) && a->seq == b->seq) continue;
        char ca[160], cb[160];
        if (a->seq != b->seq) { /* barriers keep calls aligned: this means a bug here */
            coll_format_call(ca, sizeof ca, a, 1), coll_format_call(cb, sizeof cb, b, 1);
            coll_die("collective sequence mismatch in group '%s': rank 0 (world %d) is in its call #%llu, "
                     "%s, but rank %d (world %d) in its call #%llu, %s",
                     c->g->name, c->g->ranks[0], (unsigned long long)a->seq, ca, j, c->g->ranks[j],
                     (unsigned long long)b->seq, cb);
        }
        int algo = a->algo != b->algo;
        coll_format_call(ca, sizeof ca, a, algo);
        coll_format_call(cb, sizeof cb, b, algo);
        coll_die("collective mismatch in group '%s' call #%llu: rank 0 (world %d) called %s but "
                 "rank %d (world %d) called %s",
                 c->g->name, (unsigned long long)c->seq, c->g->ranks[0], ca, j, c->g->ranks[j], cb);
    }
    if (a->kind != COLL_KIND_ALL_TO_ALL_V) return;
    for (int i = 0; i < c->n; i++) { /* every (sender j, receiver i) pair */
        const size_t *expect = peer_call(c, i)->recv_counts;
        for (int j = 0; j < c->n; j++) {
            size_t sends = peer_call(c, j)->send_counts[i];
            if (sends != expect[j])
                coll_die("all_to_all_v mismatch in group '%s' call #%llu: rank %d (world %d) sends "
                         "%zu elements to rank %d but rank %d (world %d) expects %zu from rank %d",
                         c->g->name, (unsigned long long)c->seq, j, c->g->ranks[j], sends, i, i,
                         c->g->ranks[i], expect[j], j);
        }
    }
}

/* ---- binding, validation, publication ---- */

void coll_bind(coll_ctx_t *c, group_t *g, coll_kind_t kind) {
    device_t *dev = device_self();
    if (!g) coll_die("coll_%s: the group is NULL", coll_kind_name(kind));
    if (!dev)
        coll_die("coll_%s on group '%s': called outside a device thread (collectives run on the "
                 "threads that devices_run starts)", coll_kind_name(kind), g->name);
    int me = group_rank_of_world(g, dev->rank);
    if (me < 0) {
        char list[256];
        int w = 0;
        for (int i = 0; i < g->n && w < (int)sizeof list - 16; i++)
            w += snprintf(list + w, sizeof list - (size_t)w, "%s%d", i ? "," : "", g->ranks[i]);
        if (w >= (int)sizeof list - 16) snprintf(list + w, sizeof list - (size_t)w, ",...");
        coll_die("coll_%s on group '%s': world rank %d is not a member of the group (members: %s)",
                 coll_kind_name(kind), g->name, dev->rank, list);
    }
    c->g = g;
    c->cs = coll_state_of(g);
    c->me = me;
    c->n = g->n;
    c->world_rank = dev->rank;
    c->self = &c->cs->members[me];
}

void coll_bad_call(const coll_ctx_t *c, const coll_call_t *d, const char *fmt, ...) {
    char call[160], msg[512];
    coll_format_call(call, sizeof call, d, 0);
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    coll_die("coll_%s on group '%s', rank %d (world %d): %s; the call was %s",
             coll_kind_name((coll_kind_t)d->kind), c->g->name, c->me, c->world_rank, msg, call);
}

int coll_overlap(const void *a, size_t an, const void *b, size_t bn) {
    const char *x = a, *y = b;
    return an && bn && x < y + bn && y < x + an;
}

/* Bytes of n elements, fatal on overflow. */
static size_t nbytes(coll_ctx_t *c, const coll_call_t *d, size_t n, size_t times) {
    size_t es = coll_dtype_size((coll_dtype_t)d->dtype);
    if (times && n > SIZE_MAX / times / es) coll_bad_call(c, d, "the byte size overflows size_t");
    return n * times * es;
}

static void validate_common(coll_ctx_t *c, const coll_call_t *d) {
    if ((unsigned)d->dtype >= COLL_NDTYPES) coll_bad_call(c, d, "dtype %d is not a coll_dtype_t", d->dtype);
    if (d->dtype == COLL_XVEC) /* its buffers are xvec_t, not element arrays */
        coll_bad_call(c, d, "xvec (open exact sums) has entry points of its own (coll_all_reduce_open, "
                            "coll_reduce_scatter_open, coll_send_open, coll_recv_open)");
    if (d->op != -1 && (unsigned)d->op >= COLL_NOPS) coll_bad_call(c, d, "op %d is not a coll_op_t", d->op);
    if (d->op != -1 && d->op != COLL_SUM && d->dtype == COLL_XACC)
        coll_bad_call(c, d, "%s is not defined on xacc (exact sums only)", coll_op_name((coll_op_t)d->op));
    if (d->root != -1 && (d->root < 0 || d->root >= c->n))
        coll_bad_call(c, d, "root %d is out of range (group size %d)", d->root, c->n);
}

static void need(coll_ctx_t *c, const coll_call_t *d, const void *p, size_t bytes, const char *what) {
    if (bytes && !p) coll_bad_call(c, d, "%s is NULL but %zu bytes are needed", what, bytes);
}

static void completer(coll_ctx_t *c) {
    check_agreement(c);
    if (c->whole) (c->call->dtype == COLL_XVEC ? open_whole : direct_whole)(c);
}

/* Publishes the record and waits for every member; the last to arrive
 * checks that all made the same call and, for a small call, does it all.
 * c->whole tells the caller that nothing is left to do. */
void coll_arrive(coll_ctx_t *c, const coll_call_t *d) {
    c->seq = ++c->self->seq;
    c->call = &c->self->call[c->seq & 1];
    *c->call = *d;
    c->call->seq = c->seq;
    c->call->progress_base = coll_wword_get(&c->self->progress);
    c->esize = coll_dtype_size((coll_dtype_t)d->dtype);
    c->whole = (d->algo == COLL_ALGO_DIRECT || c->n == 1) && direct_whole_eligible(d, c->n);
    coll_activity_enter(c->world_rank, c->g, (coll_kind_t)d->kind, c->seq, -1, -1);
    coll_barrier_hook(c, completer);
}

/* Shared memory: the ring or direct algorithm of each kind. */
static void shm_run(coll_ctx_t *c, coll_call_t *d) {
    const int ring = d->algo == COLL_ALGO_RING && c->n > 1, open = d->dtype == COLL_XVEC;
    if (ring && d->kind == COLL_KIND_REDUCE_SCATTER && !open)
        d->scratch = coll_scratch(c, 2 * d->count * coll_dtype_size((coll_dtype_t)d->dtype));
    if (ring && d->kind == COLL_KIND_REDUCE) d->scratch = coll_scratch(c, 2 * COLL_PIPE_BYTES);
    coll_arrive(c, d);
    if (c->whole) return;
    switch (d->kind) {
    case COLL_KIND_ALL_REDUCE:
        if (open) (ring ? open_ring_all_reduce : open_direct_all_reduce)(c);
        else (ring ? ring_all_reduce : direct_all_reduce)(c);
        break;
    case COLL_KIND_REDUCE_SCATTER:
        if (open) (ring ? open_ring_reduce_scatter : open_direct_reduce_scatter)(c);
        else (ring ? ring_reduce_scatter : direct_reduce_scatter)(c);
        break;
    case COLL_KIND_ALL_GATHER: (ring ? ring_all_gather : direct_all_gather)(c); break;
    case COLL_KIND_BROADCAST: (ring ? ring_broadcast : direct_broadcast)(c); break;
    case COLL_KIND_REDUCE: (ring ? ring_reduce : direct_reduce)(c); break;
    case COLL_KIND_ALL_TO_ALL: direct_all_to_all(c); break;
    case COLL_KIND_ALL_TO_ALL_V: direct_all_to_all_v(c); break;
    default: break; /* the barrier: arriving is all of it */
    }
}

void coll_run(coll_ctx_t *c, coll_call_t *d) {
    if (net_active()) net_run(c, d);
    else shm_run(c, d);
}

void coll_leave(coll_ctx_t *c, uint64_t bytes, uint64_t sent, uint64_t recvd) {
    coll_kind_t kind = (coll_kind_t)c->call->kind;
    coll_activity_exit(c->world_rank);
    coll_count(c->world_rank, c->g, kind, (coll_dtype_t)c->call->dtype, bytes,
               coll_busbw_factor(kind, c->n), sent, recvd);
}

coll_call_t coll_make_call(coll_kind_t kind, coll_dtype_t dt, int op, size_t count, int root,
                           const void *send, void *recv) {
    coll_call_t d;
    memset(&d, 0, sizeof d);
    d.kind = (int)kind, d.dtype = (int)dt, d.op = op, d.count = count, d.root = root;
    d.algo = (int)coll_get_algo();
    d.send = send, d.recv = recv;
    return d;
}

/* ---- the collectives ---- */

void coll_all_reduce(group_t *g, const void *send, void *recv, size_t count, coll_dtype_t dt,
                     coll_op_t op) {
    coll_ctx_t c;
    coll_bind(&c, g, COLL_KIND_ALL_REDUCE);
    coll_call_t d = coll_make_call(COLL_KIND_ALL_REDUCE, dt, (int)op, count, -1, send, recv);
    validate_common(&c, &d);
    size_t S = nbytes(&c, &d, count, 1);
    need(&c, &d, send, S, "send"), need(&c, &d, recv, S, "recv");
    if (send != recv && coll_overlap(send, S, recv, S))
        coll_bad_call(&c, &d, "send and recv overlap (in-place all_reduce needs send == recv)");
    coll_run(&c, &d);
    uint64_t bus = (uint64_t)((double)S * coll_busbw_factor(COLL_KIND_ALL_REDUCE, c.n) + 0.5);
    coll_leave(&c, S, bus, bus);
}

void coll_reduce_scatter(group_t *g, const void *send, void *recv, size_t recv_count,
                         coll_dtype_t dt, coll_op_t op) {
    coll_ctx_t c;
    coll_bind(&c, g, COLL_KIND_REDUCE_SCATTER);
    coll_call_t d = coll_make_call(COLL_KIND_REDUCE_SCATTER, dt, (int)op, recv_count, -1, send, recv);
    validate_common(&c, &d);
    size_t S = nbytes(&c, &d, recv_count, (size_t)c.n), R = nbytes(&c, &d, recv_count, 1);
    need(&c, &d, send, S, "send"), need(&c, &d, recv, R, "recv");
    int in_place = send && (const char *)recv == (const char *)send + (size_t)c.me * R;
    if (!in_place && coll_overlap(send, S, recv, R))
        coll_bad_call(&c, &d, "send and recv overlap (in place needs recv == send + rank * recv_count)");
    coll_run(&c, &d);
    uint64_t bus = (uint64_t)((double)S * coll_busbw_factor(COLL_KIND_REDUCE_SCATTER, c.n) + 0.5);
    coll_leave(&c, S, bus, bus);
}

void coll_all_gather(group_t *g, const void *send, void *recv, size_t send_count, coll_dtype_t dt) {
    coll_ctx_t c;
    coll_bind(&c, g, COLL_KIND_ALL_GATHER);
    coll_call_t d = coll_make_call(COLL_KIND_ALL_GATHER, dt, -1, send_count, -1, send, recv);
    validate_common(&c, &d);
    size_t S = nbytes(&c, &d, send_count, (size_t)c.n), B = nbytes(&c, &d, send_count, 1);
    need(&c, &d, send, B, "send"), need(&c, &d, recv, S, "recv");
    int in_place = recv && (const char *)send == (const char *)recv + (size_t)c.me * B;
    if (!in_place && coll_overlap(send, B, recv, S))
        coll_bad_call(&c, &d, "send and recv overlap (in place needs send == recv + rank * send_count)");
    coll_run(&c, &d);
    uint64_t bus = (uint64_t)((double)S * coll_busbw_factor(COLL_KIND_ALL_GATHER, c.n) + 0.5);
    coll_leave(&c, S, bus, bus);
}

void coll_broadcast(group_t *g, void *buf, size_t count, coll_dtype_t dt, int root) {
    coll_ctx_t c;
    coll_bind(&c, g, COLL_KIND_BROADCAST);
    coll_call_t d = coll_make_call(COLL_KIND_BROADCAST, dt, -1, count, root, buf, buf);
    validate_common(&c, &d);
    size_t S = nbytes(&c, &d, count, 1);
    need(&c, &d, buf, S, "buf");
    coll_run(&c, &d);
    int one = c.n == 1;
    coll_leave(&c, S, c.me == root && !one ? S : 0, c.me != root ? S : 0);
}

void coll_reduce(group_t *g, const void *send, void *recv, size_t count, coll_dtype_t dt,
                 coll_op_t op, int root) {
    coll_ctx_t c;
    coll_bind(&c, g, COLL_KIND_REDUCE);
    coll_call_t d = coll_make_call(COLL_KIND_REDUCE, dt, (int)op, count, root, send, recv);
    validate_common(&c, &d);
    size_t S = nbytes(&c, &d, count, 1);
    need(&c, &d, send, S, "send");
    if (c.me == root) {
        need(&c, &d, recv, S, "recv (at the root)");
        if (send != recv && coll_overlap(send, S, recv, S))
            coll_bad_call(&c, &d, "send and recv overlap (in-place reduce needs send == recv at the root)");
    }
    coll_run(&c, &d);
    int one = c.n == 1;
    coll_leave(&c, S, c.me != root ? S : 0, c.me == root && !one ? S : 0);
}

void coll_all_to_all(group_t *g, const void *send, void *recv, size_t count_per_peer,
                     coll_dtype_t dt) {
    coll_ctx_t c;
    coll_bind(&c, g, COLL_KIND_ALL_TO_ALL);
    coll_call_t d = coll_make_call(COLL_KIND_ALL_TO_ALL, dt, -1, count_per_peer, -1, send, recv);
    validate_common(&c, &d);
    size_t S = nbytes(&c, &d, count_per_peer, (size_t)c.n);
    need(&c, &d, send, S, "send"), need(&c, &d, recv, S, "recv");
    if (coll_overlap(send, S, recv, S)) coll_bad_call(&c, &d, "send and recv overlap (in-place all_to_all is not supported)");
    coll_run(&c, &d);
    uint64_t bus = (uint64_t)((double)S * coll_busbw_factor(COLL_KIND_ALL_TO_ALL, c.n) + 0.5);
    coll_leave(&c, S, bus, bus);
}

/* Bytes spanned by n (count, displacement) pairs. */
static size_t extent(coll_ctx_t *c, const coll_call_t *d, const size_t *counts, const size_t *displs,
                     const char *what) {
    size_t end = 0;
    for (int j = 0; j < c->n; j++) {
        if (counts[j] > SIZE_MAX - displs[j]) coll_bad_call(c, d, "%s[%d]: displacement + count overflows", what, j);
        size_t e = displs[j] + counts[j];
        if (counts[j] && e > end) end = e;
    }
    return nbytes(c, d, end, 1);
}

void coll_all_to_all_v(group_t *g, const void *send, const size_t *send_counts,
                       const size_t *send_displs, void *recv, const size_t *recv_counts,
                       const size_t *recv_displs, coll_dtype_t dt) {
    coll_ctx_t c;
    coll_bind(&c, g, COLL_KIND_ALL_TO_ALL_V);
    coll_call_t d = coll_make_call(COLL_KIND_ALL_TO_ALL_V, dt, -1, 0, -1, send, recv);
    d.send_counts = send_counts, d.send_displs = send_displs;
    d.recv_counts = recv_counts, d.recv_displs = recv_displs;
    validate_common(&c, &d);
    if (!send_counts || !send_displs || !recv_counts || !recv_displs)
        coll_bad_call(&c, &d, "a count or displacement array is NULL");
    size_t SE = extent(&c, &d, send_counts, send_displs, "send");
    size_t RE = extent(&c, &d, recv_counts, recv_displs, "recv");
    need(&c, &d, send, SE, "send"), need(&c, &d, recv, RE, "recv");
    if (coll_overlap(send, SE, recv, RE)) coll_bad_call(&c, &d, "send and recv overlap (in-place all_to_all_v is not supported)");
    coll_run(&c, &d);
    uint64_t total = 0, sent = 0, recvd = 0;
    for (int j = 0; j < c.n; j++) {
        total += send_counts[j] * c.esize;
        if (j != c.me) sent += send_counts[j] * c.esize, recvd += recv_counts[j] * c.esize;
    }
    coll_leave(&c, total, sent, recvd);
}

void coll_barrier(group_t *g) {
    coll_ctx_t c;
    coll_bind(&c, g, COLL_KIND_BARRIER);
    coll_call_t d = coll_make_call(COLL_KIND_BARRIER, COLL_I32, -1, 0, -1, NULL, NULL);
    coll_run(&c, &d);
    coll_leave(&c, 0, 0, 0);
}
