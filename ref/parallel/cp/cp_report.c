/* cp_report.c - what context parallelism costs: its traffic per layer
 * against the formulas, and activation memory against sequence length
 * and cp.
 *
 * Per layer, a rank holding n = (B/dp) * T/cp tokens of A = h/tp
 * attention features (fp32, 4 bytes):
 *   ring forward   K, then V, around the ring: (cp-1) blocks of n*A each
 *                  = (cp-1)/cp of the sequence's K and of its V;
 *   ring backward  K and V together again, (cp-1) blocks of n*2A; and
 *                  each block's dK/dV partials back to their owner as
 *                  open sums, (cp-1) messages of n*2A elements at 8 bytes
 *                  (the fp64 sum) plus an xacc_t for each element that
 *                  needed one: what exactness adds (a rounded fp32 ring
 *                  would move 4 bytes an element).
 *   Ulysses        four all-to-alls (q,k,v in; the output out; and their
 *                  gradients): each moves (cp-1)/cp of its tensor, 3A and
 *                  A wide: 8 (cp-1)/cp n A floats. Copies only: exactness
 *                  adds nothing.
 *
 * Dependency: engine -> here, never back. The input is run_report.h's
 * run_report_t, which the engine fills after a run (engine/report.c);
 * nothing here includes or calls the engine.
 */
#include "parity/coll.h"
#include "parity/run_report.h"

void cp_print_report(const run_report_t *run, FILE *f) {
    if (!run->reports) return;
    const pconfig_t *pc = &run->pc;
    const model_config_t cfg = run->cfg;
    const double MB = 1e6, steps = run->steps > 0 ? run->steps : 1, cp = pc->cp;
    const double L = cfg.layers, A = (double)cfg.hidden / (pc->tp > 1 ? pc->tp : 1);
    const double n = (double)(pc->global_batch / pc->dp) * cfg.seq_length / cp; /* tokens a rank holds */
    const device_report_t *r0 = &run->reports[0];
    const coll_family_t *fam = coll_counters_family(&r0->comm, "cp");
    coll_tally_t f32 = {0, 0, 0, 0, 0}, open = {0, 0, 0, 0, 0}, a2a = {0, 0, 0, 0, 0};
    if (fam) {
        f32 = fam->by[COLL_KIND_SEND][COLL_F32];
        open = fam->by[COLL_KIND_SEND][COLL_XVEC];
        a2a = fam->by[COLL_KIND_ALL_TO_ALL][COLL_F32];
    }
    /* the layers device 0's stage holds: every layer without a pipeline */
    const double layers = pc->pp > 1 ? L / pc->pp : L;
    fprintf(f, "context parallelism (cp=%d, %s), device 0 per step, %.0f layers held, n = %.0f "
               "tokens held of T/cp positions, A = %.0f attention features:\n",
            pc->cp, pc->cp_comm ? "a2a: DeepSpeed-Ulysses" : "p2p: ring, chunks r and 2cp-1-r",
            layers, n, A);
    if (!pc->cp_comm) {
        const double kv = (cp - 1) * n * A * 4 * layers;
        fprintf(f, "  %-44s %10.3f MB   formula 4 (cp-1) n A x 4 B x layers = %.3f MB\n",
                "forward K and V blocks + backward K,V blocks", (double)f32.sent / steps / MB,
                4 * kv / MB);
        fprintf(f, "  %-44s %10.3f MB   formula (cp-1) n 2A x 8 B x layers = %.3f MB (+ %.3f MB "
                   "of exception accumulators)\n",
                "backward dK/dV open sums to their owners", (double)open.sent / steps / MB,
                2 * 2 * kv / MB, ((double)open.sent / steps - 4 * kv) / MB);
        fprintf(f, "  exactness adds %.3f MB a step: the open sums' fp64 against a rounded fp32 ring's "
                   "4 bytes an element\n",
                ((double)open.sent / steps - 2 * kv) / MB);
    } else {
        const double vol = 8 * (cp - 1) / cp * n * A * 4 * layers;
        fprintf(f, "  %-44s %10.3f MB   formula 8 (cp-1)/cp n A x 4 B x layers = %.3f MB "
                   "(exactness adds nothing: copies)\n",
                "all-to-all of q,k,v, the output, gradients", (double)a2a.sent / steps / MB, vol / MB);
    }
    /* activation memory: device 0's allocation table (its stage's units
     * and slots) for T/cp positions, against the golden run's */
    const unsigned omit = GPT_NO_PARAMS | GPT_NO_GRADS | GPT_NO_OPTIMIZER;
    const gpt_units_t u = run->units0;
    gpt_mem_t whole, mine;
    perr_t err;
    if (gpt_mem_bytes(&cfg, omit, &whole, &err) ||
        gpt_mem_bytes_mp(&cfg, pconfig_model_tp(pc, 0), pconfig_tp_opts(pc), &u,
                         u.n ? r0->pp_slots : 0, omit, &mine, &err))
        return;
    fprintf(f, "  activations per device: measured %.2f MB, allocation table %.2f MB%s, golden run "
               "(T = %d on one device, micro-batch %d) %.2f MB: %.2fx; attention scores %s and every "
               "token tensor shrink by cp\n",
            (double)r0->peak[MEM_ACTIVATIONS] / MB, (double)mine.activations / MB,
            u.n ? " (its stage's units and slots)" : "", cfg.seq_length, cfg.micro_batch,
            (double)whole.activations / MB,
            whole.activations ? (double)mine.activations / (double)whole.activations : 0.0,
            pc->cp_comm ? "[b,H/cp,T,T]" : "[b,H,T/cp,T]");
}
