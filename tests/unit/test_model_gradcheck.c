/* test_model_gradcheck.c - every layer's backward against finite
 * differences of an independent float64 reference.
 *
 * For each layer, this file has its own float64 implementation of the
 * forward formula (written from MODEL.md, sharing no code with ref/model).
 * A random projection r turns the layer output into a scalar
 * f(theta) = sum r*y. The C model's fp32 backward, fed dy = r, must match
 * the central difference (f(theta+h) - f(theta-h)) / 2h of the float64
 * reference, for every input and parameter element. Differencing the
 * float64 reference (not the fp32 code) keeps the check sharp: with
 * h = 1e-6 its error is ~1e-10, far below the fp32 model's own.
 *
 * Tolerances (stated once, used everywhere):
 *   forward   |y32 - y64|  <= 1e-6 * max|y64| + 1e-6 * |y64|
 *   gradient  |g32 - gfd|  <= 2e-5 * max|gfd| + 1e-4 * |gfd|
 * fp32 carries ~7 digits; measured errors on correct code are <= ~0.05
 * of these (each check prints its worst error as a fraction of the
 * tolerance), while a wrong formula (a wrong scale, transposed head
 * order, a missing term) is off by >= 1e-3 relative: test_checker shows
 * that such an error is caught.
 *
 * The last test does the same for the whole GPT (gpt-micro's shape with
 * dropout), through gpt_microbatch with two microbatches, against a
 * float64 GPT composed from the reference layers below.
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../harness.h"
#include "parity/layers.h"
#include "model/gpt.h"
#include "parity/rng.h"
#include "parity/tile.h"

#define FWD_ATOL 1e-6
#define FWD_RTOL 1e-6
#define GRAD_ATOL 2e-5
#define GRAD_RTOL 1e-4
#define FD_H 1e-6

/* ---- helpers ------------------------------------------------------------ */

static uint64_t rng_state = 0x9e3779b97f4a7c15ull;
static double urand(void) { /* xorshift64*, uniform in [0,1) */
    rng_state ^= rng_state >> 12;
    rng_state ^= rng_state << 25;
    rng_state ^= rng_state >> 27;
    return (double)((rng_state * 0x2545f4914f6cdd1dull) >> 11) * 0x1p-53;
}
static void fill(float *x, size_t n, double lo, double hi) {
    for (size_t i = 0; i < n; i++) x[i] = (float)(lo + (hi - lo) * urand());
}
static double *to_d(const float *x, size_t n) {
    double *d = malloc(n * sizeof *d);
    for (size_t i = 0; i < n; i++) d[i] = x[i];
    return d;
}
static double max_abs(const double *x, size_t n) {
    double m = 0;
    for (size_t i = 0; i < n; i++) m = fabs(x[i]) > m ? fabs(x[i]) : m;
    return m;
}

/* 1 while test_checker feeds deliberately wrong values: count, don't fail */
static int control_mode = 0;

/* forward check: fp32 y against fp64 y */
static int check_fwd(const char *what, const float *y32, const double *y64, size_t n) {
    double m = max_abs(y64, n);
    int bad = 0;
    double worst = 0;
    for (size_t i = 0; i < n; i++) {
        double err = fabs((double)y32[i] - y64[i]);
        double tol = FWD_ATOL * m + FWD_RTOL * fabs(y64[i]);
        if (err / (tol > 0 ? tol : 1e-300) > worst) worst = err / (tol > 0 ? tol : 1e-300);
        if (err > tol) {
            if (bad < 3 && !control_mode)
                CHECK(0, "%s[%zu]: fp32 %.9g vs fp64 %.9g", what, i, (double)y32[i], y64[i]);
            bad++;
        }
    }
    printf("    %-40s %5zu elements, worst error %.3f of tolerance\n", what, n, worst);
    return bad;
}

/* Layer tests want signal in every gradient; a sample of a whole model's
 * tensor may be all zero (e.g. rows of tokens that do not occur). */
static int require_signal = 1;

