/* schedule.c - one step's forward and backward passes on a rank: its
 * pipeline stage's schedule (pp.h) over its microbatches.
 *
 *   for each (forward|backward, microbatch, chunk) of the schedule:
 *     forward:  take a free slot of the chunk, load the microbatch,
 *               receive the residual stream from the previous virtual stage
 *               (unless the chunk starts with the embedding), run the
 *               chunk's units, send the stream on (unless it ends with the
 *               head: the loss stays here)
 *     backward: receive the stream's gradient from the next virtual stage
 *               (unless the chunk ends with the head, which starts it),
 *               run the units down, send the gradient of the chunk's input
 *               back (unless it starts with the embedding), free the slot
 *   tied head: the word embedding's open gradient sum, which the first
 *   stage (embedding) and the last (head) each hold a part of, is
 *   all-reduced over the two, exactly (I2), before any bucket is reduced
 *
 * Every send and receive is one call on the chunk's link to its
 * neighbour (links.h: r->next[c], r->prev[c]; p2p, buffered, loop-back or
 * the encoder-decoder bridge, decided at setup). Sends are non-blocking
 * (a send completes when its receiver has the data, coll.h) and are
 * waited for before their slot is reused; receives block. With pp = 1 the schedule is forward, backward, one
 * microbatch at a time: the golden order.
 */
#include <stdlib.h>

#include "model/gpt.h"
#include "engine_internal.h"
#include "parity/corpus.h"
#include "parity/layers.h"


void engine_span(engine_rank_t *r, const char *name, const char *cat, double t0, int mb, int chunk) {
    if (r->trace && trace_add(r->trace, r->device, name, cat, t0, engine_now(), mb, chunk))
        return; /* trace_write reports the dropped span */
}

/* A pass's span name: "F3", "B3" or "W3" (microbatch 3), "F3.1" for chunk 1
 * of several; category forward, backward (a whole one or B) or weight (W). */
static void pass_span(engine_rank_t *r, int fwd, int part, double t0, int mb, int c) {
    if (!r->trace) return;
    char name[24];
    const char k = fwd ? 'F' : part == PP_PASS_W ? 'W' : 'B';
    if (r->sh->pp.v > 1) snprintf(name, sizeof name, "%c%d.%d", k, mb, c);
    else snprintf(name, sizeof name, "%c%d", k, mb);
    engine_span(r, name, fwd ? "forward" : part == PP_PASS_W ? "weight" : "backward", t0, mb, c);
}

/* Tags name a boundary: direction, microbatch and the lower virtual stage. */
static int tag_of(const pp_plan_t *p, int backward, int mb, int vs) {
    return ((backward * p->m + mb) * p->pp * p->v) + vs;
}

/* This rank's microbatch mb: its sequences (sizes differ by at most one);
 * 2-D tensor parallelism: the block of them of its row (2.5-D: of its
 * depth and row), pconfig_tp_batch_blocks equal blocks. */
static void microbatch(const engine_rank_t *r, int mb, int *first, int *n_seq) {
    const int per_rank = r->sh->cfg.global_batch / r->data_n, m = r->sh->pp.m;
    *first = r->data_rank * per_rank;
    for (int k = 0; k < mb; k++) *first += per_rank / m + (k < per_rank % m);
    *n_seq = per_rank / m + (mb < per_rank % m);
    int block;
    const int blocks = gpt_batch_blocks(r->g, &block);
    *n_seq /= blocks;
    *first += block * *n_seq;
}

/* Slot s's sends, waited for: the links of its chunk (at most one of
 * them holds a send of the slot at a time). */
static void wait_send(engine_rank_t *r, int s) {
    int c = 0;
    while (c + 1 < r->sh->pp.v && s >= r->slot_first[c + 1]) c++;
    link_wait(&r->prev[c], s);
    link_wait(&r->next[c], s);
}

int engine_stage_slots(const pp_plan_t *pp, int stage, int *first) {
    int n = 0;
    for (int c = 0; c < pp->v; c++) {
        if (first) first[c] = n;
        n += pp_max_in_flight(pp, stage, c);
    }
    if (first) first[pp->v] = n;
    return n;
}

/* A free slot of chunk c's pool (pp_max_in_flight), laid out for it. Its
 * last send must have been received first: within one chunk the
 * schedules make that wait one they have anyway (pp.h). */
