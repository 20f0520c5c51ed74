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

/* ---- where an element lies (dp_report.c), for the divergence report --- */

/* Whether dump tensor t ("what": its name after "step<s>.") is a batch
 * tensor [B, ...] (activations, masks, unit-input gradients, logits,
 * inputs, labels). */
int dp_is_batch(const st_tensor_t *t, const char *what);
/* The driver's grid as a rank layout; -1 if it cannot be built. */
int dp_grid_layout(const pconfig_t *pc, rank_layout_t *L);
/* dp_device_name with sub-axes after a ';' (sub may be NULL or ""). */
void dp_device_name_sub(const pconfig_t *pc, int rank, const char *sub, char *buf, size_t cap);
/* The chunk (virtual pipeline stage of its stage) holding unit `unit`. */
int dp_unit_chunk(const pp_plan_t *pp, int unit);

/* Element `flat` of a batch tensor: its sequence, the data-parallel rank
 * that holds it, the microbatch, its position and the context-parallel
 * rank holding it, its unit and stage, and the device the layout gives it
 * (tensor-parallel rank 0's). */
typedef struct {
    int seq, dp_rank, micro, nmicro, msize; /* microbatch `micro` of nmicro, msize sequences */
    int pos;        /* position along T, -1 if none (or cut by head: Ulysses) */
    int head;       /* the head of a Ulysses [B, H, T, T] tensor, else -1 */
    int cp_rank, unit, stage, device;
} dp_batch_at_t;
void dp_batch_at(const dp_placement_t *pl, const st_tensor_t *t, uint64_t flat, dp_batch_at_t *b);

/* Element `flat` of a parameter-shaped tensor: table entry i, its unit
 * and stage, the tensor-parallel rank tr whose block holds it (element
 * `local` there), bucket b's piece k ([lo, hi)) of N gradient-group
 * ranks under ZeRO-z, and the owner's world rank. tied: the word
 * embedding shared by the first and the last stage. 0, -1 for an
 * unknown name, -2 when a table cannot be built. */
typedef struct {
    int i, unit, stage, tied, tr, b, k, N, z, owner;
    size_t local, lo, hi;
} dp_param_at_t;
int dp_param_at(const dp_placement_t *pl, const char *pname, uint64_t flat, dp_param_at_t *o);

#endif
