/* tp.h - tensor-parallel completions used by the model's units (tp.c).
 * Every function is called by all ranks of g->shard.tp_group, tp > 1. */
#ifndef PARITY_MODEL_TP_H
#define PARITY_MODEL_TP_H

#include <stddef.h>

#include "parity/model.h"

/* out[i] = round(sum over ranks of a[i]), i < n: the open sums completed
 * exactly and rounded once (or, for GPT_BROKEN_TP_FP32_SUMS and the
 * plain-sums build, rounded per rank and summed in fp32). */
void tp_complete_open(gpt_t *g, acc_t *a, size_t n, float *out);
/* In place over the group: fp32 sum (exact when all but one term is -0),
 * max (exact), and exact sums of superaccumulators. */
void tp_sum_f32(gpt_t *g, float *x, size_t n);
void tp_max_f32(gpt_t *g, float *x, size_t n);
void tp_sum_xacc(gpt_t *g, xacc_t *x, size_t n);

#endif
