/* params.c - the parameter table: names, shapes, offsets, init, decay.
 *
 * As in llm.c, all parameters live in one contiguous block, and this
 * table is the single description of it: every loop over parameters
 * (init, gradients, AdamW, dumps) walks it. Order and names follow
 * MODEL.md's table. */
#include "model/gpt.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "parity/pconfig.h"
#include "parity/pmath.h"
#include "parity/pool.h"
#include "parity/rng.h"
#include "model/units/unit_kind.h"

static const float SIGMA = 0.02f;

/* How tensor parallelism cuts a tensor (Megatron): not at all, along its
 * rows (column-parallel and vocabulary-parallel) or along its columns
 * (row-parallel), in blocks of `align` (whole canonical tiles, whole
 * heads). */
typedef struct {
    int axis; /* -1: replicated */
    int align;
    int uneven; /* 1: ranks may hold unequal numbers of whole tiles (placement_split) */
} tp_cut_t;
static const tp_cut_t REPL = {-1, 1, 0};

/* The token axes: grid axes that split the tokens of a step (data
 * parallelism: sequences; context parallelism: positions). A gradient is
 * a sum over tokens, so a tensor replicated over a token axis has its
 * gradient reduced over it; a tensor cut over one holds its own tokens'
 * sum already. The expert-parallel ranks, taken out of the data-parallel
 * ones, split sequences too: a grid whose ep axis is longer than 1 adds
 * it (token_axes_at), so that every other grid keeps its group names
 * ("dp-cp"). */
static const unsigned TOKEN_AXES = 1u << GRID_DP | 1u << GRID_CP;

unsigned placement_reduce_axes_at(const placement_t *pl, const int sizes[GRID_NAXES]) {
    unsigned cut = pl->partial;
    for (int k = 0; k < pl->ncuts; k++) cut |= 1u << pl->cut[k].over;
    unsigned more = sizes[GRID_EP] > 1 ? 1u << GRID_EP : 0u;
    /* tensor parallelism's sub-axes split a microbatch's sequences
     * (Colossal's 2-D rows, 2.5-D's depth): a tensor replicated over one
     * sums its gradient over it */
    for (int a = GRID_TP2; a <= GRID_TP3; a++)
        if (sizes[a] > 1) more |= 1u << a;
    return (TOKEN_AXES | more) & ~cut;
}

unsigned placement_reduce_axes(const placement_t *pl) {
    static const int no_ep[GRID_NAXES] = {1, 1, 1, 1, 1, 1, 1};
    return placement_reduce_axes_at(pl, no_ep);
}

void placement_reduce_name(unsigned axes, char *buf, size_t cap) {
    static const grid_axis_t order[] = {GRID_DP, GRID_CP, GRID_EP, GRID_TP3, GRID_TP2, GRID_TP, GRID_PP};
    size_t at = 0;
    buf[0] = 0;
    for (size_t k = 0; k < sizeof order / sizeof *order && at < cap; k++)
        if (axes >> order[k] & 1)
            at += (size_t)snprintf(buf + at, cap - at, "%s%s", at ? "-" : "", grid_axis_name(order[k]));
}

/* The block of the device at (sizes, coord), sized and laid out after
 * the tensors before it. */
static void place(param_table_t *t, param_info_t *p, const int sizes[GRID_NAXES],
                  const int coord[GRID_NAXES]) {
    int64_t lo[PL_MAX_DIMS], ext[PL_MAX_DIMS];
    placement_block(&p->pl, sizes, coord, lo, ext);
    p->ndim = p->pl.ndim;
    p->numel = 1;
    for (int d = 0; d < PL_MAX_DIMS; d++) {
        p->shape[d] = d < p->ndim ? ext[d] : 1;
        p->numel *= (size_t)p->shape[d];
    }
    p->offset = t->total;
    t->total += p->numel;
}

