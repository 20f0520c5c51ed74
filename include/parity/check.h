/* check.h - the equivalence checker: a layout's tensors against the
 * golden run's, bit for bit.
 *
 * Both runs collect the same named global tensors (dump.h): a layout
 * reassembles its shards first, using each tensor's placement. The
 * checker walks the golden tensors in execution order (inputs, then the
 * forward pass layer by layer, logits, loss, the gradients in backward
 * order, the norm, and the updated parameters), compares each with memcmp,
 * and reports the first divergence: tensor, step, element, both values,
 * the ULP distance, and which device and microbatch produced the element
 * (the layout answers that through check_owner_t, so the checker itself
 * knows no layout).
 */
#ifndef PARITY_CHECK_H
#define PARITY_CHECK_H

#include <stdio.h>

#include "parity/safetensors.h"

typedef struct {
    void *ctx;
    /* Describes which device(s) and microbatch produced element `flat` of
     * tensor t (name as in the dump) in the layout run, and in the golden
     * run; may be NULL. */
    void (*describe)(void *ctx, const st_tensor_t *t, uint64_t flat, char *layout_buf,
                     char *golden_buf, size_t cap);
} check_owner_t;

typedef struct {
    int compared;   /* golden tensors looked at */
    int exact;      /* of which bit-exact */
    int missing;    /* absent from the layout run, or of another dtype/shape */
    char first_bad[160]; /* name of the first divergent tensor, "" if none */
} check_result_t;

/* Returns 0 when every golden tensor is present and bit-exact; else 1,
 * with the first-divergence report printed to report (may be NULL). */
int check_compare(const st_writer_t *golden, const st_writer_t *got, const check_owner_t *owner,
                  FILE *report, check_result_t *res);

/* The execution-order sort key of a dump tensor name (exposed for tests). */
void check_exec_key(const char *name, long key[4]);

#endif
