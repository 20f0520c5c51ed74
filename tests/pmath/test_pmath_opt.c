/* test_pmath_opt.c - pmath gives the same bits at -O0 and at -O2 (I5).
 *
 * tests/pmath.mk compiles ref/kernels/pmath.c a second time at -O0 and
 * renames its pm_* symbols to o0_pm_*; this binary links both copies and
 * compares them bit for bit on millions of inputs: every kind of float
 * (random bit patterns, so NaNs, infinities and subnormals too) and dense
 * walks over the ranges the model uses. A difference would mean the
 * compiler changed the arithmetic (contraction, reassociation, excess
 * precision), which would break cross-machine golden bits.
 */
#include <stdint.h>
#include <string.h>

#include "../harness.h"
#include "parity/pmath.h"

float o0_pm_expf(float);
float o0_pm_logf(float);
float o0_pm_tanhf(float);
float o0_pm_erff(float);
float o0_pm_sqrtf(float);
float o0_pm_rsqrtf(float);
float o0_pm_sinf(float);
float o0_pm_cosf(float);
float o0_pm_gelu_tanh(float);
float o0_pm_gelu_tanh_grad(float);
float o0_pm_powf_int(float, int);

static uint32_t bits_of(float x) { uint32_t b; memcpy(&b, &x, 4); return b; }
static float from_bits(uint32_t b) { float x; memcpy(&x, &b, 4); return x; }

static uint64_t state = 0x13198a2e03707344ull;
static uint64_t next_u64(void) {
    uint64_t z = (state += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

static const struct {
    const char *name;
    float (*o2)(float);
    float (*o0)(float);
    float lo, hi;      /* the model's range, walked densely */
} FUNCS[] = {
    {"expf", pm_expf, o0_pm_expf, -104.0f, 89.0f},
    {"logf", pm_logf, o0_pm_logf, 0.0f, 1e6f},
    {"tanhf", pm_tanhf, o0_pm_tanhf, -20.0f, 20.0f},
    {"erff", pm_erff, o0_pm_erff, -20.0f, 20.0f},
    {"sqrtf", pm_sqrtf, o0_pm_sqrtf, 0.0f, 3e38f},
    {"rsqrtf", pm_rsqrtf, o0_pm_rsqrtf, 1e-12f, 1e12f},
    {"sinf", pm_sinf, o0_pm_sinf, -6.2831855f, 6.2831855f},
    {"cosf", pm_cosf, o0_pm_cosf, -6.2831855f, 6.2831855f},
    {"gelu_tanh", pm_gelu_tanh, o0_pm_gelu_tanh, -20.0f, 20.0f},
    {"gelu_tanh_grad", pm_gelu_tanh_grad, o0_pm_gelu_tanh_grad, -20.0f, 20.0f},
};

/* Inputs: random bit patterns, then every stride-th float of [lo, hi]
 * (lo and hi have the same sign or lo <= 0 <= hi). */
static void compare(int k, int n_random, int n_walk) {
    uint64_t diff = 0, n = 0;
    uint32_t first = 0;
    for (int i = 0; i < n_random; i++, n++) {
        float x = from_bits((uint32_t)next_u64());
        if (bits_of(FUNCS[k].o2(x)) != bits_of(FUNCS[k].o0(x)) && !diff++) first = bits_of(x);
    }
    double lo = FUNCS[k].lo, hi = FUNCS[k].hi;
    for (int i = 0; i < n_walk; i++, n++) {
        float x = (float)(lo + (hi - lo) * ((double)i / n_walk));
        x = from_bits(bits_of(x) ^ (uint32_t)(next_u64() & 0xff));   /* vary the low bits */
        if (bits_of(FUNCS[k].o2(x)) != bits_of(FUNCS[k].o0(x)) && !diff++) first = bits_of(x);
    }
    CHECK(diff == 0, "%s: %llu of %llu inputs differ between -O0 and -O2 (first x bits 0x%08x)",
          FUNCS[k].name, (unsigned long long)diff, (unsigned long long)n, first);
}

static void test_unary_functions_match(void) {
    for (int k = 0; k < (int)(sizeof FUNCS / sizeof FUNCS[0]); k++) compare(k, 400000, 400000);
}

static void test_powf_int_matches(void) {
    uint64_t diff = 0;
    for (int i = 0; i < 400000; i++) {
        float x = (i & 1) ? from_bits((uint32_t)next_u64())
                          : (float)((double)(next_u64() >> 11) * 0x1p-53 * 8.0 - 4.0);
        int n = (i & 2) ? (int)(next_u64() % 257) - 128 : (int)(uint32_t)next_u64();
        diff += bits_of(pm_powf_int(x, n)) != bits_of(o0_pm_powf_int(x, n));
    }
    CHECK(diff == 0, "powf_int: %llu inputs differ", (unsigned long long)diff);
}

int main(void) {
    RUN(test_unary_functions_match);
    RUN(test_powf_int_matches);
    return harness_done();
}
