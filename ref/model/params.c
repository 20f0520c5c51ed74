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

static void add(param_table_t *t, const char *name, int ndim, int64_t d0, int64_t d1,
                param_init_t init, float std) {
    param_info_t *p = &t->info[t->count++];
    snprintf(p->name, sizeof p->name, "%s", name);
    p->ndim = ndim;
    p->shape[0] = d0;
    p->shape[1] = ndim == 2 ? d1 : 1;
    p->numel = (size_t)d0 * (size_t)(ndim == 2 ? d1 : 1);
    p->offset = t->total;
    p->init = init;
    p->init_std = std;
    /* Megatron's rule, shared with tests/torch: decay every 2-D weight
     * (embeddings and the LM head included), never biases or LayerNorm. */
    p->weight_decay = ndim == 2;
    t->total += p->numel;
}

int param_table_build(param_table_t *t, const model_config_t *c, perr_t *err) {
    memset(t, 0, sizeof *t);
    int n = 2 + P_PER_LAYER * c->layers + 2 + (c->tied ? 0 : 1);
    t->info = calloc((size_t)n, sizeof *t->info);
    if (!t->info) return perr_set(err, "out of memory for %d parameter tensors", n);
    const int64_t V = c->vocab, T = c->seq_length, C = c->hidden, F = c->ffn;
    /* residual-branch output projections: sigma / sqrt(2L) */
    const float out_std = SIGMA * pm_rsqrtf(2.0f * (float)c->layers);
    char nm[96];
    t->wte = t->count;
    add(t, "embedding.word_embeddings.weight", 2, V, C, INIT_NORMAL, SIGMA);
    t->wpe = t->count;
    add(t, "embedding.position_embeddings.weight", 2, T, C, INIT_NORMAL, SIGMA);
    t->first_layer = t->count;
    for (int l = 0; l < c->layers; l++) {
#define NAME(s) (snprintf(nm, sizeof nm, "layers.%d.%s", l, s), nm)
        add(t, NAME("input_layernorm.weight"), 1, C, 0, INIT_ONES, 0);
        add(t, NAME("input_layernorm.bias"), 1, C, 0, INIT_ZEROS, 0);
        add(t, NAME("self_attention.query_key_value.weight"), 2, 3 * C, C, INIT_NORMAL, SIGMA);
        add(t, NAME("self_attention.query_key_value.bias"), 1, 3 * C, 0, INIT_ZEROS, 0);
        add(t, NAME("self_attention.dense.weight"), 2, C, C, INIT_NORMAL, out_std);
        add(t, NAME("self_attention.dense.bias"), 1, C, 0, INIT_ZEROS, 0);
        add(t, NAME("post_attention_layernorm.weight"), 1, C, 0, INIT_ONES, 0);
        add(t, NAME("post_attention_layernorm.bias"), 1, C, 0, INIT_ZEROS, 0);
        add(t, NAME("mlp.dense_h_to_4h.weight"), 2, F, C, INIT_NORMAL, SIGMA);
        add(t, NAME("mlp.dense_h_to_4h.bias"), 1, F, 0, INIT_ZEROS, 0);
        add(t, NAME("mlp.dense_4h_to_h.weight"), 2, C, F, INIT_NORMAL, out_std);
        add(t, NAME("mlp.dense_4h_to_h.bias"), 1, C, 0, INIT_ZEROS, 0);
#undef NAME
    }
    t->lnf_w = t->count;
    add(t, "final_layernorm.weight", 1, C, 0, INIT_ONES, 0);
    t->lnf_b = t->count;
    add(t, "final_layernorm.bias", 1, C, 0, INIT_ZEROS, 0);
    t->out = -1;
    if (!c->tied) {
        t->out = t->count;
        add(t, "output_layer.weight", 2, V, C, INIT_NORMAL, SIGMA);
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

void params_init(const param_table_t *t, uint64_t seed, float *data) {
    for (int i = 0; i < t->count; i++) {
        const param_info_t *p = &t->info[i];
        float *x = data + p->offset;
        switch (p->init) {
        case INIT_ONES:
            for (size_t k = 0; k < p->numel; k++) x[k] = 1.0f;
            break;
        case INIT_ZEROS:
            memset(x, 0, p->numel * sizeof(float));
            break;
        case INIT_NORMAL:
            /* element k of tensor P: std * rng_normal(seed, stream(P, 0), k) */
            rng_fill_normal(x, p->numel, seed, rng_stream_id(p->name, 0), 0);
            for (size_t k = 0; k < p->numel; k++) x[k] = p->init_std * x[k];
            break;
        }
    }
}
