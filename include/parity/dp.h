/* dp.h - data parallelism: DDP, ZeRO-1/2/3 and gradient accumulation.
 *
 * Data parallelism splits the token axis: rank r of dp trains on
 * sequences [r*B/dp, (r+1)*B/dp) of every global batch, in microbatches.
 * Every weight gradient is then a sum split across microbatches and
 * ranks; the open exact accumulators (xacc.h) make that split invisible:
 * each rank's accumulators stay open across its microbatches, the ranks'
 * accumulators are merged exactly, bucket by bucket, and each element is
 * rounded once, by the rank that owns it. The optimizer and clipping are
 * the golden run's functions applied to each rank's shard.
 *
 * The plan (dp_plan_t) is pure arithmetic on the parameter table, shared
 * by every rank:
 *  - units: 0 the embeddings, 1..L the layers, L+1 the head (the model's
 *    unit events, model.h); a unit's tensors are one contiguous range;
 *  - buckets: contiguous ranges of the flat parameter vector, in backward
 *    order. ZeRO 0-2: whole tensors up to bucket_cap_mb (Megatron's
 *    grouping); ZeRO-3: one bucket per unit (FSDP's). A bucket is final
 *    when the backward pass of its lowest tensor's unit ends in the last
 *    microbatch;
 *  - shards: bucket b is cut into dp pieces of piece = ceil(len/dp)
 *    elements (the last ones shorter or empty: the "bucket padding");
 *    rank k owns piece k of every bucket, and its shard is those pieces
 *    back to back (shard_len elements, the same on every rank).
 */
#ifndef PARITY_DP_H
#define PARITY_DP_H

#include <stddef.h>
#include <stdint.h>

#include "parity/coll.h"
#include "parity/error.h"
#include "parity/memest.h"
#include "parity/model.h"
#include "parity/pconfig.h"
#include "parity/pp.h"

typedef struct {
    int first, last;       /* tensors [first, last) */
    size_t lo, hi;         /* flat elements [lo, hi) */
    size_t piece;          /* elements per rank piece: ceil((hi - lo) / dp) */
    size_t shard_off;      /* where this bucket's piece sits in a shard */
    int ready_unit;        /* final after this unit's backward */
} dp_bucket_t;

typedef struct {
    int dp, stage, nunits;
    int tied;                    /* the head reads the embedding's bucket too */
    int *unit_first, *unit_last; /* [nunits] tensor ranges */
    int *unit_of_tensor;         /* [count] */
    int nbuckets;
    dp_bucket_t *buckets;        /* in backward (readiness) order */
    int *bucket_of_unit;         /* ZeRO-3: [nunits], -1 for a unit with no tensors held */
    size_t shard_len;            /* sum of pieces */
} dp_plan_t;

int  dp_plan_build(dp_plan_t *p, const param_table_t *t, const model_config_t *cfg, int dp,
                   int stage, double bucket_cap_mb, perr_t *err);
void dp_plan_free(dp_plan_t *p);
/* Rank k's piece of bucket b: flat elements [*lo, *hi) (possibly empty). */
void dp_piece(const dp_plan_t *p, int b, int k, size_t *lo, size_t *hi);
/* The bucket holding flat element x, and the rank owning its piece. */
void dp_owner(const dp_plan_t *p, size_t x, int *bucket, int *rank);
/* ZeRO-3: the buckets a unit's forward or backward reads (its own, and
 * the embeddings' for a tied head), gathered together; returns 0 to 2
 * (a pipeline stage has no bucket for a unit whose tensors it does not
 * hold: empty tensors make no bucket). */
int  dp_unit_buckets(const dp_plan_t *p, int unit, int out[2]);
/* Pipeline with a tied head: the word embedding's gradient is complete
 * only after the embedding group's reduction, so its bucket is never
 * ready during the backward pass (dp_reduce_pending reduces it). */
void dp_plan_hold_embedding(dp_plan_t *p, const param_table_t *t);

/* The config a layout's replicas run: the model with the layout's global
 * batch and its largest microbatch (pconfig.h; it need not divide the
 * batch: model_config_validate_replica). */
