/* xacc.c - the exact fp32 superaccumulator (see include/parity/xacc.h).
 *
 * The value is a fixed-point integer in units of 2^-149 spread over
 * XACC_CHUNKS signed 64-bit words that each stand for 32 bits of weight.
 * An fp32 term's 24-bit significand, shifted into place, touches at most
 * two words and adds less than 2^32 to each, so a word can absorb 2^30
 * additions before its spare high bits could overflow; only then (or
 * before rounding or merging) do carries have to be propagated.
 */
#include "parity/xacc.h"

#include <string.h>

#define CHUNK_MASK 0xffffffffULL
#define TOP (XACC_CHUNKS - 1)
/* Additions a word absorbs before carries must be propagated. */
#define ADDS_PER_CARRY (1u << 30)
#define CANONICAL_NAN_BITS 0x7fc00000u

static inline uint32_t f32_bits(float x) {
    uint32_t u;
    memcpy(&u, &x, sizeof u);
    return u;
}

static inline float f32_from_bits(uint32_t u) {
    float x;
    memcpy(&x, &u, sizeof x);
    return x;
}

void xacc_init(xacc_t *acc) {
    memset(acc, 0, sizeof *acc);
    acc->adds_left = ADDS_PER_CARRY;
}

/* Brings chunk[0..TOP-1] into [0, 2^32); the top word keeps the sign. */
static void normalize(int64_t *chunk) {
    for (int i = 0; i < TOP; i++) {
        int64_t carry = chunk[i] >> XACC_CHUNK_BITS; /* floor division */
        chunk[i] -= (int64_t)((uint64_t)carry << XACC_CHUNK_BITS);
        chunk[i + 1] += carry;
    }
}

static void carry_if_due(xacc_t *acc, uint32_t adds) {
    if (acc->adds_left <= adds) {
        normalize(acc->chunk);
        acc->adds_left = ADDS_PER_CARRY - 2;
    }
    acc->adds_left -= adds;
}

/* Adds ±m * 2^p (units of 2^-149) with m < 2^32. */
static inline void add_bits(xacc_t *acc, uint64_t m, int p, int negative) {
    int i = p >> 5;
    if (i >= TOP) { /* only fp64 partials of huge sums reach here */
        int64_t v = (int64_t)(m << (p - 32 * TOP));
        acc->chunk[TOP] += negative ? -v : v;
        return;
    }
    uint64_t v = m << (p & 31);
    int64_t lo = (int64_t)(v & CHUNK_MASK), hi = (int64_t)(v >> 32);
    if (negative) {
        acc->chunk[i] -= lo;
        acc->chunk[i + 1] -= hi;
    } else {
        acc->chunk[i] += lo;
        acc->chunk[i + 1] += hi;
    }
}

void xacc_add_f32(xacc_t *acc, float x) {
    uint32_t u = f32_bits(x);
    uint32_t biased = (u >> 23) & 0xff, frac = u & 0x7fffff;
    int negative = (int)(u >> 31);
    if (biased == 0xff) {
        if (frac) acc->nan = 1;
        else if (negative) acc->neg_inf = 1;
        else acc->pos_inf = 1;
        return;
    }
    if (biased == 0 && frac == 0) return; /* ±0 adds nothing */
    /* Significand m and the position p of its last bit above 2^-149. */
    uint64_t m = biased ? (frac | 0x800000u) : frac;
    int p = biased ? (int)biased - 1 : 0;
    carry_if_due(acc, 1);
    add_bits(acc, m, p, negative);
}

/* Many terms at once, banded by exponent: a term with biased exponent e
 * goes to bin[e >> 4]. The 16 exponents of band b make every term a
 * multiple of 2^(max(16b, 1) - 150) and smaller than 2^(16b - 111), so
 * up to 2^14 of them sum in fp64 with every partial sum exact (it needs
 * at most 14 + 39 = 53 bits). Each bin then enters as one exact fp64
 * term: ~1 ns a term instead of a carry-save addition per term. Four bin
 * sets, by index, keep consecutive additions off one memory slot. A chunk
 * with an infinity or NaN takes the term-by-term path (their IEEE rules). */
void xacc_add_array_f32(xacc_t *acc, const float *x, size_t n) {
    enum { CHUNK = 1 << 14, BANDS = 16, SETS = 4 };
    for (size_t base = 0; base < n; base += CHUNK) {
        size_t len = n - base < CHUNK ? n - base : CHUNK;
        const float *c = x + base;
        double bin[SETS][BANDS] = {{0}};
        uint32_t special = 0;
        for (size_t i = 0; i < len; i++) {
            uint32_t biased = (f32_bits(c[i]) >> 23) & 0xff;
            special |= biased == 0xff;
            bin[i % SETS][biased >> 4] += (double)c[i];
        }
        if (special) {
            for (size_t i = 0; i < len; i++) xacc_add_f32(acc, c[i]);
            continue;
        }
        for (int s = 0; s < SETS; s++)
            for (int b = 0; b < BANDS; b++)
                if (bin[s][b] != 0.0) xacc_add_f64_exact(acc, bin[s][b]);
    }
}

void xacc_add_f64_exact(xacc_t *acc, double x) {
    uint64_t u;
    memcpy(&u, &x, sizeof u);
    int biased = (int)((u >> 52) & 0x7ff);
    uint64_t frac = u & ((1ULL << 52) - 1);
    int negative = (int)(u >> 63);
    if (biased == 0x7ff) {
        if (frac) acc->nan = 1;
        else if (negative) acc->neg_inf = 1;
        else acc->pos_inf = 1;
        return;
    }
    if (biased == 0) return; /* zero (an exact fp32 sum is never fp64-subnormal) */
    uint64_t m = frac | (1ULL << 52);
    int p = biased - 1075 + 149; /* position of m's last bit */
    while (p < 0) { /* trailing zero bits below 2^-149: x is a multiple of it */
        m >>= 1;
        p++;
    }
    carry_if_due(acc, 2);
    add_bits(acc, m & CHUNK_MASK, p, negative);
    add_bits(acc, m >> 32, p + 32, negative);
}

