/* float_order.h - parity's own legitimate float executions (issue 45).
 *
 * The golden run sums exactly and rounds once (I2), so its bits are the
 * mathematics'. A real backend sums in float32 in an order of its own:
 * sequentially, pairwise, per-rank partial sums then an all-reduce, or in
 * whatever chunks its GEMM kernel picks. To know how far a correct
 * backend may legitimately be from the golden run, parity runs the same
 * step again with its exact sums replaced by float32 sums in one such
 * order, K times over different orders, and measures each tensor's
 * spread (the envelope, ref/judge).
 *
 * The order is the calling thread's, set around a run; FLOAT_ORDER_EXACT
 * (the default, and NULL) is parity's exact arithmetic, bit for bit what
 * it always was. Where it acts: every sum the contractions (contract.h:
 * the tk-tile partials of an element), the exact sums of xsum.h
 * (LayerNorm's statistics, softmax's denominators, the loss) and the
 * gradient accumulators (accum.h) round. With `bf16` set, contraction
 * inputs and outputs are also rounded to bfloat16 as torch.autocast does
 * (inputs cast, fp32 accumulation, output cast).
 */
#ifndef PARITY_FLOAT_ORDER_H
#define PARITY_FLOAT_ORDER_H

#include <stddef.h>
#include <stdint.h>

typedef enum {
    FLOAT_ORDER_EXACT = 0,   /* parity's exact sums (the golden run) */
    FLOAT_ORDER_SEQUENTIAL,  /* left to right in float32 */
    FLOAT_ORDER_REVERSED,    /* right to left */
    FLOAT_ORDER_PAIRWISE,    /* a balanced binary tree (numpy's, cuBLAS-like split-K) */
    FLOAT_ORDER_GROUPED,     /* `groups` contiguous partial sums, then those summed:
                                per-rank partials and an all-reduce (tp/dp/cp degree) */
    FLOAT_ORDER_RANDOM,      /* random chunkings, drawn from `seed` and the sum's position */
    FLOAT_ORDER_COUNT
} float_order_kind_t;

typedef struct {
    float_order_kind_t kind;
    int groups;              /* FLOAT_ORDER_GROUPED: >= 2 */
    uint64_t seed;           /* FLOAT_ORDER_RANDOM */
    int bf16;                /* autocast's bf16 roundings around contractions */
} float_order_t;

/* Sets the calling thread's order (NULL: exact) and returns the one before. */
float_order_t float_order_set(const float_order_t *o);
/* The calling thread's order. */
const float_order_t *float_order_get(void);
/* Whether the calling thread sums exactly (the fast test the kernels make). */
int float_order_is_exact(void);
/* "sequential", "grouped(4)", "random(7)+bf16" into buf. */
const char *float_order_name(const float_order_t *o, char *buf, size_t cap);

#endif
