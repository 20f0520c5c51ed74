/* reduce.c - exact reduce-scatter of gradient buckets.
 *
 * Each rank's gradients are open exact sums (one fp64 per element, every
 * addition proven exact, xacc.h). Reducing a bucket means: for the piece
 * this rank owns, merge every rank's open sums exactly and round once.
 * Because the merge is exact, the result has the golden bits whatever the
 * number of ranks, the microbatch count, or the algorithm.
 *
 * The data movement is the collective layer's reduce-scatter of open sums
 * (coll_reduce_scatter_open, COLL_XVEC) over the rank's grad_group: it
 * checks that every rank makes the same call, runs the thread's algorithm
 * (direct or ring, coll_set_algo: the run's), is watched by the watchdog
 * and counts its own traffic (8 bytes an element plus the exceptions'
 * accumulators, family "dp-grads"). No rank reads another's model. A
 * bucket's sums lie in several tensors' accumulators and the collective
 * takes one vector, so each rank first stores its bucket (exactly) into
 * its send scratch, n blocks of a piece each, in cache-sized rounds
 * (reduce_exact).
 *
 * broken_fp32_sums (tests only) instead rounds each rank's local sums to
 * fp32 and adds them with the plain fp32 ring reduce-scatter: the bug the
 * equivalence checker must catch.
 */
#include <stdlib.h>
#include <string.h>

#include "model/gpt.h"
#include "engine_internal.h"
#include "parity/pmath.h"

/* ---- the communication thread (overlap_grad_reduce, overlap_param_gather) */

typedef struct {
    engine_rank_t *r;
    device_t *dev;
} comm_arg_t;

static void *comm_main(void *p) {
    comm_arg_t a = *(comm_arg_t *)p;
    free(p);
    engine_rank_t *r = a.r;
    device_bind_thread(a.dev); /* collectives see the device; it uses grad_group */
    coll_set_algo(r->sh->run->algo);
    pthread_mutex_lock(&r->comm_lock);
    for (;;) {
        while (!r->comm_stop && r->comm_fin >= r->comm_tail)
            pthread_cond_wait(&r->comm_cond, &r->comm_lock);
        if (r->comm_fin >= r->comm_tail && r->comm_stop) break;
        const engine_comm_job_t job = r->comm_q[r->comm_fin % r->comm_qcap];
        pthread_mutex_unlock(&r->comm_lock);
        job.fn(r, job.b);
        pthread_mutex_lock(&r->comm_lock);
        r->comm_fin++;
        pthread_cond_broadcast(&r->comm_cond);
    }
    pthread_mutex_unlock(&r->comm_lock);
    return NULL;
}

static void reduce_job(engine_rank_t *r, int b) { engine_reduce_bucket(r, b, engine_grad_piece(r, b)); }

/* Sets the job for the buckets handed over from now on; only while the
 * thread is idle (between phases). */
static void set_job(engine_rank_t *r, void (*job)(engine_rank_t *, int)) {
    pthread_mutex_lock(&r->comm_lock);
    r->comm_job = job;
    pthread_mutex_unlock(&r->comm_lock);
}

void engine_comm_use_for_reduce(engine_rank_t *r) { set_job(r, reduce_job); }
void engine_comm_use_for_gather(engine_rank_t *r) { set_job(r, engine_gather_params_job); }

/* In step-through mode (runtime.h) devices take turns at the baton, and
 * a second thread of the device would be a second runner: the jobs run
 * inline instead, each as soon as it is queued (the order the thread
 * would take them in). Same collectives on the same group, same bits.
 * The queue holds a phase's buckets and the prefetches in flight (at
 * most two units' buckets, optimizer.c). */
