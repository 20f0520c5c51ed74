/* checkpoints.c - what a dump or checker sees of a unit's forward pass.
 *
 * Each unit kind's table (unit_kind.h) names its checkpoints (MODEL.md's
 * names) and their per-sequence shapes; gpt_report_unit hands them to
 * the observer after the unit's forward (gpt_unit_after_forward). A
 * kind's forward never calls an observer.
 */
#include "model/gpt.h"

#include <stdio.h>

#include "parity/runtime.h"

#include "model/units/units_internal.h"

/* One view per block the slot holds contiguously: the whole tensor when
 * the positions held are one run starting the per-sequence shape (the
 * golden run, sequence parallelism, Ulysses); else (the ring's two runs,
 * or positions on an inner axis) one per sequence, index of the axes
 * before `rows`, and run. */
void report_rows(const gpt_observer_t *obs, const gpt_slot_t *A, const char *name,
                 st_dtype_t dtype, const void *data, int ndim, const int64_t *shape, int cut,
                 int64_t lo, int64_t ext, const cp_runs_t *runs, int rows) {
    report_rows_of(obs, A, A->first_seq, name, dtype, data, ndim, shape, cut, lo, ext, runs, rows);
}

void report_rows_of(const gpt_observer_t *obs, const gpt_slot_t *A, int first_seq, const char *name,
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
    gpt_view_t v = {name, dtype, data, first_seq, A->n_seq, ndim, {0}, {0}, {0}};
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
                v.first_seq = first_seq + b, v.n_seq = 1;
                v.lo[rows] = runs->t0[k], v.ext[rows] = runs->len[k];
                v.data = (const char *)data + (size_t)b * per_seq +
                         (size_t)(at + off * stride[rows]) * esize;
                obs->batch_tensor(obs->ctx, &v);
            }
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
    if (!obs || !obs->batch_tensor) return;
    const unit_t u = model_unit_at(&g->cfg, unit);
    if (!u.kind->input_grad) return;
    const model_config_t *c = &g->cfg;
    const cp_runs_t pos = stream_positions(&g->local);
    const int64_t shape[2] = {c->seq_length, c->hidden};
    char name[160];
    snprintf(name, sizeof name, u.kind->input_grad, u.index);
    const int split = g->local.hid < c->hidden; /* 2-D: the column's features */
    report_rows(obs, &g->slot[s], name, ST_F32, g->slot[s].d_resid, 2, shape, split ? 1 : -1,
                split ? g->local.hid0 : 0, split ? g->local.hid : 0, &pos, 0);
}

/* The kind's checkpoint list, named and shaped from the config, at the
 * blocks its views say the slot holds. The residual-stream tensors hold
 * stream_positions(), LayerNorm outputs are reported gathered; every
 * token tensor holds the slot's positions (context parallelism: its
 * runs). Axis 0 of [T, ...] is the position. */
void gpt_report_unit(const gpt_t *g, int unit, int s, const gpt_observer_t *obs) {
    if (!obs || !obs->batch_tensor) return;
    const gpt_slot_t *A = &g->slot[s];
    const unit_t u = gpt_unit(g, unit);
    const unit_kind_t *k = u.kind;
    const cp_runs_t stream = stream_positions(&g->local);
    const cp_runs_t whole = {.n = 1, .t0 = {0}, .len = {g->cfg.seq_length}};
    const unit_positions_t pos = {&stream, &g->local.runs, &whole, unit_inner_shift(g, A->n_seq)};
    unit_view_t v[UNIT_MAX_CHECKPOINTS];
    if (k->n_checkpoints > UNIT_MAX_CHECKPOINTS)
        parity_fatal("unit kind %s: %d checkpoints, at most %d", k->name, k->n_checkpoints,
                     UNIT_MAX_CHECKPOINTS);
    k->views(g, &u, A, &pos, v);
    char prefix[64], name[224];
    unit_prefix(&u, prefix, sizeof prefix);
    for (int i = 0; i < k->n_checkpoints; i++) {
        const unit_checkpoint_t *cp = &k->checkpoints[i];
        if (!v[i].data) continue;
        int64_t shape[3];
        for (int d = 0; d < cp->ndim; d++) shape[d] = unit_dim(&g->cfg, cp->dim[d]);
        snprintf(name, sizeof name, "%s%s%s%s", cp->cls, cp->cls[0] ? "." : "", prefix,
                 cp->suffix);
        report_rows_of(obs, A, A->first_seq + v[i].seq_shift, name, cp->dtype, v[i].data, cp->ndim,
                       shape, v[i].cut, v[i].lo,
                    v[i].ext, v[i].runs, v[i].rows);
    }
}
