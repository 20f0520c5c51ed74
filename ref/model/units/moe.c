/* moe.c - a mixture-of-experts MLP (MODEL.md, "Mixture of experts";
 * Megatron-core's router, top-k and capacity semantics, made layout-free).
 *
 *   logits = x . Wr^T                      [n,E] fp32, canonical tiles
 *   probs  = softmax(logits)               [n,E] every expert
 *   choice = top-k experts of each token   by logit (or by prob with
 *            --moe-router-pre-softmax); ties go to the lower expert index
 *   weight = softmax over the k chosen logits (or the chosen probs)
 *   kept   = within the expert's capacity in the token's SEQUENCE
 *   y_t    = round(exact sum over kept j of weight_j * expert_j(x_t))
 *
 * The canonical unit of routing is one sequence: capacity, dropping and
 * the load-balancing loss's counts are taken over a sequence's tokens,
 * which every layout holds whole on one rank or one group (I4). Megatron
 * takes them over the tokens a rank holds (get_capacity on local tokens),
 * so its drops change with tp, cp, ep and the micro-batch size.
 *
 * An expert's input rows are laid out per expert, then per sequence, in
 * position order, each (expert, sequence) block padded with zero rows to
 * whole token tiles: a row's tile and its place in it depend only on its
 * sequence's routing, never on which other sequences a rank holds, so
 * the tile products are canonical (I1) and the weight gradients, exact
 * sums over the rows, are the same however the blocks are grouped.
 * Where the experts run on them (this rank, its ep peers, its tp group)
 * is the experts' dispatch style's (model/styles/experts.h).
 *
 * forward is pure (it may run twice); moe_after_forward counts the
 * routing statistics and the auxiliary losses' values once.
 *
 * Mixed precision (MOE.md, "Mixed precision"; Megatron-core's
 * --moe-router-dtype): the experts round as the dense MLP; the router's
 * logits, top-k weights and combine products are in the router's dtype
 * (the model's S by default, fp32 with the flag), its softmaxes in fp32,
 * the MoE's output and input gradient in S.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "model/gpt.h"
#include "parity/pmath.h"
#include "model/styles/experts.h"
#include "model/units/moe.h"
#include "model/units/units_internal.h"

/* Capacity of an expert in one sequence of T tokens: Megatron's
 * ceil(k T / E * factor), at most T (a token picks an expert once);
 * dropless: T. */
int moe_capacity(const model_config_t *c) {
    const int T = c->seq_length;
    if (!(c->moe_capacity_factor > 0.0f)) return T;
    const double cap =
        ceil((double)c->moe_topk * T / (double)c->moe_experts * (double)c->moe_capacity_factor);
    return cap < (double)T ? (int)cap : T;
}

size_t moe_rows(const model_config_t *c, size_t n_seq) {
    const size_t T = (size_t)c->seq_length, E = (size_t)c->moe_experts, k = (size_t)c->moe_topk;
    const size_t tm = (size_t)c->tile_tokens, cap = (size_t)moe_capacity(c);
    /* each (sequence, expert) block is at most cap rows, rounded up to
     * whole tiles; together at most k T rows plus each block's padding */
    const size_t per_block = (cap + tm - 1) / tm * tm, by_blocks = E * per_block;
    const size_t by_tokens = (k * T + E * (tm - 1)) / tm * tm;
    return n_seq * (by_blocks < by_tokens ? by_blocks : by_tokens);
}

void moe_layout(layer_acts_t *L, const slot_dims_t *d, carver_t *cv) {
    /* routing takes whole sequences: every position of the slot's */
    const size_t n = d->mb * d->T, E = d->E, K = d->K, R = d->R, C = d->C, F = d->Fe;
    moe_acts_t a;
    a.logits = CARVE_F(cv, n * E);
    a.probs = CARVE_F(cv, n * E);
    a.choice = (int32_t *)carve(cv, n * K * sizeof(int32_t));
    a.weight = CARVE_F(cv, n * K);
    a.kept = CARVE_U8(cv, n * K);
    a.row = (int32_t *)carve(cv, n * K * sizeof(int32_t));
    a.rows_of = (int32_t *)carve(cv, (E + 1) * sizeof(int32_t));
    a.x = CARVE_F(cv, R * C);
    a.fc1 = CARVE_F(cv, R * F);
    a.h = CARVE_F(cv, R * F);
    a.hgrad = CARVE_F(cv, R * F);
    a.y = CARVE_F(cv, R * C);
    a.out = CARVE_F(cv, n * C);
    a.out_held = d->sp || d->cp > 1 ? CARVE_F(cv, d->ns * C) : a.out;
    a.in = d->cp > 1 ? CARVE_F(cv, n * C) : L->mlp.ln2_full;
    a.dispatch = experts_layout_acts(d, cv);
    moe_acts_t *at = carve(cv, sizeof a);
    if (at) *at = a;
    L->moe = at;
}