static int add(param_table_t *t, const int sizes[GRID_NAXES], const int coord[GRID_NAXES],
               const char *name, int ndim, const int64_t *shape, param_init_t init, float std,
               placement_t pl, int experts, int fold, int fold_n, int weight_decay, perr_t *err) {
    param_info_t *p = &t->info[t->count++];
    snprintf(p->name, sizeof p->name, "%s", name);
    (void)ndim, (void)shape;
    p->pl = pl;
    /* expert parallelism: rank q of ep holds experts [q E/ep, (q+1) E/ep)
     * of a stacked expert tensor (axis 0); its gradient then reduces over
     * the expert-data ranks only (placement_reduce_axes_at); folded onto
     * tp or cp (gpt_layout_opts_t.expert_fold), that axis's rank f holds
     * piece f of the ep axis's piece: the expert rank f + fold * q (the
     * fold fastest, Megatron's expert order) */
    if (experts && sizes[GRID_EP] > 1) p->pl = placement_cut(p->pl, 0, GRID_EP, 1);
    const grid_axis_t fold_axis = fold == GPT_EXPERT_FOLD_CP ? GRID_CP : GRID_TP;
    if (experts && fold && fold_n > 0 && fold_n < sizes[fold_axis]) /* a run of fold_n tp ranks */
        p->pl = placement_cut_parts(p->pl, 0, fold_axis, 1, fold_n);
    else if (experts && fold && sizes[fold_axis] > 1)
        p->pl = placement_cut(p->pl, 0, fold_axis, 1);
    if (placement_check(&p->pl, sizes, name, err)) return -1;
    p->reduce = placement_reduce_axes_at(&p->pl, sizes);
    place(t, p, sizes, coord);
    p->init = init;
    p->init_std = std;
    /* the kind's: Megatron's rule, shared with tests/torch, decays every
     * 2-D weight (embeddings and the LM head included), never biases or
     * LayerNorm */
    p->weight_decay = weight_decay;
    p->held = 1;
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

param_grid_t param_grid_tp(int tp, int tp_rank, gpt_layout_opts_t lo) {
    param_grid_t g;
    for (int a = 0; a < GRID_NAXES; a++) g.sizes[a] = a == GRID_TP ? tp : 1, g.coord[a] = 0;
    g.coord[GRID_TP] = tp_rank;
    if (lo.tp_mode != PC_TP_1D) g.sizes[GRID_TP2] = tp; /* 2-D: tp columns, as many rows */
    if (lo.tp_mode == PC_TP_3D) g.sizes[GRID_TP3] = tp; /* 3-D: a cube */
    g.sizes[GRID_EP] = lo.ep > 1 ? lo.ep : 1; /* expert-parallel rank 0's experts: its sizes */
    /* experts folded onto cp: cp rank 0's (the other token tensors' cp cut is the stream's) */
    if (lo.expert_fold == GPT_EXPERT_FOLD_CP && lo.cp > 1) g.sizes[GRID_CP] = lo.cp;
    return g;
}

int param_table_build(param_table_t *t, const model_config_t *c, perr_t *err) {
    const gpt_layout_opts_t one = {0};
    const gpt_units_t all = {0, {0}, {0}};
    const param_grid_t g = param_grid_tp(1, 0, one);
    return param_table_build_at(t, c, g.sizes, g.coord, &all, one, err);
}

/* A kind's cut description resolved for c (unit_kind.h): Megatron's
 * column-parallel rows of whole heads (qkv rows are head-ordered) or FFN
 * tiles, row-parallel input columns likewise, vocabulary rows of whole
 * feature tiles; with every linear row-parallel each 2-D linear weight
 * split on its input features (whole tiles), its column-parallel bias
 * whole. */
int param_head_unit(const model_config_t *c) {
    if (c->heads < 1 || c->tile_features < 1 || c->hidden % c->heads) return 0;
    const int D = c->hidden / c->heads, tf = c->tile_features;
    const int one = lcm(D, tf) / D, three = lcm(3 * D, tf) / (3 * D);
    return one == three ? one : 0;
}

/* Colossal-AI's 2-D and 3-D placements (tp2d.c, tp3d.c), from 1-D's cut
 * `one` (its blocks: whole heads, FFN and vocabulary tiles). Cuts nest
 * (placement.h); `feat` is the hidden axis's cut (whole feature tiles).
 *   2-D  linear W [out, in]: out over tp (the column), in over tp2 (the row);
 *        E [V, C]: V over tp2, C over tp; vectors and the position table:
 *        the last axis over tp, then pieces over tp2 along the first
 *        (Colossal's out/q^2).
 *   3-D  the first linear of a pair (qkv, fc1: the stream's features in,
 *        tp) W: out over tp2 then pieces over tp3, in over tp; the second
 *        (dense, fc2: tp2 in) out over tp then tp3, in over tp2; E as the
 *        first (V over tp2 then tp3, C over tp); a vector of the stream's
 *        width (LayerNorm, the seconds' biases, the position table) over
 *        tp, then pieces over tp3 then tp2 (the stream's sequence blocks),
 *        a first's bias over tp2, then over tp3 then tp. */
static placement_t tp_modes_placement(const unit_tensor_t *d, const model_config_t *c, tp_cut_t one,
                                      int mode, placement_t pl) {
    const int tf = c->tile_features, last = d->ndim - 1, three = mode == 3;
    const grid_axis_t col = GRID_TP, row = GRID_TP2;
    const int in_align = d->dim[last] == DIM_F ? c->tile_ffn : d->cut == CUT_ROWPAR ? one.align : tf;
    switch (d->cut) {
    case CUT_VOCAB:
        pl = placement_cut_uneven(pl, last, col, tf);
        pl = placement_cut_uneven(pl, 0, row, tf);
        return three ? placement_cut_uneven(pl, 0, GRID_TP3, 1) : pl;
    case CUT_COLPAR:
    case CUT_ROWPAR: {
        const int first = d->cut == CUT_COLPAR; /* qkv, fc1 */
        const grid_axis_t out = three && first ? row : col, in = three && first ? col : row;
        const int out_align = first ? one.align : tf;
        pl = placement_cut_uneven(pl, 0, out, out_align);
        if (d->ndim >= 2) {
            if (three) pl = placement_cut_uneven(pl, 0, GRID_TP3, 1);
            return placement_cut_uneven(pl, last, in, in_align);
        }
        if (!three) return placement_cut_uneven(pl, 0, row, 1);
        pl = placement_cut_uneven(pl, 0, GRID_TP3, 1); /* a first's bias: the inner blocks */
        return placement_cut_uneven(pl, 0, col, 1);
    }
    default: /* replicated in 1-D: [C], [T, C] */
        pl = placement_cut_uneven(pl, last, col, tf);
        if (three) pl = placement_cut_uneven(pl, 0, GRID_TP3, 1);
        return placement_cut_uneven(pl, 0, row, 1);
    }
}

static tp_cut_t cut_of(const unit_tensor_t *d, const model_config_t *c, gpt_layout_opts_t lo) {
    const int row_linears = lo.row_linears != 0;
    const int D = c->hidden / c->heads, tf = c->tile_features;
    const int align = d->align == AL_HEADS3 ? lcm(3 * D, tf)
                      : d->align == AL_HEADS ? lcm(D, tf)
                      : d->align == AL_FFN   ? c->tile_ffn
                                             : 1;
    const int in_tile = d->ndim >= 2 && d->dim[d->ndim - 1] == DIM_F ? c->tile_ffn : tf;
    /* the output axis is the second last of a matrix (the last of a
     * vector), the input axis the last: a stacked [E, out, in] weight is
     * cut like each of its [out, in] matrices */
    const int out_axis = d->ndim >= 2 ? d->ndim - 2 : 0, in_axis = d->ndim - 1;
    /* column-then-row pairs may split heads and FFN tiles unevenly (whole
     * blocks; gpt_local_dims takes the same ranges); every linear
     * row-parallel splits evenly */
    const int uneven = !row_linears && (d->align == AL_FFN || param_head_unit(c) > 0);
    const int expert_tp = lo.expert_tp && !row_linears;
    switch (d->cut) {
    case CUT_REPL:
    case CUT_EXPERT: break;
    /* an expert's FFN: the dense MLP's cut under expert tensor
     * parallelism, else whole on every rank */
    case CUT_EXPERT_FFN: /* fc1's rows, its bias, fc2's columns: the FFN axis */
        for (int a = 0; expert_tp && a < d->ndim; a++)
            if (d->dim[a] == DIM_F) return (tp_cut_t){a, align, uneven};
        return REPL;
    case CUT_VOCAB: return (tp_cut_t){0, tf, 1}; /* whole tiles, unequal counts allowed */
    case CUT_COLPAR:
        if (!row_linears) return (tp_cut_t){out_axis, align, uneven};
        return d->ndim >= 2 ? (tp_cut_t){in_axis, in_tile, 0} : REPL;
    case CUT_ROWPAR: return (tp_cut_t){in_axis, row_linears ? in_tile : align, uneven};
    }
    return REPL;
}

static int build(param_table_t *t, const model_config_t *c, const int sizes[GRID_NAXES],
                 const int coord[GRID_NAXES], gpt_layout_opts_t lo, perr_t *err) {
    const int row_linears = lo.row_linears != 0;
    memset(t, 0, sizeof *t);
    const int tp = sizes[GRID_TP];
    if (tp < 1) return perr_set(err, "tensor-model-parallel-size: %d, expected >= 1", tp);
    /* whole heads on every rank: in equal numbers, or in unequal numbers
     * of whole head blocks where the cuts allow it (param_head_unit) */
    const int hu = row_linears ? 0 : param_head_unit(c);
    if (c->heads % tp && (!hu || c->heads % hu || c->heads / hu < tp)) {
        if (hu && c->heads % hu == 0 && !row_linears)
            return perr_set(err, "tensor-model-parallel-size: %d is more than the %d blocks of whole "
                                 "attention heads (%d heads, %d a block): every rank must hold one",
                            tp, c->heads / hu, c->heads, hu);
        return perr_set(err, "tensor-model-parallel-size: %d must divide the %d attention heads "
                             "(each rank holds whole heads%s)",
                        tp, c->heads, row_linears ? "; every-linear-row-parallel splits them equally" : "");
    }
    /* model_config_validate bounds layers; a caller that skipped it must
     * not wrap the count */
    if (c->layers < 0 || c->layers > MODEL_MAX_LAYERS)
        return perr_set(err, "layers (--num-layers) = %d: expected at most %d", c->layers,
                        MODEL_MAX_LAYERS);
    const int U = model_num_units(c);
    int n = 0;
    for (int u = 0; u < U; u++) n += model_unit_at(c, u).kind->n_tensors;
    t->info = calloc((size_t)n, sizeof *t->info);
    t->unit_first = calloc((size_t)U + 1, sizeof *t->unit_first);
    t->shared_unit = calloc((size_t)n, sizeof *t->shared_unit);
    t->n_units = U;
    if (!t->info || !t->unit_first || !t->shared_unit) {
        param_table_free(t);
        return perr_set(err, "out of memory for %d parameter tensors", n);
    }
    /* residual-branch output projections: sigma / sqrt(2L) */
    const float out_std = SIGMA * pm_rsqrtf(2.0f * (float)c->layers);
    char prefix[64], nm[96];
    int bad = 0;
    for (int u = 0; u < U && !bad; u++) {
        const unit_t unit = model_unit_at(c, u);
        const unit_kind_t *k = unit.kind;
        unit_prefix(&unit, prefix, sizeof prefix);
        t->unit_first[u] = t->count;
        for (int i = 0; i < k->n_tensors && !bad; i++) {
            const unit_tensor_t *d = &k->tensors[i];
            if (!unit_when(c, d->when)) continue;
            snprintf(nm, sizeof nm, "%s%s", prefix, d->suffix);
            const float std = d->std == STD_SIGMA ? SIGMA : d->std == STD_OUT ? out_std : 0.0f;
            int64_t shape[PL_MAX_DIMS];
            for (int a = 0; a < PL_MAX_DIMS; a++) shape[a] = a < d->ndim ? unit_dim(c, d->dim[a]) : 1;
            const tp_cut_t cut = cut_of(d, c, lo);
            placement_t pl = placement_replicated(d->ndim, shape);
            if (lo.tp_mode && tp > 1) /* Colossal's 2-D / 3-D */
                pl = tp_modes_placement(d, c, cut, lo.tp_mode, pl);
            else if (cut.axis >= 0 && d->cut == CUT_EXPERT_FFN && lo.expert_tp < tp)
                /* etp < tp: tp rank t holds piece t mod etp */
                pl = placement_cut_parts(pl, cut.axis, GRID_TP, cut.align, lo.expert_tp);
            else if (cut.axis >= 0)
                pl = cut.uneven ? placement_cut_uneven(pl, cut.axis, GRID_TP, cut.align)
                                : placement_cut(pl, cut.axis, GRID_TP, cut.align);
            bad |= add(t, sizes, coord, nm, d->ndim, shape, d->init, std, pl,
                       d->cut == CUT_EXPERT_FFN || d->cut == CUT_EXPERT,
                       lo.expert_fold, lo.expert_fold_n, d->weight_decay, err);
        }
    }
    t->unit_first[U] = t->count;
    t->out = -1;
    for (int i = 0; i < t->count; i++) t->shared_unit[i] = -1;
    for (int u = 0; u < U && !bad; u++) {
        const unit_kind_t *k = model_unit_at(c, u).kind;
        if (k->bind) k->bind(t, c, u, t->unit_first[u]);
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

int param_unit_of(const param_table_t *t, int i) {
    int u = 0;
    while (u + 1 < t->n_units && i >= t->unit_first[u + 1]) u++;
    return u;
}

void param_unit_range(const param_table_t *t, int u, int *first, int *last) {
    *first = t->unit_first[u];
    *last = t->unit_first[u + 1];
}

int param_table_build_at(param_table_t *t, const model_config_t *c, const int sizes[GRID_NAXES],
                         const int coord[GRID_NAXES], const gpt_units_t *units,
                         gpt_layout_opts_t lo, perr_t *err) {
    if (build(t, c, sizes, coord, lo, err)) return -1;
    if (units->n == 0) return 0;
    /* empty the tensors of other stages, then lay the rest out again */
    t->total = 0;
    for (int i = 0; i < t->count; i++) {
        param_info_t *p = &t->info[i];
        p->held = gpt_units_hold(units, param_unit_of(t, i)) ||
                  (t->shared_unit[i] >= 0 && gpt_units_hold(units, t->shared_unit[i]));
        if (p->held) {
            place(t, p, sizes, coord);
            continue;
        }
        for (int d = 0; d < PL_MAX_DIMS; d++) p->shape[d] = 0;
        p->numel = 0;
        p->offset = t->total;
    }
    return 0;
}

void param_table_free(param_table_t *t) {
    free(t->info);
    free(t->unit_first);
    free(t->shared_unit);
    memset(t, 0, sizeof *t);
}

int param_find(const param_table_t *t, const char *name) {
    for (int i = 0; i < t->count; i++)
        if (!strcmp(t->info[i].name, name)) return i;
    return -1;
}

/* One contiguous run of a normal-initialised tensor's block: n elements
 * from global flat index `global` of tensor P, stored at x. */
typedef struct {
    float *x;
    float std;
    uint64_t stream;
    size_t global, n;
    size_t first; /* elements of the runs before this one */
} init_run_t;

typedef struct {
    init_run_t *runs;
    int count, cap;
    float *tensor; /* the tensor being collected, its std and stream */
    float std;
    uint64_t stream;
    size_t total;
    int oom;
} init_plan_t;

static void collect_run(void *vctx, size_t global_flat, size_t local_flat, size_t n) {
    init_plan_t *pl = vctx;
    if (pl->oom) return;
    if (pl->count == pl->cap) {
        int cap = pl->cap ? 2 * pl->cap : 256;
        init_run_t *r = realloc(pl->runs, (size_t)cap * sizeof *r);
        if (!r) {
            pl->oom = 1;
            return;
        }
        pl->runs = r, pl->cap = cap;
    }
    pl->runs[pl->count++] = (init_run_t){pl->tensor + local_flat, pl->std, pl->stream, global_flat, n, pl->total};
    pl->total += n;
}

/* Floats per rng_fill_normal call: the scaling pass then reads them from
 * cache, not memory (16 KiB). */
#define INIT_CHUNK 4096

/* Elements [a, b) of run r: element k of tensor P is
 * std * rng_normal(seed, stream(P, 0), k), k global. */
static void init_normal_span(const init_run_t *r, uint64_t seed, size_t a, size_t b) {
    for (size_t j = a; j < b; j += INIT_CHUNK) {
        const size_t m = b - j < INIT_CHUNK ? b - j : INIT_CHUNK;
        float *x = r->x + j;
        rng_fill_normal(x, m, seed, r->stream, r->global + j);
        for (size_t k = 0; k < m; k++) x[k] = r->std * x[k];
    }
}

/* Elements per pool piece of the normal init: pieces of every run
 * concatenated, so that a few large tensors still spread over threads. */
#define INIT_PIECE ((size_t)1 << 20)

typedef struct {
    const init_plan_t *plan;
    uint64_t seed;
} init_job_t;

/* Piece i: elements [i, i+1) * INIT_PIECE of the concatenated runs. Every
 * number depends on its position only (I3), so any split gives the same
 * bits. */
static void init_piece(void *vjob, int piece, int worker) {
    (void)worker;
    const init_job_t *job = vjob;
    const init_plan_t *pl = job->plan;
    const size_t lo = (size_t)piece * INIT_PIECE, hi = lo + INIT_PIECE;
    int r = 0, top = pl->count; /* the last run with first <= lo */
    while (top - r > 1) {
        int mid = r + (top - r) / 2;
        if (pl->runs[mid].first <= lo) r = mid;
        else top = mid;
    }
    for (; r < pl->count && pl->runs[r].first < hi; r++) {
        const init_run_t *run = &pl->runs[r];
        size_t a = lo > run->first ? lo - run->first : 0;
        size_t b = hi - run->first < run->n ? hi - run->first : run->n;
        if (a < b) init_normal_span(run, job->seed, a, b);
    }
}

/* A tensor's runs straight away, on this thread. */
typedef struct {
    float *tensor;
    float std;
    uint64_t stream, seed;
} init_direct_t;

static void init_direct_run(void *vctx, size_t global_flat, size_t local_flat, size_t n) {
    const init_direct_t *d = vctx;
    const init_run_t r = {d->tensor + local_flat, d->std, d->stream, global_flat, n, 0};
    init_normal_span(&r, d->seed, 0, n);
}

static void init_normal_direct(const param_info_t *p, const int sizes[GRID_NAXES],
                               const int coord[GRID_NAXES], uint64_t seed, float *data) {
    init_direct_t d = {data + p->offset, p->init_std, rng_stream_id(p->name, 0), seed};
    placement_for_runs(&p->pl, sizes, coord, init_direct_run, &d);
}

void params_init_at(const param_table_t *t, const int sizes[GRID_NAXES],
                    const int coord[GRID_NAXES], uint64_t seed, float *data) {
    /* with compute threads (the golden run's --threads) the normal
     * tensors' runs are collected first, then spread over the pool */
    const int threaded = pool_threads() > 1;
    init_plan_t plan = {0};
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
        case INIT_NORMAL:
            if (!threaded) {
                init_normal_direct(p, sizes, coord, seed, data);
                break;
            }
            plan.tensor = x, plan.std = p->init_std, plan.stream = rng_stream_id(p->name, 0);
            placement_for_runs(&p->pl, sizes, coord, collect_run, &plan);
            break;
        }
    }
    if (!threaded) return;
    if (plan.oom) { /* no room for the plan: one thread does it all */
        for (int i = 0; i < t->count; i++)
            if (t->info[i].held && t->info[i].init == INIT_NORMAL)
                init_normal_direct(&t->info[i], sizes, coord, seed, data);
    } else {
        init_job_t job = {&plan, seed};
        pool_run(init_piece, &job, (int)((plan.total + INIT_PIECE - 1) / INIT_PIECE));
    }
    free(plan.runs);
}

void params_init_tp(const param_table_t *t, int tp, int tp_rank, uint64_t seed, float *data) {
    const gpt_layout_opts_t one_d = {0};
    const param_grid_t g = param_grid_tp(tp, tp_rank, one_d);
    params_init_at(t, g.sizes, g.coord, seed, data);
}

void params_init(const param_table_t *t, uint64_t seed, float *data) {
    params_init_tp(t, 1, 0, seed, data);
}
