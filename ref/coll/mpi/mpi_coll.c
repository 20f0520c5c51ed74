/* mpi_coll.c - the collectives as MPI messages (coll.h, net.h).
 *
 * Every call: (1) each member sends its call record to every other and
 * checks what it receives against member 0's, as the shared-memory
 * arrival barrier does, so no data moves before the members agree;
 * (2) the data moves as the direct algorithm moves it: for a reduction,
 * member i receives slice i (the shared-memory slices, coll_chunk) of
 * every member's buffer and reduces it, then sends the result to all.
 * An fp32 sum adds its terms in the order of the algorithm the call
 * names: group order for direct, from member c + 1 round to member c
 * for the ring's chunk c (coll_ring.c), so the result has the bits of
 * the shared-memory run either way. The other types do not depend on
 * the order. Open sums travel packed (mpi_internal.h).
 */
#ifdef PARITY_HAVE_MPI
#include "mpi_internal.h"

#include <stdlib.h>
#include <string.h>
#include <unistd.h>

typedef struct {
    int32_t kind, dtype, op, algo, root, pad;
    uint64_t count, seq;
    uint64_t to_you; /* all_to_all_v: the elements the sender sends the receiver */
} record_t;

/* The requests of one phase, with the member each talks to. */
typedef struct {
    int n;
    MPI_Request *req;
    int *peer;
} phase_t;

static void phase_init(phase_t *p, int cap) {
    p->n = 0;
    p->req = malloc((size_t)cap * sizeof *p->req);
    p->peer = malloc((size_t)cap * sizeof *p->peer);
    if (!p->req || !p->peer) parity_fatal("collectives: out of host memory");
}

static void phase_free(phase_t *p) {
    free(p->req);
    free(p->peer);
}

static void post(phase_t *p, const coll_ctx_t *c, int is_send, const void *buf, size_t bytes, int j) {
    const int count = net_count(bytes, coll_kind_name((coll_kind_t)c->call->kind));
    const int dest = group_world_rank(c->g, j), tag = c->g->net_id;
    if (is_send) MPI_Isend(buf, count, MPI_BYTE, dest, tag, net_coll_comm, &p->req[p->n]);
    else MPI_Irecv((void *)buf, count, MPI_BYTE, dest, tag, net_coll_comm, &p->req[p->n]);
    p->peer[p->n++] = j;
}

static void finish(phase_t *p, const coll_ctx_t *c) {
    net_wait_t w = {c->g, coll_kind_name((coll_kind_t)c->call->kind), c->seq, p->peer};
    net_wait_all(p->n, p->req, &w);
    p->n = 0;
}

static record_t record_of(const coll_call_t *d, uint64_t seq, int to) {
    record_t r = {d->kind, d->dtype, d->op, d->algo, d->root, 0, d->count, seq, 0};
    if (d->kind == COLL_KIND_ALL_TO_ALL_V) r.to_you = d->send_counts[to];
    return r;
}

static coll_call_t call_of(const record_t *r) {
    coll_call_t d;
    memset(&d, 0, sizeof d);
    d.kind = r->kind, d.dtype = r->dtype, d.op = r->op, d.algo = r->algo, d.root = r->root;
    d.count = r->count, d.seq = r->seq;
    return d;
}

/* A disagreement: member 0 reports it (every member sees the same
 * records and stops the others through MPI_Abort); the rest wait for
 * that, and report themselves only if it never comes. */
static _Noreturn void disagree(const coll_ctx_t *c, int reporter, const char *msg) {
    if (c->me != reporter) sleep(5);
    coll_die("%s", msg);
}

