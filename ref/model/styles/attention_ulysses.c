/* attention_ulysses.c - DeepSpeed-Ulysses context parallelism
 * (--cp-comm-type a2a): an all-to-all turns qkv [n_seq, Tc, 3A] (every
 * head held, the rank's positions) into core_qkv [n_seq, T, 3A/cp] (every
 * position, heads/cp heads: gpt_local_t's att_heads from att_head0), the
 * golden core runs on those heads, and another all-to-all turns core_ctx
 * back into ctx. Copies only: the golden bits. The core's activations
 * (att_*) are of its heads over every position; its re-sharded qkv and
 * ctx are kept in the slot for the backward (layout_acts). */
#include <string.h>

#include "parity/coll.h"
#include "model/styles/attention.h"

/* The all-to-all's two buffers [n, 3A]; the backward's re-sharded dctx
 * [n, A] and dqkv [n, 3A]. */
typedef struct {
    float *send, *recv, *dctx, *dqkv;
} ulysses_scratch_t;

static void ulysses_layout_scratch(void **priv, const model_config_t *c, const gpt_local_t *lc,
                                   size_t n, carver_t *cv) {
    (void)c;
    ulysses_scratch_t measure;
    ulysses_scratch_t *S = style_scratch_struct(priv, cv, sizeof *S, &measure);
    const size_t A_ = (size_t)lc->attn;
    S->send = CARVE_F(cv, n * 3 * A_);
    S->recv = CARVE_F(cv, n * 3 * A_);
    S->dctx = CARVE_F(cv, n * A_);
    S->dqkv = CARVE_F(cv, n * 3 * A_);
}

/* A block's re-sharded qkv [n, 3A] and ctx [n, A], as many floats as
 * the rank's own. */
static void ulysses_layout_acts(attn_acts_t *L, const slot_dims_t *d, carver_t *cv) {
    L->core_qkv = CARVE_F(cv, d->n * 3 * d->A);
    L->core_ctx = CARVE_F(cv, d->n * d->A);
}

static int ulysses_applies(const model_config_t *c, const gpt_local_t *lc) {
    (void)c;
    return lc->cp > 1 && lc->ulysses;
}

/* Every position of the heads it attends: the mask's rows are all T. */
static const cp_runs_t *ulysses_mask_rows(const unit_positions_t *pos) {
    (void)pos;
    return NULL;
}

/* The all-to-all's two copies, each one way (to_blocks) or back. Head
 * groups: rows [n][W] <-> blocks [cp][n][w], block j the columns of head
 * group j. Positions: a sequence's rows [nb][T][w] <-> blocks
 * [cp][nb][Tc][w], block j the positions rank j holds. */
static void head_groups(float *dst, const float *src, size_t n, int W, int cp, int to_blocks) {
    const size_t w = (size_t)(W / cp);
    for (int j = 0; j < cp; j++)
        for (size_t i = 0; i < n; i++) {
            const size_t r = i * W + (size_t)j * w, k = ((size_t)j * n + i) * w;
            memcpy(dst + (to_blocks ? k : r), src + (to_blocks ? r : k), w * sizeof(float));
        }
}
static void positions(float *dst, const float *src, const pass_t *p, int w, int cp, int to_blocks) {
    const size_t run = (size_t)p->Tc * w;
    for (int j = 0; j < cp; j++)
        for (int b = 0; b < p->n_seq; b++) {
            const size_t r = ((size_t)b * p->T + (size_t)j * p->Tc) * w,
                         k = ((size_t)j * p->n_seq + b) * run;
            memcpy(dst + (to_blocks ? k : r), src + (to_blocks ? r : k), run * sizeof(float));
        }
}

/* src [nb][Tc][W] (every head, this rank's positions) -> dst [nb][T][W/cp]
 * (every position, head group `rank`): block j of the all-to-all is head
 * group j of this rank's positions; what arrives from rank j is head
 * group `rank` of rank j's positions. */
static void seq_to_heads(gpt_t *g, const pass_t *p, float *dst, const float *src, int W) {
    const int cp = g->local.cp;
    const size_t n = (size_t)p->n_seq * p->Tc;
    const ulysses_scratch_t *S = attention_scratch(g);
    head_groups(S->send, src, n, W, cp, 1);
    coll_all_to_all(g->shard.cp_group, S->send, S->recv, n * (size_t)(W / cp), COLL_F32);
    positions(dst, S->recv, p, W / cp, cp, 0);
}

/* The inverse: src [nb][T][W/cp] -> dst [nb][Tc][W]. */
static void heads_to_seq(gpt_t *g, const pass_t *p, float *dst, const float *src, int W) {
    const int cp = g->local.cp;
    const size_t n = (size_t)p->n_seq * p->Tc;
    const ulysses_scratch_t *S = attention_scratch(g);
    positions(S->send, src, p, W / cp, cp, 1);
    coll_all_to_all(g->shard.cp_group, S->send, S->recv, n * (size_t)(W / cp), COLL_F32);
    head_groups(dst, S->recv, n, W, cp, 0);
}

/* The golden attention's shape for the heads Ulysses attends. */
static attn_shape_t ulysses_shape(const gpt_t *g, const pass_t *p) {
    attn_shape_t s = p->as;
    s.H = g->local.att_heads, s.C = p->as.C / g->local.cp, s.head0 = g->local.att_head0;
    s.q_runs = NULL;
    return s;
}

static void ulysses_forward(gpt_t *g, const pass_t *p, attn_acts_t *LA, uint64_t mask_stream,
                            int mask_seq) {
    const gpt_local_t *lc = &g->local;
    const attn_shape_t s = ulysses_shape(g, p);
    if (LA->att_keep) attention_mask(LA->att_keep, &s, mask_seq, g->cfg.seed, mask_stream);
    seq_to_heads(g, p, LA->core_qkv, LA->qkv, 3 * lc->attn);
    attention_forward(LA->core_ctx, LA->att_e, LA->att_ehat, LA->att_z, LA->core_qkv,
                      LA->att_keep, &s, &g->ws);
    heads_to_seq(g, p, LA->ctx, LA->core_ctx, lc->attn);
    /* mixed precision: the heads-major copy the backward reads, rounded
     * as ctx is (by the unit) */
    act_round(g, LA->core_ctx, (size_t)p->n * lc->attn);
}

static void ulysses_backward(gpt_t *g, const pass_t *p, attn_acts_t *LA, float *dqkv,
                             const float *dctx) {
    const gpt_local_t *lc = &g->local;
    const ulysses_scratch_t *S = attention_scratch(g);
    const attn_shape_t s = ulysses_shape(g, p);
    seq_to_heads(g, p, S->dctx, dctx, lc->attn);
    attention_backward(S->dqkv, S->dctx, LA->core_ctx, LA->att_e, LA->att_ehat, LA->att_z,
                       LA->core_qkv, LA->att_keep, &s, g->scratch.att_scratch, &g->ws);
    heads_to_seq(g, p, dqkv, S->dqkv, 3 * lc->attn);
}

const attention_style_t attention_ulysses = {
    .base = {.name = "ulysses", .family = STYLE_ATTENTION, .applies = ulysses_applies,
             .layout_scratch = ulysses_layout_scratch},
    .comm = CP_ULYSSES,
    .layout_acts = ulysses_layout_acts,
    .mask_rows = ulysses_mask_rows,
    .forward = ulysses_forward,
    .backward = ulysses_backward,
};
