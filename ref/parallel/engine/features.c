/* features.c - the features a layout switches on, each with its state
 * (features.h), its setup and its teardown, in one table: a rank's
 * setup walks it after the replica is made (the links read the slots'
 * count), its teardown walks it back. A feature that is off sets up
 * nothing and leaves its struct zeroed. */
#include <stdlib.h>

#include "engine_internal.h"
#include "parity/layers.h"

/* (microbatch, chunk) pairs of a step: the schedule's passes per kind */
static size_t passes(const engine_rank_t *r) { return (size_t)r->sh->pp.m * (size_t)r->sh->pp.v; }

/* split backward: B now, W later, a stash per (microbatch, chunk) */
static int wstash_setup(engine_rank_t *r, device_t *dev) {
    (void)dev;
    if (!pconfig_splits_backward(r->sh->pp.sched)) return 0;
    const size_t n = passes(r);
    engine_wstash_t *w = &r->wstash;
    if ((w->stash = calloc(n, sizeof *w->stash))) w->n = n;
    for (size_t k = 0; w->stash && k < n; k++)
        if (!(w->stash[k] = linear_wstash_new(r->sh->run->broken_pp_stale_w))) break;
    if (r->sh->run->pc.overlap_grad_reduce) { /* the last W, unit by unit (schedule.c) */
        w->units = gpt_num_units(r->g);
        w->marks = calloc(n * (size_t)w->units, sizeof *w->marks);
        w->unit_final = calloc((size_t)w->units, 1);
    }
    if (!w->stash || !w->stash[n - 1] || (r->sh->run->pc.overlap_grad_reduce && (!w->marks || !w->unit_final))) {
        engine_fail(r->sh, "dp: out of memory for the split backward");
        return -1;
    }
    return 0;
}

static void wstash_teardown(engine_rank_t *r) {
    for (size_t k = 0; k < r->wstash.n; k++) linear_wstash_free(r->wstash.stash[k]);
    free(r->wstash.stash);
    free(r->wstash.marks);
    free(r->wstash.unit_final);
}

/* a V's bottom: a hand-off per tag (2 directions x passes x stages) */
static int loop_setup(engine_rank_t *r, device_t *dev) {
    (void)dev;
    if (!r->sh->pp.vshape) return 0;
    const size_t n = 2 * passes(r) * (size_t)r->sh->pp.pp;
    if (!(r->loop.copy = calloc(n, sizeof *r->loop.copy))) {
        engine_fail(r->sh, "dp: out of memory for the schedule");
        return -1;
    }
    r->loop.n = n;
    return 0;
}

static void loop_teardown(engine_rank_t *r) {
    for (size_t k = 0; k < r->loop.n; k++) free(r->loop.copy[k]);
    free(r->loop.copy);
}

/* buffered sends: the queue grows as sends are posted (links.c) */
static int buffered_setup(engine_rank_t *r, device_t *dev) {
    (void)r, (void)dev;
    return 0;
}

static void buffered_teardown(engine_rank_t *r) {
    free(r->buffered.req);
    free(r->buffered.data);
}

/* the encoder's end of the bridge: its decoder peers and buffers */
static int bridge_setup(engine_rank_t *r, device_t *dev) {
    (void)dev;
    if (engine_bridge_side(r) <= 0) return 0;
    const engine_shared_t *sh = r->sh;
    const size_t k = (size_t)engine_bridge_fanout(sh), slots = (size_t)r->g->n_slots;
    const size_t len = (size_t)sh->cfg.micro_batch * (size_t)sh->cfg.seq_length * (size_t)sh->cfg.hidden;
    engine_bridge_t *b = &r->bridge;
    b->peer = calloc(k, sizeof *b->peer);
    b->send = malloc(slots * k * len * sizeof(float));
    b->recv = malloc(len * sizeof(float));
    if (!b->peer || !b->send || !b->recv) {
        engine_fail(r->sh, "dp: out of memory for the encoder-decoder bridge");
        return -1;
    }
    b->fanout = (int)k;
    for (int i = 0; i < b->fanout; i++) b->peer[i] = engine_bridge_peer(r, i);
    return 0;
}

static void bridge_teardown(engine_rank_t *r) {
    free(r->bridge.peer);
    free(r->bridge.send);
    free(r->bridge.recv);
}

/* MoE: the step's counts, summed over the world (report.c) */
static int moe_setup(engine_rank_t *r, device_t *dev) {
    (void)dev;
    const size_t cells = (size_t)r->sh->cfg.layers * (size_t)r->sh->cfg.moe_experts;
    if (cells && !(r->moe.counts = calloc(2 * cells, sizeof *r->moe.counts))) {
        engine_fail(r->sh, "dp: out of memory for the schedule");
        return -1;
    }
    return 0;
}

static void moe_teardown(engine_rank_t *r) { free(r->moe.counts); }

/* optimizer offload: cpu, the shards in a host arena of the rank's own
 * (its peak is reported beside the device's), made before the buffer
 * table allocates them there; nvme, the rank's file (offload.c) */
static int offload_setup(engine_rank_t *r, device_t *dev) {
    if (r->sh->run->pc.offload == PC_OFFLOAD_CPU && !(r->off.host_arena = arena_create(dev->rank, 0))) {
        engine_fail(r->sh, "dp: out of memory for a host arena (cpu offload)");
        return -1;
    }
    return engine_offload_open(r);
}

static const engine_feature_t features[] = {
    {"split backward", wstash_setup, wstash_teardown},
    {"loop-back", loop_setup, loop_teardown},
    {"buffered sends", buffered_setup, buffered_teardown},
    {"encoder-decoder bridge", bridge_setup, bridge_teardown},
    {"links", engine_links_setup, engine_links_teardown}, /* after the three above */
    {"moe statistics", moe_setup, moe_teardown},
    {"offload", offload_setup, engine_offload_close},
};
enum { NFEATURES = sizeof features / sizeof features[0] };

int engine_features_setup(engine_rank_t *r, device_t *dev) {
    for (int k = 0; k < NFEATURES; k++)
        if (features[k].setup(r, dev)) return -1;
    return 0;
}

void engine_features_teardown(engine_rank_t *r) {
    for (int k = NFEATURES - 1; k >= 0; k--) features[k].teardown(r);
}