/* gradient check: analytic fp32 g against finite differences gfd */
static int check_grad(const char *what, const float *g32, const double *gfd, size_t n) {
    double m = max_abs(gfd, n);
    int bad = 0;
    double worst = 0;
    for (size_t i = 0; i < n; i++) {
        double err = fabs((double)g32[i] - gfd[i]);
        double tol = GRAD_ATOL * m + GRAD_RTOL * fabs(gfd[i]);
        if (err / (tol > 0 ? tol : 1e-300) > worst) worst = err / (tol > 0 ? tol : 1e-300);
        if (err > tol) {
            if (bad < 3 && !control_mode)
                CHECK(0, "%s[%zu]: analytic %.9g vs finite difference %.9g (max %.3g)", what, i,
                      (double)g32[i], gfd[i], m);
            bad++;
        }
    }
    CHECK(m > 0 || !require_signal, "%s: finite-difference gradient is all zero", what);
    printf("    %-40s %5zu elements, worst error %.3f of tolerance\n", what, n, worst);
    return bad;
}

/* Central differences of f over the doubles x[0..n). */
typedef double (*scalar_fn)(void *ctx);
static void finite_diff(double *x, size_t n, scalar_fn f, void *ctx, double *out) {
    for (size_t i = 0; i < n; i++) {
        double keep = x[i];
        x[i] = keep + FD_H;
        double fp = f(ctx);
        x[i] = keep - FD_H;
        double fm = f(ctx);
        x[i] = keep;
        out[i] = (fp - fm) / (2 * FD_H);
    }
}

static double dot(const double *r, const double *y, size_t n) {
    double s = 0;
    for (size_t i = 0; i < n; i++) s += r[i] * y[i];
    return s;
}

/* ---- float64 reference layers ------------------------------------------ */

static void ref_linear(double *y, const double *x, const double *w, const double *b, int n,
                       int in, int out) {
    for (int i = 0; i < n; i++)
        for (int o = 0; o < out; o++) {
            double s = b ? b[o] : 0.0;
            for (int k = 0; k < in; k++) s += x[(size_t)i * in + k] * w[(size_t)o * in + k];
            y[(size_t)i * out + o] = s;
        }
}

static void ref_layernorm(double *y, const double *x, const double *g, const double *b, int n,
                          int C, double eps) {
    for (int i = 0; i < n; i++) {
        const double *xi = x + (size_t)i * C;
        double mu = 0, var = 0;
        for (int c = 0; c < C; c++) mu += xi[c];
        mu /= C;
        for (int c = 0; c < C; c++) var += (xi[c] - mu) * (xi[c] - mu);
        var /= C;
        double r = 1.0 / sqrt(var + eps);
        for (int c = 0; c < C; c++) y[(size_t)i * C + c] = (xi[c] - mu) * r * g[c] + b[c];
    }
}

static double ref_gelu1(double x) {
    const double k = sqrt(2.0 / M_PI);
    return 0.5 * x * (1.0 + tanh(k * (x + 0.044715 * x * x * x)));
}

/* qkv [S,T,3C] (head, {q,k,v}, d) -> ctx [S,T,C]; keep [S,H,T,T] or NULL */
/* The keys [lo, hi) row i attends, written out from MODEL.md (not from
 * attention_span): causal; the source rows [0, P); the target's causal. */
static void ref_span(int mask, int P, int i, int *lo, int *hi) {
    if (mask == ATTN_SOURCE) *lo = 0, *hi = P;
    else if (mask == ATTN_CAUSAL_TARGET && i >= P) *lo = P, *hi = i + 1;
    else *lo = 0, *hi = i + 1;
}

static void ref_attention(double *ctx, const double *qkv, const uint8_t *keep, double p, int S,
                          int T, int C, int H, int mask, int P) {
    const int D = C / H;
    double *w = malloc((size_t)T * sizeof *w);
    for (int s = 0; s < S; s++)
        for (int h = 0; h < H; h++)
            for (int i = 0; i < T; i++) {
                const double *q = qkv + ((size_t)s * T + i) * 3 * C + (size_t)h * 3 * D;
                double m = -INFINITY, Z = 0;
                int lo, hi;
                ref_span(mask, P, i, &lo, &hi);
                for (int j = lo; j < hi; j++) {
                    const double *k = qkv + ((size_t)s * T + j) * 3 * C + (size_t)h * 3 * D + D;
                    double a = 0;
                    for (int d = 0; d < D; d++) a += q[d] * k[d];
                    w[j] = a / sqrt((double)D);
                    m = w[j] > m ? w[j] : m;
                }
                for (int j = lo; j < hi; j++) {
                    w[j] = exp(w[j] - m);
                    Z += w[j];
                }
                for (int d = 0; d < D; d++) {
                    double u = 0;
                    for (int j = lo; j < hi; j++) {
                        const double *v =
                            qkv + ((size_t)s * T + j) * 3 * C + (size_t)h * 3 * D + 2 * D;
                        double kj = keep ? keep[(((size_t)s * H + h) * T + i) * T + j] / (1.0 - p)
                                         : 1.0;
                        u += w[j] * kj * v[d];
                    }
                    ctx[((size_t)s * T + i) * C + (size_t)h * D + d] = u / Z;
                }
            }
    free(w);
}

