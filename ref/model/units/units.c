/* units.c - the GPT as a list of units over activation slots (model.h,
 * MODEL.md, unit_kind.h): one dispatch through the unit's kind.
 *
 *   embedding   x = drop(wte[tokens] + wpe)              unit_embedding.c
 *   layer l     x = x + drop(attn(LN1 x)); x = x + drop(mlp(LN2 x))   unit_layer.c
 *   head        logits = LNf(x) . wte^T (or output_layer), token losses   unit_head.c
 *
 * Each unit's forward keeps what its backward needs in the slot; its
 * backward adds parameter gradients to open exact sums (g->grad_acc) and
 * passes the residual stream's gradient on in slot->d_resid. Residual
 * connections: the gradient that reaches x is d_out + d_branch, one fp32
 * add, the residual term first.
 *
 * The checkpoints a dump or checker sees are listed once, in each
 * kind's table, and reported by gpt_unit_after_forward, never by the
 * maths.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model/gpt.h"
#include "parity/pmath.h"
#include "parity/runtime.h"
#include "model/styles/tp.h"
#include "model/units/units_internal.h"

static void unit_event(gpt_t *g, const gpt_observer_t *obs, int unit, int event) {
    if (event == GPT_FWD_BEGIN || event == GPT_BWD_BEGIN) /* for debuggers: parity devices */
        device_note_pass(event == GPT_FWD_BEGIN ? DEVICE_PASS_FORWARD : DEVICE_PASS_BACKWARD, unit);
    if (obs && obs->unit) obs->unit(obs->ctx, g, unit, event);
}

void gpt_step_begin(gpt_t *g) {
    for (int i = 0; i < g->table.count; i++) acc_zero(&g->grad_acc[i]);
    sacc_init(&g->loss_acc);
    const size_t cells = (size_t)g->cfg.layers * (size_t)g->cfg.moe_experts;
    if (g->moe.routed) memset(g->moe.routed, 0, cells * sizeof *g->moe.routed);
    if (g->moe.dropped) memset(g->moe.dropped, 0, cells * sizeof *g->moe.dropped);
    xacc_init(&g->moe.aux);
    xacc_init(&g->moe.z);
}

void gpt_slot_begin(gpt_t *g, int s, const int32_t *inputs, const int32_t *targets, int n_seq,
                    int first_seq, int64_t step, const gpt_observer_t *obs) {
    const model_config_t *c = &g->cfg;
    const int T = c->seq_length, V = c->vocab, n = n_seq * T;
    gpt_slot_t *A = &g->slot[s];
    if (s < 0 || s >= g->n_slots)
        parity_fatal("gpt_slot_begin: slot %d of %d", s, g->n_slots);
    if (n_seq <= 0 || n_seq > c->micro_batch || first_seq < 0 ||
        first_seq + n_seq > c->global_batch)
        parity_fatal("gpt_slot_begin: sequences %d..%d do not fit micro_batch %d / batch %d",
                     first_seq, first_seq + n_seq - 1, c->micro_batch, c->global_batch);
    for (int i = 0; i < n; i++)
        if (inputs[i] < 0 || inputs[i] >= V || targets[i] < 0 || targets[i] >= V)
            parity_fatal("gpt_slot_begin: token %d outside the vocabulary [0, %d)", i, V);
    if (A->inputs != inputs) memcpy(A->inputs, inputs, (size_t)n * sizeof(int32_t));
    if (A->targets != targets) memcpy(A->targets, targets, (size_t)n * sizeof(int32_t));
    /* context parallelism: keep the positions held, in the runs' order
     * (in place: a kept token never moves later) */
    const cp_runs_t *r = &g->local.runs;
    for (int b = 0, at = 0; r->len[0] < T && b < n_seq; b++)
        for (int k = 0; k < r->n; at += r->len[k++]) {
            const size_t from = (size_t)b * T + (size_t)r->t0[k], bytes = (size_t)r->len[k] * 4;
            memmove(A->inputs + at, A->inputs + from, bytes);
            memmove(A->targets + at, A->targets + from, bytes);
        }
    A->n_seq = n_seq;
    A->first_seq = first_seq;
    A->mask_seq = first_seq;
    A->step = step;
    if (obs && obs->batch_tensor) {
        const int64_t shape[1] = {T};
        report_rows(obs, A, "input_ids", ST_I32, A->inputs, 1, shape, -1, 0, 0, r, 0);
        report_rows(obs, A, "labels", ST_I32, A->targets, 1, shape, -1, 0, 0, r, 0);
    }
}

