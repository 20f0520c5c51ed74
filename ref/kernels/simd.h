/* simd.h - run-time choice of vector width for hot loops (internal to ref/).
 *
 * PARITY_SIMD_CLONES before a function definition makes GCC/Clang compile
 * it several times, for plain x86-64 (SSE2), AVX2 and AVX-512, and pick
 * one when the program loads, by what the CPU has. The build stays
 * portable (no -march), and a loop of IEEE operations gives the same bits
 * in every clone: vectorising never reorders a floating-point reduction
 * without -ffast-math, and -ffp-contract=off keeps fused multiply-adds
 * out even where the target has them (I5). The clone a CPU picks is
 * checked against scalar code: tests/unit/test_pmath.c (array forms against
 * the scalar functions) and the golden digests reproduced at -O0, where
 * nothing is vectorised (tests/layouts/test_model_golden.sh).
 *
 * Elsewhere (another architecture or compiler, ThreadSanitizer builds) it
 * expands to nothing. */
#ifndef PARITY_KERNELS_SIMD_H
#define PARITY_KERNELS_SIMD_H

/* ThreadSanitizer: the clone resolvers run while the program is being
 * relocated, before TSan's runtime is up, and its instrumentation of them
 * crashes; TSan builds use the plain loops. */
#if defined(__SANITIZE_THREAD__)
#define PARITY_NO_SIMD_CLONES 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define PARITY_NO_SIMD_CLONES 1
#endif
#endif

#if defined(__x86_64__) && defined(__has_attribute) && !defined(PARITY_NO_SIMD_CLONES)
#if __has_attribute(target_clones)
#define PARITY_SIMD_CLONES __attribute__((target_clones("default", "avx2", "avx512f")))
#endif
#endif
#ifndef PARITY_SIMD_CLONES
#define PARITY_SIMD_CLONES
#endif

/* PARITY_LANE before a static helper that a cloned loop calls: it must
 * be inlined (into each clone, and for its loop to vectorise) even where
 * it is bigger than the compiler's own inlining limits. */
#if defined(__GNUC__)
#define PARITY_LANE static inline __attribute__((always_inline))
#else
#define PARITY_LANE static inline
#endif

#endif
