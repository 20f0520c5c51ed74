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
 * and three whose backward is split into B (the input gradient, on the
 * critical path) and W (the weight gradient, free to wait; layers.h's
 * split backward), each transcribed from its published generator:
 *   zb-h1        1F1B's F and B order, stage r's W of microbatch k - r
 *                right after its B of k, the r left at the end (Qi et al.,
 *                ICLR 2024; PyTorch's ScheduleInterleavedZeroBubble, v 1);
 *   zb-v         two chunks a stage in a V (chunk 0 of stage r is virtual
 *                stage r, chunk 1 is 2 pp - 1 - r: both ends of the model on
 *                stage 0), sail-sg's handcrafted_zb_v.py;
 *   dualpipev    DeepSeek's DualPipe, V variant (dualpipev.py's eight
 *                steps), needs m >= 2 pp.
 * A W holds its (microbatch, chunk)'s slot until it runs (in flight from
 * F to W); in a V the last stage hands chunk 0's output to chunk 1 (and
 * the gradient back) locally, and sends are buffered (schedule.c).
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
    pc_pp_schedule_t sched;   /* PC_PP_GPIPE, PC_PP_1F1B, PC_PP_INTERLEAVED, ... */
    int vshape;               /* chunks in a V (zb-v, dualpipev): chunk 0 of stage r is
                                 virtual stage r, chunk 1 is 2 pp - 1 - r */
    int rings;                /* an interleaved encoder-decoder: the encoder's first
                                 `rings` stages and the decoder's others are rings of
                                 their own (0: one ring of every stage); below */
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

/* A backward pass whole, or split (zero-bubble schedules): B the input
 * gradient, W the weight gradient (layers.h's split backward). */
typedef enum { PP_PASS_WHOLE = 0, PP_PASS_B = 1, PP_PASS_W = 2 } pp_part_t;

typedef struct {
    int fwd;                  /* 1 forward, 0 backward (whole, B or W) */
    int mb, chunk;
    int part;                 /* pp_part_t of a backward; PP_PASS_WHOLE for a forward */
} pp_op_t;

/* Room for a stage's passes: 3 m v (split schedules have three a pair). */
static inline int pp_max_ops(const pp_plan_t *p) { return 3 * p->m * p->v; }

/* Stage r's passes, in order, into ops (room for pp_max_ops); returns their count. */
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
/* The formula pp_bubble_theory evaluates, for reports. Split schedules:
 * their own simulation at T_F = T_B = T_W (pp_simulate), which is the
 * paper's (p-1)(T_F+T_B-T_W) for ZB-H1 (a third of 1F1B's (p-1)(T_F+
 * T_B+T_W)), and the stages' skew of p-1 chunk passes for ZB-V and
 * DualPipeV (whose steady state has none). */
const char *pp_bubble_formula(const pp_plan_t *p);
/* A schedule run on paper (pp_sim.c): each stage's passes in order, each as
 * soon as the passes it needs have finished, F taking f, B b and W w (a
 * whole backward b + w); sends take no time. span: the last pass's end;
 * busy[r]: stage r's pass time. -1 when the schedules deadlock (stuck:
 * the first stage that cannot go on, and the pass it cannot start). */
typedef struct { double f, b, w; } pp_times_t;
typedef struct {
    double span, busy[PC_MAX_SPLIT];
    int stuck_stage;
    pp_op_t stuck;
} pp_sim_t;
int pp_simulate(const pp_plan_t *p, const pp_times_t *t, pp_sim_t *out);
/* Stage r's idle share of the span: 1 - busy[r] / span. */
double pp_sim_bubble(const pp_plan_t *p, const pp_sim_t *s, int r);

/* Virtual stage of chunk c on stage r, and where it sends: the stage of
 * virtual stage vs. An interleaved encoder-decoder (rings = E encoder
 * stages, D = pp - E decoder stages): the encoder's v chunks go round its
 * own stages (vs = c E + r), then the decoder's round its own
 * (vs = v E + c D + r - E); only the encoder's last chunk crosses to the
 * decoder (the bridge). */
static inline int pp_vstage(const pp_plan_t *p, int r, int c) {
    const int E = p->rings, D = p->pp - E;
    if (E) return r < E ? c * E + r : p->v * E + c * D + r - E;
    return p->vshape ? (c == 0 ? r : 2 * p->pp - 1 - r) : c * p->pp + r;
}
static inline int pp_stage_of(const pp_plan_t *p, int vs) {
    const int E = p->rings, D = p->pp - E;
    if (E) return vs < p->v * E ? vs % E : E + (vs - p->v * E) % D;
    return p->vshape ? (vs < p->pp ? vs : 2 * p->pp - 1 - vs) : vs % p->pp;
}
static inline int pp_chunk_of(const pp_plan_t *p, int vs) {
    const int E = p->rings, D = p->pp - E;
    if (E) return vs < p->v * E ? vs / E : (vs - p->v * E) / D;
    return p->vshape ? vs >= p->pp : vs / p->pp;
}
/* Whether a tied head's word embedding has copies on two stages (the
 * embedding's and the head's, joined by an embedding group): pp > 1,
 * except in a V, where both ends of the model are on stage 0. */
static inline int pp_tied_split(const pp_plan_t *p) { return p->pp > 1 && !p->vshape; }
/* "gpipe", "1f1b", "interleaved", ... (pconfig_schedule_name) */
const char *pp_schedule_name(pc_pp_schedule_t s);

#endif
