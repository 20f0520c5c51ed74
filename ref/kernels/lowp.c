/* lowp.c - rounding fp32 values to bf16 and fp16 (pmath.h), the storage
 * dtypes of mixed precision (MODEL.md "Mixed precision").
 *
 * Both are integer operations on the fp32 bits: round to nearest, ties to
 * even, by adding just under half a quantum plus the kept part's lowest
 * bit, then clearing the dropped bits; a carry out of the significand
 * moves the exponent up, as rounding should. fp16's exponent range is
 * narrower, so its subnormals (quantum 2^-24) are rounded separately and
 * its overflow threshold (65520, halfway from 65504 to 2^16) is checked
 * first. No floating-point rounding mode or library is involved (I5). */
#include "parity/pmath.h"

#include <stdint.h>

#include "bits.h"

float pm_round_bf16(float x) {
    uint32_t u = f32_bits(x);
    if ((u & 0x7fffffffu) > 0x7f800000u) return f32_from_bits(PM_NAN_BITS);
    u += 0x7fffu + (u >> 16 & 1u); /* 16 bits dropped */
    return f32_from_bits(u & 0xffff0000u);
}

float pm_round_fp16(float x) {
    const uint32_t u = f32_bits(x), sign = u & 0x80000000u, a = u & 0x7fffffffu;
    if (a > 0x7f800000u) return f32_from_bits(PM_NAN_BITS);
    if (a >= 0x477ff000u) return f32_from_bits(sign | 0x7f800000u); /* >= 65520 (inf too) */
    if (a >= 0x38800000u) {                                    /* >= 2^-14: fp16 normal, 13 bits dropped */
        const uint32_t r = (a + 0xfffu + (a >> 13 & 1u)) & ~0x1fffu;
        return f32_from_bits(sign | r);
    }
    if (a <= 0x33000000u) return f32_from_bits(sign); /* <= 2^-25: half the smallest subnormal, to 0 */
    /* a subnormal fp16: a multiple q of 2^-24, q < 1024 (or 1024 = 2^-14) */
    const uint32_t m = (a & 0x7fffffu) | 0x800000u;  /* the significand, 24 bits */
    const int shift = 126 - (int)(a >> 23);          /* value = m 2^(e-150); q = m 2^(e-126) */
    uint32_t q = m >> shift;
    const uint32_t rem = m & ((1u << shift) - 1u), half = 1u << (shift - 1);
    if (rem > half || (rem == half && (q & 1u))) q++;
    return f32_from_bits(sign | f32_bits((float)q * 0x1p-24f)); /* exact: q <= 1024 */
}

void pm_round_bf16_array(float *x, size_t n) {
    for (size_t i = 0; i < n; i++) x[i] = pm_round_bf16(x[i]);
}

void pm_round_fp16_array(float *x, size_t n) {
    for (size_t i = 0; i < n; i++) x[i] = pm_round_fp16(x[i]);
}
