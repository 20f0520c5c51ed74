/* xacc.c - the exact fp32 superaccumulator (see include/parity/xacc.h).
 *
 * The value is a fixed-point integer in units of 2^-149 spread over
 * XACC_CHUNKS signed 64-bit words that each stand for 32 bits of weight.
 * A term's significand, shifted into place, adds less than 2^32 to each
 * word it touches, so a word can absorb 2^30 additions before its spare
 * high bits could overflow; only then (or before rounding or merging) do
 * carries have to be propagated.
 *
 * The top word. fp32 terms, and fp64 terms below 2^139, touch only
 * chunk[0..8]; larger fp64 terms (up to DBL_MAX) reach chunk[36]. The
 * highest word in use, chunk[8 + extra], keeps the sign and every word
 * above it is zero, so carries and rounding cost what nine words cost
 * until a huge value arrives. Each carry propagation leaves the top word
 * within ±2^62, room for the next 2^30 additions: it spills into the
 * word above when it grows past that, and folds back into the word below
 * when the value shrinks (the lowest top is part of the canonical form
 * that collectives compare). Only chunk[37] has nowhere to spill: a value
 * of 2^1097 or more is out of range and makes the accumulator NaN.
 */
#include "parity/xacc.h"

#include <math.h>
#include <string.h>

#include "bits.h"

#define CHUNK_MASK 0xffffffffULL
/* The lowest top word: what fp32 terms (and fp64 terms below 2^139) reach. */
#define BASE_TOP 8
#define MAX_TOP (XACC_CHUNKS - 1)
/* |top word| after a carry propagation: below 2^62, so 2^30 additions of
 * less than 2^32 each cannot overflow it before the next one. */
#define TOP_LIMIT (1LL << 62)
/* Additions a word absorbs before carries must be propagated. */
#define ADDS_PER_CARRY (1u << 30)
#define CANONICAL_NAN_BITS 0x7fc00000u

static inline int top_of(const xacc_t *acc) { return BASE_TOP + acc->extra; }

void xacc_init(xacc_t *acc) {
    memset(acc, 0, sizeof *acc);
    acc->adds_left = ADDS_PER_CARRY;
}

/* Shifts left without the undefined behaviour of shifting a negative int64. */
static inline int64_t shl32(int64_t x) { return (int64_t)((uint64_t)x << XACC_CHUNK_BITS); }

/* Brings chunk[0..top-1] into [0, 2^32) and moves the top so that chunk[top]
 * ends within [-2^62, 2^62), with top as low as that allows (>= BASE_TOP).
 * Words above top are zero before and after. Returns the new top, or -1
 * when the value is out of range, outside [-2^1097, 2^1097). */
static int normalize(int64_t *chunk, int top) {
    for (int i = 0; i < top; i++) {
        int64_t carry = chunk[i] >> XACC_CHUNK_BITS; /* floor division */
        chunk[i] -= shl32(carry);
        chunk[i + 1] += carry;
    }
    /* too big for another 2^30 additions: spill into the word above */
    while (chunk[top] < -TOP_LIMIT || chunk[top] >= TOP_LIMIT) {
        if (top == MAX_TOP) return -1;
        int64_t carry = chunk[top] >> XACC_CHUNK_BITS;
        chunk[top] -= shl32(carry);
        chunk[++top] += carry;
    }
    /* small enough to fit the word below within the limit: fold it back */
    while (top > BASE_TOP && chunk[top] >= -(1LL << 30) && chunk[top] < (1LL << 30)) {
        chunk[top - 1] += shl32(chunk[top]);
        chunk[top--] = 0;
    }
    return top;
}

/* normalize() in place. Out of range the accumulator becomes NaN, with
 * its words cleared so that later additions stay well-defined. */
static void settle(xacc_t *acc) {
    int top = normalize(acc->chunk, top_of(acc));
    if (top < 0) {
        memset(acc->chunk, 0, sizeof acc->chunk);
        acc->nan = 1;
        top = BASE_TOP;
    }
    acc->extra = (uint8_t)(top - BASE_TOP);
}

static void carry_if_due(xacc_t *acc, uint32_t adds) {
    if (acc->adds_left <= adds) {
        settle(acc);
        acc->adds_left = ADDS_PER_CARRY - 2;
    }
    acc->adds_left -= adds;
}

/* Adds ±m * 2^p (units of 2^-149) with m < 2^32: less than 2^32 each to
 * chunk[p/32] and chunk[p/32 + 1]. Every finite double has p <= 1152, so
 * both words exist; a word above the top gets only zero bits. */
static inline void add_bits(xacc_t *acc, uint64_t m, int p, int negative) {
    int i = p >> 5;
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
    /* Significand m and the position p of its last bit above 2^-149;
     * p + 23 < 277, so only chunk[0..8] change. */
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
    if (biased == 0) { /* ±0 adds nothing; an fp64 subnormal (< 2^-1022) */
        if (frac) acc->nan = 1; /* is no multiple of 2^-149: out of domain */
        return;
    }
    uint64_t m = frac | (1ULL << 52);
    int p = biased - 1075 + 149; /* position of m's last bit */
    if (p < 0) { /* bits below 2^-149 must be zero (x a multiple of it) */
        if (p < -52 || (m & ((1ULL << -p) - 1))) {
            acc->nan = 1; /* out of domain: not an exact sum of fp32 values */
            return;
        }
        m >>= -p;
        p = 0;
    }
    carry_if_due(acc, 2); /* may lower the top: raise it after */
    int top = (p + 52) >> 5; /* the word of x's leading bit: up to 36 */
    if (top > top_of(acc)) acc->extra = (uint8_t)(top - BASE_TOP);
    add_bits(acc, m & CHUNK_MASK, p, negative);
    add_bits(acc, m >> 32, p + 32, negative);
}

