/* attention.c - multi-head self-attention (MODEL.md, Attention).
 *
 * Per sequence and head, over query tiles qi and the key tiles kj that
 * hold the keys its rows attend (attention_span: kj <= qi under the
 * causal mask; other tiles are skipped: their partials are exact zeros):
 *
 *   s = (q.k^T) * scale            one tile partial per (qi, kj): D is never split
 *   m_i = max_j s_ij,  e = exp(s - m),  Z_i = round(sum_j e_ij)
 *   ehat = e * keep * 1/(1-p)       (ehat = e without dropout)
 *   U = round(sum_kj ehat.v),  o = U / Z
 *
 * This is the split-key formula: a global max, then exact sums of e and of
 * e.v over key tiles, so context parallelism can compute the key tiles on
 * other ranks and merge the sums without changing a bit. An element's
 * bits do not depend on which other tiles are computed around it (I1), so
 * a tile range wider than a row's keys (zeros outside them) changes none.
 *
 * Row layout of qkv [n_seq,T,3C]: head h, then q/k/v, then d (Megatron's
 * order): q at column h*3D + d, k at h*3D + D + d, v at h*3D + 2D + d. */
#include "parity/layers.h"

#include <string.h>

#include "parity/pmath.h"

size_t attention_scratch_floats(const attn_shape_t *s) {
    int D = s->C / s->H;
    /* g [T,T], dU [T,D], dZ [T], products [D] */
    return (size_t)s->T * s->T + (size_t)s->T * D + (size_t)s->T + (size_t)D;
}

void attention_mask(uint8_t *keep, const attn_shape_t *s, int first_seq, uint64_t seed,
                    uint64_t stream) {
    const int T = s->T, H = s->H, Hg = s->heads_total;
    const cp_runs_t all = {1, {0, 0}, {T, 0}}, *q = s->q_runs ? s->q_runs : &all;
    int Tq = 0;
    for (int k = 0; k < q->n; k++) Tq += q->len[k];
    for (int b = 0; b < s->n_seq; b++)
        for (int h = 0; h < H; h++)
            for (int k = 0, li = 0; k < q->n; k++)
                for (int i = q->t0[k]; i < q->t0[k] + q->len[k]; i++, li++) {
                    uint8_t *row = keep + (((size_t)b * H + h) * Tq + li) * T;
                    /* keyed by the GLOBAL head and position: a tensor- or
                     * context-parallel rank draws the golden mask's rows (I3) */
                    uint64_t first = (((uint64_t)(first_seq + b) * Hg + (s->head0 + h)) * T + i) * T;
                    int lo, hi;
                    attention_span(s, i, &lo, &hi);
                    memset(row, 0, (size_t)T);
                    dropout_mask(row + lo, (size_t)(hi - lo), seed, stream, first + (uint64_t)lo, s->p);
                }
}

float attention_span_softmax(float *row, float *hrow, const uint8_t *krow, int lo, int hi, int T,
                             float scale, float inv) {
    float m = row[lo] * scale;
    for (int j = lo; j < hi; j++) {
        row[j] = row[j] * scale;
        m = row[j] > m ? row[j] : m;
    }
    pm_expf_shifted(row + lo, row + lo, m, (size_t)(hi - lo));
    memset(row, 0, (size_t)lo * sizeof(float));
    memset(row + hi, 0, (size_t)(T - hi) * sizeof(float));
    const float z = sum_f32(row + lo, (size_t)(hi - lo));
    if (krow) {
        memset(hrow, 0, (size_t)T * sizeof(float));
        for (int j = lo; j < hi; j++) hrow[j] = row[j] * (float)krow[j] * inv;
    }
    return z;
}

float attention_row_softmax(float *row, float *hrow, const uint8_t *krow, int i, int T,
                            float scale, float inv) {
    return attention_span_softmax(row, hrow, krow, 0, i + 1, T, scale, inv);
}

float attention_row_dz(float *du, float *prod, const float *dout, const float *out, int D, float z) {
    for (int d = 0; d < D; d++) {
        du[d] = dout[d] / z;
        prod[d] = dout[d] * out[d];
    }
    return -sum_f32(prod, (size_t)D) / z;
}

void attention_grad_span(float *g, const float *e, const uint8_t *krow, int n, float dz,
                         float scale, float inv) {
    if (krow) {
        for (int j = 0; j < n; j++) g[j] = ((g[j] * (float)krow[j] * inv + dz) * e[j]) * scale;
    } else {
        for (int j = 0; j < n; j++) g[j] = ((g[j] + dz) * e[j]) * scale;
    }
}

