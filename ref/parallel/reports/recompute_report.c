/* recompute_report.c - activation recomputation's memory: what device 0
 * saves by the layer formula (report_layer_per_token, written from the
 * shapes) next to what its arena measured (the allocation table without
 * recomputation minus this run's high-water).
 *
 * Drawn for the dense GPT on Megatron's 1-D tensor parallelism (with SP,
 * cp, pp); the other modes' layers have other buffers (their own
 * reports' formulas), so there it says so and stops.
 */
#include <math.h>
#include <stdio.h>

#include "model/gpt.h"
#include "parity/run_report.h"

/* The savings the formula predicts for device 0. A slot holds one chunk
 * of the stage's units (interleaving: v of them, the slot sized for the
 * largest), or every unit held: slots x the largest chunk's saving, less
 * what the recomputed layers share. *held: the layers of a slot; *buffers
 * the buffers behind the figures (each aligned to 64 bytes by the arena's
 * carver). */
static double formula_saved(const model_config_t *c, const gpt_units_t *units, int slots,
                            double layer, double core, double out, int *held, int *buffers) {
    const int selective = c->recompute == MODEL_RECOMPUTE_SELECTIVE;
    double most = 0;
    int sets = selective, chunks = units->n ? units->n : 1;
    *held = 0;
    for (int k = 0; k < chunks; k++) {
        double saved = 0;
        int in_chunk = 0;
        for (int l = 0; l < c->layers; l++) {
            const int u = l + 1; /* the GPT's units: the embedding, the layers, the head */
            int first, last;
            if (units->n ? u < units->lo[k] || u >= units->hi[k] : !gpt_units_hold(units, u))
                continue;
            in_chunk++;
            if (selective) {
                saved += core;
            } else if (gpt_recompute_chunk(c, units, u, &first, &last)) {
                saved += layer - (u == last ? out : 0);
                if (last - first + 1 > sets) sets = last - first + 1;
            }
        }
        if (saved > most) most = saved;
        if (in_chunk > *held) *held = in_chunk;
    }
    /* what every recomputed layer shares: one core, or the longest chunk's layers */
    *buffers = 32 * (*held * slots + sets);
    return slots * most - sets * (selective ? core : layer);
}

void recompute_print_report(const run_report_t *run, FILE *f) {
    const model_config_t *c = &run->cfg;
    const pconfig_t *pc = &run->pc;
    if (!run->reports || c->recompute == MODEL_RECOMPUTE_NONE) return;
    const char *gran = c->recompute == MODEL_RECOMPUTE_SELECTIVE ? "selective" : "full";
    if (pc->tp_mode != PC_TP_1D || pc->tp_row_linears || pconfig_hetero(pc) ||
        c->arch != MODEL_GPT || c->moe_experts > 0) {
        fprintf(f, "activation recomputation (%s): the saving's formula is drawn for the dense GPT "
                   "on 1-D tensor parallelism only\n", gran);
        return;
    }
    const int t = pc->tp > 1 ? pc->tp : 1, cp = pc->cp > 1 ? pc->cp : 1;
    const int sp = pc->sequence_parallel, ulysses = cp > 1 && pc->cp_comm;
    const gpt_units_t *units = &run->units0;
    const int slots = units->n ? run->reports[0].pp_slots : 1;
    const double n = (double)c->micro_batch * c->seq_length / cp, MB = 1e6;
    double core, out;
    const double layer = report_layer_per_token(c, t, sp, ulysses, &core, &out) * n;
    core *= n, out *= n;
    int held, buffers;
    const double saved = formula_saved(c, units, slots, layer, core, out, &held, &buffers);
    /* measured: the allocation table without recomputation (what a run
     * that stores allocates, tests/unit/test_memest.c) minus this run's peak */
    model_config_t stored = *c;
    stored.recompute = MODEL_RECOMPUTE_NONE;
    gpt_mem_t m;
    if (gpt_mem_bytes_mp(&stored, t, pconfig_tp_opts(pc), units, units->n ? slots : 0, 0, &m, NULL))
        return;
    const double peak = (double)run->reports[0].peak[MEM_ACTIVATIONS];
    const double measured = (double)m.activations - peak, bound = 64.0 * buffers;
    fprintf(f, "activation recomputation (%s", gran);
    if (c->recompute == MODEL_RECOMPUTE_FULL)
        fprintf(f, ", %s, %d layer%s", c->recompute_block ? "block" : "uniform", c->recompute_layers,
                c->recompute_layers == 1 ? "" : "s");
    fprintf(f, "): device 0 keeps %d slot%s of %.0f tokens, %d layers each\n", slots,
            slots == 1 ? "" : "s", n, held);
    fprintf(f, "  formula per layer and slot: %.3f MB stored, attention's core %.3f MB, output %.3f MB\n",
            layer / MB, core / MB, out / MB);
    if (c->recompute == MODEL_RECOMPUTE_SELECTIVE)
        fprintf(f, "  saved, formula: layers x slots x core - one shared core = %.3f MB\n", saved / MB);
    else
        fprintf(f, "  saved, formula: each recomputed layer's slot but a chunk's last output, minus "
                   "the longest chunk's shared layers = %.3f MB\n", saved / MB);
    fprintf(f, "  saved, measured: %.3f MB stored (the allocation table without recomputation) - "
               "%.3f MB high-water = %.3f MB\n", m.activations / MB, peak / MB, measured / MB);
    fprintf(f, "  formula vs measured: %.0f bytes apart, %s (bound: 64-byte alignment of %d buffers "
               "= %.0f bytes)\n", measured - saved,
            fabs(measured - saved) <= bound ? "match" : "DIFFER", buffers, bound);
}

/* run_report.h: one layer's slot bytes per token held, from the shapes */
double report_layer_per_token(const model_config_t *c, int t, int sp, int ulysses, double *core,
                              double *out) {
    const double h = c->hidden, hd = c->hidden_dropout > 0, ad = c->attention_dropout > 0;
    const double rep = 32 * h + 2 * h * hd + 8;
    *core = c->heads * (c->seq_length * (4 + 5 * ad) + 4) / t;
    *out = sp ? 4 * h / t : 4 * h;
    const double split = (16 * h * (ulysses ? 2 : 1) + 12.0 * c->ffn) / t + *core;
    return sp ? rep / t + 8 * h + split : rep + split;
}
