/* coll_p2p.c - point-to-point messages between group members.
 *
 * Each ordered pair (sender, receiver) that talks has a channel, made
 * when it first does: a lock and two FIFO queues of posted sends and
 * posted receives. Whoever posts second finds the first matching request
 * (same tag, oldest first: MPI's non-overtaking rule), copies the data
 * straight from the send buffer to the receive buffer and completes both.
 * So there is no intermediate copy and no buffering: a send completes
 * when the receiver has the data. Open sums (COLL_XVEC) are delivered the
 * same way, as an exact merge into the receiver's xvec (open_deliver).
 */
#include "coll_impl.h"
#include "mpi/net.h"

#include <stdlib.h>
#include <string.h>


/* Each channel has cache lines of its own (coll_alloc), so pairs never
 * share a line. */
typedef struct {
    pthread_mutex_t mu;
    coll_request_t *sends, *recvs; /* FIFO queues, oldest first */
} p2p_channel_t;

/* Channels exist only for pairs that have talked: data parallelism never
 * sends point-to-point and a pipeline stage talks to two neighbours, so a
 * full n x n table (128 MB at 1024 members) would be almost all waste.
 * rows[s], made when sender s first talks, holds n channel pointers, and
 * rows[s][d] is the channel from s to d. Both are built under mu and
 * published with a release store, so every later lookup is two acquire
 * loads and no lock. */
typedef _Atomic(p2p_channel_t *) channel_ptr_t;

struct p2p_channels {
    int n;
    pthread_mutex_t mu; /* creation only */
    _Atomic(channel_ptr_t *) rows[];
};

p2p_channels_t *coll_p2p_channels_create(int n) {
    p2p_channels_t *t = coll_alloc(sizeof *t + (size_t)n * sizeof t->rows[0]);
    t->n = n;
    pthread_mutex_init(&t->mu, NULL);
    for (int s = 0; s < n; s++) atomic_init(&t->rows[s], NULL);
    return t;
}

static void channel_free(p2p_channel_t *ch) {
    pthread_mutex_destroy(&ch->mu);
    /* requests still queued were never waited: free them with the group */
    for (coll_request_t *r = ch->sends, *nx; r; r = nx) nx = r->next, coll_free(r, sizeof *r);
    for (coll_request_t *r = ch->recvs, *nx; r; r = nx) nx = r->next, coll_free(r, sizeof *r);
    coll_free(ch, sizeof *ch);
}

void coll_p2p_channels_free(p2p_channels_t *t) {
    if (!t) return;
    const size_t row_bytes = (size_t)t->n * sizeof(channel_ptr_t);
    for (int s = 0; s < t->n; s++) {
        channel_ptr_t *row = atomic_load(&t->rows[s]);
        if (!row) continue;
        for (int d = 0; d < t->n; d++) {
            p2p_channel_t *ch = atomic_load(&row[d]);
            if (ch) channel_free(ch);
        }
        coll_free(row, row_bytes);
    }
    pthread_mutex_destroy(&t->mu);
    coll_free(t, sizeof *t + (size_t)t->n * sizeof t->rows[0]);
}

/* Under t->mu: the row and the channel, each made if missing. */
static p2p_channel_t *channel_create(p2p_channels_t *t, int from, int to) {
    channel_ptr_t *row = atomic_load_explicit(&t->rows[from], memory_order_relaxed);
    if (!row) {
        row = coll_alloc((size_t)t->n * sizeof *row);
        for (int d = 0; d < t->n; d++) atomic_init(&row[d], NULL);
        atomic_store_explicit(&t->rows[from], row, memory_order_release);
    }
    p2p_channel_t *ch = atomic_load_explicit(&row[to], memory_order_relaxed);
    if (!ch) {
        ch = coll_alloc(sizeof *ch);
        pthread_mutex_init(&ch->mu, NULL);
        atomic_store_explicit(&row[to], ch, memory_order_release);
    }
    return ch;
}

