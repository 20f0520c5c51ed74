/* oracle_compare.c - the first divergence of a backend's tensors from the
 * golden run (oracle.h).
 *
 * The tensors put are walked in the checker's execution order
 * (check_exec_key), so the report names where a bug starts, not a
 * tensor it spoiled later. Inside a tensor the first element in flat
 * order that no rank supplied or that some rank's copy puts out of
 * tolerance is the divergence; among the copies of that element, the
 * lowest rank whose copy is out of tolerance is named.
 */
#include "oracle_internal.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "parity/check.h"
#include "parity/tensor_diff.h"

static uint64_t bits_at(const unsigned char *p, size_t es) {
    uint64_t v = 0;
    memcpy(&v, p, es); /* little-endian hosts (safetensors.h) */
    return v;
}

static double value_of(st_dtype_t dt, uint64_t b) {
    switch (dt) {
    case ST_F32: { float f; uint32_t u = (uint32_t)b; memcpy(&f, &u, 4); return f; }
    case ST_F64: { double d; memcpy(&d, &b, 8); return d; }
    case ST_I32: return (double)(int32_t)(uint32_t)b;
    case ST_I64: return (double)(int64_t)b;
    case ST_I8: return (double)(int8_t)(uint8_t)b;
    case ST_I16: return (double)(int16_t)(uint16_t)b;
    default: return (double)b; /* unsigned and boolean */
    }
}

/* 1 for +-inf, 2 for NaN, 0 otherwise, from the bits of every float
 * dtype with an all-ones exponent meaning them (F8_E4M3 has no inf:
 * its all-ones pattern is NaN). */
static int nonfinite(st_dtype_t dt, uint64_t b) {
    unsigned ebits, mbits;
    switch (dt) {
    case ST_F64: ebits = 11, mbits = 52; break;
    case ST_F32: ebits = 8, mbits = 23; break;
    case ST_F16: ebits = 5, mbits = 10; break;
    case ST_BF16: ebits = 8, mbits = 7; break;
    case ST_F8_E5M2: ebits = 5, mbits = 2; break;
    case ST_F8_E4M3: return (b & 0x7f) == 0x7f ? 2 : 0;
    default: return 0;
    }
    const uint64_t e = (b >> mbits) & ((1ull << ebits) - 1), m = b & ((1ull << mbits) - 1);
    return e != (1ull << ebits) - 1 ? 0 : m ? 2 : 1;
}

static int is_nan(st_dtype_t dt, uint64_t b) { return nonfinite(dt, b) == 2; }

/* What one comparison of a tensor needs. */
typedef struct {
    st_dtype_t dt;
    size_t es;
    const unsigned char *golden;
    const oracle_tolerance_t *tol;
    double abs_tol;       /* ORACLE_ULP_TENSOR: max_ulp ULPs of the largest golden magnitude */
    int32_t *copies, *bad, *bad_rank; /* [numel] */
    const unsigned char *src;
    int rank;
    uint64_t max_ulp;
} cmp_t;

/* The spacing of floats at the tensor's largest finite golden magnitude. */
double oracle_tensor_ulp(st_dtype_t dt, const void *data, uint64_t numel) {
    const unsigned char *g = data;
    const size_t es = st_dtype_size(dt);
    double m = 0;
    for (uint64_t i = 0; i < numel; i++) {
        double v = fabs(value_of(dt, bits_at(g + i * es, es)));
        if (isfinite(v) && v > m) m = v;
    }
    const int mant = dt == ST_F64 ? 52 : 23, emin = dt == ST_F64 ? -1022 : -126;
    if (m == 0) return ldexp(1, emin - mant);
    int e = ilogb(m);
    return ldexp(1, (e < emin ? emin : e) - mant);
}

/* Whether got is within tolerance of want (bit patterns); *ulp: their
 * distance (0 for integers and NaNs). Without a tolerance only equal bits
 * pass: +0 and -0 are 0 ulp apart but not the same result. */
static int within(const cmp_t *c, uint64_t got, uint64_t want, uint64_t *ulp) {
    *ulp = 0;
    if (got == want) return 1;
    if (!st_dtype_is_float(c->dt)) return 0;
    const int gn = is_nan(c->dt, got), wn = is_nan(c->dt, want);
    if (!gn && !wn) *ulp = tensor_ulp_distance(got, want, c->es);
    if (!c->tol || !c->tol->max_ulp) return 0;
    if (gn || wn) return gn && wn; /* NaN payloads are no backend's promise */
    /* an infinity is one ULP past the largest float, but no tolerance
     * makes an overflow the same result as a finite value */
    if (nonfinite(c->dt, got) || nonfinite(c->dt, want)) return 0;
    if (*ulp <= c->tol->max_ulp) return 1;
    if (c->tol->scale != ORACLE_ULP_TENSOR || (c->dt != ST_F32 && c->dt != ST_F64)) return 0;
    return fabs(value_of(c->dt, got) - value_of(c->dt, want)) <= c->abs_tol;
}

