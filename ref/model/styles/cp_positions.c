/* cp_positions.c - which positions a context-parallel rank holds (cp.h).
 *
 * The model needs this to lay out its token tensors, key its dropout
 * masks by global position (I3) and add position embeddings, so it lives
 * with the model; the parallel layers only pass the degree and the rank.
 */
#include "parity/cp.h"

const char *cp_comm_name(cp_comm_t c) { return c == CP_ULYSSES ? "a2a" : "p2p"; }

cp_runs_t cp_runs(int cp, int rank, int T, cp_comm_t comm) {
    cp_runs_t r = {1, {0, 0}, {T, 0}};
    if (cp <= 1) return r;
    if (comm == CP_ULYSSES) {
        r.t0[0] = rank * (T / cp), r.len[0] = T / cp;
        return r;
    }
    /* causal load balancing: chunk r (few keys per query) beside chunk
     * 2cp-1-r (many), so every rank attends the same number of pairs */
    const int chunk = T / (2 * cp);
    r.n = 2;
    r.t0[0] = rank * chunk, r.len[0] = chunk;
    r.t0[1] = (2 * cp - 1 - rank) * chunk, r.len[1] = chunk;
    return r;
}

cp_runs_t cp_runs_slice(const cp_runs_t *r, int from, int len) {
    cp_runs_t out = {0, {0, 0}, {0, 0}};
    for (int k = 0, at = 0; k < r->n; at += r->len[k++]) {
        const int lo = from > at ? from : at, hi = from + len < at + r->len[k] ? from + len : at + r->len[k];
        if (lo < hi && out.n < CP_MAX_RUNS) {
            out.t0[out.n] = r->t0[k] + (lo - at), out.len[out.n] = hi - lo;
            out.n++;
        }
    }
    return out;
}

int cp_check(int cp, cp_comm_t comm, int T, int tile, int heads, int tp, perr_t *err) {
    if (cp <= 1) return 0;
    const int tiles = T / tile;
    if (comm == CP_RING && tiles % (2 * cp))
        return perr_set(err, "context-parallel-size: 2 x %d = %d chunks must divide the %d token "
                             "tiles of a sequence (seq_length %d / tile_tokens %d): the ring's causal "
                             "load balancing gives each rank chunks r and 2cp-1-r of whole canonical "
                             "tiles (I1)",
                        cp, 2 * cp, tiles, T, tile);
    if (comm == CP_ULYSSES && tiles % cp)
        return perr_set(err, "context-parallel-size: %d must divide the %d token tiles of a sequence "
                             "(seq_length %d / tile_tokens %d): a rank holds whole canonical tiles (I1)",
                        cp, tiles, T, tile);
    if (comm == CP_ULYSSES && heads % tp)
        return perr_set(err, "context-parallel-size: Ulysses (--cp-comm-type a2a) gives each rank "
                             "heads/(tp x cp) whole heads, but %d heads do not split evenly over "
                             "%d tensor-parallel blocks (the all-to-all moves equal head groups)",
                        heads, tp);
    if (comm == CP_ULYSSES && (heads / tp) % cp)
        return perr_set(err, "context-parallel-size: Ulysses (--cp-comm-type a2a) gives each rank "
                             "heads/(tp x cp) whole heads, but %d heads / tp %d = %d is not divisible "
                             "by %d",
                        heads, tp, heads / tp, cp);
    return 0;
}

int64_t cp_attention_pairs(int cp, int rank, int T, int tile, cp_comm_t comm) {
    const int64_t nt = T / tile;
    if (comm == CP_ULYSSES) return nt * (nt + 1) / 2;
    const cp_runs_t r = cp_runs(cp, rank, T, comm);
    int64_t pairs = 0;
    for (int k = 0; k < r.n; k++)
        for (int q = r.t0[k] / tile; q < (r.t0[k] + r.len[k]) / tile; q++) pairs += q + 1;
    return pairs;
}
