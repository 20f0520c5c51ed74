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
 * only: exactness adds nothing to these messages. Then the load: how
 * unevenly the router spread the tokens over experts and ep ranks.
 *
 * Dependency: engine -> here, never back (run_report.h's run_report_t).
 */
#include "parity/coll.h"
#include "parity/run_report.h"

/* Load over the run, per MoE layer: tokens routed to the busiest
 * expert and to the busiest ep rank's experts against the mean (1.00:
 * balanced; an ep rank's compute and all-to-all volume follow its
 * experts' rows), and the claims dropped over capacity. */
static void print_load(const run_report_t *run, FILE *f) {
    const model_config_t *c = &run->cfg;
    const int E = c->moe_experts, ep = run->pc.ep, El = E / ep;
    for (int l = 0; l < c->layers; l++) {
        if (!model_layer_is_moe(c, l)) continue;
        int64_t per_e[MODEL_MAX_EXPERTS] = {0}, dropped = 0, total = 0;
        for (int s = 0; s < run->moe_nsteps; s++)
            for (int e = 0; e < E; e++) {
                per_e[e] += run->moe_steps[s].routed[(size_t)l * E + e];
                dropped += run->moe_steps[s].dropped[(size_t)l * E + e];
            }
        int64_t max_e = 0, max_q = 0;
        for (int e = 0; e < E; e++) total += per_e[e], max_e = per_e[e] > max_e ? per_e[e] : max_e;
        for (int q = 0; q < ep; q++) {
            int64_t sum = 0;
            for (int e = q * El; e < (q + 1) * El; e++) sum += per_e[e];
            max_q = sum > max_q ? sum : max_q;
        }
        const double mean_e = (double)total / E, mean_q = (double)total / ep;
        fprintf(f, "  layer %-3d routed %8lld  busiest expert %.2fx the mean, busiest ep rank "
                   "%.2fx, dropped %lld (%.1f%%)\n",
                l, (long long)total, mean_e > 0 ? (double)max_e / mean_e : 0.0,
                mean_q > 0 ? (double)max_q / mean_q : 0.0, (long long)dropped,
                total > 0 ? 100.0 * (double)dropped / (double)total : 0.0);
    }
}

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
    /* folded onto tp or cp (pconfig_ep_folded): the fold's ranks share
     * their rows, so nothing is sent to them; the outputs are gathered */
    const int fold = pconfig_ep_folded(pc), np = pconfig_ep_axis(pc);
    const char *fname = fold == GPT_EXPERT_FOLD_CP ? "cp" : "tp";
    const int nf = pconfig_ep_fold_n(pc);
    if (fold) {
        const coll_family_t *ff = coll_counters_family(&r0->comm, fname);
        const coll_tally_t g = ff ? ff->by[COLL_KIND_ALL_TO_ALL_V][COLL_F32] : (coll_tally_t){0};
        fprintf(f, "expert parallelism folded onto the %s=%d ranks%s (%d experts, %d a rank; "
                   "etp=%d): each runs its experts on the rows its %s group shares; device 0 per "
                   "step:\n  %-44s %10.3f MB   (each rank's experts' output and input-gradient rows "
                   "to its %s peers)\n",
                fname, nf, np > 1 ? ", then the ep axis out of dp" : "", cfg.moe_experts,
                cfg.moe_experts / pc->ep, pc->etp, fname, "all-gather of expert rows",
                (double)g.sent / steps / MB, fname);
    }
    if (fold && np == 1) {
        if (run->moe_steps) {
            fprintf(f, "load over the run's %d steps (every device's tokens):\n", run->moe_nsteps);
            print_load(run, f);
        }
        return;
    }
    const coll_family_t *fam = coll_counters_family(&r0->comm, "ep");
    coll_tally_t a2a = {0, 0, 0, 0, 0}, counts = {0, 0, 0, 0, 0};
    if (fam) {
        a2a = fam->by[COLL_KIND_ALL_TO_ALL_V][COLL_F32];
        counts = fam->by[COLL_KIND_ALL_GATHER][COLL_I32];
    }
    /* a rank sends the ep-axis peers its rows of their experts at its
     * own fold rank: (np - 1) of the ep = nf np expert ranks' share */
    const double formula = 4 * k * n * C * 4 * (np - 1) / ep * layers;
    fprintf(f, "expert parallelism (ep=%d: %d of the dp=%d data-parallel ranks%s; %d experts, %d a "
               "rank), device 0 per step, %.0f MoE layers held, n = %.0f tokens routed to k = %.0f "
               "experts:\n",
            pc->ep, np, pc->dp, fold ? " x the fold's" : "", cfg.moe_experts,
            cfg.moe_experts / pc->ep, layers, n, k);
    fprintf(f, "  %-44s %10.3f MB   formula 4 k n C x 4 B x (ep_dp-1)/ep x layers = %.3f MB "
               "(balanced routing, no drops, no padding): %.2fx\n",
            "all-to-all of expert rows, outputs, gradients", (double)a2a.sent / steps / MB,
            formula / MB, formula > 0 ? (double)a2a.sent / steps / formula : 0.0);
    fprintf(f, "  %-44s %10.6f MB   (each peer's rows per expert, int32)\n",
            "all-gather of the rows' layout", (double)counts.sent / steps / MB);
    if (run->moe_steps) {
        fprintf(f, "load over the run's %d steps (every device's tokens):\n", run->moe_nsteps);
        print_load(run, f);
    }
}