/* The channel from `from` to `to`, made on first use by either end. */
static p2p_channel_t *channel_of(p2p_channels_t *t, int from, int to) {
    channel_ptr_t *row = atomic_load_explicit(&t->rows[from], memory_order_acquire);
    p2p_channel_t *ch = row ? atomic_load_explicit(&row[to], memory_order_acquire) : NULL;
    if (ch) return ch;
    pthread_mutex_lock(&t->mu);
    ch = channel_create(t, from, to);
    pthread_mutex_unlock(&t->mu);
    return ch;
}

/* Removes and returns the oldest request in *q with this tag. */
static coll_request_t *take(coll_request_t **q, int tag) {
    for (; *q; q = &(*q)->next) {
        if ((*q)->tag == tag) {
            coll_request_t *r = *q;
            *q = r->next;
            r->next = NULL;
            return r;
        }
    }
    return NULL;
}

static void append(coll_request_t **q, coll_request_t *r) {
    while (*q) q = &(*q)->next;
    *q = r;
}

static void release(coll_request_t *r) {
    if (atomic_fetch_sub(&r->refs, 1) == 1) coll_free(r, sizeof *r);
}

/* Called with the channel locked, s a send and r a receive with one tag. */
static void deliver(coll_request_t *s, coll_request_t *r) {
    if (s->count != r->count || s->dt != r->dt)
        coll_die("p2p mismatch in group '%s' (tag %d): rank %d (world %d) sends %zu %s to rank %d "
                 "but rank %d (world %d) receives %zu %s from rank %d",
                 s->g->name, s->tag, s->me, s->world_rank, s->count, coll_dtype_name(s->dt), r->me,
                 r->me, r->world_rank, r->count, coll_dtype_name(r->dt), s->me);
    if (s->dt == COLL_XVEC) {
        if (s->buf == r->buf && s->count && s->off < r->off + r->count && r->off < s->off + s->count)
            coll_die("p2p in group '%s' (tag %d): rank %d (world %d) sends elements [%zu, %zu) of an "
                     "xvec to itself and receives them into the overlapping [%zu, %zu) of the same xvec",
                     s->g->name, s->tag, s->me, s->world_rank, s->off, s->off + s->count, r->off,
                     r->off + r->count);
        open_deliver(s->g, s->buf, s->off, r->buf, r->off, s->count, s->world_rank, r->world_rank);
    } else {
        size_t bytes = s->count * coll_dtype_size(s->dt);
        if (bytes) memcpy(r->buf, s->buf, bytes);
    }
    coll_wword_set(&r->done, 1);
    coll_wword_set(&s->done, 1);
    release(r);
    release(s);
}

