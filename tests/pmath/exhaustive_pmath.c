/* exhaustive_pmath.c - every one of the 2^32 float inputs of a pmath
 * function against glibc's long double version, rounded to float.
 *
 * Not part of `make check`: about 10 CPU minutes per function (glibc's
 * long double functions dominate). Result so far: pm_expf is correctly
 * rounded on all 2^32 inputs; the others were checked by the dense
 * sweeps of tests/unit/test_pmath.c (PMATH_DENSE=1) only.
 *
 *   make BUILD=build build/pmath/exhaustive_pmath
 *   build/pmath/exhaustive_pmath expf logf sinf ...     (default: all)
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "parity/pmath.h"

#include "pmath_ref.h"

static const struct {
    const char *name;
    float (*f)(float);
    long double (*ref)(long double);
} FUNCS[] = {
    {"expf", pm_expf, expl},   {"logf", pm_logf, logl},   {"tanhf", pm_tanhf, tanhl},
    {"erff", pm_erff, erfl},   {"sinf", pm_sinf, sinl},   {"cosf", pm_cosf, cosl},
    {"sqrtf", pm_sqrtf, sqrtl}, {"rsqrtf", pm_rsqrtf, r_rsqrt},
    {"gelu_tanh", pm_gelu_tanh, r_gelu}, {"gelu_tanh_grad", pm_gelu_tanh_grad, r_gelu_grad},
};

static uint32_t bits_of(float x) { uint32_t b; memcpy(&b, &x, 4); return b; }
static int64_t ord(float x) {
    uint32_t b = bits_of(x);
    return (b & 0x80000000u) ? -(int64_t)(b & 0x7fffffffu) : (int64_t)b;
}

static float ld_to_f32(long double v) {
    if (v >= 0x1.ffffffp127L) return INFINITY;
    if (v <= -0x1.ffffffp127L) return -INFINITY;
    return (float)v;
}

static void run(int k) {
    uint64_t n = 0, wrong = 0, nan_mismatch = 0;
    int64_t max_ulp = 0;
    float worst = 0;
    for (uint64_t b = 0; b <= 0xffffffffu; b++) {
        float x;
        uint32_t b32 = (uint32_t)b;
        memcpy(&x, &b32, 4);
        float got = FUNCS[k].f(x);
        float want = ld_to_f32(FUNCS[k].ref(x));
        n++;
        if (isnan(want) || isnan(got)) {
            /* NaN must come out exactly where the reference has one (the
             * reference's own sign/payload is not compared). */
            if (isnan(want) != isnan(got) || bits_of(got) != PM_NAN_BITS) nan_mismatch++;
            continue;
        }
        int64_t d = ord(got) - ord(want);
        if (d < 0) d = -d;
        if (d == 0 && bits_of(got) != bits_of(want)) d = 1;   /* +0 vs -0 */
        if (d) wrong++;
        if (d > max_ulp) { max_ulp = d; worst = x; }
    }
    printf("%-16s all 2^32 inputs: max %lld ulp, %llu not correctly rounded (signed zeros included), "
           "%llu NaN mismatches",
           FUNCS[k].name, (long long)max_ulp, (unsigned long long)wrong, (unsigned long long)nan_mismatch);
    if (max_ulp) printf(", worst x = %a", worst);
    printf("\n");
    fflush(stdout);
}

int main(int argc, char **argv) {
    int nf = (int)(sizeof FUNCS / sizeof FUNCS[0]);
    for (int k = 0; k < nf; k++) {
        int want = argc == 1;
        for (int a = 1; a < argc; a++) want |= strcmp(argv[a], FUNCS[k].name) == 0;
        if (want) run(k);
    }
    return 0;
}