void dp_replica_config(const model_config_t *model, const pconfig_t *pc, model_config_t *out);
/* The largest rank's device memory (the ranks of a pipeline stage are
 * alike), the sum over every rank (*all) and the run's host buffers,
 * before anything is allocated (memest.h): the replica
 * (gpt_mem_bytes), the shards and collective buffers a rank allocates,
 * and ZeRO-3's largest set of units gathered at once, from the tables the
 * allocations use. */
int  dp_memest(const model_config_t *model, const pconfig_t *pc, memest_dev_t *dev, size_t *all,
               size_t *host, perr_t *err);

/* ---- running a layout --------------------------------------------------- */

struct corpus;
struct dump;
struct ckpt_state;

/* A replicated tensor whose copies disagree. Collecting a dump, every
 * device's copy of a replicated tensor (ZeRO 0-2 parameters; DDP's
 * all-gathered gradients; the loss, lr and norm) is memcmp'd against the
 * one the dump takes: a replica that drifts is a divergence even when the
 * dump's copy is right. */
typedef struct {
    char name[160];   /* the dump's name, e.g. step0.param.layers.0.mlp.dense_4h_to_h.weight */
    uint64_t flat;    /* the first element at which some replica differs */
    int device;       /* the lowest device whose replica differs there */
    int taken;        /* the device whose copy the dump holds */
    int ndiffer;      /* replicas that differ anywhere in the tensor */
    float got, want;  /* device's value and the dump's at flat */
} dp_replica_diff_t;

typedef struct {
    double predicted[MEM_NCAT];  /* bytes, from the ZeRO formulas (fp32) */
    size_t peak[MEM_NCAT];       /* measured high-water marks */
    size_t peak_total;
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
} dp_device_report_t;

typedef struct {
    model_config_t model;        /* the golden model (its global batch) */
    pconfig_t pc;                /* validated layout */
    int steps;
    const struct corpus *data;
    size_t arena_capacity;       /* per device, 0 = unlimited */
    coll_algo_t algo;
    /* Test-only: reduce gradients with plain fp32 ring sums of rounded
     * local gradients, to prove that the checker catches a real bug. */
    int broken_fp32_sums;
    int broken_tp_fp32_sums;  /* the row-parallel completions in fp32 (Megatron-LM 1736's kind) */
    int broken_tp_vocab_pad;  /* a vocabulary padding that depends on tp (Megatron-LM 1754) */
    int broken_pp_mask_key;   /* dropout masks keyed by a stage's microbatch count (PyTorch 55036) */
    int broken_pp_tied_grad;  /* the tied embedding's gradient skips the embedding group */
    int broken_cp_online_softmax; /* the ring merges blocks with online softmax (flash-style) */
    const char *trace_path;   /* --trace: a Chrome trace-event file of the run, or NULL */
    /* Test-only: 1 + the rank whose parameter replica drifts (one bit of
     * one element flipped after every update; ZeRO 0-2), to prove that
     * collection catches a replica that disagrees; 0 = off. */
    int broken_replica;
    /* Test-only checker controls, DP_BROKEN_* bits (all on device or
     * rank 1): proofs that the checker sees optimizer state, coverage and
     * activation gradients. */
    unsigned broken_check;
    /* Collection: the reassembled global tensors of the dumped steps, in a
     * dump_t made for this model (dump.h), or NULL. */
    struct dump *dump;
    const uint8_t *dump_step;    /* [steps] 1 = collect that step, or NULL = all */
    /* Layout-free checkpoints (ckpt.h). resume: start from these global
     * tensors, cut onto the layout's blocks and shards; the run's steps
     * are then resume->step .. resume->step + steps - 1 (data, masks, the
     * learning rate and dump names follow the global step; stats[] and
     * dump_step[] stay indexed from 0). save: after the last step, the
     * state reassembled into global tensors (vectors allocated by the
     * caller, ckpt_state_alloc). NULL: neither. */
    const struct ckpt_state *resume;
    struct ckpt_state *save;
    /* Stop after the first step whose loss or gradient norm is not
     * finite, as the golden run does: both are all-reduced, so every
     * device sees the same values and all stop after the same step. */
    int stop_nonfinite;
    /* results */
    int steps_run;               /* steps completed: steps, or fewer after a stop */
    gpt_step_stats_t *stats;     /* [steps] or NULL */
    dp_device_report_t *reports; /* [dp] or NULL */
    dp_replica_diff_t *replica_diffs; /* collection: one per disagreeing tensor
                                         (malloc'd, the caller frees), or NULL */
    int n_replica_diffs;
} dp_run_t;

