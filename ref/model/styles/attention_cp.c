/* attention_cp.c - attention over a context-parallel ring, with the
 * golden bits (MODEL.md, Attention; DESIGN.md §5, split-key attention):
 * the kernels of the ring style (attention_ring.c, attention.h).
 *
 * Ring (Megatron's --cp-comm-type p2p). A rank keeps its query tiles
 * (chunks r and 2cp-1-r) and sees every key and value tile once as the
 * blocks of the cp ranks go around the ring. Everything is named by
 * GLOBAL tile indices, so a (query tile, key tile) pair is the golden
 * run's tile product whichever rank computes it and whenever its block
 * arrives:
 *   pass K: score tiles s[qi, kj] for the key tiles qi's rows attend
 *           (attention_key_tiles: kj <= qi under the causal mask; an
 *           encoder-decoder's spans, attention_span, over the one stream)
 *           into the rank's rows of e [Tc, T]; then each row's max, exp
 *           and Z exactly as golden (the whole row is there: the max is
 *           global, no rescaling);
 *   pass V: U[qi] = round(sum over kj of ehat.v), an open exact sum over
 *           the blocks in any arrival order; o = U / Z.
 *   backward, one pass over K and V together: the g tiles, dQ open over
 *           blocks; each block's dK/dV partials go back to their owner as
 *           open sums (point-to-point, the receive adds exactly).
 * A tile product that is the only term of its sum (a query tile with one
 * key tile, attention_key_tiles; a key tile one query tile attends,
 * attention_query_tiles) is the result itself in golden (contract.h),
 * keeping a -0. The first lies with its query, stored directly; the
 * second is stored directly by the key's owner, which also holds that
 * query tile under every mask there is (causal: key tile nT-1 and query
 * tile nT-1; a decoder's causal target: the last source and the last
 * target tile, each against itself; bidirectional source keys: every
 * query tile attends them).
 */
#include <math.h>
#include <string.h>

#include "model/gpt.h"
#include "parity/coll.h"
#include "parity/pmath.h"
#include "parity/runtime.h"
#include "model/styles/attention.h"

enum { TAG_K = 1, TAG_V = 2, TAG_KV = 3, TAG_DKV = 4 };

/* The geometry of one call. */
typedef struct {
    int nb, T, Tc, Tt, nT, H, D, A, ld; /* sequences, positions, held, tile, tiles, heads, head
                                           size, heads*D, qkv row */
    int cp, rank;
    int *tiles;                          /* [cp][Tc/Tt]: the global tile of each of owner o's
                                            local tiles (the scratch's tiles) */
    const int *qt;                       /* this rank's: tiles + rank * Tc/Tt */
    const int *k0, *k1, *q0, *q1;         /* [nT] each global tile's sums: the key tiles of a
                                            query tile, the query tiles of a key tile */
    attn_shape_t as;                     /* the block's mask (attention_span) */
    float scale, inv;
} ring_t;

static void tiles_of(const cp_runs_t *r, int Tt, int *out) {
    for (int k = 0, a = 0; k < r->n; k++)
        for (int t = r->t0[k]; t < r->t0[k] + r->len[k]; t += Tt) out[a++] = t / Tt;
}