int engine_comm_start(engine_rank_t *r, device_t *dev) {
    r->comm_qcap = r->plan->nbuckets + 2 * DP_UNIT_MAX_BUCKETS + 1;
    if (!(r->comm_q = calloc((size_t)r->comm_qcap, sizeof *r->comm_q))) return -1;
    pthread_mutex_init(&r->comm_lock, NULL);
    pthread_cond_init(&r->comm_cond, NULL);
    /* the broken variant zb-early-reduce: inline too, so that its early
     * reductions read the sums at B deterministically (no race with W) */
    r->comm_inline = devices_stepping() || r->sh->run->broken_zb_early_reduce;
    if (r->comm_inline) {
        r->comm_started = 1;
        engine_comm_use_for_reduce(r);
        return 0;
    }
    comm_arg_t *a = malloc(sizeof *a);
    if (!a) return -1;
    *a = (comm_arg_t){r, dev};
    if (pthread_create(&r->comm, NULL, comm_main, a)) {
        free(a);
        return -1;
    }
    r->comm_started = 1;
    engine_comm_use_for_reduce(r);
    return 0;
}

void engine_comm_stop(engine_rank_t *r) {
    if (!r->comm_started) return;
    pthread_mutex_lock(&r->comm_lock);
    r->comm_stop = 1;
    pthread_cond_broadcast(&r->comm_cond);
    pthread_mutex_unlock(&r->comm_lock);
    if (!r->comm_inline) pthread_join(r->comm, NULL);
    pthread_mutex_destroy(&r->comm_lock);
    pthread_cond_destroy(&r->comm_cond);
    free(r->comm_q);
    r->comm_q = NULL;
    r->comm_started = 0;
}

/* Queues fn(r, b) behind every job queued before; returns its ticket
 * (engine_comm_wait). Step-through: it runs here and now. */
long engine_comm_push(engine_rank_t *r, void (*fn)(engine_rank_t *, int), int b) {
    if (r->comm_inline) {
        fn(r, b);
        return r->comm_fin++, r->comm_tail++;
    }
    pthread_mutex_lock(&r->comm_lock);
    while (r->comm_tail - r->comm_fin >= r->comm_qcap) pthread_cond_wait(&r->comm_cond, &r->comm_lock);
    const long ticket = r->comm_tail++;
    r->comm_q[ticket % r->comm_qcap] = (engine_comm_job_t){fn, b};
    pthread_cond_broadcast(&r->comm_cond);
    pthread_mutex_unlock(&r->comm_lock);
    return ticket;
}

/* Until the job of this ticket has finished (its writes are visible). */
void engine_comm_wait(engine_rank_t *r, long ticket) {
    pthread_mutex_lock(&r->comm_lock);
    while (r->comm_fin <= ticket) pthread_cond_wait(&r->comm_cond, &r->comm_lock);
    pthread_mutex_unlock(&r->comm_lock);
}

void engine_buckets_ready(engine_rank_t *r, int upto) {
    for (; r->comm_ready < upto; r->comm_ready++) engine_comm_push(r, r->comm_job, r->comm_ready);
}

/* ---- reductions ---------------------------------------------------------- */

float *engine_grad_piece(engine_rank_t *r, int b) {
    const dp_plan_t *p = r->plan;
    if (p->stage >= 2) return r->shard_grads + p->buckets[b].shard_off;
    size_t lo, hi;
    dp_piece(p, b, engine_bucket_rank(r, b), &lo, &hi);
    return r->g->grads + lo;
}

/* Capacity, in elements, of scratch buffer k as engine_rank_buffers sized it
 * (the one table for setup and the estimate). */
static size_t scratch_cap(engine_rank_t *r, int k) {
    engine_buf_t bufs[ENGINE_NBUFS];
    engine_rank_buffers(r->plan, &r->sh->run->pc, r, bufs);
    for (int i = 0; i < ENGINE_NBUFS; i++)
        if (bufs[i].ptr == (void **)&r->scratch_mem[k]) return bufs[i].bytes / sizeof(double);
    parity_fatal("dp: scratch buffer %d is missing from engine_rank_buffers", k);
    return 0;
}

/* Scratch buffer k as a lazily zeroed vector of len elements over the
 * rank's arena memory; a vector given to a collective before is the
 * rank's again once the call returned. */
static xvec_t *fresh(engine_rank_t *r, int k, size_t len) {
    xvec_free(&r->scratch[k]); /* drops the last round's accumulators; sum[] is ours */
    xvec_init_with(&r->scratch[k], len, r->scratch_mem[k]);
    return &r->scratch[k];
}

