/* coll_open_algo.c - the direct and ring algorithms for open exact sums.
 *
 * The same patterns as coll_direct.c and coll_ring.c (the same slices,
 * chunks and ring steps), with one difference that shapes everything
 * here: an xvec is not a flat array. Storing into one may grow its list
 * of accumulators, so a vector must never be written while another thread
 * reads any part of it, and only its owner's thread (or, for a small
 * call, the last rank to arrive while every other member waits) writes
 * it. Results are therefore built in each member's own partials
 * (coll_member_t.open) and every rank copies them into its own vector
 * once nobody reads that vector any more. Each member's partials are
 * rebuilt only after the arrival barrier of a later call, which no
 * reader of this call can have missed, so no call waits at its end for
 * readers of its partials.
 *
 * Exceptions (slow elements) ride along wherever their element moves, and
 * open_move counts them where they cross from one rank to another.
 */
#include "coll_impl.h"

/* Slices and chunks start on a 64-byte line of fp64 sums. */
#define ALIGN coll_align_elems(COLL_XVEC)

/* Member c->me's partial k as a claimed vector of len elements: its first
 * move must store every element (xacc.h: xvec_claim_zero). */
static xvec_t *partial(const coll_ctx_t *c, int k, size_t len) {
    coll_member_t *m = c->self;
    xvec_free(&m->open[k]); /* drops the last use's accumulators; sum[] is ours */
    if (m->open_cap[k] < len) {
        coll_free(m->open_mem[k], m->open_cap[k] * sizeof(double));
        m->open_mem[k] = coll_alloc(len * sizeof(double));
        m->open_cap[k] = len;
    }
    xvec_init_with(&m->open[k], len, m->open_mem[k]);
    xvec_claim_zero(&m->open[k]);
    return &m->open[k];
}

static const xvec_t *partial_of(const coll_ctx_t *c, int j, int k) { return &c->cs->members[j].open[k]; }

/* dst[doff ...] = the exact sum over ranks j of j's send[first, first+len),
 * done by (and counted as received by) rank `by`. */
static void sum_over_ranks(const coll_ctx_t *c, int by, xvec_t *dst, size_t doff, size_t first,
                           size_t len) {
    for (int j = 0; j < c->n; j++) {
        const coll_call_t *p = peer_call(c, j);
        open_move(c, dst, doff, p->send, p->send_off + first, len, j == 0, j, by);
    }
}

/* ---- direct ---- */

/* Rank me sums its slice of every peer's range into its partial; after a
 * barrier (nobody reads a vector any more) every rank stores every slice
 * into its own vector. Two barriers, as coll_direct.c. */
void open_direct_all_reduce(coll_ctx_t *c) {
    const coll_call_t *d = c->call;
    size_t lo, hi;
    coll_chunk(d->count, c->n, c->me, ALIGN, &lo, &hi);
    sum_over_ranks(c, c->me, partial(c, 0, hi - lo), 0, lo, hi - lo);
    coll_barrier_wait(c);
    for (int k = 0; k < c->n; k++) {
        int i = (c->me + k) % c->n; /* start with my own: spreads the readers */
        coll_chunk(d->count, c->n, i, ALIGN, &lo, &hi);
        open_move(c, d->recv, d->recv_off + lo, partial_of(c, i, 0), 0, hi - lo, 1, i, c->me);
    }
}

/* Block me of every send, into my recv. In place (recv is the send
 * vector), peers still read that vector, so the sum waits in my partial
 * until the second barrier; otherwise that barrier only hands my send
 * back. */
void open_direct_reduce_scatter(coll_ctx_t *c) {
    const coll_call_t *d = c->call;
    size_t rc = d->count;
    int via_partial = d->recv == d->send;
    xvec_t *dst = via_partial ? partial(c, 0, rc) : d->recv;
    sum_over_ranks(c, c->me, dst, via_partial ? 0 : d->recv_off, (size_t)c->me * rc, rc);
    coll_barrier_wait(c);
    if (via_partial) open_move(c, d->recv, d->recv_off, dst, 0, rc, 1, c->me, c->me);
}

/* A small call, by the last rank to arrive while the others wait: the
 * direct algorithm's moves, done in turn, so the result and the counters
 * are the split algorithm's. Every result is built before any vector is
 * written (all of them are sources). A one-rank group, whatever its size,
 * comes here too: its sum is its own input. */