/* ---- the model's description -------------------------------------------- */

/* The GPT: its unit kinds in order, each with its instance count. A
 * model of other kinds is another such list (model_set_runs). */
int model_count_one(const model_config_t *c) { return (void)c, 1; }
int model_count_layers(const model_config_t *c) { return c->layers; }
static int count_encoder_layers(const model_config_t *c) { return c->encoder_layers; }
static int count_t5(const model_config_t *c) { return c->arch == MODEL_T5; }
static int count_llava(const model_config_t *c) { return c->arch == MODEL_LLAVA; }
static const unit_kind_t *embedding_kind(const model_config_t *c, int i) {
    (void)i;
    return c->arch == MODEL_LLAVA ? &unit_patch_embedding : &unit_embedding;
}
static const unit_kind_t *layer_kind(const model_config_t *c, int l) {
    if (c->arch == MODEL_T5) return &unit_decoder_layer;
    return model_layer_is_moe(c, l) ? &unit_moe_layer : &unit_layer;
}
/* Every built-in architecture's units in one list, the runs a config has
 * none of counting 0 (the GPT: no encoder), so a checkpoint's name has
 * one position whatever the model. */
static const model_run_t gpt_runs[] = {
    {&unit_embedding, model_count_one, embedding_kind, {&unit_patch_embedding}},
    {&unit_encoder_layer, count_encoder_layers, NULL, {NULL}},
    {&unit_encoder_final, count_t5, NULL, {NULL}},
    {&unit_projector, count_llava, NULL, {NULL}},
    {&unit_layer, model_count_layers, layer_kind, {&unit_moe_layer, &unit_decoder_layer}},
    {&unit_head, model_count_one, NULL, {NULL}}};
static const model_run_t *runs = gpt_runs;
static int N_RUNS = sizeof gpt_runs / sizeof gpt_runs[0];

int model_set_runs(const model_run_t *list, int n) {
    if (!list) {
        runs = gpt_runs, N_RUNS = sizeof gpt_runs / sizeof gpt_runs[0];
        return 0;
    }
    if (n < 1 || n > MODEL_MAX_RUNS) return -1;
    runs = list, N_RUNS = n;
    return 0;
}

int model_num_units(const model_config_t *c) {
    int n = 0;
    for (int r = 0; r < N_RUNS; r++) n += runs[r].count(c);
    return n;
}

/* unit u: its kind and index; `run` its kind's place in the list */
static unit_t unit_at(const model_config_t *c, int u, int *run) {
    for (int r = 0, at = 0; r < N_RUNS; r++) {
        const int k = runs[r].count(c);
        if (u >= at && u < at + k) {
            if (run) *run = r;
            const unit_kind_t *kind = runs[r].kind_at ? runs[r].kind_at(c, u - at) : runs[r].kind;
            return (unit_t){kind, u - at, u, -1};
        }
        at += k;
    }
    parity_fatal("unit %d of %d", u, model_num_units(c));
}

unit_t model_unit_at(const model_config_t *c, int u) { return unit_at(c, u, NULL); }

unit_t gpt_unit(const gpt_t *g, int u) {
    unit_t x = unit_at(&g->cfg, u, NULL);
    x.first = g->table.unit_first[u];
    return x;
}

void unit_prefix(const unit_t *u, char *buf, size_t cap) {
    snprintf(buf, cap, u->kind->prefix, u->index);
}

int unit_when(const model_config_t *c, unsigned when) {
    if ((when & WHEN_UNTIED) && c->tied) return 0;
    if ((when & WHEN_HDROP) && !(c->hidden_dropout > 0.0f)) return 0;
    if ((when & WHEN_ADROP) && !(c->attention_dropout > 0.0f)) return 0;
    return 1;
}

int64_t unit_dim(const model_config_t *c, unit_dim_t d) {
    switch (d) {
    case DIM_1: return 1;
    case DIM_V: return c->vocab;
    case DIM_T: return c->seq_length;
    case DIM_C: return c->hidden;
    case DIM_3C: return 3 * (int64_t)c->hidden;
    case DIM_F: return c->ffn;
    case DIM_H: return c->heads;
    case DIM_2: return 2; /* a pair stacked on a leading axis */
    case DIM_E: return c->moe_experts;
    case DIM_K: return c->moe_topk;
    case DIM_PATCH: return c->patch_dim;
    }
    return 0;
}