/* dst[dst_off ...] := this rank's open sums of flat elements [lo, hi) of
 * bucket bk, stored exactly (dst claimed, xacc.h), and +0 for the
 * elements of [hi, hi + pad): the padding past the bucket's end. */
static void store_flat(xvec_t *dst, size_t dst_off, const gpt_t *g, const dp_bucket_t *bk,
                       size_t lo, size_t hi, size_t pad) {
    static const double zeros[64];
    for (int t = bk->first; t < bk->last && lo < hi; t++) {
        const param_info_t *pi = &g->table.info[t];
        size_t a = pi->offset > lo ? pi->offset : lo;
        size_t e = pi->offset + pi->numel < hi ? pi->offset + pi->numel : hi;
        if (a >= e) continue;
        xvec_store_range(dst, dst_off + (a - lo), &g->grad_acc[t].x, a - pi->offset, e - a);
    }
    for (size_t i = 0; i < pad; i += 64)
        xvec_store_f64_exact(dst, dst_off + (hi - lo) + i, zeros, pad - i < 64 ? pad - i : 64);
}

/* out[0 .. count) = v[off .. off + count) rounded once: a range of an
 * open vector is one (the same sums; a slow element's NaN tag names its
 * accumulator in the same list, xacc.h). */
static void round_range(const xvec_t *v, size_t off, size_t count, float *out) {
    xvec_t range = *v;
    range.sum += off;
    range.n = count;
    xvec_round(&range, out);
}

/* The exact reduce-scatter, on the collective layer's open sums. Bucket b
 * is n pieces of P elements (the last ones padded); the collective takes
 * one vector of n blocks, so the bucket's open sums, which lie in several
 * tensors' accumulators, are first stored (exactly) into the rank's send
 * scratch. A round moves the elements [off, off + c) of every piece at
 * once (block k of the send: piece k's), c = engine_round_elems (a send of
 * about ENGINE_ROUND_BYTES, still in cache when the peers read it: on
 * gpt-small about half the CPU time of whole-piece rounds), or less if
 * the scratch is smaller. Each round's block lands, still open, in the receive
 * scratch and is rounded once into out[off ...]: the elements of this
 * rank's piece, whose own padding is dropped. */
/* A group of one: the reduce-scatter's result is the rank's own open sums,
 * so they are rounded where they lie, each once, as the golden run rounds
 * them (gpt_step_round_grads), instead of being stored into the send
 * scratch first (a pass that read and wrote 16 bytes an element). */
static void reduce_alone(engine_rank_t *r, const dp_bucket_t *bk, float *out) {
    for (int t = bk->first; t < bk->last; t++) {
        const param_info_t *pi = &r->g->table.info[t];
        size_t a = pi->offset > bk->lo ? pi->offset : bk->lo;
        size_t e = pi->offset + pi->numel < bk->hi ? pi->offset + pi->numel : bk->hi;
        if (a < e) round_range(&r->g->grad_acc[t].x, a - pi->offset, e - a, out + (a - bk->lo));
    }
}