/* mean over total_tokens of (logsumexp - logit[target]) */
static double ref_crossentropy(const double *logits, const int32_t *tgt, int n, int V,
                               double total_tokens) {
    double sum = 0;
    for (int i = 0; i < n; i++) {
        const double *r = logits + (size_t)i * V;
        double m = r[0], z = 0;
        for (int j = 1; j < V; j++) m = r[j] > m ? r[j] : m;
        for (int j = 0; j < V; j++) z += exp(r[j] - m);
        sum += m + log(z) - r[tgt[i]];
    }
    return sum / total_tokens;
}

/* ---- per-layer checks --------------------------------------------------- */

typedef struct {
    int n, in, out;
    double *x, *w, *b, *r, *y;
} lin_ctx;
static double lin_f(void *c_) {
    lin_ctx *c = c_;
    ref_linear(c->y, c->x, c->w, c->b, c->n, c->in, c->out);
    return dot(c->r, c->y, (size_t)c->n * c->out);
}

static void check_linear_shape(int n, int in, int out, linear_tiles_t t) {
    size_t nx = (size_t)n * in, nw = (size_t)out * in, ny = (size_t)n * out;
    float *x = malloc(nx * 4), *w = malloc(nw * 4), *b = malloc(out * 4), *y = malloc(ny * 4);
    float *r = malloc(ny * 4), *dx = malloc(nx * 4), *dw = malloc(nw * 4), *db = malloc(out * 4);
    fill(x, nx, -1, 1), fill(w, nw, -0.5, 0.5), fill(b, out, -0.5, 0.5), fill(r, ny, -1, 1);
    contract_ws_t ws;
    contract_ws_init(&ws);
    linear_forward(y, x, w, b, n, in, out, t, &ws);
    lin_ctx c = {n, in, out, to_d(x, nx), to_d(w, nw), to_d(b, out), to_d(r, ny),
                 malloc(ny * sizeof(double))};
    lin_f(&c);
    check_fwd("linear y", y, c.y, ny);
    acc_t aw, ab;
    acc_init(&aw, nw), acc_init(&ab, (size_t)out);
    linear_backward(dx, &aw, &ab, r, x, w, n, in, out, t, &ws);
    acc_round(&aw, dw), acc_round(&ab, db);
    double *fd = malloc((nx > nw ? nx : nw) * sizeof(double));
    finite_diff(c.x, nx, lin_f, &c, fd), check_grad("linear dx", dx, fd, nx);
    finite_diff(c.w, nw, lin_f, &c, fd), check_grad("linear dw", dw, fd, nw);
    finite_diff(c.b, (size_t)out, lin_f, &c, fd), check_grad("linear db", db, fd, (size_t)out);
    acc_free(&aw), acc_free(&ab), contract_ws_free(&ws);
    free(c.x), free(c.w), free(c.b), free(c.r), free(c.y), free(fd);
    free(x), free(w), free(b), free(y), free(r), free(dx), free(dw), free(db);
}

static void test_linear(void) {
    /* several K tiles on every contraction (tokens 12/4, in 12/4, out 8/4) */
    check_linear_shape(12, 12, 8, (linear_tiles_t){4, 4, 4});
    /* one tile per axis: the partial is the result */
    check_linear_shape(4, 8, 8, (linear_tiles_t){4, 8, 8});
}

typedef struct {
    int n, C;
    double *x, *g, *b, *r, *y;
} ln_ctx;
static double ln_f(void *c_) {
    ln_ctx *c = c_;
    ref_layernorm(c->y, c->x, c->g, c->b, c->n, c->C, 1e-5);
    return dot(c->r, c->y, (size_t)c->n * c->C);
}

