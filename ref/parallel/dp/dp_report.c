/* dp_report.c - memory and traffic of a data-parallel run next to the
 * ZeRO paper's formulas.
 *
 * The paper counts mixed-precision Adam: 2 bytes of fp16 parameters, 2 of
 * fp16 gradients and K = 12 of fp32 optimizer state per parameter (16 Psi
 * in all). parity trains in fp32, so the same accounting becomes 4 + 4 + 8
 * (AdamW m and v) = 16 Psi bytes: baseline 16 Psi; stage 1 8 Psi + 8 Psi/N;
 * stage 2 4 Psi + 12 Psi/N; stage 3 16 Psi/N. On top, parity keeps the
 * gradients as open exact sums (one fp64 each, 8 Psi) while a step
 * accumulates: the price of I2, shown on its own line.
 * Traffic: per rank, DDP and stages 1-2 move 2 Psi elements (a
 * reduce-scatter of gradients and an all-gather of gradients or
 * parameters), stage 3 3 Psi (all-gathers of parameters in the forward
 * and the backward of every microbatch, and the reduce-scatter).
 * With tensor parallelism Psi is what one tensor-parallel rank holds (its
 * blocks and the replicated tensors), the device rows name their grid
 * coordinates, and the tensor-parallel group's traffic (collective family
 * "tp", coll.h) is left out here and reported against Megatron's formulas
 * by dp_report_tp.c.
 */
#include "dp_report.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "parity/dp.h"

coll_tally_t dp_family_kind(const coll_counters_t *c, const char *family, coll_kind_t kind) {
    coll_tally_t t = {0, 0, 0, 0, 0};
    const coll_family_t *fam = coll_counters_family(c, family);
    for (int d = 0; fam && d < COLL_NDTYPES; d++) {
        const coll_tally_t *x = &fam->by[kind][d];
        t.calls += x->calls, t.bytes += x->bytes, t.bus_bytes += x->bus_bytes;
        t.sent += x->sent, t.recv += x->recv;
    }
    return t;
}

/* Parameters one device's replica holds: a tensor-parallel rank's table
 * (every rank's has the same shapes) of the largest pipeline stage. */
static double device_psi(const dp_run_t *run) {
    model_config_t cfg;
    dp_replica_config(&run->model, &run->pc, &cfg);
    pp_plan_t pp;
    if (pp_plan_build(&pp, &cfg, &run->pc, NULL)) return 0;
    double psi = 0;
    for (int s = 0; s < pp.pp; s++) {
        param_table_t t;
        if (param_table_build_mp(&t, &cfg, run->pc.tp > 1 ? run->pc.tp : 1, &pp.units[s],
                                 pconfig_tp_opts(&run->pc), NULL))
            return 0;
        if ((double)t.total > psi) psi = (double)t.total;
        param_table_free(&t);
    }
    return psi;
}

/* "0" with data parallelism alone; "0 (tp 1, dp 0)" on a grid, with the
 * context-parallel rank and the stage when there are some (the report's
 * table). full: every axis, sizes of 1 included, and the sub-axes `sub`
 * (may be NULL) after a ';': "9 (tp 1, cp 0, ep 0, dp 0, pp 1; vpp chunk 1)"
 * (the checker's). */
static void device_label(const rank_layout_t *L, int rank, int full, const char *sub, char *buf,
                         size_t cap) {
    if (!L) {
        snprintf(buf, cap, "%d", rank);
        return;
    }
    if (full) {
        snprintf(buf, cap, "%d (tp %d, cp %d, ep %d, dp %d, pp %d%s%s)", rank,
                 layout_coord(L, rank, "tp"), layout_coord(L, rank, "cp"),
                 layout_coord(L, rank, "ep"), layout_coord(L, rank, "dp"),
                 layout_coord(L, rank, "pp"), sub && sub[0] ? "; " : "", sub ? sub : "");
        return;
    }
    int at = snprintf(buf, cap, "%d (tp %d", rank, layout_coord(L, rank, "tp"));
    if (layout_size(L, "cp") > 1 && at < (int)cap)
        at += snprintf(buf + at, cap - (size_t)at, ", cp %d", layout_coord(L, rank, "cp"));
    if (at < (int)cap) at += snprintf(buf + at, cap - (size_t)at, ", dp %d", layout_coord(L, rank, "dp"));
    if (layout_size(L, "pp") > 1 && at < (int)cap)
        at += snprintf(buf + at, cap - (size_t)at, ", pp %d", layout_coord(L, rank, "pp"));
    if (at < (int)cap) snprintf(buf + at, cap - (size_t)at, ")");
}