/* DP_BROKEN_ADAM_REPLICA: DDP, device 1 flips one bit of its exp_avg
 * replica after every update. DP_BROKEN_ZERO_SHARD: ZeRO >= 1, data-
 * parallel rank 1 changes one element of its exp_avg_sq shard after the
 * last update. DP_BROKEN_UNWRITTEN: device 1 leaves one element of its
 * gradient piece out of the reassembly. DP_BROKEN_TP_INPUT_GRAD:
 * tensor-parallel rank 1 flips one bit of the last layer's input
 * gradient (GPT_BROKEN_TP_INPUT_GRAD). */
enum { DP_BROKEN_ADAM_REPLICA = 1u, DP_BROKEN_ZERO_SHARD = 2u, DP_BROKEN_UNWRITTEN = 4u,
       DP_BROKEN_TP_INPUT_GRAD = 8u };
/* Trains run->steps steps of the layout; 0, or -1 with a message. */
int dp_train(dp_run_t *run, perr_t *err);
/* The global index of the run's first step: 0, or the checkpoint's. */
int64_t dp_first_step(const dp_run_t *run);
/* Host bytes a layout adds to load or save a checkpoint, beside the
 * global state (ckpt_host_bytes): every tp rank's AdamW blocks. */
size_t dp_ckpt_host_bytes(const model_config_t *model, const pconfig_t *pc);

/* Prints the per-device memory next to the ZeRO formulas, and the
 * communication volume next to 2Psi / 3Psi; with tp > 1 also the
 * tensor-parallel traffic next to Megatron's formulas and the activation
 * memory next to the slot's formula, with and without sequence
 * parallelism (dp_report_tp.c). */
void dp_print_report(const dp_run_t *run, FILE *f);

/* Where a layout placed each global tensor, for the divergence report. */
typedef struct {
    model_config_t cfg;   /* the replica config */
    pconfig_t pc;
    param_table_t table;
    dp_plan_t plan;
    pp_plan_t pp;         /* which stage holds which units */
} dp_placement_t;
int  dp_placement_init(dp_placement_t *pl, const model_config_t *model, const pconfig_t *pc,
                       perr_t *err);
void dp_placement_free(dp_placement_t *pl);
/* Which device (and microbatch) produced element `flat` of dump tensor t
 * in this layout, as check.h's describe wants it: batch tensors by
 * sequence; gradients by the owner of the element's bucket piece (the
 * exact reduce-scatter rounds it there); parameters by the device that
 * updates them, for each ZeRO stage; all-reduced scalars. */
void dp_describe_element(const dp_placement_t *pl, const st_tensor_t *t, uint64_t flat, char *buf,
                         size_t cap);
/* World rank `rank` with its coordinates on every axis, sizes of 1
 * included: "5 (tp 1, cp 0, ep 0, dp 0, pp 1)". */
void dp_device_name(const pconfig_t *pc, int rank, char *buf, size_t cap);
/* Element `flat` of dump tensor t in mesh terms, for the first-divergence
 * report (dp_report_mesh.c): `device` (the world rank that wrote it; -1:
 * the one the layout gives it) named on every axis with this element's
 * sub-axes, "9 (tp 1, cp 0, ep 0, dp 0, pp 1; vpp chunk 1)"; its
 * microbatch, or how the step's microbatches made it; and which mode's
 * reduction touched it last, from its name and the layout alone:
 * "dp: the exact reduce-scatter of gradient bucket 0 ...". Each buffer
 * holds cap bytes. */
void dp_describe_mesh(const dp_placement_t *pl, const st_tensor_t *t, uint64_t flat, int device,
                      char *dev, char *micro, char *touched, size_t cap);

#endif
