/* gpt.c - the GPT decoder assembled from its layers (MODEL.md).
 *
 * One microbatch is a forward pass that keeps what the backward needs,
 * then the backward pass, whose parameter gradients go into open exact
 * accumulators (one per tensor). They are rounded once, after the last
 * microbatch of the step, so the microbatch count changes no bit.
 *
 * Residual connections: x_out = x + drop(branch(x)). The gradient that
 * reaches x is d_out + d_branch, one fp32 add, the residual term first.
 */
#include "parity/model.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "parity/corpus.h"
#include "parity/layers.h"
#include "parity/pmath.h"
#include "parity/rng.h"
#include "parity/runtime.h"

/* ---- allocation --------------------------------------------------------- */

/* Hands out 64-byte aligned pieces of one block; with base == NULL it only
 * measures, so the same code sizes and carves the block. */
typedef struct {
    char *base;
    size_t used;
} carver_t;

static void *carve(carver_t *cv, size_t bytes) {
    size_t at = (cv->used + 63) & ~(size_t)63;
    cv->used = at + bytes;
    return cv->base ? cv->base + at : NULL;
}
#define CARVE_F(cv, n) ((float *)carve(cv, (size_t)(n) * sizeof(float)))
#define CARVE_U8(cv, n) ((uint8_t *)carve(cv, (size_t)(n)))

static size_t max3(size_t a, size_t b, size_t c) { return a > b ? (a > c ? a : c) : (b > c ? b : c); }

static void layout_acts(gpt_acts_t *A, const model_config_t *c, carver_t *cv) {
    const size_t mb = (size_t)c->micro_batch, T = (size_t)c->seq_length, n = mb * T;
    const size_t C = (size_t)c->hidden, H = (size_t)c->heads, F = (size_t)c->ffn;
    const size_t V = (size_t)c->vocab;
    const int hdrop = c->hidden_dropout > 0.0f, adrop = c->attention_dropout > 0.0f;
    A->inputs = (int32_t *)carve(cv, n * sizeof(int32_t));
    A->targets = (int32_t *)carve(cv, n * sizeof(int32_t));
    A->emb = CARVE_F(cv, n * C);
    A->emb_keep = hdrop ? CARVE_U8(cv, n * C) : NULL;
    for (int l = 0; l < c->layers; l++) {
        layer_acts_t *L = &A->layer[l];
        L->ln1_xhat = CARVE_F(cv, n * C);
        L->ln1_rstd = CARVE_F(cv, n);
        L->ln1_out = CARVE_F(cv, n * C);
        L->qkv = CARVE_F(cv, n * 3 * C);
        L->att_e = CARVE_F(cv, mb * H * T * T);
        L->att_ehat = adrop ? CARVE_F(cv, mb * H * T * T) : L->att_e;
        L->att_z = CARVE_F(cv, mb * H * T);
        L->att_keep = adrop ? CARVE_U8(cv, mb * H * T * T) : NULL;
        L->ctx = CARVE_F(cv, n * C);
        L->attn_out = CARVE_F(cv, n * C);
        L->attn_keep = hdrop ? CARVE_U8(cv, n * C) : NULL;
        L->resid1 = CARVE_F(cv, n * C);
        L->ln2_xhat = CARVE_F(cv, n * C);
        L->ln2_rstd = CARVE_F(cv, n);
        L->ln2_out = CARVE_F(cv, n * C);
        L->fc1_out = CARVE_F(cv, n * F);
        L->gelu_out = CARVE_F(cv, n * F);
        L->gelu_grad = CARVE_F(cv, n * F);
        L->fc2_out = CARVE_F(cv, n * C);
        L->mlp_keep = hdrop ? CARVE_U8(cv, n * C) : NULL;
        L->out = CARVE_F(cv, n * C);
    }
    A->lnf_xhat = CARVE_F(cv, n * C);
    A->lnf_rstd = CARVE_F(cv, n);
    A->lnf_out = CARVE_F(cv, n * C);
    A->logits = CARVE_F(cv, n * V);
    A->token_loss = CARVE_F(cv, n);
    A->d_resid = CARVE_F(cv, n * C);
    A->d_tmp = CARVE_F(cv, n * C);
    A->d_tmp2 = CARVE_F(cv, n * C);
    A->d_wide = CARVE_F(cv, n * max3(3 * C, F, C));
    A->d_logits = CARVE_F(cv, n * V);
    attn_shape_t s = {c->micro_batch, c->seq_length, c->hidden, c->heads, c->tile_tokens,
                      c->attention_dropout};
    A->att_scratch = CARVE_F(cv, attention_scratch_floats(&s));
    A->row_scratch = CARVE_F(cv, 2 * max3(C, V, F));
}