/* A name "<prefix><rest>" of one of a kind's instances: the index (0 for
 * a kind with no index in its prefix) and the rest; -1 if not. */
static int match_prefix(const unit_kind_t *k, const char *name, const char **rest) {
    const char *pc = strstr(k->prefix, "%d");
    if (!pc) {
        const size_t n = strlen(k->prefix);
        if (strncmp(name, k->prefix, n)) return -1;
        *rest = name + n;
        return 0;
    }
    const size_t head = (size_t)(pc - k->prefix);
    if (strncmp(name, k->prefix, head) || name[head] < '0' || name[head] > '9') return -1;
    char *end;
    const long i = strtol(name + head, &end, 10);
    const size_t tail = strlen(pc + 2);
    if (strncmp(end, pc + 2, tail) || i > 1L << 30) return -1;
    *rest = end + tail;
    return (int)i;
}

/* The units' positions for the checker: kind r of the list, index i. */
static long position(int r, int i) { return ((long)r << 20) + i; }

/* The checkpoint named name ("act.layers.3.output", "logits"): its kind's
 * place in the list *r, the instance *i; NULL when no kind has it. */
static const unit_checkpoint_t *find_checkpoint(const char *name, int *r, int *i) {
    for (*r = 0; *r < N_RUNS; ++*r)
        for (int alt = 0; alt < 3; alt++) {
        const unit_kind_t *k = alt ? runs[*r].alts[alt - 1] : runs[*r].kind;
        for (int c = 0; k && c < k->n_checkpoints; c++) {
            const unit_checkpoint_t *cp = &k->checkpoints[c];
            const char *rest = name;
            const size_t cl = strlen(cp->cls);
            if (cl && (strncmp(rest, cp->cls, cl) || rest[cl] != '.')) continue;
            rest += cl ? cl + 1 : 0;
            *i = match_prefix(k, rest, &rest);
            if (*i >= 0 && !strcmp(rest, cp->suffix)) return cp;
        }
        }
    return NULL;
}

/* Whether name is the input gradient of an instance of kind r (*i). */
static int is_input_grad(const char *name, int r, int *i) {
    for (int alt = 0; alt < 3; alt++) {
        const unit_kind_t *k = alt ? runs[r].alts[alt - 1] : runs[r].kind;
        if (!k || !k->input_grad) continue;
        const unit_kind_t ig = {.prefix = k->input_grad}; /* "grad_input.layers.%d" */
        const char *rest;
        *i = match_prefix(&ig, name, &rest);
        if (*i >= 0 && !*rest) return 1;
    }
    return 0;
}

int gpt_checkpoint_position(const char *name, long *unit, long *order) {
    int r, i;
    const unit_checkpoint_t *cp = find_checkpoint(name, &r, &i);
    if (!cp) return -1;
    *unit = position(r, i);
    *order = cp->order;
    return 0;
}

long gpt_backward_position(const char *name) {
    const long last = position(N_RUNS - 1, 0);
    for (int r = 0; r < N_RUNS; r++)
        for (int alt = 0; alt < 3; alt++) {
            const unit_kind_t *k = alt ? runs[r].alts[alt - 1] : runs[r].kind;
            const char *rest;
            int i;
            if (!k) continue;
            if (is_input_grad(name, r, &i)) return last - position(r, i);
            i = match_prefix(k, name, &rest);
            for (int t = 0; i >= 0 && t < k->n_tensors; t++)
                if (!strcmp(rest, k->tensors[t].suffix)) return last - position(r, i);
        }
    return 0;
}

int gpt_param_position(const char *name) {
    for (int r = 0; r < N_RUNS; r++)
        for (int alt = 0; alt < 3; alt++) {
            const unit_kind_t *k = alt ? runs[r].alts[alt - 1] : runs[r].kind;
            const char *rest;
            const int i = k ? match_prefix(k, name, &rest) : -1;
            for (int t = 0; i >= 0 && t < k->n_tensors; t++)
                if (!strcmp(rest, k->tensors[t].suffix)) return t;
        }
    return -1;
}

static size_t dtype_bytes(st_dtype_t t) { return st_dtype_size(t); }

