/* placement.c - where a layout put each element of a dump tensor, for
 * the divergence report (engine.h's engine_placement_t): batch tensors by
 * sequence, microbatch and position; parameter-shaped tensors by the
 * tensor-parallel block that holds the element and the bucket piece (the
 * data-parallel plan, dp.h) whose owner rounds or updates it.
 */
#include "model/gpt.h"
#include "placement.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int engine_placement_init(engine_placement_t *pl, const model_config_t *model, const pconfig_t *pc,
                          perr_t *err) {
    memset(pl, 0, sizeof *pl);
    engine_replica_config(model, pc, &pl->cfg);
    pl->pc = *pc;
    if (pp_plan_build(&pl->pp, &pl->cfg, pc, err) || param_table_build(&pl->table, &pl->cfg, err))
        return -1;
    if (dp_plan_build(&pl->plan, &pl->table, &pl->cfg, pconfig_grad_ranks(pc), pc->zero_stage, pc->bucket_cap_mb,
                      err)) {
        param_table_free(&pl->table);
        return -1;
    }
    return 0;
}

void engine_placement_free(engine_placement_t *pl) {
    dp_plan_free(&pl->plan);
    param_table_free(&pl->table);
}

int engine_is_batch(const st_tensor_t *t, const char *what) {
    long unit, order;
    return t->ndim >= 2 && (!strncmp(what, "act.", 4) || !strncmp(what, "mask.", 5) ||
                            !strncmp(what, "grad_input.", 11) ||
                            !gpt_checkpoint_position(what, &unit, &order) ||
                            !strcmp(what, "input_ids") || !strcmp(what, "labels"));
}

void engine_device_name_sub(const pconfig_t *pc, int rank, const char *sub, char *buf, size_t cap) {
    rank_layout_t L;
    const int have = report_grid_layout(pc, &L) == 0;
    char both[160];
    if (have && pc->tp_mode != PC_TP_1D) { /* tp's index over its sub-axes, by their names */
        static const char *const names[4][3] = {
            {"", "", ""}, {"column", "row", ""}, {"column", "row", "depth"}, {"output", "input", "weight"}};
        int s3[3], t = layout_coord(&L, rank, "tp"), at = 0;
        pconfig_tp_sub(pc, s3);
        for (int a = 0; a < 3 && at < (int)sizeof both; t /= s3[a], a++)
            if (s3[a] > 1)
                at += snprintf(both + at, sizeof both - (size_t)at, "%s%s %d", at ? ", " : "",
                               names[pc->tp_mode][a], t % s3[a]);
        if (sub && sub[0] && at < (int)sizeof both) snprintf(both + at, sizeof both - (size_t)at, "; %s", sub);
        sub = both;
    }
    report_device_label(have ? &L : NULL, rank, 1, sub, buf, cap);
}

void engine_device_name(const pconfig_t *pc, int rank, char *buf, size_t cap) {
    engine_device_name_sub(pc, rank, NULL, buf, cap);
}

/* The world rank at (tp, cp, dp, stage). */
static int grid_device_at(const pconfig_t *pc, int tp_rank, int cp_rank, int ep_rank, int dp_rank,
                          int stage) {
    rank_layout_t L;
    if (report_grid_layout(pc, &L)) return dp_rank;
    int coords[LAYOUT_MAX_DIMS] = {0};
    for (int i = 0; i < L.ndims; i++)
        coords[i] = !strcmp(L.names[i], "tp")   ? tp_rank
                    : !strcmp(L.names[i], "cp") ? cp_rank
                    : !strcmp(L.names[i], "ep") ? ep_rank
                    : !strcmp(L.names[i], "dp") ? dp_rank
                    : !strcmp(L.names[i], "pp") ? stage
                                                : 0;
    return layout_rank_of(&L, coords);
}

/* The grid's sizes on every axis (engine.c's grid). */
static void grid_sizes(const pconfig_t *pc, int sizes[GRID_NAXES]) {
    pconfig_grid_sizes(pc, sizes);
}

/* The world rank of rank k of the gradient group of (tp rank, stage):
 * the token axes the tensor's placement replicates it over
 * (param_info_t.reduce: the driver's "dp-cp" groups), as ZeRO numbers
 * pieces. */
static int device_of(const pconfig_t *pc, unsigned reduce, int k, int tp_rank, int ep_rank,
                     int stage) {
    rank_layout_t L;
    int ranks[PARITY_MAX_DEVICES];
    char name[32];
    if (report_grid_layout(pc, &L)) return k;
    placement_reduce_name(reduce, name, sizeof name);
    const int n = layout_group_ranks(&L, grid_device_at(pc, tp_rank, 0, ep_rank, 0, stage), name, ranks);
    return k >= 0 && k < n ? ranks[k] : k;
}

