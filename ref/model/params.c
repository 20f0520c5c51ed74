/* params.c - the parameter table: names, shapes, offsets, init, decay.
 *
 * As in llm.c, all parameters live in one contiguous block, and this
 * table is the single description of it: every loop over parameters
 * (init, gradients, AdamW, dumps) walks it. Order and names follow
 * MODEL.md's table. */
#include "parity/model.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "parity/pmath.h"
#include "parity/rng.h"

static const float SIGMA = 0.02f;

/* How tensor parallelism cuts a tensor (Megatron): not at all, along its
 * rows (column-parallel and vocabulary-parallel) or along its columns
 * (row-parallel), in blocks of `align` (whole canonical tiles, whole
 * heads). */
typedef struct {
    int axis; /* -1: replicated */
    int align;
} tp_cut_t;
static const tp_cut_t REPL = {-1, 1};

static int add(param_table_t *t, int tp, const char *name, int ndim, int64_t d0, int64_t d1,
               param_init_t init, float std, tp_cut_t cut, perr_t *err) {
    param_info_t *p = &t->info[t->count++];
    snprintf(p->name, sizeof p->name, "%s", name);
    const int64_t shape[2] = {d0, ndim == 2 ? d1 : 1};
    p->pl = placement_replicated(ndim, shape);
    if (cut.axis >= 0) p->pl = placement_cut(p->pl, cut.axis, GRID_TP, cut.align);
    const int sizes[GRID_NAXES] = {tp, 1, 1, 1, 1}, coord[GRID_NAXES] = {0};
    if (placement_check(&p->pl, sizes, name, err)) return -1;
    int64_t lo[PL_MAX_DIMS], ext[PL_MAX_DIMS];
    placement_block(&p->pl, sizes, coord, lo, ext);
    p->ndim = ndim;
    p->shape[0] = ext[0];
    p->shape[1] = ndim == 2 ? ext[1] : 1;
    p->numel = (size_t)p->shape[0] * (size_t)p->shape[1];
    p->offset = t->total;
    p->init = init;
    p->init_std = std;
    /* Megatron's rule, shared with tests/torch: decay every 2-D weight
     * (embeddings and the LM head included), never biases or LayerNorm. */
    p->weight_decay = ndim == 2;
    p->held = 1;
    t->total += p->numel;
    return 0;
}

static int lcm(int a, int b) {
    int x = a, y = b;
    while (y) {
        int r = x % y;
        x = y;
        y = r;
    }
    return a / x * b;
}

int param_table_build(param_table_t *t, const model_config_t *c, perr_t *err) {
    return param_table_build_tp(t, c, 1, err);
}

static int build(param_table_t *t, const model_config_t *c, int tp, int row_linears, perr_t *err);

int param_table_build_tp(param_table_t *t, const model_config_t *c, int tp, perr_t *err) {
    return build(t, c, tp, 0, err);
}

static int build(param_table_t *t, const model_config_t *c, int tp, int row_linears, perr_t *err) {
    memset(t, 0, sizeof *t);
    if (tp < 1) return perr_set(err, "tensor-model-parallel-size: %d, expected >= 1", tp);
    if (c->heads % tp)
        return perr_set(err, "tensor-model-parallel-size: %d must divide the %d attention heads "
                             "(each rank holds whole heads)",
                        tp, c->heads);
    /* model_config_validate bounds layers; a caller that skipped it must
     * not wrap the count */
    if (c->layers < 0 || c->layers > MODEL_MAX_LAYERS)
        return perr_set(err, "layers (--num-layers) = %d: expected at most %d", c->layers,
                        MODEL_MAX_LAYERS);
    int n = 2 + P_PER_LAYER * c->layers + 2 + (c->tied ? 0 : 1);
    t->info = calloc((size_t)n, sizeof *t->info);
    if (!t->info) return perr_set(err, "out of memory for %d parameter tensors", n);
    const int64_t V = c->vocab, T = c->seq_length, C = c->hidden, F = c->ffn;
    const int D = c->hidden / c->heads, tf = c->tile_features;
    /* column-parallel: rows of whole heads (qkv rows are head-ordered) on
     * the output tile grid; row-parallel: input columns likewise */
    tp_cut_t qkv_rows = {0, lcm(3 * D, tf)}, head_cols = {1, lcm(D, tf)};
    tp_cut_t ffn_rows = {0, c->tile_ffn};
    const tp_cut_t ffn_cols = {1, c->tile_ffn};
    tp_cut_t qkv_bias = {0, lcm(3 * D, tf)}, ffn_bias = {0, c->tile_ffn};
    const tp_cut_t vocab_rows = {0, tf};
    if (row_linears) { /* every linear split on its input features (whole tiles); biases whole */
        const tp_cut_t feature_cols = {1, tf};
        qkv_rows = head_cols = ffn_rows = feature_cols;
        qkv_bias = ffn_bias = REPL;
    }
    /* residual-branch output projections: sigma / sqrt(2L) */
    const float out_std = SIGMA * pm_rsqrtf(2.0f * (float)c->layers);
    char nm[96];
    int bad = 0;
    t->wte = t->count;
    bad |= add(t, tp, "embedding.word_embeddings.weight", 2, V, C, INIT_NORMAL, SIGMA, vocab_rows,
               err);
    t->wpe = t->count;
    bad |= !bad && add(t, tp, "embedding.position_embeddings.weight", 2, T, C, INIT_NORMAL, SIGMA,
                       REPL, err);
    t->first_layer = t->count;
    for (int l = 0; l < c->layers && !bad; l++) {
#define ADD(s, ...) (bad |= !bad && add(t, tp, (snprintf(nm, sizeof nm, "layers.%d.%s", l, s), nm), __VA_ARGS__, err))
        ADD("input_layernorm.weight", 1, C, 0, INIT_ONES, 0, REPL);
        ADD("input_layernorm.bias", 1, C, 0, INIT_ZEROS, 0, REPL);
        ADD("self_attention.query_key_value.weight", 2, 3 * C, C, INIT_NORMAL, SIGMA, qkv_rows);
        ADD("self_attention.query_key_value.bias", 1, 3 * C, 0, INIT_ZEROS, 0, qkv_bias);
        ADD("self_attention.dense.weight", 2, C, C, INIT_NORMAL, out_std, head_cols);
        ADD("self_attention.dense.bias", 1, C, 0, INIT_ZEROS, 0, REPL);
        ADD("post_attention_layernorm.weight", 1, C, 0, INIT_ONES, 0, REPL);
        ADD("post_attention_layernorm.bias", 1, C, 0, INIT_ZEROS, 0, REPL);
        ADD("mlp.dense_h_to_4h.weight", 2, F, C, INIT_NORMAL, SIGMA, ffn_rows);
        ADD("mlp.dense_h_to_4h.bias", 1, F, 0, INIT_ZEROS, 0, ffn_bias);
        ADD("mlp.dense_4h_to_h.weight", 2, C, F, INIT_NORMAL, out_std, ffn_cols);
        ADD("mlp.dense_4h_to_h.bias", 1, C, 0, INIT_ZEROS, 0, REPL);
#undef ADD
    }
    t->lnf_w = t->count;
    bad |= !bad && add(t, tp, "final_layernorm.weight", 1, C, 0, INIT_ONES, 0, REPL, err);
    t->lnf_b = t->count;
    bad |= !bad && add(t, tp, "final_layernorm.bias", 1, C, 0, INIT_ZEROS, 0, REPL, err);
    t->out = -1;
    if (!c->tied && !bad) {
        t->out = t->count;
        bad |= add(t, tp, "output_layer.weight", 2, V, C, INIT_NORMAL, SIGMA, vocab_rows, err);
    }
    if (bad) {
        param_table_free(t);
        return -1;
    }
    return 0;
}

