/* dp_reduce.c - exact reduce-scatter of gradient buckets.
 *
 * Each rank's gradients are open exact sums (one fp64 per element, every
 * addition proven exact, xacc.h). Reducing a bucket means: for the piece
 * this rank owns, merge every rank's open sums exactly and round once.
 * Because the merge is exact, the result has the golden bits whatever the
 * number of ranks, the microbatch count, or the algorithm:
 *  - direct: after a barrier (every rank's bucket is final), each rank
 *    reads its piece of every peer's accumulators, in group order;
 *  - ring: n-1 steps; at step s rank r merges its own part of chunk
 *    (r - s - 2) mod n with the partial its left neighbour built at step
 *    s-1, so chunk c starts at rank c+1 and ends, complete, at rank c.
 * Devices are threads of one process, so "reading a peer" is reading its
 * memory after a barrier, exactly as the direct collectives do. Traffic is
 * counted as the fp64 partial sums a message-passing version would send.
 *
 * broken_fp32_sums (tests only) instead rounds each rank's local sums to
 * fp32 and adds them with the plain fp32 ring reduce-scatter: the bug the
 * equivalence checker must catch.
 */
#include <stdlib.h>
#include <string.h>

#include "dp_internal.h"

/* ---- the communication thread (overlap_grad_reduce, overlap_param_gather) */

typedef struct {
    dp_rank_t *r;
    device_t *dev;
} comm_arg_t;

static void *comm_main(void *p) {
    comm_arg_t a = *(comm_arg_t *)p;
    free(p);
    dp_rank_t *r = a.r;
    device_bind_thread(a.dev); /* collectives see the device; it uses grad_group */
    coll_set_algo(r->sh->run->algo);
    pthread_mutex_lock(&r->comm_lock);
    for (;;) {
        while (!r->comm_stop && r->comm_done >= r->comm_ready)
            pthread_cond_wait(&r->comm_cond, &r->comm_lock);
        if (r->comm_done >= r->comm_ready && r->comm_stop) break;
        int b = r->comm_done;
        pthread_mutex_unlock(&r->comm_lock);
        r->comm_job(r, b);
        pthread_mutex_lock(&r->comm_lock);
        r->comm_done = b + 1;
        pthread_cond_broadcast(&r->comm_cond);
    }
    pthread_mutex_unlock(&r->comm_lock);
    return NULL;
}

static void reduce_job(dp_rank_t *r, int b) { dp_reduce_bucket(r, b, dp_grad_piece(r, b)); }

/* Sets the job for the buckets handed over from now on; only while the
 * thread is idle (between phases). */
static void set_job(dp_rank_t *r, void (*job)(dp_rank_t *, int)) {
    pthread_mutex_lock(&r->comm_lock);
    r->comm_job = job;
    pthread_mutex_unlock(&r->comm_lock);
}

void dp_comm_use_for_reduce(dp_rank_t *r) { set_job(r, reduce_job); }
void dp_comm_use_for_gather(dp_rank_t *r) { set_job(r, dp_gather_params_job); }

int dp_comm_start(dp_rank_t *r, device_t *dev) {
    pthread_mutex_init(&r->comm_lock, NULL);
    pthread_cond_init(&r->comm_cond, NULL);
    comm_arg_t *a = malloc(sizeof *a);
    if (!a) return -1;
    *a = (comm_arg_t){r, dev};
    if (pthread_create(&r->comm, NULL, comm_main, a)) {
        free(a);
        return -1;
    }
    r->comm_started = 1;
    dp_comm_use_for_reduce(r);
    return 0;
}

void dp_comm_stop(dp_rank_t *r) {
    if (!r->comm_started) return;
    pthread_mutex_lock(&r->comm_lock);
    r->comm_stop = 1;
    pthread_cond_broadcast(&r->comm_cond);
    pthread_mutex_unlock(&r->comm_lock);
    pthread_join(r->comm, NULL);
    pthread_mutex_destroy(&r->comm_lock);
    pthread_cond_destroy(&r->comm_cond);
    r->comm_started = 0;
}

void dp_buckets_ready(dp_rank_t *r, int upto) {
    pthread_mutex_lock(&r->comm_lock);
    if (upto > r->comm_ready) {
        r->comm_ready = upto;
        pthread_cond_broadcast(&r->comm_cond);
    }
    pthread_mutex_unlock(&r->comm_lock);
}

/* ---- reductions ---------------------------------------------------------- */

float *dp_grad_piece(dp_rank_t *r, int b) {
    const dp_plan_t *p = &r->sh->plan;
    if (p->stage >= 2) return r->shard_grads + p->buckets[b].shard_off;
    size_t lo, hi;
    dp_piece(p, b, r->rank, &lo, &hi);
    return r->g->grads + lo;
}

/* dst[dst_off + (x - lo)] += src's open sum of flat element x, x in [lo, hi);
 * = instead of += when store (dst claimed, xacc.h: xvec_claim_zero). */
static void merge_flat(xvec_t *dst, size_t dst_off, const gpt_t *src, const dp_bucket_t *bk,
                       size_t lo, size_t hi, int store) {
    for (int t = bk->first; t < bk->last; t++) {
        const param_info_t *pi = &src->table.info[t];
        size_t a = pi->offset > lo ? pi->offset : lo;
        size_t e = pi->offset + pi->numel < hi ? pi->offset + pi->numel : hi;
        if (a >= e) continue;
        (store ? xvec_store_range : xvec_merge_range)(dst, dst_off + (a - lo), &src->grad_acc[t].x,
                                                      a - pi->offset, e - a);
    }
}

