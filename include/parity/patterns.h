/* patterns.h - the JSON "model parallel patterns" file (the TF-XLA / DTU
 * dialect) read into a layout (pconfig.h).
 *
 *   {"mode": "hybrid", "sharding_size": 2, "sharding_dim": -1, "stage_cnt": 2,
 *    "accum_degree": 4,
 *    "device_mapping": {"stage_0": {"shard_0": "/device:XLA_DTU:0", "shard_1": "/device:XLA_DTU:1"},
 *                       "stage_1": {"shard_0": "/device:XLA_DTU:2", "shard_1": "/device:XLA_DTU:3"}}}
 *
 * How it maps (written down in CONTRIBUTING.md too):
 *  - mode "sharding": tensor parallelism of sharding_size; stage_cnt > 1
 *    stages run one after another, one microbatch at a time through all
 *    of them (naive model parallelism: the "naive" schedule, pp.h);
 *    "pipeline": stage_cnt stages pipelined (1F1B), nothing sharded;
 *    "hybrid": both, pipelined.
 *  - sharding_dim -1 shards the output dimension of the first linear of
 *    each pair (qkv, fc1: column-parallel, whole heads), whose partner
 *    (dense, fc2) then shards its reduction dimension: Megatron's
 *    column-then-row pairing, the vocabulary-parallel embedding and head
 *    with it. 0 shards the reduction dimension of every linear (qkv,
 *    dense, fc1, fc2 row-parallel: each contracts the rank's slice of its
 *    input features and its output is an open sum completed across the
 *    group; attention and GeLU run whole on every rank; input gradients
 *    are gathered by columns): --tensor-parallel-row-linears. The
 *    vocabulary-parallel embedding and head are the same in both.
 *  - accum_degree: microbatches per step (per data-parallel rank).
 *  - device_mapping (optional): stage_<i> -> shard_<j> -> "/device:TYPE:ID"
 *    for i < stage_cnt, j < sharding_size, every one present once. IDs
 *    name simulated devices and need not be contiguous: parity numbers
 *    the named devices 0..n-1 in increasing id order, and the device named
 *    at stage_i.shard_j is the world rank holding pipeline stage i, tensor
 *    rank j: any permutation. One that is a plain rank order (shards
 *    fastest, "tp-pp", or stages fastest, "pp-tp") is that order; any
 *    other is the order tp-pp with a rank list (pconfig_t.rank_list: the
 *    device at each position stage * sharding_size + shard). Data-parallel
 *    replicas follow as the slowest axis, each placed as the mapping places
 *    the first (--world-size W gives dp = W / (tp pp) replicas, replica k
 *    on devices k tp pp ..; ids stay names, below the PARITY_MAX_DEVICES devices parity
 *    simulates). Without a mapping the order is the flags' (Megatron's
 *    tp-cp-ep-dp-pp, and --rank-list if given). A --pipeline-schedule
 *    flag may choose how "pipeline"/"hybrid" stages are pipelined; with
 *    "sharding" stages (naive) it is a conflict.
 *  - data parallelism is inferred: dp = world / (sharding_size x stage_cnt).
 */
#ifndef PARITY_PATTERNS_H
#define PARITY_PATTERNS_H

#include <stddef.h>

#include "parity/error.h"
#include "parity/pconfig.h"

/* Reads text[0..len) (`path` only for messages) into pc: tp, pp, the
 * schedule, accum_degree, the rank order and rank list. Layout fields
 * already set by flags (pc->tp, pc->pp, --rank-order, --rank-list,
 * --accum-degree, a schedule) are a conflict. 0, or -1 with err naming
 * the key and what was expected. */
int patterns_parse(const char *text, size_t len, const char *path, pconfig_t *pc, perr_t *err);

#endif