static void agree(coll_ctx_t *c, const coll_call_t *d) {
    const int n = c->n, me = c->me;
    record_t *rec = malloc((size_t)n * 2 * sizeof *rec), *out = rec + n;
    if (!rec) parity_fatal("collectives: out of host memory");
    phase_t p;
    phase_init(&p, 2 * n);
    for (int j = 0; j < n; j++) {
        if (j == me) continue;
        out[j] = record_of(d, c->seq, j);
        post(&p, c, 0, &rec[j], sizeof *rec, j);
        post(&p, c, 1, &out[j], sizeof *rec, j);
    }
    rec[me] = record_of(d, c->seq, 0);
    finish(&p, c);
    phase_free(&p);
    char msg[512], ca[160], cb[160];
    coll_call_t a = call_of(&rec[0]);
    for (int j = 1; j < n; j++) {
        coll_call_t b = call_of(&rec[j]);
        if (coll_same_call(&a, &b) && a.seq == b.seq) continue;
        int algo = a.algo != b.algo;
        coll_format_call(ca, sizeof ca, &a, algo || a.seq != b.seq);
        coll_format_call(cb, sizeof cb, &b, algo || a.seq != b.seq);
        if (a.seq != b.seq)
            snprintf(msg, sizeof msg, "collective sequence mismatch in group '%s': rank 0 (world %d) "
                     "is in its call #%llu, %s, but rank %d (world %d) in its call #%llu, %s",
                     c->g->name, c->g->ranks[0], (unsigned long long)a.seq, ca, j, c->g->ranks[j],
                     (unsigned long long)b.seq, cb);
        else
            snprintf(msg, sizeof msg, "collective mismatch in group '%s' call #%llu: rank 0 (world %d) "
                     "called %s but rank %d (world %d) called %s", c->g->name,
                     (unsigned long long)c->seq, c->g->ranks[0], ca, j, c->g->ranks[j], cb);
        free(rec);
        disagree(c, 0, msg);
    }
    if (d->kind == COLL_KIND_ALL_TO_ALL_V)
        for (int j = 0; j < n; j++) {
            uint64_t sends = j == me ? d->send_counts[me] : rec[j].to_you;
            if (sends == d->recv_counts[j]) continue;
            snprintf(msg, sizeof msg, "all_to_all_v mismatch in group '%s' call #%llu: rank %d (world "
                     "%d) sends %llu elements to rank %d but rank %d (world %d) expects %zu from rank %d",
                     c->g->name, (unsigned long long)c->seq, j, c->g->ranks[j],
                     (unsigned long long)sends, me, me, c->g->ranks[me], d->recv_counts[j], j);
            free(rec);
            disagree(c, me, msg);
        }
    free(rec);
}

static inline char *at(const void *base, size_t elem, size_t es) { return (char *)base + elem * es; }

/* src[k] := member k's terms (direct) or member first + k's (the ring's
 * chunk order, first = chunk + 1), then dst := their reduction. */
static void reduce_ordered(const coll_ctx_t *c, void *dst, const void **terms, int first, size_t len) {
    const int n = c->n;
    const void **src = malloc((size_t)n * sizeof *src);
    if (!src) parity_fatal("collectives: out of host memory");
    const int ring = c->call->algo == COLL_ALGO_RING;
    for (int k = 0; k < n; k++) src[k] = terms[ring ? coll_mod(first + k, n) : k];
    /* through a buffer: dst may be this member's own terms (in place), and
     * coll_reduce_into allows aliasing only of its first two sources */
    void *buf = malloc(len * c->esize + 1);
    if (!buf) parity_fatal("collectives: out of host memory");
    coll_reduce_into(buf, src, n, len, (coll_dtype_t)c->call->dtype, (coll_op_t)c->call->op);
    if (len) memcpy(dst, buf, len * c->esize);
    free(buf);
    free((void *)src);
}

/* Member me's reduction of `len` elements that every member holds at
 * their own offset: mine is this member's, the others arrive. */
