/* test_coll_p2p.c - point-to-point messages: matching order, tags,
 * non-blocking requests, and a 1F1B pipeline schedule (activations
 * forward, gradients backward, several microbatches) that must complete
 * without deadlock and deliver exactly the expected values.
 */
#include "parity/coll.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "../harness.h"

#define MAXW 8

typedef struct {
    group_t *g;
    int fails[MAXW];
    char msg[MAXW][200];
} p2p_t;

#define PFAIL(t, r, ...)                                                                  \
    do {                                                                                  \
        if ((t)->fails[r]++ == 0) snprintf((t)->msg[r], sizeof (t)->msg[0], __VA_ARGS__); \
    } while (0)

static p2p_t *p2p_new(int world, const int *ranks, int n) {
    p2p_t *t = calloc(1, sizeof *t);
    int all[MAXW];
    for (int i = 0; i < world; i++) all[i] = i;
    perr_t e;
    t->g = group_create(ranks ? ranks : all, ranks ? n : world, "p2p", &e);
    return t;
}

static void p2p_finish(p2p_t *t, int world, const char *what) {
    for (int r = 0; r < world; r++) CHECK(t->fails[r] == 0, "%s rank %d: %s", what, r, t->msg[r]);
    group_destroy(t->g);
    free(t);
}

static void run(int world, device_main_fn fn, p2p_t *t) {
    perr_t e;
    CHECK(devices_run(world, 0, fn, t, &e) == 0, "%s", e.msg);
}

/* ---- a ring pass with non-blocking sends and receives ---- */

static void ring_main(device_t *dev, void *arg) {
    p2p_t *t = arg;
    int n = group_size(t->g), me = group_rank(t->g);
    int64_t out[100], in[100];
    for (int round = 0; round < 20; round++) {
        for (int k = 0; k < 100; k++) out[k] = me * 1000000 + round * 1000 + k;
        coll_request_t *r[2];
        r[0] = coll_irecv(t->g, in, 100, COLL_I64, (me + n - 1) % n, round);
        r[1] = coll_isend(t->g, out, 100, COLL_I64, (me + 1) % n, round);
        coll_wait_all(2, r);
        int from = (me + n - 1) % n;
        for (int k = 0; k < 100; k++)
            if (in[k] != from * 1000000 + round * 1000 + k) {
                PFAIL(t, dev->rank, "round %d element %d: %lld", round, k, (long long)in[k]);
                break;
            }
    }
}

static void test_ring_pass(void) {
    p2p_t *t = p2p_new(5, NULL, 0);
    run(5, ring_main, t);
    p2p_finish(t, 5, "ring");
}

/* ---- same tag: delivered in posting order; different tags: by tag ---- */

static void order_main(device_t *dev, void *arg) {
    p2p_t *t = arg;
    int me = group_rank(t->g);
    if (me == 0) {
        int32_t a = 1, b = 2, c = 3, x = 40, y = 50;
        coll_request_t *r[5] = {coll_isend(t->g, &a, 1, COLL_I32, 1, 7), coll_isend(t->g, &b, 1, COLL_I32, 1, 7),
                                coll_isend(t->g, &c, 1, COLL_I32, 1, 7), coll_isend(t->g, &x, 1, COLL_I32, 1, 1),
                                coll_isend(t->g, &y, 1, COLL_I32, 1, 2)};
        coll_wait_all(5, r);
    } else if (me == 1) {
        int32_t v[3] = {0}, p = 0, q = 0;
        coll_request_t *r[3];
        for (int i = 0; i < 3; i++) r[i] = coll_irecv(t->g, &v[i], 1, COLL_I32, 0, 7);
        for (int i = 2; i >= 0; i--) coll_wait(r[i]); /* waiting order does not matter */
        if (v[0] != 1 || v[1] != 2 || v[2] != 3) PFAIL(t, dev->rank, "same-tag order %d %d %d", v[0], v[1], v[2]);
        coll_recv(t->g, &q, 1, COLL_I32, 0, 2); /* tag 2 before tag 1 */
        coll_recv(t->g, &p, 1, COLL_I32, 0, 1);
        if (p != 40 || q != 50) PFAIL(t, dev->rank, "tags: tag1=%d tag2=%d", p, q);
    }
    /* a message to oneself */
    float s = (float)me, got = -1;
    coll_request_t *r[2] = {coll_isend(t->g, &s, 1, COLL_F32, me, 99), coll_irecv(t->g, &got, 1, COLL_F32, me, 99)};
    coll_wait_all(2, r);
    if (got != (float)me) PFAIL(t, dev->rank, "self message %g", got);
    /* zero-length messages still synchronize */
    coll_request_t *z[2] = {coll_isend(t->g, NULL, 0, COLL_F32, 1 - me, 5), coll_irecv(t->g, NULL, 0, COLL_F32, 1 - me, 5)};
    coll_wait_all(2, z);
}

