/* layers.h - the GPT's layers, each a forward/backward pair.
 *
 * Every function works on whole canonical tiles (I1), sums exactly and
 * rounds once (I2, accum.h), and uses only fixed-order elementwise math
 * (pmath.h, I5). The formulas are MODEL.md's; the comment of each function
 * names the tensors and their shapes. n is a token count (sequences x T),
 * row-major [n, features] everywhere.
 *
 * Gradient outputs come in two kinds:
 *   - activation gradients (dx) are written, rounded, into a buffer;
 *   - parameter gradients (dw, db, dgamma, ...) are ADDED to open exact
 *     accumulators, which stay open across token tiles and microbatches
 *     and are rounded once per step by the caller.
 */
#ifndef PARITY_LAYERS_H
#define PARITY_LAYERS_H

#include <stddef.h>
#include <stdint.h>

#include "parity/accum.h"
#include "parity/contract.h"
#include "parity/cp.h"

/* ---- embedding.c ------------------------------------------------------- */

/* The forward is x[s,t,:] = wte[tokens[s,t],:] + wpe[t,:], in two halves so
 * that a vocabulary split across ranks can complete the lookup between
 * them. wte holds rows v0 .. v0+nv-1 of the table (golden: all of it).
 *   lookup: x[i,:] = wte[tokens[i]-v0,:], or -0 for a token outside the
 *           rows held (-0 is the identity of IEEE addition: x + -0 == x
 *           for every x, so a sum over ranks gives the owner's row bits)
 *   add_positions: x[s,t,:] = x[s,t,:] + wpe[t,:]   (tokens [n_seq,T], x [n_seq,T,C]) */
void embedding_lookup(float *x, const int32_t *tokens, int n, int C, const float *wte, int v0,
                      int nv);
/* x [n_seq,Tl,C] holds positions t0 .. t0+Tl-1 of each sequence (golden:
 * Tl = T, t0 = 0; sequence parallelism: a rank's part). */
void embedding_add_positions(float *x, int n_seq, int Tl, int t0, int C, const float *wpe);
/* dwte[tokens[s,t]-v0,:] += dx[s,t,:] for the rows held; dwpe[t0+t,:] +=
 * dx[s,t,:] (exact, open); dx holds positions t0 .. t0+T-1 of each sequence */
void embedding_backward(acc_t *dwte, acc_t *dwpe, const float *dx, const int32_t *tokens,
                        int n_seq, int T, int t0, int C, int v0, int nv);

/* ---- dropout.c --------------------------------------------------------- */

/* 1/(1-p) in fp32: the scale a kept element gets. */
float dropout_scale(float p);
/* keep[i] = rng_uniform(seed, stream, first_index + i) >= p, i < n: the
 * mask of n consecutive elements of a site, keyed by global flat index. */
void  dropout_mask(uint8_t *keep, size_t n, uint64_t seed, uint64_t stream,
                   uint64_t first_index, float p);
/* y = keep ? x * (1/(1-p)) : +0   (y may be x) */
void  dropout_forward(float *y, const float *x, const uint8_t *keep, size_t n, float p);
/* dx = keep ? dy * (1/(1-p)) : +0 (dx may be dy) */
void  dropout_backward(float *dx, const float *dy, const uint8_t *keep, size_t n, float p);

/* ---- layernorm.c ------------------------------------------------------- */

/* Per row of x [n,C]: mu = round(sum x)/C, d = x - mu,
 * var = round(sum d*d)/C, r = rsqrt(var + eps), xhat = d*r,
 * y = xhat*gamma + beta. Keeps xhat [n,C] and rstd = r [n] for backward.
 * scratch: [C] floats. */
void layernorm_forward(float *y, float *xhat, float *rstd, const float *x, const float *gamma,
                       const float *beta, int n, int C, float eps, float *scratch);
/* dxhat = dy*gamma; a = round(sum dxhat)/C; b = round(sum dxhat*xhat)/C;
 * dx = ((dxhat - a) - xhat*b) * r; dgamma += dy*xhat; dbeta += dy.
 * dx must not overlap dy or xhat. scratch: [2C] floats. */
void layernorm_backward(float *dx, acc_t *dgamma, acc_t *dbeta, const float *dy,
                        const float *xhat, const float *rstd, const float *gamma, int n, int C,
                        float *scratch);

/* ---- linear.c ---------------------------------------------------------- */

/* Canonical tiles of one linear layer: tokens, input and output features. */
typedef struct {
    int tokens, in, out;
} linear_tiles_t;

/* y[n,out] = round(sum over input tiles of x.w^T) + b   (w [out,in], b [out] or NULL) */
void linear_forward(float *y, const float *x, const float *w, const float *b, int n, int n_in,
                    int n_out, linear_tiles_t t, contract_ws_t *ws);
/* y[i,:] = y[i,:] + b, i < n: the bias, added after a reduction (I4). */
void linear_add_bias(float *y, const float *b, int n, int n_out);
/* dx[n,in] = round(sum over output tiles of dy.w) (skipped when dx is NULL);
 * dw += dy^T.x over token tiles; db += sum over tokens of dy (db may be NULL). */
