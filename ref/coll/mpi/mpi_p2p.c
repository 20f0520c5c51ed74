/* mpi_p2p.c - point-to-point transfers across processes (coll.h).
 *
 * A message is [header: dtype, count] [payload: the elements, or a
 * packed open-sum range]. The sender packs it and sends synchronously
 * (MPI_Issend: done when the receiver has matched it). The receiver
 * does not know the size in advance (a packed range's depends on its
 * data), so a posted receive waits in a pending list until a probe
 * finds its message; then the payload is received, checked against what
 * the receiver asked for (a mismatch names both ranks, as with shared
 * memory) and delivered: copied, or merged exactly into the xvec.
 *
 * Every wait of this process advances the whole list (net_progress), so
 * a device blocked on one transfer still takes in the messages its
 * other receives are waiting for. Receives from one sender with one tag
 * are matched in the order they were posted: only the oldest of them
 * probes.
 */
#ifdef PARITY_HAVE_MPI
#include "mpi_internal.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    int32_t dtype, pad;
    uint64_t count;
} header_t;

struct net_req {
    MPI_Request mreq;        /* the send, or the payload's receive */
    unsigned char *staging;  /* [header | payload] */
    size_t bytes;
    int src, tag;            /* a receive's sender (world rank) and MPI tag */
    _Atomic int state;       /* receive: 0 waiting for a probe, 1 receiving, 2 delivered */
    coll_request_t *owner;
    struct net_req *next;    /* the pending list, oldest first */
};

static pthread_mutex_t pending_mu = PTHREAD_MUTEX_INITIALIZER;
static struct net_req *pending;

static int mpi_tag(const coll_request_t *r) {
    if (r->g->net_id < 0)
        coll_die("coll_%s on group '%s': the group was created inside a run across processes (create "
                 "it before devices_run)", r->is_send ? "send" : "recv", r->g->name);
    if (r->tag < 0 || r->tag >= (1 << NET_TAG_BITS))
        coll_die("coll_%s on group '%s', rank %d (world %d): tag %d is outside the MPI transport's "
                 "0..%d", r->is_send ? "send" : "recv", r->g->name, r->me, r->world_rank, r->tag,
                 (1 << NET_TAG_BITS) - 1);
    return (r->g->net_id << NET_TAG_BITS) | r->tag;
}

coll_request_t *net_p2p_post(coll_request_t *r) {
    struct net_req *n = calloc(1, sizeof *n);
    if (!n) parity_fatal("collectives: out of host memory");
    r->net = n;
    n->owner = r;
    n->tag = mpi_tag(r);
    n->src = group_world_rank(r->g, r->peer);
    if (!r->is_send) {
        pthread_mutex_lock(&pending_mu);
        struct net_req **q = &pending;
        while (*q) q = &(*q)->next;
        *q = n;
        pthread_mutex_unlock(&pending_mu);
        return r;
    }
    size_t payload = 0, nslow = 0;
    if (r->dt == COLL_XVEC) payload = net_xvec_packed_bytes(r->buf, r->off, r->count, &nslow);
    else payload = r->count * coll_dtype_size(r->dt);
    n->bytes = sizeof(header_t) + payload;
    n->staging = malloc(n->bytes);
    if (!n->staging) parity_fatal("collectives: out of host memory");
    header_t h = {(int32_t)r->dt, 0, r->count};
    memcpy(n->staging, &h, sizeof h);
    if (r->dt == COLL_XVEC) net_xvec_pack(r->buf, r->off, r->count, n->staging + sizeof h);
    else if (payload) memcpy(n->staging + sizeof h, r->buf, payload);
    if (nslow && r->peer != r->me)
        coll_count_traffic(r->world_rank, r->g, COLL_KIND_SEND, COLL_XVEC, nslow * sizeof(xacc_t), 0);
    MPI_Issend(n->staging, net_count(n->bytes, "send"), MPI_BYTE, n->src, n->tag, net_p2p_comm,
               &n->mreq);
    return r;
}

/* The payload arrived: check it against the receive and deliver it. */
static void deliver(struct net_req *n) {
    coll_request_t *r = n->owner;
    header_t h;
    memcpy(&h, n->staging, sizeof h);
    if (h.count != r->count || h.dtype != (int32_t)r->dt)
        coll_die("p2p mismatch in group '%s' (tag %d): rank %d (world %d) sends %llu %s to rank %d "
                 "but rank %d (world %d) receives %zu %s from rank %d",
                 r->g->name, r->tag, r->peer, n->src, (unsigned long long)h.count,
                 (unsigned)h.dtype < COLL_NDTYPES ? coll_dtype_name((coll_dtype_t)h.dtype) : "?",
                 r->me, r->me, r->world_rank, r->count, coll_dtype_name(r->dt), r->peer);
    const unsigned char *payload = n->staging + sizeof h;
    const size_t bytes = n->bytes - sizeof h;
    if (r->dt != COLL_XVEC) {
        if (bytes) memcpy(r->buf, payload, bytes);
        return;
    }
    xvec_t part;
    size_t nslow;
    if (net_xvec_unpack(payload, bytes, r->count, &part, &nslow))
        coll_die("recv_open in group '%s' (tag %d): rank %d (world %d) sent %zu bytes, not a packed "
                 "range of %zu elements", r->g->name, r->tag, r->peer, n->src, bytes, r->count);
    open_deliver(r->g, &part, 0, r->buf, r->off, r->count, n->src, r->world_rank);
    xvec_free(&part);
}

/* Whether an older pending receive has the same sender and tag. */
static int behind_another(const struct net_req *n) {
    for (const struct net_req *o = pending; o != n; o = o->next)
        if (atomic_load(&o->state) == 0 && o->src == n->src && o->tag == n->tag) return 1;
    return 0;
}

void net_progress(void) {
    if (pthread_mutex_trylock(&pending_mu)) return; /* another thread is at it */
    for (struct net_req **q = &pending; *q;) {
        struct net_req *n = *q;
        int state = atomic_load(&n->state), flag = 0;
        if (state == 0 && !behind_another(n)) {
            MPI_Message m;
            MPI_Status st;
            MPI_Improbe(n->src, n->tag, net_p2p_comm, &flag, &m, &st);
            if (flag) {
                int bytes;
                MPI_Get_count(&st, MPI_BYTE, &bytes);
                n->bytes = (size_t)bytes;
                n->staging = malloc(n->bytes + 1);
                if (!n->staging) parity_fatal("collectives: out of host memory");
                MPI_Imrecv(n->staging, bytes, MPI_BYTE, &m, &n->mreq);
                atomic_store(&n->state, state = 1);
            }
        }
        if (state == 1) {
            MPI_Test(&n->mreq, &flag, MPI_STATUS_IGNORE);
            if (flag) {
                if (n->bytes < sizeof(header_t))
                    coll_die("p2p in group '%s': a message of %zu bytes from world rank %d has no "
                             "header", n->owner->g->name, n->bytes, n->src);
                deliver(n);
                *q = n->next; /* off the list before anyone sees it done */
                atomic_store(&n->state, 2);
                continue;
            }
        }
        q = &n->next;
    }
    pthread_mutex_unlock(&pending_mu);
}

void net_p2p_wait(coll_request_t *r) {
    struct net_req *n = r->net;
    const int peer = r->peer;
    net_wait_t w = {r->g, r->is_send ? "send" : "recv", 0, &peer};
    if (r->is_send) {
        net_wait_all(1, &n->mreq, &w);
    } else {
        net_wait_state(&n->state, 2, &w); /* the polling delivers it */
    }
    free(n->staging);
    free(n);
    coll_free(r, sizeof *r);
}
#endif
