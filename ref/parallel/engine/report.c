/* report.c - the generic part of a run's report: what the run measured,
 * as the neutral run_report_t (run_report.h), handed to each mode's
 * report in turn. The modes' reports live in their folders (dp/, tp/,
 * cp/, pp/) and read only that struct: the engine calls them, they never
 * call back.
 */
#include <stdio.h>

#include "parity/engine.h"
#include "parity/run_report.h"

/* Device 0's units: its pipeline stage's (every unit without a pipeline). */
static gpt_units_t device0_units(const engine_run_t *run, const model_config_t *cfg) {
    pp_plan_t pp;
    const gpt_units_t all = {0, {0}, {0}};
    if (!run->reports || run->pc.pp < 2 || pp_plan_build(&pp, cfg, &run->pc, NULL)) return all;
    return pp.units[run->reports[0].pp_stage];
}

void engine_print_report(const engine_run_t *run, FILE *f) {
    run_report_t rr = {.model = run->model, .pc = run->pc, .steps = run->steps,
                       .reports = run->reports, .trace_path = run->trace_path};
    engine_replica_config(&run->model, &run->pc, &rr.cfg);
    rr.units0 = device0_units(run, &rr.cfg);
    if (dp_print_zero_report(&rr, f)) return;
    if (run->pc.tp > 1) tp_print_report(&rr, f);
    if (run->pc.cp > 1) cp_print_report(&rr, f);
    if (run->pc.ep > 1) ep_print_report(&rr, f);
    if (run->pc.pp > 1) pp_print_report(&rr, f);
}
