/* checkpoints.c - what a dump or checker sees of a unit's forward pass.
 *
 * One table per unit kind names the slot's checkpoints (MODEL.md's names)
 * and their per-sequence shapes; gpt_report_unit hands them to the
 * observer after the unit's forward. The maths in units.c never calls an
 * observer for a tensor.
 */
#include "parity/model.h"

#include <stdio.h>

#include "units_internal.h"

typedef struct {
    const char *name; /* after the prefix */
    st_dtype_t dtype;
    const void *data; /* NULL: not kept (dropout off) */
    int ndim;         /* per sequence */
    int64_t shape[3]; /* global, per sequence */
    int cut;          /* the axis tensor parallelism cuts (-1: none) */
    int64_t lo, ext;  /* along it: the block held */
    const cp_runs_t *runs; /* the positions held along axis `rows`, or NULL: all */
    int rows;
} checkpoint_t;

/* One view per block the slot holds contiguously: the whole tensor when
 * the positions held are one run starting the per-sequence shape (the
 * golden run, sequence parallelism, Ulysses); else (the ring's two runs,
 * or positions on an inner axis) one per sequence, index of the axes
 * before `rows`, and run. */
void report_rows(const gpt_observer_t *obs, const gpt_slot_t *A, const char *name,
                 st_dtype_t dtype, const void *data, int ndim, const int64_t *shape, int cut,
                 int64_t lo, int64_t ext, const cp_runs_t *runs, int rows) {
    if (runs && runs->n == 1 && runs->t0[0] == 0 && runs->len[0] == shape[rows]) runs = NULL;
    int64_t le[3], stride[3];
    for (int d = 0; d < ndim; d++) le[d] = d == cut ? ext : shape[d];
    int held = 0;
    for (int k = 0; runs && k < runs->n; k++) held += runs->len[k];
    if (runs) le[rows] = held;
    for (int d = ndim - 1; d >= 0; d--) stride[d] = d == ndim - 1 ? 1 : stride[d + 1] * le[d + 1];
    const size_t esize = st_dtype_size(dtype), per_seq = (size_t)(stride[0] * le[0]) * esize;
    gpt_view_t v = {name, dtype, data, A->first_seq, A->n_seq, ndim, {0}, {0}, {0}};
    for (int d = 0; d < ndim; d++) {
        v.shape[d] = shape[d], v.lo[d] = d == cut ? lo : 0, v.ext[d] = le[d];
    }
    if (!runs || (runs->n == 1 && rows == 0)) {
        if (runs) v.lo[0] = runs->t0[0];
        obs->batch_tensor(obs->ctx, &v);
        return;
    }
    int64_t lead = 1;
    for (int d = 0; d < rows; d++) lead *= le[d];
    for (int b = 0; b < A->n_seq; b++)
        for (int64_t i = 0; i < lead; i++) {
            int64_t rest = i, at = 0;
            for (int d = rows - 1; d >= 0; d--) { /* index i over the leading axes */
                const int64_t x = rest % le[d];
                rest /= le[d];
                v.lo[d] = (d == cut ? lo : 0) + x, v.ext[d] = 1;
                at += x * stride[d];
            }
            for (int k = 0, off = 0; k < runs->n; off += runs->len[k++]) {
                v.first_seq = A->first_seq + b, v.n_seq = 1;
                v.lo[rows] = runs->t0[k], v.ext[rows] = runs->len[k];
                v.data = (const char *)data + (size_t)b * per_seq +
                         (size_t)(at + off * stride[rows]) * esize;
                obs->batch_tensor(obs->ctx, &v);
            }
        }
}

static void report(const gpt_observer_t *obs, const gpt_slot_t *A, const checkpoint_t *cp, int n,
                   const char *prefix) {
    char name[160];
    for (int i = 0; i < n; i++) {
        if (!cp[i].data) continue;
        snprintf(name, sizeof name, "%s%s", prefix, cp[i].name);
        report_rows(obs, A, name, cp[i].dtype, cp[i].data, cp[i].ndim, cp[i].shape, cp[i].cut,
                    cp[i].lo, cp[i].ext, cp[i].runs, cp[i].rows);
    }
}

/* The positions the residual stream's tensors hold: the sharded regions'
 * (sequence parallelism: t0 .. t0+Tl-1 of the slot's positions), else
 * every position of the slot (context parallelism: its runs). */
static cp_runs_t stream_positions(const gpt_local_t *lc) {
    if (lc->seq_parts <= 1) return lc->runs;
    const int64_t Tl = lc->seq_held / lc->seq_parts;
    return cp_runs_slice(&lc->runs, (int)(lc->seq_part * Tl), (int)Tl);
}