static void gather_and_reduce(coll_ctx_t *c, phase_t *p, const void *const *sends, const size_t *lens,
                              const void *mine, void *dst, size_t len, int first) {
    const int n = c->n, me = c->me;
    const size_t es = c->esize;
    char *scratch = malloc((size_t)n * len * es + 1);
    const void **terms = malloc((size_t)n * sizeof *terms);
    if (!scratch || !terms) parity_fatal("collectives: out of host memory");
    for (int j = 0; j < n; j++) {
        terms[j] = j == me ? mine : scratch + (size_t)j * len * es;
        if (j == me) continue;
        post(p, c, 0, terms[j], len * es, j);
        if (sends) post(p, c, 1, sends[j], lens[j] * es, j);
    }
    finish(p, c);
    reduce_ordered(c, dst, terms, first, len);
    free(scratch);
    free((void *)terms);
}

static void all_reduce(coll_ctx_t *c, phase_t *p) {
    const coll_call_t *d = c->call;
    const int n = c->n, me = c->me;
    const size_t es = c->esize, align = coll_align_elems((coll_dtype_t)d->dtype);
    size_t *lo = malloc((size_t)n * 2 * sizeof *lo), *len = lo + n, hi;
    const void **sends = calloc((size_t)n, sizeof *sends);
    if (!lo || !sends) parity_fatal("collectives: out of host memory");
    for (int j = 0; j < n; j++) {
        coll_chunk(d->count, n, j, align, &lo[j], &hi);
        len[j] = hi - lo[j];
        sends[j] = at(d->send, lo[j], es);
    }
    size_t my_lo, my_hi;
    coll_chunk(d->count, n, me, align, &my_lo, &my_hi);
    gather_and_reduce(c, p, sends, len, at(d->send, my_lo, es), at(d->recv, my_lo, es), my_hi - my_lo,
                      me + 1);
    for (int j = 0; j < n; j++) /* the all-gather of the reduced slices */
        if (j != me) {
            post(p, c, 0, at(d->recv, lo[j], es), len[j] * es, j);
            post(p, c, 1, at(d->recv, my_lo, es), (my_hi - my_lo) * es, j);
        }
    finish(p, c);
    free(lo);
    free((void *)sends);
}

static void reduce_scatter(coll_ctx_t *c, phase_t *p) {
    const coll_call_t *d = c->call;
    const int n = c->n, me = c->me;
    const size_t es = c->esize, rc = d->count;
    const void **sends = calloc((size_t)n, sizeof *sends);
    size_t *lens = malloc((size_t)n * sizeof *lens);
    if (!sends || !lens) parity_fatal("collectives: out of host memory");
    for (int j = 0; j < n; j++) sends[j] = at(d->send, (size_t)j * rc, es), lens[j] = rc;
    gather_and_reduce(c, p, sends, lens, at(d->send, (size_t)me * rc, es), d->recv, rc, me + 1);
    free((void *)sends);
    free(lens);
}

static void reduce(coll_ctx_t *c, phase_t *p) {
    const coll_call_t *d = c->call;
    const int root = d->root;
    if (c->me != root) {
        post(p, c, 1, d->send, d->count * c->esize, root);
        finish(p, c);
        return;
    }
    gather_and_reduce(c, p, NULL, NULL, d->send, d->recv, d->count, root + 1);
}