void moe_layout_scratch(moe_scratch_t **out, const model_config_t *c, const gpt_local_t *lc,
                        carver_t *cv) {
    *out = NULL;
    if (c->moe_experts <= 0) return;
    const size_t R = moe_rows(c, (size_t)c->micro_batch), C = (size_t)c->hidden;
    const size_t nT = (size_t)c->micro_batch * (size_t)c->seq_length; /* whole sequences */
    const size_t E = (size_t)c->moe_experts, K = (size_t)c->moe_topk;
    /* the layer holds some positions only: sequence or context parallel */
    const int cp = lc->cp > 1, part = lc->seq_parts > 1 || cp;
    moe_scratch_t s;
    s.dy = CARVE_F(cv, R * C);
    s.dx = CARVE_F(cv, R * C);
    s.dlogits = CARVE_F(cv, nT * E);
    s.dweight = CARVE_F(cv, nT * K);
    s.claims = carve(cv, moe_claims_bytes(c));
    s.dx_full = part ? CARVE_F(cv, nT * C) : NULL;
    s.dx_router = CARVE_F(cv, nT * C);
    s.dout = cp ? CARVE_F(cv, nT * C) : NULL;
    s.cp_parts = cp ? CARVE_F(cv, nT * C) : NULL;
    moe_scratch_t *at = carve(cv, sizeof s);
    if (at) *at = s;
    *out = at;
}

/* ---- routing ------------------------------------------------------------ */

/* 1 when the router's values are rounded to the model's dtype S
 * (Megatron-core's default, router dtype None: its logits are S, and
 * `softmax(.., dtype=fp32).type_as(logits)` rounds the scores to S); 0
 * with --moe-router-dtype fp32 or an fp32 model. The broken variant
 * GPT_BROKEN_MOE_ROUTER_LOWP runs the router in S whatever the flag. */
static int router_lowp(const gpt_t *g) {
    if (g->cfg.precision == MODEL_FP32) return 0;
    return g->cfg.moe_router_dtype == MOE_ROUTER_MODEL ||
           (g->shard.broken & GPT_BROKEN_MOE_ROUTER_LOWP) != 0;
}

/* x[0..n) rounded to the router's dtype */
static void router_round(const gpt_t *g, float *x, size_t n) {
    if (router_lowp(g)) act_round(g, x, n);
}

/* softmax of v[m]: exps over the max, their exact sum rounded once, one
 * division each; *z the sum, *mx the max. */
static void softmax_row(float *p, const float *v, int m, float *mx, float *z) {
    float hi = v[0];
    for (int e = 1; e < m; e++)
        if (v[e] > hi) hi = v[e];
    for (int e = 0; e < m; e++) p[e] = pm_expf(v[e] - hi);
    const float s = xsum_f32(p, (size_t)m);
    for (int e = 0; e < m; e++) p[e] = p[e] / s;
    *mx = hi, *z = s;
}

/* The k largest of v[E], best first; equal values: the lower index
 * (broken: the higher, GPT_BROKEN_MOE_TIE_ORDER). */
static void top_k(int32_t *choice, const float *v, int E, int k, int broken) {
    for (int j = 0; j < k; j++) {
        int best = -1;
        for (int e = 0; e < E; e++) {
            int taken = 0;
            for (int i = 0; i < j; i++) taken |= choice[i] == e;
            if (!taken && (best < 0 || v[e] > v[best] || (broken && v[e] == v[best]))) best = e;
        }
        choice[j] = best;
    }
}

/* A token's routing: probs over every expert (fp32: the load-balancing
 * loss's scores, which Megatron-core keeps in fp32), the choice and the
 * weights in the router's dtype. Pre-softmax: the top-k of the scores
 * rounded to it (Megatron's top-k runs on `softmax(..).type_as(logits)`). */
