/* attention_local.c - the golden attention core (ops/attention.c) on
 * every position the slot holds: the single device, and tensor
 * parallelism, which holds whole heads (heads, head0 of gpt_local_t) and
 * so runs the golden core on them unchanged. The style every other one
 * falls back to (the last line of styles.c's attention_table). */
#include "model/styles/attention.h"

const cp_runs_t *attention_slot_rows(const unit_positions_t *pos) { return pos->all; }

static int local_applies(const model_config_t *c, const gpt_local_t *lc) {
    (void)c, (void)lc;
    return 1;
}

/* ctx [n, A] from qkv [n, 3A]: the mask of the heads held, then the core */
static void local_forward(gpt_t *g, const pass_t *p, attn_acts_t *LA, uint64_t mask_stream,
                          int mask_seq) {
    if (LA->att_keep) attention_mask(LA->att_keep, &p->as, mask_seq, g->cfg.seed, mask_stream);
    attention_forward(LA->ctx, LA->att_e, LA->att_ehat, LA->att_z, LA->qkv, LA->att_keep, &p->as,
                      &g->ws);
}

static void local_backward(gpt_t *g, const pass_t *p, attn_acts_t *LA, float *dqkv,
                           const float *dctx) {
    attention_backward(dqkv, dctx, LA->ctx, LA->att_e, LA->att_ehat, LA->att_z, LA->qkv,
                       LA->att_keep, &p->as, g->scratch.att_scratch, &g->ws);
}

const attention_style_t attention_local = {
    .base = {.name = "local", .family = STYLE_ATTENTION, .applies = local_applies,
             .layout_scratch = NULL},
    .comm = CP_RING, /* one rank: every position */
    .layout_acts = NULL,
    .mask_rows = attention_slot_rows,
    .forward = local_forward,
    .backward = local_backward,
};