/* Memory of one replica: from the device's arena when there is one, so
 * it shows in the device's report by category, else from malloc. */
static void *model_alloc(arena_t *arena, size_t bytes, mem_cat_t cat, const char *name) {
    if (arena) return arena_alloc(arena, bytes ? bytes : 1, cat, name);
    return calloc(1, bytes ? bytes : 1);
}

static void model_release(arena_t *arena, void *p) {
    if (arena)
        arena_free(arena, p);
    else
        free(p);
}

/* The activation block's bytes for cfg->micro_batch sequences: layout_acts
 * measuring (it writes NULL pointers into `layers`, [cfg->layers]). */
static size_t acts_bytes(const model_config_t *cfg, layer_acts_t *layers) {
    gpt_acts_t A = {.layer = layers};
    carver_t measure = {NULL, 0};
    layout_acts(&A, cfg, &measure);
    return measure.used + 64;
}

/* What gpt_new_ex takes from its arena: one table for the allocation and
 * for the estimate (gpt_mem_bytes), so they cannot drift apart. */
static void mem_of(const model_config_t *cfg, const param_table_t *t, unsigned omit,
                   layer_acts_t *layers, gpt_mem_t *m) {
    const size_t F4 = t->total * sizeof(float);
    m->params = omit & GPT_NO_PARAMS ? 0 : F4;
    m->grads = omit & GPT_NO_GRADS ? 0 : F4;
    m->optimizer = omit & GPT_NO_OPTIMIZER ? 0 : 2 * F4; /* AdamW m and v */
    m->open_sums = 0;
    for (int i = 0; i < t->count; i++) m->open_sums += acc_storage_bytes(t->info[i].numel);
    m->activations = acts_bytes(cfg, layers);
}

int gpt_mem_bytes(const model_config_t *cfg, unsigned omit, gpt_mem_t *out, perr_t *err) {
    memset(out, 0, sizeof *out);
    param_table_t t;
    if (model_config_validate_replica(cfg, err) || param_table_build(&t, cfg, err)) return -1;
    layer_acts_t *layers = calloc((size_t)cfg->layers, sizeof *layers);
    if (!layers) {
        param_table_free(&t);
        return perr_set(err, "out of memory");
    }
    mem_of(cfg, &t, omit, layers, out);
    free(layers);
    param_table_free(&t);
    return 0;
}