void open_whole(coll_ctx_t *c) {
    const coll_call_t *d = c->call;
    int n = c->n;
    size_t lo, hi, rc = d->count;
    if (n == 1) {
        if (d->kind == COLL_KIND_REDUCE_SCATTER && (d->recv != d->send || d->recv_off != d->send_off))
            open_move(c, d->recv, d->recv_off, d->send, d->send_off, rc, 1, 0, 0);
    } else if (d->kind == COLL_KIND_ALL_REDUCE) {
        xvec_t *sum = partial(c, 0, d->count);
        for (int i = 0; i < n; i++) {
            coll_chunk(d->count, n, i, ALIGN, &lo, &hi);
            sum_over_ranks(c, i, sum, lo, lo, hi - lo);
        }
        for (int j = 0; j < n; j++) {
            const coll_call_t *p = peer_call(c, j);
            for (int i = 0; i < n; i++) {
                coll_chunk(d->count, n, i, ALIGN, &lo, &hi);
                open_move(c, p->recv, p->recv_off + lo, sum, lo, hi - lo, 1, i, j);
            }
        }
    } else { /* COLL_KIND_REDUCE_SCATTER */
        xvec_t *sum = partial(c, 0, (size_t)n * rc);
        for (int i = 0; i < n; i++) sum_over_ranks(c, i, sum, (size_t)i * rc, (size_t)i * rc, rc);
        for (int i = 0; i < n; i++) {
            const coll_call_t *p = peer_call(c, i);
            open_move(c, p->recv, p->recv_off, sum, (size_t)i * rc, rc, 1, i, i);
        }
    }
}

/* ---- ring ----
 * The steps of coll_ring.c. Rank r reads only from r-1: at step 0 its
 * input vector, later the partial it finished one step earlier; before a
 * partial slot is rebuilt, r waits until r+1 has read it. */

/* All-reduce: steps 0 .. n-2 reduce (chunk (me - u - 2) mod n: r-1's
 * partial plus my own range), so chunk c ends complete on rank c at step
 * n-2; steps n-1 .. 2n-3 pass finished chunks on (chunk (me - t - 1)).
 * A finished chunk goes into my vector once r+1 has read my input (its
 * step 0); the last one straight from r-1's partial, as nobody needs it
 * from me. */
void open_ring_all_reduce(coll_ctx_t *c) {
    const coll_call_t *d = c->call, *pc;
    int n = c->n, me = c->me, prev = coll_mod(me - 1, n), next = coll_mod(me + 1, n);
    pc = peer_call(c, prev);
    xvec_t *v = d->recv;
    int v_free = 0; /* r+1 is done with my input */
    for (int u = 0; u < 2 * n - 2; u++) {
        int reducing = u < n - 1;
        size_t lo, hi;
        coll_chunk(d->count, n, coll_mod(reducing ? me - u - 2 : me - (u - n + 1) - 1, n), ALIGN, &lo, &hi);
        if (u > 0) ring_wait_steps(c, prev, (uint32_t)u);
        const xvec_t *in = u == 0 ? pc->send : partial_of(c, prev, (u - 1) & 1);
        size_t in_off = u == 0 ? pc->send_off + lo : 0;
        const xvec_t *done = in; /* where the finished chunk is, if this step finishes one */
        if (u < 2 * n - 3) {
            if (u >= 2) ring_wait_steps(c, next, (uint32_t)u);
            xvec_t *p = partial(c, u & 1, hi - lo);
            open_move(c, p, 0, in, in_off, hi - lo, 1, prev, me);
            if (reducing) open_move(c, p, 0, v, d->recv_off + lo, hi - lo, 0, me, me);
            ring_done_steps(c, (uint32_t)u + 1);
            done = p, in_off = 0;
        }
        if (u < n - 2) continue; /* not finished yet */
        if (!v_free) ring_wait_steps(c, next, 1), v_free = 1;
        open_move(c, v, d->recv_off + lo, done, in_off, hi - lo, 1, done == in ? prev : me, me);
    }
}

/* Reduce-scatter: the all-reduce's first n-1 steps over blocks of
 * recv_count; block me is complete after step n-2. It goes straight into
 * recv unless recv is the send vector (r+1 may still be reading its step
 * 0 input from it): then through my partial, after r+1's step 0. */
void open_ring_reduce_scatter(coll_ctx_t *c) {
    const coll_call_t *d = c->call;
    int n = c->n, me = c->me, prev = coll_mod(me - 1, n), next = coll_mod(me + 1, n);
    const coll_call_t *pc = peer_call(c, prev);
    size_t rc = d->count;
    int in_place = d->recv == d->send;
    xvec_t *p = NULL;
    for (int s = 0; s < n - 1; s++) {
        size_t first = (size_t)coll_mod(me - s - 2, n) * rc;
        if (s > 0) ring_wait_steps(c, prev, (uint32_t)s);
        const xvec_t *in = s == 0 ? pc->send : partial_of(c, prev, (s - 1) & 1);
        size_t in_off = s == 0 ? pc->send_off + first : 0;
        xvec_t *dst;
        size_t doff = 0;
        if (s == n - 2 && !in_place) {
            dst = d->recv, doff = d->recv_off;
        } else {
            if (s >= 2) ring_wait_steps(c, next, (uint32_t)s);
            dst = p = partial(c, s & 1, rc);
        }
        open_move(c, dst, doff, d->send, d->send_off + first, rc, 1, me, me);
        open_move(c, dst, doff, in, in_off, rc, 0, prev, me);
        ring_done_steps(c, (uint32_t)s + 1);
    }
    ring_wait_steps(c, next, 1); /* r+1 has read my send: it is mine again */
    if (in_place) open_move(c, d->recv, d->recv_off, p, 0, rc, 1, me, me);
}
