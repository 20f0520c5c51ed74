/* tp.h - tensor-parallel completions used by the model's units (tp.c).
 * Every function is called by all ranks of g->shard.tp_group, tp > 1. */
#ifndef PARITY_MODEL_TP_H
#define PARITY_MODEL_TP_H

#include <stddef.h>

#include "parity/coll.h"
#include "model/gpt.h"

/* out[i] = round(sum over ranks of a[i]), i < n: the open sums completed
 * exactly and rounded once (or, for GPT_BROKEN_TP_FP32_SUMS and the
 * plain-sums build, rounded per rank and summed in fp32). */
void tp_complete_open(gpt_t *g, acc_t *a, size_t n, float *out);
/* In place over the group: fp32 sum (exact when all but one term is -0)
 * and exact sums of superaccumulators. */
/* 1-D tensor and sequence parallelism's buffers (gpt_scratch_t.tp):
 * open [n, widest] the open sums a row-parallel output or input gradient
 * completes over tp (widest: C, or max(3C, F) with every linear
 * row-parallel), open_local [ns, C] a reduce-scatter's share, parts
 * [n, C] a gather's pieces (sequence parallel). */
typedef struct tp_scratch {
    void *open, *open_local;
    float *parts;
} tp_scratch_t;
/* Carves them into S->tp for up to n token rows (NULL at tp 1; measures
 * when cv->base is NULL). */
void tp_layout_scratch(gpt_scratch_t *S, const model_config_t *c, const gpt_local_t *lc, size_t n,
                       int tp, carver_t *cv);
void tp_sum_f32(gpt_t *g, float *x, size_t n);
void tp_sum_xacc(gpt_t *g, xacc_t *x, size_t n);

/* Every linear row-parallel: full [n][tp*w] from every rank's columns
 * [n][w] (a copy: an all-gather and a permutation through parts [n*tp*w]). */
void tp_gather_cols(gpt_t *g, float *full, const float *local, int n, int w, float *parts);

/* Sequence parallelism (g->shard.sp): full = [n_seq][T][w], local = the
 * positions this rank holds, [n_seq][T/tp][w].
 *   sp_gather: full <- every rank's local (an fp32 all-gather: copies)
 *   sp_reduce_scatter_f32: local <- the fp32 sum over ranks of full's rows
 *     held (exact where all addends but one are -0: the embedding lookup)
 *   sp_contract_parts: open += A.B with A's token rows visited in parts
 *     order (each tile call the canonical one), for sp_complete_open
 *   sp_complete_open: out[local] <- the exact sum over ranks of this
 *     rank's part of open, rounded once (the reduce-scatter of open sums)
 *   tp_all_reduce_acc: a <- the exact sum over ranks (LayerNorm gradients
 *     over the positions each rank holds) */
void sp_gather(gpt_t *g, float *full, const float *local, int n_seq, int w);
void sp_reduce_scatter_f32(gpt_t *g, float *local, const float *full, int n_seq, int w);
void sp_contract_parts(gpt_t *g, contract_form_t form, int n_seq, int N, int K, int tn, int tk,
                       const float *A, int lda, const float *B, int ldb, acc_t *open);
void sp_complete_open(gpt_t *g, acc_t *open, size_t count, float *out);
void tp_all_reduce_acc(gpt_t *g, acc_t *a);

#endif
