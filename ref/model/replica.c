/* replica.c - one replica's construction and memory (gpt.c runs its step).
 *
 * A replica's memory is a few blocks, each laid out by code that measures
 * when the carver has no base and carves when it has one, so the estimate
 * (gpt_mem_of, gpt_mem_bytes*) and the allocation cannot drift apart:
 * the parameters, gradients and optimizer state; the open exact sums; the
 * backward scratch (layout_scratch, with each style's private part); the
 * activation slots (layout_slot: what each unit's kind keeps, for every
 * unit held or one pipeline chunk).
 */
#include "model/gpt.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "parity/corpus.h"
#include "parity/layers.h"
#include "parity/pmath.h"
#include "parity/runtime.h"
#include "model/units/moe.h"
#include "model/units/unit_layer.h"
#include "model/units/units_internal.h"
#include "model/styles/style.h"
#include "model/styles/tp.h"
#include "model/styles/tp2d.h"

/* ---- allocation --------------------------------------------------------- */

/* Hands out 64-byte aligned pieces of one block; with base == NULL it only
 * measures, so the same code sizes and carves the block. */
void *carve(carver_t *cv, size_t bytes) {
    size_t at = (cv->used + 63) & ~(size_t)63;
    cv->used = at + bytes;
    return cv->base ? cv->base + at : NULL;
}

static size_t max3(size_t a, size_t b, size_t c) { return a > b ? (a > c ? a : c) : (b > c ? b : c); }

/* Which units a slot keeps activations for: every unit the replica
 * holds, or one chunk of a pipeline stage's. */
typedef struct {
    const gpt_units_t *units;
    int chunk; /* -1: all */
} slot_units_t;

static int slot_has(const slot_units_t *su, int unit) {
    if (su->chunk < 0) return gpt_units_hold(su->units, unit);
    return unit >= su->units->lo[su->chunk] && unit < su->units->hi[su->chunk];
}

/* A slot holds this replica's share of the tensor-parallel axes (lc):
 * its heads, attention width, FFN columns and vocabulary rows; and of the
 * pipeline's units (su): a unit's activations, plus the residual stream
 * entering the slot's first unit where another stage sends it. */
/* The sequences a slot holds at most: a microbatch, or 2-D / 3-D's block
 * of it (pconfig refuses a microbatch that is no whole number of blocks). */
static int slot_sequences(const model_config_t *c, const gpt_local_t *lc) {
    const int b = lc->t2blocks > 1 ? lc->t2blocks : 1;
    return (c->micro_batch + b - 1) / b;
}

/* A slot's dimensions (units_internal.h's slot_dims_t). */
static slot_dims_t slot_dims_of(const model_config_t *c, const gpt_local_t *lc) {
    /* context parallelism: Tc positions of each sequence, attending to all T */
    slot_dims_t d;
    /* the 2-D modes: the rank's block of the microbatch's sequences */
    d.mb = (size_t)slot_sequences(c, lc), d.T = (size_t)c->seq_length;
    d.Tc = (size_t)lc->seq_held, d.n = d.mb * d.Tc;
    d.ns = d.n / (size_t)lc->seq_parts; /* the sharded regions' tokens */
    d.C = (size_t)lc->hid, d.H = (size_t)lc->heads, d.A = (size_t)lc->attn;
    d.F = (size_t)lc->ffn, d.V = (size_t)lc->vocab;
    d.hdrop = c->hidden_dropout > 0.0f, d.adrop = c->attention_dropout > 0.0f;
    d.sp = lc->seq_parts > 1;
    gpt_styles_t st; /* the styles layout_scratch chooses too */
    styles_choose(&st, c, lc);
    d.attention = st.style[STYLE_ATTENTION];
    d.core_shared = lc->recompute == MODEL_RECOMPUTE_SELECTIVE;
    d.E = (size_t)c->moe_experts, d.K = (size_t)c->moe_topk;
    d.R = c->moe_experts > 0 ? moe_rows(c, d.mb) : 0;
    d.cp = (size_t)lc->cp;
    d.ep = (size_t)lc->ep;
    d.Fe = (size_t)lc->expert_ffn;
    d.patch = (size_t)c->patch_dim;
    return d;
}

