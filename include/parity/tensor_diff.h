/* tensor_diff.h - comparing two tensors element by element.
 *
 * Shared by `parity diff` (two files) and the equivalence checker (two
 * runs in memory): bit-exactness by memcmp, and when that fails the
 * statistics a person needs to judge the difference.
 */
#ifndef PARITY_TENSOR_DIFF_H
#define PARITY_TENSOR_DIFF_H

#include <stddef.h>
#include <stdint.h>

#include "parity/safetensors.h"

typedef struct {
    uint64_t numel, ndiff, nnan;  /* elements, differing ones, of which NaN */
    double max_abs, max_rel;      /* over non-NaN differences; rel = |a-b|/max(|a|,|b|) */
    uint64_t max_ulp;             /* floats: max ULP distance */
    uint64_t first;               /* first differing flat index */
    uint64_t first_a, first_b;    /* its bit patterns */
    uint64_t first_ulp;
    int first_nan;                /* the first difference involves a NaN */
} tensor_diff_t;

/* Compares numel elements of dtype dt; returns 1 when bit-exact. */
int tensor_diff(st_dtype_t dt, uint64_t numel, const void *a, const void *b, tensor_diff_t *out);
/* ULP distance of two float bit patterns of es bytes (sign-magnitude
 * patterns as ordered integers: +0 and -0 are 0 apart). */
uint64_t tensor_ulp_distance(uint64_t a, uint64_t b, size_t es);
/* "1.5 (0x3fc00000)" for floats, the integer otherwise. */
void tensor_format_value(st_dtype_t dt, uint64_t bits, char *buf, size_t cap);
/* "[i,j,k]" for a flat index into shape[ndim]. */
void tensor_format_coords(int ndim, const int64_t *shape, uint64_t flat, char *buf, size_t cap);

#endif