static int take_slot(engine_rank_t *r, int c, uint8_t *busy) {
    for (int s = r->slot_first[c]; s < r->slot_first[c + 1]; s++)
        if (!busy[s]) {
            busy[s] = 1;
            wait_send(r, s);
            gpt_slot_use_chunk(r->g, s, c);
            return s;
        }
    parity_fatal("device %d: no free activation slot (the schedule holds more than "
                 "pp_max_in_flight counted)", r->device);
    return -1;
}

static void forward(engine_rank_t *r, int64_t step, int mb, int c, int s, const gpt_observer_t *obs) {
    gpt_t *g = r->g;
    const pp_plan_t *p = &r->sh->pp;
    const int T = g->cfg.seq_length, B = g->cfg.global_batch, vs = pp_vstage(p, r->stage, c);
    int lo, hi, first, n_seq;
    gpt_chunk_units(g, c, &lo, &hi);
    gpt_slot_t *A = &g->slot[s];
    device_note_microbatch(mb, c);
    device_note_pass(DEVICE_PASS_FORWARD, lo);
    microbatch(r, mb, &first, &n_seq);
    for (int b = 0; b < n_seq; b++)
        model_sample(&g->cfg, r->sh->run->data, (uint64_t)step * (uint64_t)B + (uint64_t)(first + b),
                     A->inputs + (size_t)b * T, A->targets + (size_t)b * T);
    gpt_slot_begin(g, s, A->inputs, A->targets, n_seq, first, step, obs);
    /* the broken variant: masks keyed by the stage's own count of its
     * microbatches, not by where the sequences sit in the global batch */
    if (r->sh->run->broken_pp_mask_key) A->mask_seq = mb;
    const size_t len = gpt_stream_floats(g, n_seq);
    double t0 = engine_now();
    if (model_unit_takes_stream(&g->cfg, lo)) {
        link_recv(&r->prev[c], gpt_slot_stream(g, s, lo), n_seq, len, tag_of(p, 0, mb, vs - 1));
        engine_span(r, "recv activation", "recv", t0, mb, c);
    }
    t0 = engine_now();
    r->pass_lo = lo, r->pass_hi = hi, r->pass_dir = 1;
    for (int u = lo; u < hi; u++) gpt_unit_forward(g, u, s, obs);
    r->busy += engine_now() - t0;
    pass_span(r, 1, PP_PASS_WHOLE, t0, mb, c);
    if (model_unit_gives_stream(&g->cfg, hi - 1)) { /* the span marks the send's posting; the data moves when the peer receives */
        t0 = engine_now();
        link_send(&r->next[c], s, gpt_slot_stream(g, s, hi), n_seq, len, tag_of(p, 0, mb, vs));
        engine_span(r, "send activation", "send", t0, mb, c);
    }
}

static void backward(engine_rank_t *r, int mb, int c, int s, int part, const gpt_observer_t *obs) {
    gpt_t *g = r->g;
    const pp_plan_t *p = &r->sh->pp;
    const int vs = pp_vstage(p, r->stage, c);
    int lo, hi;
    gpt_chunk_units(g, c, &lo, &hi);
    gpt_slot_t *A = &g->slot[s];
    const size_t len = gpt_stream_floats(g, A->n_seq);
    double t0 = engine_now();
    device_note_microbatch(mb, c);
    device_note_pass(DEVICE_PASS_BACKWARD, hi - 1);
    if (model_unit_gives_stream(&g->cfg, hi - 1)) {
        wait_send(r, s); /* the forward's output has long arrived; d_resid is received into */
        link_recv(&r->next[c], A->d_resid, A->n_seq, len, tag_of(p, 1, mb, vs));
        engine_span(r, "recv gradient", "recv", t0, mb, c);
    }
    r->last_micro = mb == p->m - 1; /* the chunk's gradients are final after this one */
    t0 = engine_now();
    /* B of a split backward: the weight gradients' products wait in the stash */
    if (part == PP_PASS_B) linear_wstash_bind(r->wstash.stash[mb * p->v + c]);
    r->wstash.in_b = part == PP_PASS_B, r->wstash.pass = mb * p->v + c;
    r->pass_lo = lo, r->pass_hi = hi, r->pass_dir = -1;
    for (int u = hi - 1; u >= lo; u--) gpt_unit_backward(g, u, s, obs);
    r->wstash.in_b = 0;
    linear_wstash_bind(NULL);
    r->busy += engine_now() - t0;
    pass_span(r, 0, part, t0, mb, c);
    if (part == PP_PASS_B) { /* what the stashes hold now, for the report */
        size_t held = 0;
        for (int k = 0; k < p->m * p->v; k++) held += linear_wstash_bytes(r->wstash.stash[k]);
        if (held > r->wstash.peak) r->report->pp_wstash_peak = r->wstash.peak = held;
    }
    if (model_unit_takes_stream(&g->cfg, lo)) {
        wait_send(r, s);
        t0 = engine_now();
        link_send(&r->prev[c], s, A->d_resid, A->n_seq, len, tag_of(p, 1, mb, vs - 1));
        engine_span(r, "send gradient", "send", t0, mb, c);
    }
}