/* Which activations unit u keeps in a slot (gpt_recompute_chunk):
 * full recomputation keeps a chunk's last output (the next unit's input)
 * and nothing else; a chunk's other layers keep theirs in the scratch's
 * sets. */
static void layout_slot(gpt_slot_t *A, const model_config_t *c, const gpt_local_t *lc,
                        const slot_units_t *su, carver_t *cv) {
    const slot_dims_t d = slot_dims_of(c, lc);
    /* whole sequences arrive; gpt_slot_begin keeps the positions held */
    A->inputs = (int32_t *)carve(cv, d.mb * d.T * sizeof(int32_t));
    A->targets = (int32_t *)carve(cv, d.mb * d.T * sizeof(int32_t));
    /* each unit's activations, as its kind lays them out */
    const int U = model_num_units(c);
    for (int u = 0; u < U; u++) {
        const unit_t unit = model_unit_at(c, u);
        const int held = slot_has(su, u), next = u + 1 < U && slot_has(su, u + 1);
        int first, last;
        if (held && gpt_recompute_chunk(c, su->units, u, &first, &last))
            unit.kind->layout(A, unit_acts(&unit), &d, 0, u == last, cv);
        else
            unit.kind->layout(A, unit_acts(&unit), &d, held, next, cv);
    }
    A->d_resid = CARVE_F(cv, d.ns * d.C);
}