/* The key tiles [*k0, *k1) holding the keys of query tile qi's rows. */
void attention_key_tiles(const attn_shape_t *s, int qi, int *k0, int *k1) {
    const int Tt = s->tile;
    int lo, hi, lo2, hi2;
    attention_span(s, qi * Tt, &lo, &hi);
    for (int i = qi * Tt + 1; i < (qi + 1) * Tt; i++) {
        attention_span(s, i, &lo2, &hi2);
        lo = lo2 < lo ? lo2 : lo;
        hi = hi2 > hi ? hi2 : hi;
    }
    *k0 = lo / Tt, *k1 = (hi + Tt - 1) / Tt;
}

/* The query tiles [*q0, *q1) whose rows attend a key of key tile kj
 * (the tiles between may attend none: their partials are exact zeros). */
void attention_query_tiles(const attn_shape_t *s, int kj, int *q0, int *q1) {
    const int nT = s->T / s->tile;
    *q0 = nT, *q1 = 0;
    for (int qi = 0; qi < nT; qi++) {
        int k0, k1;
        attention_key_tiles(s, qi, &k0, &k1);
        if (kj >= k0 && kj < k1) {
            *q0 = qi < *q0 ? qi : *q0;
            *q1 = qi + 1;
        }
    }
    if (*q0 > *q1) *q0 = *q1;
}

/* out [T, D] (row stride ldo), query tile by query tile: round(sum over
 * the key tiles it attends of S.B), S [T, T] a head's scores (query rows,
 * key columns), B [T, D] the keys' rows (stride ldb). */
static void query_tile_sums(const attn_shape_t *s, const float *S, const float *B, int ldb,
                            float *out, int ldo, contract_ws_t *ws) {
    const int T = s->T, D = s->C / s->H, Tt = s->tile, nT = T / Tt;
    for (int qi = 0; qi < nT; qi++) {
        int k0, k1;
        attention_key_tiles(s, qi, &k0, &k1);
        contract(CONTRACT_NN, Tt, D, (k1 - k0) * Tt, Tt, D, Tt, S + (size_t)qi * Tt * T + (size_t)k0 * Tt,
                 T, B + (size_t)k0 * Tt * ldb, ldb, out + (size_t)qi * Tt * ldo, ldo, ws);
    }
}

/* out [T, D] (row stride ldo), key tile by key tile: round(sum over the
 * query tiles attending it of S^T.B), S [T, T] a head's scores (query
 * rows, key columns), B [T, D] the queries' rows (stride ldb); zeros for a
 * key tile no query attends. */
static void key_tile_sums(const attn_shape_t *s, const float *S, const float *B, int ldb, float *out,
                          int ldo, contract_ws_t *ws) {
    const int T = s->T, D = s->C / s->H, Tt = s->tile, nT = T / Tt;
    for (int kj = 0; kj < nT; kj++) {
        int q0, q1;
        attention_query_tiles(s, kj, &q0, &q1);
        if (q0 == q1) {
            for (int i = kj * Tt; i < (kj + 1) * Tt; i++)
                memset(out + (size_t)i * ldo, 0, (size_t)D * sizeof(float));
            continue;
        }
        contract(CONTRACT_TN, Tt, D, (q1 - q0) * Tt, Tt, D, Tt, S + (size_t)q0 * Tt * T + (size_t)kj * Tt,
                 T, B + (size_t)q0 * Tt * ldb, ldb, out + (size_t)kj * Tt * ldo, ldo, ws);
    }
}