void xacc_merge(xacc_t *acc, const xacc_t *other) {
    int64_t theirs[XACC_CHUNKS];
    memcpy(theirs, other->chunk, sizeof theirs);
    normalize(theirs);
    normalize(acc->chunk);
    for (int i = 0; i < XACC_CHUNKS; i++) acc->chunk[i] += theirs[i];
    acc->adds_left = ADDS_PER_CARRY - 2;
    acc->pos_inf |= other->pos_inf;
    acc->neg_inf |= other->neg_inf;
    acc->nan |= other->nan;
}

/* The finite part as sign and normalized magnitude words; returns the
 * index of the most significant set bit, or -1 for an exact zero. */
static int magnitude(const xacc_t *acc, int64_t *mag, int *negative) {
    memcpy(mag, acc->chunk, sizeof acc->chunk);
    normalize(mag);
    *negative = mag[TOP] < 0;
    if (*negative) {
        for (int i = 0; i < XACC_CHUNKS; i++) mag[i] = -mag[i];
        normalize(mag);
    }
    for (int i = TOP; i >= 0; i--) {
        if (mag[i]) {
            int top = 63 - __builtin_clzll((uint64_t)mag[i]);
            return 32 * i + top;
        }
    }
    return -1;
}

static inline int bit_at(const int64_t *mag, int b) {
    int i = b >> 5;
    if (i >= TOP) return (int)(((uint64_t)mag[TOP] >> (b - 32 * TOP)) & 1);
    return (int)(((uint64_t)mag[i] >> (b & 31)) & 1);
}

/* Bits [lo, lo + count) of the magnitude as an integer (count <= 60). */
static uint64_t bits_at(const int64_t *mag, int lo, int count) {
    uint64_t r = 0;
    for (int b = lo + count - 1; b >= lo; b--) r = (r << 1) | (uint64_t)bit_at(mag, b);
    return r;
}

static int any_bit_below(const int64_t *mag, int b) {
    int i = b >> 5;
    for (int j = 0; j < i && j < TOP; j++)
        if (mag[j]) return 1;
    if (i >= TOP) return (uint64_t)mag[TOP] & ((1ULL << (b - 32 * TOP)) - 1) ? 1 : 0;
    return ((uint64_t)mag[i] & ((1ULL << (b & 31)) - 1)) != 0;
}

/* Rounds the magnitude to `digits` significant bits, nearest-even.
 * Returns the rounded significand (which may have carried to 2^digits)
 * and sets *shift so that value = significand * 2^(*shift - 149). */
static uint64_t round_magnitude(const int64_t *mag, int msb, int digits, int *shift) {
    if (msb < digits) {
        *shift = 0;
        return bits_at(mag, 0, msb + 1);
    }
    int s = msb - (digits - 1);
    uint64_t m = bits_at(mag, s, digits);
    int round_bit = bit_at(mag, s - 1);
    int sticky = s - 1 > 0 ? any_bit_below(mag, s - 1) : 0;
    if (round_bit && (sticky || (m & 1))) m++;
    *shift = s;
    return m;
}

static int special_result(const xacc_t *acc) {
    return acc->nan || acc->pos_inf || acc->neg_inf;
}

float xacc_round_f32(const xacc_t *acc) {
    if (special_result(acc)) {
        if (acc->nan || (acc->pos_inf && acc->neg_inf)) return f32_from_bits(CANONICAL_NAN_BITS);
        return f32_from_bits(acc->pos_inf ? 0x7f800000u : 0xff800000u);
    }
    int64_t mag[XACC_CHUNKS];
    int negative;
    int msb = magnitude(acc, mag, &negative);
    if (msb < 0) return 0.0f; /* exact zero is +0 */
    int shift;
    uint64_t m = round_magnitude(mag, msb, 24, &shift);
    /* value = m * 2^(shift-149); for m in [2^23, 2^24] the fp32 encoding
     * is (shift << 23) + m, which also covers subnormals (shift 0) and a
     * significand that rounded up into the next binade. */
    uint64_t bits = ((uint64_t)shift << 23) + m;
    if (bits >= 0x7f800000u) bits = 0x7f800000u;
    return f32_from_bits((uint32_t)bits | (negative ? 0x80000000u : 0));
}

double xacc_round_f64(const xacc_t *acc) {
    if (special_result(acc)) return (double)xacc_round_f32(acc);
    int64_t mag[XACC_CHUNKS];
    int negative;
    int msb = magnitude(acc, mag, &negative);
    if (msb < 0) return 0.0;
    int shift;
    uint64_t m = round_magnitude(mag, msb, 53, &shift);
    /* Both factors are exact doubles and so is their product. */
    uint64_t pow2_bits = (uint64_t)(shift - 149 + 1023) << 52;
    double pow2;
    memcpy(&pow2, &pow2_bits, sizeof pow2);
    double r = (double)m * pow2;
    return negative ? -r : r;
}

int xacc_sign(const xacc_t *acc) {
    int64_t mag[XACC_CHUNKS];
    int negative;
    if (magnitude(acc, mag, &negative) < 0) return 0;
    return negative ? -1 : 1;
}
