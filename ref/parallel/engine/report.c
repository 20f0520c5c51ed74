/* report.c - the generic part of a run's report: what the run measured,
 * as the neutral run_report_t (run_report.h), handed to each mode's
 * report in turn. The modes' reports live in their folders (dp/, tp/,
 * cp/, pp/) and read only that struct: the engine calls them, they never
 * call back.
 */
#include <stdio.h>
#include <string.h>

#include "model/gpt.h"
#include "engine_internal.h"
#include "parity/coll.h"
#include "parity/run_report.h"

void engine_moe_stats(engine_rank_t *r, int64_t step) {
    const engine_run_t *run = r->sh->run;
    const gpt_moe_stats_t *st = &r->g->moe;
    const size_t cells = (size_t)r->sh->cfg.layers * (size_t)r->sh->cfg.moe_experts;
    const int mine = r->tp_rank == 0 && r->cp_rank == 0;
    int64_t *v = r->moe.counts;
    for (size_t i = 0; i < cells; i++) {
        v[i] = mine ? st->routed[i] : 0;
        v[cells + i] = mine ? st->dropped[i] : 0;
    }
    xacc_t sums[2];
    xacc_init(&sums[0]);
    xacc_init(&sums[1]);
    if (mine) sums[0] = st->aux, sums[1] = st->z;
    coll_all_reduce(r->world, v, v, 2 * cells, COLL_I64, COLL_SUM);
    coll_all_reduce(r->world, sums, sums, 2, COLL_XACC, COLL_SUM);
    r->moe.sum = (gpt_moe_stats_t){v, v + cells, sums[0], sums[1]};
    if (r->device != 0 || !run->moe_steps) return;
    gpt_moe_stats_t *out = &run->moe_steps[step - engine_first_step(run)];
    memcpy(out->routed, v, cells * sizeof *v);
    memcpy(out->dropped, v + cells, cells * sizeof *v);
    out->aux = sums[0], out->z = sums[1];
}

/* Device 0's units: its pipeline stage's (every unit without a pipeline). */
static gpt_units_t device0_units(const engine_run_t *run, const model_config_t *cfg) {
    pp_plan_t pp;
    const gpt_units_t all = {0, {0}, {0}};
    if (!run->reports || run->pc.pp < 2 || pp_plan_build(&pp, cfg, &run->pc, NULL)) return all;
    return pp.units[run->reports[0].pp_stage];
}

void engine_print_report(const engine_run_t *run, FILE *f) {
    run_report_t rr = {.model = run->model, .pc = run->pc, .steps = run->steps,
                       .reports = run->reports, .trace_path = run->trace_path,
                       .moe_steps = run->moe_steps, .moe_nsteps = run->steps_run};
    engine_replica_config(&run->model, &run->pc, &rr.cfg);
    rr.units0 = device0_units(run, &rr.cfg);
    if (dp_print_zero_report(&rr, f)) return;
    if (run->pc.tp > 1) tp_print_report(&rr, f);
    if (run->pc.cp > 1) cp_print_report(&rr, f);
    if (run->pc.ep > 1) ep_print_report(&rr, f);
    if (run->pc.pp > 1) pp_print_report(&rr, f);
    recompute_print_report(&rr, f);
}