static void test_layernorm(void) {
    const int n = 6, C = 16;
    size_t nx = (size_t)n * C;
    float *x = malloc(nx * 4), *g = malloc(C * 4), *b = malloc(C * 4), *y = malloc(nx * 4);
    float *xh = malloc(nx * 4), *rs = malloc(n * 4), *r = malloc(nx * 4), *dx = malloc(nx * 4);
    float dg[16], dbb[16], scratch[32];
    fill(x, nx, -2, 3), fill(g, C, 0.5, 1.5), fill(b, C, -0.5, 0.5), fill(r, nx, -1, 1);
    layernorm_forward(y, xh, rs, x, g, b, n, C, 1e-5f, scratch);
    ln_ctx c = {n, C, to_d(x, nx), to_d(g, C), to_d(b, C), to_d(r, nx), malloc(nx * 8)};
    ln_f(&c);
    check_fwd("layernorm y", y, c.y, nx);
    acc_t ag, ab;
    acc_init(&ag, C), acc_init(&ab, C);
    layernorm_backward(dx, &ag, &ab, r, xh, rs, g, n, C, scratch);
    acc_round(&ag, dg), acc_round(&ab, dbb);
    double fd[96];
    finite_diff(c.x, nx, ln_f, &c, fd), check_grad("layernorm dx", dx, fd, nx);
    finite_diff(c.g, C, ln_f, &c, fd), check_grad("layernorm dgamma", dg, fd, C);
    finite_diff(c.b, C, ln_f, &c, fd), check_grad("layernorm dbeta", dbb, fd, C);
    acc_free(&ag), acc_free(&ab);
    free(c.x), free(c.g), free(c.b), free(c.r), free(c.y);
    free(x), free(g), free(b), free(y), free(xh), free(rs), free(r), free(dx);
}

static void test_gelu(void) {
    enum { N = 81 };
    float x[N], y[N], dydx[N], dx[N], ones[N];
    double y64[N], fd[N];
    for (int i = 0; i < N; i++) x[i] = -5.0f + 0.125f * (float)i + 0.01f, ones[i] = 1.0f;
    gelu_forward(y, dydx, x, N);
    gelu_backward(dx, ones, dydx, N);
    for (int i = 0; i < N; i++) {
        y64[i] = ref_gelu1(x[i]);
        fd[i] = (ref_gelu1((double)x[i] + FD_H) - ref_gelu1((double)x[i] - FD_H)) / (2 * FD_H);
    }
    check_fwd("gelu y", y, y64, N);
    check_grad("gelu dx", dx, fd, N);
}

typedef struct {
    int S, T, C, H;
    double p;
    const uint8_t *keep;
    double *qkv, *r, *ctx;
    int mask, prefix;
} att_ctx;
static double att_f(void *c_) {
    att_ctx *c = c_;
    ref_attention(c->ctx, c->qkv, c->keep, c->p, c->S, c->T, c->C, c->H, c->mask, c->prefix);
    return dot(c->r, c->ctx, (size_t)c->S * c->T * c->C);
}

static void check_attention(int S, int T, int H, int D, int tile, float p, attn_mask_t mask,
                            int prefix) {
    const int C = H * D;
    attn_shape_t s = {S, T, C, H, tile, p, H, 0, NULL, mask, prefix};
    size_t nq = (size_t)S * T * 3 * C, nc = (size_t)S * T * C, ne = (size_t)S * H * T * T;
    float *qkv = malloc(nq * 4), *ctx = malloc(nc * 4), *r = malloc(nc * 4), *dq = malloc(nq * 4);
    float *e = malloc(ne * 4), *eh = malloc(ne * 4), *z = malloc((size_t)S * H * T * 4);
    float *scratch = malloc(attention_scratch_floats(&s) * 4);
    uint8_t *keep = p > 0 ? malloc(ne) : NULL;
    fill(qkv, nq, -1.5, 1.5), fill(r, nc, -1, 1);
    if (keep) attention_mask(keep, &s, 3, 42, rng_stream_id("test.attention", 7));
    contract_ws_t ws;
    contract_ws_init(&ws);
    attention_forward(ctx, e, keep ? eh : e, z, qkv, keep, &s, &ws);
    att_ctx c = {S, T, C, H, p, keep, to_d(qkv, nq), to_d(r, nc), malloc(nc * 8), mask, prefix};
    att_f(&c);
    char what[64];
    snprintf(what, sizeof what, "attention ctx (T=%d tile=%d p=%.2f mask %d/%d)", T, tile, (double)p,
             (int)mask, prefix);
    check_fwd(what, ctx, c.ctx, nc);
    attention_backward(dq, r, ctx, e, keep ? eh : e, z, qkv, keep, &s, scratch, &ws);
    double *fd = malloc(nq * 8);
    finite_diff(c.qkv, nq, att_f, &c, fd);
    snprintf(what, sizeof what, "attention dqkv (T=%d tile=%d p=%.2f mask %d/%d)", T, tile,
             (double)p, (int)mask, prefix);
    check_grad(what, dq, fd, nq);
    contract_ws_free(&ws);
    free(c.qkv), free(c.r), free(c.ctx), free(fd);
    free(qkv), free(ctx), free(r), free(dq), free(e), free(eh), free(z), free(scratch), free(keep);
}