static void test_matching_order(void) {
    p2p_t *t = p2p_new(2, NULL, 0);
    run(2, order_main, t);
    p2p_finish(t, 2, "order");
}

/* ---- everyone to everyone, posted in a scrambled order ---- */

static void all_pairs_main(device_t *dev, void *arg) {
    p2p_t *t = arg;
    int n = group_size(t->g), me = group_rank(t->g);
    float out[MAXW][64], in[MAXW][64];
    coll_request_t *req[2 * MAXW];
    for (int round = 0; round < 15; round++) {
        int nr = 0;
        for (int k = 0; k < n; k++) {
            int j = (me * 3 + k * 5 + round) % n; /* a different order on every rank */
            for (int e = 0; e < 64; e++) out[j][e] = (float)(me * 100 + j * 10 + round + e * 1000);
            req[nr++] = coll_isend(t->g, out[j], 64, COLL_F32, j, round);
            req[nr++] = coll_irecv(t->g, in[(j + 1) % n], 64, COLL_F32, (j + 1) % n, round);
        }
        coll_wait_all(nr, req);
        for (int j = 0; j < n; j++)
            for (int e = 0; e < 64; e++)
                if (in[j][e] != (float)(j * 100 + me * 10 + round + e * 1000)) {
                    PFAIL(t, dev->rank, "round %d from %d element %d: %g", round, j, e, in[j][e]);
                    e = 64, j = n;
                }
    }
}

static void test_all_pairs(void) {
    p2p_t *t = p2p_new(6, NULL, 0);
    run(6, all_pairs_main, t);
    p2p_finish(t, 6, "all pairs");
}

/* ---- 1F1B: pipeline stages exchange activations and gradients ---- */

#define STAGES 4
#define MAXMICRO 8
#define ACT 333

/* stage s adds s+1 to every activation; the last stage's loss gradient
 * is 2 * output; stage s adds 100 (s+1) to every gradient going back.
 * All values are small integers, exact in fp32. */
static float input_of(int m, int k) { return (float)(m * 1000 + k); }
static float act_into(int s, int m, int k) { /* what stage s receives */
    float v = input_of(m, k);
    for (int t = 0; t < s; t++) v += (float)(t + 1);
    return v;
}
static float grad_into(int s, int m, int k) { /* what stage s receives from s+1 */
    float g = 2.0f * act_into(STAGES, m, k);
    for (int t = STAGES - 1; t > s; t--) g += 100.0f * (float)(t + 1);
    return g;
}

typedef struct {
    p2p_t *t;
    group_t *pp[2];
    rank_layout_t L;
    int micro;
} pipe_t;

typedef struct {
    p2p_t *t;
    group_t *pp;
    int s, rank, micro;
    float in[MAXMICRO][ACT], out[MAXMICRO][ACT], gin[MAXMICRO][ACT], gout[MAXMICRO][ACT];
    int fwd, bwd;
} stage_t;

