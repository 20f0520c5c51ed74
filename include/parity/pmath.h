/* pmath.h - the project's own elementwise math: same bits on every IEEE machine.
 *
 * libm's expf, logf, tanhf ... differ between C libraries, versions and
 * CPUs (some use FMA, some tables, some vector code). parity's golden bits
 * must not depend on that (DESIGN.md I5), so every transcendental the model
 * uses is computed here in a fixed order from the basic IEEE-754 operations
 * only: +, -, *, / on fp32 and fp64, comparisons and bit manipulation. No
 * libm call, no FMA (the build uses -ffp-contract=off), no lookup of the
 * rounding mode (round-to-nearest is assumed). Any IEEE-754 machine that
 * evaluates C float and double expressions in their own precision
 * (FLT_EVAL_METHOD == 0, checked at compile time) gives the same bits, at
 * any optimisation level (tests/pmath/test_pmath_opt.c compares -O0 with
 * -O2 bit for bit).
 *
 * How: each function widens its fp32 argument to fp64, reduces the range
 * exactly (or with an error far below fp32 resolution), evaluates a
 * polynomial in fp64, and rounds to fp32 once at the end. The polynomials
 * are Chebyshev interpolants derived by tests/pmath/derive_coeffs.py (see
 * the comments in ref/kernels/pmath.c). The fp64 result is within a few
 * fp64 ulps of the true value, so the final rounding gives the correctly
 * rounded fp32 result unless the true value lies within ~2^-50 relative of
 * a rounding midpoint (then it may be the neighbour). A side effect: even
 * a machine that fused the fp64 multiply-adds would almost always produce
 * the same fp32 bits.
 *
 * Accuracy, as ULP distance from the correctly rounded fp32 result:
 *   pm_sqrtf            0 ULP, always (an exact midpoint test fixes the last bit)
 *   everything else     <= 1 ULP (the bound the design gives: fp64 error
 *                       < 2^-50 relative, then one rounding), and in fact
 *                       correctly rounded on every input tested so far.
 * tests/unit/test_pmath.c checks this against glibc's x87 long double functions
 * on ~2.5 million inputs per function (about 400 million with
 * PMATH_DENSE=1), covering exp on [-104, 89] and densely on the softmax
 * range [-100, 0]; log on (0, 1e6] with subnormals and every float in
 * [0.99, 1.01]; tanh, erf, gelu and its gradient on [-20, 20] plus the
 * full float range; rsqrt on [1e-12, 1e12]; sin and cos on [-2pi, 2pi]
 * plus the full range; powf_int for |n| <= 64, and |n| <= 2^20 near x = 1.
 * Caveats: pm_gelu_tanh_grad's two terms cancel near its zero
 * (x ~ -0.75246, where |grad| ~ 5e-9), losing ~26 of fp64's 53 bits; the
 * remaining 2^-27 relative error can misround there, so its stated bound
 * is 2 ULP (the test checks every float of [-0.7528, -0.7508]: none is
 * off). pm_powf_int's error grows like |n| 2^-53, so its 1 ULP bound holds
 * for |n| <= 2^20.
 *
 * Every range is the full float range unless a function says otherwise.
 *
 * Special values: any NaN argument (and any invalid operation) returns the
 * one canonical quiet NaN 0x7fc00000, so that dumps compare with memcmp
 * (IEEE leaves NaN payloads and signs to the implementation).
 */
#ifndef PARITY_PMATH_H
#define PARITY_PMATH_H

#include <stddef.h>

/* The canonical NaN every pm_* function returns for NaN or invalid input. */
#define PM_NAN_BITS 0x7fc00000u

/* e^x. x > 88.7228... -> +inf; x < -103.972... -> +0; results below
 * FLT_MIN are correctly rounded subnormals; exp(-inf) = +0. */
float pm_expf(float x);
/* y[i] = pm_expf(x[i] - m) for i < n (softmax's exps), vectorised. */
void pm_expf_shifted(float *y, const float *x, float m, size_t n);

/* Natural log. x < 0 (and -inf) -> NaN; +-0 -> -inf; +inf -> +inf;
 * subnormal x handled exactly; log(1) = +0. */
float pm_logf(float x);
/* y[i] = pm_logf(x[i]) for i < n, bit for bit, vectorised. */
void pm_logf_array(float *y, const float *x, size_t n);

/* tanh. Odd, |tanh x| <= 1; returns +-1 exactly for |x| >= 9.5 (where the
 * correctly rounded result is +-1 anyway); tanh(-0) = -0. */
float pm_tanhf(float x);

/* erf. Odd; +-1 exactly for |x| >= 4 (correct in fp32); erf(-0) = -0. */
float pm_erff(float x);