static void test_attention(void) {
    check_attention(2, 8, 2, 4, 2, 0.0f, ATTN_CAUSAL, 0);  /* 4 key tiles: skipping, exact sums */
    check_attention(2, 8, 2, 4, 8, 0.0f, ATTN_CAUSAL, 0);  /* one tile: partials are results */
    check_attention(2, 8, 2, 4, 4, 0.25f, ATTN_CAUSAL, 0); /* attention dropout */
    /* an encoder-decoder's stream of 4 source rows, then 4 target rows */
    check_attention(2, 8, 2, 4, 2, 0.0f, ATTN_SOURCE, 4);
    check_attention(2, 8, 2, 4, 2, 0.25f, ATTN_SOURCE, 4);
    check_attention(2, 8, 2, 4, 2, 0.0f, ATTN_CAUSAL_TARGET, 4);
    check_attention(2, 8, 2, 4, 4, 0.25f, ATTN_CAUSAL_TARGET, 4);
}

typedef struct {
    int n, V;
    double total;
    const int32_t *tgt;
    double *logits;
} ce_ctx;
static double ce_f(void *c_) {
    ce_ctx *c = c_;
    return ref_crossentropy(c->logits, c->tgt, c->n, c->V, c->total);
}

static void test_crossentropy(void) {
    enum { N = 6, V = 16 };
    const int64_t total = 20; /* the global token count: larger than this slice */
    float logits[N * V], loss[N], dl[N * V], scratch[V];
    int32_t tgt[N] = {0, 5, 15, 5, 9, 3};
    fill(logits, N * V, -4, 4);
    float m[N], Z[N], l[N];
    ce_row_max(m, logits, N, V);
    ce_exp_sum(Z, NULL, logits, m, N, V, scratch);
    ce_target_logit(l, logits, tgt, N, V, 0);
    ce_loss(loss, m, Z, l, N);
    ce_ctx c = {N, V, (double)total, tgt, to_d(logits, N * V)};
    double l64[N];
    for (int i = 0; i < N; i++) l64[i] = ref_crossentropy(c.logits + i * V, tgt + i, 1, V, 1.0);
    check_fwd("crossentropy token loss", loss, l64, N);
    crossentropy_backward(dl, logits, tgt, m, Z, N, V, 0, total, scratch);
    double fd[N * V];
    finite_diff(c.logits, N * V, ce_f, &c, fd);
    check_grad("crossentropy dlogits", dl, fd, N * V);
    free(c.logits);
}

static void test_embedding(void) {
    enum { S = 2, T = 4, C = 3, V = 5 };
    int32_t tok[S * T] = {1, 4, 1, 0, 4, 4, 2, 1}; /* repeats: rows sum several tokens */
    float wte[V * C], wpe[T * C], x[S * T * C], r[S * T * C], dte[V * C], dpe[T * C];
    fill(wte, V * C, -1, 1), fill(wpe, T * C, -1, 1), fill(r, S * T * C, -1, 1);
    embedding_lookup(x, tok, S * T, C, wte, 0, V);
    embedding_add_positions(x, S, T, 0, C, wpe);
    double x64[S * T * C], fdte[V * C], fdpe[T * C];
    for (int s = 0; s < S; s++)
        for (int t = 0; t < T; t++)
            for (int c = 0; c < C; c++)
                x64[(s * T + t) * C + c] = (double)wte[tok[s * T + t] * C + c] + wpe[t * C + c];
    check_fwd("embedding x", x, x64, S * T * C);
    acc_t ate, ape;
    acc_init(&ate, V * C), acc_init(&ape, T * C);
    embedding_backward(&ate, &ape, r, tok, S, T, 0, C, 0, V);
    acc_round(&ate, dte), acc_round(&ape, dpe);
    /* the function is linear: its exact gradient is the scatter-sum of r */
    memset(fdte, 0, sizeof fdte), memset(fdpe, 0, sizeof fdpe);
    for (int s = 0; s < S; s++)
        for (int t = 0; t < T; t++)
            for (int c = 0; c < C; c++) {
                fdte[tok[s * T + t] * C + c] += r[(s * T + t) * C + c];
                fdpe[t * C + c] += r[(s * T + t) * C + c];
            }
    check_grad("embedding dwte", dte, fdte, V * C);
    check_grad("embedding dwpe", dpe, fdpe, T * C);
    acc_free(&ate), acc_free(&ape);
}