static void route_token(const gpt_t *g, const float *logits, float *probs, int32_t *choice,
                        float *weight, int broken) {
    const model_config_t *c = &g->cfg;
    const int E = c->moe_experts, k = c->moe_topk;
    float mx, z;
    softmax_row(probs, logits, E, &mx, &z);
    if (c->moe_pre_softmax) {
        float sc[MODEL_MAX_EXPERTS]; /* [E] the scores in the router's dtype */
        memcpy(sc, probs, (size_t)E * sizeof(float));
        router_round(g, sc, (size_t)E);
        top_k(choice, sc, E, k, broken);
        for (int j = 0; j < k; j++) weight[j] = sc[choice[j]];
        return;
    }
    float sel[MODEL_MAX_EXPERTS];
    top_k(choice, logits, E, k, broken);
    for (int j = 0; j < k; j++) sel[j] = logits[choice[j]];
    softmax_row(weight, sel, k, &mx, &z);
    router_round(g, weight, (size_t)k);
}

struct moe_claim {
    int t, j;     /* token (in the slot) and which of its choices */
    float weight;
};
typedef struct moe_claim claim_t;
/* [micro_batch x T]: the broken pooled capacity takes a slot's claims */
size_t moe_claims_bytes(const model_config_t *c) {
    return (size_t)c->micro_batch * (size_t)c->seq_length * sizeof(claim_t);
}

/* Higher weight first; equal weights: the earlier position (broken:
 * the later, GPT_BROKEN_MOE_TIE_ORDER). */
static int by_weight(const void *a, const void *b) {
    const claim_t *x = a, *y = b;
    if (x->weight != y->weight) return x->weight > y->weight ? -1 : 1;
    return (x->t > y->t) - (x->t < y->t);
}
static int by_weight_late(const void *a, const void *b) {
    const claim_t *x = a, *y = b;
    if (x->weight != y->weight) return x->weight > y->weight ? -1 : 1;
    return (x->t < y->t) - (x->t > y->t);
}

/* Which of m claims on one expert are kept: all within capacity `cap`,
 * else the first cap by position or by weight. */
static void keep_claims(const gpt_t *g, moe_acts_t *ma, claim_t *cl, int m, int cap) {
    const model_config_t *c = &g->cfg;
    const int K = c->moe_topk, late = (g->shard.broken & GPT_BROKEN_MOE_TIE_ORDER) != 0;
    if (m > cap && !c->moe_drop_position)
        qsort(cl, (size_t)m, sizeof *cl, late ? by_weight_late : by_weight);
    for (int i = 0; i < m; i++) ma->kept[(size_t)cl[i].t * K + cl[i].j] = i < cap;
}