/* The pipeline stage running unit u. */
static int stage_of_unit(const pp_plan_t *pp, int u) {
    for (int s = 0; s < pp->pp; s++)
        if (gpt_units_hold(&pp->units[s], u)) return s;
    return 0;
}

int engine_unit_chunk(const pp_plan_t *pp, int unit) {
    const gpt_units_t *u = &pp->units[stage_of_unit(pp, unit)];
    for (int c = 0; c < u->n; c++)
        if (unit >= u->lo[c] && unit < u->hi[c]) return c;
    return 0;
}

/* The unit a batch tensor ("step0." and a checkpoint's name) belongs to: the
 * one whose forward reports it (a checkpoint) or whose backward does (an
 * input gradient); inputs and labels: the first stage's, though every
 * stage loads them. */
static int unit_of_batch(const model_config_t *c, const char *name) {
    const char *what = strchr(name, '.');
    const int u = model_batch_unit(c, what ? what + 1 : name);
    return u < 0 ? 0 : u;
}

/* Sequences are sharded over dp, then split into microbatches of sizes
 * differing by at most one (pconfig.h), as run_step feeds them. */
void engine_batch_at(const engine_placement_t *pl, const st_tensor_t *t, uint64_t flat, engine_batch_at_t *b) {
    const pconfig_t *pc = &pl->pc;
    uint64_t per_seq = st_numel(t) / (uint64_t)t->shape[0];
    const int per_rank = pc->global_batch / pc->dp, accum = pc->accum_degree;
    b->seq = (int)(flat / per_seq);
    b->dp_rank = b->seq / per_rank;
    const int in_rank = b->seq % per_rank;
    /* context parallelism: the rank holding the element's position (axis
     * 1 of [B, T, ...]; the query row, axis 2, of [B, H, T, T]) */
    const int cp = pc->cp > 1 ? pc->cp : 1, T = pl->cfg.seq_length;
    b->cp_rank = 0, b->pos = -1, b->head = -1;
    const int pos_axis = t->ndim == 4 ? 2 : 1;
    if (cp > 1 && pc->cp_comm && t->ndim == 4) {
        /* Ulysses: attention tensors [B, H, T, T] are cut by head, every
         * rank holding all rows of heads/(tp cp) of its tp rank's heads */
        const int H = (int)t->shape[1], ht = H / (pc->tp > 1 ? pc->tp : 1);
        b->head = (int)((flat / ((uint64_t)T * (uint64_t)T)) % (uint64_t)H);
        b->cp_rank = ht >= cp ? (b->head % ht) / (ht / cp) : 0;
    } else if (t->ndim > pos_axis && t->shape[pos_axis] == (int64_t)T) {
        uint64_t inner = 1;
        for (int d = pos_axis + 1; d < t->ndim; d++) inner *= t->shape[d];
        b->pos = (int)((flat / inner) % (uint64_t)T);
        for (int r = 0; r < cp; r++) {
            const cp_runs_t runs = cp_runs(cp, r, T, pc->cp_comm ? CP_ULYSSES : CP_RING);
            for (int k = 0; k < runs.n; k++)
                if (b->pos >= runs.t0[k] && b->pos < runs.t0[k] + runs.len[k]) b->cp_rank = r;
        }
    }
    int k = 0, start = 0, size = 0;
    for (; k < accum; k++) {
        size = per_rank / accum + (k < per_rank % accum);
        if (in_rank < start + size) break;
        start += size;
    }
    b->micro = k, b->nmicro = accum, b->msize = size;
    b->unit = unit_of_batch(&pl->cfg, t->name);
    b->stage = stage_of_unit(&pl->pp, b->unit);
    b->device = grid_device_at(pc, 0, b->cp_rank, 0, b->dp_rank, b->stage);
}