static ring_t ring_of(const gpt_t *g, const pass_t *p) {
    const gpt_local_t *lc = &g->local;
    ring_t R = {p->n_seq, p->T, p->Tc, g->cfg.tile_tokens, p->T / g->cfg.tile_tokens, lc->heads,
                lc->attn / lc->heads, lc->attn, 3 * lc->attn, lc->cp, lc->cp_rank, NULL, NULL,
                NULL, NULL, NULL, NULL, p->as, pm_rsqrtf((float)(g->cfg.hidden / g->cfg.heads)),
                p->as.p > 0.0f ? dropout_scale(p->as.p) : 1.0f};
    const int nq = R.Tc / R.Tt;
    ring_scratch_t *S = attention_scratch(g);
    R.tiles = S->tiles;
    if (g->shard.broken & GPT_BROKEN_CP_CAUSAL_RING) R.as.mask = ATTN_CAUSAL; /* every block */
    int *span[4] = {S->spans, S->spans + R.nT, S->spans + 2 * R.nT, S->spans + 3 * R.nT};
    for (int t = 0; t < R.nT; t++) {
        attention_key_tiles(&R.as, t, &span[0][t], &span[1][t]);
        attention_query_tiles(&R.as, t, &span[2][t], &span[3][t]);
    }
    R.k0 = span[0], R.k1 = span[1], R.q0 = span[2], R.q1 = span[3];
    for (int o = 0; o < R.cp; o++) {
        const cp_runs_t r = cp_runs(R.cp, o, R.T, CP_RING);
        tiles_of(&r, R.Tt, R.tiles + (size_t)o * nq);
    }
    R.qt = R.tiles + (size_t)R.rank * nq;
    return R;
}

/* Whether query tile qi's sums take key tile kj; whether qi's (kj's) sum
 * has that one tile only. */
static int live(const ring_t *R, int qi, int kj) { return kj >= R->k0[qi] && kj < R->k1[qi]; }
static int one_key(const ring_t *R, int qi) { return R->k1[qi] - R->k0[qi] == 1; }
static int one_query(const ring_t *R, int kj) { return R->q1[kj] - R->q0[kj] == 1; }

/* The global tiles of owner o's block. */
static const int *block_tiles(const ring_t *R, int o) {
    return R->tiles + (size_t)o * (R->Tc / R->Tt);
}

/* Packs the D columns at offset col of every head's (q, k, v) group of
 * qkv [n, 3A] into out [n, w_out], head h at column out_col + h*D: the
 * block a rank sends (K: col D; V: col 2D). */
static void pack_heads(float *out, int w_out, int out_col, const float *qkv, const ring_t *R,
                       int col) {
    const size_t n = (size_t)R->nb * R->Tc;
    for (size_t i = 0; i < n; i++)
        for (int h = 0; h < R->H; h++)
            memcpy(out + i * w_out + out_col + (size_t)h * R->D,
                   qkv + i * R->ld + (size_t)h * 3 * R->D + col, (size_t)R->D * sizeof(float));
}

/* One ring pass: blocks of `count` floats [n, w] start at own, and at
 * step s the block of rank (rank - s) mod cp is handed to visit while the
 * next one arrives (non-blocking send to the next rank, receive from the
 * previous, two receive buffers). */
typedef void (*visit_fn)(gpt_t *g, const pass_t *p, const ring_t *R, attn_acts_t *LA,
                         const float *blk, int owner, int step, void *ctx);

static void ring_pass(gpt_t *g, const pass_t *p, const ring_t *R, attn_acts_t *LA, size_t count,
                      int tag, visit_fn visit, void *ctx, group_t *grp) {
    float **kv = ((ring_scratch_t *)attention_scratch(g))->kv;
    const float *cur = kv[0];
    /* the ring's own numbering: cp's (R->rank of R->cp), unless a broken
     * variant passes another group */
    const int me = group_rank(grp), size = group_size(grp);
    for (int s = 0; s < size; s++) {
        coll_request_t *req[2] = {NULL, NULL};
        float *next = kv[1 + s % 2];
        if (s < size - 1) {
            req[0] = coll_isend(grp, cur, count, COLL_F32, (me + 1) % size, tag);
            req[1] = coll_irecv(grp, next, count, COLL_F32, (me + size - 1) % size, tag);
        }
        visit(g, p, R, LA, cur, (me - s + size) % size, s, ctx);
        coll_wait_all(2, req);
        cur = next;
    }
}

/* ---- forward ------------------------------------------------------------ */

/* The forward ring's group: cp's. The deliberately broken variant
 * GPT_BROKEN_TP2D_CP_RING_GROUP passes the K and V blocks over 2-D's tp
 * column group instead (a wrong process group: ranks of the same
 * features and positions but other sequences, so every block arrives in
 * the right shape with another row's keys); the backward keeps cp's, so
 * the run completes and the checker names the first wrong tensor. */