/* Routes the slot's tokens and lays out the experts' input rows. */
static void route(gpt_t *g, const pass_t *p, moe_acts_t *ma, const float *x) {
    const model_config_t *c = &g->cfg;
    const int E = c->moe_experts, K = c->moe_topk, T = p->T, C = c->hidden;
    const int tm = c->tile_tokens;
    const int tie_broken = (g->shard.broken & GPT_BROKEN_MOE_TIE_ORDER) != 0;
    for (int t = 0; t < p->n; t++)
        route_token(g, ma->logits + (size_t)t * E, ma->probs + (size_t)t * E,
                    ma->choice + (size_t)t * K, ma->weight + (size_t)t * K, tie_broken);
    claim_t *cl = g->scratch.moe->claims; /* [n]: a token claims an expert once */
    /* capacity, per sequence and expert; broken: over every token the
     * slot holds (Megatron's get_capacity on local tokens) */
    const int pooled = (g->shard.broken & GPT_BROKEN_MOE_LOCAL_CAPACITY) != 0;
    const int unit = pooled ? p->n : T, units = pooled ? 1 : p->n_seq;
    int cap = moe_capacity(c);
    if (pooled && c->moe_capacity_factor > 0.0f) {
        const double local = ceil((double)K * unit / E * (double)c->moe_capacity_factor);
        cap = local < unit ? (int)local : unit;
    }
    for (int s = 0; s < units; s++)
        for (int e = 0; e < E; e++) {
            int m = 0;
            for (int t = s * unit; t < (s + 1) * unit; t++)
                for (int j = 0; j < K; j++)
                    if (ma->choice[(size_t)t * K + j] == e)
                        cl[m++] = (claim_t){t, j, ma->weight[(size_t)t * K + j]};
            keep_claims(g, ma, cl, m, cap);
        }
    /* rows: expert-major, then sequence, then position; blocks of whole
     * tiles, the padding zero. A kept claim always finds room (moe_rows);
     * only the broken pooled capacity keeps more of a sequence than its
     * capacity, and what finds no room it drops from the rows (its kept
     * mask, where it is caught, stays as it chose) */
    const int room = (int)moe_rows(c, (size_t)p->n_seq);
    int row = 0;
    for (int e = 0; e < E; e++) {
        ma->rows_of[e] = row;
        for (int s = 0; s < p->n_seq; s++) {
            const int start = row;
            for (int t = s * T; t < (s + 1) * T; t++)
                for (int j = 0; j < K; j++) {
                    const size_t tj = (size_t)t * K + j;
                    if (ma->choice[tj] != e) continue;
                    if (!ma->kept[tj] || row == room) {
                        ma->row[tj] = -1;
                        continue;
                    }
                    memcpy(ma->x + (size_t)row * C, x + (size_t)t * C, (size_t)C * sizeof(float));
                    ma->row[tj] = row++;
                }
            const int padded = start + (row - start + tm - 1) / tm * tm;
            memset(ma->x + (size_t)row * C, 0, (size_t)(padded - row) * C * sizeof(float));
            row = padded;
        }
    }
    ma->rows_of[E] = row;
}

/* ---- forward ------------------------------------------------------------- */

/* round(exact sum of m fp32 terms), as xsum_f32: for m <= 2 one IEEE
 * addition is that correctly rounded sum already, and + 0.0f gives a
 * zero xsum's sign (+0); the combines call this once an element, where
 * xsum's call was 8% of an MoE step. */
static inline float exact_sum_few(const float *t, int m) {
    if (m == 0) return 0.0f;
    if (m == 1) return t[0] + 0.0f;
    if (m == 2) return (t[0] + t[1]) + 0.0f;
    return xsum_f32(t, (size_t)m);
}

void moe_forward(gpt_t *g, const pass_t *p, moe_acts_t *ma, const float *x,
                 const moe_params_t *w) {
    const model_config_t *c = &g->cfg;
    const int E = c->moe_experts, K = c->moe_topk, C = c->hidden;
    const linear_tiles_t router = {c->tile_tokens, c->tile_features, E}; /* tokens, in, out */
    linear_forward(ma->logits, x, w->router, NULL, p->n, C, E, router, &g->ws);
    router_round(g, ma->logits, (size_t)p->n * E);
    route(g, p, ma, x);
    experts_style(g)->forward(g, p, ma, w);
    /* the weighted sum over the kept experts, exact, rounded once; mixed
     * precision: each product in the router's dtype (Megatron's unpermute
     * multiplies in the promoted dtype), the sum to S (its cast back) */
    const int lowp = router_lowp(g);
    float terms[MODEL_MAX_EXPERTS];
    for (int t = 0; t < p->n; t++)
        for (int ch = 0; ch < C; ch++) {
            int m = 0;
            for (int j = 0; j < K; j++) {
                const int r = ma->row[(size_t)t * K + j];
                if (r >= 0)
                    terms[m++] = ma->weight[(size_t)t * K + j] * ma->y[(size_t)r * C + ch];
            }
            if (lowp) act_round(g, terms, (size_t)m);
            ma->out[(size_t)t * C + ch] = exact_sum_few(terms, m);
        }
    act_round(g, ma->out, (size_t)p->n * C);
}

/* Tokens of sequence s (slot tokens [s T, (s+1) T)) routed to each
 * expert, before capacity: f [E]. */
static void routed_counts(const model_config_t *c, const moe_acts_t *ma, int s, int T,
                          int64_t *f) {
    const int E = c->moe_experts, K = c->moe_topk;
    for (int e = 0; e < E; e++) f[e] = 0;
    for (int t = s * T; t < (s + 1) * T; t++)
        for (int j = 0; j < K; j++) f[ma->choice[(size_t)t * K + j]]++;
}