int gpt_units_hold(const gpt_units_t *u, int unit) {
    if (u->n == 0) return 1;
    for (int c = 0; c < u->n; c++)
        if (unit >= u->lo[c] && unit < u->hi[c]) return 1;
    return 0;
}

/* The unit whose forward and backward read tensor i (params.c's order:
 * embeddings, layers, final LayerNorm and untied head). */
static int unit_of_tensor(const param_table_t *t, const model_config_t *c, int i) {
    if (i < t->first_layer) return 0;
    if (i < t->lnf_w) return 1 + (i - t->first_layer) / P_PER_LAYER;
    return c->layers + 1;
}

int param_table_build_mp(param_table_t *t, const model_config_t *c, int tp,
                         const gpt_units_t *units, unsigned opts, perr_t *err) {
    if (build(t, c, tp, (opts & GPT_TP_ROW_LINEARS) != 0, err)) return -1;
    if (units->n == 0) return 0;
    /* empty the tensors of other stages, then lay the rest out again */
    t->total = 0;
    for (int i = 0; i < t->count; i++) {
        param_info_t *p = &t->info[i];
        p->held = gpt_units_hold(units, unit_of_tensor(t, c, i)) ||
                  (i == t->wte && c->tied && gpt_units_hold(units, c->layers + 1));
        if (!p->held) p->shape[0] = p->shape[1] = 0, p->numel = 0;
        p->offset = t->total;
        t->total += p->numel;
    }
    return 0;
}

void param_table_free(param_table_t *t) {
    free(t->info);
    memset(t, 0, sizeof *t);
}

int param_find(const param_table_t *t, const char *name) {
    for (int i = 0; i < t->count; i++)
        if (!strcmp(t->info[i].name, name)) return i;
    return -1;
}

typedef struct {
    float *x;
    float std;
    uint64_t seed, stream;
} init_run_t;

/* element k of tensor P: std * rng_normal(seed, stream(P, 0), k), k global */
static void init_normal_run(void *vctx, size_t global_flat, size_t local_flat, size_t n) {
    init_run_t *r = vctx;
    float *x = r->x + local_flat;
    rng_fill_normal(x, n, r->seed, r->stream, global_flat);
    for (size_t k = 0; k < n; k++) x[k] = r->std * x[k];
}

void params_init_tp(const param_table_t *t, int tp, int tp_rank, uint64_t seed, float *data) {
    const int sizes[GRID_NAXES] = {tp, 1, 1, 1, 1}, coord[GRID_NAXES] = {tp_rank, 0, 0, 0, 0};
    for (int i = 0; i < t->count; i++) {
        const param_info_t *p = &t->info[i];
        float *x = data + p->offset;
        if (!p->held) continue;
        switch (p->init) {
        case INIT_ONES:
            for (size_t k = 0; k < p->numel; k++) x[k] = 1.0f;
            break;
        case INIT_ZEROS:
            memset(x, 0, p->numel * sizeof(float));
            break;
        case INIT_NORMAL: {
            init_run_t r = {x, p->init_std, seed, rng_stream_id(p->name, 0)};
            placement_for_runs(&p->pl, sizes, coord, init_normal_run, &r);
            break;
        }
        }
    }
}

void params_init(const param_table_t *t, uint64_t seed, float *data) {
    params_init_tp(t, 1, 0, seed, data);
}