static group_t *forward_group(const gpt_t *g) {
    const int broken = (g->shard.broken & GPT_BROKEN_TP2D_CP_RING_GROUP) && g->shard.tp_col_group;
    return broken ? g->shard.tp_col_group : g->shard.cp_group;
}

static void visit_scores(gpt_t *g, const pass_t *p, const ring_t *R, attn_acts_t *LA,
                         const float *blk, int owner, int step, void *ctx) {
    (void)p, (void)step, (void)ctx;
    const int *kt = block_tiles(R, owner);
    const int Tt = R->Tt, nq = R->Tc / Tt;
    for (int b = 0; b < R->nb; b++)
        for (int h = 0; h < R->H; h++) {
            const float *q = LA->qkv + (size_t)b * R->Tc * R->ld + (size_t)h * 3 * R->D;
            const float *k = blk + (size_t)b * R->Tc * R->A + (size_t)h * R->D;
            float *E = LA->att_e + ((size_t)b * R->H + h) * R->Tc * R->T;
            for (int a = 0; a < nq; a++)
                for (int t = 0; t < nq; t++)
                    if (live(R, R->qt[a], kt[t]))
                        contract(CONTRACT_NT, Tt, Tt, R->D, Tt, Tt, R->D, q + (size_t)a * Tt * R->ld,
                                 R->ld, k + (size_t)t * Tt * R->A, R->A,
                                 E + (size_t)a * Tt * R->T + (size_t)kt[t] * Tt, R->T, &g->ws);
        }
}

static void softmax_rows(attn_acts_t *LA, const ring_t *R) {
    const uint8_t *keep = LA->att_keep;
    for (size_t bh = 0; bh < (size_t)R->nb * R->H; bh++)
        for (int li = 0; li < R->Tc; li++) {
            const size_t row = (bh * R->Tc + li) * R->T;
            const int i = R->qt[li / R->Tt] * R->Tt + li % R->Tt;
            int lo, hi;
            attention_span(&R->as, i, &lo, &hi);
            LA->att_z[bh * R->Tc + li] = attention_span_softmax(
                LA->att_e + row, LA->att_ehat + row, keep ? keep + row : NULL, lo, hi, R->T,
                R->scale, R->inv);
        }
}

/* U[qi] += ehat[qi, kj].v[kj] for the block's key tiles, open; a query
 * tile's only term stored as the result. */
static void visit_values(gpt_t *g, const pass_t *p, const ring_t *R, attn_acts_t *LA,
                         const float *blk, int owner, int step, void *ctx) {
    (void)p, (void)step;
    acc_t *U = ctx;
    const int *kt = block_tiles(R, owner);
    const int Tt = R->Tt, nq = R->Tc / Tt;
    for (int b = 0; b < R->nb; b++)
        for (int h = 0; h < R->H; h++) {
            const float *Eh = LA->att_ehat + ((size_t)b * R->H + h) * R->Tc * R->T;
            const float *v = blk + (size_t)b * R->Tc * R->A + (size_t)h * R->D;
            const size_t out = (size_t)b * R->Tc * R->A + (size_t)h * R->D;
            for (int a = 0; a < nq; a++)
                for (int t = 0; t < nq; t++) {
                    if (!live(R, R->qt[a], kt[t])) continue;
                    const float *e = Eh + (size_t)a * Tt * R->T + (size_t)kt[t] * Tt;
                    const float *vt = v + (size_t)t * Tt * R->A;
                    const size_t at = out + (size_t)a * Tt * R->A;
                    if (one_key(R, R->qt[a]))
                        contract(CONTRACT_NN, Tt, R->D, Tt, Tt, R->D, Tt, e, R->T, vt, R->A,
                                 LA->ctx + at, R->A, &g->ws);
                    else
                        contract_acc(CONTRACT_NN, Tt, R->D, Tt, Tt, R->D, Tt, e, R->T, vt, R->A, U,
                                     at, (size_t)R->A, &g->ws);
                }
        }
}