static void test_dropout(void) {
    enum { N = 20000 };
    uint8_t *keep = malloc(N), *part = malloc(N);
    const float p = 0.3f;
    uint64_t stream = rng_stream_id("test.dropout", 3);
    dropout_mask(keep, N, 99, stream, 0, p);
    int kept = 0;
    for (int i = 0; i < N; i++) kept += keep[i];
    double frac = (double)kept / N, sd = sqrt(p * (1 - p) / N);
    CHECK(fabs(frac - (1 - p)) < 6 * sd, "kept %.4f, expected %.4f", frac, 1 - p);
    /* I3: a slice drawn on its own equals the same slice of the whole */
    dropout_mask(part, 777, 99, stream, 5000, p);
    CHECK(!memcmp(part, keep + 5000, 777), "mask slice [5000, 5777) differs from the whole");
    float x[8] = {1, -2, 3, -4, 5, -6, 7, -8}, y[8], dx[8];
    uint8_t k8[8] = {1, 0, 1, 1, 0, 0, 1, 0};
    dropout_forward(y, x, k8, 8, p);
    dropout_backward(dx, x, k8, 8, p);
    for (int i = 0; i < 8; i++) {
        double want = k8[i] ? x[i] / (1.0 - p) : 0.0;
        CHECK(fabs(y[i] - want) <= 1e-6 * fabs(want), "dropout y[%d] = %g, want %g", i,
              (double)y[i], want);
        CHECK(!memcmp(&y[i], &dx[i], 4), "dropout is linear: dx[%d] must equal y[%d]", i, i);
    }
    free(keep), free(part);
}

/* ---- the whole GPT ------------------------------------------------------ */

typedef struct {
    const model_config_t *cfg;
    const param_table_t *tab;
    double *p;               /* parameters, fp64 */
    const int32_t *in, *tgt; /* [B,T] */
    uint8_t **mask;          /* per site, [B,...] or NULL */
} gpt_ref_ctx;

static const double *RP(const gpt_ref_ctx *c, const char *name) {
    int i = param_find(c->tab, name);
    if (i < 0) {
        fprintf(stderr, "no parameter %s\n", name);
        abort();
    }
    return c->p + c->tab->info[i].offset;
}

/* site index: 0 embedding, then per layer 1 + 3l + {0 attention, 1 attention
 * output, 2 mlp output} */
static void drop64(double *x, const uint8_t *keep, size_t n, double p) {
    if (!keep) return;
    for (size_t i = 0; i < n; i++) x[i] = keep[i] ? x[i] / (1.0 - p) : 0.0;
}