static void layout_scratch(gpt_scratch_t *S, gpt_styles_t *st, const model_config_t *c,
                           const gpt_local_t *lc, int tp, const gpt_units_t *units, carver_t *cv) {
    const size_t n = (size_t)slot_sequences(c, lc) * (size_t)lc->seq_held;
    const size_t C = (size_t)c->hidden, F = (size_t)lc->ffn, V = (size_t)lc->vocab;
    const int sp = lc->seq_parts > 1;
    S->d_tmp = CARVE_F(cv, n * C);
    S->d_tmp2 = CARVE_F(cv, n * C);
    S->d_wide = CARVE_F(cv, n * max3(3 * (size_t)lc->attn, F, C));
    attn_shape_t s = {c->micro_batch, c->seq_length, lc->attn, lc->heads, c->tile_tokens,
                      c->attention_dropout, c->heads, lc->head0, NULL, ATTN_CAUSAL, 0};
    S->att_scratch = CARVE_F(cv, attention_scratch_floats(&s));
    S->row_scratch = CARVE_F(cv, 2 * max3(C, V, F));
    tp_layout_scratch(S, c, lc, n, tp, cv);
    /* a gathered gradient; an encoder-decoder's cross-attention keeps its
     * source rows' gradient there */
    S->d_tmp3 = sp || c->arch != MODEL_GPT ? CARVE_F(cv, n * C) : NULL;
    moe_layout_scratch(&S->moe, c, lc, cv);
    tp2d_layout_scratch(S, c, lc, n, cv);
    /* recomputation: full, a chunk's layers' activations (every chunk in
     * turn); selective, one attention core (every block in turn) */
    const slot_dims_t d = slot_dims_of(c, lc);
    const int sets = recompute_sets(c, units);
    S->recompute = sets ? (layer_acts_t *)carve(cv, (size_t)sets * sizeof(layer_acts_t)) : NULL;
    recompute_layout(S->recompute, c, units, &d, cv);
    memset(S->recompute_core, 0, sizeof S->recompute_core);
    for (int k = 0; k < 1 + (c->arch == MODEL_T5); k++) /* T5's decoder: a cross-attention too */
        if (lc->recompute == MODEL_RECOMPUTE_SELECTIVE) layer_core_layout(&S->recompute_core[k], &d, cv);
    styles_choose(st, c, lc);
    styles_layout_scratch(st, c, lc, n, cv);
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

/* The bytes of one activation slot and of the backward scratch for
 * cfg->micro_batch sequences: the layouts measuring themselves. */
static size_t slot_bytes(const model_config_t *cfg, const gpt_local_t *lc, const slot_units_t *su) {
    layer_acts_t *layers = calloc((size_t)model_num_units(cfg), sizeof *layers);
    if (!layers) parity_fatal("out of memory measuring an activation slot");
    gpt_slot_t A = {.layer = layers};
    carver_t measure = {NULL, 0};
    layout_slot(&A, cfg, lc, su, &measure);
    free(layers);
    return measure.used + 64;
}

static size_t scratch_bytes(const model_config_t *cfg, const gpt_local_t *lc, int tp,
                            const gpt_units_t *units) {
    gpt_scratch_t S;
    gpt_styles_t st;
    carver_t measure = {NULL, 0};
    layout_scratch(&S, &st, cfg, lc, tp, units, &measure);
    return measure.used + 64;
}

/* The bytes of a slot that can hold any one chunk of `units` (every unit
 * held when there are no chunks): the largest chunk's. */
static size_t stage_slot_bytes(const model_config_t *cfg, const gpt_local_t *lc,
                               const gpt_units_t *units) {
    const slot_units_t all = {units, -1};
    size_t most = units->n ? 0 : slot_bytes(cfg, lc, &all);
    for (int c = 0; c < units->n; c++) {
        const slot_units_t one = {units, c};
        const size_t b = slot_bytes(cfg, lc, &one);
        if (b > most) most = b;
    }
    return most;
}


/* GPT_UNIT_OPEN_SUMS: where each tensor's open sums lie in the pool (with
 * storage NULL only measured). First the tensors two units write, each
 * its own; then one region that each unit's other tensors reuse in turn,
 * as long as the largest unit's. Returns the pool's bytes. */
static size_t pool_layout(const param_table_t *t, char *pool, void **storage) {
    carver_t cv = {pool, 0};
    for (int i = 0; i < t->count; i++)
        if (t->shared_unit[i] >= 0) {
            void *at = carve(&cv, acc_storage_bytes(t->info[i].numel));
            if (storage) storage[i] = at;
        }
    const size_t turns = cv.used;
    size_t most = turns;
    for (int u = 0; u < t->n_units; u++) {
        cv.used = turns;
        for (int i = t->unit_first[u]; i < t->unit_first[u + 1]; i++)
            if (t->shared_unit[i] < 0) {
                void *at = carve(&cv, acc_storage_bytes(t->info[i].numel));
                if (storage) storage[i] = at;
            }
        if (cv.used > most) most = cv.used;
    }
    return most;
}

/* AdamW's m and v: fp32, or adamw8bit's codes (a byte an element) and
 * each block's absmax. */
static size_t adam_state_bytes(const model_config_t *cfg, const param_table_t *t) {
    if (cfg->optimizer != MODEL_OPT_ADAMW8BIT) return 2 * t->total * sizeof(float);
    return 2 * t->total + 2 * adam8_table_blocks(t, cfg->optimizer_block) * sizeof(float);
}

/* What gpt_new_tp takes from its arena: one table for the allocation and
 * for the estimate (gpt_mem_bytes), so they cannot drift apart. One
 * activation slot of every unit held, or n_slots of the largest chunk. */
void gpt_mem_of(const model_config_t *cfg, const param_table_t *t, unsigned omit,
                const gpt_local_t *lc, int tp, const gpt_units_t *units, int n_slots,
                gpt_mem_t *m) {
    const size_t F4 = t->total * sizeof(float);
    /* mixed precision: the master weights and their compute copy */
    m->params = omit & GPT_NO_PARAMS ? 0 : F4 * (cfg->precision != MODEL_FP32 ? 2 : 1);
    m->grads = omit & GPT_NO_GRADS ? 0 : F4;
    m->optimizer = omit & GPT_NO_OPTIMIZER ? 0 : adam_state_bytes(cfg, t);
    m->open_sums = 0;
    if (omit & GPT_UNIT_OPEN_SUMS)
        m->open_sums = pool_layout(t, NULL, NULL);
    else if (omit & GPT_GRADS_IN_SUMS) /* grads: the block's first half */
        m->open_sums = acc_storage_bytes(t->total) - m->grads;
    else
        for (int i = 0; i < t->count; i++) m->open_sums += acc_storage_bytes(t->info[i].numel);
    const slot_units_t all = {units, -1};
    m->activations = scratch_bytes(cfg, lc, tp, units) +
                     (n_slots ? (size_t)n_slots * stage_slot_bytes(cfg, lc, units)
                              : slot_bytes(cfg, lc, &all));
}

/* ---- a replica: its construction, in phases ------------------------------
 * gpt_new_tp checks the shard, computes its extents and parameter table,
 * takes the state's memory (parameters, gradients, the optimizer's), lays
 * out the open sums, carves the scratch and one slot, then initializes.
 * The allocations come in this order, each named for the arena's report
 * and the out-of-memory message (`what`). */

/* The shard's groups: each split axis needs the group it completes with. */
static int check_shard(const model_config_t *cfg, const gpt_shard_t *shard, perr_t *err) {
    if (model_config_validate_replica(cfg, err)) return -1;
    return gpt_shard_check_groups(shard, err);
}

/* The extents of the shard and its parameter table (off a grid: tp's
 * rank 0's blocks). */
static int replica_extents(gpt_t *g, const gpt_shard_t *shard, perr_t *err) {
    const model_config_t *cfg = &g->cfg;
    const gpt_layout_opts_t lo = gpt_shard_layout(shard);
    const param_grid_t tp_alone = param_grid_tp(shard->tp, 0, lo);
    if (gpt_local_dims(cfg, shard->tp, shard->tp_rank, shard->cp_rank, lo, &g->local, err) ||
        param_table_build_at(&g->table, cfg, shard->on_grid ? shard->grid_sizes : tp_alone.sizes,
                             shard->on_grid ? shard->grid_coord : tp_alone.coord, &shard->units, lo,
                             err))
        return -1;
    gpt_local_place(cfg, shard, &g->local);
    return 0;
}

/* The parameters (and their compute copy), the gradients (alone or inside
 * their open sums) and AdamW's state, as `mem` sizes them. */
static int alloc_state(gpt_t *g, const gpt_mem_t *mem, const char **what) {
    const model_config_t *cfg = &g->cfg;
    arena_t *arena = g->arena;
    const size_t master = mem->params / (cfg->precision != MODEL_FP32 ? 2 : 1);
    if (mem->params && !(g->params = model_alloc(arena, master, MEM_PARAMS, *what = "parameters")))
        return -1;
    if (mem->params && cfg->precision != MODEL_FP32 &&
        !(g->params_lp = model_alloc(arena, master, MEM_PARAMS,
                                     *what = "the parameters' compute copy (mixed precision)")))
        return -1;
    if (g->sums_mode == GPT_GRADS_IN_SUMS) {
        if (!(g->acc_pool = model_alloc(arena, mem->grads + mem->open_sums, MEM_GRADS,
                                        *what = "gradients inside their open exact sums")))
            return -1;
        g->grads = g->acc_pool;
    } else if (mem->grads &&
               !(g->grads = model_alloc(arena, mem->grads, MEM_GRADS, *what = "gradients")))
        return -1;
    if (mem->optimizer && cfg->optimizer == MODEL_OPT_ADAMW8BIT) {
        const size_t n = g->table.total,
                     nb = adam8_table_blocks(&g->table, cfg->optimizer_block) * sizeof(float);
        if (!(g->adam8_m = model_alloc(arena, n, MEM_OPTIMIZER, *what = "AdamW m codes (8-bit)")) ||
            !(g->adam8_v = model_alloc(arena, n, MEM_OPTIMIZER, *what = "AdamW v codes (8-bit)")) ||
            !(g->adam8_am = model_alloc(arena, nb, MEM_OPTIMIZER, *what = "AdamW m block absmax")) ||
            !(g->adam8_av = model_alloc(arena, nb, MEM_OPTIMIZER, *what = "AdamW v block absmax")))
            return -1;
    } else if (mem->optimizer) {
        g->adam_m = model_alloc(arena, mem->optimizer / 2, MEM_OPTIMIZER, *what = "AdamW m");
        g->adam_v = g->adam_m ? model_alloc(arena, mem->optimizer / 2, MEM_OPTIMIZER, *what = "AdamW v")
                              : NULL;
        if (!g->adam_v) return -1;
    }
    return 0;
}

/* Each tensor's open exact sums: inside the gradients' block
 * (GPT_GRADS_IN_SUMS), in the pool one unit's reuse in turn
 * (GPT_UNIT_OPEN_SUMS), or one allocation each; and where the units
 * read its values (the compute copy under mixed precision). */
static int open_sums(gpt_t *g, const gpt_mem_t *mem, const char **what) {
    void **at = g->acc_storage;
    if (g->sums_mode == GPT_GRADS_IN_SUMS) { /* tensor i's sums from element offset_i of the block */
        if (!(at = calloc((size_t)g->table.count, sizeof(void *)))) return -1;
        for (int i = 0; i < g->table.count; i++)
            at[i] = (double *)g->acc_pool + g->table.info[i].offset;
    } else if (g->sums_mode == GPT_UNIT_OPEN_SUMS) {
        if (!(g->acc_pool = model_alloc(g->arena, mem->open_sums, MEM_GRADS,
                                        *what = "open exact gradient sums (one unit's at a time)")) ||
            !(at = calloc((size_t)g->table.count, sizeof(void *))))
            return -1;
        pool_layout(&g->table, g->acc_pool, at);
    }
    for (int i = 0; i < g->table.count; i++) {
        size_t n = g->table.info[i].numel;
        *what = "open exact gradient sums";
        if (!g->acc_pool && /* one each: `at` is g->acc_storage */
            !(at[i] = model_alloc(g->arena, acc_storage_bytes(n), MEM_GRADS, *what)))
            return -1;
        acc_init_with(&g->grad_acc[i], n, at[i]);
        float *read = g->params_lp ? g->params_lp : g->params;
        g->param_ptr[i] = read ? read + g->table.info[i].offset : NULL;
    }
    if (at != g->acc_storage) free(at);
    return 0;
}

/* The backward scratch (with the styles' private parts), one activation
 * slot of every unit held, and the contractions' workspace. */
static int alloc_activations(gpt_t *g, const char **what) {
    const gpt_shard_t *shard = &g->shard;
    carver_t cv = {model_alloc(g->arena, scratch_bytes(&g->cfg, &g->local, shard->tp, &shard->units),
                               MEM_ACTIVATIONS, *what = "activations"),
                   0};
    if (!cv.base) return -1;
    g->scratch.block = cv.base;
    layout_scratch(&g->scratch, &g->styles, &g->cfg, &g->local, shard->tp, &shard->units, &cv);
    if (gpt_set_slots(g, 1, NULL)) return -1;
    contract_ws_init(&g->ws);
    return 0;
}

/* The parameters' values (unless omitted), the loss scaler and sums, and
 * an MoE's routing counts (bookkeeping, outside the arena). */
static int init_replica(gpt_t *g, unsigned omit) {
    const model_config_t *cfg = &g->cfg;
    const gpt_shard_t *shard = &g->shard;
    if (g->params && !(omit & GPT_NO_INIT)) {
        if (shard->on_grid)
            params_init_at(&g->table, shard->grid_sizes, shard->grid_coord, cfg->seed, g->params);
        else
            params_init_tp(&g->table, shard->tp, shard->tp_rank, cfg->seed, g->params);
        gpt_params_refresh(g);
    }
    loss_scaler_init(&g->scaler, cfg);
    sacc_init(&g->loss_acc);
    if (cfg->moe_experts > 0) {
        const size_t cells = (size_t)cfg->layers * (size_t)cfg->moe_experts;
        g->moe.routed = calloc(cells, sizeof *g->moe.routed);
        g->moe.dropped = calloc(cells, sizeof *g->moe.dropped);
        if (!g->moe.routed || !g->moe.dropped) return -1;
    }
    xacc_init(&g->moe.aux);
    xacc_init(&g->moe.z);
    return 0;
}

/* A replica that does not fit: what did not (the arena's report where
 * there is one), then everything taken so far given back. */
static int replica_oom(gpt_t *g, const char *what, size_t P, perr_t *err) {
    arena_t *arena = g->arena;
    if (arena && arena_last_error(arena)[0]) {
        perr_set(err, "model '%s': %s does not fit the device:\n%s", g->cfg.name, what,
                 arena_last_error(arena));
        gpt_free(g);
        return -1;
    }
    perr_set(err, "out of memory for model '%s' (%zu parameters, micro_batch %d)", g->cfg.name,
             P, g->cfg.micro_batch);
    gpt_free(g);
    return -1;
}

int gpt_new_ex(gpt_t **out, const model_config_t *cfg, unsigned omit, arena_t *arena,
               perr_t *err) {
    const gpt_shard_t whole = gpt_shard_none();
    return gpt_new_tp(out, cfg, &whole, omit, arena, err);
}

int gpt_new_tp(gpt_t **out, const model_config_t *cfg, const gpt_shard_t *shard, unsigned omit,
               arena_t *arena, perr_t *err) {
    *out = NULL;
    if (check_shard(cfg, shard, err)) return -1;
    gpt_t *g = calloc(1, sizeof *g);
    if (!g) return perr_set(err, "out of memory for the model");
    g->cfg = *cfg;
    g->shard = *shard;
    g->arena = arena;
    if (replica_extents(g, shard, err)) {
        free(g);
        return -1;
    }
    const size_t P = g->table.total;
    const char *what = "";
    const unsigned mode = omit & (GPT_UNIT_OPEN_SUMS | GPT_GRADS_IN_SUMS);
    if (mode && ((omit & GPT_NO_GRADS) || mode == (GPT_UNIT_OPEN_SUMS | GPT_GRADS_IN_SUMS))) {
        param_table_free(&g->table);
        free(g);
        return perr_set(err, "open sums unit by unit, or gradients inside the open sums: one of "
                             "them, and not without gradients");
    }
    g->sums_mode = mode;
    g->grad_acc = calloc((size_t)g->table.count, sizeof(acc_t));
    g->acc_storage = calloc((size_t)g->table.count, sizeof(void *));
    g->param_ptr = calloc((size_t)g->table.count, sizeof(float *));
    if (!g->grad_acc || !g->acc_storage || !g->param_ptr) return replica_oom(g, what, P, err);
    gpt_mem_t mem;
    gpt_mem_of(cfg, &g->table, omit, &g->local, shard->tp, &shard->units, 0, &mem);
    if (alloc_state(g, &mem, &what) || open_sums(g, &mem, &what) || alloc_activations(g, &what) ||
        init_replica(g, omit))
        return replica_oom(g, what, P, err);
    *out = g;
    return 0;
}

static void free_slots(gpt_t *g) {
    for (int k = 0; k < g->n_slots; k++) {
        model_release(g->arena, g->slot[k].block);
        free(g->slot[k].layer);
    }
    free(g->slot);
    g->slot = NULL;
    g->n_slots = 0;
}

/* n slots: of every unit held (chunked = 0), or each sized for the
 * largest chunk and laid out for chunk 0 until gpt_slot_use_chunk. */
static int make_slots(gpt_t *g, int n, int chunked, perr_t *err) {
    free_slots(g);
    if (!(g->slot = calloc((size_t)n, sizeof *g->slot))) return perr_set(err, "out of memory");
    g->n_slots = n;
    const slot_units_t all = {&g->shard.units, -1};
    const size_t bytes = chunked ? stage_slot_bytes(&g->cfg, &g->local, &g->shard.units)
                                 : slot_bytes(&g->cfg, &g->local, &all);
    for (int k = 0; k < n; k++) {
        gpt_slot_t *A = &g->slot[k];
        if (!(A->layer = calloc((size_t)model_num_units(&g->cfg), sizeof *A->layer)))
            return perr_set(err, "out of memory");
        A->block = model_alloc(g->arena, bytes, MEM_ACTIVATIONS, "activations");
        if (!A->block)
            return perr_set(err, "activation slot %d of %d does not fit the device%s%s", k, n,
                            g->arena ? ":\n" : "", g->arena ? arena_last_error(g->arena) : "");
        A->chunk = -1;
        if (chunked)
            gpt_slot_use_chunk(g, k, 0);
        else {
            carver_t cv = {A->block, 0};
            layout_slot(A, &g->cfg, &g->local, &all, &cv);
        }
    }
    return 0;
}

int gpt_set_slots(gpt_t *g, int n, perr_t *err) {
    if (n < 1) return perr_set(err, "activation slots: %d, expected >= 1", n);
    return make_slots(g, n, 0, err);
}

int gpt_set_stage_slots(gpt_t *g, int n, perr_t *err) {
    if (n < 1) return perr_set(err, "activation slots: %d, expected >= 1", n);
    if (g->shard.units.n == 0) return perr_set(err, "stage slots: the replica holds no pipeline chunks");
    return make_slots(g, n, 1, err);
}

void gpt_slot_use_chunk(gpt_t *g, int s, int c) {
    if (s < 0 || s >= g->n_slots || c < 0 || c >= g->shard.units.n)
        parity_fatal("gpt_slot_use_chunk: slot %d of %d, chunk %d of %d", s, g->n_slots, c,
                     g->shard.units.n);
    gpt_slot_t *A = &g->slot[s];
    if (A->chunk == c) return;
    /* a chunk's activations over the block: the previous chunk's are dead
     * (its backward has run), and no pointer to them may survive */
    layer_acts_t *layers = A->layer;
    void *block = A->block;
    memset(A, 0, sizeof *A);
    memset(layers, 0, (size_t)model_num_units(&g->cfg) * sizeof *layers);
    A->layer = layers, A->block = block, A->chunk = c;
    const slot_units_t one = {&g->shard.units, c};
    carver_t cv = {block, 0};
    layout_slot(A, &g->cfg, &g->local, &one, &cv);
}

int gpt_new(gpt_t **out, const model_config_t *cfg, perr_t *err) {
    *out = NULL;
    if (model_config_validate(cfg, err)) return -1; /* the golden schedule's whole microbatches */
    return gpt_new_ex(out, cfg, gpt_golden_flags(cfg), NULL, err);
}

void gpt_free(gpt_t *g) {
    if (!g) return;
    arena_t *arena = g->arena;
    if (g->grad_acc)
        for (int i = 0; i < g->table.count; i++) acc_free(&g->grad_acc[i]);
    if (g->acc_storage)
        for (int i = 0; i < g->table.count; i++) model_release(arena, g->acc_storage[i]);
    free(g->acc_storage);
    if (g->grads == g->acc_pool) g->grads = NULL; /* GPT_GRADS_IN_SUMS: one block */
    model_release(arena, g->acc_pool);
    free(g->grad_acc);
    free(g->param_ptr);
    model_release(arena, g->params);
    model_release(arena, g->params_lp);
    model_release(arena, g->grads);
    model_release(arena, g->adam_m);
    model_release(arena, g->adam_v);
    model_release(arena, g->adam8_m);
    model_release(arena, g->adam8_v);
    model_release(arena, g->adam8_am);
    model_release(arena, g->adam8_av);
    free_slots(g);
    free(g->moe.routed);
    free(g->moe.dropped);
    model_release(arena, g->scratch.block);
    contract_ws_free(&g->ws);
    param_table_free(&g->table);
    free(g);
}