/* The grid's sizes as layout_init reads them. */
static void grid_sizes(const pconfig_t *pc, char *buf, size_t cap) {
    snprintf(buf, cap, "tp=%d,cp=%d,dp=%d,pp=%d", pc->tp > 1 ? pc->tp : 1, pc->cp > 1 ? pc->cp : 1,
             pc->dp, pc->pp > 1 ? pc->pp : 1);
}

static void print_memory(const dp_run_t *run, double psi, FILE *f) {
    const pconfig_t *pc = &run->pc;
    const double N = pconfig_grad_ranks(pc), MB = 1e6;
    const int z = pc->zero_stage, tp = pc->tp > 1 ? pc->tp : 1, pp = pc->pp > 1 ? pc->pp : 1;
    const int cp = pc->cp > 1 ? pc->cp : 1, world = tp * cp * pc->dp * pp;
    const double p_params = 4 * psi / (z >= 3 ? N : 1), p_grads = 4 * psi / (z >= 2 ? N : 1);
    const double p_opt = 8 * psi / (z >= 1 ? N : 1);
    char ranks[48];
    if (cp > 1)
        snprintf(ranks, sizeof ranks, "dp x cp = %d x %d = %d", pc->dp, cp, (int)N);
    else
        snprintf(ranks, sizeof ranks, "dp=%d", pc->dp);
    fprintf(f, "memory per device (MB): ZeRO-%d, %s, Psi=%.0f parameters%s%s (fp32: 16 Psi = %.2f MB)\n",
            z, ranks, psi, tp > 1 ? " per tensor-parallel rank" : "",
            pp > 1 ? " of the largest pipeline stage" : "", 16 * psi / MB);
    fprintf(f, "  %-22s %12s %12s %12s %12s\n", "device", "params", "grads", "optimizer", "activations");
    fprintf(f, "  %-22s %12.2f %12.2f %12.2f %12s   (ZeRO, fp32; grads + 8 Psi open exact sums = %.2f)\n",
            "ZeRO", p_params / MB, p_grads / MB, p_opt / MB, "-", (p_grads + 8 * psi) / MB);
    rank_layout_t L;
    char sizes[64], label[48];
    grid_sizes(pc, sizes, sizeof sizes);
    const int grid = (tp > 1 || pp > 1 || cp > 1) &&
                     layout_init_mapped(&L, pc->order, sizes, pc->rank_list, pc->n_rank_list, NULL) == 0;
    for (int i = 0; i < world && run->reports; i++) {
        const dp_device_report_t *r = &run->reports[i];
        device_label(grid ? &L : NULL, i, 0, NULL, label, sizeof label);
        fprintf(f, "  %-22s %12.2f %12.2f %12.2f %12.2f   (peak total %.2f%s)\n", label,
                r->peak[MEM_PARAMS] / MB, r->peak[MEM_GRADS] / MB, r->peak[MEM_OPTIMIZER] / MB,
                r->peak[MEM_ACTIVATIONS] / MB, r->peak_total / MB,
                z == 3 ? "; params include the units gathered while they run" : "");
    }
}

/* Data parallelism's traffic: every family but tensor parallelism's and
 * the pipeline's (point to point, and the embedding group). */