static double gpt_ref_loss(void *c_) {
    gpt_ref_ctx *c = c_;
    const model_config_t *m = c->cfg;
    const int B = m->global_batch, T = m->seq_length, C = m->hidden, F = m->ffn, V = m->vocab;
    const int n = B * T;
    const double ph = m->hidden_dropout, pa = m->attention_dropout;
    double *x = malloc((size_t)n * C * 8), *a = malloc((size_t)n * C * 8);
    double *qkv = malloc((size_t)n * 3 * C * 8), *ctx = malloc((size_t)n * C * 8);
    double *h = malloc((size_t)n * F * 8), *y = malloc((size_t)n * C * 8);
    double *logits = malloc((size_t)n * V * 8);
    const double *wte = RP(c, "embedding.word_embeddings.weight");
    const double *wpe = RP(c, "embedding.position_embeddings.weight");
    for (int i = 0; i < n; i++)
        for (int k = 0; k < C; k++)
            x[(size_t)i * C + k] = wte[(size_t)c->in[i] * C + k] + wpe[(size_t)(i % T) * C + k];
    drop64(x, c->mask[0], (size_t)n * C, ph);
    char nm[128];
#define LP(s) (snprintf(nm, sizeof nm, "layers.%d.%s", l, s), RP(c, nm))
    for (int l = 0; l < m->layers; l++) {
        ref_layernorm(a, x, LP("input_layernorm.weight"), LP("input_layernorm.bias"), n, C,
                      m->ln_eps);
        ref_linear(qkv, a, LP("self_attention.query_key_value.weight"),
                   LP("self_attention.query_key_value.bias"), n, C, 3 * C);
        ref_attention(ctx, qkv, c->mask[1 + 3 * l], pa, B, T, C, m->heads, ATTN_CAUSAL, 0);
        ref_linear(y, ctx, LP("self_attention.dense.weight"), LP("self_attention.dense.bias"), n,
                   C, C);
        drop64(y, c->mask[2 + 3 * l], (size_t)n * C, ph);
        for (size_t i = 0; i < (size_t)n * C; i++) x[i] += y[i];
        ref_layernorm(a, x, LP("post_attention_layernorm.weight"),
                      LP("post_attention_layernorm.bias"), n, C, m->ln_eps);
        ref_linear(h, a, LP("mlp.dense_h_to_4h.weight"), LP("mlp.dense_h_to_4h.bias"), n, C, F);
        for (size_t i = 0; i < (size_t)n * F; i++) h[i] = ref_gelu1(h[i]);
        ref_linear(y, h, LP("mlp.dense_4h_to_h.weight"), LP("mlp.dense_4h_to_h.bias"), n, F, C);
        drop64(y, c->mask[3 + 3 * l], (size_t)n * C, ph);
        for (size_t i = 0; i < (size_t)n * C; i++) x[i] += y[i];
    }
#undef LP
    ref_layernorm(a, x, RP(c, "final_layernorm.weight"), RP(c, "final_layernorm.bias"), n, C,
                  m->ln_eps);
    ref_linear(logits, a, m->tied ? wte : RP(c, "output_layer.weight"), NULL, n, C, V);
    double loss = ref_crossentropy(logits, c->tgt, n, V, (double)n);
    free(x), free(a), free(qkv), free(ctx), free(h), free(y), free(logits);
    return loss;
}

/* Captures the masks and tokens the model used, into [B,...] arrays. */
typedef struct {
    const model_config_t *cfg;
    uint8_t **mask;
    int32_t *in, *tgt;
} capture_t;

static void capture(void *ctx, const gpt_view_t *v) {
    capture_t *cp = ctx;
    const char *name = v->name;
    const void *data = v->data;
    const st_dtype_t dt = v->dtype;
    const int first = v->first_seq, n_seq = v->n_seq;
    size_t per = 1;
    for (int i = 0; i < v->ndim; i++) per *= (size_t)v->shape[i];
    if (!strcmp(name, "input_ids") || !strcmp(name, "labels")) {
        int32_t *dst = name[0] == 'i' ? cp->in : cp->tgt;
        memcpy(dst + (size_t)first * per, data, (size_t)n_seq * per * 4);
        return;
    }
    if (strncmp(name, "mask.", 5) || dt != ST_U8) return;
    int site;
    const char *s = name + 5;
    if (!strcmp(s, "dropout.embedding"))
        site = 0;
    else {
        int l;
        char what[64];
        if (sscanf(s, "layers.%d.%63s", &l, what) != 2) return;
        site = 1 + 3 * l +
               (!strcmp(what, "attention_dropout") ? 0
                : !strcmp(what, "attention_output_dropout") ? 1
                                                            : 2);
    }
    if (!cp->mask[site]) cp->mask[site] = calloc((size_t)cp->cfg->global_batch, per);
    memcpy(cp->mask[site] + (size_t)first * per, data, (size_t)n_seq * per);
}