static void move_blocks(coll_ctx_t *c, phase_t *p) {
    const coll_call_t *d = c->call;
    const int n = c->n, me = c->me;
    const size_t es = c->esize, k = d->count;
    for (int j = 0; j < n; j++) {
        size_t sc = 0, rc = 0, so = 0, ro = 0;
        switch (d->kind) {
        case COLL_KIND_ALL_GATHER: sc = rc = k, so = 0, ro = (size_t)j * k; break;
        case COLL_KIND_ALL_TO_ALL: sc = rc = k, so = (size_t)j * k, ro = (size_t)j * k; break;
        case COLL_KIND_ALL_TO_ALL_V:
            sc = d->send_counts[j], rc = d->recv_counts[j];
            so = d->send_displs[j], ro = d->recv_displs[j];
            break;
        case COLL_KIND_BROADCAST:
            sc = me == d->root ? k : 0, rc = j == d->root ? k : 0;
            break;
        default: break;
        }
        if (j == me) {
            if (d->kind != COLL_KIND_BROADCAST && sc && at(d->recv, ro, es) != at(d->send, so, es))
                memcpy(at(d->recv, ro, es), at(d->send, so, es), sc * es);
            continue;
        }
        /* the agreement made each receive's count its sender's */
        if (rc) post(p, c, 0, at(d->recv, ro, es), rc * es, j);
        if (sc) post(p, c, 1, at(d->send, so, es), sc * es, j);
    }
    finish(p, c);
}

/* ---- open sums ---- */

/* Receives one packed range of len elements from member j: added into
 * dst[off ...] exactly, or (dst NULL) unpacked into a fresh tmp. */
static void recv_packed(coll_ctx_t *c, int j, size_t len, xvec_t *dst, size_t off, xvec_t *tmp) {
    const int src = group_world_rank(c->g, j);
    MPI_Message m;
    MPI_Status st;
    net_wait_t w = {c->g, coll_kind_name((coll_kind_t)c->call->kind), c->seq, &j};
    net_probe(src, c->g->net_id, net_coll_comm, &m, &st, &w); /* the size is the data's */
    int bytes;
    MPI_Get_count(&st, MPI_BYTE, &bytes);
    unsigned char *buf = malloc((size_t)bytes + 1);
    if (!buf) parity_fatal("collectives: out of host memory");
    MPI_Mrecv(buf, bytes, MPI_BYTE, &m, MPI_STATUS_IGNORE);
    size_t nslow;
    if (dst ? net_xvec_merge_packed(dst, off, buf, (size_t)bytes, len, &nslow)
            : net_xvec_unpack(buf, (size_t)bytes, len, tmp, &nslow))
        coll_die("%s of open sums in group '%s': rank %d (world %d) sent %d bytes, not a packed "
                 "range of %zu elements", coll_kind_name((coll_kind_t)c->call->kind), c->g->name, j,
                 src, bytes, len);
    if (nslow) coll_count_traffic(c->world_rank, c->g, (coll_kind_t)c->call->kind, COLL_XVEC, 0,
                                  nslow * sizeof(xacc_t));
    free(buf);
}

static unsigned char *send_packed(coll_ctx_t *c, phase_t *p, const xvec_t *v, size_t off, size_t len,
                                  int j) {
    size_t nslow, bytes = net_xvec_packed_bytes(v, off, len, &nslow);
    unsigned char *buf = malloc(bytes);
    if (!buf) parity_fatal("collectives: out of host memory");
    net_xvec_pack(v, off, len, buf);
    if (nslow) coll_count_traffic(c->world_rank, c->g, (coll_kind_t)c->call->kind, COLL_XVEC,
                                  nslow * sizeof(xacc_t), 0);
    post(p, c, 1, buf, bytes, j);
    return buf;
}

/* tmp := the exact sum over members of their range (off_of(j)) of len:
 * this member's own from `mine`, the others' as they arrive. */
static void open_sum(coll_ctx_t *c, phase_t *p, const xvec_t *send, const size_t *offs,
                     const size_t *lens, const xvec_t *mine, size_t mine_off, xvec_t *sum) {
    const int n = c->n, me = c->me;
    const size_t len = lens[me];
    unsigned char **bufs = calloc((size_t)n, sizeof *bufs);
    if (!bufs || xvec_init(sum, len ? len : 1)) parity_fatal("collectives: out of host memory");
    for (int j = 0; j < n; j++)
        if (j != me) bufs[j] = send_packed(c, p, send, offs[j], lens[j], j);
    xvec_claim_zero(sum);
    if (len) xvec_store_range(sum, 0, mine, mine_off, len);
    for (int j = 0; j < n; j++)
        if (j != me) recv_packed(c, j, len, sum, 0, NULL);
    finish(p, c);
    for (int j = 0; j < n; j++) free(bufs[j]);
    free(bufs);
}