void moe_after_forward(gpt_t *g, const pass_t *p, const moe_acts_t *ma, int l) {
    const model_config_t *c = &g->cfg;
    const int E = c->moe_experts, K = c->moe_topk, T = p->T;
    gpt_moe_stats_t *st = &g->moe;
    int64_t f[MODEL_MAX_EXPERTS];
    for (int s = 0; s < p->n_seq; s++) {
        routed_counts(c, ma, s, T, f);
        for (int e = 0; e < E; e++) {
            /* P_e: the sequence's summed probabilities, exact, rounded once */
            const float P = xsum_f32_strided(ma->probs + (size_t)s * T * E + e, (size_t)T,
                                             (size_t)E);
            /* P f is exact in fp64 (24 + 29 bits, a multiple of 2^-149) */
            xacc_add_f64_exact(&st->aux, (double)P * (double)f[e]);
            if (st->routed) st->routed[(size_t)l * E + e] += f[e];
        }
    }
    for (int t = 0; t < p->n; t++) {
        for (int j = 0; j < K; j++)
            if (!ma->kept[(size_t)t * K + j] && st->dropped)
                st->dropped[(size_t)l * E + ma->choice[(size_t)t * K + j]]++;
        if (c->moe_z_loss_coeff > 0.0f) {
            const float *lg = ma->logits + (size_t)t * E;
            float mx = lg[0], e_[MODEL_MAX_EXPERTS];
            for (int e = 1; e < E; e++) mx = lg[e] > mx ? lg[e] : mx;
            for (int e = 0; e < E; e++) e_[e] = pm_expf(lg[e] - mx);
            const float lse = mx + pm_logf(xsum_f32(e_, (size_t)E));
            xacc_add_f32(&st->z, lse * lse);
        }
    }
}

/* ---- backward ------------------------------------------------------------ */

/* round(exact sum of a[i] * b[i]), each product rounded to fp32 first */
static float dot_rounded_terms(float *buf, const float *a, const float *b, int m) {
    for (int i = 0; i < m; i++) buf[i] = a[i] * b[i];
    return xsum_f32(buf, (size_t)m);
}

/* The logits' gradient of token t (in sequence position order s): the
 * top-k softmax's, the full softmax's (pre-softmax weights, the
 * load-balancing loss), the z-loss's, added in that order in fp32. */
static void router_grad(const gpt_t *g, const moe_acts_t *ma, size_t t, const float *dweight,
                        const int64_t *f, float aux_scale, float z_scale, float *dl, float *buf) {
    const model_config_t *c = &g->cfg;
    const int E = c->moe_experts, K = c->moe_topk;
    const float *w = ma->weight + t * K, *pr = ma->probs + t * E;
    const int32_t *ch = ma->choice + t * K;
    float w32[MODEL_MAX_EXPERTS];
    if (!c->moe_pre_softmax && router_lowp(g)) {
        /* the top-k softmax's backward reads its fp32 output, as torch's
         * softmax(.., dtype=fp32) saves it before the cast: again, from
         * the chosen logits (the same bits as the forward's) */
        float sel[MODEL_MAX_EXPERTS], mx, z;
        for (int j = 0; j < K; j++) sel[j] = ma->logits[t * E + ch[j]];
        softmax_row(w32, sel, K, &mx, &z);
        w = w32;
    }
    for (int e = 0; e < E; e++) dl[e] = 0.0f;
    if (!c->moe_pre_softmax) {
        const float s = dot_rounded_terms(buf, w, dweight, K);
        for (int j = 0; j < K; j++) dl[ch[j]] = w[j] * (dweight[j] - s);
    }
    const int full = c->moe_pre_softmax || c->moe_aux_loss_coeff > 0.0f;
    if (full) {
        float dp[MODEL_MAX_EXPERTS];
        for (int e = 0; e < E; e++) dp[e] = 0.0f;
        if (c->moe_pre_softmax)
            for (int j = 0; j < K; j++) dp[ch[j]] = dweight[j];
        if (c->moe_aux_loss_coeff > 0.0f)
            for (int e = 0; e < E; e++) dp[e] = dp[e] + aux_scale * (float)f[e];
        const float s = dot_rounded_terms(buf, pr, dp, E);
        for (int e = 0; e < E; e++) dl[e] = dl[e] + pr[e] * (dp[e] - s);
    }
    if (c->moe_z_loss_coeff > 0.0f) {
        const float *lg = ma->logits + t * E;
        float mx = lg[0];
        for (int e = 1; e < E; e++) mx = lg[e] > mx ? lg[e] : mx;
        for (int e = 0; e < E; e++) buf[e] = pm_expf(lg[e] - mx);
        const float lse = mx + pm_logf(xsum_f32(buf, (size_t)E));
        const float zl = z_scale * lse;
        for (int e = 0; e < E; e++) dl[e] = dl[e] + zl * pr[e];
    }
}