void xacc_merge(xacc_t *acc, const xacc_t *other) {
    /* a copy of the words in use, and the zero word above them that
     * normalize() may spill into */
    int64_t theirs[XACC_CHUNKS];
    const int n = top_of(other) + 1;
    memcpy(theirs, other->chunk, (size_t)n * sizeof *theirs);
    if (n < XACC_CHUNKS) theirs[n] = 0;
    int their_top = normalize(theirs, n - 1);
    settle(acc);
    if (their_top < 0) {
        acc->nan = 1; /* other was out of range (and not yet marked) */
    } else {
        /* two top words within ±2^62 add without overflow; carrying again
         * leaves the sum with the full 2^30 additions of headroom, in
         * canonical form, and marked NaN if it left the range */
        for (int i = 0; i <= their_top; i++) acc->chunk[i] += theirs[i];
        if (their_top > top_of(acc)) acc->extra = (uint8_t)(their_top - BASE_TOP);
        settle(acc);
    }
    acc->adds_left = ADDS_PER_CARRY - 2;
    acc->pos_inf |= other->pos_inf;
    acc->neg_inf |= other->neg_inf;
    acc->nan |= other->nan;
}

/* The finite part as sign and magnitude, in 32-bit digits mag[0..top+1]
 * (mag has XACC_CHUNKS + 1 words: one more than the top word, whose 64
 * bits spread over two digits). Returns the index of the most significant
 * set bit, or -1 for an exact zero. */
static int magnitude(const xacc_t *acc, int64_t *mag, int *negative) {
    const int n = top_of(acc) + 1; /* digits 0..n */
    memcpy(mag, acc->chunk, (size_t)n * sizeof *mag);
    mag[n] = 0;
    for (int i = 0; i < n; i++) {
        int64_t carry = mag[i] >> XACC_CHUNK_BITS;
        mag[i] -= shl32(carry);
        mag[i + 1] += carry;
    }
    *negative = mag[n] < 0;
    if (*negative) {
        for (int i = 0; i <= n; i++) mag[i] = -mag[i];
        for (int i = 0; i < n; i++) {
            int64_t carry = mag[i] >> XACC_CHUNK_BITS;
            mag[i] -= shl32(carry);
            mag[i + 1] += carry;
        }
    }
    for (int i = n; i >= 0; i--) {
        if (mag[i]) {
            int top = 63 - __builtin_clzll((uint64_t)mag[i]);
            return 32 * i + top;
        }
    }
    return -1;
}

static inline int bit_at(const int64_t *mag, int b) {
    return (int)(((uint64_t)mag[b >> 5] >> (b & 31)) & 1);
}

/* Bits [lo, lo + count) of the magnitude as an integer (count <= 60). */
static uint64_t bits_at(const int64_t *mag, int lo, int count) {
    uint64_t r = 0;
    for (int b = lo + count - 1; b >= lo; b--) r = (r << 1) | (uint64_t)bit_at(mag, b);
    return r;
}

static int any_bit_below(const int64_t *mag, int b) {
    int i = b >> 5;
    for (int j = 0; j < i; j++)
        if (mag[j]) return 1;
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
    int64_t mag[XACC_CHUNKS + 1];
    int negative;
    int msb = magnitude(acc, mag, &negative);
    if (msb < 0) return 0.0f; /* exact zero is +0 */
    int shift;
    uint64_t m = round_magnitude(mag, msb, 24, &shift);
    /* value = m * 2^(shift-149); for m in [2^23, 2^24] the fp32 encoding
     * is (shift << 23) + m, which also covers subnormals (shift 0) and a
     * significand that rounded up into the next binade; anything at or
     * past the encoding of inf (shift up to ~1100 here) is inf. */
    uint64_t bits = ((uint64_t)shift << 23) + m;
    if (bits >= 0x7f800000u) bits = 0x7f800000u;
    return f32_from_bits((uint32_t)bits | (negative ? 0x80000000u : 0));
}

double xacc_round_f64(const xacc_t *acc) {
    if (special_result(acc)) return (double)xacc_round_f32(acc);
    int64_t mag[XACC_CHUNKS + 1];
    int negative;
    int msb = magnitude(acc, mag, &negative);
    if (msb < 0) return 0.0;
    int shift;
    uint64_t m = round_magnitude(mag, msb, 53, &shift);
    /* value = m * 2^(shift-149); the range reaches past DBL_MAX, and a
     * value whose leading bit is at 2^1024 or above rounds to ±inf */
    if (shift - 149 + (63 - __builtin_clzll(m)) >= 1024)
        return negative ? -INFINITY : INFINITY;
    /* Both factors are exact doubles and so is their product. */
    uint64_t pow2_bits = (uint64_t)(shift - 149 + 1023) << 52;
    double pow2;
    memcpy(&pow2, &pow2_bits, sizeof pow2);
    double r = (double)m * pow2;
    return negative ? -r : r;
}

int xacc_sign(const xacc_t *acc) {
    int64_t mag[XACC_CHUNKS + 1];
    int negative;
    if (magnitude(acc, mag, &negative) < 0) return 0;
    return negative ? -1 : 1;
}
