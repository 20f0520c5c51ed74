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
 * by reports/tp_report.c.
 *
 * Reads only run_report.h's counters, which the engine fills: nothing here
 * calls into the engine (engine -> dp, never back).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "parity/pp.h"
#include "parity/run_report.h"

/* The traffic a collective family carries in a snapshot, by kind (every
 * dtype): zero when the rank made no call in it. */
static coll_tally_t family_kind(const coll_counters_t *c, const char *family, coll_kind_t kind) {
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
static double device_psi(const run_report_t *run) {
    const model_config_t cfg = run->cfg;
    pp_plan_t pp;
    if (pp_plan_build(&pp, &cfg, &run->pc, NULL)) return 0;
    double psi = 0;
    for (int s = 0; s < pp.pp; s++) {
        param_table_t t;
        const param_grid_t g = param_grid_tp(pconfig_model_tp(&run->pc, s), 0, pconfig_tp_opts(&run->pc));
        if (param_table_build_at(&t, &cfg, g.sizes, g.coord, &pp.units[s], pconfig_tp_opts(&run->pc),
                                 NULL))
            return 0;
        if ((double)t.total > psi) psi = (double)t.total;
        param_table_free(&t);
    }
    return psi;
}


static void print_memory(const run_report_t *run, double psi, FILE *f) {
    const pconfig_t *pc = &run->pc;
    const double N = pconfig_grad_ranks(pc), MB = 1e6;
    const int z = pc->zero_stage, tp = pc->tp > 1 ? pc->tp : 1, pp = pc->pp > 1 ? pc->pp : 1;
    const int cp = pc->cp > 1 ? pc->cp : 1, world = pc->world_size;
    const double p_params = 4 * psi / (z >= 3 ? N : 1), p_grads = 4 * psi / (z >= 2 ? N : 1);
    /* adamw8bit: a code byte each for m and v, and two fp32 absmax a block */
    const int q8 = run->cfg.optimizer == MODEL_OPT_ADAMW8BIT;
    const double opt_bytes = q8 ? 2.0 + 8.0 / run->cfg.optimizer_block : 8.0;
    const double p_opt = opt_bytes * psi / (z >= 1 ? N : 1);
    char ranks[48];
    if (cp > 1)
        snprintf(ranks, sizeof ranks, "dp x cp = %d x %d = %d", pc->dp, cp, (int)N);
    else
        snprintf(ranks, sizeof ranks, "dp=%d", pc->dp);
    fprintf(f, "memory per device (MB): ZeRO-%d, %s, Psi=%.0f parameters%s%s (fp32: 16 Psi = %.2f MB)\n",
            z, ranks, psi, tp > 1 ? " per tensor-parallel rank" : "",
            pp > 1 ? " of the largest pipeline stage" : "", 16 * psi / MB);
    fprintf(f, "  %-22s %12s %12s %12s %12s\n", "device", "params", "grads", "optimizer", "activations");
    fprintf(f, "  %-22s %12.2f %12.2f %12.2f %12s   (ZeRO, fp32%s; grads + 8 Psi open exact sums = %.2f)\n",
            "ZeRO", p_params / MB, p_grads / MB, p_opt / MB, "-",
            q8 ? ", 8-bit AdamW (2 + 8/block) Psi" : "", (p_grads + 8 * psi) / MB);
    rank_layout_t L;
    char label[48];
    const int grid = (tp > 1 || pp > 1 || cp > 1) && report_grid_layout(pc, &L) == 0;
    for (int i = 0; i < world && run->reports; i++) {
        const device_report_t *r = &run->reports[i];
        report_device_label(grid ? &L : NULL, i, 0, NULL, label, sizeof label);
        fprintf(f, "  %-22s %12.2f %12.2f %12.2f %12.2f   (peak total %.2f%s)\n", label,
                r->peak[MEM_PARAMS] / MB, r->peak[MEM_GRADS] / MB, r->peak[MEM_OPTIMIZER] / MB,
                r->peak[MEM_ACTIVATIONS] / MB, r->peak_total / MB,
                z == 3 ? "; params include the units gathered while they run" : "");
    }
    /* ZeRO-Offload: where the optimizer column's state went instead */
    if (pc->offload == PC_OFFLOAD_CPU && run->reports)
        fprintf(f, "  offload cpu: the optimizer shard in each rank's host arena, device 0's peak "
                   "%.2f MB (the formula's optimizer column), none in the device's\n",
                run->reports[0].host_peak / MB);
    else if (pc->offload == PC_OFFLOAD_NVME)
        fprintf(f, "  offload nvme: the optimizer shard in %s/parity-offload-<pid>-XXXXXX/"
                   "parity-optim-rank<R>.bin (%.2f MB a rank: the formula's optimizer column; "
                   "removed at the end); the device keeps one bucket's piece of m and v (its "
                   "optimizer column)\n",
                pc->offload_path, p_opt / MB);
}

/* Data parallelism's traffic: every family but tensor parallelism's and
 * the pipeline's (point to point, and the embedding group). */
static void print_traffic(const run_report_t *run, double psi, FILE *f) {
    const pconfig_t *pc = &run->pc;
    const double N = pconfig_grad_ranks(pc), MB = 1e6;
    const coll_counters_t *c = &run->reports[0].comm;
    double rs = 0, ag = 0, other = 0;
    for (int k = 0; k < COLL_NKINDS; k++) {
        double b = (double)c->bus_bytes[k] - (double)family_kind(c, "tp", (coll_kind_t)k).bus_bytes -
                   (double)family_kind(c, "pp", (coll_kind_t)k).bus_bytes -
                   (double)family_kind(c, "emb", (coll_kind_t)k).bus_bytes -
                   (double)family_kind(c, "cp", (coll_kind_t)k).bus_bytes;
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

static void print_time(const run_report_t *run, FILE *f) {
    const device_report_t *r0 = &run->reports[0];
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

int dp_print_zero_report(const run_report_t *run, FILE *f) {
    const pconfig_t *pc = &run->pc;
    const double psi = device_psi(run);
    if (psi <= 0) return -1;
    print_memory(run, psi, f);
    if (!run->reports) return 0;
    print_traffic(run, psi, f);
    print_time(run, f);
    if (pconfig_grad_ranks(pc) > 1 && pc->zero_stage == 3)
        fprintf(f, "  formula: 3 Psi for one microbatch; here (1 + 2 x %d microbatches) Psi x (N-1)/N, "
                   "plus the tied embeddings gathered again for the head\n", pc->accum_degree);
    else if (pconfig_grad_ranks(pc) > 1)
        fprintf(f, "  formula: 2 Psi x (N-1)/N\n");
    return 0;
}
