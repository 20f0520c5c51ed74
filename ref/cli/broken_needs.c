/* broken_needs.c - the negative controls' preconditions (broken_needs.h):
 * a control on a layout where its bug cannot fire would report
 * "bit-exact yes" and prove nothing, so broken.c refuses it by these. */
#include "model/gpt.h"
#include "broken_needs.h"
#include "parity/pp.h"

#include <stdio.h>
#include <string.h>

const char *needs_dp(const broken_where_t *w) {
    return w->pc->dp > 1 ? NULL
                         : "data-parallel-size > 1 (one replica has no gradient sums across ranks "
                           "to break)";
}

const char *needs_dp_bf16(const broken_where_t *w) {
    if (w->cfg->precision != MODEL_BF16) return "--bf16";
    return needs_dp(w);
}

const char *needs_fp16_scale(const broken_where_t *w) {
    float s, min;
    int window, hysteresis;
    model_loss_scaling(w->cfg, &s, &min, &window, &hysteresis);
    if (w->cfg->loss_scale > 0) s = w->cfg->loss_scale;
    return w->cfg->precision == MODEL_FP16 && s != 1.0f ? NULL
                                                         : "--fp16 with a loss scale other than 1";
}

/* A scaler lost on load shows only where a dynamic one has moved: an fp16
 * run resumed from a checkpoint. */
const char *needs_fp16_resumed(const broken_where_t *w) {
    if (w->cfg->precision != MODEL_FP16 || w->cfg->loss_scale > 0)
        return "--fp16 with a dynamic loss scale, and --load of its checkpoint";
    return w->resumed ? NULL : "--load of an --fp16 checkpoint (the scaler's state to lose)";
}

const char *needs_tp(const broken_where_t *w) {
    return w->pc->tp > 1 ? NULL : "tensor-model-parallel-size > 1";
}

const char *needs_tp3d(const broken_where_t *w) {
    return w->pc->tp > 1 && w->pc->tp_mode == PC_TP_3D ? NULL : "--tensor-parallel-mode 3d";
}

/* the column group must be a ring of cp ranks for the wrong group to run */
const char *needs_tp2d_cp_ring(const broken_where_t *w) {
    int sub[3];
    pconfig_tp_sub(w->pc, sub);
    return w->pc->tp_mode == PC_TP_2D && w->pc->cp > 1 && !w->pc->cp_comm && sub[1] == w->pc->cp
               ? NULL
               : "--tensor-parallel-mode 2d with the ring (--cp-comm-type p2p) over as many cp ranks "
                 "as the grid has rows (q)";
}

const char *needs_tp2d(const broken_where_t *w) {
    return w->pc->tp > 1 && (w->pc->tp_mode == PC_TP_2D || w->pc->tp_mode == PC_TP_25D)
               ? NULL
               : "--tensor-parallel-mode 2d or 2.5d";
}

const char *needs_tp2d_lowp(const broken_where_t *w) {
    if (w->cfg->precision == MODEL_FP32) return "--bf16 or --fp16";
    return needs_tp2d(w);
}

/* Megatron pads to a multiple of 128 x tp: a vocabulary that is one
 * already pads nothing. */
const char *needs_tp_padding(const broken_where_t *w) {
    if (w->pc->tp == 1) return needs_tp(w);
    const long unit = 128L * w->pc->tp;
    if (w->cfg->vocab % unit) return NULL;
    snprintf(w->buf, w->cap, "a vocabulary that is not a multiple of 128 x tp (that of %d is "
                             "already a multiple of 128 x tp = %ld, so nothing is padded)",
             w->cfg->vocab, unit);
    return w->buf;
}

const char *needs_pp(const broken_where_t *w) {
    return w->pc->pp > 1 ? NULL : "pipeline-model-parallel-size > 1";
}

/* With one sequence per microbatch and one data-parallel rank, a stage's
 * microbatch count is the sequence's index in the batch: the mis-keyed
 * masks are the right ones. */
const char *needs_pp_mask_key(const broken_where_t *w) {
    if (w->pc->pp == 1) return needs_pp(w);
    if (w->pc->micro_batch > 1 || w->pc->dp > 1) return NULL;
    return "more than one sequence per microbatch or dp > 1 (with one sequence per microbatch "
           "and one data-parallel rank, a stage's microbatch count equals the sequence's index, "
           "so the masks come out right; use fewer microbatches or dp > 1)";
}