/* W of a split backward: the weight gradients B left in the stash, added
 * to the same open sums (no communication: B sent the input gradient). */
static void weight(engine_rank_t *r, int mb, int c) {
    const double t0 = engine_now();
    device_note_microbatch(mb, c);
    int lo, hi;
    gpt_chunk_units(r->g, c, &lo, &hi);
    device_note_pass(DEVICE_PASS_BACKWARD, hi - 1);
    engine_wstash_t *w = &r->wstash;
    const int k = mb * r->sh->pp.v + c;
    /* --overlap-grad-reduce: the chunk's last W unit by unit, top down, each
     * unit's buckets handed over as its products are in (engine_weights_final) */
    for (int u = hi - 1; w->marks && w->w_runs[c] + 1 == r->sh->pp.m && u >= lo; u--) {
        linear_wstash_run_part(w->stash[k], &r->g->ws, w->marks[k * w->units + u]);
        w->unit_final[u] = 1;
        engine_weights_final(r);
    }
    linear_wstash_run(w->stash[k], &r->g->ws);
    w->w_runs[c]++;
    r->busy += engine_now() - t0;
    pass_span(r, 0, PP_PASS_W, t0, mb, c);
}

/* Tied head over stages: both copies of the word embedding's gradient
 * become the exact sum of the embedding's and the head's contributions. */
static void reduce_tied_embedding(engine_rank_t *r) {
    if (!r->emb_group || r->sh->run->broken_pp_tied_grad) return;
    acc_t *a = &r->g->grad_acc[r->g->table.wte];
    const double t0 = engine_now();
    if (r->sh->meshes) engine_tied_mesh_reduce(r, a); /* two vocabulary cuts */
    else coll_all_reduce_open(r->emb_group, &a->x, 0, a->n);
    r->report->seconds_comm += engine_now() - t0;
    engine_span(r, "embedding all-reduce", "exact-sum", t0, -1, -1);
}

void engine_run_schedule(engine_rank_t *r, int64_t step, const gpt_observer_t *obs) {
    const pp_plan_t *p = &r->sh->pp;
    uint8_t *busy = calloc((size_t)r->g->n_slots, 1);
    if (!busy) parity_fatal("device %d: out of memory for the schedule", r->device);
    int in_flight = 0;
    r->busy = 0;
    r->sched_start = engine_now();
    for (int c = 0; c < GPT_MAX_CHUNKS; c++) r->wstash.w_runs[c] = 0;
    for (int u = 0; u < r->wstash.units; u++) r->wstash.unit_final[u] = 0;
    for (int i = 0; i < r->nops; i++) {
        const pp_op_t *op = &r->ops[i];
        int *slot = &r->slot_of[op->mb * p->v + op->chunk];
        if (op->fwd) {
            *slot = take_slot(r, op->chunk, busy);
            if (++in_flight > r->report->pp_in_flight_peak) r->report->pp_in_flight_peak = in_flight;
            forward(r, step, op->mb, op->chunk, *slot, obs);
        } else if (op->part == PP_PASS_W) { /* the microbatch's activations go now */
            weight(r, op->mb, op->chunk);
            busy[*slot] = 0;
            in_flight--;
        } else {
            backward(r, op->mb, op->chunk, *slot, op->part, obs);
            if (op->part == PP_PASS_B) continue;
            busy[*slot] = 0;
            in_flight--;
        }
    }
    r->sh->sched_end[r->device] = engine_now();
    r->report->buckets_in_schedule = r->comm_ready; /* overlap: handed over while passes ran */
    for (int s = 0; s < r->g->n_slots; s++) wait_send(r, s);
    engine_links_flush(r);
    free(busy);
    r->last_micro = 0;
    reduce_tied_embedding(r);
}
