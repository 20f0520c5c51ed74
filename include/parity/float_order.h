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
 *
 * What each site does under a non-exact kind (ref/kernels/float_order.c
 * builds the trees; every addition is one fp32 addition):
 *   - contract, contract_add_bias (contract.h): each element's K/tk tile
 *     partials (the float tile GEMM's, unchanged) are summed in the
 *     order: SEQUENTIAL k = 0, 1, ...; REVERSED from the last tile;
 *     PAIRWISE halves, recursively; GROUPED `groups` contiguous runs of
 *     tiles, each left to right, then the runs' sums left to right (a
 *     split-K or per-rank partial, then the reduction); RANDOM such runs
 *     with their count (1 to 16) and cuts drawn from the seed and the
 *     call (its shape and the bits of A's and B's first elements): one
 *     chunking for every element of the call, as a split-K kernel has.
 *     The bias is then added in fp32, as always.
 *   - contract_acc (weight gradients): the call's own product is formed
 *     as contract forms it, then added to the open sums in fp32: a
 *     backend's per-microbatch GEMM and its `grad +=`.
 *   - xsum_f32, xsum_f32_strided, sum_f32 (LayerNorm's statistics and
 *     its backward's row sums, softmax denominators, attention's dZ,
 *     cross-entropy's sum of exps): the n terms in the order; RANDOM's
 *     chunking is drawn from the seed, n and the first and last terms'
 *     bits, so the same sum gets the same chunking in a rerun.
 *   - acc_add, acc_add_tile, acc_merge, acc_add_exact_f64 (incremental
 *     sums: embedding gradients token by token, partials merged): an fp32
 *     running value per element, added to in the order the calls come
 *     (every kind is sequential here: no backend reorders its `+=`).
 *   - acc_add_rows (bias and LayerNorm gradients: a buffer of rows
 *     summed over tokens): each column's rows in the order (RANDOM: one
 *     chunking for the call, drawn from its extents and first and last
 *     terms), then added to the running value.
 *   - sacc_add, sacc_add_squares (the loss sum, the squared grad norm):
 *     the buffered terms (or their fp32 squares) in the order, then added
 *     to the running fp32 value.
 * Not perturbed: the xacc_t sums used directly (tensor- and vocabulary-
 * parallel cross-entropy's, MoE's auxiliary losses) and collectives'
 * merges, which single-device golden runs do not use; maxima and
 * elementwise work have no order.
 *
 * `bf16` (with any kind, EXACT too): every contraction reads A and B
 * rounded to bfloat16 (nearest-even, pm_round_bf16) and rounds its
 * result to bfloat16 (contract_add_bias: the bias rounded too, and the
 * sum of the fp32 product and the bias rounded once, as a fused addmm);
 * contract_acc's product is rounded before it is accumulated in fp32.
 * Everything else stays fp32, as autocast leaves LayerNorm, softmax and
 * the loss.
 *
 * Cost: EXACT without bf16 is one thread-local test per call at each
 * site, never per element; the other orders are plain fp32 loops.
 */
#ifndef PARITY_FLOAT_ORDER_H
#define PARITY_FLOAT_ORDER_H

#include <stddef.h>
#include <stdint.h>

#include "parity/error.h"

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

/* Sets the calling thread's order (NULL: exact) and returns the one before.
 * An order that is not one (a kind out of range, grouped with groups < 2)
 * is a programming error: fatal, with the field named (float_order_parse
 * checks what a user typed). */
float_order_t float_order_set(const float_order_t *o);
/* The calling thread's order. */
const float_order_t *float_order_get(void);
/* Whether the calling thread runs parity's golden arithmetic: EXACT and
 * no bf16 (the fast test the kernels make). */
int float_order_is_exact(void);
/* "sequential", "grouped(4)", "random(7)+bf16" into buf (NULL: "exact"). */
const char *float_order_name(const float_order_t *o, char *buf, size_t cap);
/* The inverse of float_order_name: "exact", "sequential", "reversed",
 * "pairwise", "grouped(N)" (N >= 2), "random(SEED)", each optionally
 * "+bf16". 0, or -1 with a message naming what was expected. */
int float_order_parse(const char *text, float_order_t *o, perr_t *err);

#endif
