/* tensor_diff.c - element-wise comparison of two tensors (tensor_diff.h). */
#include "parity/tensor_diff.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

static uint64_t load_bits(const uint8_t *p, size_t es, uint64_t i) {
    p += i * es;
    switch (es) {
    case 1: return p[0];
    case 2: { uint16_t v; memcpy(&v, p, 2); return v; }
    case 4: { uint32_t v; memcpy(&v, p, 4); return v; }
    default: { uint64_t v; memcpy(&v, p, 8); return v; }
    }
}

/* A small IEEE-style float: sign, ebits exponent bits, mbits mantissa
 * bits. `finite_nan` is the OCP FP8 E4M3 variant: no infinities, and
 * only all-ones exponent and mantissa is NaN. */
static double decode_minifloat(uint64_t bits, int ebits, int mbits, int finite_nan) {
    int sign = (int)(bits >> (ebits + mbits)) & 1;
    uint64_t e = (bits >> mbits) & ((1u << ebits) - 1), m = bits & ((1u << mbits) - 1);
    uint64_t emax = (1u << ebits) - 1;
    int bias = (1 << (ebits - 1)) - 1;
    double v;
    if (!finite_nan && e == emax) v = m ? NAN : INFINITY;
    else if (finite_nan && e == emax && m == (1u << mbits) - 1) v = NAN;
    else if (e == 0) v = ldexp((double)m, 1 - bias - mbits);
    else v = ldexp((double)((1u << mbits) + m), (int)e - bias - mbits);
    return sign ? -v : v;
}

static double float_value(st_dtype_t dt, uint64_t bits) {
    switch (dt) {
    case ST_F32: { uint32_t u = (uint32_t)bits; float f; memcpy(&f, &u, 4); return f; }
    case ST_F64: { double d; memcpy(&d, &bits, 8); return d; }
    case ST_F16: return decode_minifloat(bits, 5, 10, 0);
    case ST_BF16: return decode_minifloat(bits, 8, 7, 0);
    case ST_F8_E5M2: return decode_minifloat(bits, 5, 2, 0);
    case ST_F8_E4M3: return decode_minifloat(bits, 4, 3, 1);
    default: return NAN;
    }
}

static int dtype_signed(st_dtype_t dt) {
    return dt == ST_I8 || dt == ST_I16 || dt == ST_I32 || dt == ST_I64;
}

static int64_t sign_extend(uint64_t bits, size_t es) {
    if (es == 8) return (int64_t)bits;
    uint64_t sign = 1ull << (8 * es - 1);
    return bits & sign ? (int64_t)(bits | ~((sign << 1) - 1)) : (int64_t)bits;
}

uint64_t tensor_ulp_distance(uint64_t a, uint64_t b, size_t es) {
    uint64_t sign = 1ull << (8 * es - 1);
    uint64_t ma = a & ~sign, mb = b & ~sign;
    if ((a & sign) == (b & sign)) return ma > mb ? ma - mb : mb - ma;
    return ma + mb; /* < 2^64: each magnitude is below 2^63 */
}

void tensor_format_value(st_dtype_t dt, uint64_t bits, char *buf, size_t cap) {
    size_t es = st_dtype_size(dt);
    if (st_dtype_is_float(dt))
        snprintf(buf, cap, "%.*g (0x%0*llx)", dt == ST_F64 ? 17 : 9, float_value(dt, bits), (int)(2 * es),
                 (unsigned long long)bits);
    else if (dtype_signed(dt))
        snprintf(buf, cap, "%lld", (long long)sign_extend(bits, es));
    else
        snprintf(buf, cap, "%llu", (unsigned long long)bits);
}

int tensor_diff(st_dtype_t dt, uint64_t numel, const void *pa, const void *pb, tensor_diff_t *r) {
    const uint8_t *a = pa, *b = pb;
    size_t es = st_dtype_size(dt);
    memset(r, 0, sizeof *r);
    r->numel = numel;
    if (r->numel == 0 || !memcmp(a, b, (size_t)(r->numel * es))) return 1;
    int is_float = st_dtype_is_float(dt), is_signed = dtype_signed(dt);
    for (uint64_t i = 0; i < r->numel; i++) {
        uint64_t ua = load_bits(a, es, i), ub = load_bits(b, es, i);
        if (ua == ub) continue;
        uint64_t ulp = 0;
        if (is_float) ulp = tensor_ulp_distance(ua, ub, es);
        if (r->ndiff++ == 0) r->first = i, r->first_a = ua, r->first_b = ub, r->first_ulp = ulp;
        double d, scale;
        if (is_float) {
            double va = float_value(dt, ua), vb = float_value(dt, ub);
            if (isnan(va) || isnan(vb)) {
                if (r->nnan++ == 0 && r->ndiff == 1) r->first_nan = 1;
                continue;
            }
            d = fabs(va - vb);
            scale = fmax(fabs(va), fabs(vb));
            if (ulp > r->max_ulp) r->max_ulp = ulp;
        } else if (is_signed) {
            int64_t va = sign_extend(ua, es), vb = sign_extend(ub, es);
            /* |va - vb| exactly, in unsigned arithmetic (no overflow). */
            uint64_t diff = va > vb ? (uint64_t)va - (uint64_t)vb : (uint64_t)vb - (uint64_t)va;
            d = (double)diff;
            scale = fmax(fabs((double)va), fabs((double)vb));
        } else {
            d = (double)(ua > ub ? ua - ub : ub - ua);
            scale = (double)(ua > ub ? ua : ub);
        }
        double rel = isinf(d) ? INFINITY : scale > 0 ? d / scale : 0.0;
        if (d > r->max_abs) r->max_abs = d;
        if (rel > r->max_rel) r->max_rel = rel;
    }
    return 0;
}


void tensor_format_coords(int ndim, const int64_t *shape, uint64_t flat, char *buf, size_t cap) {
    int64_t c[ST_MAX_DIMS];
    for (int d = ndim - 1; d >= 0; d--) {
        c[d] = shape[d] ? (int64_t)(flat % (uint64_t)shape[d]) : 0;
        flat = shape[d] ? flat / (uint64_t)shape[d] : flat;
    }
    size_t o = (size_t)snprintf(buf, cap, "[");
    for (int d = 0; d < ndim && o < cap; d++)
        o += (size_t)snprintf(buf + o, cap - o, "%s%lld", d ? "," : "", (long long)c[d]);
    if (o < cap) snprintf(buf + o, cap - o, "]");
}