size_t gpt_batch_bytes_per_seq(const model_config_t *c) {
    const size_t T = (size_t)c->seq_length;
    size_t bytes = 2 * T * sizeof(int32_t); /* input ids and labels */
    const int U = model_num_units(c);
    for (int u = 0; u < U; u++) {
        const unit_kind_t *k = model_unit_at(c, u).kind;
        for (int i = 0; i < k->n_checkpoints; i++) {
            const unit_checkpoint_t *cp = &k->checkpoints[i];
            if (!unit_when(c, cp->when)) continue;
            size_t b = dtype_bytes(cp->dtype);
            for (int d = 0; d < cp->ndim; d++) b *= (size_t)unit_dim(c, cp->dim[d]);
            bytes += b;
        }
        if (k->input_grad) bytes += T * (size_t)c->hidden * sizeof(float); /* [T, C] */
    }
    return bytes;
}

/* ---- dispatch and the golden schedule ----------------------------------- */

static gpt_slot_t *slot_at(gpt_t *g, int unit, int s) {
    if (unit < 0 || unit >= gpt_num_units(g) || s < 0 || s >= g->n_slots)
        parity_fatal("unit %d / slot %d out of range (%d units, %d slots)", unit, s,
                     gpt_num_units(g), g->n_slots);
    return &g->slot[s];
}

/* The residual stream entering unit u: the previous unit's output. */
static const float *stream_in(gpt_t *g, gpt_slot_t *A, const unit_t *u) {
    if (!u->kind->input_grad) return NULL; /* a kind without an input */
    const unit_t prev = model_unit_at(&g->cfg, u->unit - 1);
    return prev.kind->output(A, unit_acts(&prev));
}

/* ---- activation recomputation ------------------------------------------- */

/* Full recomputation replays chunks of one run of layers: the decoder's
 * (the GPT's dense and MoE layers, T5's decoder layers) or the encoder's
 * (T5's and LLaVA's encoder layers). As Megatron-core checkpoints each
 * TransformerBlock on its own (T5's encoder and decoder blocks), a chunk
 * never crosses from one run into the other. 1 when u is in such a run,
 * its units [*lo, *hi]. */
static int layer_run(const model_config_t *c, int u, int *lo, int *hi) {
    int r;
    unit_at(c, u, &r);
    if (runs[r].kind != &unit_layer && runs[r].kind != &unit_encoder_layer) return 0;
    int at = 0;
    for (int k = 0; k < r; k++) at += runs[k].count(c);
    *lo = at, *hi = at + runs[r].count(c) - 1;
    return 1;
}

int gpt_recompute_chunk(const model_config_t *c, const gpt_units_t *units, int u, int *first,
                        int *last) {
    int lo, hi;
    if (c->recompute != MODEL_RECOMPUTE_FULL || !layer_run(c, u, &lo, &hi)) return 0;
    /* the run of layers u is in: the replica's range of units holding u
     * (a pipeline stage's, or each of its virtual chunks') */
    for (int k = 0; k < units->n; k++)
        if (u >= units->lo[k] && u < units->hi[k]) {
            if (units->lo[k] > lo) lo = units->lo[k];
            if (units->hi[k] - 1 < hi) hi = units->hi[k] - 1;
        }
    const int N = c->recompute_layers > 0 ? c->recompute_layers : 1, k = u - lo;
    if (c->recompute_block) { /* Megatron's block: the run's first N layers, each alone */
        if (k >= N) return 0;
        *first = *last = u;
        return 1;
    }
    *first = lo + k / N * N; /* uniform: chunks of N from the run's first layer */
    *last = *first + N - 1 < hi ? *first + N - 1 : hi;
    return 1;
}

int gpt_recomputed_layers(const model_config_t *c, const gpt_units_t *units, int *held, int *cores) {
    int whole = 0, layers = 0;
    for (int u = 0, first, last; u < model_num_units(c); u++) {
        if (!gpt_units_hold(units, u)) continue;
        layers += model_unit_takes_stream(c, u) && model_unit_gives_stream(c, u);
        whole += gpt_recompute_chunk(c, units, u, &first, &last);
    }
    if (held) *held = layers;
    if (cores) *cores = c->recompute == MODEL_RECOMPUTE_SELECTIVE ? layers : whole;
    return whole;
}

enum { RECOMPUTE_KINDS = 4 };
/* The recomputed layers' kinds, each once (dense and MoE layers mixed,
 * --moe-layer-freq; an encoder's and a decoder's), and the longest chunk:
 * the scratch keeps a set of activations per (kind, place in a chunk),
 * since a chunk's k-th layer may be of either kind. */
