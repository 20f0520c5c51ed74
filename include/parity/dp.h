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
    unsigned reduce;       /* its tensors' gradient reduction axes (param_info_t.reduce):
                              a bucket never mixes groups */
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
 * ready during the backward pass (engine_reduce_pending reduces it). */
void dp_plan_hold_embedding(dp_plan_t *p, const param_table_t *t);
/* ZeRO-3: the bytes of bucket b gathered whole (every rank's piece). */
static inline size_t dp_gathered_bytes(const dp_plan_t *p, int b) {
    return p->buckets[b].piece * (size_t)p->dp * sizeof(float);
}

#endif