/* The deliberately broken merge (GPT_BROKEN_CP_ONLINE_SOFTMAX): each
 * arriving block's scores (still raw) rescale a running fp32 max, sum and
 * output in ring order, as flash-attention-style ring kernels do. */
static void visit_online(gpt_t *g, const pass_t *p, const ring_t *R, attn_acts_t *LA,
                         const float *blk, int owner, int step, void *ctx) {
    (void)g, (void)p;
    float *run = ctx; /* [nb*H*Tc][2]: running max and sum */
    const int *kt = block_tiles(R, owner);
    const int Tt = R->Tt, nq = R->Tc / Tt;
    for (int b = 0; b < R->nb; b++)
        for (int h = 0; h < R->H; h++)
            for (int li = 0; li < R->Tc; li++) {
                const size_t bh = (size_t)b * R->H + h, row = (bh * R->Tc + li) * R->T;
                const int i = R->qt[li / Tt] * Tt + li % Tt;
                float *m = run + 2 * (bh * R->Tc + li), *l = m + 1;
                float *o = LA->ctx + ((size_t)b * R->Tc + li) * R->A + (size_t)h * R->D;
                if (step == 0) {
                    *m = -INFINITY, *l = 0.0f;
                    memset(o, 0, (size_t)R->D * sizeof(float));
                }
                float mb = -INFINITY;
                for (int t = 0; t < nq; t++)
                    for (int j = kt[t] * Tt; j < kt[t] * Tt + Tt && j <= i; j++)
                        mb = LA->att_e[row + j] * R->scale > mb ? LA->att_e[row + j] * R->scale : mb;
                if (mb == -INFINITY) continue;
                const float mn = *m > mb ? *m : mb, alpha = *m == -INFINITY ? 0.0f : pm_expf(*m - mn);
                *l = *l * alpha;
                for (int d = 0; d < R->D; d++) o[d] = o[d] * alpha;
                for (int t = 0; t < nq; t++)
                    for (int j = kt[t] * Tt, c = 0; c < Tt && j <= i; j++, c++) {
                        float e = pm_expf(LA->att_e[row + j] * R->scale - mn);
                        *l = *l + e;
                        if (LA->att_keep) e = e * (float)LA->att_keep[row + j] * R->inv;
                        const float *vj = blk + ((size_t)b * R->Tc + t * Tt + c) * R->A +
                                          (size_t)h * R->D;
                        for (int d = 0; d < R->D; d++) o[d] = o[d] + e * vj[d];
                    }
                *m = mn;
            }
}

void ring_forward(gpt_t *g, const pass_t *p, attn_acts_t *LA) {
    const ring_t R = ring_of(g, p);
    ring_scratch_t *S = attention_scratch(g);
    const size_t n = (size_t)R.nb * R.Tc, count = n * R.A;
    pack_heads(S->kv[0], R.A, 0, LA->qkv, &R, R.D);
    ring_pass(g, p, &R, LA, count, TAG_K, visit_scores, NULL, forward_group(g));
    pack_heads(S->kv[0], R.A, 0, LA->qkv, &R, 2 * R.D);
    if (g->shard.broken & GPT_BROKEN_CP_ONLINE_SOFTMAX) {
        ring_pass(g, p, &R, LA, count, TAG_V, visit_online, S->round, forward_group(g));
        for (int b = 0; b < R.nb; b++)
            for (int h = 0; h < R.H; h++)
                for (int li = 0; li < R.Tc; li++) {
                    const float l = S->round[2 * (((size_t)b * R.H + h) * R.Tc + li) + 1];
                    float *o = LA->ctx + ((size_t)b * R.Tc + li) * R.A + (size_t)h * R.D;
                    for (int d = 0; d < R.D; d++) o[d] = o[d] / l;
                }
        softmax_rows(LA, &R); /* e, ehat and Z for the backward pass */
            return;
    }
    softmax_rows(LA, &R);
    acc_t U;
    acc_init_with(&U, count, S->open);
    acc_zero(&U);
    ring_pass(g, p, &R, LA, count, TAG_V, visit_values, &U, forward_group(g));
    acc_round(&U, S->round);
    acc_free(&U);
    for (int b = 0; b < R.nb; b++)
        for (int li = 0; li < R.Tc; li++) {
            float *o = LA->ctx + ((size_t)b * R.Tc + li) * R.A;
            if (!one_key(&R, R.qt[li / R.Tt])) /* else it holds its only term already */
                memcpy(o, S->round + ((size_t)b * R.Tc + li) * R.A, (size_t)R.A * sizeof(float));
            for (int h = 0; h < R.H; h++) {
                const float z = LA->att_z[((size_t)b * R.H + h) * R.Tc + li];
                for (int d = 0; d < R.D; d++) o[h * R.D + d] = o[h * R.D + d] / z;
            }
        }
}