int gpt_new_ex(gpt_t **out, const model_config_t *cfg, unsigned omit, arena_t *arena,
               perr_t *err) {
    *out = NULL;
    if (model_config_validate_replica(cfg, err)) return -1;
    gpt_t *g = calloc(1, sizeof *g);
    if (!g) return perr_set(err, "out of memory for the model");
    g->cfg = *cfg;
    g->arena = arena;
    if (param_table_build(&g->table, cfg, err)) {
        free(g);
        return -1;
    }
    const size_t P = g->table.total;
    const char *what = "";
    g->grad_acc = calloc((size_t)g->table.count, sizeof(acc_t));
    g->acc_storage = calloc((size_t)g->table.count, sizeof(void *));
    g->param_ptr = calloc((size_t)g->table.count, sizeof(float *));
    g->acts.layer = calloc((size_t)cfg->layers, sizeof(layer_acts_t));
    if (!g->grad_acc || !g->acc_storage || !g->param_ptr || !g->acts.layer) goto oom;
    gpt_mem_t mem;
    mem_of(cfg, &g->table, omit, g->acts.layer, &mem);
    if (mem.params && !(g->params = model_alloc(arena, mem.params, MEM_PARAMS, what = "parameters")))
        goto oom;
    if (mem.grads && !(g->grads = model_alloc(arena, mem.grads, MEM_GRADS, what = "gradients")))
        goto oom;
    if (mem.optimizer) {
        g->adam_m = model_alloc(arena, mem.optimizer / 2, MEM_OPTIMIZER, what = "AdamW m");
        g->adam_v = g->adam_m ? model_alloc(arena, mem.optimizer / 2, MEM_OPTIMIZER, what = "AdamW v")
                              : NULL;
        if (!g->adam_v) goto oom;
    }
    for (int i = 0; i < g->table.count; i++) {
        size_t n = g->table.info[i].numel;
        what = "open exact gradient sums";
        if (!(g->acc_storage[i] = model_alloc(arena, acc_storage_bytes(n), MEM_GRADS, what)))
            goto oom;
        acc_init_with(&g->grad_acc[i], n, g->acc_storage[i]);
        g->param_ptr[i] = g->params ? g->params + g->table.info[i].offset : NULL;
    }
    carver_t cv = {model_alloc(arena, mem.activations, MEM_ACTIVATIONS, what = "activations"), 0};
    if (!cv.base) goto oom;
    g->acts.block = cv.base;
    layout_acts(&g->acts, cfg, &cv);
    contract_ws_init(&g->ws);
    if (g->params && !(omit & GPT_NO_INIT)) params_init(&g->table, cfg->seed, g->params);
    sacc_init(&g->loss_acc);
    *out = g;
    return 0;
oom:
    if (arena && arena_last_error(arena)[0]) {
        perr_set(err, "model '%s': %s does not fit the device:\n%s", cfg->name, what,
                 arena_last_error(arena));
        gpt_free(g);
        return -1;
    }
    gpt_free(g);
    return perr_set(err, "out of memory for model '%s' (%zu parameters, micro_batch %d)",
                    cfg->name, P, cfg->micro_batch);
}

int gpt_new(gpt_t **out, const model_config_t *cfg, perr_t *err) {
    *out = NULL;
    if (model_config_validate(cfg, err)) return -1; /* the golden schedule's whole microbatches */
    return gpt_new_ex(out, cfg, 0, NULL, err);
}

void gpt_free(gpt_t *g) {
    if (!g) return;
    arena_t *arena = g->arena;
    if (g->grad_acc)
        for (int i = 0; i < g->table.count; i++) acc_free(&g->grad_acc[i]);
    if (g->acc_storage)
        for (int i = 0; i < g->table.count; i++) model_release(arena, g->acc_storage[i]);
    free(g->acc_storage);
    free(g->grad_acc);
    free(g->param_ptr);
    model_release(arena, g->params);
    model_release(arena, g->grads);
    model_release(arena, g->adam_m);
    model_release(arena, g->adam_v);
    model_release(arena, g->acts.block);
    free(g->acts.layer);
    contract_ws_free(&g->ws);
    param_table_free(&g->table);
    free(g);
}

/* ---- one microbatch ----------------------------------------------------- */

static float *P_(gpt_t *g, int idx) { return g->param_ptr[idx]; }
static float *PL(gpt_t *g, int l, int slot) { return P_(g, param_layer(&g->table, l, slot)); }
static acc_t *GL(gpt_t *g, int l, int slot) { return &g->grad_acc[param_layer(&g->table, l, slot)]; }

static uint64_t site_stream(const char *site, int l, int64_t step) {
    char name[96];
    if (l >= 0)
        snprintf(name, sizeof name, "layers.%d.%s", l, site);
    else
        snprintf(name, sizeof name, "%s", site);
    return rng_stream_id(name, (uint64_t)step);
}

static void unit_event(gpt_t *g, const gpt_observer_t *obs, int unit, int event) {
    if (obs && obs->unit) obs->unit(obs->ctx, g, unit, event);
}

