/* cp_report.c - what context parallelism costs: its traffic per layer
 * against the formulas, and activation memory against sequence length
 * and cp.
 *
 * Per attention block ("layers" below: a GPT layer has one, a T5
 * decoder layer two, gpt_attention_blocks), a rank holding n = (B/dp) *
 * T/cp tokens of A = h/tp attention features (fp32, 4 bytes; 2-D/2.5-D/
 * 3-D: n = (B/dp)/blocks * T/cp of A = h/q, the column's heads of its
 * block of the sequences):
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
 *   recomputation  a layer whose attention core runs again in the
 *                  backward (full: the recomputed layers; selective: every
 *                  layer) repeats its forward's exchange: the ring's K and
 *                  V blocks, 2 (cp-1) n A floats more; Ulysses' q,k,v and
 *                  output all-to-alls, 4 (cp-1)/cp n A.
 *
 * Dependency: engine -> here, never back. The input is run_report.h's
 * run_report_t, which the engine fills after a run (engine/report.c);
 * nothing here includes or calls the engine.
 */
#include "model/gpt.h"
#include "cp_report_internal.h"

#include "parity/coll.h"
#include "parity/run_report.h"

cp_traffic_t cp_traffic(int cp, int ulysses, double n, double A, double layers, double cores) {
    cp_traffic_t t = {0, 0, 0};
    if (ulysses) { /* 8 all-to-alls of n A floats' worth a layer, the forward's 4 again; one
                      division last, so a whole number of bytes comes out exact */
        t.a2a = 4.0 * (cp - 1) * n * A * (8 * layers + 4 * cores) / cp;
    } else { /* (cp-1) blocks of n A: K, V forward; K and V backward; K, V again */
        t.kv = 4.0 * (cp - 1) * n * A * (4 * layers + 2 * cores);
        t.open = 8.0 * (cp - 1) * n * 2 * A * layers;
    }
    return t;
}

void cp_print_report(const run_report_t *run, FILE *f) {
    if (!run->reports) return;
    const pconfig_t *pc = &run->pc;
    const model_config_t cfg = run->cfg;
    const double MB = 1e6, steps = run->steps > 0 ? run->steps : 1, cp = pc->cp;
    /* 2-D/2.5-D/3-D: a rank's attention holds one column's heads (h/q) of
     * one block of the sequences (pconfig_tp_batch_blocks); 1-D: h/tp of all */
    int sub[3];
    pconfig_tp_sub(pc, sub);
    const double A = (double)cfg.hidden / sub[0], blocks = pconfig_tp_batch_blocks(pc);
    const double n = (double)(pc->global_batch / pc->dp) / blocks * cfg.seq_length / cp; /* tokens held */
    const device_report_t *r0 = &run->reports[0];
    const coll_family_t *fam = coll_counters_family(&r0->comm, "cp");
    coll_tally_t f32 = {0, 0, 0, 0, 0}, open = {0, 0, 0, 0, 0}, a2a = {0, 0, 0, 0, 0};
    if (fam) {
        f32 = fam->by[COLL_KIND_SEND][COLL_F32];
        open = fam->by[COLL_KIND_SEND][COLL_XVEC];
        a2a = fam->by[COLL_KIND_ALL_TO_ALL][COLL_F32];
    }
    /* the attention blocks device 0's stage holds (a T5 decoder layer's
     * two), and those whose core runs again */
    int cores;
    const int layers = gpt_attention_blocks(&cfg, &run->units0, &cores);
    const cp_traffic_t want = cp_traffic(pc->cp, pc->cp_comm, n, A, layers, cores);
    const double kv = (double)f32.sent / steps, sums = (double)open.sent / steps,
                 moved = (double)a2a.sent / steps;
    fprintf(f, "context parallelism (cp=%d, %s), device 0 per step, %d attention blocks held "
               "(layers below), n = %.0f "
               "tokens held of T/cp positions, A = %.0f attention features",
            pc->cp, pc->cp_comm ? "a2a: DeepSpeed-Ulysses" : "p2p: ring, chunks r and 2cp-1-r",
            layers, n, A);
    if (cores)
        fprintf(f, "; %d attention core%s again in the backward (%s recomputation)", cores,
                cores == 1 ? " runs" : "s run",
                cfg.recompute == MODEL_RECOMPUTE_SELECTIVE ? "selective" : "full");
    fprintf(f, ":\n");
    if (!pc->cp_comm) {
        fprintf(f, "  %-44s %10.3f MB   formula %s = %.3f MB\n",
                "forward K and V blocks + backward K,V blocks", kv / MB,
                cores ? "(4 layers + 2 recomputed) (cp-1) n A x 4 B" : "4 (cp-1) n A x 4 B x layers",
                want.kv / MB);
        fprintf(f, "  %-44s %10.3f MB   formula (cp-1) n 2A x 8 B x layers = %.3f MB (+ %.3f MB "
                   "of exception accumulators)\n",
                "backward dK/dV open sums to their owners", sums / MB, want.open / MB,
                (sums - want.open) / MB);
        fprintf(f, "  exactness adds %.3f MB a step: the open sums' fp64 against a rounded fp32 ring's "
                   "4 bytes an element\n",
                (sums - want.open / 2) / MB);
    } else {
        fprintf(f, "  %-44s %10.3f MB   formula %s = %.3f MB (exactness adds nothing: copies)\n",
                "all-to-all of q,k,v, the output, gradients", moved / MB,
                cores ? "(8 layers + 4 recomputed) (cp-1)/cp n A x 4 B"
                      : "8 (cp-1)/cp n A x 4 B x layers",
                want.a2a / MB);
    }
    /* the open sums carry the exception accumulators on top: at least the formula */
    const int differs = kv != want.kv || moved != want.a2a || sums < want.open ||
                        (want.open == 0 && sums != 0);
    fprintf(f, "  %s\n", differs ? "measured and formula DIFFER (an exchange added or dropped?)"
                         : pc->cp_comm ? "measured = formula: bytes of the all-to-alls"
                                       : "measured = formula: bytes of the K/V blocks, and of the open "
                                         "sums besides their exception accumulators");
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