/* ---- backward ----------------------------------------------------------- */

typedef struct {
    float *dqkv;
    acc_t dq, own, send[2];
    coll_request_t *sent[2];
    coll_request_t **recv; /* [cp] the peers' partials of this rank's keys */
} ring_grads_t;

/* g's row li (query position i) against key tile kj [Tt]: the
 * elementwise chain on the row's keys there (attention_span), zeros on
 * the others, as golden's row over all its keys. */
static void grad_row(const ring_t *R, float *gr, const float *E, const uint8_t *keep, size_t li,
                     int i, int kj, float dz) {
    const int Tt = R->Tt, c0 = kj * Tt;
    int lo, hi;
    attention_span(&R->as, i, &lo, &hi);
    const int a = lo > c0 ? lo - c0 : 0, b = hi < c0 + Tt ? hi - c0 : Tt;
    if (b <= a) {
        memset(gr, 0, (size_t)Tt * sizeof(float));
        return;
    }
    const size_t at = li * R->T + (size_t)c0 + (size_t)a;
    attention_grad_span(gr + a, E + at, keep ? keep + at : NULL, b - a, dz, R->scale, R->inv);
    memset(gr, 0, (size_t)a * sizeof(float));
    memset(gr + b, 0, (size_t)(Tt - b) * sizeof(float));
}

/* The block's g tiles, then dQ (open over blocks), and dK/dV partials of
 * the block's keys: into this rank's own sums, or a buffer sent to the
 * owner. */