static void forward(stage_t *st) {
    int m = st->fwd++;
    if (st->s == 0)
        for (int k = 0; k < ACT; k++) st->in[m][k] = input_of(m, k);
    for (int k = 0; k < ACT; k++) {
        if (st->in[m][k] != act_into(st->s, m, k)) {
            PFAIL(st->t, st->rank, "stage %d mb %d: activation %g want %g", st->s, m, st->in[m][k], act_into(st->s, m, k));
            break;
        }
        st->out[m][k] = st->in[m][k] + (float)(st->s + 1);
    }
}

static void backward(stage_t *st) {
    int m = st->bwd++;
    if (st->s == STAGES - 1)
        for (int k = 0; k < ACT; k++) st->gin[m][k] = 2.0f * st->out[m][k];
    for (int k = 0; k < ACT; k++) {
        if (st->gin[m][k] != grad_into(st->s, m, k)) {
            PFAIL(st->t, st->rank, "stage %d mb %d: gradient %g want %g", st->s, m, st->gin[m][k], grad_into(st->s, m, k));
            break;
        }
        st->gout[m][k] = st->gin[m][k] + 100.0f * (float)(st->s + 1);
    }
}

/* The p2p helpers skip the missing neighbour of the first/last stage
 * (coll_wait ignores NULL). Tags: microbatch m forward, 1000+m backward. */
static coll_request_t *send_fwd(stage_t *st) {
    int m = st->fwd - 1;
    return st->s < STAGES - 1 ? coll_isend(st->pp, st->out[m], ACT, COLL_F32, st->s + 1, m) : NULL;
}
static coll_request_t *recv_fwd(stage_t *st) {
    int m = st->fwd;
    return st->s > 0 && m < st->micro ? coll_irecv(st->pp, st->in[m], ACT, COLL_F32, st->s - 1, m) : NULL;
}
static coll_request_t *send_bwd(stage_t *st) {
    int m = st->bwd - 1;
    return st->s > 0 ? coll_isend(st->pp, st->gout[m], ACT, COLL_F32, st->s - 1, 1000 + m) : NULL;
}
static coll_request_t *recv_bwd(stage_t *st) {
    int m = st->bwd;
    return st->s < STAGES - 1 ? coll_irecv(st->pp, st->gin[m], ACT, COLL_F32, st->s + 1, 1000 + m) : NULL;
}

/* Megatron's non-interleaved schedule: warm-up min(pp - s - 1, m)
 * forwards, steady one-forward-one-backward, cool-down backwards. */
static void one_f_one_b_main(device_t *dev, void *arg) {
    pipe_t *P = arg;
    stage_t *st = arena_alloc_or_die(dev->arena, sizeof *st, MEM_ACTIVATIONS, "stage");
    st->t = P->t, st->rank = dev->rank, st->micro = P->micro;
    st->pp = P->pp[layout_group_id(&P->L, dev->rank, "pp")];
    st->s = group_rank(st->pp);
    int warmup = STAGES - st->s - 1 < st->micro ? STAGES - st->s - 1 : st->micro;
    int steady = st->micro - warmup;
    coll_request_t *r[2];
    for (int i = 0; i < warmup; i++) {
        coll_wait(recv_fwd(st));
        forward(st);
        coll_wait(send_fwd(st)); /* blocking: the next stage is receiving */
    }
    if (steady > 0) coll_wait(recv_fwd(st));
    for (int i = 0; i < steady; i++) {
        forward(st);
        r[0] = send_fwd(st), r[1] = recv_bwd(st); /* exchanged at once: no deadlock */
        coll_wait_all(2, r);
        backward(st);
        if (i == steady - 1) {
            coll_wait(send_bwd(st));
        } else {
            r[0] = send_bwd(st), r[1] = recv_fwd(st);
            coll_wait_all(2, r);
        }
    }
    for (int i = 0; i < warmup; i++) {
        coll_wait(recv_bwd(st));
        backward(st);
        coll_wait(send_bwd(st));
    }
    if (st->fwd != st->micro || st->bwd != st->micro)
        PFAIL(P->t, dev->rank, "ran %d forward, %d backward of %d", st->fwd, st->bwd, st->micro);
    arena_free(dev->arena, st);
}

