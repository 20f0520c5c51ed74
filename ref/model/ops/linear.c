/* linear.c - y = x.w^T + b over canonical tiles (MODEL.md, forward 2).
 *
 * Three contractions, each a sum of tile partials rounded once:
 *   forward   y  = x.w^T    over input-feature tiles
 *   backward  dx = dy.w     over output-feature tiles
 *             dw += dy^T.x  over token tiles, left open for the step
 * The bias is added after the rounded sum (I4), and its gradient is the
 * exact column sum of dy over every token of the step. */
#include "parity/layers.h"

void linear_forward(float *y, const float *x, const float *w, const float *b, int n, int n_in,
                    int n_out, linear_tiles_t t, contract_ws_t *ws) {
    /* y[n,out] = x[n,in] . w[out,in]^T (+ b, added to each block of y while it is in cache) */
    contract_add_bias(CONTRACT_NT, n, n_out, n_in, t.tokens, t.out, t.in, x, n_in, w, n_in, b, y,
                      n_out, ws);
}

void linear_add_bias(float *y, const float *b, int n, int n_out) {
    for (int i = 0; i < n; i++) {
        float *yi = y + (size_t)i * n_out;
        for (int o = 0; o < n_out; o++) yi[o] = yi[o] + b[o];
    }
}

void linear_backward(float *dx, acc_t *dw, acc_t *db, const float *dy, const float *x,
                     const float *w, int n, int n_in, int n_out, linear_tiles_t t,
                     contract_ws_t *ws) {
    linear_backward_at(dx, dw, 0, db, 0, dy, x, w, n, n_in, n_out, t, ws);
}

void linear_backward_at(float *dx, acc_t *dw, size_t dw_at, acc_t *db, size_t db_at,
                        const float *dy, const float *x, const float *w, int n, int n_in,
                        int n_out, linear_tiles_t t, contract_ws_t *ws) {
    /* dx[n,in] = dy[n,out] . w[out,in], contracted over output tiles */
    if (dx)
        contract(CONTRACT_NN, n, n_in, n_out, t.tokens, t.in, t.out, dy, n_out, w, n_in, dx, n_in,
                 ws);
    /* the split backward: the weight gradient later (wstash.c) */
    linear_wstash_t *later = linear_wstash_bound();
    if (later && (dw || db)) {
        linear_wstash_add(later, dw, dw_at, db, db_at, dy, x, n, n_in, n_out, t);
        return;
    }
    /* dw[out,in] += dy[n,out]^T . x[n,in], contracted over token tiles */
    if (dw)
        contract_acc(CONTRACT_TN, n_out, n_in, n, t.out, t.in, t.tokens, dy, n_out, x, n_in, dw,
                     dw_at, (size_t)n_in, ws);
    if (db) acc_add_rows(db, db_at, dy, n, n_out, n_out);
}
