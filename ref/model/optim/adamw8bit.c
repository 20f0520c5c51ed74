/* adamw8bit.c - AdamW with block-wise 8-bit state (model.h, MODEL.md
 * "8-bit AdamW"), in the manner of bitsandbytes' 8-bit optimizers
 * (Dettmers et al., "8-bit Optimizers via Block-wise Quantization").
 *
 * The maps. bitsandbytes' dynamic map: for exponent row i = 0..6 the
 * midpoints of 2^j + 1 evenly spaced boundaries on [0.1, 1], scaled by
 * 10^(i-6) (signed: j = i, and each value with both signs; unsigned:
 * j = i + 1), then 0 and 1. Midpoint k of row i is the rational
 *     (2^(j+1) + 18k + 9) / (2^(j+1) * 10^(7-i)),
 * a numerator below 2^12 over a denominator below 2^32, so each entry is
 * that rational rounded once to fp32 by integer long division: no libm,
 * no double rounding, the same 256 floats on every machine (I5).
 * bitsandbytes computes them in fp32 through torch.linspace, so its
 * tables can differ from these in the last bit; what matters here is that
 * every layout uses one table.
 *
 * One change to the signed map: its smallest negative entry (-5.5e-7) is
 * -1 instead, so both maps hold +-1 where they need it. Requantizing a
 * block divides by absmax = max |x|, so the element that sets it becomes
 * exactly +-1 and dequantizes to exactly +-absmax: a block's absmax is
 * then the largest |value| of its dequantized block. The dequantized
 * moments are therefore the whole state (adam8_from_values rebuilds codes
 * and absmax from them), which is what dumps and checkpoints hold.
 *
 * Codes are stored so that code 0 is 0 in both maps (code c is sorted
 * entry (c + z) mod 256, z the index of 0): zeroed memory is the initial
 * state, as for fp32 AdamW, and no allocation needs an initialiser.
 */
#include "model/gpt.h"

#include <pthread.h>
#include <stdint.h>
#include <string.h>

#include "model/optim/adamw_internal.h"

typedef struct {
    float value[256];   /* by code */
    float sorted[256];  /* ascending */
    double mid[255];    /* (sorted[k] + sorted[k+1]) / 2, exact in double */
    uint8_t code[256];  /* the code of sorted[k] */
} qmap_t;

static qmap_t maps[2]; /* [0] unsigned (v), [1] signed (m) */
static pthread_once_t maps_once = PTHREAD_ONCE_INIT;