const char *needs_pp_tied(const broken_where_t *w) {
    if (w->pc->pp == 1) return needs_pp(w);
    return w->cfg->tied ? NULL
                        : "a head tied to the embedding (without "
                          "--untie-embeddings-and-output-weights)";
}

const char *needs_pp_split(const broken_where_t *w) {
    if (w->pc->pp == 1) return needs_pp(w);
    return pconfig_splits_backward(w->pc->pp_schedule)
               ? NULL
               : "a schedule that splits the backward (--pipeline-schedule zb-h1, zb-h2, zb-v or dualpipev)";
}

const char *needs_pp_split_overlap(const broken_where_t *w) {
    const char *split = needs_pp_split(w);
    if (split) return split;
    return w->pc->overlap_grad_reduce ? NULL : "--overlap-grad-reduce (buckets to reduce early)";
}

const char *needs_z3_prefetch(const broken_where_t *w) {
    if (w->pc->zero_stage != 3 || !w->pc->overlap_param_gather)
        return "--zero-stage 3 with --overlap-param-gather (a prefetch to misplace)";
    if (pconfig_grad_ranks(w->pc) < 2) return "data-parallel-size > 1 (parameters to gather)";
    return w->cfg->layers > 1 ? NULL : "at least two layers (a next unit of the same size)";
}

const char *needs_cp_ring(const broken_where_t *w) {
    return w->pc->cp > 1 && !w->pc->cp_comm
               ? NULL
               : "the ring (context-parallel-size > 1, --cp-comm-type p2p)";
}

/* Across the encoder-decoder bridge: encoder stages of their own and a
 * second data-parallel replica to send to by mistake. */
const char *needs_encdec_dp(const broken_where_t *w) {
    if (w->cfg->arch == MODEL_GPT) return "an encoder-decoder model (--model t5-tiny)";
    if (!w->pc->encoder_pp) return "encoder stages of its own (--encoder-pipeline-model-parallel-size > 0)";
    return w->pc->dp > 1 ? NULL : "data-parallel-size > 1";
}
/* The copies an encoder rank gets back: an encoder mesh of etp < tp
 * (k = tp/etp decoder ranks a rank), each holding the whole gradient (no
 * sequence parallelism); the mean of k equal copies is the copy for k = 2
 * ((g + g) / 2 is exact), so it needs k >= 3. */
const char *needs_encdec_copies(const broken_where_t *w, int min_k) {
    if (w->cfg->arch == MODEL_GPT) return "an encoder-decoder model (--model t5-tiny)";
    if (!pconfig_hetero(w->pc) || w->pc->tp / w->pc->encoder_tp < min_k) {
        snprintf(w->buf, w->cap, "an encoder mesh whose ranks each feed at least %d decoder ranks "
                 "(--encoder-tensor-model-parallel-size etp with tp/etp >= %d, and "
                 "--encoder-pipeline-model-parallel-size > 0)", min_k, min_k);
        return w->buf;
    }
    return w->pc->sequence_parallel ? "no --sequence-parallel (each decoder rank then sends its "
                                      "own positions, not a copy)"
                                    : NULL;
}
const char *needs_encdec_sum(const broken_where_t *w) { return needs_encdec_copies(w, 2); }
/* A head tied across an encoder mesh: two vocabulary cuts to mix up. */
const char *needs_encdec_tied(const broken_where_t *w) {
    if (w->cfg->arch == MODEL_GPT) return "an encoder-decoder model (--model t5-tiny)";
    if (!pconfig_hetero(w->pc))
        return "an encoder mesh of etp < tp (--encoder-tensor-model-parallel-size, "
               "--encoder-pipeline-model-parallel-size > 0)";
    return w->cfg->tied ? NULL : "a head tied to the embedding (--model with \"tied\": true)";
}
/* With k = 2 or 4 equal copies the fp32 partial sums round back (2g and
 * 4g are exact, 3g's rounding error is below half an ulp of 4g), so the
 * mean is the copy: k must be 3 or more and not a power of two. */
const char *needs_encdec_mean(const broken_where_t *w) {
    const char *need = needs_encdec_copies(w, 3);
    if (need) return need;
    const int k = w->pc->tp / w->pc->encoder_tp;
    return k & (k - 1) ? NULL
                       : "tp/etp not a power of two (the fp32 mean of 2 or 4 equal copies is the "
                         "copy)";
}
const char *needs_replica(const broken_where_t *w) {
    if (w->pc->zero_stage == 3)
        return "ZeRO stage 0-2 (ZeRO-3 keeps no parameter replicas to perturb)";
    if (w->device < w->pc->world_size) return NULL;
    snprintf(w->buf, w->cap, "a device of the layout, 0 .. %d (no such device)",
             w->pc->world_size - 1);
    return w->buf;
}

