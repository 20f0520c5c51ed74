/* attention.c - causal multi-head self-attention (MODEL.md, Attention).
 *
 * Per sequence and head, over query tiles qi and key tiles kj <= qi
 * (tiles above the diagonal are skipped: their partials are exact zeros):
 *
 *   s = (q.k^T) * scale            one tile partial per (qi, kj): D is never split
 *   m_i = max_j s_ij,  e = exp(s - m),  Z_i = round(sum_j e_ij)
 *   ehat = e * keep * 1/(1-p)       (ehat = e without dropout)
 *   U = round(sum_kj ehat.v),  o = U / Z
 *
 * This is the split-key formula: a global max, then exact sums of e and of
 * e.v over key tiles, so context parallelism can compute the key tiles on
 * other ranks and merge the sums without changing a bit.
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
                    dropout_mask(row, (size_t)i + 1, seed, stream, first, s->p);
                    memset(row + i + 1, 0, (size_t)(T - i - 1));
                }
}

float attention_row_softmax(float *row, float *hrow, const uint8_t *krow, int i, int T,
                            float scale, float inv) {
    float m = row[0] * scale;
    for (int j = 0; j <= i; j++) {
        row[j] = row[j] * scale;
        m = row[j] > m ? row[j] : m;
    }
    pm_expf_shifted(row, row, m, (size_t)i + 1);
    memset(row + i + 1, 0, (size_t)(T - i - 1) * sizeof(float));
    const float z = sum_f32(row, (size_t)i + 1);
    if (krow) {
        for (int j = 0; j <= i; j++) hrow[j] = row[j] * (float)krow[j] * inv;
        memset(hrow + i + 1, 0, (size_t)(T - i - 1) * sizeof(float));
    }
    return z;
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
            /* scores of the causal tiles: E[qi rows, kj <= qi] = q.k^T */
            for (int qi = 0; qi < nT; qi++)
                contract(CONTRACT_NT, Tt, (qi + 1) * Tt, D, Tt, Tt, D, q + (size_t)qi * Tt * ld,
                         ld, k, ld, E + (size_t)qi * Tt * T, T, ws);
            for (int i = 0; i < T; i++)
                Z[i] = attention_row_softmax(E + (size_t)i * T, Eh + (size_t)i * T,
                                             keep ? keep + bh * T * T + (size_t)i * T : NULL, i, T,
                                             scale, inv);
            /* U = round(sum over key tiles of ehat.v), then o = U / Z */
            for (int qi = 0; qi < nT; qi++)
                contract(CONTRACT_NN, Tt, D, (qi + 1) * Tt, Tt, D, Tt, Eh + (size_t)qi * Tt * T, T,
                         v, ld, O + (size_t)qi * Tt * C, C, ws);
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
            /* dV[kj] = round(sum over query tiles qi >= kj of ehat^T.dU) */
            for (int kj = 0; kj < nT; kj++)
                contract(CONTRACT_TN, Tt, D, (nT - kj) * Tt, Tt, D, Tt,
                         Eh + (size_t)kj * Tt * T + (size_t)kj * Tt, T, dU + (size_t)kj * Tt * D, D,
                         dv + (size_t)kj * Tt * ld, ld, ws);
            /* dehat = dU.v^T on the causal tiles, then the elementwise chain
             * de = dehat*keep/(1-p) + dZ,  g = (de*e)*scale */
            for (int qi = 0; qi < nT; qi++)
                contract(CONTRACT_NT, Tt, (qi + 1) * Tt, D, Tt, Tt, D, dU + (size_t)qi * Tt * D, D,
                         v, ld, G + (size_t)qi * Tt * T, T, ws);
            for (int i = 0; i < T; i++) {
                float *gr = G + (size_t)i * T;
                attention_grad_span(gr, E + (size_t)i * T,
                                    keep ? keep + bh * T * T + (size_t)i * T : NULL, i + 1, dZ[i],
                                    scale, inv);
                memset(gr + i + 1, 0, (size_t)(T - i - 1) * sizeof(float));
            }
            /* dQ[qi] = round(sum_kj<=qi g.k);  dK[kj] = round(sum_qi>=kj g^T.q) */
            for (int qi = 0; qi < nT; qi++)
                contract(CONTRACT_NN, Tt, D, (qi + 1) * Tt, Tt, D, Tt, G + (size_t)qi * Tt * T, T,
                         k, ld, dq + (size_t)qi * Tt * ld, ld, ws);
            for (int kj = 0; kj < nT; kj++)
                contract(CONTRACT_TN, Tt, D, (nT - kj) * Tt, Tt, D, Tt,
                         G + (size_t)kj * Tt * T + (size_t)kj * Tt, T, q + (size_t)kj * Tt * ld, ld,
                         dk + (size_t)kj * Tt * ld, ld, ws);
        }
}