coll_request_t *coll_p2p_post(group_t *g, int is_send, void *buf, size_t off, size_t count,
                              coll_dtype_t dt, int peer, int tag) {
    const char *what = is_send ? (dt == COLL_XVEC ? "send_open" : "send")
                               : (dt == COLL_XVEC ? "recv_open" : "recv");
    device_t *dev = device_self();
    if (!g) coll_die("coll_%s: the group is NULL", what);
    if (!dev) coll_die("coll_%s on group '%s': called outside a device thread", what, g->name);
    int me = group_rank_of_world(g, dev->rank);
    if (me < 0)
        coll_die("coll_%s on group '%s': world rank %d is not a member of the group", what, g->name,
                 dev->rank);
    if (peer < 0 || peer >= g->n)
        coll_die("coll_%s on group '%s', rank %d (world %d): peer %d is out of range (group size %d)",
                 what, g->name, me, dev->rank, peer, g->n);
    if ((unsigned)dt >= COLL_NDTYPES)
        coll_die("coll_%s on group '%s', rank %d (world %d): dtype %d is not a coll_dtype_t", what,
                 g->name, me, dev->rank, (int)dt);
    size_t es = coll_dtype_size(dt);
    if (count > SIZE_MAX / es)
        coll_die("coll_%s on group '%s', rank %d: count %zu overflows", what, g->name, me, count);
    if (count && !buf)
        coll_die("coll_%s on group '%s', rank %d (world %d): buf is NULL for %zu elements", what,
                 g->name, me, dev->rank, count);
    if (dt == COLL_XVEC && buf) {
        size_t n = ((const xvec_t *)buf)->n;
        if (count > n || off > n - count)
            coll_die("coll_%s on group '%s', rank %d (world %d): elements [%zu, %zu) are outside the "
                     "xvec of %zu elements", what, g->name, me, dev->rank, off, off + count, n);
    }
    coll_request_t *req = coll_alloc(sizeof *req);
    *req = (coll_request_t){.is_send = is_send, .g = g, .me = me, .peer = peer, .tag = tag,
                            .world_rank = dev->rank, .dt = dt, .count = count, .buf = buf, .off = off};
    atomic_init(&req->refs, 2);
    uint64_t bytes = count * es, remote = peer != me ? bytes : 0;
    if (is_send) coll_count(dev->rank, g, COLL_KIND_SEND, dt, bytes, 1.0, remote, 0);
    else coll_count(dev->rank, g, COLL_KIND_RECV, dt, bytes, 1.0, 0, remote);
    if (net_active()) return net_p2p_post(req); /* the peer is another process */
    int from = is_send ? me : peer, to = is_send ? peer : me;
    p2p_channel_t *ch = channel_of(coll_state_of(g)->p2p, from, to);
    pthread_mutex_lock(&ch->mu);
    coll_request_t *other = take(is_send ? &ch->recvs : &ch->sends, tag);
    if (other) deliver(is_send ? req : other, is_send ? other : req);
    else append(is_send ? &ch->sends : &ch->recvs, req);
    pthread_mutex_unlock(&ch->mu);
    return req;
}

/* The plain forms move element arrays: an xvec_t is not one. */
static coll_dtype_t plain(coll_dtype_t dt, const char *what) {
    if (dt == COLL_XVEC)
        coll_die("coll_%s: xvec (open exact sums) goes through coll_%s_open", what, what);
    return dt;
}

coll_request_t *coll_isend(group_t *g, const void *buf, size_t count, coll_dtype_t dt, int peer,
                           int tag) {
    return coll_p2p_post(g, 1, (void *)buf, 0, count, plain(dt, "send"), peer, tag);
}

coll_request_t *coll_irecv(group_t *g, void *buf, size_t count, coll_dtype_t dt, int peer, int tag) {
    return coll_p2p_post(g, 0, buf, 0, count, plain(dt, "recv"), peer, tag);
}

void coll_wait(coll_request_t *req) {
    if (!req) return;
    device_t *dev = device_self();
    if (!dev || dev->rank != req->world_rank)
        coll_die("coll_wait: a request of world rank %d waited by %s", req->world_rank,
                 dev ? "another device" : "a thread that is not a device");
    coll_activity_enter(req->world_rank, req->g, req->is_send ? COLL_KIND_SEND : COLL_KIND_RECV, 0,
                        req->peer, req->tag);
    if (req->net) {
        const int world_rank = req->world_rank;
        net_p2p_wait(req); /* frees it */
        coll_activity_exit(world_rank);
        return;
    }
    coll_wword_wait(&req->done, 1);
    coll_activity_exit(req->world_rank);
    release(req);
}

void coll_wait_all(int n, coll_request_t **reqs) {
    for (int i = 0; i < n; i++) {
        coll_wait(reqs[i]);
        reqs[i] = NULL;
    }
}

void coll_send(group_t *g, const void *buf, size_t count, coll_dtype_t dt, int peer, int tag) {
    coll_wait(coll_isend(g, buf, count, dt, peer, tag));
}

void coll_recv(group_t *g, void *buf, size_t count, coll_dtype_t dt, int peer, int tag) {
    coll_wait(coll_irecv(g, buf, count, dt, peer, tag));
}