void gpt_report_input_grad(const gpt_t *g, int unit, int s, const gpt_observer_t *obs) {
    if (!obs || !obs->batch_tensor || unit < 1) return;
    const model_config_t *c = &g->cfg;
    const cp_runs_t pos = stream_positions(&g->local);
    const checkpoint_t cp[] = {
        {unit <= c->layers ? "" : "head", ST_F32, g->slot[s].d_resid, 2,
         {c->seq_length, c->hidden}, -1, 0, 0, &pos, 0},
    };
    char prefix[64];
    if (unit <= c->layers) snprintf(prefix, sizeof prefix, "grad_input.layers.%d", unit - 1);
    else snprintf(prefix, sizeof prefix, "grad_input.");
    report(obs, &g->slot[s], cp, 1, prefix);
}

void gpt_report_unit(const gpt_t *g, int unit, int s, const gpt_observer_t *obs) {
    if (!obs || !obs->batch_tensor) return;
    const model_config_t *c = &g->cfg;
    const gpt_slot_t *A = &g->slot[s];
    const int64_t T = c->seq_length, C = c->hidden, F = c->ffn, V = c->vocab, H = c->heads;
    const int L = c->layers;
    const gpt_local_t *lc = &g->local;
    /* The residual-stream tensors hold stream_positions(), LayerNorm
     * outputs are reported gathered; every token tensor holds the slot's
     * positions (context parallelism: its runs). Axis 0 of [T, ...] is
     * the position. */
    const cp_runs_t stream = stream_positions(lc);
    const cp_runs_t *pos = &stream, *all = &lc->runs;
    const int64_t W = lc->attn, D = lc->heads ? W / lc->heads : 0;
    const int64_t Fl = lc->ffn;
    if (unit == 0) {
        const checkpoint_t cp[] = {
            {"mask.dropout.embedding", ST_U8, A->emb_keep, 2, {T, C}, -1, 0, 0, pos, 0},
            {"act.embedding.output", ST_F32, A->emb, 2, {T, C}, -1, 0, 0, pos, 0},
        };
        report(obs, A, cp, 2, "");
    } else if (unit <= L) {
        const int l = unit - 1;
        const layer_acts_t *LA = &A->layer[l];
        char prefix[64];
        const checkpoint_t masks[] = {
            /* ring: the rank's query rows (axis 1) of its heads; Ulysses:
             * every row of the heads it attends */
            {"attention_dropout", ST_U8, LA->att_keep, 3, {H, T, T}, 0, lc->att_head0,
             lc->att_heads, lc->ulysses ? NULL : all, 1},
            {"attention_output_dropout", ST_U8, LA->attn_keep, 2, {T, C}, -1, 0, 0, pos, 0},
            {"mlp_output_dropout", ST_U8, LA->mlp_keep, 2, {T, C}, -1, 0, 0, pos, 0},
        };
        snprintf(prefix, sizeof prefix, "mask.layers.%d.", l);
        report(obs, A, masks, 3, prefix);
        const checkpoint_t acts[] = {
            {"input_layernorm.output", ST_F32, LA->ln1_full, 2, {T, C}, -1, 0, 0, all, 0},
            {"self_attention.query_key_value.output", ST_F32, LA->qkv, 2, {T, 3 * C}, 1,
             3 * D * lc->head0, 3 * W, all, 0},
            {"self_attention.core_attention.output", ST_F32, LA->ctx, 2, {T, C}, 1,
             D * lc->head0, W, all, 0},
            {"self_attention.dense.output", ST_F32, LA->attn_out, 2, {T, C}, -1, 0, 0, pos, 0},
            {"post_attention_layernorm.output", ST_F32, LA->ln2_full, 2, {T, C}, -1, 0, 0, all, 0},
            {"mlp.dense_h_to_4h.output", ST_F32, LA->fc1_out, 2, {T, F}, 1, lc->ffn0, Fl, all, 0},
            {"mlp.dense_4h_to_h.output", ST_F32, LA->fc2_out, 2, {T, C}, -1, 0, 0, pos, 0},
            {"output", ST_F32, LA->out, 2, {T, C}, -1, 0, 0, pos, 0},
        };
        snprintf(prefix, sizeof prefix, "act.layers.%d.", l);
        report(obs, A, acts, 8, prefix);
    } else {
        const checkpoint_t cp[] = {
            {"act.final_layernorm.output", ST_F32, A->lnf_full, 2, {T, C}, -1, 0, 0, all, 0},
            {"logits", ST_F32, A->logits, 2, {T, V}, 1, lc->vocab0, lc->vocab, all, 0},
        };
        report(obs, A, cp, 2, "");
    }
}