static void reduce_exact(engine_rank_t *r, int b, float *out) {
    const dp_plan_t *p = r->plan;
    const dp_bucket_t *bk = &p->buckets[b];
    const size_t n = (size_t)engine_bucket_n(r, b), P = bk->piece;
    const int rank = engine_bucket_rank(r, b);
    if (n == 1) {
        reduce_alone(r, bk, out);
        return;
    }
    size_t my_lo, my_hi;
    dp_piece(p, b, rank, &my_lo, &my_hi);
    const size_t mine = my_hi - my_lo;
    size_t c = engine_round_elems(P, (int)n), cap0 = scratch_cap(r, 0) / n, cap1 = scratch_cap(r, 1);
    if (c > cap0) c = cap0;
    if (c > cap1) c = cap1;
    /* scratch below n elements (every bucket tiny): rounds of one element
     * per piece in a heap vector of n, in place */
    xvec_t tiny = {0};
    if (c == 0 && P > 0) {
        if (xvec_init(&tiny, n)) parity_fatal("dp: out of memory in the exact reduce-scatter");
        c = 1;
    }
    for (size_t off = 0; off < P; off += c) {
        const size_t cj = P - off < c ? P - off : c;
        xvec_t *send;
        if (tiny.sum) xvec_zero(send = &tiny);
        else send = fresh(r, 0, n * cj);
        xvec_claim_zero(send); /* every element is stored below */
        for (size_t k = 0; k < n; k++) { /* piece k's [off, off + cj), padded */
            size_t plo, phi;
            dp_piece(p, b, (int)k, &plo, &phi);
            size_t lo = plo + off, hi = lo + cj;
            size_t e = hi < phi ? hi : phi, a = lo < e ? lo : e;
            store_flat(send, k * cj, r->g, bk, a, e, cj - (e - a));
        }
        /* my block into scratch 1; in place for one rank (nothing moves)
         * or a tiny send */
        const int in_place = n == 1 || tiny.sum;
        xvec_t *recv = in_place ? send : fresh(r, 1, cj);
        const size_t at = in_place ? (size_t)rank * cj : 0;
        coll_reduce_scatter_open(engine_bucket_comm_group(r, b), send, 0, recv, at, cj);
        if (off < mine) round_range(recv, at, mine - off < cj ? mine - off : cj, out + off);
    }
    xvec_free(&tiny);
}

static void reduce_broken(engine_rank_t *r, int b, float *out) {
    const dp_plan_t *p = r->plan;
    const dp_bucket_t *bk = &p->buckets[b];
    const size_t padded = bk->piece * (size_t)engine_bucket_n(r, b);
    float *local = calloc(padded ? padded : 1, sizeof(float));
    float *mine = malloc((bk->piece ? bk->piece : 1) * sizeof(float));
    if (!local || !mine) parity_fatal("dp: out of memory in the broken reduction");
    for (int t = bk->first; t < bk->last; t++) {
        const param_info_t *pi = &r->g->table.info[t];
        acc_round(&r->g->grad_acc[t], local + (pi->offset - bk->lo));
    }
    if (r->sh->run->broken_fp32_sums == 2) pm_round_bf16_array(local, padded);
    engine_split_pieces(p, b, local); /* block-aligned pieces: to their padded slots */
    coll_algo_t was = coll_set_algo(COLL_ALGO_RING);
    coll_reduce_scatter(engine_bucket_comm_group(r, b), local, mine, bk->piece, COLL_F32, COLL_SUM);
    coll_set_algo(was);
    size_t lo, hi;
    dp_piece(p, b, engine_bucket_rank(r, b), &lo, &hi);
    memcpy(out, mine, (hi - lo) * sizeof(float));
    free(local);
    free(mine);
}

/* The collectives count their own traffic (family "dp-grads"). */
void engine_reduce_bucket(engine_rank_t *r, int b, float *out) {
    double t0 = engine_now();
    if (r->sh->run->broken_fp32_sums)
        reduce_broken(r, b, out);
    else
        reduce_exact(r, b, out);
    r->rs_elems += r->plan->buckets[b].piece;
    r->t_reduce += engine_now() - t0;
}

void engine_comm_finish(engine_rank_t *r) {
    engine_buckets_ready(r, r->plan->nbuckets);
    engine_comm_wait(r, r->comm_tail - 1);
    r->comm_ready = 0; /* the thread idles until its next job */
}

void engine_reduce_pending(engine_rank_t *r) {
    const int nb = r->plan->nbuckets;
    if (r->unit_sums) { /* rounded unit by unit already, in place (GPT_UNIT_OPEN_SUMS) */
        for (int b = 0; b < nb; b++) r->rs_elems += r->plan->buckets[b].piece;
    } else if (r->sh->run->pc.overlap_grad_reduce) {
        engine_comm_finish(r);
    } else {
        for (int b = 0; b < nb; b++) engine_reduce_bucket(r, b, engine_grad_piece(r, b));
    }
    r->report->seconds_reduce += r->t_reduce;
    r->report->seconds_comm += r->t_comm; /* ZeRO-3's prefetches, all waited for */
    r->t_comm = 0;
    r->report->exact_rs_elems += r->rs_elems;
    r->t_reduce = 0;
    r->rs_elems = 0;
}
