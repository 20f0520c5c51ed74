/* query.c - a replica's extents as the engine asks for them (gpt.h's
 * queries): the parallel engine (ref/parallel/engine/) reads no field of
 * gpt_local_t or gpt_shard_t, only these. */
#include "model/gpt.h"

size_t gpt_stream_floats(const gpt_t *g, int n_seq) {
    return (size_t)n_seq * (size_t)g->local.seq_held / (size_t)g->local.seq_parts *
           (size_t)g->local.hid; /* 2-D: the column's features */
}

int gpt_batch_blocks(const gpt_t *g, int *block) {
    const gpt_shard_t *sh = &g->shard;
    if (!sh->tp_mode) {
        *block = 0;
        return 1;
    }
    *block = sh->tp_dep * g->local.t2q + sh->tp_row;
    return sh->tp_depth * g->local.t2q;
}

int gpt_tp_cuts_batch(const gpt_t *g) { return g->local.t2q != 0; }

void gpt_chunk_units(const gpt_t *g, int c, int *lo, int *hi) {
    *lo = g->shard.units.lo[c];
    *hi = g->shard.units.hi[c];
}