void linear_backward(float *dx, acc_t *dw, acc_t *db, const float *dy, const float *x,
                     const float *w, int n, int n_in, int n_out, linear_tiles_t t,
                     contract_ws_t *ws);
/* The same for a weight stored at element dw_at of dw's tensor and a bias
 * at db_at of db's (one expert of a stacked [E, out, in] weight); dw may
 * be NULL too (only dx). */
void linear_backward_at(float *dx, acc_t *dw, size_t dw_at, acc_t *db, size_t db_at,
                        const float *dy, const float *x, const float *w, int n, int n_in,
                        int n_out, linear_tiles_t t, contract_ws_t *ws);

/* The split backward of zero-bubble pipeline schedules (wstash.c): B, the
 * input gradient, now; W, the weight gradient, later. While a stash is
 * bound to the calling thread, linear_backward_at computes dx only and
 * appends its weight and bias gradients' work to the stash, with copies
 * of x and dy; linear_wstash_run does that work (and empties the stash).
 * The sums are open and exact, so the bits are the fused backward's.
 * by_reference: keep dy by pointer instead of copying it (the broken
 * variant: W then reads whatever B's buffer holds by the time it runs). */
typedef struct linear_wstash linear_wstash_t;
linear_wstash_t *linear_wstash_new(int by_reference);
void linear_wstash_free(linear_wstash_t *s);
void linear_wstash_bind(linear_wstash_t *s); /* NULL: the fused backward */
linear_wstash_t *linear_wstash_bound(void);
void linear_wstash_add(linear_wstash_t *s, acc_t *dw, size_t dw_at, acc_t *db, size_t db_at,
                       const float *dy, const float *x, int n, int n_in, int n_out, linear_tiles_t t);
void linear_wstash_run(linear_wstash_t *s, contract_ws_t *ws);
/* The records [done so far, upto) only, in order (upto: a linear_wstash_count
 * taken during B); the stash empties when the last one ran. */
void linear_wstash_run_part(linear_wstash_t *s, contract_ws_t *ws, int upto);
size_t linear_wstash_bytes(const linear_wstash_t *s); /* held now */
size_t linear_wstash_peak(const linear_wstash_t *s);  /* the most ever held */
int linear_wstash_count(const linear_wstash_t *s);    /* products waiting */

/* ---- gelu.c ------------------------------------------------------------ */

/* y = gelu_tanh(x) and dydx = gelu_tanh'(x), kept for the backward pass
 * (one exp serves both); dx = dy * dydx.   (n elements; y may be x) */
void gelu_forward(float *y, float *dydx, const float *x, size_t n);
void gelu_backward(float *dx, const float *dy, const float *dydx, size_t n);

/* ---- attention.c ------------------------------------------------------- */

/* Which keys query row i attends (attention_span), over a stream of T
 * rows whose first `prefix` rows are an encoder's (an encoder-decoder's
 * one stream, MODEL.md "Encoder-decoder models"):
 *   ATTN_CAUSAL         keys 0 .. i (the GPT's, and a prefix decoder's)
 *   ATTN_SOURCE         keys 0 .. prefix-1, bidirectional: an encoder's
 *                       self-attention, and cross-attention (queries of the
 *                       target rows, keys and values of the source rows)
 *   ATTN_CAUSAL_TARGET  keys prefix .. i for a target row i >= prefix (a
 *                       decoder's causal self-attention); 0 .. i before it */
typedef enum { ATTN_CAUSAL = 0, ATTN_SOURCE, ATTN_CAUSAL_TARGET } attn_mask_t;

/* Shape of one self-attention call: n_seq sequences of T tokens,
 * C = H*D features, tile = the token tile (query and key tiles), p the
 * attention dropout. */
typedef struct {
    int n_seq, T, C, H, tile; /* C = H*D: the heads this call holds */
    float p;
    int heads_total, head0;   /* the model's heads and the first one held: masks are
                                 keyed by global head (I3); golden: H and 0 */
    const cp_runs_t *q_runs;  /* the query rows held (context parallelism's positions), or
                                 NULL: all T (attention_mask) */
    attn_mask_t mask;         /* ATTN_CAUSAL unless set */
    int prefix;               /* the source rows of ATTN_SOURCE and ATTN_CAUSAL_TARGET */
} attn_shape_t;

/* The keys [*lo, *hi) query row i attends under s's mask. */
static inline void attention_span(const attn_shape_t *s, int i, int *lo, int *hi) {
    if (s->mask == ATTN_SOURCE) {
        *lo = 0, *hi = s->prefix;
    } else {
        *lo = s->mask == ATTN_CAUSAL_TARGET && i >= s->prefix ? s->prefix : 0;
        *hi = i + 1;
    }
}

