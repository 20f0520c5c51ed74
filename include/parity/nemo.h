/* nemo.h - NeMo's optimizer options (model.optim.*) read into a layout.
 *
 * Hydra-style overrides, one per `--optim`, e.g.
 *   model.optim.name=distributed_fused_adam  model.optim.overlap_grad_sync=true
 *   model.optim.bucket_cap_mb=25
 * A leading + or ++ (Hydra's "add the key") is accepted; the keys are
 * exactly those of nemo_key_t. lr, weight_decay, betas, eps and sched.*
 * are hyper-parameters, given to parity by --lr, --weight-decay,
 * --adam-beta1/2, --adam-eps and --lr-*; they are refused with that pointer.
 *
 * Mapping onto pconfig_t (ref/config/nemo.c records NeMo's sources):
 *   name=distributed_fused_adam  Apex's DistributedFusedAdam, which shards
 *       optimizer state and gradients: zero_stage 2, use_distributed_optimizer
 *       (and PC_GIVEN_ZERO, so pconfig_validate keeps stage 2).
 *   name=adamw | fused_adam | megatron_fused_adam   AdamW without sharding:
 *       zero_stage 0 (DDP). fused_adam is Apex's FusedAdam, AdamW by default.
 *   name=adam is refused: NeMo builds torch.optim.Adam, whose weight decay
 *       is an L2 term in the gradient, not AdamW's decoupled decay, so parity
 *       would train a different optimizer. Any other name is refused.
 *   Every other key only exists for distributed_fused_adam: NeMo hands the
 *       optim keys to the optimizer's constructor, and FusedAdam/AdamW take
 *       none of them. With another name (or none: NeMo's default is adam)
 *       they are errors, pointing to the Megatron-style flag where one exists.
 *   dtype, grad_sync_dtype  NeMo's spellings (fp32, float32, float, 32,
 *       torch.float32, ..., any case); fp32 is the only one parity trains in,
 *       bf16 and fp16 are refused as not supported yet.
 *   overlap_grad_sync -> overlap_grad_reduce, overlap_param_sync ->
 *       overlap_param_gather; booleans are Hydra's true/false (any case) or 1/0.
 *   bucket_cap_mb -> bucket_cap_mb x 1.048576: Apex counts MiB, parity 10^6
 *       bytes, so a bucket holds the same number of fp32 gradients.
 *   contiguous_param_buffer, contiguous_grad_buffer: parity always keeps one
 *       contiguous buffer; =true is accepted, =false refused. Not given, no
 *       default is applied (NeMo's are true for grads, false for params; the
 *       buffer layout does not change a bit of the run).
 * NeMo's defaults (overlap_grad_sync true, overlap_param_sync false,
 * bucket_cap_mb 100, fp32) fill keys not given, but never replace a value a
 * Megatron-style flag set: such a flag and a key that disagree are an error
 * naming both (a flag given with its default value, e.g. --bucket-cap-mb 40,
 * counts as given: pconfig_t marks it).
 */
#ifndef PARITY_NEMO_H
#define PARITY_NEMO_H

#include <stddef.h>

#include "parity/error.h"
#include "parity/pconfig.h"

typedef enum {
    NEMO_KEY_NAME, NEMO_KEY_DTYPE, NEMO_KEY_GRAD_SYNC_DTYPE, NEMO_KEY_OVERLAP_GRAD_SYNC,
    NEMO_KEY_OVERLAP_PARAM_SYNC, NEMO_KEY_BUCKET_CAP_MB, NEMO_KEY_CONTIGUOUS_PARAM_BUFFER,
    NEMO_KEY_CONTIGUOUS_GRAD_BUFFER, NEMO_NKEYS
} nemo_key_t;

#define NEMO_GIVEN(k) (1u << (k))

typedef struct {
    char name[64];        /* model.optim.name as given, "" if not given */
    unsigned given;       /* NEMO_GIVEN(key) for each key given */
    /* values as given, before defaults (meaningful only where given) */
    pc_dtype_t dtype, grad_sync_dtype;
    int overlap_grad_sync, overlap_param_sync;
    double bucket_cap_mb; /* in NeMo's (Apex's) MiB */
    int contiguous_param_buffer, contiguous_grad_buffer;
} nemo_optim_t;

void nemo_optim_init(nemo_optim_t *o);
/* One "key=value" override. 0, or -1 with err naming the key and what was expected
 * (unknown key, bad value, a key given twice). */
int nemo_optim_set(nemo_optim_t *o, const char *kv, perr_t *err);
/* Applies the options, with NeMo's defaults for those not given, to pc; 0, or -1 with err
 * naming the key: options parity does not support (bf16/fp16 dtypes today, an optimizer
 * name other than the ones mapped above) are errors that say so. Conflicts with layout
 * fields already set by Megatron-style flags (PC_GIVEN_ZERO, or a non-default value) are
 * errors naming both. pc is unchanged on failure; nothing given changes nothing. */
int nemo_optim_apply(const nemo_optim_t *o, pconfig_t *pc, perr_t *err);
/* One line describing the options and which were defaults (tests). */
void nemo_optim_describe(const nemo_optim_t *o, char *buf, size_t cap);

#endif