/* Report a [n_seq, rest...] tensor to the observer. */
static void observe(const gpt_observer_t *obs, const char *name, st_dtype_t dt, const void *data,
                    int first_seq, int n_seq, int ndim, int64_t d0, int64_t d1, int64_t d2) {
    if (!obs || !obs->batch_tensor) return;
    int64_t shape[3] = {d0, d1, d2};
    obs->batch_tensor(obs->ctx, name, dt, data, first_seq, n_seq, ndim, shape);
}

static void observe_layer(const gpt_observer_t *obs, const char *what, int l, const float *data,
                          int first_seq, int n_seq, int64_t T, int64_t width) {
    if (!obs || !obs->batch_tensor) return;
    char name[128];
    snprintf(name, sizeof name, "act.layers.%d.%s", l, what);
    observe(obs, name, ST_F32, data, first_seq, n_seq, 2, T, width, 0);
}

/* x_out = x + drop(y): the dropout site's mask for sequences first_seq.. */
static void residual_dropout(float *x_out, const float *x, const float *y, uint8_t *keep,
                             size_t count, float p, uint64_t seed, uint64_t stream,
                             uint64_t first_index) {
    if (keep) {
        dropout_mask(keep, count, seed, stream, first_index, p);
        dropout_forward(x_out, y, keep, count, p);
        for (size_t i = 0; i < count; i++) x_out[i] = x[i] + x_out[i];
    } else {
        for (size_t i = 0; i < count; i++) x_out[i] = x[i] + y[i];
    }
}

void gpt_step_begin(gpt_t *g) {
    for (int i = 0; i < g->table.count; i++) acc_zero(&g->grad_acc[i]);
    sacc_init(&g->loss_acc);
}

