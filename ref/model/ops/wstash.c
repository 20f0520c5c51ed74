/* wstash.c - the split backward of zero-bubble schedules (layers.h):
 * B, the input gradient, runs now; W, the weight gradient, later.
 *
 * Every weight gradient of the dense model that is a matrix product goes
 * through linear_backward_at. While a stash is bound to the thread, that
 * function computes dx only and appends here what the weight gradient
 * needs: copies of x and dy (the slot that holds x and the buffer that
 * holds dy are reused before W runs) and where the sums go. Running the
 * stash adds the products to the same open exact sums (I2), so however
 * late W runs, and whichever microbatches' W run in between, the rounded
 * gradients have the fused backward's bits. LayerNorm's and the
 * embedding's gradients (sums of rows, no product) stay in B.
 */
#include <stdlib.h>
#include <string.h>

#include "parity/layers.h"

typedef struct {
    acc_t *dw, *db;
    size_t dw_at, db_at;
    int n, n_in, n_out;
    linear_tiles_t t;
    float *x;        /* [n, n_in] copy */
    float *dy;       /* [n, n_out] copy, or the caller's buffer (by_reference) */
    int dy_owned;
} wrec_t;

struct linear_wstash {
    wrec_t *rec;
    int n, cap, ran; /* ran: the records linear_wstash_run_part did so far */
    size_t bytes, peak;
    int by_reference;
};

static _Thread_local linear_wstash_t *bound;

linear_wstash_t *linear_wstash_new(int by_reference) {
    linear_wstash_t *s = calloc(1, sizeof *s);
    if (s) s->by_reference = by_reference;
    return s;
}

static void clear(linear_wstash_t *s) {
    for (int i = 0; i < s->n; i++) {
        free(s->rec[i].x);
        if (s->rec[i].dy_owned) free(s->rec[i].dy);
    }
    s->n = 0;
    s->ran = 0;
    s->bytes = 0;
}

void linear_wstash_free(linear_wstash_t *s) {
    if (!s) return;
    clear(s);
    free(s->rec);
    free(s);
}

void linear_wstash_bind(linear_wstash_t *s) { bound = s; }

linear_wstash_t *linear_wstash_bound(void) { return bound; }

static float *copy(const float *src, size_t n) {
    float *d = malloc((n ? n : 1) * sizeof *d);
    if (!d) parity_fatal("split backward: out of host memory stashing %zu values", n);
    memcpy(d, src, n * sizeof *d);
    return d;
}

void linear_wstash_add(linear_wstash_t *s, acc_t *dw, size_t dw_at, acc_t *db, size_t db_at,
                       const float *dy, const float *x, int n, int n_in, int n_out, linear_tiles_t t) {
    if (s->n == s->cap) {
        int cap = s->cap ? 2 * s->cap : 16;
        wrec_t *grown = realloc(s->rec, (size_t)cap * sizeof *grown);
        if (!grown) parity_fatal("split backward: out of host memory");
        s->rec = grown, s->cap = cap;
    }
    wrec_t *r = &s->rec[s->n++];
    const size_t nx = (size_t)n * (size_t)n_in, ny = (size_t)n * (size_t)n_out;
    *r = (wrec_t){dw, db, dw_at, db_at, n, n_in, n_out, t, dw ? copy(x, nx) : NULL, NULL, 0};
    /* the broken variant keeps dy where B left it: later passes overwrite it */
    r->dy_owned = !s->by_reference;
    r->dy = s->by_reference ? (float *)dy : copy(dy, ny);
    s->bytes += (dw ? nx : 0) * sizeof(float) + (r->dy_owned ? ny * sizeof(float) : 0);
    if (s->bytes > s->peak) s->peak = s->bytes;
}

void linear_wstash_run_part(linear_wstash_t *s, contract_ws_t *ws, int upto) {
    linear_wstash_t *keep = bound;
    bound = NULL; /* the products themselves, now */
    if (upto > s->n) upto = s->n;
    for (; s->ran < upto; s->ran++) {
        const wrec_t *r = &s->rec[s->ran];
        linear_backward_at(NULL, r->dw, r->dw_at, r->db, r->db_at, r->dy, r->x, NULL, r->n, r->n_in,
                           r->n_out, r->t, ws);
    }
    bound = keep;
    if (s->ran == s->n) clear(s);
}

void linear_wstash_run(linear_wstash_t *s, contract_ws_t *ws) { linear_wstash_run_part(s, ws, s->n); }

size_t linear_wstash_bytes(const linear_wstash_t *s) { return s ? s->bytes : 0; }
size_t linear_wstash_peak(const linear_wstash_t *s) { return s ? s->peak : 0; }
int linear_wstash_count(const linear_wstash_t *s) { return s ? s->n : 0; }