static void visit_grads(gpt_t *g, const pass_t *p, const ring_t *R, attn_acts_t *LA,
                        const float *blk, int owner, int step, void *ctx) {
    (void)p;
    ring_grads_t *G = ctx;
    acc_t *dkv = &G->own;
    if (owner != R->rank) {
        const int k = step % 2;
        if (G->sent[k]) coll_wait(G->sent[k]);
        G->sent[k] = NULL;
        dkv = &G->send[k];
        acc_zero(dkv);
    }
    const int *kt = block_tiles(R, owner);
    const int Tt = R->Tt, nq = R->Tc / Tt, D = R->D, A2 = 2 * R->A;
    const ring_scratch_t *RS = attention_scratch(g);
    float *gt = RS->tile;
    for (int b = 0; b < R->nb; b++)
        for (int h = 0; h < R->H; h++) {
            const size_t bh = (size_t)b * R->H + h;
            const float *q = LA->qkv + (size_t)b * R->Tc * R->ld + (size_t)h * 3 * D;
            float *dq = G->dqkv + (size_t)b * R->Tc * R->ld + (size_t)h * 3 * D;
            const float *k = blk + (size_t)b * R->Tc * A2 + (size_t)h * D, *v = k + R->A;
            const float *E = LA->att_e + bh * R->Tc * R->T, *Eh = LA->att_ehat + bh * R->Tc * R->T;
            const uint8_t *keep = LA->att_keep ? LA->att_keep + bh * R->Tc * R->T : NULL;
            const float *dU = RS->du + bh * R->Tc * D, *dZ = RS->dz + bh * R->Tc;
            for (int a = 0; a < nq; a++)
                for (int t = 0; t < nq; t++) {
                    const int qi = R->qt[a], kj = kt[t];
                    if (!live(R, qi, kj)) continue;
                    /* dehat = dU.v^T, then the elementwise chain to g */
                    contract(CONTRACT_NT, Tt, Tt, D, Tt, Tt, D, dU + (size_t)a * Tt * D, D,
                             v + (size_t)t * Tt * A2, A2, gt, Tt, &g->ws);
                    for (int r = 0; r < Tt; r++)
                        grad_row(R, gt + (size_t)r * Tt, E, keep, (size_t)a * Tt + r, qi * Tt + r,
                                 kj, dZ[(size_t)a * Tt + r]);
                    const size_t qrow = (size_t)a * Tt, krow = (size_t)t * Tt;
                    const size_t kat = ((size_t)b * R->Tc + krow) * A2 + (size_t)h * D;
                    /* dQ[qi] += g.k */
                    if (one_key(R, qi))
                        contract(CONTRACT_NN, Tt, D, Tt, Tt, D, Tt, gt, Tt, k + krow * A2, A2,
                                 dq + qrow * R->ld, R->ld, &g->ws);
                    else
                        contract_acc(CONTRACT_NN, Tt, D, Tt, Tt, D, Tt, gt, Tt, k + krow * A2, A2,
                                     &G->dq, ((size_t)b * R->Tc + qrow) * R->A + (size_t)h * D,
                                     (size_t)R->A, &g->ws);
                    /* dK[kj] += g^T.q, dV[kj] += ehat^T.dU */
                    const float *eh = Eh + qrow * R->T + (size_t)kj * Tt;
                    if (one_query(R, kj)) { /* the only term: this rank's own key tile */
                        if (owner != R->rank)
                            parity_fatal("ring attention: key tile %d's only query tile %d is "
                                         "not on its owner (rank %d)", kj, qi, owner);
                        contract(CONTRACT_TN, Tt, D, Tt, Tt, D, Tt, gt, Tt, q + qrow * R->ld, R->ld,
                                 dq + krow * R->ld + D, R->ld, &g->ws);
                        contract(CONTRACT_TN, Tt, D, Tt, Tt, D, Tt, eh, R->T, dU + qrow * D, D,
                                 dq + krow * R->ld + 2 * D, R->ld, &g->ws);
                    } else {
                        contract_acc(CONTRACT_TN, Tt, D, Tt, Tt, D, Tt, gt, Tt, q + qrow * R->ld,
                                     R->ld, dkv, kat, (size_t)A2, &g->ws);
                        contract_acc(CONTRACT_TN, Tt, D, Tt, Tt, D, Tt, eh, R->T, dU + qrow * D, D,
                                     dkv, kat + (size_t)R->A, (size_t)A2, &g->ws);
                    }
                }
        }
    if (owner != R->rank)
        G->sent[step % 2] = coll_isend_open(g->shard.cp_group, &dkv->x, 0, dkv->n, owner, TAG_DKV);
    /* this rank's own block came first (step 0); the peers' partials of its
     * keys may now be added into the same sums: posted only now, so that no
     * delivery races the rank's own additions */
    if (step == 0)
        for (int o = 0; o < R->cp; o++)
            if (o != R->rank)
                G->recv[o] = coll_irecv_open(g->shard.cp_group, &G->own.x, 0, G->own.n, o, TAG_DKV);
}

