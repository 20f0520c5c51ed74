/* attention_ring.c - ring context parallelism (Megatron's --cp-comm-type
 * p2p): a rank holds the query positions of its two chunks (cp.h's
 * load-balanced runs) and sees every key and value block once as the
 * blocks go round the cp group; the kernels are attention_cp.c's. The
 * core's rows are the slot's positions, so its activations are the
 * attention part's own (no layout_acts). */
#include "model/styles/attention.h"

static int ring_applies(const model_config_t *c, const gpt_local_t *lc) {
    (void)c;
    return lc->cp > 1 && !lc->ulysses;
}

/* The mask of the rank's query rows (its runs), then the ring. */
static void ring_style_forward(gpt_t *g, const pass_t *p, attn_acts_t *LA, uint64_t mask_stream,
                               int mask_seq) {
    attn_shape_t s = p->as;
    s.q_runs = &g->local.runs;
    if (LA->att_keep) attention_mask(LA->att_keep, &s, mask_seq, g->cfg.seed, mask_stream);
    ring_forward(g, p, LA);
}

const attention_style_t attention_ring = {
    .base = {.name = "ring", .family = STYLE_ATTENTION, .applies = ring_applies,
             .layout_scratch = ring_layout_scratch},
    .comm = CP_RING,
    .layout_acts = NULL,
    .mask_rows = attention_slot_rows,
    .forward = ring_style_forward,
    .backward = ring_backward,
};