static void test_gpt(void) {
    model_config_t cfg;
    perr_t err;
    CHECK(!model_config_builtin("gpt-micro", &cfg, &err), "%s", err.msg);
    cfg.hidden_dropout = 0.2f, cfg.attention_dropout = 0.2f;
    cfg.micro_batch = 2; /* two microbatches: gradients stay open across them */
    require_signal = 0;
    for (int untied = 0; untied < 2; untied++) {
        cfg.tied = !untied;
        gpt_t *g;
        if (gpt_new(&g, &cfg, &err)) {
            CHECK(0, "gpt_new: %s", err.msg);
            return;
        }
        const int B = cfg.global_batch, T = cfg.seq_length, n = B * T;
        int32_t *in = malloc((size_t)n * 4), *tgt = malloc((size_t)n * 4);
        for (int i = 0; i < n; i++) in[i] = (int32_t)(urand() * 256), tgt[i] = (int32_t)(urand() * 256);
        /* larger weights than the init, so every path carries signal */
        fill(g->params, g->table.total, -0.3, 0.3);
        for (int i = 0; i < g->table.count; i++)
            if (g->table.info[i].init == INIT_ONES)
                fill(g->params + g->table.info[i].offset, g->table.info[i].numel, 0.7, 1.3);
        int nsites = 1 + 3 * cfg.layers;
        uint8_t **mask = calloc((size_t)nsites, sizeof *mask);
        capture_t cp = {&cfg, mask, malloc((size_t)n * 4), malloc((size_t)n * 4)};
        gpt_observer_t obs = {&cp, capture, NULL, NULL};
        gpt_step_begin(g);
        for (int first = 0; first < B; first += cfg.micro_batch)
            gpt_microbatch(g, in + (size_t)first * T, tgt + (size_t)first * T, cfg.micro_batch,
                           first, 5, &obs);
        float loss32 = gpt_step_loss(g);
        gpt_step_round_grads(g);
        CHECK(!memcmp(cp.in, in, (size_t)n * 4), "observer saw different inputs");
        gpt_ref_ctx rc = {&cfg, &g->table, to_d(g->params, g->table.total), in, tgt, mask};
        double loss64 = gpt_ref_loss(&rc);
        CHECK(fabs(loss32 - loss64) <= 1e-5 * fabs(loss64), "loss fp32 %.9g vs fp64 %.9g",
              (double)loss32, loss64);
        printf("    gpt-micro%s loss fp32 %.9g fp64 %.9g\n", untied ? " (untied)" : "",
               (double)loss32, loss64);
        /* finite differences on a sample of every tensor's elements */
        for (int i = 0; i < g->table.count; i++) {
            const param_info_t *p = &g->table.info[i];
            enum { SAMPLES = 6 };
            size_t k = p->numel < SAMPLES ? p->numel : SAMPLES;
            float g32[SAMPLES];
            double fd[SAMPLES];
            for (size_t j = 0; j < k; j++) {
                size_t e = p->numel <= SAMPLES ? j : (size_t)(urand() * (double)p->numel);
                g32[j] = g->grads[p->offset + e];
                finite_diff(rc.p + p->offset + e, 1, gpt_ref_loss, &rc, &fd[j]);
            }
            char what[128];
            snprintf(what, sizeof what, "gpt %s", p->name);
            check_grad(what, g32, fd, k);
        }
        for (int s = 0; s < nsites; s++) free(mask[s]);
        free(mask), free(cp.in), free(cp.tgt), free(rc.p), free(in), free(tgt);
        gpt_free(g);
    }
}

/* The checker must be able to fail: a 1e-3 relative error in one element
 * (a wrong formula is far worse) is flagged. */
static void test_checker(void) {
    float g[4] = {1.0f, -0.5f, 0.25f, 2.0f};
    double fd[4] = {1.0, -0.5, 0.25, 2.0 * (1 + 1e-3)};
    control_mode = 1;
    int bad = check_grad("checker control (expected to flag)", g, fd, 4);
    CHECK(bad == 1, "a 1e-3 relative gradient error went unflagged (%d flagged)", bad);
    double y64[2] = {1.0, 3.0 * (1 + 1e-5)};
    float y[2] = {1.0f, 3.0f};
    bad = check_fwd("checker control (expected to flag)", y, y64, 2);
    control_mode = 0;
    CHECK(bad == 1, "a 1e-5 relative forward error went unflagged (%d flagged)", bad);
}

int main(void) {
    perr_t err;
    if (tile_init(&err)) {
        fprintf(stderr, "tile_init: %s\n", err.msg);
        return 1;
    }
    RUN(test_checker);
    RUN(test_linear);
    RUN(test_layernorm);
    RUN(test_gelu);
    RUN(test_attention);
    RUN(test_crossentropy);
    RUN(test_embedding);
    RUN(test_dropout);
    RUN(test_gpt);
    return harness_done();
}
