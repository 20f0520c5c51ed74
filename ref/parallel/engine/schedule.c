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
 * Sends are non-blocking (a send completes when its receiver has the
 * data, coll.h) and are waited for before their slot is reused;
 * receives block. With pp = 1 the schedule is forward, backward, one
 * microbatch at a time: the golden order.
 */
#include <stdlib.h>
#include <string.h>

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

/* Floats of the residual stream a slot of n_seq sequences holds. */
static size_t stream_len(const gpt_t *g, int n_seq) {
    return (size_t)n_seq * (size_t)g->local.seq_held / (size_t)g->local.seq_parts *
           (size_t)g->local.hid; /* 2-D: the column's features */
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
    const gpt_shard_t *sh = &r->g->shard;
    if (!sh->tp_mode) return;
    const int blocks = sh->tp_depth * r->g->local.t2q, block = sh->tp_dep * r->g->local.t2q + sh->tp_row;
    *n_seq /= blocks;
    *first += block * *n_seq;
}

static void wait_send(engine_rank_t *r, int s) {
    if (r->slot_send[s]) coll_wait(r->slot_send[s]);
    r->slot_send[s] = NULL;
    const int k = engine_bridge_fanout(r->sh);
    for (int i = 0; r->bridge_req && i < k; i++) {
        if (r->bridge_req[s * k + i]) coll_wait(r->bridge_req[s * k + i]);
        r->bridge_req[s * k + i] = NULL;
    }
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

/* The broken variant broken_encdec_dp_mixup: across the boundary from
 * the encoder's last stage to the decoder's first, the peer is the
 * device of the other stage in data-parallel replica dp + shift (mod dp),
 * over the world group; NULL group: not that boundary (the pipeline
 * group's own peer). */
static group_t *mixup_peer(const engine_rank_t *r, int other_stage, int shift, int *peer) {
    const engine_shared_t *sh = r->sh;
    const int epp = sh->run->pc.encoder_pp;
    if (!sh->run->broken_encdec_dp_mixup || !epp || (r->stage != epp - 1 && r->stage != epp) ||
        (other_stage != epp - 1 && other_stage != epp))
        return NULL;
    if (sh->meshes) return NULL; /* across meshes: engine_bridge_peer shifts the replica */
    const engine_dev_t me = engine_device(sh, r->device);
    const int dp = me.size[GRID_DP];
    for (int d = 0; d < sh->world; d++) {
        const engine_dev_t o = engine_device(sh, d);
        int same = o.coord[GRID_PP] == other_stage &&
                   o.coord[GRID_DP] == (me.coord[GRID_DP] + shift + dp) % dp;
        for (int a = 0; a < GRID_NAXES; a++)
            if (a != GRID_PP && a != GRID_DP) same &= o.coord[a] == me.coord[a];
        if (same) {
            *peer = d;
            return r->world;
        }
    }
    return NULL;
}

/* The peer and group of a p2p with the stage of virtual stage `vs2`
 * within this device's mesh (its pipeline group counts the mesh's stages
 * from 0). */
static group_t *p2p_peer(const engine_rank_t *r, int vs2, int *peer) {
    const pp_plan_t *p = &r->sh->pp;
    *peer = pp_stage_of(p, vs2);
    /* forward from the encoder: to the next replica; into the decoder: from the previous */
    group_t *g = mixup_peer(r, *peer, r->stage < *peer ? 1 : -1, peer);
    if (g) return g;
    const int epp = r->sh->run->pc.encoder_pp;
    if (r->sh->meshes && r->stage >= epp) *peer -= epp;
    return r->pp_group;
}

/* ---- the encoder-decoder bridge (meshes.c) ---------------------------------
 * Encoder rank q of the last encoder stage feeds decoder ranks q*k + i,
 * i < k = tp/etp. Forward: each gets the stream it holds - all of it, or
 * under sequence parallelism its positions, block i of the encoder
 * rank's. Backward: the encoder rank takes the gradient of its input from
 * them - under sequence parallelism each block from its holder; else
 * every decoder rank holds the whole gradient, completed over its tp
 * group, so the encoder takes one copy (i = 0) and checks that the others
 * are the same bits. Megatron summed the copies (x k), then averaged them
 * in fp32: the broken variants broken_encdec_combine 1 and 2. */

/* rows of block i (of k) of each sequence's held positions */
static void bridge_block(float *dst, const float *src, int n_seq, size_t rows_e, int k, int i,
                         size_t C, int pack) {
    const size_t rows_d = rows_e / (size_t)k, w = rows_d * C;
    for (int b = 0; b < n_seq; b++) {
        const size_t e = ((size_t)b * rows_e + (size_t)i * rows_d) * C, d = (size_t)b * w;
        if (pack) memcpy(dst + d, src + e, w * sizeof(float));
        else memcpy(dst + e, src + d, w * sizeof(float));
    }
}

static void bridge_send_stream(engine_rank_t *r, int s, const float *buf, int n_seq, size_t len,
                               int tag) {
    /* the decoder's ranks hold blocks of positions (sequence parallel) */
    const int k = engine_bridge_fanout(r->sh), sp = r->sh->run->pc.sequence_parallel;
    const size_t C = (size_t)r->g->cfg.hidden, rows_e = len / (size_t)n_seq / C;
    for (int i = 0; i < k; i++) {
        const float *out = buf;
        size_t n = len;
        if (sp) {
            float *pack = r->bridge_send + ((size_t)s * k + i) * len;
            bridge_block(pack, buf, n_seq, rows_e, k, i, C, 1);
            out = pack, n = len / (size_t)k;
        }
        r->bridge_req[s * k + i] = coll_isend(r->world, out, n, COLL_F32, engine_bridge_peer(r, i), tag);
    }
}

static void bridge_recv_grad(engine_rank_t *r, float *d_resid, int n_seq, size_t len, int tag) {
    /* the decoder's ranks hold blocks of positions (sequence parallel) */
    const int k = engine_bridge_fanout(r->sh), sp = r->sh->run->pc.sequence_parallel;
    const int combine = r->sh->run->broken_encdec_combine;
    const size_t C = (size_t)r->g->cfg.hidden, rows_e = len / (size_t)n_seq / C;
    const size_t n = sp ? len / (size_t)k : len;
    for (int i = 0; i < k; i++) {
        float *in = i == 0 && !sp ? d_resid : r->bridge_recv;
        coll_recv(r->world, in, n, COLL_F32, engine_bridge_peer(r, i), tag);
        if (sp) {
            bridge_block(d_resid, in, n_seq, rows_e, k, i, C, 0);
        } else if (combine) { /* Megatron's: the copies summed (then averaged) in fp32 */
            for (size_t j = 0; i > 0 && j < n; j++) d_resid[j] = d_resid[j] + in[j];
        } else if (i > 0 && memcmp(d_resid, in, n * sizeof(float))) {
            size_t j = 0;
            while (!memcmp(d_resid + j, in + j, sizeof(float))) j++;
            char msg[256];
            snprintf(msg, sizeof msg, "device %d: the encoder output's gradient from decoder device "
                     "%d differs from device %d's at element %zu: the decoder's tensor-parallel "
                     "ranks did not complete it alike", r->device, engine_bridge_peer(r, i),
                     engine_bridge_peer(r, 0), j);
            engine_fail(r->sh, msg);
        }
    }
    if (!sp && combine == 2)
        for (size_t j = 0; j < n; j++) d_resid[j] = d_resid[j] / (float)k;
}

/* A V's bottom (zb-v, dualpipev): the last stage hands chunk 0's output to
 * its own chunk 1, and chunk 1's input gradient back to chunk 0. A send to
 * itself would hold its slot until this stage's own later pass receives
 * it, and the schedule may want that slot first: the stage keeps a copy
 * by tag instead (r->loop), taken by the receiving pass. */
static int loop_back(const engine_rank_t *r, int vs2) {
    return r->sh->pp.vshape && pp_stage_of(&r->sh->pp, vs2) == r->stage;
}

static void loop_put(engine_rank_t *r, const float *buf, size_t len, int tag) {
    float *copy = malloc((len ? len : 1) * sizeof *copy);
    if (!copy) parity_fatal("device %d: out of memory handing the stream to its own chunk", r->device);
    memcpy(copy, buf, len * sizeof *copy);
    r->loop[tag] = copy;
}

static void loop_take(engine_rank_t *r, float *buf, size_t len, int tag) {
    if (!r->loop[tag])
        parity_fatal("device %d: pass with tag %d reads its own chunk's hand-off before it was made "
                     "(a schedule out of order)", r->device, tag);
    memcpy(buf, r->loop[tag], len * sizeof *buf);
    free(r->loop[tag]);
    r->loop[tag] = NULL;
}

/* In a V (zb-v, dualpipev) a slot is wanted again before the pass that
 * receives its last send has run on the other stage: both stages would
 * wait for each other's receive. So the schedules' sends are buffered,
 * as their authors' implementations are (asynchronous sends): the data
 * is copied out, the slot is free at once, and the copies are waited for
 * at the end of the step's schedule (send_flush). */
static void send_buffered(engine_rank_t *r, group_t *pg, const float *buf, size_t len, int peer,
                          int tag) {
    if (r->nbuffered == r->cap_buffered) {
        const int cap = r->cap_buffered ? 2 * r->cap_buffered : 16;
        coll_request_t **req = realloc(r->buffered_req, (size_t)cap * sizeof *req);
        if (req) r->buffered_req = req;
        float **data = req ? realloc(r->buffered, (size_t)cap * sizeof *data) : NULL;
        if (!req || !data) parity_fatal("device %d: out of memory buffering a send", r->device);
        r->buffered = data, r->cap_buffered = cap;
    }
    float *copy = malloc((len ? len : 1) * sizeof *copy);
    if (!copy) parity_fatal("device %d: out of memory buffering a send", r->device);
    memcpy(copy, buf, len * sizeof *copy);
    r->buffered[r->nbuffered] = copy;
    r->buffered_req[r->nbuffered++] = coll_isend(pg, copy, len, COLL_F32, peer, tag);
}

static void send_flush(engine_rank_t *r) {
    for (int i = 0; i < r->nbuffered; i++) {
        coll_wait(r->buffered_req[i]);
        free(r->buffered[i]);
    }
    r->nbuffered = 0;
}

/* The stream or its gradient (len floats of slot s) to virtual stage vs2,
 * and from it. */
static void send_to(engine_rank_t *r, int s, const float *buf, int n_seq, size_t len, int vs2,
                    int tag) {
    int peer;
    if (loop_back(r, vs2)) {
        loop_put(r, buf, len, tag);
        return;
    }
    const int side = engine_bridge_side(r), other = pp_stage_of(&r->sh->pp, vs2);
    if (side > 0 && other > r->stage) {
        bridge_send_stream(r, s, buf, n_seq, len, tag);
        return;
    }
    if (side < 0 && other < r->stage) peer = engine_bridge_peer(r, 0);
    group_t *pg = side < 0 && other < r->stage ? r->world : p2p_peer(r, vs2, &peer);
    if (r->sh->pp.vshape) { /* buffered: see send_buffered */
        send_buffered(r, pg, buf, len, peer, tag);
        return;
    }
    r->slot_send[s] = coll_isend(pg, buf, len, COLL_F32, peer, tag);
}

static void recv_from(engine_rank_t *r, float *buf, int n_seq, size_t len, int vs2, int tag) {
    int peer;
    if (loop_back(r, vs2)) {
        loop_take(r, buf, len, tag);
        return;
    }
    const int side = engine_bridge_side(r), other = pp_stage_of(&r->sh->pp, vs2);
    if (side > 0 && other > r->stage) {
        bridge_recv_grad(r, buf, n_seq, len, tag);
        return;
    }
    if (side < 0 && other < r->stage) {
        coll_recv(r->world, buf, len, COLL_F32, engine_bridge_peer(r, 0), tag);
        return;
    }
    group_t *pg = p2p_peer(r, vs2, &peer);
    coll_recv(pg, buf, len, COLL_F32, peer, tag);
}

static void forward(engine_rank_t *r, int64_t step, int mb, int c, int s, const gpt_observer_t *obs) {
    gpt_t *g = r->g;
    const pp_plan_t *p = &r->sh->pp;
    const int T = g->cfg.seq_length, B = g->cfg.global_batch, vs = pp_vstage(p, r->stage, c);
    const int lo = g->shard.units.lo[c], hi = g->shard.units.hi[c];
    gpt_slot_t *A = &g->slot[s];
    int first, n_seq;
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
    const size_t len = stream_len(g, n_seq);
    double t0 = engine_now();
    if (model_unit_takes_stream(&g->cfg, lo)) {
        recv_from(r, gpt_slot_stream(g, s, lo), n_seq, len, vs - 1, tag_of(p, 0, mb, vs - 1));
        engine_span(r, "recv activation", "recv", t0, mb, c);
    }
    t0 = engine_now();
    for (int u = lo; u < hi; u++) gpt_unit_forward(g, u, s, obs);
    r->busy += engine_now() - t0;
    pass_span(r, 1, PP_PASS_WHOLE, t0, mb, c);
    if (model_unit_gives_stream(&g->cfg, hi - 1)) { /* the span marks the send's posting; the data moves when the peer receives */
        t0 = engine_now();
        send_to(r, s, gpt_slot_stream(g, s, hi), n_seq, len, vs + 1, tag_of(p, 0, mb, vs));
        engine_span(r, "send activation", "send", t0, mb, c);
    }
}

static void backward(engine_rank_t *r, int mb, int c, int s, int part, const gpt_observer_t *obs) {
    gpt_t *g = r->g;
    const pp_plan_t *p = &r->sh->pp;
    const int vs = pp_vstage(p, r->stage, c), lo = g->shard.units.lo[c], hi = g->shard.units.hi[c];
    gpt_slot_t *A = &g->slot[s];
    const size_t len = stream_len(g, A->n_seq);
    double t0 = engine_now();
    device_note_microbatch(mb, c);
    device_note_pass(DEVICE_PASS_BACKWARD, hi - 1);
    if (model_unit_gives_stream(&g->cfg, hi - 1)) {
        wait_send(r, s); /* the forward's output has long arrived; d_resid is received into */
        recv_from(r, A->d_resid, A->n_seq, len, vs + 1, tag_of(p, 1, mb, vs));
        engine_span(r, "recv gradient", "recv", t0, mb, c);
    }
    r->last_micro = mb == p->m - 1; /* the chunk's gradients are final after this one */
    t0 = engine_now();
    /* B of a split backward: the weight gradients' products wait in the stash */
    if (part == PP_PASS_B) linear_wstash_bind(r->wstash[mb * p->v + c]);
    for (int u = hi - 1; u >= lo; u--) gpt_unit_backward(g, u, s, obs);
    linear_wstash_bind(NULL);
    r->busy += engine_now() - t0;
    pass_span(r, 0, part, t0, mb, c);
    if (part == PP_PASS_B) { /* what the stashes hold now, for the report */
        size_t held = 0;
        for (int k = 0; k < p->m * p->v; k++) held += linear_wstash_bytes(r->wstash[k]);
        if (held > r->wstash_peak) r->report->pp_wstash_peak = r->wstash_peak = held;
    }
    if (model_unit_takes_stream(&g->cfg, lo)) {
        wait_send(r, s);
        t0 = engine_now();
        send_to(r, s, A->d_resid, A->n_seq, len, vs - 1, tag_of(p, 1, mb, vs - 1));
        engine_span(r, "send gradient", "send", t0, mb, c);
    }
}

/* W of a split backward: the weight gradients B left in the stash, added
 * to the same open sums (no communication: B sent the input gradient). */
static void weight(engine_rank_t *r, int mb, int c) {
    const double t0 = engine_now();
    device_note_microbatch(mb, c);
    device_note_pass(DEVICE_PASS_BACKWARD, r->g->shard.units.hi[c] - 1);
    linear_wstash_run(r->wstash[mb * r->sh->pp.v + c], &r->g->ws);
    r->busy += engine_now() - t0;
    pass_span(r, 0, PP_PASS_W, t0, mb, c);
}

/* Tied head over stages: both copies of the word embedding's gradient
 * become the exact sum of the embedding's and the head's contributions. */
static void reduce_tied_embedding(engine_rank_t *r) {
    if (!r->emb_group || r->sh->run->broken_pp_tied_grad) return;
    acc_t *a = &r->g->grad_acc[r->g->table.wte];
    const double t0 = engine_now();
    coll_all_reduce_open(r->emb_group, &a->x, 0, a->n);
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
    for (int s = 0; s < r->g->n_slots; s++) wait_send(r, s);
    send_flush(r);
    free(busy);
    r->last_micro = 0;
    reduce_tied_embedding(r);
}