/* The broken variant (GPT_BROKEN_MOE_RECOMPUTE_AUX): a layer the backward
 * replayed (full recomputation: its activations are a scratch set) counts
 * its losses' gradients twice. The correct replay registers nothing: the
 * forward is pure, after_forward runs once (units.c). */
static int replayed_twice(const gpt_t *g, const moe_acts_t *ma) {
    if (!(g->shard.broken & GPT_BROKEN_MOE_RECOMPUTE_AUX)) return 0;
    const int sets = recompute_sets(&g->cfg, &g->shard.units);
    for (int k = 0; k < sets; k++)
        if (g->scratch.recompute[k].moe == ma) return 1;
    return 0;
}

void moe_backward(gpt_t *g, const pass_t *p, moe_acts_t *ma, float *dx, const float *dout,
                  const float *x, const moe_params_t *w, const moe_grads_t *gr) {
    const model_config_t *c = &g->cfg;
    const int E = c->moe_experts, K = c->moe_topk, C = c->hidden, T = p->T;
    gpt_scratch_t *S = &g->scratch;
    moe_scratch_t *ms = S->moe;
    const int R = ma->rows_of[E];
    float buf[MODEL_MAX_EXPERTS + 1];
    float *prod = S->row_scratch; /* [C] products */
    /* the weights' gradients, and the experts' output rows' */
    memset(ms->dy, 0, (size_t)R * C * sizeof(float));
    /* mixed precision: dw's products and dw in the router's dtype, the
     * rows' gradients in S (the combine's products' backward) */
    const int lowp = router_lowp(g);
    for (int t = 0; t < p->n; t++)
        for (int j = 0; j < K; j++) {
            const size_t tj = (size_t)t * K + j;
            ms->dweight[tj] = 0.0f;
            if (ma->row[tj] < 0) continue;
            const float *y = ma->y + (size_t)ma->row[tj] * C, *d = dout + (size_t)t * C;
            for (int ch = 0; ch < C; ch++) prod[ch] = d[ch] * y[ch];
            if (lowp) act_round(g, prod, (size_t)C);
            ms->dweight[tj] = xsum_f32(prod, (size_t)C);
            float *dy = ms->dy + (size_t)ma->row[tj] * C;
            for (int ch = 0; ch < C; ch++) dy[ch] = ma->weight[tj] * d[ch];
        }
    router_round(g, ms->dweight, (size_t)p->n * K);
    act_round(g, ms->dy, (size_t)R * C);
    /* each expert's rows back through fc2, GeLU and fc1 */
    experts_style(g)->backward(g, p, ma, ms->dy, ms->dx, w, gr);
    /* the router: its logits' gradient, then its weight's and input's */
    /* the load-balancing loss per sequence; broken: over the slot's
     * tokens as one unit, scaled by their count */
    const int pooled = (g->shard.broken & GPT_BROKEN_MOE_AUX_LOCAL) != 0;
    const double B = (double)c->global_batch, U = pooled ? (double)p->n : (double)T;
    const double units_per_seq = pooled ? 1.0 / p->n_seq : 1.0;
    float aux_scale = (float)((double)c->moe_aux_loss_coeff * E /
                                    ((double)K * U * U * B * units_per_seq));
    float z_scale = (float)(2.0 * (double)c->moe_z_loss_coeff / (B * (double)T));
    /* fp16: the loss scale enters the auxiliary losses' gradients too
     * (Megatron's MoEAuxLossAutoScaler.set_loss_scale: the main loss's scale) */
    if (c->precision == MODEL_FP16)
        aux_scale = aux_scale * g->scaler.scale, z_scale = z_scale * g->scaler.scale;
    if (replayed_twice(g, ma)) aux_scale *= 2.0f, z_scale *= 2.0f;
    int64_t f[MODEL_MAX_EXPERTS];
    if (pooled) routed_counts(c, ma, 0, p->n, f);
    for (int s = 0; s < p->n_seq; s++) {
        if (!pooled) routed_counts(c, ma, s, T, f);
        for (int t = s * T; t < (s + 1) * T; t++)
            router_grad(g, ma, (size_t)t, ms->dweight + (size_t)t * K, f, aux_scale, z_scale,
                        ms->dlogits + (size_t)t * E, buf);
    }
    router_round(g, ms->dlogits, (size_t)p->n * E); /* the logits' gradient in their dtype */
    const linear_tiles_t router = {c->tile_tokens, c->tile_features, E}; /* tokens, in, out */
    float *dx_router = ms->dx_router;
    const int cp = g->local.cp;
    /* the broken variant: each tp rank adds its sequence-parallel
     * positions' partial, which nothing completes */
    const int router_bug = (g->shard.broken & GPT_BROKEN_MOE_ROUTER_TP) && g->local.seq_parts > 1;
    const int split = cp > 1 || router_bug;
    linear_backward_at(dx_router, split ? NULL : gr->router, 0, NULL, 0, ms->dlogits, x,
                       w->router, p->n, C, E, router, &g->ws);
    act_round(g, dx_router, (size_t)p->n * C); /* cast to the input's dtype S */
    /* context parallel: each rank adds the token tiles it holds */
    const int Tl = g->local.seq_held / g->local.seq_parts;
    const cp_runs_t mine = router_bug ? cp_runs_slice(&g->local.runs, g->local.seq_part * Tl, Tl)
                                      : g->local.runs;
    for (int s = 0; split && s < p->n_seq; s++)
        for (int k = 0; k < mine.n; k++) {
            const size_t t0 = (size_t)s * T + (size_t)mine.t0[k];
            linear_backward_at(NULL, gr->router, 0, NULL, 0, ms->dlogits + t0 * E,
                               x + t0 * C, w->router, mine.len[k], C, E, router, &g->ws);
        }
    /* x's gradient: the router's and each kept expert's, exact, rounded once */
    for (int t = 0; t < p->n; t++)
        for (int ch = 0; ch < C; ch++) {
            int m = 0;
            buf[m++] = dx_router[(size_t)t * C + ch];
            for (int j = 0; j < K; j++) {
                const size_t tj = (size_t)t * K + j;
                if (ma->row[tj] >= 0) buf[m++] = ms->dx[(size_t)ma->row[tj] * C + ch];
            }
            dx[(size_t)t * C + ch] = exact_sum_few(buf, m);
        }
    act_round(g, dx, (size_t)p->n * C);
}

