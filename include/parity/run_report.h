/* run_report.h - what a layout run measured, in the one form every
 * mode's report reads. The engine (engine.h) fills a run_report_t after
 * a run and calls the reports below; each lives in its mode's folder and
 * includes nothing of the engine, so the dependency points engine ->
 * mode, never back: a mode's report is a function of these counters, the
 * layout and the model alone.
 */
#ifndef PARITY_RUN_REPORT_H
#define PARITY_RUN_REPORT_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "parity/coll.h"
#include "parity/memest.h"
#include "parity/model.h"
#include "parity/pconfig.h"
#include "parity/runtime.h"

/* What one device measured over a run. */
typedef struct {
    double predicted[MEM_NCAT];  /* bytes, from the ZeRO formulas (fp32) */
    size_t peak[MEM_NCAT];       /* measured high-water marks */
    size_t peak_total;
    size_t host_peak; /* cpu offload: the rank's host arena's peak (its optimizer shard) */
    coll_counters_t comm;        /* this rank's collective traffic; by group family
                                    (coll.h) "tp" is tensor parallelism's, the rest
                                    data parallelism's ("dp", "dp-grads", "world") */
    uint64_t exact_rs_elems;     /* elements this rank reduced exactly */
    /* wall time by phase: forward/backward, exact gradient reductions,
     * other collectives, and the optimizer (norm, clipping, AdamW) */
    double seconds_compute, seconds_reduce, seconds_comm, seconds_optimizer;
    /* pipeline: this device's stage, the activation slots it has, the most
     * (microbatch, chunk) pairs it held at once, and over the steps the
     * seconds of its forward and backward passes and the pipeline's span
     * (the step's start to the last backward of any stage: Megatron's
     * flush): the bubble is 1 - busy / span */
    int pp_stage, pp_in_flight_peak;
    int pp_slots;
    double pp_busy, pp_span;
    size_t pp_wstash_peak; /* split schedules: bytes W's inputs held at once (layers.h) */
    int buckets_in_schedule; /* --overlap-grad-reduce: buckets handed over before its last pass ended */
} device_report_t;

/* A run, as the reports read it. */
typedef struct {
    model_config_t model;            /* the golden model (its global batch) */
    model_config_t cfg;              /* the config each replica runs: the layout's microbatch */
    pconfig_t pc;                    /* the validated layout */
    int steps;
    const device_report_t *reports;  /* [world] or NULL */
    gpt_units_t units0;              /* the units device 0 holds: its pipeline stage's
                                        (n = 0: every unit) */
    const char *trace_path;          /* the run's Chrome trace, or NULL */
    const gpt_moe_stats_t *moe_steps; /* MoE: [moe_nsteps] routing statistics over the
                                        run (engine_run_t.moe_steps), or NULL */
    int moe_nsteps;
} run_report_t;

/* The grid of a layout as a rank layout (layout_init_mapped on its order
 * and sizes); -1 if it cannot be built. */
int  report_grid_layout(const pconfig_t *pc, rank_layout_t *L);
/* "0" without a grid (L NULL); "0 (tp 1, dp 0)" on one, with the
 * context-parallel rank and the stage when there are some (the reports'
 * tables). full: every axis, sizes of 1 included, and the sub-axes `sub`
 * (may be NULL) after a ';': "9 (tp 1, cp 0, ep 0, dp 0, pp 1; vpp chunk 1)"
 * (the checker's). */
void report_device_label(const rank_layout_t *L, int rank, int full, const char *sub, char *buf,
                         size_t cap);

/* The modes' reports, in the order engine_print_report calls them. */

/* dp/dp_report.c: per-device memory next to the ZeRO formulas, device
 * 0's data-parallel traffic next to 2 Psi / 3 Psi, and its time by phase;
 * -1 when the layout's tables cannot be built (nothing else to report). */
int  dp_print_zero_report(const run_report_t *run, FILE *f);
/* reports/tp_report.c (tp > 1): the tensor-parallel group's traffic of device
 * 0 by collective and dtype next to Megatron's formulas, the bytes
 * exactness adds, and activation memory per device next to the slot's
 * formula, with and without sequence parallelism. */
void tp_print_report(const run_report_t *run, FILE *f);
/* reports/cp_report.c (cp > 1): the context-parallel group's traffic of
 * device 0 per layer next to the ring's or Ulysses' formula, the bytes
 * exactness adds, and activation memory per device next to the golden
 * run's and the slot's formula for T / cp positions. */
void cp_print_report(const run_report_t *run, FILE *f);
/* reports/ep_report.c: expert parallelism's all-to-alls against the formula. */
void ep_print_report(const run_report_t *run, FILE *f);
/* pp/pp_report.c (pp > 1): per stage the units, activation slots against
 * the schedule's formula, activation memory and the measured bubble
 * against the theory; point-to-point traffic against the boundaries; the
 * trace file when there is one. */
void pp_print_report(const run_report_t *run, FILE *f);
/* recompute_report.c (activation recomputation): device 0's saving by the
 * layer formula next to the measured one. */
void recompute_print_report(const run_report_t *run, FILE *f);

/* The formula of one dense GPT layer's activations in a slot, bytes per
 * token held (MODEL.md's storage: 4-byte values, 1-byte dropout masks),
 * written out from the shapes rather than measured, so that the tables'
 * sizes (gpt_mem_bytes) can be held against it. Replicated over tp (split
 * along tokens under SP): LayerNorm x-hat and output twice, the attention
 * and MLP outputs, resid1 and out (8 x 4h), their dropout masks (2h),
 * LayerNorm 1/std (2 x 4). Split over tp: qkv and context (16h; Ulysses
 * keeps both again in heads-major order, 16h more), fc1 out, GeLU out
 * and derivative (12 ffn), and attention's core: per head the
 * probabilities against all T keys (4T), after dropout (4T) with its mask
 * (T), the denominator (4). SP keeps both LayerNorm outputs gathered (8h).
 * *core: the core's share (what selective recomputation does not keep);
 * *out: the layer output's (4h, or 4h/t under SP: what full keeps).
 * A report's formula (recompute_report.c), not the estimate's: memest.h
 * sizes a run from the tables themselves. */
double report_layer_per_token(const model_config_t *c, int t, int sp, int ulysses, double *core,
                              double *out);

#endif
