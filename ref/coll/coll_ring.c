/* coll_ring.c - the classic ring algorithms, with shared-memory hand-offs.
 *
 * Rank r only ever reads from its predecessor r-1 (what r-1 has finished)
 * and announces its own progress in a counter that r+1 waits on: a
 * "send to the next rank" is "finish writing, then bump my counter".
 * Counters only grow; each call starts from the value published in the
 * call record (progress_base), so no reset is ever needed.
 *
 * All-reduce = reduce-scatter + all-gather, n-1 steps each. At
 * reduce-scatter step s rank r adds its own chunk (r - s - 2) mod n to the
 * partial sum r-1 made one step earlier, so chunk c is summed starting at
 * rank c+1 and ends, complete, on rank c:
 *   ((x[c+1] + x[c+2]) + ...) + x[c]        (indices mod n)
 * Chunk c covers elements [c L, (c+1) L) of the buffer (clipped to count)
 * with L = ceil(count / n) rounded up to a 64-byte line of elements.
 */
#include "coll_impl.h"

#include <string.h>


static inline char *el(const void *base, size_t i, size_t es) { return (char *)base + i * es; }

static void reduce2(const coll_ctx_t *c, void *dst, const void *a, const void *b, size_t len) {
    const void *src[2] = {a, b};
    coll_reduce_into(dst, src, 2, len, (coll_dtype_t)c->call->dtype, (coll_op_t)c->call->op);
}

void ring_all_reduce(coll_ctx_t *c) {
    coll_call_t *d = c->call;
    int n = c->n, me = c->me, prev = coll_mod(me - 1, n), next = coll_mod(me + 1, n);
    const coll_call_t *pc = peer_call(c, prev);
    size_t es = c->esize, count = d->count, align = coll_align_elems((coll_dtype_t)d->dtype), lo, hi;
    for (int s = 0; s < n - 1; s++) {
        coll_chunk(count, n, coll_mod(me - s - 2, n), align, &lo, &hi);
        if (s > 0) ring_wait_steps(c, prev, (uint32_t)s);
        const void *partial = el(s == 0 ? pc->send : pc->recv, lo, es);
        /* in place, recv == send: dst is source 1 element for element */
        reduce2(c, el(d->recv, lo, es), partial, el(d->send, lo, es), hi - lo);
        ring_done_steps(c, (uint32_t)s + 1);
    }
    for (int t = 0; t < n - 1; t++) {
        coll_chunk(count, n, coll_mod(me - t - 1, n), align, &lo, &hi);
        ring_wait_steps(c, prev, (uint32_t)(n - 1 + t));
        if (hi > lo) memcpy(el(d->recv, lo, es), el(pc->recv, lo, es), (hi - lo) * es);
        ring_done_steps(c, (uint32_t)(n + t));
    }
    /* my successor reads my recv until its last step */
    ring_wait_steps(c, next, (uint32_t)(2 * (n - 1)));
}

/* Partial sums travel through two scratch slots per rank (recv holds only
 * one block): before reusing a slot, wait until the successor has read it. */
void ring_reduce_scatter(coll_ctx_t *c) {
    coll_call_t *d = c->call;
    int n = c->n, me = c->me, prev = coll_mod(me - 1, n), next = coll_mod(me + 1, n);
    const coll_call_t *pc = peer_call(c, prev);
    size_t es = c->esize, rc = d->count, R = rc * es;
    for (int s = 0; s < n - 1; s++) {
        int ch = coll_mod(me - s - 2, n);
        if (s > 0) ring_wait_steps(c, prev, (uint32_t)s);
        const void *partial =
            s == 0 ? el(pc->send, (size_t)ch * rc, es) : (const char *)pc->scratch + (size_t)((s - 1) & 1) * R;
        void *dst;
        if (s == n - 2) {
            dst = d->recv; /* ch == me: the finished block */
        } else {
            if (s >= 2) ring_wait_steps(c, next, (uint32_t)s);
            dst = (char *)d->scratch + (size_t)(s & 1) * R;
        }
        reduce2(c, dst, partial, el(d->send, (size_t)ch * rc, es), rc);
        ring_done_steps(c, (uint32_t)s + 1);
    }
    ring_wait_steps(c, next, (uint32_t)(n - 1));
}

