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
 */
#include <stdio.h>

#include "parity/dp.h"

void dp_print_report(const dp_run_t *run, FILE *f) {
    const pconfig_t *pc = &run->pc;
    param_table_t t;
    if (param_table_build(&t, &run->model, NULL)) return;
    const double psi = (double)t.total, N = pc->dp, MB = 1e6;
    param_table_free(&t);
    const int z = pc->zero_stage;
    const double p_params = 4 * psi / (z >= 3 ? N : 1), p_grads = 4 * psi / (z >= 2 ? N : 1);
    const double p_opt = 8 * psi / (z >= 1 ? N : 1);
    fprintf(f, "memory per device (MB): ZeRO-%d, dp=%d, Psi=%.0f parameters (fp32: 16 Psi = %.2f MB)\n",
            z, pc->dp, psi, 16 * psi / MB);
    fprintf(f, "  %-6s %14s %14s %14s %14s\n", "device", "params", "grads", "optimizer", "activations");
    fprintf(f, "  %-6s %14.2f %14.2f %14.2f %14s   (ZeRO, fp32; grads + 8 Psi open exact sums = %.2f)\n",
            "ZeRO", p_params / MB, p_grads / MB, p_opt / MB, "-", (p_grads + 8 * psi) / MB);
    for (int i = 0; i < pc->dp && run->reports; i++) {
        const dp_device_report_t *r = &run->reports[i];
        fprintf(f, "  %-6d %14.2f %14.2f %14.2f %14.2f   (peak total %.2f%s)\n", i,
                r->peak[MEM_PARAMS] / MB, r->peak[MEM_GRADS] / MB, r->peak[MEM_OPTIMIZER] / MB,
                r->peak[MEM_ACTIVATIONS] / MB, r->peak_total / MB,
                z == 3 ? "; params include the units gathered while they run" : "");
    }
    if (!run->reports) return;
    const coll_counters_t *c = &run->reports[0].comm;
    double rs = 0, ag = 0, other = 0;
    for (int k = 0; k < COLL_NKINDS; k++) {
        double b = (double)c->bus_bytes[k];
        if (k == COLL_KIND_REDUCE_SCATTER) rs += b;
        else if (k == COLL_KIND_ALL_GATHER) ag += b;
        else other += b;
    }
    const double steps = run->steps > 0 ? run->steps : 1;
    const double per = (N - 1) / N * psi; /* elements a ring moves per rank for one pass over Psi */
    fprintf(f, "traffic of device 0 per step (bus bytes, nccl-tests convention):\n");
    fprintf(f, "  reduce-scatter of exact fp64 sums %10.2f MB = %.3f Psi elements\n", rs / steps / MB,
            rs / steps / 8 / (per > 0 ? per : 1));
    fprintf(f, "  all-gather of fp32 values          %10.2f MB = %.3f Psi elements\n", ag / steps / MB,
            ag / steps / 4 / (per > 0 ? per : 1));
    fprintf(f, "  other (loss, norm, barriers)       %10.4f MB\n", other / steps / MB);
    const dp_device_report_t *r0 = &run->reports[0];
    double busy = r0->seconds_compute + r0->seconds_reduce + r0->seconds_comm +
                  r0->seconds_optimizer;
    if (busy > 0) /* waits at barriers count in the phase that waited */
        fprintf(f, "time of device 0: compute %.1f ms, exact reductions %.1f ms (%.1f%%), "
                   "collectives %.1f ms (%.1f%%), optimizer %.1f ms (%.1f%%) per step\n",
                1e3 * r0->seconds_compute / steps, 1e3 * r0->seconds_reduce / steps,
                100 * r0->seconds_reduce / busy, 1e3 * r0->seconds_comm / steps,
                100 * r0->seconds_comm / busy, 1e3 * r0->seconds_optimizer / steps,
                100 * r0->seconds_optimizer / busy);
    int accum = pc->accum_degree;
    if (z == 3)
        fprintf(f, "  formula: 3 Psi for one microbatch; here (1 + 2 x %d microbatches) Psi x (N-1)/N, "
                   "plus the tied embeddings gathered again for the head\n", accum);
    else
        fprintf(f, "  formula: 2 Psi x (N-1)/N\n");
}