/* MoE routing bugs fire on a data-parallel layout of an MoE model; the
 * pooled ones only where a rank's microbatch holds more than one
 * sequence (one sequence pooled is the canonical unit itself). */
const char *needs_moe_dp(const broken_where_t *w) {
    if (w->cfg->moe_experts <= 0) return "an MoE model (--num-experts E)";
    return needs_dp(w);
}

const char *needs_moe_pooled(const broken_where_t *w, int on) {
    const char *need = needs_moe_dp(w);
    if (need) return need;
    if (!on) return "its MoE option on (capacity factor or aux-loss coefficient > 0)";
    return w->pc->micro_batch > 1 ? NULL
                                  : "more than one sequence in a rank's microbatch (one sequence "
                                    "pooled is the canonical unit itself)";
}

const char *needs_moe_capacity(const broken_where_t *w) {
    return needs_moe_pooled(w, w->cfg->moe_capacity_factor > 0.0f);
}

const char *needs_moe_aux(const broken_where_t *w) {
    return needs_moe_pooled(w, w->cfg->moe_aux_loss_coeff > 0.0f);
}

/* A replayed MoE forward: full recomputation of MoE layers with a
 * load-balancing loss to register twice. */
const char *needs_moe_recompute(const broken_where_t *w) {
    if (w->cfg->moe_experts <= 0 || !(w->cfg->moe_aux_loss_coeff > 0.0f))
        return "an MoE model with an aux-loss coefficient (--num-experts E --moe-aux-loss-coeff C)";
    return w->pc->recompute == MODEL_RECOMPUTE_FULL ? NULL : "--recompute-granularity full";
}

/* The ring on an encoder-decoder: blocks that are not causal. */
const char *needs_cp_encdec(const broken_where_t *w) {
    if (w->cfg->arch == MODEL_GPT) return "an encoder-decoder (--model t5-tiny or llava-tiny)";
    return needs_cp_ring(w);
}

const char *needs_moe_ep(const broken_where_t *w) {
    if (w->cfg->moe_experts <= 0) return "an MoE model (--num-experts E)";
    return w->pc->ep > 1 ? NULL : "expert-model-parallel-size > 1";
}

const char *needs_moe_sp(const broken_where_t *w) {
    if (w->cfg->moe_experts <= 0) return "an MoE model (--num-experts E)";
    return w->pc->tp > 1 && w->pc->sequence_parallel
               ? NULL
               : "tensor-model-parallel-size > 1 with --sequence-parallel";
}

const char *needs_moe_fold(const broken_where_t *w) {
    if (w->cfg->moe_experts <= 0) return "an MoE model (--num-experts E)";
    return pconfig_ep_folded(w->pc) == GPT_EXPERT_FOLD_TP
               ? NULL
               : "expert parallelism folded onto tp (--expert-model-parallel-size = "
                 "tp > 1, --expert-tensor-parallel-size 1)";
}

const char *needs_moe_fold_cp(const broken_where_t *w) {
    if (w->cfg->moe_experts <= 0) return "an MoE model (--num-experts E)";
    return pconfig_ep_folded(w->pc) == GPT_EXPERT_FOLD_CP
               ? NULL
               : "expert parallelism folded onto cp (--expert-model-parallel-size a multiple of "
                 "context-parallel-size > 1 that dp does not take)";
}

/* The router's dtype is a choice only under mixed precision, and the bug
 * is running it in the model's dtype where fp32 was asked for. */
const char *needs_moe_router_fp32(const broken_where_t *w) {
    if (w->cfg->moe_experts <= 0) return "an MoE model (--num-experts E)";
    if (w->cfg->precision == MODEL_FP32) return "--bf16 or --fp16 (an fp32 router is the model's)";
    return w->cfg->moe_router_dtype == MOE_ROUTER_FP32 ? NULL : "--moe-router-dtype fp32";
}

/* Per-shard 8-bit blocks differ from the global ones only where ZeRO
 * shards the state over more than one rank. */
const char *needs_adam8_zero(const broken_where_t *w) {
    if (w->cfg->optimizer != MODEL_OPT_ADAMW8BIT) return "--optimizer adamw8bit";
    if (w->pc->zero_stage < 1) return "ZeRO stage >= 1 (DDP keeps the whole state on every rank)";
    return pconfig_grad_ranks(w->pc) > 1 ? NULL : "data-parallel-size > 1 (shards to cut)";
}
