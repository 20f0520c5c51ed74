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
 *  - shards: bucket b is cut into n pieces of piece = ceil(len/n)
 *    elements (the last ones shorter or empty: the "bucket padding"), n
 *    the size of its tensors' gradient group; rank k of that group owns
 *    piece k, and a rank's shard is its pieces back to back (shard_len
 *    elements, the same on every rank of a part). Under adamw8bit
 *    (model.h) a piece must hold whole quantization blocks, so cut k
 *    moves up from lo + k*ceil(len/n) to the next block boundary of the
 *    tensor it falls in (a tensor's blocks start at its first element):
 *    pieces differ in length, `piece` is the longest, and collectives
 *    still move n pieces of `piece` elements, each padded;
 *  - groups: a bucket holds the tensors of one gradient group (their
 *    placements' reduction axes, param_info_t.reduce). Expert
 *    parallelism has two: dense tensors reduce over dp-ep-cp, experts cut
 *    over ep over dp-cp (the expert-data ranks); a ZeRO-3 unit holding
 *    both is one bucket per run of one group.
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
    size_t piece;          /* elements per rank piece: ceil((hi - lo) / n) */
    int n;                 /* the ranks of its gradient group */
    size_t shard_off;      /* where this bucket's piece sits in a shard */
    int ready_unit;        /* final after this unit's backward */
    unsigned reduce;       /* its tensors' gradient reduction axes (param_info_t.reduce):
                              a bucket never mixes groups */
    const size_t *cut;     /* block-aligned pieces (adamw8bit): [n + 1], piece k is flat
                              [cut[k], cut[k+1]); NULL: piece k starts at lo + k * piece */
    size_t qpiece;         /* adamw8bit: absmax entries of the largest piece's state */
    size_t qshard_off;     /* where this bucket's absmax entries sit in a shard's */
} dp_bucket_t;

enum { DP_UNIT_MAX_BUCKETS = 4 }; /* a unit's runs of one group (2), the tied embedding's */
typedef struct {
    int dp, stage, nunits;       /* dp: the largest gradient group (buffers are sized by it) */
    int tied;                    /* the head reads the embedding's bucket too */
    int *unit_first, *unit_last; /* [nunits] tensor ranges */
    int *unit_of_tensor;         /* [count] */
    int nbuckets;
    dp_bucket_t *buckets;        /* in backward (readiness) order */
    int *bucket_of_unit;         /* ZeRO-3: [nunits] the unit's first bucket, -1 for a unit
                                    with no tensors held */
    int *unit_nbuckets;          /* ZeRO-3: [nunits] its buckets (one per run of one group) */
    size_t shard_len;            /* sum of pieces */
    int qblock;                  /* adamw8bit's block size (0: fp32 AdamW) */
    size_t shard_qlen;           /* adamw8bit: absmax entries of a shard's state (sum of qpiece) */
    size_t *cuts;                /* the buckets' cut arrays, one block */
} dp_plan_t;

int  dp_plan_build(dp_plan_t *p, const param_table_t *t, const model_config_t *cfg, int dp,
                   int stage, double bucket_cap_mb, perr_t *err);
/* The same on a grid: each bucket's group is its tensors' reduction axes
 * (param_info_t.reduce) at these axis sizes (dp_plan_build: every bucket
 * over dp ranks). */
int  dp_plan_build_grid(dp_plan_t *p, const param_table_t *t, const model_config_t *cfg,
                        const int sizes[GRID_NAXES], int stage, double bucket_cap_mb, perr_t *err);
/* DP_PLAN_UNALIGNED: pieces cut at lo + k*ceil(len/n) even under
 * adamw8bit, whose update then counts blocks from each piece's own start:
 * the per-shard blocks of --test-broken adamw8bit-shard-blocks. */
enum { DP_PLAN_UNALIGNED = 1u };
int  dp_plan_build_grid_ex(dp_plan_t *p, const param_table_t *t, const model_config_t *cfg,
                           const int sizes[GRID_NAXES], int stage, double bucket_cap_mb,
                           unsigned flags, perr_t *err);
void dp_plan_free(dp_plan_t *p);
/* Rank k's piece of bucket b: flat elements [*lo, *hi) (possibly empty). */
void dp_piece(const dp_plan_t *p, int b, int k, size_t *lo, size_t *hi);
/* The bucket holding flat element x, and the rank owning its piece. */
void dp_owner(const dp_plan_t *p, size_t x, int *bucket, int *rank);
/* A piece, tensor by tensor: tensor t's flat elements [a, e) of the piece
 * [lo, hi), at x = a - lo in it, and (adamw8bit) its state's first absmax
 * entry q, counted from the piece's first (each tensor's part of a piece
 * starts a block). dp_runs(b) starts; dp_run_next steps, 0 when done. */
typedef struct {
    int t, last;
    size_t lo, hi, a, e, x, q;
    int qblock;
} dp_run_t;
dp_run_t dp_runs(const dp_plan_t *p, int b, size_t lo, size_t hi);
int  dp_run_next(const param_table_t *t, dp_run_t *r);
/* ZeRO-3: the buckets a unit's forward or backward reads (its own, and
 * the embeddings' for a tied head), gathered together; returns 0 to
 * DP_UNIT_MAX_BUCKETS (a pipeline stage has no bucket for a unit whose
 * tensors it does not hold: empty tensors make no bucket). */
int  dp_unit_buckets(const dp_plan_t *p, int unit, int out[DP_UNIT_MAX_BUCKETS]);
/* Pipeline with a tied head: the word embedding's gradient is complete
 * only after the embedding group's reduction, so its bucket is never
 * ready during the backward pass (engine_reduce_pending reduces it). */
void dp_plan_hold_embedding(dp_plan_t *p, const param_table_t *t);
/* ZeRO-3: the bytes of bucket b gathered whole (every rank's piece). */
static inline size_t dp_gathered_bytes(const dp_plan_t *p, int b) {
    return p->buckets[b].piece * (size_t)p->buckets[b].n * sizeof(float);
}

#endif