/* ---- statistics ---------------------------------------------------------- */

void moe_loss_values(const model_config_t *c, const gpt_moe_stats_t *st, double *aux,
                     double *zloss) {
    *aux = *zloss = 0.0;
    if (c->moe_experts <= 0) return;
    const double B = c->global_batch, T = c->seq_length;
    *aux = (double)c->moe_aux_loss_coeff * c->moe_experts / ((double)c->moe_topk * T * T * B) *
           xacc_round_f64(&st->aux);
    *zloss = (double)c->moe_z_loss_coeff / (B * T) * xacc_round_f64(&st->z);
}

void moe_print_stats(const model_config_t *c, const gpt_moe_stats_t *st, FILE *f) {
    const int E = c->moe_experts;
    if (E <= 0 || !st->routed) return;
    for (int l = 0; l < c->layers; l++) {
        if (!model_layer_is_moe(c, l)) continue;
        fprintf(f, "  moe layer %d | routed", l);
        for (int e = 0; e < E; e++) fprintf(f, " %lld", (long long)st->routed[(size_t)l * E + e]);
        fprintf(f, " | dropped");
        for (int e = 0; e < E; e++) fprintf(f, " %lld", (long long)st->dropped[(size_t)l * E + e]);
        fputc('\n', f);
    }
    double aux, z;
    moe_loss_values(c, st, &aux, &z);
    fprintf(f, "  moe aux loss %.6e | z loss %.6e | capacity %d tokens a sequence per expert%s\n",
            aux, z, moe_capacity(c), c->moe_capacity_factor > 0.0f ? "" : " (dropless)");
}
