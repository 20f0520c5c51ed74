/* links.c - a virtual stage's links to its neighbours (links.h): which
 * kind each is, decided once at setup, and the one switch that moves a
 * stream or its gradient over a link of each kind. */
#include <stdlib.h>
#include <string.h>

#include "engine_internal.h"

/* ---- peers ---------------------------------------------------------------- */

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

static void bridge_send_stream(engine_link_t *l, int s, const float *buf, int n_seq, size_t len,
                               int tag) {
    engine_rank_t *r = l->r;
    /* the decoder's ranks hold blocks of positions (sequence parallel) */
    const int k = r->bridge.fanout, sp = r->sh->run->pc.sequence_parallel;
    const size_t C = (size_t)r->g->cfg.hidden, rows_e = len / (size_t)n_seq / C;
    for (int i = 0; i < k; i++) {
        const float *out = buf;
        size_t n = len;
        if (sp) {
            float *pack = r->bridge.send + ((size_t)s * k + i) * len;
            bridge_block(pack, buf, n_seq, rows_e, k, i, C, 1);
            out = pack, n = len / (size_t)k;
        }
        l->req[s * k + i] = coll_isend(r->world, out, n, COLL_F32, r->bridge.peer[i], tag);
    }
}

static void bridge_recv_grad(engine_link_t *l, float *d_resid, int n_seq, size_t len, int tag) {
    engine_rank_t *r = l->r;
    /* the decoder's ranks hold blocks of positions (sequence parallel) */
    const int k = r->bridge.fanout, sp = r->sh->run->pc.sequence_parallel;
    const int combine = r->sh->run->broken_encdec_combine;
    const size_t C = (size_t)r->g->cfg.hidden, rows_e = len / (size_t)n_seq / C;
    const size_t n = sp ? len / (size_t)k : len;
    for (int i = 0; i < k; i++) {
        float *in = i == 0 && !sp ? d_resid : r->bridge.recv;
        coll_recv(r->world, in, n, COLL_F32, r->bridge.peer[i], tag);
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
                     "ranks did not complete it alike", r->device, r->bridge.peer[i],
                     r->bridge.peer[0], j);
            engine_fail(r->sh, msg);
        }
    }
    if (!sp && combine == 2)
        for (size_t j = 0; j < n; j++) d_resid[j] = d_resid[j] / (float)k;
}

/* ---- a V's bottom and its buffered sends ----------------------------------
 * A V's bottom (zb-v, dualpipev): the last stage hands chunk 0's output to
 * its own chunk 1, and chunk 1's input gradient back to chunk 0. A send to
 * itself would hold its slot until this stage's own later pass receives
 * it, and the schedule may want that slot first: the stage keeps a copy
 * by tag instead (r->loop), taken by the receiving pass. */
static float *copy_of(const engine_rank_t *r, const float *buf, size_t len, const char *what) {
    float *copy = malloc((len ? len : 1) * sizeof *copy);
    if (!copy) parity_fatal("device %d: out of memory %s", r->device, what);
    memcpy(copy, buf, len * sizeof *copy);
    return copy;
}

static void loop_take(engine_rank_t *r, float *buf, size_t len, int tag) {
    float **copy = &r->loop.copy[tag];
    if (!*copy)
        parity_fatal("device %d: pass with tag %d reads its own chunk's hand-off before it was made "
                     "(a schedule out of order)", r->device, tag);
    memcpy(buf, *copy, len * sizeof *buf);
    free(*copy);
    *copy = NULL;
}

/* In a V (zb-v, dualpipev) a slot is wanted again before the pass that
 * receives its last send has run on the other stage: both stages would
 * wait for each other's receive. So the schedules' sends are buffered,
 * as their authors' implementations are (asynchronous sends): the data
 * is copied out, the slot is free at once, and the copies are waited for
 * at the end of the step's schedule (engine_links_flush). */
static void send_buffered(engine_link_t *l, const float *buf, size_t len, int tag) {
    engine_rank_t *r = l->r;
    engine_buffered_t *q = &r->buffered;
    if (q->n == q->cap) {
        const int cap = q->cap ? 2 * q->cap : 16;
        coll_request_t **req = realloc(q->req, (size_t)cap * sizeof *req);
        if (req) q->req = req;
        float **data = req ? realloc(q->data, (size_t)cap * sizeof *data) : NULL;
        if (!req || !data) parity_fatal("device %d: out of memory buffering a send", r->device);
        q->data = data, q->cap = cap;
    }
    float *copy = copy_of(r, buf, len, "buffering a send");
    q->data[q->n] = copy;
    q->req[q->n++] = coll_isend(l->group, copy, len, COLL_F32, l->peer, tag);
}

