/* ep_report.c - what expert parallelism moves: the all-to-alls of the
 * experts' rows against the formula.
 *
 * Per MoE layer and microbatch a rank holding n tokens, each routed to k
 * experts, sends the rows of the experts it does not run to their owners
 * and gets their outputs back (forward), then the rows' output gradients
 * out and their input gradients back (backward): four all-to-alls of
 * about k n C fp32 values, of which (ep-1)/ep leave the rank when the
 * routing is balanced, Megatron's 2 k n C per direction. parity's rows
 * differ from that count in two ways, both reported: claims dropped over
 * capacity are not sent, and each (expert, sequence) block is padded
 * with zero rows to whole token tiles (the canonical tiles, I1). Copies
 * only: exactness adds nothing to these messages.
 *
 * Dependency: engine -> here, never back (run_report.h's run_report_t).
 */
#include "parity/coll.h"
#include "parity/run_report.h"

void ep_print_report(const run_report_t *run, FILE *f) {
    if (!run->reports) return;
    const pconfig_t *pc = &run->pc;
    const model_config_t cfg = run->cfg;
    const double MB = 1e6, steps = run->steps > 0 ? run->steps : 1, ep = pc->ep;
    const double k = cfg.moe_topk, C = cfg.hidden;
    const double n = (double)(pc->global_batch / pc->dp) * cfg.seq_length; /* tokens a rank routes */
    int moe_layers = 0;
    for (int l = 0; l < cfg.layers; l++) moe_layers += model_layer_is_moe(&cfg, l);
    const double layers = pc->pp > 1 ? (double)moe_layers / pc->pp : moe_layers;
    const device_report_t *r0 = &run->reports[0];
    const coll_family_t *fam = coll_counters_family(&r0->comm, "ep");
    coll_tally_t a2a = {0, 0, 0, 0, 0}, counts = {0, 0, 0, 0, 0};
    if (fam) {
        a2a = fam->by[COLL_KIND_ALL_TO_ALL_V][COLL_F32];
        counts = fam->by[COLL_KIND_ALL_GATHER][COLL_I32];
    }
    const double formula = 4 * k * n * C * 4 * (ep - 1) / ep * layers;
    fprintf(f, "expert parallelism (ep=%d of the dp=%d data-parallel ranks; %d experts, %d a rank), "
               "device 0 per step, %.0f MoE layers held, n = %.0f tokens routed to k = %.0f "
               "experts:\n",
            pc->ep, pc->dp, cfg.moe_experts, cfg.moe_experts / pc->ep, layers, n, k);
    fprintf(f, "  %-44s %10.3f MB   formula 4 k n C x 4 B x (ep-1)/ep x layers = %.3f MB "
               "(balanced routing, no drops, no padding): %.2fx\n",
            "all-to-all of expert rows, outputs, gradients", (double)a2a.sent / steps / MB,
            formula / MB, formula > 0 ? (double)a2a.sent / steps / formula : 0.0);
    fprintf(f, "  %-44s %10.6f MB   (each peer's rows per expert, int32)\n",
            "all-gather of the rows' layout", (double)counts.sent / steps / MB);
}