/* Scratch buffer k as len elements, claimed: the caller's first
 * merge_flat over [lo, hi) stores, so no pass clears it. */
static xvec_t *fresh(dp_rank_t *r, int k, size_t len) {
    xvec_free(&r->scratch[k]); /* drops fallback accumulators; sum[] is ours */
    xvec_init_with(&r->scratch[k], len, r->scratch_mem[k]);
    xvec_claim_zero(&r->scratch[k]);
    return &r->scratch[k];
}

static void reduce_direct(dp_rank_t *r, int b, float *out) {
    const dp_plan_t *p = &r->sh->plan;
    size_t lo, hi;
    dp_piece(p, b, r->rank, &lo, &hi);
    coll_barrier(r->grad_group); /* every rank's bucket b is final */
    xvec_t *s = fresh(r, 0, hi - lo);
    for (int q = 0; q < r->n; q++)
        merge_flat(s, 0, dp_peer(r, q)->g, &p->buckets[b], lo, hi, q == 0);
    xvec_round(s, out);
}

static void reduce_ring(dp_rank_t *r, int b, float *out) {
    const dp_plan_t *p = &r->sh->plan;
    const dp_bucket_t *bk = &p->buckets[b];
    const int n = r->n, left = (r->rank + n - 1) % n;
    const dp_rank_t *lr = dp_peer(r, left);
    coll_barrier(r->grad_group);
    xvec_t *s = NULL;
    for (int step = 0; step < n - 1; step++) {
        int c = ((r->rank - step - 2) % n + n) % n;
        size_t lo, hi;
        dp_piece(p, b, c, &lo, &hi);
        s = fresh(r, step & 1, hi - lo);
        merge_flat(s, 0, r->g, bk, lo, hi, 1);
        if (step == 0)
            merge_flat(s, 0, lr->g, bk, lo, hi, 0);
        else
            xvec_merge_range(s, 0, &lr->scratch[(step - 1) & 1], 0, hi - lo);
        coll_barrier(r->grad_group); /* my partial is ready for my right neighbour */
    }
    if (n == 1) {
        size_t lo, hi;
        dp_piece(p, b, 0, &lo, &hi);
        s = fresh(r, 0, hi - lo);
        merge_flat(s, 0, r->g, bk, lo, hi, 1);
    }
    xvec_round(s, out);
}

static void reduce_broken(dp_rank_t *r, int b, float *out) {
    const dp_plan_t *p = &r->sh->plan;
    const dp_bucket_t *bk = &p->buckets[b];
    const size_t padded = bk->piece * (size_t)r->n;
    float *local = calloc(padded ? padded : 1, sizeof(float));
    float *mine = malloc((bk->piece ? bk->piece : 1) * sizeof(float));
    if (!local || !mine) parity_fatal("dp: out of memory in the broken reduction");
    for (int t = bk->first; t < bk->last; t++) {
        const param_info_t *pi = &r->g->table.info[t];
        acc_round(&r->g->grad_acc[t], local + (pi->offset - bk->lo));
    }
    coll_algo_t was = coll_set_algo(COLL_ALGO_RING);
    coll_reduce_scatter(r->grad_group, local, mine, bk->piece, COLL_F32, COLL_SUM);
    coll_set_algo(was);
    size_t lo, hi;
    dp_piece(p, b, r->rank, &lo, &hi);
    memcpy(out, mine, (hi - lo) * sizeof(float));
    free(local);
    free(mine);
}

void dp_reduce_bucket(dp_rank_t *r, int b, float *out) {
    double t0 = dp_now();
    const dp_bucket_t *bk = &r->sh->plan.buckets[b];
    if (r->sh->run->broken_fp32_sums)
        reduce_broken(r, b, out);
    else if (r->sh->run->algo == COLL_ALGO_RING)
        reduce_ring(r, b, out);
    else
        reduce_direct(r, b, out);
    /* nccl-tests convention for a reduce-scatter of the fp64 partials */
    uint64_t bytes = (uint64_t)bk->piece * (uint64_t)r->n * sizeof(double);
    coll_counters_add(group_world_rank(r->grad_group, r->rank), COLL_KIND_REDUCE_SCATTER, bytes,
                      coll_busbw_factor(COLL_KIND_REDUCE_SCATTER, r->n));
    r->rs_elems += bk->piece;
    r->t_reduce += dp_now() - t0;
}

void dp_comm_finish(dp_rank_t *r) {
    const int nb = r->sh->plan.nbuckets;
    dp_buckets_ready(r, nb);
    pthread_mutex_lock(&r->comm_lock);
    while (r->comm_done < nb) pthread_cond_wait(&r->comm_cond, &r->comm_lock);
    r->comm_done = r->comm_ready = 0; /* the thread idles until its next job */
    pthread_mutex_unlock(&r->comm_lock);
}

void dp_reduce_pending(dp_rank_t *r) {
    const int nb = r->sh->plan.nbuckets;
    if (r->sh->run->pc.overlap_grad_reduce) {
        dp_comm_finish(r);
    } else {
        for (int b = 0; b < nb; b++) dp_reduce_bucket(r, b, dp_grad_piece(r, b));
    }
    r->report->seconds_reduce += r->t_reduce;
    r->report->exact_rs_elems += r->rs_elems;
    r->t_reduce = 0;
    r->rs_elems = 0;
}