static void print_traffic(const dp_run_t *run, double psi, FILE *f) {
    const pconfig_t *pc = &run->pc;
    const double N = pconfig_grad_ranks(pc), MB = 1e6;
    const coll_counters_t *c = &run->reports[0].comm;
    double rs = 0, ag = 0, other = 0;
    for (int k = 0; k < COLL_NKINDS; k++) {
        double b = (double)c->bus_bytes[k] - (double)dp_family_kind(c, "tp", (coll_kind_t)k).bus_bytes -
                   (double)dp_family_kind(c, "pp", (coll_kind_t)k).bus_bytes -
                   (double)dp_family_kind(c, "emb", (coll_kind_t)k).bus_bytes -
                   (double)dp_family_kind(c, "cp", (coll_kind_t)k).bus_bytes;
        if (k == COLL_KIND_REDUCE_SCATTER) rs += b;
        else if (k == COLL_KIND_ALL_GATHER) ag += b;
        else other += b;
    }
    const double steps = run->steps > 0 ? run->steps : 1;
    const double per = (N - 1) / N * psi; /* elements a ring moves per rank for one pass over Psi */
    fprintf(f, "traffic of device 0 per step (bus bytes, nccl-tests convention)%s:\n",
            pc->tp > 1 || pc->pp > 1 || pc->cp > 1 ? ", data-parallel groups" : "");
    if (per > 0) {
        fprintf(f, "  reduce-scatter of exact fp64 sums %10.2f MB = %.3f Psi elements\n",
                rs / steps / MB, rs / steps / 8 / per);
        fprintf(f, "  all-gather of fp32 values          %10.2f MB = %.3f Psi elements\n",
                ag / steps / MB, ag / steps / 4 / per);
    }
    fprintf(f, "  other (loss, norm, barriers)       %10.4f MB\n", other / steps / MB);
}

static void print_time(const dp_run_t *run, FILE *f) {
    const dp_device_report_t *r0 = &run->reports[0];
    const double steps = run->steps > 0 ? run->steps : 1;
    double busy = r0->seconds_compute + r0->seconds_reduce + r0->seconds_comm +
                  r0->seconds_optimizer;
    if (busy > 0) /* waits at barriers count in the phase that waited */
        fprintf(f, "time of device 0: compute %.1f ms, exact reductions %.1f ms (%.1f%%), "
                   "collectives %.1f ms (%.1f%%), optimizer %.1f ms (%.1f%%) per step\n",
                1e3 * r0->seconds_compute / steps, 1e3 * r0->seconds_reduce / steps,
                100 * r0->seconds_reduce / busy, 1e3 * r0->seconds_comm / steps,
                100 * r0->seconds_comm / busy, 1e3 * r0->seconds_optimizer / steps,
                100 * r0->seconds_optimizer / busy);
}

void dp_print_report(const dp_run_t *run, FILE *f) {
    const pconfig_t *pc = &run->pc;
    const double psi = device_psi(run);
    if (psi <= 0) return;
    print_memory(run, psi, f);
    if (!run->reports) return;
    print_traffic(run, psi, f);
    print_time(run, f);
    if (pconfig_grad_ranks(pc) > 1 && pc->zero_stage == 3)
        fprintf(f, "  formula: 3 Psi for one microbatch; here (1 + 2 x %d microbatches) Psi x (N-1)/N, "
                   "plus the tied embeddings gathered again for the head\n", pc->accum_degree);
    else if (pconfig_grad_ranks(pc) > 1)
        fprintf(f, "  formula: 2 Psi x (N-1)/N\n");
    if (pc->tp > 1) dp_print_tp_report(run, f);
    if (pc->cp > 1) dp_print_cp_report(run, f);
    if (pc->pp > 1) dp_print_pp_report(run, run->trace_path, f);
}

/* ---- who produced an element: the divergence report -------------------- */