void ring_all_gather(coll_ctx_t *c) {
    coll_call_t *d = c->call;
    int n = c->n, me = c->me, prev = coll_mod(me - 1, n), next = coll_mod(me + 1, n);
    const coll_call_t *pc = peer_call(c, prev);
    size_t B = d->count * c->esize;
    char *mine = (char *)d->recv + (size_t)me * B;
    if (B && d->send != mine) memcpy(mine, d->send, B);
    ring_done_steps(c, 1);
    for (int t = 1; t < n; t++) {
        size_t blk = (size_t)coll_mod(me - t, n);
        ring_wait_steps(c, prev, (uint32_t)t);
        if (B) memcpy((char *)d->recv + blk * B, (const char *)pc->recv + blk * B, B);
        ring_done_steps(c, (uint32_t)t + 1);
    }
    ring_wait_steps(c, next, (uint32_t)n);
}

/* Pipelines: the buffer moves in COLL_PIPE_BYTES pieces down a chain that
 * starts after `first`, so piece j can be one hop further than j+1. */
static size_t pieces(const coll_ctx_t *c, size_t *per) {
    *per = COLL_PIPE_BYTES / c->esize;
    return (c->call->count + *per - 1) / *per;
}

void ring_broadcast(coll_ctx_t *c) {
    coll_call_t *d = c->call;
    int n = c->n, me = c->me, pos = coll_mod(me - d->root, n);
    int prev = coll_mod(me - 1, n), next = coll_mod(me + 1, n);
    size_t per, np = pieces(c, &per), es = c->esize;
    if (pos == 0) {
        ring_done_steps(c, (uint32_t)np);
    } else {
        const coll_call_t *pc = peer_call(c, prev);
        for (size_t j = 0; j < np; j++) {
            size_t lo = j * per, len = d->count - lo < per ? d->count - lo : per;
            ring_wait_steps(c, prev, (uint32_t)j + 1);
            memcpy(el(d->recv, lo, es), el(pc->recv, lo, es), len * es);
            ring_done_steps(c, (uint32_t)j + 1);
        }
    }
    if (pos != n - 1) ring_wait_steps(c, next, (uint32_t)np);
}

/* The chain root+1 -> root+2 -> ... -> root; the first rank's "partial
 * sum" is its own send buffer, read in place. */
void ring_reduce(coll_ctx_t *c) {
    coll_call_t *d = c->call;
    int n = c->n, me = c->me, pos = coll_mod(me - d->root - 1, n);
    int prev = coll_mod(me - 1, n), next = coll_mod(me + 1, n);
    size_t per, np = pieces(c, &per), es = c->esize;
    if (pos == 0) {
        ring_done_steps(c, (uint32_t)np);
    } else {
        const coll_call_t *pc = peer_call(c, prev);
        int prev_is_first = pos == 1;
        for (size_t j = 0; j < np; j++) {
            size_t lo = j * per, len = d->count - lo < per ? d->count - lo : per;
            ring_wait_steps(c, prev, (uint32_t)j + 1);
            const void *partial = prev_is_first ? el(pc->send, lo, es)
                                                : (const char *)pc->scratch + (j & 1) * COLL_PIPE_BYTES;
            void *dst;
            if (pos == n - 1) {
                dst = el(d->recv, lo, es);
            } else {
                if (j >= 2) ring_wait_steps(c, next, (uint32_t)j - 1);
                dst = (char *)d->scratch + (j & 1) * COLL_PIPE_BYTES;
            }
            reduce2(c, dst, partial, el(d->send, lo, es), len);
            ring_done_steps(c, (uint32_t)j + 1);
        }
    }
    if (pos != n - 1) ring_wait_steps(c, next, (uint32_t)np);
}
