/* pp.h - pipeline parallelism: stages, virtual stages and schedules.
 *
 * The model's units (model.h: 0 the embedding, 1..L the layers, L+1 the
 * head) are cut into V = pp * v virtual stages of consecutive units; the
 * virtual stage vs = c * pp + r is model chunk c of stage r (Megatron's
 * interleaving; v = 1 otherwise). The embedding sits on virtual stage 0,
 * the head and loss on virtual stage V - 1. A stage's forward output goes
 * to the next virtual stage, and the gradient of its input back to the
 * previous one, point to point (non-blocking sends, blocking receives).
 *
 * A schedule is, per stage, the order of its forward and backward passes
 * over (microbatch, chunk): pure arithmetic on (pp, rank, m, v), written
 * as one readable function per schedule (pp_schedule.c), with Megatron's
 * formulas (DESIGN.md §4):
 *   gpipe        every forward, then every backward;
 *   1f1b         warm-up min(pp - r - 1, m) forwards, then one forward and
 *                one backward at a time, then the remaining backwards;
 *   naive        forward and backward of one microbatch through every
 *                stage before the next (model parallelism, no pipelining);
 *   interleaved  over m * v virtual microbatches: warm-up
 *                (pp - r - 1) * 2 + (v - 1) * pp (all of them when
 *                m == pp), chunk of virtual microbatch k: (k mod pp*v) / pp,
 *                reversed for backward; needs m a multiple of pp.
 * Exact sums (I2) make every schedule give the golden bits: the order in
 * which a stage's microbatches add to its open gradient sums is free.
 */
#ifndef PARITY_PP_H
#define PARITY_PP_H

#include "parity/error.h"
#include "parity/model.h"
#include "parity/pconfig.h"

typedef struct {
    int pp, v, m;             /* stages, chunks per stage, microbatches per step */
    pc_pp_schedule_t sched;   /* PC_PP_GPIPE, PC_PP_1F1B or PC_PP_INTERLEAVED */
    int layers;               /* L */
    int stage_layers[PC_MAX_SPLIT]; /* layers of each stage (all its chunks) */
    gpt_units_t units[PC_MAX_SPLIT]; /* the units each stage holds, v chunks */
} pp_plan_t;

/* The plan of a validated layout (pconfig_validate) for cfg's layers.
 * Errors name the flag: more stages than layers, a split that does not
 * sum to the layers, a uniform split that does not divide them, virtual
 * stages that do not divide a stage's layers. pp = 1 is one stage of one
 * chunk (every unit) under 1F1B: the golden order, one microbatch at a time. */
int pp_plan_build(pp_plan_t *p, const model_config_t *cfg, const pconfig_t *pc, perr_t *err);

typedef struct {
    int fwd;                  /* 1 forward, 0 backward */
    int mb, chunk;
} pp_op_t;

/* Stage r's 2 * m * v passes, in order, into ops; returns their count. */
int pp_schedule(const pp_plan_t *p, int r, pp_op_t *ops);
/* The most (microbatch, chunk c) pairs stage r holds between forward
 * and backward, counted on the schedule; c < 0: of any chunk. A stage
 * keeps a pool of slots per chunk (the sum over c): a slot is reused
 * only after its last send was received, and within one chunk the
 * schedules above make that wait one the schedule has anyway, while a
 * pool shared by the chunks can wait on a send whose receiver waits on
 * this stage (a deadlock). */
int pp_max_in_flight(const pp_plan_t *p, int r, int c);
/* The schedule's formula for the same, over all chunks: GPipe m, 1F1B
 * min(pp - r, m), interleaved min(warm-up + 1, m * v), naive 1. */
int pp_in_flight_formula(const pp_plan_t *p, int r);
/* The theoretical bubble, as a fraction of the step: (p - 1) / (m + p - 1);
 * interleaved (p - 1) / (v m + p - 1), Megatron's bubble (p - 1)/m shrunk
 * v times; naive (p - 1) / p. */
double pp_bubble_theory(const pp_plan_t *p);
/* Virtual stage of chunk c on stage r, and where it sends: the stage of
 * virtual stage vs. */
static inline int pp_vstage(const pp_plan_t *p, int r, int c) { return c * p->pp + r; }
static inline int pp_stage_of(const pp_plan_t *p, int vs) { return vs % p->pp; }
/* "gpipe", "1f1b", "interleaved" */
const char *pp_schedule_name(pc_pp_schedule_t s);

#endif