static float from_bits(uint32_t u) {
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

/* num/den (0 < num < den < 2^32) rounded to the nearest fp32, ties to
 * even: 24 quotient bits by long division, then the remainder decides. */
static float ratio_f32(uint64_t num, uint64_t den) {
    int s = 0; /* num/den = (n/den) * 2^-s with 1 <= n/den < 2 */
    uint64_t n = num;
    while (n < den) n <<= 1, s++;
    uint32_t q = 0;
    for (int b = 0; b < 24; b++) {
        q <<= 1;
        if (n >= den) q |= 1, n -= den;
        n <<= 1; /* n < 2 den < 2^33 */
    }
    if (n > den || (n == den && (q & 1))) q++; /* n is twice the remainder */
    if (q == 1u << 24) q >>= 1, s--;
    return from_bits((uint32_t)(127 - s) << 23 | (q & 0x7fffffu));
}

static uint64_t pow10u(int e) {
    uint64_t p = 1;
    while (e-- > 0) p *= 10;
    return p;
}

static void build_map(qmap_t *m, int is_signed) {
    float v[256];
    int n = 0;
    for (int i = 0; i < 7; i++) {
        const int j = is_signed ? i : i + 1;
        const uint64_t two = (uint64_t)2 << j, den = two * pow10u(7 - i);
        for (uint64_t k = 0; k < ((uint64_t)1 << j); k++) {
            const float x = ratio_f32(two + 18 * k + 9, den);
            v[n++] = x;
            /* signed: the smallest negative (row 0) is -1 instead (top) */
            if (is_signed) v[n++] = i == 0 ? -1.0f : -x;
        }
    }
    v[n++] = 0.0f;
    v[n++] = 1.0f;
    /* n == 256: 2 x 127 + 2 signed, 254 + 2 unsigned. Insertion sort: the
     * values are distinct, so the order is the only one. */
    for (int a = 1; a < 256; a++)
        for (int b = a; b > 0 && v[b] < v[b - 1]; b--) {
            const float t = v[b];
            v[b] = v[b - 1], v[b - 1] = t;
        }
    int zero = 0;
    while (v[zero] != 0.0f) zero++;
    for (int k = 0; k < 256; k++) {
        m->sorted[k] = v[k];
        m->code[k] = (uint8_t)((k - zero) & 255);
        m->value[m->code[k]] = v[k];
        /* neighbours are within a factor of ~40 (or one is 0): the sum of
         * two floats is exact in double, and halving it too */
        if (k < 255) m->mid[k] = ((double)v[k] + (double)v[k + 1]) / 2.0;
    }
}

static void build_maps(void) {
    build_map(&maps[0], 0);
    build_map(&maps[1], 1);
}

static const qmap_t *qmap(int is_signed) {
    pthread_once(&maps_once, build_maps);
    return &maps[is_signed != 0];
}

const float *adam8_map(int is_signed) { return qmap(is_signed)->value; }

/* The number of midpoints below x: the sorted index of the nearest
 * entry, a tie (x on a midpoint) going to the lower one. NaN: the
 * comparisons fail alike in every layout. */
static uint8_t nearest(const qmap_t *m, float x) {
    const double d = (double)x;
    int lo = 0, hi = 255;
    while (lo < hi) {
        const int c = (lo + hi) / 2;
        if (m->mid[c] < d) lo = c + 1;
        else hi = c;
    }
    return m->code[lo];
}

uint8_t adam8_quantize(float x, int is_signed) { return nearest(qmap(is_signed), x); }

/* max |x| over a block, NaN sticking once seen: exact, and over the same
 * elements in every layout. */
static float absmax_of(const float *x, size_t n) {
    float mx = 0.0f;
    for (size_t i = 0; i < n; i++) {
        uint32_t u;
        memcpy(&u, &x[i], sizeof u);
        const float a = from_bits(u & 0x7fffffffu);
        if (a > mx || a != a) mx = a;
        if (mx != mx) break;
    }
    return mx;
}

/* A block of fp32 values -> codes and its absmax (bitsandbytes divides by
 * the block's new absmax, as here). An all-zero block keeps absmax 0 and
 * code 0 (0 / 0 would be NaN). */
static float quantize_block(const qmap_t *m, const float *x, size_t n, uint8_t *codes) {
    const float a = absmax_of(x, n);
    if (a == 0.0f) {
        memset(codes, 0, n);
        return a;
    }
    for (size_t i = 0; i < n; i++) codes[i] = nearest(m, x[i] / a);
    return a;
}

size_t adam8_table_blocks(const param_table_t *t, int block) {
    size_t n = 0;
    for (int i = 0; i < t->count; i++) n += adam8_nblocks(t->info[i].numel, block);
    return n;
}

void adam8_dequantize(const uint8_t *codes, const float *absmax, size_t n, int block, int is_signed,
                      float *values) {
    const float *map = qmap(is_signed)->value;
    for (size_t i = 0; i < n; i++) values[i] = map[codes[i]] * absmax[i / (size_t)block];
}

int adam8_from_values(const float *values, size_t n, int block, int is_signed, uint8_t *codes,
                      float *absmax, size_t *bad) {
    const qmap_t *m = qmap(is_signed);
    for (size_t b = 0, lo = 0; lo < n; b++, lo += (size_t)block) {
        const size_t len = n - lo < (size_t)block ? n - lo : (size_t)block;
        const float a = absmax[b] = quantize_block(m, values + lo, len, codes + lo);
        for (size_t i = lo; i < lo + len; i++) {
            float d = m->value[codes[i]] * a;
            if (!memcmp(&d, &values[i], sizeof d)) continue;
            /* a tiny absmax: several codes may round to one value, and
             * the nearest to values[i] / a need not be one of them */
            int c = 0;
            while (c < 256 && (d = m->value[c] * a, memcmp(&d, &values[i], sizeof d))) c++;
            if (c == 256) {
                if (bad) *bad = i;
                return -1;
            }
            codes[i] = (uint8_t)c;
        }
    }
    return 0;
}

void adamw8bit_update(float *p, const float *g, uint8_t *mq, float *ma, uint8_t *vq, float *va,
                      size_t n, int block, int t, float lr, float beta1, float beta2, float eps,
                      float weight_decay) {
    const adamw_coef_t c = adamw_coef(t, lr, beta1, beta2, eps, weight_decay);
    const qmap_t *ms = qmap(1), *mu = qmap(0);
    float m[ADAM8_MAX_BLOCK], v[ADAM8_MAX_BLOCK];
    for (size_t b = 0, lo = 0; lo < n; b++, lo += (size_t)block) {
        const size_t len = n - lo < (size_t)block ? n - lo : (size_t)block;
        for (size_t i = 0; i < len; i++) {
            m[i] = ms->value[mq[lo + i]] * ma[b];
            v[i] = mu->value[vq[lo + i]] * va[b];
            adamw_lane(&c, p + lo + i, g[lo + i], m + i, v + i);
        }
        ma[b] = quantize_block(ms, m, len, mq + lo);
        va[b] = quantize_block(mu, v, len, vq + lo);
    }
}
