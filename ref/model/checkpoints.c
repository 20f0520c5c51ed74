/* checkpoints.c - what a dump or checker sees of a unit's forward pass.
 *
 * One table per unit kind names the slot's checkpoints (MODEL.md's names)
 * and their per-sequence shapes; gpt_report_unit hands them to the
 * observer after the unit's forward. The maths in units.c never calls an
 * observer for a tensor.
 */
#include "parity/model.h"

#include <stdio.h>

typedef struct {
    const char *name; /* after the prefix */
    st_dtype_t dtype;
    const void *data; /* NULL: not kept (dropout off) */
    int ndim;         /* per sequence */
    int64_t shape[3]; /* global, per sequence */
    int cut;          /* the axis tensor parallelism cuts (-1: none) */
    int64_t lo, ext;  /* along it: the block held */
} checkpoint_t;

static void report(const gpt_observer_t *obs, const gpt_slot_t *A, const checkpoint_t *cp, int n,
                   const char *prefix) {
    char name[160];
    for (int i = 0; i < n; i++) {
        if (!cp[i].data) continue;
        snprintf(name, sizeof name, "%s%s", prefix, cp[i].name);
        gpt_view_t v = {name, cp[i].dtype, cp[i].data, A->first_seq, A->n_seq, cp[i].ndim,
                        {0}, {0}, {0}};
        for (int d = 0; d < cp[i].ndim; d++) {
            v.shape[d] = v.ext[d] = cp[i].shape[d];
            if (d == cp[i].cut) v.lo[d] = cp[i].lo, v.ext[d] = cp[i].ext;
        }
        obs->batch_tensor(obs->ctx, &v);
    }
}

void gpt_report_unit(const gpt_t *g, int unit, int s, const gpt_observer_t *obs) {
    if (!obs || !obs->batch_tensor) return;
    const model_config_t *c = &g->cfg;
    const gpt_slot_t *A = &g->slot[s];
    const int64_t T = c->seq_length, C = c->hidden, F = c->ffn, V = c->vocab, H = c->heads;
    const int L = c->layers;
    const gpt_local_t *lc = &g->local;
    /* sequence parallelism: the residual-stream tensors hold positions
     * t0 .. t0+Tl-1 (axis 0 of [T, C]); LayerNorm outputs are reported
     * gathered */
    const int sp = lc->seq_parts > 1;
    const int64_t Tl = T / lc->seq_parts, t0 = lc->seq_part * Tl;
    const int pos = sp ? 0 : -1;
    const int64_t W = lc->attn, D = lc->heads ? W / lc->heads : 0;
    const int64_t Fl = lc->ffn, Hl = lc->heads;
    if (unit == 0) {
        const checkpoint_t cp[] = {
            {"mask.dropout.embedding", ST_U8, A->emb_keep, 2, {T, C}, pos, t0, Tl},
            {"act.embedding.output", ST_F32, A->emb, 2, {T, C}, pos, t0, Tl},
        };
        report(obs, A, cp, 2, "");
    } else if (unit <= L) {
        const int l = unit - 1;
        const layer_acts_t *LA = &A->layer[l];
        char prefix[64];
        const checkpoint_t masks[] = {
            {"attention_dropout", ST_U8, LA->att_keep, 3, {H, T, T}, 0, lc->head0, Hl},
            {"attention_output_dropout", ST_U8, LA->attn_keep, 2, {T, C}, pos, t0, Tl},
            {"mlp_output_dropout", ST_U8, LA->mlp_keep, 2, {T, C}, pos, t0, Tl},
        };
        snprintf(prefix, sizeof prefix, "mask.layers.%d.", l);
        report(obs, A, masks, 3, prefix);
        const checkpoint_t acts[] = {
            {"input_layernorm.output", ST_F32, LA->ln1_full, 2, {T, C}, -1, 0, 0},
            {"self_attention.query_key_value.output", ST_F32, LA->qkv, 2, {T, 3 * C}, 1,
             3 * D * lc->head0, 3 * W},
            {"self_attention.core_attention.output", ST_F32, LA->ctx, 2, {T, C}, 1,
             D * lc->head0, W},
            {"self_attention.dense.output", ST_F32, LA->attn_out, 2, {T, C}, pos, t0, Tl},
            {"post_attention_layernorm.output", ST_F32, LA->ln2_full, 2, {T, C}, -1, 0, 0},
            {"mlp.dense_h_to_4h.output", ST_F32, LA->fc1_out, 2, {T, F}, 1, lc->ffn0, Fl},
            {"mlp.dense_4h_to_h.output", ST_F32, LA->fc2_out, 2, {T, C}, pos, t0, Tl},
            {"output", ST_F32, LA->out, 2, {T, C}, pos, t0, Tl},
        };
        snprintf(prefix, sizeof prefix, "act.layers.%d.", l);
        report(obs, A, acts, 8, prefix);
    } else {
        const checkpoint_t cp[] = {
            {"act.final_layernorm.output", ST_F32, A->lnf_full, 2, {T, C}, -1, 0, 0},
            {"logits", ST_F32, A->logits, 2, {T, V}, 1, lc->vocab0, lc->vocab},
        };
        report(obs, A, cp, 2, "");
    }
}