int dp_placement_init(dp_placement_t *pl, const model_config_t *model, const pconfig_t *pc,
                      perr_t *err) {
    memset(pl, 0, sizeof *pl);
    dp_replica_config(model, pc, &pl->cfg);
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

void dp_placement_free(dp_placement_t *pl) {
    dp_plan_free(&pl->plan);
    param_table_free(&pl->table);
}

int dp_is_batch(const st_tensor_t *t, const char *what) {
    return t->ndim >= 2 && (!strncmp(what, "act.", 4) || !strncmp(what, "mask.", 5) ||
                            !strncmp(what, "grad_input.", 11) ||
                            !strcmp(what, "logits") || !strcmp(what, "input_ids") ||
                            !strcmp(what, "labels"));
}

int dp_grid_layout(const pconfig_t *pc, rank_layout_t *L) {
    char sizes[64];
    grid_sizes(pc, sizes, sizeof sizes);
    return layout_init_mapped(L, pc->order, sizes, pc->rank_list, pc->n_rank_list, NULL);
}

void dp_device_name_sub(const pconfig_t *pc, int rank, const char *sub, char *buf, size_t cap) {
    rank_layout_t L;
    device_label(dp_grid_layout(pc, &L) == 0 ? &L : NULL, rank, 1, sub, buf, cap);
}

void dp_device_name(const pconfig_t *pc, int rank, char *buf, size_t cap) {
    dp_device_name_sub(pc, rank, NULL, buf, cap);
}

/* The world rank at (tp, cp, dp, stage). */
static int grid_device_at(const pconfig_t *pc, int tp_rank, int cp_rank, int dp_rank, int stage) {
    rank_layout_t L;
    if (dp_grid_layout(pc, &L)) return dp_rank;
    int coords[LAYOUT_MAX_DIMS] = {0};
    for (int i = 0; i < L.ndims; i++)
        coords[i] = !strcmp(L.names[i], "tp")   ? tp_rank
                    : !strcmp(L.names[i], "cp") ? cp_rank
                    : !strcmp(L.names[i], "dp") ? dp_rank
                    : !strcmp(L.names[i], "pp") ? stage
                                                : 0;
    return layout_rank_of(&L, coords);
}

/* The world rank of rank k of the gradient group of (tp rank, stage)
 * (data x context parallel ranks: the driver's "dp-cp" groups, as ZeRO
 * numbers pieces). */
static int device_of(const pconfig_t *pc, int k, int tp_rank, int stage) {
    rank_layout_t L;
    int ranks[PARITY_MAX_DEVICES];
    if (dp_grid_layout(pc, &L)) return k;
    const int n = layout_group_ranks(&L, grid_device_at(pc, tp_rank, 0, 0, stage), "dp-cp", ranks);
    return k >= 0 && k < n ? ranks[k] : k;
}

/* The pipeline stage running unit u. */
static int stage_of_unit(const pp_plan_t *pp, int u) {
    for (int s = 0; s < pp->pp; s++)
        if (gpt_units_hold(&pp->units[s], u)) return s;
    return 0;
}

int dp_unit_chunk(const pp_plan_t *pp, int unit) {
    const gpt_units_t *u = &pp->units[stage_of_unit(pp, unit)];
    for (int c = 0; c < u->n; c++)
        if (unit >= u->lo[c] && unit < u->hi[c]) return c;
    return 0;
}

/* The unit a batch tensor's name belongs to: the embedding's, layer N's,
 * the head's (inputs and labels: the first stage's, though every stage loads them). */
static int unit_of_batch(const model_config_t *c, const char *what) {
    const char *l = strstr(what, "layers.");
    if (l) return 1 + atoi(l + 7);
    if (!strcmp(what, "logits") || strstr(what, "final_layernorm") || strstr(what, "head"))
        return c->layers + 1;
    return 0;
}

/* The unit whose tensors include table entry i (params.c's order). */
static int unit_of_param(const param_table_t *t, const model_config_t *c, int i) {
    (void)c;
    return param_unit_of(t, i);
}

/* Sequences are sharded over dp, then split into microbatches of sizes
 * differing by at most one (pconfig.h), as run_step feeds them. */
void dp_batch_at(const dp_placement_t *pl, const st_tensor_t *t, uint64_t flat, dp_batch_at_t *b) {
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
    b->device = grid_device_at(pc, 0, b->cp_rank, b->dp_rank, b->stage);
}

static void describe_batch(const dp_placement_t *pl, const st_tensor_t *t, uint64_t flat,
                           char *buf, size_t cap) {
    const pconfig_t *pc = &pl->pc;
    dp_batch_at_t b;
    dp_batch_at(pl, t, flat, &b);
    const int tp = pc->tp > 1 ? pc->tp : 1, cp = pc->cp > 1 ? pc->cp : 1;
    char peers[64] = "", where[48] = "", ctx[48] = "";
    if (tp > 1) snprintf(peers, sizeof peers, " and its %d tensor-parallel peers", tp - 1);
    if (pl->pp.pp > 1) snprintf(where, sizeof where, ", pipeline stage %d", b.stage);
    if (cp > 1) snprintf(ctx, sizeof ctx, ", context-parallel rank %d", b.cp_rank);
    snprintf(buf, cap, "device %d (dp rank %d%s%s)%s, microbatch %d of %d (%d sequences), sequence %d",
             b.device, b.dp_rank, ctx, where, peers, b.micro, b.nmicro, b.msize, b.seq);
}

/* Where element `flat` of global tensor i lies on a stage's tensor-
 * parallel ranks: the rank whose block holds it (a tensor every rank
 * holds whole: rank 0's, the copy that counts) and its index there. */
static int tp_locate(const param_info_t *pi, int tp, uint64_t flat, size_t *local) {
    int64_t idx[PL_MAX_DIMS], rest = (int64_t)flat;
    for (int d = pi->pl.ndim - 1; d >= 0; d--) idx[d] = rest % pi->pl.shape[d], rest /= pi->pl.shape[d];
    const int sizes[GRID_NAXES] = {tp, 1, 1, 1, 1};
    for (int r = 0; r < tp; r++) {
        const int coord[GRID_NAXES] = {r, 0, 0, 0, 0};
        int64_t lo[PL_MAX_DIMS], ext[PL_MAX_DIMS];
        placement_block(&pi->pl, sizes, coord, lo, ext);
        int in = 1;
        int64_t at = 0;
        for (int d = 0; d < pi->pl.ndim && in; d++) {
            in = idx[d] >= lo[d] && idx[d] < lo[d] + ext[d];
            at = at * ext[d] + (idx[d] - lo[d]);
        }
        if (in) {
            *local = (size_t)at;
            return r;
        }
    }
    *local = (size_t)flat;
    return 0;
}

/* Which device made element `flat` of a parameter-shaped tensor: its
 * stage, the tensor-parallel rank whose block holds it, and, from that
 * part's own table and plan, the bucket piece and the gradient-group rank
 * that owns it, with its world rank on the real grid. */
int dp_param_at(const dp_placement_t *pl, const char *pname, uint64_t flat, dp_param_at_t *o) {
    const pconfig_t *pc = &pl->pc;
    const int tp = pc->tp > 1 ? pc->tp : 1;
    memset(o, 0, sizeof *o);
    if ((o->i = param_find(&pl->table, pname)) < 0) return -1;
    o->unit = unit_of_param(&pl->table, &pl->cfg, o->i);
    o->stage = stage_of_unit(&pl->pp, o->unit);
    o->tied = pl->pp.pp > 1 && pl->cfg.tied && o->i == pl->table.wte;
    param_table_t t;
    dp_plan_t p;
    if (param_table_build_mp(&t, &pl->cfg, tp, &pl->pp.units[o->stage], pconfig_tp_opts(pc), NULL))
        return -2;
    if (dp_plan_build(&p, &t, &pl->cfg, pconfig_grad_ranks(pc), pc->zero_stage, pc->bucket_cap_mb,
                      NULL)) {
        param_table_free(&t);
        return -2;
    }
    o->tr = tp_locate(&t.info[o->i], tp, flat, &o->local);
    dp_owner(&p, t.info[o->i].offset + o->local, &o->b, &o->k);
    dp_piece(&p, o->b, o->k, &o->lo, &o->hi);
    o->N = p.dp, o->z = p.stage, o->owner = device_of(pc, o->k, o->tr, o->stage);
    dp_plan_free(&p);
    param_table_free(&t);
    return 0;
}

/* kind: "grad", "param", "exp_avg" or "exp_avg_sq". */
static void describe_param(const dp_placement_t *pl, const char *pname, const char *kind,
                           uint64_t flat, char *buf, size_t cap) {
    const pconfig_t *pc = &pl->pc;
    const int tp = pc->tp > 1 ? pc->tp : 1;
    dp_param_at_t a;
    const int rc = dp_param_at(pl, pname, flat, &a);
    if (rc == -1) snprintf(buf, cap, "(no parameter named %s)", pname);
    if (rc) return;
    const int N = a.N, z = a.z;
    char part[160] = "", who[96];
    dp_device_name(pc, a.owner, who, sizeof who);
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

void dp_describe_element(const dp_placement_t *pl, const st_tensor_t *t, uint64_t flat, char *buf,
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
    if (dp_is_batch(t, what))
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
    else if (!strcmp(what, "adam_t"))
        snprintf(buf, cap, "every device: AdamW's step count; the dump holds device 0's, and "
                           "every device's is checked against it");
    else if (!strcmp(what, "lr"))
        snprintf(buf, cap, "every device: lr_schedule of the step; the dump holds device 0's, and "
                           "every device's is checked against it");
}