static void describe_batch(const engine_placement_t *pl, const st_tensor_t *t, uint64_t flat,
                           char *buf, size_t cap) {
    const pconfig_t *pc = &pl->pc;
    engine_batch_at_t b;
    engine_batch_at(pl, t, flat, &b);
    const int tp = pc->tp > 1 ? pc->tp : 1, cp = pc->cp > 1 ? pc->cp : 1;
    char peers[64] = "", where[48] = "", ctx[48] = "";
    if (tp > 1) snprintf(peers, sizeof peers, " and its %d tensor-parallel peers", tp - 1);
    if (pl->pp.pp > 1) snprintf(where, sizeof where, ", pipeline stage %d", b.stage);
    if (cp > 1) snprintf(ctx, sizeof ctx, ", context-parallel rank %d", b.cp_rank);
    snprintf(buf, cap, "device %d (dp rank %d%s%s)%s, microbatch %d of %d (%d sequences), sequence %d",
             b.device, b.dp_rank, ctx, where, peers, b.micro, b.nmicro, b.msize, b.seq);
}

/* Where element `flat` of global tensor i lies on a stage's devices:
 * the first grid coordinate (tp fastest, the stage's) whose block holds
 * it and is not an extra copy (a tensor every tp rank holds whole: rank
 * 0's, the copy that counts), its tensor-parallel coordinate, its
 * expert-parallel one (experts cut over ep) and its index there. */
static int tp_locate(const param_info_t *pi, const int sizes[GRID_NAXES], int stage, uint64_t flat,
                     size_t *local, int *ep_rank) {
    int64_t idx[PL_MAX_DIMS], rest = (int64_t)flat;
    for (int d = pi->pl.ndim - 1; d >= 0; d--) idx[d] = rest % pi->pl.shape[d], rest /= pi->pl.shape[d];
    int world = 1;
    for (int a = 0; a < GRID_NAXES; a++) world *= a == GRID_PP ? 1 : sizes[a];
    for (int k = 0; k < world; k++) {
        int coord[GRID_NAXES], r = k;
        for (int a = 0; a < GRID_NAXES; a++)
            coord[a] = a == GRID_PP ? stage : r % sizes[a], r /= a == GRID_PP ? 1 : sizes[a];
        if (placement_is_extra_replica(&pi->pl, sizes, coord)) continue;
        int64_t lo[PL_MAX_DIMS], ext[PL_MAX_DIMS];
        placement_block(&pi->pl, sizes, coord, lo, ext);
        int in = 1;
        int64_t at = 0;
        for (int d = 0; d < pi->pl.ndim && in; d++) {
            in = idx[d] >= lo[d] && idx[d] < lo[d] + ext[d];
            at = at * ext[d] + (idx[d] - lo[d]);
        }
        if (in) {
            *local = (size_t)at, *ep_rank = coord[GRID_EP];
            return coord[GRID_TP];
        }
    }
    *local = (size_t)flat, *ep_rank = 0;
    return 0;
}

/* Which device made element `flat` of a parameter-shaped tensor: its
 * stage, the tensor-parallel rank whose block holds it, and, from that
 * part's own table and plan, the bucket piece and the gradient-group rank
 * that owns it, with its world rank on the real grid. */
int engine_param_at(const engine_placement_t *pl, const char *pname, uint64_t flat, engine_param_at_t *o) {
    const pconfig_t *pc = &pl->pc;
    memset(o, 0, sizeof *o);
    if ((o->i = param_find(&pl->table, pname)) < 0) return -1;
    o->unit = param_unit_of(&pl->table, o->i);
    o->stage = stage_of_unit(&pl->pp, o->unit);
    o->tied = pp_tied_split(&pl->pp) && pl->cfg.tied && o->i == pl->table.wte;
    param_table_t t;
    dp_plan_t p;
    int sizes[GRID_NAXES], coord[GRID_NAXES] = {0};
    grid_sizes(pc, sizes);
    coord[GRID_PP] = o->stage;
    if (param_table_build_at(&t, &pl->cfg, sizes, coord, &pl->pp.units[o->stage], pconfig_tp_opts(pc),
                             NULL))
        return -2;
    if (dp_plan_build_grid(&p, &t, &pl->cfg, sizes, pc->zero_stage, pc->bucket_cap_mb, NULL)) {
        param_table_free(&t);
        return -2;
    }
    int er;
    o->tr = tp_locate(&t.info[o->i], sizes, o->stage, flat, &o->local, &er);
    dp_owner(&p, t.info[o->i].offset + o->local, &o->b, &o->k);
    dp_piece(&p, o->b, o->k, &o->lo, &o->hi);
    o->N = o->b >= 0 ? p.buckets[o->b].n : p.dp, o->z = p.stage;
    o->owner = device_of(pc, t.info[o->i].reduce, o->k, o->tr, er, o->stage);
    dp_plan_free(&p);
    param_table_free(&t);
    return 0;
}