void engine_links_flush(engine_rank_t *r) {
    engine_buffered_t *q = &r->buffered;
    for (int i = 0; i < q->n; i++) {
        coll_wait(q->req[i]);
        free(q->data[i]);
    }
    q->n = 0;
}

/* ---- the links -------------------------------------------------------------- */

void link_send(engine_link_t *l, int s, const float *buf, int n_seq, size_t len, int tag) {
    switch (l->kind) {
    case LINK_P2P: l->req[s] = coll_isend(l->group, buf, len, COLL_F32, l->peer, tag); return;
    case LINK_BUFFERED: send_buffered(l, buf, len, tag); return;
    case LINK_LOOP:
        l->r->loop.copy[tag] = copy_of(l->r, buf, len, "handing the stream to its own chunk");
        return;
    case LINK_BRIDGE: bridge_send_stream(l, s, buf, n_seq, len, tag); return;
    case LINK_NONE: break;
    }
    parity_fatal("device %d: a send with tag %d past the pipeline's end", l->r->device, tag);
}

void link_recv(engine_link_t *l, float *buf, int n_seq, size_t len, int tag) {
    switch (l->kind) {
    case LINK_P2P:
    case LINK_BUFFERED: coll_recv(l->group, buf, len, COLL_F32, l->peer, tag); return;
    case LINK_LOOP: loop_take(l->r, buf, len, tag); return;
    case LINK_BRIDGE: bridge_recv_grad(l, buf, n_seq, len, tag); return;
    case LINK_NONE: break;
    }
    parity_fatal("device %d: a receive with tag %d past the pipeline's end", l->r->device, tag);
}

void link_wait(engine_link_t *l, int s) {
    for (int i = 0; i < l->width; i++) {
        coll_request_t **q = &l->req[s * l->width + i];
        if (*q) coll_wait(*q);
        *q = NULL;
    }
}

void link_free(engine_link_t *l) {
    free(l->req);
    memset(l, 0, sizeof *l);
}

/* The link to virtual stage vs2 (0 .. pp*v - 1), or a LINK_NONE past
 * either end; its requests for every slot of the rank. */
static int link_make(engine_rank_t *r, int vs2, engine_link_t *l) {
    const pp_plan_t *p = &r->sh->pp;
    *l = (engine_link_t){.kind = LINK_NONE, .r = r};
    if (vs2 < 0 || vs2 >= p->pp * p->v) return 0;
    const int side = engine_bridge_side(r), other = pp_stage_of(p, vs2);
    if (p->vshape && other == r->stage) {
        l->kind = LINK_LOOP;
        return 0;
    }
    if (side > 0 && other > r->stage) {
        l->kind = LINK_BRIDGE, l->width = r->bridge.fanout;
    } else {
        if (side < 0 && other < r->stage) l->group = r->world, l->peer = engine_bridge_peer(r, 0);
        else l->group = p2p_peer(r, vs2, &l->peer);
        l->kind = p->vshape ? LINK_BUFFERED : LINK_P2P, l->width = p->vshape ? 0 : 1;
    }
    if (!l->width) return 0;
    l->req = calloc((size_t)r->g->n_slots * (size_t)l->width, sizeof *l->req);
    return l->req ? 0 : -1;
}

int engine_links_setup(engine_rank_t *r, device_t *dev) {
    (void)dev;
    const pp_plan_t *p = &r->sh->pp;
    for (int c = 0; c < p->v; c++) {
        const int vs = pp_vstage(p, r->stage, c);
        if (link_make(r, vs + 1, &r->next[c]) || link_make(r, vs - 1, &r->prev[c])) {
            engine_fail(r->sh, "dp: out of memory for the schedule");
            return -1;
        }
    }
    return 0;
}

void engine_links_teardown(engine_rank_t *r) {
    for (int c = 0; c < GPT_MAX_CHUNKS; c++) {
        link_free(&r->next[c]);
        link_free(&r->prev[c]);
    }
}