/* IEEE square root, correctly rounded: sqrt(-0) = -0, x < 0 -> NaN.
 * Computed without libm (see pmath.c): an fp64 Newton iteration gives a
 * candidate, and an exact midpoint test in fp64 fixes its last bit. */
float pm_sqrtf(float x);
/* y[i] = pm_sqrtf(x[i]) for i < n, bit for bit: the hardware's IEEE
 * square root (correctly rounded by the standard, so the same bits),
 * vectorised. */
void pm_sqrtf_array(float *y, const float *x, size_t n);

/* 1/sqrt(x), computed as (float)(1.0 / s) where s is sqrt((double)x) to
 * within 2^-52 relative (the same fp64 Newton step pm_sqrtf uses): one
 * fp32 rounding at the end, so <= 1 ULP and nearly always correctly
 * rounded. rsqrt(+0) = +inf, rsqrt(-0) = -inf, rsqrt(+inf) = +0,
 * x < 0 -> NaN. */
float pm_rsqrtf(float x);

/* sin and cos over the WHOLE float range: the argument is reduced modulo
 * pi/2 exactly, with 2/pi held to 200+ bits (a Payne-Hanek reduction done
 * in 64-bit integers), so large arguments are as accurate as small ones.
 * The model needs [0, 2pi] (Box-Muller, cosine LR schedule); the tests
 * sweep [-2pi, 2pi] densely and sample the rest. +-inf -> NaN. */
float pm_sinf(float x);
float pm_cosf(float x);
/* y[i] = pm_cosf(x[i]) for i < n, bit for bit, vectorised. */
void pm_cosf_array(float *y, const float *x, size_t n);

/* GELU, tanh approximation, as GPT-2 and torch's approximate='tanh':
 *   0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))
 * evaluated in fp64 as x s, s = 0.5 (1 + tanh u) = sigmoid(2u) computed
 * from t = exp(-2|u|) as 1/(1+t) (u >= 0) or t/(1+t) (u < 0),
 * u = sqrt(2/pi)(x + 0.044715 x^3) (the same function; this form does not
 * cancel for negative x), and rounded once. Limits at infinity: gelu(+inf) = +inf, gelu(-inf) = -0
 * (torch returns NaN for -inf; -0 is the limit and matches gelu(-20)). */
float pm_gelu_tanh(float x);

/* d/dx of pm_gelu_tanh (accuracy: see the caveat above):
 *   0.5 (1 + tanh u) + 0.5 x (1 - tanh^2 u) sqrt(2/pi) (1 + 3 * 0.044715 x^2)
 * in fp64 from the same s and 1 - s (so 1 - tanh^2 u = 4 s (1-s)), written
 * without cancellation. grad(+inf) = 1, grad(-inf) = -0 (the limits). */
float pm_gelu_tanh_grad(float x);
/* Both at once: returns pm_gelu_tanh(x) and stores pm_gelu_tanh_grad(x),
 * the same bits as the two calls (the same fp64 operations, one exp):
 * what a training step's forward pass uses so its backward pass needs no
 * transcendental at all. */
float pm_gelu_tanh_and_grad(float x, float *grad);
/* y[i] = pm_gelu_tanh(x[i]) and grad[i] = pm_gelu_tanh_grad(x[i]), vectorised. */
void pm_gelu_tanh_array(float *y, float *grad, const float *x, size_t n);

/* x^n for integer n by binary powering in fp64, rounded once. x^0 = 1 for
 * every x (NaN included, as C's pow); n < 0 gives 1 / x^|n| (so 0^-n is
 * +-inf). <= 1 ULP for |n| <= 2^20 (see above); fp64 overflow and
 * underflow give the fp32 answers +-inf and +-0. */
float pm_powf_int(float x, int n);

/* Mixed precision's storage dtypes (ref/kernels/lowp.c): x rounded to the
 * nearest bf16 (8 significant bits, fp32's exponent range) or IEEE fp16
 * (11 bits, normal range 2^-14 .. 65504, subnormals down to 2^-24), ties
 * to even, held in an fp32 (every bf16 and fp16 value is one). Integer
 * arithmetic on the bits, so every machine gives the same ones (I5): a
 * finite value past the range gives +-inf (fp16: |x| >= 65520), below
 * half the smallest subnormal +-0 (the sign kept); inf stays; NaN gives
 * the canonical NaN (PM_NAN_BITS). */
float pm_round_bf16(float x);
float pm_round_fp16(float x);
/* x[i] rounded in place, n elements. */
void  pm_round_bf16_array(float *x, size_t n);
void  pm_round_fp16_array(float *x, size_t n);

#endif