static void open_all_reduce(coll_ctx_t *c, phase_t *p) {
    const coll_call_t *d = c->call;
    const int n = c->n, me = c->me;
    xvec_t *v = d->recv, sum;
    const size_t align = coll_align_elems(COLL_XVEC);
    size_t *offs = malloc((size_t)n * 2 * sizeof *offs), *lens = offs + n, lo, hi;
    if (!offs) parity_fatal("collectives: out of host memory");
    for (int j = 0; j < n; j++) {
        coll_chunk(d->count, n, j, align, &lo, &hi);
        offs[j] = d->recv_off + lo, lens[j] = hi - lo;
    }
    open_sum(c, p, v, offs, lens, v, offs[me], &sum);
    if (lens[me]) xvec_store_range(v, offs[me], &sum, 0, lens[me]);
    unsigned char **bufs = calloc((size_t)n, sizeof *bufs);
    if (!bufs) parity_fatal("collectives: out of host memory");
    for (int j = 0; j < n; j++) /* the all-gather of the finished slices */
        if (j != me) bufs[j] = send_packed(c, p, &sum, 0, lens[me], j);
    for (int j = 0; j < n; j++) {
        if (j == me) continue;
        xvec_t part;
        recv_packed(c, j, lens[j], NULL, 0, &part);
        if (lens[j]) xvec_store_range(v, offs[j], &part, 0, lens[j]);
        xvec_free(&part);
    }
    finish(p, c);
    for (int j = 0; j < n; j++) free(bufs[j]);
    free(bufs);
    xvec_free(&sum);
    free(offs);
}

static void open_reduce_scatter(coll_ctx_t *c, phase_t *p) {
    const coll_call_t *d = c->call;
    const int n = c->n, me = c->me;
    const size_t rc = d->count;
    size_t *offs = malloc((size_t)n * 2 * sizeof *offs), *lens = offs + n;
    if (!offs) parity_fatal("collectives: out of host memory");
    for (int j = 0; j < n; j++) offs[j] = d->send_off + (size_t)j * rc, lens[j] = rc;
    xvec_t sum;
    open_sum(c, p, d->send, offs, lens, d->send, offs[me], &sum);
    if (rc) xvec_store_range(d->recv, d->recv_off, &sum, 0, rc);
    xvec_free(&sum);
    free(offs);
}

void net_run(coll_ctx_t *c, coll_call_t *d) {
    if (c->g->net_id < 0)
        coll_die("coll_%s on group '%s': the group was created inside a run across processes; the "
                 "MPI transport numbers groups when the run starts (create them before devices_run)",
                 coll_kind_name((coll_kind_t)d->kind), c->g->name);
    c->seq = ++c->self->seq;
    d->seq = c->seq;
    c->call = d;
    c->esize = coll_dtype_size((coll_dtype_t)d->dtype);
    c->whole = 0;
    coll_activity_enter(c->world_rank, c->g, (coll_kind_t)d->kind, c->seq, -1, -1);
    if (c->n > 1) agree(c, d);
    phase_t p;
    phase_init(&p, 2 * c->n + 2);
    const int open = d->dtype == COLL_XVEC;
    switch (d->kind) {
    case COLL_KIND_ALL_REDUCE: (open ? open_all_reduce : all_reduce)(c, &p); break;
    case COLL_KIND_REDUCE_SCATTER: (open ? open_reduce_scatter : reduce_scatter)(c, &p); break;
    case COLL_KIND_REDUCE: reduce(c, &p); break;
    case COLL_KIND_BARRIER: break;
    default: move_blocks(c, &p); break;
    }
    phase_free(&p);
}
#endif