static int recompute_plan(const model_config_t *c, const gpt_units_t *units,
                          const unit_kind_t **kinds, int *nk) {
    int most = 0;
    *nk = 0;
    for (int u = 0, f, l; c->recompute == MODEL_RECOMPUTE_FULL && u < model_num_units(c); u++) {
        if (!gpt_units_hold(units, u) || !gpt_recompute_chunk(c, units, u, &f, &l)) continue;
        if (l - f + 1 > most) most = l - f + 1;
        const unit_kind_t *k = model_unit_at(c, u).kind;
        int seen = 0;
        for (int i = 0; i < *nk; i++) seen |= kinds[i] == k;
        if (!seen && *nk == RECOMPUTE_KINDS) parity_fatal("recompute: more than %d layer kinds", *nk);
        if (!seen) kinds[(*nk)++] = k;
    }
    return most;
}

int gpt_attention_blocks(const model_config_t *c, const gpt_units_t *units, int *cores) {
    int held = 0, again = 0;
    for (int u = 0, first, last; u < model_num_units(c); u++) {
        if (!gpt_units_hold(units, u)) continue;
        const int b = model_unit_at(c, u).kind->attention_blocks;
        held += b;
        again += gpt_recompute_chunk(c, units, u, &first, &last) ? b : 0;
    }
    if (cores) *cores = c->recompute == MODEL_RECOMPUTE_SELECTIVE ? held : again;
    return held;
}

int gpt_recomputed_blocks(const model_config_t *c, const gpt_units_t *units) {
    int blocks = 0;
    for (int u = 0, first, last; u < model_num_units(c); u++)
        if (gpt_units_hold(units, u) && gpt_recompute_chunk(c, units, u, &first, &last))
            blocks += model_unit_at(c, u).kind->attention_blocks + 1; /* and its MLP */
    return blocks;
}

int recompute_sets(const model_config_t *c, const gpt_units_t *units) {
    const unit_kind_t *kinds[RECOMPUTE_KINDS];
    int nk;
    const int most = recompute_plan(c, units, kinds, &nk);
    return most * nk;
}

void recompute_layout(layer_acts_t *sets, const model_config_t *c, const gpt_units_t *units,
                      const slot_dims_t *d, carver_t *cv) {
    const unit_kind_t *kinds[RECOMPUTE_KINDS];
    int nk;
    const int most = recompute_plan(c, units, kinds, &nk);
    for (int i = 0; i < nk; i++)
        for (int k = 0; k < most; k++) {
            layer_acts_t set = {0};
            gpt_slot_t one = {.layer = &set};
            kinds[i]->layout(&one, 0, d, 1, 0, cv);
            if (sets) sets[i * most + k] = set;
        }
}

/* Full recomputation: a chunk's layers keep their activations in the
 * scratch's sets (layer k of the chunk in its kind's set k) while they
 * run, the chunk's last its output in the slot too (the next unit's
 * input). 1 when bound; 0 when u stores its own. */
static int recompute_bind(gpt_t *g, gpt_slot_t *A, int unit) {
    int first, last, nk;
    if (!gpt_recompute_chunk(&g->cfg, &g->shard.units, unit, &first, &last)) return 0;
    const unit_kind_t *kinds[RECOMPUTE_KINDS];
    const int most = recompute_plan(&g->cfg, &g->shard.units, kinds, &nk);
    const unit_t u = gpt_unit(g, unit);
    int i = 0;
    while (kinds[i] != u.kind) i++;
    layer_acts_t *L = &A->layer[unit_acts(&u)];
    float *out = L->out;
    *L = g->scratch.recompute[i * most + unit - first];
    if (unit == last) L->out = out;
    return 1;
}

void gpt_unit_forward_pure(gpt_t *g, int unit, int s) {
    gpt_slot_t *A = slot_at(g, unit, s);
    const pass_t p = unit_pass(g, A);
    const unit_t u = gpt_unit(g, unit);
    recompute_bind(g, A, unit);
    u.kind->forward(g, &u, A, stream_in(g, A, &u), &p);
}

void gpt_unit_after_forward(gpt_t *g, int unit, int s, const gpt_observer_t *obs) {
    gpt_slot_t *A = slot_at(g, unit, s);
    const unit_t u = gpt_unit(g, unit);
    if (u.kind->after_forward) {
        const pass_t p = unit_pass(g, A);
        u.kind->after_forward(g, &u, A, &p);
    }
    if (obs && obs->batch_tensor) gpt_report_unit(g, unit, s, obs);
}

