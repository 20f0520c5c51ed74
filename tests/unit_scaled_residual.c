/* unit_scaled_residual.c - a test-only unit kind, in one file: a scaled
 * residual layer whose one parameter is 3-D. tests/layouts/test_custom_unit.c
 * includes it and registers it (model_set_runs) in place of the
 * transformer layer, with no edit under ref/parallel, ref/cli or
 * ref/config: the parameter table, placements, buckets, ZeRO shards,
 * pipeline holding, dumps and the checker follow from this table.
 *
 *   S [2, 1, C]   S[0]: a per-channel scale, S[1]: a per-channel shift
 *   h   = x * S[0] + S[1]        x, h [ns, C] (two roundings, this order)
 *   out = x + h                  the residual term first
 * backward, dy = d_resid [ns, C]:
 *   dS[0][c] = sum over tokens of dy * x   (exact: acc_add_rows)
 *   dS[1][c] = sum over tokens of dy
 *   dx       = dy + dy * S[0]
 *
 * S is replicated: it scales the residual stream, which every tensor-
 * parallel rank holds whole; the engine reduces its gradient over the
 * token axes its placement replicates it over (dp x cp). Not for
 * sequence parallelism: a tp rank would hold only its positions and the
 * token sum would need completing across tp (as ln_backward does).
 */
#include <string.h>

#include "model/gpt.h"
#include "model/units/unit_kind.h"
#include "model/units/units_internal.h"

enum { SR_SCALE, SR_N };
static const unit_tensor_t sr_tensors[SR_N] = {
    [SR_SCALE] = {"scale.weight", 3, {DIM_2, DIM_1, DIM_C}, INIT_NORMAL, STD_SIGMA, CUT_REPL, AL_NONE,
                  1, WHEN_ALWAYS},
};
static const unit_checkpoint_t sr_checkpoints[] = {
    {"act", "output", ST_F32, 2, {DIM_T, DIM_C}, 0, WHEN_ALWAYS, CKPT_COMPUTE},
};

/* the slot: the layer's output (its activations are its input, the
 * previous unit's output, which the slot keeps) */
static void sr_layout(gpt_slot_t *A, int l, const slot_dims_t *d, int held, int next_held,
                      carver_t *cv) {
    if (held || next_held) A->layer[l].out = CARVE_F(cv, d->ns * d->C);
}

static float *sr_output(gpt_slot_t *A, int l) { return A->layer[l].out; }

static const float *sr_input(const gpt_t *g, gpt_slot_t *A, const unit_t *u) {
    const unit_t prev = model_unit_at(&g->cfg, u->unit - 1);
    return prev.kind->output(A, prev.index);
}

static void sr_forward(gpt_t *g, const unit_t *u, gpt_slot_t *A, const float *x, const pass_t *p) {
    const size_t C = (size_t)g->cfg.hidden;
    const float *S = unit_param(g, u, SR_SCALE);
    float *out = A->layer[u->index].out;
    for (size_t i = 0; i < p->nsC; i++) {
        const float h = x[i] * S[i % C] + S[C + i % C];
        out[i] = x[i] + h;
    }
}

static void sr_backward(gpt_t *g, const unit_t *u, gpt_slot_t *A, const pass_t *p) {
    const int C = g->cfg.hidden;
    const float *S = unit_param(g, u, SR_SCALE), *x = sr_input(g, A, u);
    float *dy = A->d_resid, *prod = g->scratch.d_tmp;
    for (size_t i = 0; i < p->nsC; i++) prod[i] = dy[i] * x[i];
    acc_add_rows(unit_grad(g, u, SR_SCALE), 0, prod, p->ns, C, C);
    acc_add_rows(unit_grad(g, u, SR_SCALE), (size_t)C, dy, p->ns, C, C);
    for (size_t i = 0; i < p->nsC; i++) dy[i] = dy[i] + dy[i] * S[i % (size_t)C];
}

static void sr_views(const gpt_t *g, const unit_t *u, const gpt_slot_t *A,
                     const unit_positions_t *pos, unit_view_t *out) {
    (void)g;
    out[0] = (unit_view_t){A->layer[u->index].out, -1, 0, 0, pos->stream, 0, 0};
}

static const unit_kind_t unit_scaled_residual = {
    .name = "scaled_residual",
    .prefix = "layers.%d.",
    .tensors = sr_tensors,
    .n_tensors = SR_N,
    .checkpoints = sr_checkpoints,
    .n_checkpoints = 1,
    .input_grad = "grad_input.layers.%d",
    .layout = sr_layout,
    .output = sr_output,
    .forward = sr_forward,
    .backward = sr_backward,
    .views = sr_views,
};