void gpt_microbatch(gpt_t *g, const int32_t *inputs, const int32_t *targets, int n_seq,
                    int first_seq, int64_t step, const gpt_observer_t *obs) {
    const model_config_t *c = &g->cfg;
    const int T = c->seq_length, C = c->hidden, F = c->ffn, V = c->vocab, L = c->layers;
    const int n = n_seq * T;
    const float ph = c->hidden_dropout, eps = c->ln_eps;
    const uint64_t seed = c->seed;
    const uint64_t first_tok = (uint64_t)first_seq * (uint64_t)T; /* global flat index base */
    const size_t nC = (size_t)n * C;
    const linear_tiles_t t_cc = {c->tile_tokens, c->tile_features, c->tile_features};
    const linear_tiles_t t_cf = {c->tile_tokens, c->tile_features, c->tile_ffn};
    const linear_tiles_t t_fc = {c->tile_tokens, c->tile_ffn, c->tile_features};
    const attn_shape_t as = {n_seq, T, C, c->heads, c->tile_tokens, c->attention_dropout};
    gpt_acts_t *A = &g->acts;
    contract_ws_t *ws = &g->ws;
    float *scratch = A->row_scratch;
    if (n_seq <= 0 || n_seq > c->micro_batch || first_seq < 0 ||
        first_seq + n_seq > c->global_batch)
        parity_fatal("gpt_microbatch: sequences %d..%d do not fit micro_batch %d / batch %d",
                     first_seq, first_seq + n_seq - 1, c->micro_batch, c->global_batch);
    for (int i = 0; i < n; i++)
        if (inputs[i] < 0 || inputs[i] >= V || targets[i] < 0 || targets[i] >= V)
            parity_fatal("gpt_microbatch: token %d outside the vocabulary [0, %d)", i, V);
    if (A->inputs != inputs) memcpy(A->inputs, inputs, (size_t)n * sizeof(int32_t));
    if (A->targets != targets) memcpy(A->targets, targets, (size_t)n * sizeof(int32_t));
    observe(obs, "input_ids", ST_I32, A->inputs, first_seq, n_seq, 1, T, 0, 0);
    observe(obs, "labels", ST_I32, A->targets, first_seq, n_seq, 1, T, 0, 0);

    /* ---- forward ---- */
    unit_event(g, obs, 0, GPT_FWD_BEGIN);
    embedding_forward(A->emb, A->inputs, n_seq, T, C, P_(g, g->table.wte), P_(g, g->table.wpe));
    if (A->emb_keep) {
        dropout_mask(A->emb_keep, nC, seed, site_stream("dropout.embedding", -1, step),
                     first_tok * C, ph);
        dropout_forward(A->emb, A->emb, A->emb_keep, nC, ph);
        observe(obs, "mask.dropout.embedding", ST_U8, A->emb_keep, first_seq, n_seq, 2, T, C, 0);
    }
    observe(obs, "act.embedding.output", ST_F32, A->emb, first_seq, n_seq, 2, T, C, 0);
    unit_event(g, obs, 0, GPT_FWD_END);
    const float *x = A->emb;
    for (int l = 0; l < L; l++) {
        layer_acts_t *LA = &A->layer[l];
        unit_event(g, obs, l + 1, GPT_FWD_BEGIN);
        layernorm_forward(LA->ln1_out, LA->ln1_xhat, LA->ln1_rstd, x, PL(g, l, P_LN1_W),
                          PL(g, l, P_LN1_B), n, C, eps, scratch);
        linear_forward(LA->qkv, LA->ln1_out, PL(g, l, P_QKV_W), PL(g, l, P_QKV_B), n, C, 3 * C,
                       t_cc, ws);
        if (LA->att_keep) {
            attention_mask(LA->att_keep, &as, first_seq, seed,
                           site_stream("attention_dropout", l, step));
            char nm[96];
            snprintf(nm, sizeof nm, "mask.layers.%d.attention_dropout", l);
            observe(obs, nm, ST_U8, LA->att_keep, first_seq, n_seq, 3, c->heads, T, T);
        }
        attention_forward(LA->ctx, LA->att_e, LA->att_ehat, LA->att_z, LA->qkv, LA->att_keep, &as,
                          ws);
        linear_forward(LA->attn_out, LA->ctx, PL(g, l, P_DENSE_W), PL(g, l, P_DENSE_B), n, C, C,
                       t_cc, ws);
        residual_dropout(LA->resid1, x, LA->attn_out, LA->attn_keep, nC, ph, seed,
                         site_stream("attention_output_dropout", l, step), first_tok * C);
        layernorm_forward(LA->ln2_out, LA->ln2_xhat, LA->ln2_rstd, LA->resid1, PL(g, l, P_LN2_W),
                          PL(g, l, P_LN2_B), n, C, eps, scratch);
        linear_forward(LA->fc1_out, LA->ln2_out, PL(g, l, P_FC1_W), PL(g, l, P_FC1_B), n, C, F,
                       t_cf, ws);
        gelu_forward(LA->gelu_out, LA->gelu_grad, LA->fc1_out, (size_t)n * F);
        linear_forward(LA->fc2_out, LA->gelu_out, PL(g, l, P_FC2_W), PL(g, l, P_FC2_B), n, F, C,
                       t_fc, ws);
        residual_dropout(LA->out, LA->resid1, LA->fc2_out, LA->mlp_keep, nC, ph, seed,
                         site_stream("mlp_output_dropout", l, step), first_tok * C);
        x = LA->out;
        unit_event(g, obs, l + 1, GPT_FWD_END);
        if (obs && obs->batch_tensor) {
            char nm[96];
            if (LA->attn_keep) {
                snprintf(nm, sizeof nm, "mask.layers.%d.attention_output_dropout", l);
                observe(obs, nm, ST_U8, LA->attn_keep, first_seq, n_seq, 2, T, C, 0);
                snprintf(nm, sizeof nm, "mask.layers.%d.mlp_output_dropout", l);
                observe(obs, nm, ST_U8, LA->mlp_keep, first_seq, n_seq, 2, T, C, 0);
            }
            observe_layer(obs, "input_layernorm.output", l, LA->ln1_out, first_seq, n_seq, T, C);
            observe_layer(obs, "self_attention.query_key_value.output", l, LA->qkv, first_seq,
                          n_seq, T, 3 * C);
            observe_layer(obs, "self_attention.core_attention.output", l, LA->ctx, first_seq,
                          n_seq, T, C);
            observe_layer(obs, "self_attention.dense.output", l, LA->attn_out, first_seq, n_seq,
                          T, C);
            observe_layer(obs, "post_attention_layernorm.output", l, LA->ln2_out, first_seq,
                          n_seq, T, C);
            observe_layer(obs, "mlp.dense_h_to_4h.output", l, LA->fc1_out, first_seq, n_seq, T, F);
            observe_layer(obs, "mlp.dense_4h_to_h.output", l, LA->fc2_out, first_seq, n_seq, T, C);
            observe_layer(obs, "output", l, LA->out, first_seq, n_seq, T, C);
        }
    }
    unit_event(g, obs, L + 1, GPT_FWD_BEGIN);
    const float *w_head = P_(g, c->tied ? g->table.wte : g->table.out);
    layernorm_forward(A->lnf_out, A->lnf_xhat, A->lnf_rstd, x, P_(g, g->table.lnf_w),
                      P_(g, g->table.lnf_b), n, C, eps, scratch);
    observe(obs, "act.final_layernorm.output", ST_F32, A->lnf_out, first_seq, n_seq, 2, T, C, 0);
    linear_forward(A->logits, A->lnf_out, w_head, NULL, n, C, V, t_cc, ws);
    observe(obs, "logits", ST_F32, A->logits, first_seq, n_seq, 2, T, V, 0);
    crossentropy_forward(A->token_loss, A->logits, A->targets, n, V, scratch);
    sacc_add(&g->loss_acc, A->token_loss, (size_t)n);
    unit_event(g, obs, L + 1, GPT_FWD_END);

    /* ---- backward ---- */
    unit_event(g, obs, L + 1, GPT_BWD_BEGIN);
    w_head = P_(g, c->tied ? g->table.wte : g->table.out);
    const int64_t total_tokens = (int64_t)c->global_batch * T;
    crossentropy_backward(A->d_logits, A->logits, A->targets, n, V, total_tokens, scratch);
    acc_t *g_head = &g->grad_acc[c->tied ? g->table.wte : g->table.out];
    linear_backward(A->d_tmp, g_head, NULL, A->d_logits, A->lnf_out, w_head, n, C, V, t_cc, ws);
    layernorm_backward(A->d_resid, &g->grad_acc[g->table.lnf_w], &g->grad_acc[g->table.lnf_b],
                       A->d_tmp, A->lnf_xhat, A->lnf_rstd, P_(g, g->table.lnf_w), n, C, scratch);
    unit_event(g, obs, L + 1, GPT_BWD_END);
    float *d_res = A->d_resid, *d_a = A->d_tmp, *d_b = A->d_tmp2, *d_w = A->d_wide;
    for (int l = L - 1; l >= 0; l--) {
        layer_acts_t *LA = &A->layer[l];
        unit_event(g, obs, l + 1, GPT_BWD_BEGIN);
        /* out = resid1 + drop(fc2_out) */
        if (LA->mlp_keep) dropout_backward(d_a, d_res, LA->mlp_keep, nC, ph);
        const float *d_fc2 = LA->mlp_keep ? d_a : d_res;
        linear_backward(d_w, GL(g, l, P_FC2_W), GL(g, l, P_FC2_B), d_fc2, LA->gelu_out,
                        PL(g, l, P_FC2_W), n, F, C, t_fc, ws);
        gelu_backward(d_w, d_w, LA->gelu_grad, (size_t)n * F);
        linear_backward(d_b, GL(g, l, P_FC1_W), GL(g, l, P_FC1_B), d_w, LA->ln2_out,
                        PL(g, l, P_FC1_W), n, C, F, t_cf, ws);
        layernorm_backward(d_a, GL(g, l, P_LN2_W), GL(g, l, P_LN2_B), d_b, LA->ln2_xhat,
                           LA->ln2_rstd, PL(g, l, P_LN2_W), n, C, scratch);
        for (size_t i = 0; i < nC; i++) d_res[i] = d_res[i] + d_a[i];
        /* resid1 = x_in + drop(attn_out) */
        if (LA->attn_keep) dropout_backward(d_a, d_res, LA->attn_keep, nC, ph);
        const float *d_dense = LA->attn_keep ? d_a : d_res;
        linear_backward(d_b, GL(g, l, P_DENSE_W), GL(g, l, P_DENSE_B), d_dense, LA->ctx,
                        PL(g, l, P_DENSE_W), n, C, C, t_cc, ws);
        attention_backward(d_w, d_b, LA->ctx, LA->att_e, LA->att_ehat, LA->att_z, LA->qkv,
                           LA->att_keep, &as, A->att_scratch, ws);
        linear_backward(d_a, GL(g, l, P_QKV_W), GL(g, l, P_QKV_B), d_w, LA->ln1_out,
                        PL(g, l, P_QKV_W), n, C, 3 * C, t_cc, ws);
        layernorm_backward(d_b, GL(g, l, P_LN1_W), GL(g, l, P_LN1_B), d_a, LA->ln1_xhat,
                           LA->ln1_rstd, PL(g, l, P_LN1_W), n, C, scratch);
        for (size_t i = 0; i < nC; i++) d_res[i] = d_res[i] + d_b[i];
        unit_event(g, obs, l + 1, GPT_BWD_END);
    }
    unit_event(g, obs, 0, GPT_BWD_BEGIN);
    if (A->emb_keep) dropout_backward(d_a, d_res, A->emb_keep, nC, ph);
    embedding_backward(&g->grad_acc[g->table.wte], &g->grad_acc[g->table.wpe],
                       A->emb_keep ? d_a : d_res, A->inputs, n_seq, T, C);
    unit_event(g, obs, 0, GPT_BWD_END);
}