void ring_backward(gpt_t *g, const pass_t *p, attn_acts_t *LA, float *dqkv,
                   const float *dctx) {
    const ring_t R = ring_of(g, p);
    ring_scratch_t *S = attention_scratch(g);
    const size_t n = (size_t)R.nb * R.Tc;
    float *prod = g->scratch.att_scratch; /* [D]: the ring does not use the golden core's
                                              scratch otherwise */
    for (int b = 0; b < R.nb; b++)
        for (int h = 0; h < R.H; h++)
            for (int li = 0; li < R.Tc; li++) {
                const size_t bh = (size_t)b * R.H + h, tok = ((size_t)b * R.Tc + li) * R.A + h * R.D;
                S->dz[bh * R.Tc + li] =
                    attention_row_dz(S->du + (bh * R.Tc + li) * R.D, prod, dctx + tok,
                                     LA->ctx + tok, R.D, LA->att_z[bh * R.Tc + li]);
            }
    pack_heads(S->kv[0], 2 * R.A, 0, LA->qkv, &R, R.D);
    pack_heads(S->kv[0], 2 * R.A, R.A, LA->qkv, &R, 2 * R.D);
    ring_grads_t G = {.dqkv = dqkv, .recv = (coll_request_t **)S->recv};
    for (int o = 0; o < R.cp; o++) G.recv[o] = NULL;
    acc_init_with(&G.dq, n * R.A, S->open);
    acc_init_with(&G.own, n * 2 * R.A, S->own);
    for (int k = 0; k < 2; k++) acc_init_with(&G.send[k], n * 2 * R.A, S->send[k]);
    acc_zero(&G.dq);
    acc_zero(&G.own);
    ring_pass(g, p, &R, LA, n * 2 * R.A, TAG_KV, visit_grads, &G, g->shard.cp_group);
    coll_wait_all(R.cp, G.recv);
    coll_wait_all(2, G.sent);
    /* round once: dQ (but a single key tile's), dK and dV (but a single
     * query tile's) */
    acc_round(&G.dq, S->round);
    for (size_t i = 0; i < n; i++)
        if (!one_key(&R, R.qt[(i % R.Tc) / R.Tt]))
            for (int h = 0; h < R.H; h++)
                memcpy(dqkv + i * R.ld + (size_t)h * 3 * R.D, S->round + i * R.A + (size_t)h * R.D,
                       (size_t)R.D * sizeof(float));
    acc_round(&G.own, S->round);
    for (size_t i = 0; i < n; i++)
        if (!one_query(&R, R.qt[(i % R.Tc) / R.Tt]))
            for (int h = 0; h < R.H; h++)
                for (int w = 0; w < 2; w++)
                    memcpy(dqkv + i * R.ld + (size_t)h * 3 * R.D + (size_t)(1 + w) * R.D,
                           S->round + i * 2 * R.A + (size_t)w * R.A + (size_t)h * R.D,
                           (size_t)R.D * sizeof(float));
    acc_free(&G.dq);
    acc_free(&G.own);
    for (int k = 0; k < 2; k++) acc_free(&G.send[k]);
}

/* ---- private scratch ---------------------------------------------------- */

void ring_layout_scratch(void **priv, const model_config_t *c, const gpt_local_t *lc, size_t n,
                         carver_t *cv) {
    ring_scratch_t measure;
    ring_scratch_t *S = style_scratch_struct(priv, cv, sizeof *S, &measure);
    const size_t A_ = (size_t)lc->attn, Tt = (size_t)c->tile_tokens;
    for (int k = 0; k < 3; k++) S->kv[k] = CARVE_F(cv, n * 2 * A_);
    for (int k = 0; k < 2; k++) S->send[k] = carve(cv, acc_storage_bytes(n * 2 * A_));
    S->own = carve(cv, acc_storage_bytes(n * 2 * A_));
    S->open = carve(cv, acc_storage_bytes(n * A_));
    S->du = CARVE_F(cv, n * A_);
    S->dz = CARVE_F(cv, n * (size_t)lc->heads);
    S->round = CARVE_F(cv, n * 2 * A_);
    S->tile = CARVE_F(cv, Tt * Tt);
    S->tiles = (int *)carve(cv, (size_t)c->seq_length / Tt * sizeof(int));
    S->spans = (int *)carve(cv, 4 * (size_t)c->seq_length / Tt * sizeof(int));
    S->recv = (void **)carve(cv, (size_t)lc->cp * sizeof(void *));
}
