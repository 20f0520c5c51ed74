/* coll_open.c - open exact sums (xvec_t) as a collective type, COLL_XVEC:
 * the entry points, how an open range moves, and point-to-point delivery.
 *
 * An element of an open sum is exact, so the result of a reduction does
 * not depend on the algorithm, the rank order or the chunking: every path
 * ends in the same exact value, and rounding it once gives the same bits.
 * The calls go through the same steps as every other collective (coll.c:
 * bind, publish, agreement check inside the arrival barrier, algorithm,
 * counters), with the vectors' xvec_t as the published buffers and the
 * element offsets beside them; the algorithms are in coll_open_algo.c.
 *
 * Wire format. A range of an open sum travels as what an xvec already is:
 * 8 bytes per element, the fp64 sum (a slow element's is a NaN tag), and
 * for each slow element its whole xacc_t. Devices share memory, so the
 * receiver reads that format where the sender keeps it (xvec_merge_range
 * on the sender's vector or partial) instead of packing it into a copy; a
 * message-passing port would send sum[lo, hi) and then the slow elements'
 * accumulators in element order. Counters see exactly that traffic.
 */
#include "coll_impl.h"

#include <pthread.h>
#include <stdint.h>

/* ---- moving a range, counting what it carries ---- */

/* Bytes of exception payload in src[off, off + len): an xacc_t per slow
 * element. n_slow == 0 proves there is none without reading the range
 * (it counts accumulators ever handed out, a superset of the slow ones). */
static uint64_t exception_bytes(const xvec_t *src, size_t off, size_t len) {
    if (src->n_slow == 0) return 0;
    uint64_t k = 0;
    for (size_t i = 0; i < len; i++) k += (uint64_t)xvec_is_slow(src, off + i);
    return k * sizeof(xacc_t);
}

void open_move(const coll_ctx_t *c, xvec_t *dst, size_t doff, const xvec_t *src, size_t soff,
               size_t len, int store, int from, int to) {
    if (len == 0) return;
    if (from != to) {
        uint64_t x = exception_bytes(src, soff, len);
        coll_kind_t kind = (coll_kind_t)c->call->kind;
        if (x) {
            coll_count_traffic(c->g->ranks[from], c->g, kind, COLL_XVEC, x, 0);
            coll_count_traffic(c->g->ranks[to], c->g, kind, COLL_XVEC, 0, x);
        }
    }
    (store ? xvec_store_range : xvec_merge_range)(dst, doff, src, soff, len);
}

/* ---- point-to-point ---- */

/* A delivery runs on whichever thread posts second, so deliveries from
 * several senders into one xvec (or into a vector another delivery is
 * reading) could run at once; a merge may grow the vector's accumulator
 * list, which no reader may see half done. Deliveries therefore lock the
 * stripes of both vectors, lower stripe first. */
#define STRIPES 64
#define M1 PTHREAD_MUTEX_INITIALIZER
#define M8 M1, M1, M1, M1, M1, M1, M1, M1
static pthread_mutex_t stripe_mu[STRIPES] = {M8, M8, M8, M8, M8, M8, M8, M8};
#undef M8
#undef M1

static unsigned stripe(const void *p) {
    return (unsigned)((((uintptr_t)p >> 4) * 0x9e3779b97f4a7c15ULL) >> 58); /* 6 bits */
}

void open_deliver(const group_t *g, const xvec_t *src, size_t soff, xvec_t *dst, size_t doff,
                  size_t count, int from_world, int to_world) {
    if (count == 0) return;
    unsigned a = stripe(src), b = stripe(dst);
    unsigned lo = a < b ? a : b, hi = a < b ? b : a;
    pthread_mutex_lock(&stripe_mu[lo]);
    if (hi != lo) pthread_mutex_lock(&stripe_mu[hi]);
    uint64_t x = from_world != to_world ? exception_bytes(src, soff, count) : 0;
    xvec_merge_range(dst, doff, src, soff, count);
    if (hi != lo) pthread_mutex_unlock(&stripe_mu[hi]);
    pthread_mutex_unlock(&stripe_mu[lo]);
    if (x) {
        coll_count_traffic(from_world, g, COLL_KIND_SEND, COLL_XVEC, x, 0);
        coll_count_traffic(to_world, g, COLL_KIND_RECV, COLL_XVEC, 0, x);
    }
}

coll_request_t *coll_isend_open(group_t *g, const xvec_t *v, size_t offset, size_t count, int peer,
                                int tag) {
    return coll_p2p_post(g, 1, (void *)v, offset, count, COLL_XVEC, peer, tag);
}

coll_request_t *coll_irecv_open(group_t *g, xvec_t *v, size_t offset, size_t count, int peer,
                                int tag) {
    return coll_p2p_post(g, 0, v, offset, count, COLL_XVEC, peer, tag);
}