/* kind: "grad", "param", "exp_avg" or "exp_avg_sq". */
static void describe_param(const engine_placement_t *pl, const char *pname, const char *kind,
                           uint64_t flat, char *buf, size_t cap) {
    const pconfig_t *pc = &pl->pc;
    const int tp = pc->tp > 1 ? pc->tp : 1;
    engine_param_at_t a;
    const int rc = engine_param_at(pl, pname, flat, &a);
    if (rc == -1) snprintf(buf, cap, "(no parameter named %s)", pname);
    if (rc) return;
    const int N = a.N, z = a.z;
    char part[160] = "", who[96];
    engine_device_name(pc, a.owner, who, sizeof who);
    if (tp > 1 || pl->pp.pp > 1)
        snprintf(part, sizeof part, "the block of tensor-parallel rank %d%s (element %zu there), ",
                 a.tr, pl->pp.pp > 1 ? " on its pipeline stage" : "", a.local);
    const char *tied = a.tied && !strcmp(kind, "grad")
        ? "; the tied word embedding: the first and the last stage's open sums are all-reduced "
          "exactly over the embedding group before this rounding"
        : "";
    char piece[256];
    snprintf(piece, sizeof piece, "piece %d of bucket %d, flat elements [%zu, %zu), owned by "
             "gradient-group rank %d of %d, device %s", a.k, a.b, a.lo, a.hi, a.k, N, who);
    if (!strcmp(kind, "grad"))
        snprintf(buf, cap, "%sthe exact reduce-scatter rounds it in %s (%s)%s", part, piece,
                 z == 0 ? "then DDP's all-gather copies it to every replica, each checked"
                 : z == 1 ? "ZeRO-1: the owner's optimizer shard reads it"
                          : "it stays in the owner's gradient shard",
                 tied);
    else if (!strcmp(kind, "param") && z < 3)
        snprintf(buf, cap, "%s%s; the dump holds data-parallel rank 0's copy and checks every "
                 "other replica against it", part,
                 z == 0 ? "DDP: every replica's AdamW updates it from the same gradients"
                        : "AdamW on the owner's ZeRO optimizer shard, then the all-gather");
    else if (z == 0) /* DDP's AdamW state: whole on every replica */
        snprintf(buf, cap, "%sDDP: every replica keeps AdamW's %s whole; the dump holds data-"
                 "parallel rank 0's and checks every other replica against it", part, kind);
    else
        snprintf(buf, cap, "%sAdamW on the owner's ZeRO-%d shard: %s", part, z, piece);
}

void engine_describe_element(const engine_placement_t *pl, const st_tensor_t *t, uint64_t flat, char *buf,
                             size_t cap) {
    const int N = pconfig_grad_ranks(&pl->pc);
    buf[0] = 0;
    if (!strncmp(t->name, "init.", 5)) {
        snprintf(buf, cap, "the initial values: params_init once on the host (position-keyed, I3), "
                           "copied to every device");
        return;
    }
    const char *what = strchr(t->name, '.');
    what = what ? what + 1 : t->name;
    if (engine_is_batch(t, what))
        describe_batch(pl, t, flat, buf, cap);
    else if (!strncmp(what, "grad.", 5))
        describe_param(pl, what + 5, "grad", flat, buf, cap);
    else if (!strncmp(what, "param.", 6))
        describe_param(pl, what + 6, "param", flat, buf, cap);
    else if (!strncmp(what, "exp_avg.", 8))
        describe_param(pl, what + 8, "exp_avg", flat, buf, cap);
    else if (!strncmp(what, "exp_avg_sq.", 11))
        describe_param(pl, what + 11, "exp_avg_sq", flat, buf, cap);
    else if (!strcmp(what, "loss") || !strcmp(what, "grad_norm"))
        snprintf(buf, cap, "every device: an exact all-reduce of the %d devices' open sums, rounded "
                           "once; the dump holds device 0's, and every device's is checked against it",
                 N);
    else if (!strncmp(what, "moe.", 4))
        snprintf(buf, cap, "the step's routing statistics: each sequence counted by the devices "
                           "of tp and cp coordinate 0 that route it, summed over every device "
                           "(engine_moe_stats); the dump holds device 0's sums");
    else if (!strcmp(what, "adam_t"))
        snprintf(buf, cap, "every device: AdamW's step count; the dump holds device 0's, and "
                           "every device's is checked against it");
    else if (!strcmp(what, "lr"))
        snprintf(buf, cap, "every device: lr_schedule of the step; the dump holds device 0's, and "
                           "every device's is checked against it");
}