/* The tiles of a product's sum (I1, I2): the key tiles [*k0, *k1) holding
 * the keys of query tile qi's rows, and the query tiles [*q0, *q1) whose
 * rows attend a key of key tile kj (q0 == q1: none). A sum of one tile is
 * that tile's product itself (contract.h); context parallelism's ring
 * (attention_cp.c) computes the same tiles wherever they live. */
void attention_key_tiles(const attn_shape_t *s, int qi, int *k0, int *k1);
void attention_query_tiles(const attn_shape_t *s, int kj, int *q0, int *q1);
/* Floats of scratch attention_backward needs. */
size_t attention_scratch_floats(const attn_shape_t *s);
/* keep [n_seq,H,Tq,T] (Tq: the query rows held, q_runs): the attention dropout mask of sequences
 * first_seq.. of the global batch and heads head0.. (1 = kept; 0 outside
 * the row's keys, attention_span, which are never drawn). Index of (g,h,i,j):
 * ((g*H + h)*T + i)*T + j; drawn at ((g*heads_total + head0+h)*T + i)*T + j. */
void attention_mask(uint8_t *keep, const attn_shape_t *s, int first_seq, uint64_t seed,
                    uint64_t stream);
/* qkv [n_seq,T,3C] -> ctx [n_seq,T,C] (head h in columns h*D..h*D+D-1).
 * Keeps e and ehat [n_seq,H,T,T] (zero outside each row's keys; ehat may be e
 * when p = 0) and z [n_seq,H,T] for backward. keep is NULL when p = 0. */
void attention_forward(float *ctx, float *e, float *ehat, float *z, const float *qkv,
                       const uint8_t *keep, const attn_shape_t *s, contract_ws_t *ws);
/* The row operations both the whole-sequence attention above and the
 * context-parallel one (attention_cp.c) are made of, for query row i
 * (a global position) of a score row over global key positions [0, T):
 *   row_softmax: s = row*scale for j <= i, e = exp(s - max), zeros after i,
 *     returns Z = round(sum e); hrow = e*keep*inv (when krow)
 *   row_dz: du = dout/z, returns dZ = -round(sum_d dout*out)/z (prod: [D] scratch)
 *   grad_span: g[j] = ((g[j]*keep*inv + dz)*e[j])*scale, j < n (the key
 *     positions <= i of a span; the caller zeroes the rest) */
float attention_row_softmax(float *row, float *hrow, const uint8_t *krow, int i, int T,
                            float scale, float inv);
/* The same over the keys [lo, hi) of the row (zeros elsewhere):
 * attention_row_softmax is lo = 0, hi = i + 1. */
float attention_span_softmax(float *row, float *hrow, const uint8_t *krow, int lo, int hi, int T,
                             float scale, float inv);
float attention_row_dz(float *du, float *prod, const float *dout, const float *out, int D, float z);
void  attention_grad_span(float *g, const float *e, const uint8_t *krow, int n, float dz,
                          float scale, float inv);
/* dctx [n_seq,T,C] -> dqkv [n_seq,T,3C], from the kept forward tensors. */
void attention_backward(float *dqkv, const float *dctx, const float *ctx, const float *e,
                        const float *ehat, const float *z, const float *qkv,
                        const uint8_t *keep, const attn_shape_t *s, float *scratch,
                        contract_ws_t *ws);

/* ---- loss.c ------------------------------------------------------------ */

/* Cross-entropy in the three reductions of a vocabulary split across
 * ranks (Megatron's vocab-parallel cross-entropy): per token i of logits
 * [n,V] holding vocabulary columns v0 .. v0+V-1,
 *   m_i = max_j logits[i,j]                  (ce_row_max; reduce: max)
 *   Z_i = round(sum_j exp(logits[i,j] - m_i)) (ce_exp_sum; reduce: exact sum)
 *   l_i = logits[i, target_i]                 (ce_target_logit, -0 when the
 *                                              target is not held; reduce: sum)
 *   loss_i = (m_i + log Z_i) - l_i            (ce_loss)
 * Golden: V the whole vocabulary, v0 = 0, nothing to reduce. */
void  ce_row_max(float *m, const float *logits, int n, int V);
/* Z_i rounded once (whole vocabulary), or, with zacc != NULL, the exact
 * sums left open in zacc[i] for the ranks to complete. scratch: [V]. */
void  ce_exp_sum(float *Z, xacc_t *zacc, const float *logits, const float *m, int n, int V,
                 float *scratch);
void  ce_target_logit(float *l, const float *logits, const int32_t *targets, int n, int V, int v0);
void  ce_loss(float *loss, const float *m, const float *Z, const float *l, int n);
/* dlogits = (p - onehot(target)) / (float)total_tokens, p = exp(logits - m)/Z,
 * where total_tokens is the GLOBAL token count of the step (I4). */
void  crossentropy_backward(float *dlogits, const float *logits, const int32_t *targets,
                            const float *m, const float *Z, int n, int V, int v0,
                            int64_t total_tokens, float *scratch /* [V] */);

#endif
