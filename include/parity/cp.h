/* cp.h - context parallelism: which positions of every sequence a rank
 * holds, and what its attention costs.
 *
 * Two ways to split a sequence over the cp ranks of a context-parallel
 * group:
 *
 *   CP_RING (Megatron's --cp-comm-type p2p): the sequence is cut into
 *     2*cp equal chunks and rank r keeps chunks r and 2*cp-1-r (causal
 *     load balancing: an early chunk, whose queries see few keys, beside
 *     a late one, which sees many). Queries stay; key and value tiles go
 *     around the ring.
 *   CP_ULYSSES (DeepSpeed-Ulysses, --cp-comm-type a2a): rank r keeps the
 *     r-th of cp contiguous pieces; an all-to-all re-shards sequence to
 *     heads around attention, which then runs whole sequences for
 *     heads/cp of the heads.
 *
 * With cp = 1 both hold [0, T): the golden run.
 *
 * Positions are held as runs of consecutive positions (at most
 * CP_MAX_RUNS), in the order the rank's tensors store them: a token
 * tensor [n_seq, Tc, ...] holds run 0's positions, then run 1's, for each
 * sequence (Tc = T / cp).
 */
#ifndef PARITY_CP_H
#define PARITY_CP_H

#include <stdint.h>

#include "parity/error.h"

typedef enum { CP_RING = 0, CP_ULYSSES = 1 } cp_comm_t;

enum { CP_MAX_RUNS = 2 };

typedef struct {
    int n;                     /* runs */
    int t0[CP_MAX_RUNS];       /* first position of each run */
    int len[CP_MAX_RUNS];      /* positions in it */
} cp_runs_t;

/* "p2p" / "a2a" (Megatron's --cp-comm-type values). */
const char *cp_comm_name(cp_comm_t c);

/* The positions rank `rank` of cp holds of a sequence of T positions. */
cp_runs_t cp_runs(int cp, int rank, int T, cp_comm_t comm);

/* Positions [from, from + len) of the order r stores them in, as runs
 * (sequence parallelism's part of a context-parallel rank's positions). */
cp_runs_t cp_runs_slice(const cp_runs_t *r, int from, int len);

/* Whether the split is possible for a model of seq_length T with token
 * tiles of `tile`, `heads` attention heads and tensor-parallel degree tp;
 * -1 with a message naming the flag and what must divide what:
 *   ring:    2*cp must divide the T/tile token tiles (a chunk is whole tiles, I1);
 *   ulysses: cp must divide the T/tile token tiles, and heads/tp. */
int cp_check(int cp, cp_comm_t comm, int T, int tile, int heads, int tp, perr_t *err);

/* The causal attention work of a rank for ONE head, in (query tile, key
 * tile) pairs with key tile <= query tile: ring, its own query tiles
 * against every key (sum of qi + 1); Ulysses, the whole triangle of the
 * heads it holds (heads / cp of them, each nT (nT + 1) / 2). With causal
 * load balancing the ring ranks' counts are equal: chunk r's and chunk
 * 2cp-1-r's add to the same for every r. */
int64_t cp_attention_pairs(int cp, int rank, int T, int tile, cp_comm_t comm);

#endif