static void test_1f1b(void) {
    /* two 4-stage pipelines side by side in a world of 8 (tp=2, pp=4):
     * stage s of pipeline t is world rank t + 2 s */
    pipe_t P;
    perr_t e;
    CHECK(layout_init(&P.L, "tp-pp", "tp=2,pp=4", &e) == 0, "%s", e.msg);
    CHECK(group_create_all(&P.L, "pp", "pp", P.pp, &e) == 0, "%s", e.msg);
    CHECK(group_world_rank(P.pp[1], 2) == 5, "pp1 stage 2 is world 5");
    const int micro[] = {8, 4, 3, 1};
    for (int i = 0; i < 4; i++) {
        P.t = calloc(1, sizeof *P.t);
        P.micro = micro[i];
        CHECK(devices_run(8, 0, one_f_one_b_main, &P, &e) == 0, "%s", e.msg);
        for (int r = 0; r < 8; r++) CHECK(P.t->fails[r] == 0, "micro %d rank %d: %s", micro[i], r, P.t->msg[r]);
        free(P.t);
    }
    group_destroy_all(P.pp, 2);
}

/* ---- p2p interleaved with collectives on the same group ---- */

static void mixed_main(device_t *dev, void *arg) {
    p2p_t *t = arg;
    int n = group_size(t->g), me = group_rank(t->g);
    if (me < 0) return; /* world rank 1 is not in the group */
    for (int it = 0; it < 30; it++) {
        int64_t v = me + it, sum = 0, got = -1;
        coll_request_t *r = coll_irecv(t->g, &got, 1, COLL_I64, (me + 1) % n, it);
        coll_all_reduce(t->g, &v, &sum, 1, COLL_I64, COLL_SUM); /* while a receive is pending */
        coll_send(t->g, &v, 1, COLL_I64, (me + n - 1) % n, it);
        coll_wait(r);
        if (sum != (int64_t)n * (n - 1) / 2 + (int64_t)n * it || got != (me + 1) % n + it)
            PFAIL(t, dev->rank, "it %d: sum %lld got %lld", it, (long long)sum, (long long)got);
    }
}

static void test_mixed_with_collectives(void) {
    int ranks[] = {3, 0, 2}; /* group indices differ from world ranks */
    p2p_t *t = p2p_new(4, ranks, 3);
    run(4, mixed_main, t);
    p2p_finish(t, 4, "mixed");
}

static void test_p2p_counters(void) {
    coll_counters_reset(-1);
    p2p_t *t = p2p_new(2, NULL, 0);
    run(2, order_main, t);
    p2p_finish(t, 2, "order (counters)");
    coll_counters_t c0, c1;
    coll_counters_get(0, &c0);
    coll_counters_get(1, &c1);
    /* rank 0 sends five 4-byte messages to rank 1 (plus one to itself and
     * a zero-length one); self messages are not counted as sent */
    CHECK(c0.sent[COLL_KIND_SEND] == 20 && c1.recv[COLL_KIND_RECV] == 20, "sent %llu recv %llu",
          (unsigned long long)c0.sent[COLL_KIND_SEND], (unsigned long long)c1.recv[COLL_KIND_RECV]);
    CHECK(c0.calls[COLL_KIND_SEND] == 7 && c1.calls[COLL_KIND_RECV] == 7, "calls %llu %llu",
          (unsigned long long)c0.calls[COLL_KIND_SEND], (unsigned long long)c1.calls[COLL_KIND_RECV]);
}

int main(void) {
    coll_set_timeout(60); /* a deadlock fails the test instead of hanging it */
    RUN(test_ring_pass);
    RUN(test_matching_order);
    RUN(test_all_pairs);
    RUN(test_1f1b);
    RUN(test_mixed_with_collectives);
    RUN(test_p2p_counters);
    return harness_done();
}