static void compare_one(void *ctx, uint64_t global, uint64_t local) {
    cmp_t *c = ctx;
    uint64_t ulp;
    const uint64_t got = bits_at(c->src + local * c->es, c->es);
    const uint64_t want = bits_at(c->golden + global * c->es, c->es);
    c->copies[global]++;
    const int ok = within(c, got, want, &ulp);
    if (ulp > c->max_ulp) c->max_ulp = ulp;
    if (ok) return;
    if (!c->bad[global]++ || c->rank < c->bad_rank[global]) c->bad_rank[global] = c->rank;
}

/* The index in piece p of global element flat, or -1 when p lacks it. */
static int64_t piece_local(const st_tensor_t *g, const oracle_piece_t *p, uint64_t flat) {
    int64_t idx[ST_MAX_DIMS], local = 0;
    for (int d = g->ndim - 1; d >= 0; d--) {
        idx[d] = (int64_t)(flat % (uint64_t)g->shape[d]);
        flat /= (uint64_t)g->shape[d];
    }
    for (int d = 0; d < g->ndim; d++) {
        if (idx[d] < p->lo[d] || idx[d] >= p->lo[d] + p->ext[d]) return -1;
        local = local * p->ext[d] + (idx[d] - p->lo[d]);
    }
    return local;
}

static void fmt_coords(const oracle_piece_t *p, char *buf, size_t cap) {
    size_t n = (size_t)snprintf(buf, cap, " (mesh coordinates [");
    for (int i = 0; i < p->mesh_ndim && n < cap; i++)
        n += (size_t)snprintf(buf + n, cap - n, "%s%d", i ? "," : "", p->coord[i]);
    if (n < cap) snprintf(buf + n, cap - n, "])");
    if (!p->mesh_ndim) buf[0] = 0;
}

static void fmt_tolerance(const oracle_tolerance_t *tol, char *buf, size_t cap) {
    if (!tol || !tol->max_ulp) snprintf(buf, cap, "bit-exact");
    else snprintf(buf, cap, "tolerance %llu ulp of %s", (unsigned long long)tol->max_ulp,
                  tol->scale == ORACLE_ULP_TENSOR ? "the tensor's largest element" : "the element");
}

/* Fills out from the first divergent element `flat` of slot s (golden g). */
static void describe(const oracle_slot_t *s, const st_tensor_t *g, const unsigned char *gd,
                     const cmp_t *c, uint64_t flat, uint64_t ndiff, oracle_divergence_t *out) {
    const uint64_t numel = st_numel(g);
    snprintf(out->tensor, sizeof out->tensor, "%s", s->name);
    out->step = strncmp(s->name, "step", 4) ? -1 : strtoll(s->name + 4, NULL, 10);
    out->flat = flat, out->ndim = g->ndim, out->numel = numel, out->ndiff = ndiff;
    uint64_t f = flat;
    for (int d = g->ndim - 1; d >= 0; d--) {
        out->index[d] = (int64_t)(f % (uint64_t)g->shape[d]);
        f /= (uint64_t)g->shape[d];
    }
    out->want_bits = bits_at(gd + flat * c->es, c->es);
    out->want = value_of(c->dt, out->want_bits);
    out->copies = c->copies[flat], out->bad_copies = c->bad[flat];
    out->max_ulp = c->max_ulp;
    char coords[128], want[96], got[96] = "", tol[96], mesh[96] = "";
    tensor_format_coords(g->ndim, g->shape, flat, coords, sizeof coords);
    tensor_format_value(c->dt, out->want_bits, want, sizeof want);
    fmt_tolerance(c->tol, tol, sizeof tol);
    out->rank = -1;
    if (!c->copies[flat]) {
        out->kind = ORACLE_DIFF_MISSING;
        snprintf(out->report, sizeof out->report,
                 "FIRST DIVERGENCE %s%s (flat %llu of %llu): no rank supplied this element "
                 "(golden %s); %llu of %llu elements of this tensor diverge (%s)",
                 s->name, coords, (unsigned long long)flat, (unsigned long long)numel, want,
                 (unsigned long long)ndiff, (unsigned long long)numel, tol);
        return;
    }
    out->kind = ORACLE_DIFF_VALUE;
    out->rank = c->bad_rank[flat];
    for (int j = 0; j < s->np; j++) {
        const int64_t local = s->p[j].rank == out->rank ? piece_local(g, &s->p[j], flat) : -1;
        if (local < 0) continue;
        out->got_bits = bits_at(s->p[j].data + (uint64_t)local * c->es, c->es);
        fmt_coords(&s->p[j], mesh, sizeof mesh);
    }
    out->got = value_of(c->dt, out->got_bits);
    if (st_dtype_is_float(c->dt) && !is_nan(c->dt, out->got_bits) && !is_nan(c->dt, out->want_bits))
        out->ulp = tensor_ulp_distance(out->got_bits, out->want_bits, c->es);
    tensor_format_value(c->dt, out->got_bits, got, sizeof got);
    char ulp[48] = "";
    if (st_dtype_is_float(c->dt)) snprintf(ulp, sizeof ulp, ", %llu ulp", (unsigned long long)out->ulp);
    snprintf(out->report, sizeof out->report,
             "FIRST DIVERGENCE %s%s (flat %llu of %llu): got %s from rank %d%s, golden %s%s; "
             "%d of %d cop%s of this element out of tolerance; %llu of %llu elements of this "
             "tensor diverge, max %llu ulp (%s)",
             s->name, coords, (unsigned long long)flat, (unsigned long long)numel, got, out->rank,
             mesh, want, ulp, out->bad_copies, out->copies, out->copies == 1 ? "y" : "ies",
             (unsigned long long)ndiff, (unsigned long long)numel,
             (unsigned long long)out->max_ulp, tol);
}

