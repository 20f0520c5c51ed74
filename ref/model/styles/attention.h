/* attention.h - the attention-core family of styles: how a replica runs
 * an attention block's core (scores, softmax, dropout, context) between
 * its qkv and dense linears (MODEL.md, Attention).
 *
 *   forward   ctx [n, A] from qkv [n, 3A], keeping the core's
 *             activations (att_e, att_ehat, att_z, att_keep) and
 *             the mask drawn first (I3: keyed by global head and position)
 *   backward  dqkv [n, 3A] from dctx [n, A]
 *
 * n = the slot's tokens (b sequences x the Tc positions it holds), A the
 * attention features held (heads x D). Unit code (unit_layer.c) rounds
 * ctx and dqkv to the model's dtype after the call; a style rounds only
 * what it keeps of its own (Ulysses' core_ctx).
 *
 * The styles, one file each, in styles.c's attention_table (most specific
 * first):
 *   attention_ulysses.c  DeepSpeed-Ulysses (--cp-comm-type a2a): an
 *                        all-to-all re-shards to every position of
 *                        heads/cp heads, the golden core runs, and back
 *   attention_ring.c     ring context parallelism (p2p): key/value blocks
 *                        go round the cp group (kernels: attention_cp.c)
 *   attention_local.c    the golden core on every position held: one
 *                        device, and tensor parallelism (the heads held)
 * A style's private scratch (ring's blocks and open sums, Ulysses'
 * all-to-all buffers) is its own, carved by its layout_scratch into
 * g->styles.scratch[STYLE_ATTENTION]; the shared att_scratch
 * (gpt_scratch_t) is the golden core's backward scratch, which every
 * style runs or borrows from.
 *
 * Adding a style: a file with a `const attention_style_t`, one line in
 * attention_table (or style_register from a test program, as
 * tests/styles/attention_two_passes.c does), and its applies(). */
#ifndef PARITY_MODEL_STYLES_ATTENTION_H
#define PARITY_MODEL_STYLES_ATTENTION_H

#include "model/gpt.h"
#include "model/styles/style.h"
#include "model/units/units_internal.h"

typedef struct {
    style_t base;
    /* how its context-parallel ranks hold the positions (cp.h's cp_runs:
     * what another rank holds, for a gather over cp) */
    cp_comm_t comm;
    /* the core's own activations of one block in the slot (core_qkv,
     * core_ctx), carved after ctx; NULL: the core reads qkv and writes
     * ctx themselves */
    void (*layout_acts)(attn_acts_t *L, const slot_dims_t *d, carver_t *cv);
    /* the query rows of its dropout mask's views (checkpoints): the
     * slot's positions (pos->all), or NULL for every position */
    const cp_runs_t *(*mask_rows)(const unit_positions_t *pos);
    /* the core of one block: the mask (when LA->att_keep) from the
     * dropout site's stream and the slot's sequences from mask_seq, then
     * ctx; backward: dqkv from dctx */
    void (*forward)(gpt_t *g, const pass_t *p, attn_acts_t *LA, uint64_t mask_stream,
                    int mask_seq);
    void (*backward)(gpt_t *g, const pass_t *p, attn_acts_t *LA, float *dqkv, const float *dctx);
} attention_style_t;

static inline const attention_style_t *attention_style_of(const style_t *s) {
    return (const attention_style_t *)s;
}
/* The replica's attention style and its private scratch. */
static inline const attention_style_t *attention_style(const gpt_t *g) {
    return attention_style_of(g->styles.style[STYLE_ATTENTION]);
}
static inline void *attention_scratch(const gpt_t *g) { return g->styles.scratch[STYLE_ATTENTION]; }

extern const attention_style_t attention_local, attention_ring, attention_ulysses;

/* attention_local.c: the slot's positions (ring and the golden core). */
const cp_runs_t *attention_slot_rows(const unit_positions_t *pos);

/* attention_cp.c: the ring's kernels and its private scratch: the key/value
 * blocks [n, 2A] (own, and two being received), the open sums of a block's
 * dK/dV sent to its owner (two in flight) and of this rank's own, of U
 * and dQ [n, A]; dU [n, A] and dZ [n per head], rounding room [n, 2A],
 * one g tile [Tt, Tt], each rank's global token tiles [cp][T/cp/tile], the
 * tiles of each tile's sums (its key tiles, its query tiles) and
 * the backward's receive requests [cp]. */
typedef struct {
    float *kv[3], *du, *dz, *round, *tile;
    int *tiles, *spans; /* spans [4][T/tile]: ring_of's sums of each tile */
    void **recv;
    void *send[2], *own, *open;
} ring_scratch_t;
void ring_layout_scratch(void **priv, const model_config_t *c, const gpt_local_t *lc, size_t n,
                         carver_t *cv);
/* ctx [n, A] and the core's activations from qkv [n, 3A] of the rank's
 * positions (its mask already drawn); backward: dqkv [n, 3A] from dctx
 * [n, A]. */
void ring_forward(gpt_t *g, const pass_t *p, attn_acts_t *LA);
void ring_backward(gpt_t *g, const pass_t *p, attn_acts_t *LA, float *dqkv, const float *dctx);

#endif