/* ---- end of step -------------------------------------------------------- */

float mean_token_loss(const model_config_t *c, float loss_sum) {
    return loss_sum / (float)((int64_t)c->global_batch * c->seq_length);
}

float gpt_step_loss(const gpt_t *g) { return mean_token_loss(&g->cfg, sacc_round(&g->loss_acc)); }

float gpt_step_round_grads(gpt_t *g) {
    sacc_t n2;
    sacc_init(&n2);
    for (int i = 0; i < g->table.count; i++) {
        const param_info_t *p = &g->table.info[i];
        acc_round(&g->grad_acc[i], g->grads + p->offset);
        sacc_add_squares(&n2, g->grads + p->offset, p->numel);
    }
    return pm_sqrtf(sacc_round(&n2));
}

float clip_factor(const model_config_t *c, float grad_norm) {
    if (c->clip_grad > 0.0f && grad_norm > c->clip_grad) return c->clip_grad / (grad_norm + 1e-6f);
    return 1.0f;
}

void gpt_step_update(gpt_t *g, float lr, float grad_norm) {
    const model_config_t *c = &g->cfg;
    const float factor = clip_factor(c, grad_norm);
    if (factor != 1.0f)
        for (size_t i = 0; i < g->table.total; i++) g->grads[i] = g->grads[i] * factor;
    g->adam_t++;
    for (int i = 0; i < g->table.count; i++) {
        const param_info_t *p = &g->table.info[i];
        adamw_update(g->params + p->offset, g->grads + p->offset, g->adam_m + p->offset,
                     g->adam_v + p->offset, p->numel, g->adam_t, lr, c->beta1, c->beta2, c->eps,
                     p->weight_decay ? c->weight_decay : 0.0f);
    }
}

void gpt_train_step(gpt_t *g, const corpus_t *data, int64_t step, const gpt_observer_t *obs,
                    gpt_step_stats_t *stats) {
    const model_config_t *c = &g->cfg;
    const int B = c->global_batch, mb = c->micro_batch, T = c->seq_length;
    gpt_step_begin(g);
    for (int first = 0; first < B; first += mb) {
        for (int b = 0; b < mb; b++)
            corpus_sample(data, (uint64_t)step * (uint64_t)B + (uint64_t)(first + b), T,
                          g->acts.inputs + (size_t)b * T, g->acts.targets + (size_t)b * T);
        gpt_microbatch(g, g->acts.inputs, g->acts.targets, mb, first, step, obs);
    }
    stats->loss = gpt_step_loss(g);
    stats->lr = lr_schedule(c, step);
    stats->grad_norm = gpt_step_round_grads(g);
    if (obs && obs->grads_ready) obs->grads_ready(obs->ctx, g);
    gpt_step_update(g, stats->lr, stats->grad_norm);
}