/* Slot s against the golden run: 1 and *out filled at a divergence, 0
 * when it matches, -1 out of memory. */
static int compare_slot(const oracle_t *o, const oracle_slot_t *s, const oracle_tolerance_t *tol,
                        oracle_divergence_t *out, perr_t *err) {
    st_tensor_t g;
    const unsigned char *gd = oracle_golden_at(o, s->golden, &g);
    const uint64_t numel = st_numel(&g);
    cmp_t c = {.dt = g.dtype, .es = st_dtype_size(g.dtype), .golden = gd, .tol = tol};
    c.copies = calloc(numel ? numel : 1, sizeof(int32_t));
    c.bad = calloc(numel ? numel : 1, sizeof(int32_t));
    c.bad_rank = calloc(numel ? numel : 1, sizeof(int32_t));
    int rc = 0;
    if (!c.copies || !c.bad || !c.bad_rank) {
        rc = perr_set(err, "oracle: out of memory comparing '%s'", s->name);
        goto done;
    }
    if (tol && tol->scale == ORACLE_ULP_TENSOR) {
        c.abs_tol = (double)tol->max_ulp * oracle_tensor_ulp(g.dtype, gd, numel);
        if (!isfinite(c.abs_tol)) {
            rc = perr_set(err, "tolerance max_ulp %llu of '%s''s largest element is not a "
                               "finite distance (a tolerance that passes every value compares "
                               "nothing)", (unsigned long long)tol->max_ulp, s->name);
            goto done;
        }
    }
    for (int j = 0; j < s->np; j++) {
        c.src = s->p[j].data, c.rank = s->p[j].rank;
        oracle_piece_walk(&g, &s->p[j], compare_one, &c);
    }
    uint64_t ndiff = 0, first = numel;
    for (uint64_t i = 0; i < numel; i++)
        if (!c.copies[i] || c.bad[i]) {
            if (!ndiff++) first = i;
        }
    if (ndiff) {
        describe(s, &g, gd, &c, first, ndiff, out);
        rc = 1;
    }
done:
    free(c.copies);
    free(c.bad);
    free(c.bad_rank);
    return rc;
}

typedef struct {
    long key[4];
    int slot;
} order_t;

static int by_exec(const void *pa, const void *pb) {
    const order_t *a = pa, *b = pb;
    for (int k = 0; k < 4; k++)
        if (a->key[k] != b->key[k]) return a->key[k] < b->key[k] ? -1 : 1;
    return a->slot - b->slot;
}

int oracle_compare(oracle_t *o, const oracle_tolerance_t *tol, oracle_divergence_t *out,
                   perr_t *err) {
    oracle_divergence_t none;
    if (!out) out = &none;
    memset(out, 0, sizeof *out);
    out->rank = -1;
    if (!o) return perr_set(err, "oracle_compare: no oracle");
    if (!o->ns)
        return perr_set(err, "nothing to compare: no tensor was put (oracle_put); an empty "
                             "comparison would pass whatever the backend computed");
    if (tol && tol->scale != ORACLE_ULP_ELEMENT && tol->scale != ORACLE_ULP_TENSOR)
        return perr_set(err, "tolerance scale %d (ORACLE_ULP_ELEMENT or ORACLE_ULP_TENSOR)",
                        tol->scale);
    if (tol && tol->max_ulp > ORACLE_MAX_ULP)
        return perr_set(err, "tolerance max_ulp %llu: expected 0 to 2^63-1 (a negative count "
                             "wrapped to unsigned would pass every value)",
                        (unsigned long long)tol->max_ulp);
    order_t *ord = malloc((size_t)o->ns * sizeof *ord);
    if (!ord) return perr_set(err, "oracle: out of memory");
    for (int i = 0; i < o->ns; i++) {
        check_exec_key(o->s[i].name, ord[i].key);
        ord[i].slot = i;
    }
    qsort(ord, (size_t)o->ns, sizeof *ord, by_exec);
    int rc = 0;
    for (int k = 0; k < o->ns && !rc; k++) rc = compare_slot(o, &o->s[ord[k].slot], tol, out, err);
    out->compared = o->ns;
    free(ord);
    return rc;
}
