/* dp_report.h - the report's parts (not public API): dp_report.c prints
 * the data-parallel part (ZeRO's formulas) and calls the tensor-parallel
 * one (dp_report_tp.c) when tp > 1. */
#ifndef PARITY_DP_REPORT_H
#define PARITY_DP_REPORT_H

#include <stdio.h>

#include "parity/dp.h"

/* The tensor-parallel group's traffic of device 0 by collective and
 * dtype next to Megatron's formulas, the bytes exactness adds, and
 * activation memory per device next to the slot's formula, with and
 * without sequence parallelism. */
void dp_print_tp_report(const dp_run_t *run, FILE *f);

/* A pipeline run (pp > 1): per stage the units, activation slots against
 * the schedule's formula, activation memory and the measured bubble
 * against the theory; point-to-point traffic against the boundaries; the
 * trace file when there is one. */
void dp_print_pp_report(const dp_run_t *run, const char *trace_path, FILE *f);

/* A context-parallel run (cp > 1): the context-parallel group's traffic
 * of device 0 per layer next to the ring's or Ulysses' formula, the bytes
 * exactness adds, and activation memory per device next to the golden
 * run's and the slot's formula for T / cp positions. */
void dp_print_cp_report(const dp_run_t *run, FILE *f);

/* The units device 0 holds (its pipeline stage's; n = 0: every unit). */
gpt_units_t dp_device0_units(const dp_run_t *run);

/* The traffic a collective family ("tp") carries in a snapshot, by kind
 * (every dtype): zero when the rank made no call in it. */
coll_tally_t dp_family_kind(const coll_counters_t *c, const char *family, coll_kind_t kind);

#endif