void coll_send_open(group_t *g, const xvec_t *v, size_t offset, size_t count, int peer, int tag) {
    coll_wait(coll_isend_open(g, v, offset, count, peer, tag));
}

void coll_recv_open(group_t *g, xvec_t *v, size_t offset, size_t count, int peer, int tag) {
    coll_wait(coll_irecv_open(g, v, offset, count, peer, tag));
}

/* ---- collectives ---- */

static void check_range(const coll_ctx_t *c, const coll_call_t *d, const xvec_t *v, size_t off,
                        size_t count, const char *what) {
    if (!v) {
        if (count) coll_bad_call(c, d, "%s is NULL but %zu elements are needed", what, count);
        return;
    }
    if (count > v->n || off > v->n - count)
        coll_bad_call(c, d, "%s elements [%zu, %zu) are outside the xvec of %zu elements", what, off,
                      off + count, v->n);
}

/* Makes a lazily zeroed vector hold its zeros, so that a part of it can
 * be stored into (the stores need a claimed vector, xacc.h). Done by the
 * owner before the call is published: peers may read v from then on. */
static void materialize(xvec_t *v) {
    static const double zeros[512];
    if (!xvec_claim_zero(v)) return;
    for (size_t i = 0; i < v->n; i += 512)
        xvec_store_f64_exact(v, i, zeros, v->n - i < 512 ? v->n - i : 512);
}

static uint64_t bus_bytes(coll_kind_t kind, uint64_t S, int n) {
    return (uint64_t)((double)S * coll_busbw_factor(kind, n) + 0.5);
}

void coll_all_reduce_open(group_t *g, xvec_t *v, size_t offset, size_t count) {
    coll_ctx_t c;
    coll_bind(&c, g, COLL_KIND_ALL_REDUCE);
    coll_call_t d = coll_make_call(COLL_KIND_ALL_REDUCE, COLL_XVEC, COLL_SUM, count, -1, v, v);
    d.send_off = d.recv_off = offset;
    check_range(&c, &d, v, offset, count, "v");
    if (count) materialize(v);
    coll_run(&c, &d);
    uint64_t S = (uint64_t)count * sizeof(double), bus = bus_bytes(COLL_KIND_ALL_REDUCE, S, c.n);
    coll_leave(&c, S, bus, bus);
}

void coll_reduce_scatter_open(group_t *g, const xvec_t *send, size_t send_offset, xvec_t *recv,
                              size_t recv_offset, size_t recv_count) {
    coll_ctx_t c;
    coll_bind(&c, g, COLL_KIND_REDUCE_SCATTER);
    coll_call_t d = coll_make_call(COLL_KIND_REDUCE_SCATTER, COLL_XVEC, COLL_SUM, recv_count, -1, send, recv);
    d.send_off = send_offset, d.recv_off = recv_offset;
    size_t n = (size_t)c.n, rc = recv_count;
    if (rc > SIZE_MAX / sizeof(double) / n) coll_bad_call(&c, &d, "the byte size overflows size_t");
    check_range(&c, &d, send, send_offset, n * rc, "send");
    check_range(&c, &d, recv, recv_offset, rc, "recv");
    if (rc && send == recv) {
        int in_place = recv_offset == send_offset + (size_t)c.me * rc;
        if (!in_place && recv_offset < send_offset + n * rc && send_offset < recv_offset + rc)
            coll_bad_call(&c, &d, "recv elements [%zu, %zu) overlap send's [%zu, %zu) (in place needs "
                                  "recv_offset == send_offset + rank * recv_count)",
                          recv_offset, recv_offset + rc, send_offset, send_offset + n * rc);
    } else if (rc && coll_overlap(send->sum + send_offset, n * rc * sizeof(double),
                                  recv->sum + recv_offset, rc * sizeof(double))) {
        coll_bad_call(&c, &d, "recv and send are different xvecs over the same memory");
    }
    /* Every element of a whole recv is stored, so a lazily zeroed one is
     * claimed and never cleared; anything less must hold real zeros. */
    if (rc && recv != send && recv_offset == 0 && rc == recv->n) xvec_claim_zero(recv);
    else if (rc) materialize(recv);
    coll_run(&c, &d);
    uint64_t S = (uint64_t)n * rc * sizeof(double), bus = bus_bytes(COLL_KIND_REDUCE_SCATTER, S, c.n);
    coll_leave(&c, S, bus, bus);
}

void open_member_free(coll_member_t *m) {
    for (int k = 0; k < 2; k++) {
        xvec_free(&m->open[k]); /* its accumulators; sum[] is open_mem */
        coll_free(m->open_mem[k], m->open_cap[k] * sizeof(double));
    }
}