void gpt_unit_forward(gpt_t *g, int unit, int s, const gpt_observer_t *obs) {
    slot_at(g, unit, s);
    unit_event(g, obs, unit, GPT_FWD_BEGIN);
    gpt_unit_forward_pure(g, unit, s);
    unit_event(g, obs, unit, GPT_FWD_END);
    gpt_unit_after_forward(g, unit, s, obs);
}

void gpt_unit_backward(gpt_t *g, int unit, int s, const gpt_observer_t *obs) {
    gpt_slot_t *A = slot_at(g, unit, s);
    const pass_t p = unit_pass(g, A);
    const unit_t u = gpt_unit(g, unit);
    unit_event(g, obs, unit, GPT_BWD_BEGIN);
    int first, last;
    if (gpt_recompute_chunk(&g->cfg, &g->shard.units, unit, &first, &last) && unit == last) {
        for (int k = first; k <= last; k++) { /* the chunk's forward again: the same bits */
            const unit_t x = gpt_unit(g, k);
            /* the chunk's other layers' parameters (ZeRO-3 gathers them for
             * this forward, releases them, and gathers them again for their
             * backward, as DeepSpeed's hooks do under checkpointing) */
            if (k < last) unit_event(g, obs, k, GPT_FWD_BEGIN);
            recompute_bind(g, A, k);
            x.kind->forward(g, &x, A, stream_in(g, A, &x), &p);
            if (k < last) unit_event(g, obs, k, GPT_FWD_END);
        }
        if (last > first) device_note_pass(DEVICE_PASS_BACKWARD, unit);
    }
    u.kind->backward(g, &u, A, &p);
    gpt_round_unit_grads(g, unit); /* GPT_UNIT_OPEN_SUMS: before the next unit reuses the pool */
    if (obs && obs->batch_tensor) gpt_report_input_grad(g, unit, s, obs);
    unit_event(g, obs, unit, GPT_BWD_END);
}

void gpt_microbatch(gpt_t *g, const int32_t *inputs, const int32_t *targets, int n_seq,
                    int first_seq, int64_t step, const gpt_observer_t *obs) {
    const int U = gpt_num_units(g);
    gpt_slot_begin(g, 0, inputs, targets, n_seq, first_seq, step, obs);
    for (int u = 0; u < U; u++) gpt_unit_forward(g, u, 0, obs);
    for (int u = U - 1; u >= 0; u--) gpt_unit_backward(g, u, 0, obs);
}

/* ---- what the engine and the reports ask of a unit ---------------------- */

int model_unit_takes_stream(const model_config_t *c, int u) {
    return model_unit_at(c, u).kind->input_grad != NULL;
}

int model_unit_gives_stream(const model_config_t *c, int u) {
    return model_unit_at(c, u).kind->output != NULL;
}

/* Unit index of instance i of kind r, or -1 when c has no such instance. */
static int unit_index(const model_config_t *c, int r, int i) {
    int at = 0;
    for (int k = 0; k < r; k++) at += runs[k].count(c);
    return i < runs[r].count(c) ? at + i : -1;
}

int model_batch_unit(const model_config_t *c, const char *name) {
    int r, i;
    if (find_checkpoint(name, &r, &i)) return unit_index(c, r, i);
    for (r = 0; r < N_RUNS; r++)
        if (is_input_grad(name, r, &i)) return unit_index(c, r, i);
    return -1;
}

void model_unit_name(const model_config_t *c, int u, char *buf, size_t cap) {
    const unit_t x = model_unit_at(c, u);
    if (strstr(x.kind->prefix, "%d")) snprintf(buf, cap, "%s %d", x.kind->name, x.index);
    else snprintf(buf, cap, "the %s", x.kind->name);
}

int gpt_checkpoint_writer(const char *name, const char **suffix, ckpt_writer_t *writer) {
    int r, i;
    const unit_checkpoint_t *cp = find_checkpoint(name, &r, &i);
    if (!cp) return -1;
    *suffix = cp->suffix;
    *writer = cp->writer;
    return 0;
}

float *gpt_slot_stream(gpt_t *g, int s, int u) {
    const unit_t prev = model_unit_at(&g->cfg, u - 1);
    return prev.kind->output(slot_at(g, u - 1, s), unit_acts(&prev));
}