void attention_forward(float *ctx, float *e, float *ehat, float *z, const float *qkv,
                       const uint8_t *keep, const attn_shape_t *s, contract_ws_t *ws) {
    const int T = s->T, C = s->C, H = s->H, D = C / H, Tt = s->tile, nT = T / Tt;
    const int ld = 3 * C;
    const float scale = pm_rsqrtf((float)D);
    const float inv = keep ? dropout_scale(s->p) : 1.0f;
    for (int b = 0; b < s->n_seq; b++)
        for (int h = 0; h < H; h++) {
            const float *q = qkv + (size_t)b * T * ld + (size_t)h * 3 * D;
            const float *k = q + D, *v = q + 2 * D;
            size_t bh = (size_t)b * H + h;
            float *E = e + bh * T * T, *Eh = keep ? ehat + bh * T * T : E;
            float *Z = z + bh * T;
            float *O = ctx + (size_t)b * T * C + (size_t)h * D;
            /* scores of the tiles attended: E[qi rows, k0 <= kj < k1] = q.k^T */
            for (int qi = 0; qi < nT; qi++) {
                int k0, k1;
                attention_key_tiles(s, qi, &k0, &k1);
                contract(CONTRACT_NT, Tt, (k1 - k0) * Tt, D, Tt, Tt, D, q + (size_t)qi * Tt * ld,
                         ld, k + (size_t)k0 * Tt * ld, ld, E + (size_t)qi * Tt * T + (size_t)k0 * Tt,
                         T, ws);
            }
            for (int i = 0; i < T; i++) {
                int lo, hi;
                attention_span(s, i, &lo, &hi);
                Z[i] = attention_span_softmax(E + (size_t)i * T, Eh + (size_t)i * T,
                                              keep ? keep + bh * T * T + (size_t)i * T : NULL, lo,
                                              hi, T, scale, inv);
            }
            /* U = round(sum over key tiles of ehat.v), then o = U / Z */
            query_tile_sums(s, Eh, v, ld, O, C, ws);
            for (int i = 0; i < T; i++)
                for (int d = 0; d < D; d++) O[(size_t)i * C + d] = O[(size_t)i * C + d] / Z[i];
        }
}

void attention_backward(float *dqkv, const float *dctx, const float *ctx, const float *e,
                        const float *ehat, const float *z, const float *qkv,
                        const uint8_t *keep, const attn_shape_t *s, float *scratch,
                        contract_ws_t *ws) {
    const int T = s->T, C = s->C, H = s->H, D = C / H, Tt = s->tile, nT = T / Tt;
    const int ld = 3 * C;
    const float scale = pm_rsqrtf((float)D);
    const float inv = keep ? dropout_scale(s->p) : 1.0f;
    float *G = scratch, *dU = G + (size_t)T * T, *dZ = dU + (size_t)T * D, *prod = dZ + T;
    for (int b = 0; b < s->n_seq; b++)
        for (int h = 0; h < H; h++) {
            const float *q = qkv + (size_t)b * T * ld + (size_t)h * 3 * D;
            const float *k = q + D, *v = q + 2 * D;
            float *dq = dqkv + (size_t)b * T * ld + (size_t)h * 3 * D;
            float *dk = dq + D, *dv = dq + 2 * D;
            size_t bh = (size_t)b * H + h;
            const float *E = e + bh * T * T, *Eh = keep ? ehat + bh * T * T : E;
            const float *Z = z + bh * T;
            const float *dO = dctx + (size_t)b * T * C + (size_t)h * D;
            const float *O = ctx + (size_t)b * T * C + (size_t)h * D;
            /* dU = dO / Z;  dZ = -round(sum_d dO*O) / Z */
            for (int i = 0; i < T; i++)
                dZ[i] = attention_row_dz(dU + (size_t)i * D, prod, dO + (size_t)i * C,
                                         O + (size_t)i * C, D, Z[i]);
            /* dV[kj] = round(sum over the query tiles attending it of ehat^T.dU) */
            key_tile_sums(s, Eh, dU, D, dv, ld, ws);
            /* dehat = dU.v^T on the tiles attended, then the elementwise chain
             * de = dehat*keep/(1-p) + dZ,  g = (de*e)*scale */
            for (int qi = 0; qi < nT; qi++) {
                int k0, k1;
                attention_key_tiles(s, qi, &k0, &k1);
                contract(CONTRACT_NT, Tt, (k1 - k0) * Tt, D, Tt, Tt, D, dU + (size_t)qi * Tt * D, D,
                         v + (size_t)k0 * Tt * ld, ld, G + (size_t)qi * Tt * T + (size_t)k0 * Tt, T,
                         ws);
            }
            for (int i = 0; i < T; i++) {
                float *gr = G + (size_t)i * T;
                int lo, hi;
                attention_span(s, i, &lo, &hi);
                attention_grad_span(gr + lo, E + (size_t)i * T + lo,
                                    keep ? keep + bh * T * T + (size_t)i * T + lo : NULL, hi - lo,
                                    dZ[i], scale, inv);
                memset(gr, 0, (size_t)lo * sizeof(float));
                memset(gr + hi, 0, (size_t)(T - hi) * sizeof(float));
            }
            /* dQ[qi] = round(sum over its key tiles of g.k);
             * dK[kj] = round(sum over the query tiles attending it of g^T.q) */
            query_tile_sums(s, G, k, ld, dq, ld, ws);
            key_tile_sums(s, G, q, ld, dk, ld, ws);
        }
}
