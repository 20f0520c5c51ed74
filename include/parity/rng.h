/* rng.h - counter-based random numbers keyed by position (DESIGN.md I3).
 *
 * A sequential generator hands out numbers in the order they are drawn,
 * so a sharded run (each device drawing its own slice) would see
 * different numbers from the single-device run. parity never draws:
 * every random number is a pure function of
 *     (seed, stream, counter)
 * where the stream names the tensor and step (rng_stream_id) and the
 * counter is the element's GLOBAL position (e.g. its flat index in the
 * unsharded tensor). A device that owns elements [a, b) computes exactly
 * the numbers the golden run computes for [a, b).
 *
 * The function is Philox4x32-10 (Salmon, Moraes, Dror, Shaw, "Parallel
 * random numbers: as easy as 1, 2, 3", SC'11): a 10-round bijection of a
 * 128-bit counter under a 64-bit key. The paper reports that it passes
 * TestU01's BigCrush; cuRAND offers it and PyTorch's CUDA kernels use it
 * for dropout. We use it as
 *     key = seed,  counter = (counter lo, counter hi, stream lo, stream hi)
 * and take word 0 of the output block: one block per number, so that
 * "number i" never depends on how many numbers a caller asks for at once.
 *
 * Floats use only IEEE basic operations and pmath.h, so every value is
 * identical on every IEEE machine (I5).
 */
#ifndef PARITY_RNG_H
#define PARITY_RNG_H

#include <stddef.h>
#include <stdint.h>

/* The raw Philox4x32-10 block function (the Random123 known-answer
 * vectors hold: tests/unit/test_rng.c). */
void philox4x32_10(const uint32_t ctr[4], const uint32_t key[2], uint32_t out[4]);

/* A bijective 64-bit mixer: x ^= x >> 32; x *= C1; x ^= x >> 29;
 * x *= C2; x ^= x >> 32, with C1, C2 the odd constants
 * frac(sqrt 2) 2^64 | 1 and frac(sqrt 3) 2^64 | 1. Each step is invertible
 * (a xorshift by s >= 1 bits; multiplication by an odd number mod 2^64),
 * so distinct inputs give distinct outputs. */
uint64_t rng_mix64(uint64_t x);

/* 64-bit FNV-1a hash of a NUL-terminated name. */
uint64_t rng_fnv1a64(const char *name);

/* The stream for a named tensor (or purpose) at a training step:
 *     rng_mix64(rng_fnv1a64(name) ^ rng_mix64(step))
 * For a fixed name it is a bijection of step, so two steps of one tensor
 * never share a stream; different names collide only by 64-bit chance.
 * Example: dropout mask of layer 3's attention at step 120:
 *     rng_stream_id("h3.attn.dropout", 120). Initial weights use step 0. */
uint64_t rng_stream_id(const char *name, uint64_t step);

/* Word 0 of philox4x32_10(ctr = {counter lo, counter hi, stream lo,
 * stream hi}, key = {seed lo, seed hi}). */
uint32_t rng_u32(uint64_t seed, uint64_t stream, uint64_t counter);

/* Uniform in [0, 1): (u32 >> 8) * 2^-24, exact (24 random bits, the
 * float's full precision at 0.5..1). Never returns 1.0f. */
float rng_uniform(uint64_t seed, uint64_t stream, uint64_t counter);

/* Standard normal from the first two words (w0, w1) of ONE Philox block,
 * by Box-Muller's cosine branch:
 *     u1 = ((w0 >> 8) + 1) 2^-24         in (0, 1], so log never sees 0
 *     u2 = (w1 >> 8) 2^-24               in [0, 1)
 *     r  = pm_sqrtf(-2 pm_logf(u1) + 0)  (+0 turns -0 into +0 at u1 = 1)
 *     z  = r * pm_cosf(6.2831855f * u2)  (all fp32 operations, in order)
 * Always finite: |z| <= sqrt(-2 ln 2^-24) = 5.768. The 24-bit u1 cuts the
 * tails there (a true normal exceeds it with probability 8e-9) and makes
 * the far tail coarse; fine for initialisation and synthetic data. */
float rng_normal(uint64_t seed, uint64_t stream, uint64_t counter);

/* The Box-Muller map above on given words: lets a backend author check
 * the transform without the generator. */
float rng_normal_from_words(uint32_t w0, uint32_t w1);

/* out[i] = rng_uniform(seed, stream, counter0 + i) for i in [0, n),
 * bit for bit (the counter wraps modulo 2^64). Filling [a, b) of a tensor
 * on one device and [b, c) on another gives the same bits as one fill of
 * [a, c): the I3 property. It runs blocks of counters through the rounds
 * side by side (AVX2 where the CPU has it, chosen at run time; integer
 * arithmetic, so the same bits). */
void rng_fill_uniform(float *out, size_t n, uint64_t seed, uint64_t stream, uint64_t counter0);

/* out[i] = rng_normal(seed, stream, counter0 + i), bit for bit: Philox in
 * blocks, then each Box-Muller step as one vectorised pmath array call
 * (pm_logf_array, pm_sqrtf_array, pm_cosf_array: the scalar functions'
 * bits). ~8x the speed of the scalar loop (tests/bench/bench_init.c). */
void rng_fill_normal(float *out, size_t n, uint64_t seed, uint64_t stream, uint64_t counter0);

#endif
