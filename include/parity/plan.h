/* plan.h - `parity plan`: the layouts of a model that fit N devices of a
 * given memory, each with its memory by category, its communication per
 * step and a cost, cheapest first.
 *
 * Memory is memest_layout's estimate, the one that sizes the arenas and
 * that --print-layout prints, so a listed layout is one `parity train
 * --arena-mb BUDGET` admits. Validity is pconfig_validate's and the
 * estimate's (tiles, layers per stage): a candidate either refuses is
 * not a layout, and nothing here repeats their rules. Each candidate is
 * built by parsing the very flags printed to run it
 * (pconfig_parse_flag), so the row and the command cannot disagree.
 *
 *   plan_t p;
 *   if (plan_build(&p, &cfg, 8, budget_bytes, &plan_default_costs, &err)) refuse(err.msg);
 *   for (int i = 0; i < p.n; i++) ... p.rows[i].flags, p.rows[i].mem.total, p.rows[i].cost_s
 *   plan_free(&p);
 */
#ifndef PARITY_PLAN_H
#define PARITY_PLAN_H

#include <stddef.h>

#include "parity/error.h"
#include "parity/memest.h"
#include "parity/model.h"
#include "parity/pconfig.h"

/* Bytes one device sends per step, by parallelism (plan_comm.c states
 * the formulas): collectives in bus bytes (nccl-tests' convention: what
 * a rank sends over its link in a ring), point to point in bytes sent.
 * The busiest device: pipeline stages differ, so each figure is the
 * largest stage's and total the largest stage's sum. */
typedef struct {
    double dp;    /* gradient reduce-scatter (fp64 open sums), all-gathers (fp32) */
    double tp;    /* Megatron's 1-D all-reduces (tp_terms) */
    double pp;    /* activations forward, their gradients backward */
    double cp;    /* the ring's K/V blocks and dK/dV open sums */
    double emb;   /* the tied word embedding's gradient between first and last stage */
    double offload; /* cpu offload: the shard's gradients to the host and its updated
                       parameters back (4 + 4 bytes an element), over the same link */
    double total;
} plan_comm_t;

/* The cost model's constants: one device's arithmetic rate and its link
 * bandwidth (plan.c: the model). */
typedef struct {
    double flops_per_s;
    double bytes_per_s;
} plan_costs_t;
extern const plan_costs_t plan_default_costs; /* 100 TFLOP/s, 100 GB/s */

enum { PLAN_FLAGS_MAX = 256 };
typedef struct {
    /* the validated layout (pconfig_t is 33 KB with its rank list: the
     * fields shown, not the struct, so that thousands of rows stay small) */
    int tp, pp, cp, dp, zero_stage, micro_batch, microbatches;
    const char *recompute;   /* "none", "full" (the enumeration's tables, plan.c) */
    const char *precision;   /* "fp32" */
    const char *offload;     /* "none" */
    char flags[PLAN_FLAGS_MAX]; /* the layout flags of `parity train --model M <flags>` */
    memest_dev_t mem;        /* per device, by category (memest_layout's max_dev) */
    size_t run_bytes;        /* the whole simulated run on this host: every device and the
                                reassembly buffers (what train checks against MemAvailable) */
    plan_comm_t comm;
    double flops;            /* one device's share of the step's arithmetic, recompute included */
    double bubble;           /* the schedule's theoretical bubble (pp_bubble_theory) */
    double compute_s, comm_s, cost_s; /* cost_s = compute_s / (1 - bubble) + comm_s */
    int seq;                 /* enumeration order: the last tie-break */
} plan_row_t;

typedef struct {
    plan_row_t *rows;    /* the layouts that fit, cheapest first */
    int n;
    int candidates;      /* combinations tried */
    int admitted;        /* of those, the layouts validation and the estimate admit */
    plan_row_t smallest; /* the admitted layout that needs the least memory (admitted > 0) */
} plan_t;

/* Every layout of `devices` devices for cfg (a validated GPT config) from
 * the enumeration's tables (plan.c): tp, pp, cp dividing the devices, dp
 * the rest, ZeRO 0-3 (1-3 only where dp x cp > 1: nothing to shard
 * otherwise), micro batches dividing a replica's sequences, recompute
 * none/full, precision fp32, offload none; kept when memest's per-device
 * total is at most budget_bytes; sorted by cost_s, then total memory,
 * then enumeration order. 0, or -1 with a message (an encoder-decoder or
 * MoE model, out of memory); no layout fitting is not an error (n = 0). */
int  plan_build(plan_t *p, const model_config_t *cfg, int devices, size_t budget_bytes,
                const plan_costs_t *costs, perr_t *err);
void plan_free(plan_t *p);

/* plan_comm.c: a validated layout's bytes per device per step; 0, or -1
 * with a message where its formulas do not reach: the 2-D/3-D tensor
 * modes, an encoder mesh, experts, recomputation with SP or row linears. */
int  plan_comm(const model_config_t *cfg, const pconfig_t *pc, plan_comm_t *out, perr_t *err);
/* The step's arithmetic on the whole model (FLOPs): per token, 2 Psi +
 * 2 L T h forward (Kaplan et al. 2020), twice that backward, and one
 * forward more under full recomputation. */
double plan_step_flops(const model_config_t *cfg, int recompute);

#endif
