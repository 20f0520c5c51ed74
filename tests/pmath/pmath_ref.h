/* pmath_ref.h - long-double references for pmath's GeLU and rsqrt, shared
 * by tests/unit/test_pmath.c and tests/pmath/exhaustive_pmath.c. */
#ifndef PARITY_TEST_PMATH_REF_H
#define PARITY_TEST_PMATH_REF_H

#include <math.h>

#define LD_PI 3.14159265358979323846264338327950288L

static long double r_rsqrt(long double x) { return 1.0L / sqrtl(x); }
static long double gelu_u(long double x) { return sqrtl(2.0L / LD_PI) * (x + 0.044715L * x * x * x); }
/* The textbook formula where it is well conditioned; the sigmoid form
 * where 1 + tanh u would cancel. */
static long double half_one_plus_tanh(long double u) {
    return u > -1.0L ? 0.5L * (1.0L + tanhl(u)) : 1.0L / (1.0L + expl(-2.0L * u));
}
static long double r_gelu(long double x) { return x * half_one_plus_tanh(gelu_u(x)); }
static long double r_gelu_grad(long double x) {
    long double u = gelu_u(x), ch = coshl(u);
    long double sech2 = isinf(ch) ? 0.0L : 1.0L / (ch * ch);
    return half_one_plus_tanh(u) +
           0.5L * x * sech2 * sqrtl(2.0L / LD_PI) * (1.0L + 3.0L * 0.044715L * x * x);
}

#endif
