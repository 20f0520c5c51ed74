/* broken.c - the checker's negative controls (broken.h), one table.
 *
 * An entry's `needs` refuses a layout on which the bug cannot fire: a
 * negative control that runs and reports "bit-exact yes" would prove
 * nothing, and `parity check` refuses it before its golden run. */
#include "model/gpt.h"
#include "broken.h"
#include "parity/pp.h"

#include <stdio.h>
#include <string.h>

#include "parity/numparse.h"

static const char *needs_dp(const broken_where_t *w) {
    return w->pc->dp > 1 ? NULL
                         : "data-parallel-size > 1 (one replica has no gradient sums across ranks "
                           "to break)";
}

static const char *needs_dp_bf16(const broken_where_t *w) {
    if (w->cfg->precision != MODEL_BF16) return "--bf16";
    return needs_dp(w);
}

static const char *needs_fp16_scale(const broken_where_t *w) {
    float s, min;
    int window, hysteresis;
    model_loss_scaling(w->cfg, &s, &min, &window, &hysteresis);
    if (w->cfg->loss_scale > 0) s = w->cfg->loss_scale;
    return w->cfg->precision == MODEL_FP16 && s != 1.0f ? NULL
                                                         : "--fp16 with a loss scale other than 1";
}

/* A scaler lost on load shows only where a dynamic one has moved: an fp16
 * run resumed from a checkpoint. */
static const char *needs_fp16_resumed(const broken_where_t *w) {
    if (w->cfg->precision != MODEL_FP16 || w->cfg->loss_scale > 0)
        return "--fp16 with a dynamic loss scale, and --load of its checkpoint";
    return w->resumed ? NULL : "--load of an --fp16 checkpoint (the scaler's state to lose)";
}

static const char *needs_tp(const broken_where_t *w) {
    return w->pc->tp > 1 ? NULL : "tensor-model-parallel-size > 1";
}

static const char *needs_tp3d(const broken_where_t *w) {
    return w->pc->tp > 1 && w->pc->tp_mode == PC_TP_3D ? NULL : "--tensor-parallel-mode 3d";
}

/* the column group must be a ring of cp ranks for the wrong group to run */
static const char *needs_tp2d_cp_ring(const broken_where_t *w) {
    int sub[3];
    pconfig_tp_sub(w->pc, sub);
    return w->pc->tp_mode == PC_TP_2D && w->pc->cp > 1 && !w->pc->cp_comm && sub[1] == w->pc->cp
               ? NULL
               : "--tensor-parallel-mode 2d with the ring (--cp-comm-type p2p) over as many cp ranks "
                 "as the grid has rows (q)";
}

static const char *needs_tp2d(const broken_where_t *w) {
    return w->pc->tp > 1 && (w->pc->tp_mode == PC_TP_2D || w->pc->tp_mode == PC_TP_25D)
               ? NULL
               : "--tensor-parallel-mode 2d or 2.5d";
}

static const char *needs_tp2d_lowp(const broken_where_t *w) {
    if (w->cfg->precision == MODEL_FP32) return "--bf16 or --fp16";
    return needs_tp2d(w);
}

/* Megatron pads to a multiple of 128 x tp: a vocabulary that is one
 * already pads nothing. */
static const char *needs_tp_padding(const broken_where_t *w) {
    if (w->pc->tp == 1) return needs_tp(w);
    const long unit = 128L * w->pc->tp;
    if (w->cfg->vocab % unit) return NULL;
    snprintf(w->buf, w->cap, "a vocabulary that is not a multiple of 128 x tp (that of %d is "
                             "already a multiple of 128 x tp = %ld, so nothing is padded)",
             w->cfg->vocab, unit);
    return w->buf;
}

static const char *needs_pp(const broken_where_t *w) {
    return w->pc->pp > 1 ? NULL : "pipeline-model-parallel-size > 1";
}

/* With one sequence per microbatch and one data-parallel rank, a stage's
 * microbatch count is the sequence's index in the batch: the mis-keyed
 * masks are the right ones. */
static const char *needs_pp_mask_key(const broken_where_t *w) {
    if (w->pc->pp == 1) return needs_pp(w);
    if (w->pc->micro_batch > 1 || w->pc->dp > 1) return NULL;
    return "more than one sequence per microbatch or dp > 1 (with one sequence per microbatch "
           "and one data-parallel rank, a stage's microbatch count equals the sequence's index, "
           "so the masks come out right; use fewer microbatches or dp > 1)";
}

static const char *needs_pp_tied(const broken_where_t *w) {
    if (w->pc->pp == 1) return needs_pp(w);
    return w->cfg->tied ? NULL
                        : "a head tied to the embedding (without "
                          "--untie-embeddings-and-output-weights)";
}

static const char *needs_pp_split(const broken_where_t *w) {
    if (w->pc->pp == 1) return needs_pp(w);
    return pconfig_splits_backward(w->pc->pp_schedule)
               ? NULL
               : "a schedule that splits the backward (--pipeline-schedule zb-h1, zb-h2, zb-v or dualpipev)";
}

static const char *needs_pp_split_overlap(const broken_where_t *w) {
    const char *split = needs_pp_split(w);
    if (split) return split;
    return w->pc->overlap_grad_reduce ? NULL : "--overlap-grad-reduce (buckets to reduce early)";
}

static const char *needs_z3_prefetch(const broken_where_t *w) {
    if (w->pc->zero_stage != 3 || !w->pc->overlap_param_gather)
        return "--zero-stage 3 with --overlap-param-gather (a prefetch to misplace)";
    if (pconfig_grad_ranks(w->pc) < 2) return "data-parallel-size > 1 (parameters to gather)";
    return w->cfg->layers > 1 ? NULL : "at least two layers (a next unit of the same size)";
}

static const char *needs_cp_ring(const broken_where_t *w) {
    return w->pc->cp > 1 && !w->pc->cp_comm
               ? NULL
               : "the ring (context-parallel-size > 1, --cp-comm-type p2p)";
}

/* Across the encoder-decoder bridge: encoder stages of their own and a
 * second data-parallel replica to send to by mistake. */
static const char *needs_encdec_dp(const broken_where_t *w) {
    if (w->cfg->arch == MODEL_GPT) return "an encoder-decoder model (--model t5-tiny)";
    if (!w->pc->encoder_pp) return "encoder stages of its own (--encoder-pipeline-model-parallel-size > 0)";
    return w->pc->dp > 1 ? NULL : "data-parallel-size > 1";
}
/* The copies an encoder rank gets back: an encoder mesh of etp < tp
 * (k = tp/etp decoder ranks a rank), each holding the whole gradient (no
 * sequence parallelism); the mean of k equal copies is the copy for k = 2
 * ((g + g) / 2 is exact), so it needs k >= 3. */
static const char *needs_encdec_copies(const broken_where_t *w, int min_k) {
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
static const char *needs_encdec_sum(const broken_where_t *w) { return needs_encdec_copies(w, 2); }
/* A head tied across an encoder mesh: two vocabulary cuts to mix up. */
static const char *needs_encdec_tied(const broken_where_t *w) {
    if (w->cfg->arch == MODEL_GPT) return "an encoder-decoder model (--model t5-tiny)";
    if (!pconfig_hetero(w->pc))
        return "an encoder mesh of etp < tp (--encoder-tensor-model-parallel-size, "
               "--encoder-pipeline-model-parallel-size > 0)";
    return w->cfg->tied ? NULL : "a head tied to the embedding (--model with \"tied\": true)";
}
/* With k = 2 or 4 equal copies the fp32 partial sums round back (2g and
 * 4g are exact, 3g's rounding error is below half an ulp of 4g), so the
 * mean is the copy: k must be 3 or more and not a power of two. */
static const char *needs_encdec_mean(const broken_where_t *w) {
    const char *need = needs_encdec_copies(w, 3);
    if (need) return need;
    const int k = w->pc->tp / w->pc->encoder_tp;
    return k & (k - 1) ? NULL
                       : "tp/etp not a power of two (the fp32 mean of 2 or 4 equal copies is the "
                         "copy)";
}
static const char *needs_replica(const broken_where_t *w) {
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
static const char *needs_moe_dp(const broken_where_t *w) {
    if (w->cfg->moe_experts <= 0) return "an MoE model (--num-experts E)";
    return needs_dp(w);
}

static const char *needs_moe_pooled(const broken_where_t *w, int on) {
    const char *need = needs_moe_dp(w);
    if (need) return need;
    if (!on) return "its MoE option on (capacity factor or aux-loss coefficient > 0)";
    return w->pc->micro_batch > 1 ? NULL
                                  : "more than one sequence in a rank's microbatch (one sequence "
                                    "pooled is the canonical unit itself)";
}

static const char *needs_moe_capacity(const broken_where_t *w) {
    return needs_moe_pooled(w, w->cfg->moe_capacity_factor > 0.0f);
}

static const char *needs_moe_aux(const broken_where_t *w) {
    return needs_moe_pooled(w, w->cfg->moe_aux_loss_coeff > 0.0f);
}

/* A replayed MoE forward: full recomputation of MoE layers with a
 * load-balancing loss to register twice. */
static const char *needs_moe_recompute(const broken_where_t *w) {
    if (w->cfg->moe_experts <= 0 || !(w->cfg->moe_aux_loss_coeff > 0.0f))
        return "an MoE model with an aux-loss coefficient (--num-experts E --moe-aux-loss-coeff C)";
    return w->pc->recompute == MODEL_RECOMPUTE_FULL ? NULL : "--recompute-granularity full";
}

/* The ring on an encoder-decoder: blocks that are not causal. */
static const char *needs_cp_encdec(const broken_where_t *w) {
    if (w->cfg->arch == MODEL_GPT) return "an encoder-decoder (--model t5-tiny or llava-tiny)";
    return needs_cp_ring(w);
}

static const char *needs_moe_ep(const broken_where_t *w) {
    if (w->cfg->moe_experts <= 0) return "an MoE model (--num-experts E)";
    return w->pc->ep > 1 ? NULL : "expert-model-parallel-size > 1";
}

static const char *needs_moe_sp(const broken_where_t *w) {
    if (w->cfg->moe_experts <= 0) return "an MoE model (--num-experts E)";
    return w->pc->tp > 1 && w->pc->sequence_parallel
               ? NULL
               : "tensor-model-parallel-size > 1 with --sequence-parallel";
}

static const char *needs_moe_fold(const broken_where_t *w) {
    if (w->cfg->moe_experts <= 0) return "an MoE model (--num-experts E)";
    return pconfig_ep_folded(w->pc) == GPT_EXPERT_FOLD_TP
               ? NULL
               : "expert parallelism folded onto tp (--expert-model-parallel-size = "
                 "tp > 1, --expert-tensor-parallel-size 1)";
}

static const char *needs_moe_fold_cp(const broken_where_t *w) {
    if (w->cfg->moe_experts <= 0) return "an MoE model (--num-experts E)";
    return pconfig_ep_folded(w->pc) == GPT_EXPERT_FOLD_CP
               ? NULL
               : "expert parallelism folded onto cp (--expert-model-parallel-size a multiple of "
                 "context-parallel-size > 1 that dp does not take)";
}

/* The router's dtype is a choice only under mixed precision, and the bug
 * is running it in the model's dtype where fp32 was asked for. */
static const char *needs_moe_router_fp32(const broken_where_t *w) {
    if (w->cfg->moe_experts <= 0) return "an MoE model (--num-experts E)";
    if (w->cfg->precision == MODEL_FP32) return "--bf16 or --fp16 (an fp32 router is the model's)";
    return w->cfg->moe_router_dtype == MOE_ROUTER_FP32 ? NULL : "--moe-router-dtype fp32";
}

/* Per-shard 8-bit blocks differ from the global ones only where ZeRO
 * shards the state over more than one rank. */
static const char *needs_adam8_zero(const broken_where_t *w) {
    if (w->cfg->optimizer != MODEL_OPT_ADAMW8BIT) return "--optimizer adamw8bit";
    if (w->pc->zero_stage < 1) return "ZeRO stage >= 1 (DDP keeps the whole state on every rank)";
    return pconfig_grad_ranks(w->pc) > 1 ? NULL : "data-parallel-size > 1 (shards to cut)";
}

static void set_moe_norm_tp(engine_run_t *r, int d) { (void)d, r->broken_moe |= GPT_BROKEN_MOE_NORM_TP; }
static void set_moe_edp(engine_run_t *r, int d) { (void)d, r->broken_moe |= GPT_BROKEN_MOE_EDP_SCALE; }
static void set_moe_fold_cp(engine_run_t *r, int d) { (void)d, r->broken_moe |= GPT_BROKEN_MOE_FOLD_CP; }
static void set_moe_router_tp(engine_run_t *r, int d) {
    (void)d, r->broken_moe |= GPT_BROKEN_MOE_ROUTER_TP;
}
static void set_moe_capacity(engine_run_t *r, int d) {
    (void)d, r->broken_moe |= GPT_BROKEN_MOE_LOCAL_CAPACITY;
}
static void set_moe_ties(engine_run_t *r, int d) { (void)d, r->broken_moe |= GPT_BROKEN_MOE_TIE_ORDER; }
static void set_moe_aux(engine_run_t *r, int d) { (void)d, r->broken_moe |= GPT_BROKEN_MOE_AUX_LOCAL; }
static void set_moe_router_lowp(engine_run_t *r, int d) {
    (void)d, r->broken_moe |= GPT_BROKEN_MOE_ROUTER_LOWP;
}

static void set_fp32_sums(engine_run_t *r, int d) { (void)d, r->broken_fp32_sums = 1; }
static void set_bf16_sums(engine_run_t *r, int d) { (void)d, r->broken_fp32_sums = 2; }
static void set_fp16_clip(engine_run_t *r, int d) { (void)d, r->broken_fp16_clip_scaled = 1; }
static void set_fp16_lost(engine_run_t *r, int d) { (void)d, r->broken_fp16_scale_lost = 1; }
static void set_tp_fp32_sums(engine_run_t *r, int d) { (void)d, r->broken_tp_fp32_sums = 1; }
static void set_tp_vocab_pad(engine_run_t *r, int d) { (void)d, r->broken_tp_vocab_pad = 1; }
static void set_pp_mask_key(engine_run_t *r, int d) { (void)d, r->broken_pp_mask_key = 1; }
static void set_pp_tied_grad(engine_run_t *r, int d) { (void)d, r->broken_pp_tied_grad = 1; }
static void set_pp_stale_w(engine_run_t *r, int d) { (void)d, r->broken_pp_stale_w = 1; }
static void set_zb_early_reduce(engine_run_t *r, int d) { (void)d, r->broken_zb_early_reduce = 1; }
static void set_z3_prefetch_reuse(engine_run_t *r, int d) { (void)d, r->broken_z3_prefetch_reuse = 1; }
static void set_cp_online(engine_run_t *r, int d) { (void)d, r->broken_cp_online_softmax = 1; }
static void set_cp_causal(engine_run_t *r, int d) { (void)d, r->broken_cp_causal_ring = 1; }
static void set_moe_recompute(engine_run_t *r, int d) {
    (void)d, r->broken_moe |= GPT_BROKEN_MOE_RECOMPUTE_AUX;
}
static void set_encdec_mixup(engine_run_t *r, int d) { (void)d, r->broken_encdec_dp_mixup = 1; }
static void set_encdec_sum(engine_run_t *r, int d) { (void)d, r->broken_encdec_combine = 1; }
static void set_encdec_mean(engine_run_t *r, int d) { (void)d, r->broken_encdec_combine = 2; }
static void set_encdec_tied(engine_run_t *r, int d) { (void)d, r->broken_encdec_tied_cuts = 1; }
static void set_tp2d_ln(engine_run_t *r, int d) { (void)d, r->broken_tp2d |= GPT_BROKEN_TP2D_LN_FP32; }
static void set_tp2d_summa(engine_run_t *r, int d) {
    (void)d, r->broken_tp2d |= GPT_BROKEN_TP2D_SUMMA_ROUNDED;
}
static void set_tp2d_summa_lowp(engine_run_t *r, int d) {
    (void)d, r->broken_tp2d |= GPT_BROKEN_TP2D_SUMMA_LOWP;
}
static void set_tp3d_swap(engine_run_t *r, int d) { (void)d, r->broken_tp2d |= GPT_BROKEN_TP3D_NO_SWAP; }
static void set_tp2d_cp_ring(engine_run_t *r, int d) {
    (void)d, r->broken_tp2d |= GPT_BROKEN_TP2D_CP_RING_GROUP;
}
static void set_replica(engine_run_t *r, int d) { r->broken_replica = d + 1; /* 0 is off */ }
static void set_adam8_shard(engine_run_t *r, int d) { (void)d, r->broken_adam8_shard_blocks = 1; }

static const broken_variant_t variants[] = {
    {"fp32-sums",
     "reduce the data-parallel gradients with plain fp32 ring sums of rounded local gradients "
     "(the order-dependent all-reduce of DDP over NCCL)",
     "grad.*", "--data-parallel-size 2", -1, "dp > 1", 0, needs_dp, set_fp32_sums},
    {"bf16-grad-reduce",
     "round each rank's gradients to bf16 and sum them in a ring (a bf16 gradient all-reduce "
     "without fp32 accumulation: Megatron's accumulate_allreduce_grads_in_fp32 off, DeepSpeed's "
     "bf16 communication_data_type)",
     "grad.*", "--bf16 --data-parallel-size 2", -1, "dp > 1 and --bf16", 0, needs_dp_bf16,
     set_bf16_sums},
    {"fp16-clip-scaled",
     "take the gradient norm (and clip) before unscaling the fp16 loss scale (the ordering "
     "PyTorch's GradScaler documentation warns about)",
     "grad_norm", "--fp16 --initial-loss-scale 1024 --data-parallel-size 2", -1,
     "--fp16 with a loss scale other than 1", 0, needs_fp16_scale, set_fp16_clip},
    {"fp16-scale-lost",
     "load an --fp16 checkpoint without its loss scaler's state: the scale, clean-step count and "
     "hysteresis restart from the initial ones (a resume that drops Megatron's grad_scaler "
     "state dict)",
     "grad_input.head", "--fp16 --initial-loss-scale 1024 --loss-scale-window 1 --data-parallel-size 2 "
     "--load CKPT", -1,
     "--fp16 with a dynamic scale, --load of its checkpoint (CKPT: test_broken.sh saves one from "
     "the example's flags)", 0, needs_fp16_resumed, set_fp16_lost},
    {"tp-fp32-sums",
     "complete row-parallel sums in fp32, each rank rounding its partial before the all-reduce "
     "(Megatron-LM 1736's reduction-order kind)",
     "act.layers.0.mlp.dense_4h_to_h.output", "--tensor-model-parallel-size 2", -1, "tp > 1", 0, needs_tp,
     set_tp_fp32_sums},
    {"tp2d-layernorm-fp32",
     "take 2-D LayerNorm's statistics as each rank's fp32 partial sums all-reduced over the row "
     "(Colossal-AI LayerNorm2D's all_reduce of rounded partials)",
     "act.layers.0.input_layernorm.output", "--tensor-model-parallel-size 4 --tensor-parallel-mode 2d",
     -1, "--tensor-parallel-mode 2d or 2.5d", 0, needs_tp2d, set_tp2d_ln},
    {"tp2d-summa-rounded",
     "round each SUMMA step's product to fp32 and add it to the output step by step "
     "(Colossal-AI Matmul_AB_2D's C += A.B)",
     "act.layers.0.*.output", "--tensor-model-parallel-size 4 --tensor-parallel-mode 2d", -1,
     "--tensor-parallel-mode 2d or 2.5d", 0, needs_tp2d, set_tp2d_summa},
    {"tp2d-summa-bf16",
     "round each SUMMA step's product to bf16 and add it to the output in bf16 (a naive amp's "
     "Matmul_AB_2D: the product of bf16 blocks under autocast, C += A.B in the low dtype)",
     "act.layers.0.self_attention.query_key_value.output",
     "--bf16 --tensor-model-parallel-size 4 --tensor-parallel-mode 2d", -1,
     "--tensor-parallel-mode 2d or 2.5d with --bf16 or --fp16", 0, needs_tp2d_lowp,
     set_tp2d_summa_lowp},
    {"tp3d-no-group-swap",
     "let the second linear of a pair keep the first's input and output groups (Colossal-AI's "
     "3-D layers swap them after every linear)",
     "act.layers.0.self_attention.dense.output",
     "--tensor-model-parallel-size 8 --tensor-parallel-mode 3d --global-batch-size 8", -1,
     "--tensor-parallel-mode 3d", 0, needs_tp3d, set_tp3d_swap},
    {"tp2d-cp-ring-group",
     "pass the ring attention's K/V blocks over the 2-D tp column group instead of the cp group "
     "(a wrong process group: the same positions of another row's sequences arrive)",
     "act.layers.0.self_attention.core_attention.output",
     "--tensor-model-parallel-size 4 --tensor-parallel-mode 2d --context-parallel-size 2", -1,
     "--tensor-parallel-mode 2d, the ring over q cp ranks", 0, needs_tp2d_cp_ring, set_tp2d_cp_ring},
    {"tp-vocab-padding",
     "pad the vocabulary to a multiple of 128 x tp and let the padded columns into the softmax "
     "(Megatron-LM 1754)",
     "loss", "--vocab-size 272 --tensor-model-parallel-size 2", -1, "tp > 1, a vocabulary not a multiple of 128 x tp", 0, needs_tp_padding,
     set_tp_vocab_pad},
    {"pp-mask-key",
     "key a stage's dropout masks by its own microbatch count, not the sequence's place in the "
     "batch (PyTorch 55036)",
     "mask.dropout.*", "--pipeline-model-parallel-size 2 --num-microbatches 2", -1, "pp > 1, and more than one sequence per microbatch or dp > 1", 0,
     needs_pp_mask_key, set_pp_mask_key},
    {"pp-tied-embedding",
     "skip the embedding group's all-reduce of the tied word embedding's gradient between the "
     "first and last stage (Megatron's embedding group)",
     "grad.embedding.word_embeddings.weight", "--pipeline-model-parallel-size 2", -1, "pp > 1, a tied head", 0,
     needs_pp_tied, set_pp_tied_grad},
    {"pp-stale-w",
     "let a zero-bubble W pass read the output gradient where its B left it instead of a copy: by "
     "the time W runs, later passes have overwritten that buffer (a weight-gradient pass scheduled "
     "before its input is final)",
     "grad.*", "--pipeline-model-parallel-size 2 --pipeline-schedule zb-h1 --num-microbatches 4", -1,
     "a schedule that splits the backward (zb-h1, zb-h2, zb-v, dualpipev)", 0, needs_pp_split, set_pp_stale_w},
    {"zb-early-reduce",
     "with --overlap-grad-reduce under a zero-bubble schedule, reduce a bucket when its unit's B "
     "pass ends, before the W passes have added the weight gradients (the hazard of deferred "
     "wgrad with DDP's backward hooks: Megatron-core fires them after the delayed wgrad)",
     "grad.layers.1.*.weight", "--pipeline-model-parallel-size 2 --data-parallel-size 2 "
     "--pipeline-schedule zb-h1 --num-microbatches 2 --overlap-grad-reduce --bucket-cap-mb 0.001", -1,
     "a split schedule (zb-h1, zb-h2, zb-v, dualpipev) with --overlap-grad-reduce (buckets small enough "
     "that one is not the tied embedding's, which waits anyway)", 0,
     needs_pp_split_overlap, set_zb_early_reduce},
    {"z3-prefetch-reuse",
     "let ZeRO-3's prefetch of the next unit's parameters land in the running unit's gathered "
     "buffer before the unit has read it (a double-buffered prefetch with one buffer: the "
     "use-after-reuse race of FSDP's and DeepSpeed's prefetch, run deterministically)",
     "act.layers.0.self_attention.query_key_value.output",
     "--data-parallel-size 2 --zero-stage 3 --overlap-param-gather", -1,
     "--zero-stage 3 with --overlap-param-gather, dp > 1, two layers or more", 0,
     needs_z3_prefetch, set_z3_prefetch_reuse},
    {"cp-online-softmax",
     "merge the ring's attention blocks with flash-style online softmax rescaling in arrival "
     "order (ring attention's order-dependent merge)",
     "act.layers.0.self_attention.core_attention.output", "--context-parallel-size 2", -1, "cp > 1 on the ring (p2p)", 0,
     needs_cp_ring, set_cp_online},
    {"cp-causal-ring",
     "run every attention block of an encoder-decoder on the ring as causal: the zigzag ring's "
     "tile skipping and softmax spans for the GPT's mask, not the encoder's bidirectional or the "
     "cross-attention's source keys (ring kernels built for causal masks only)",
     "act.encoder.layers.0.self_attention.core_attention.output",
     "--model t5-tiny --context-parallel-size 2", -1,
     "an encoder-decoder, cp > 1 on the ring (p2p)", 0, needs_cp_encdec, set_cp_causal},
    {"moe-local-capacity",
     "compute expert capacity and drop tokens over the tokens a rank holds, not per sequence "
     "(Megatron-core get_capacity on local tokens)",
     "mask.layers.0.mlp.router.kept",
     "--num-experts 4 --moe-expert-capacity-factor 1.0 --data-parallel-size 2", -1,
     "an MoE model with a capacity factor, dp > 1, more than one sequence a microbatch", 0,
     needs_moe_capacity, set_moe_capacity},
    {"moe-tie-order",
     "break equal router scores and equal capacity weights by the device's own order (the "
     "higher expert, the later token; torch.topk leaves tie order unspecified)",
     "mask.layers.0.mlp.router.kept",
     "--num-experts 4 --moe-router-topk 1 --moe-expert-capacity-factor 1.0 --data-parallel-size 2",
     -1, "an MoE model, dp > 1", 0, needs_moe_dp, set_moe_ties},
    {"moe-aux-local-tokens",
     "take the load-balancing loss over the rank's tokens, scaled by their count, not per "
     "sequence (Megatron-LM PR 5047's kind)",
     "grad*layers.1.*",
     "--num-experts 4 --moe-aux-loss-coeff 0.1 --data-parallel-size 2", -1,
     "an MoE model with an aux-loss coefficient, dp > 1, more than one sequence a microbatch", 0,
     needs_moe_aux, set_moe_aux},
    {"moe-recompute-aux-twice",
     "let the MoE forward that full recomputation replays in the backward register the "
     "load-balancing and z losses again, so their gradients reach the router twice "
     "(Megatron-LM 1330, 1514: the recomputed forward registered the aux loss a second time)",
     "grad.layers.1.*",
     "--num-experts 4 --moe-aux-loss-coeff 0.1 --recompute-granularity full", -1,
     "an MoE model with an aux-loss coefficient, --recompute-granularity full", 0,
     needs_moe_recompute, set_moe_recompute},
    {"moe-edp-grad-scale",
     "multiply the expert weight gradients by the expert-parallel degree on their owners "
     "(DeepSpeed PR 5259: EP=2 gave 2x expert gradients)",
     "grad.layers.1.mlp.experts.*",
     "--num-experts 4 --data-parallel-size 2 --expert-model-parallel-size 2", -1,
     "an MoE model, expert-model-parallel-size > 1", 0, needs_moe_ep, set_moe_edp},
    {"moe-router-no-tp-reduce",
     "under sequence parallelism add only each tp rank's own positions to the router weight "
     "gradient and never complete it over tp (torchtitan PR 2416: a lost Partial placement)",
     "grad.layers.1.mlp.router.weight",
     "--num-experts 4 --tensor-model-parallel-size 2 --sequence-parallel", -1,
     "an MoE model, tp > 1 with --sequence-parallel", 0, needs_moe_sp, set_moe_router_tp},
    {"moe-norm-tp-rank",
     "count the expert tensors in the gradient norm on tp rank 0 only, the filter for "
     "tp-duplicated tensors (Megatron-LM PR 5916: the tp rank instead of the expert-tp rank), "
     "so the experts the other tp ranks hold drop out of the norm and the clipping",
     "grad_norm",
     "--num-experts 4 --tensor-model-parallel-size 2 --expert-tensor-parallel-size 1 "
     "--expert-model-parallel-size 2", -1,
     "an MoE model with ep folded onto tp (ep = tp > 1, etp 1)", 0, needs_moe_fold, set_moe_norm_tp},
    {"moe-router-bf16",
     "run the router in the model's dtype (bf16 logits, top-k weights and combine products) "
     "where the model asks --moe-router-dtype fp32 (Megatron-core's default router dtype: bf16 "
     "logits flip near-tied routing decisions)",
     "act.layers.0.mlp.router.*",
     "--num-experts 4 --bf16 --moe-router-dtype fp32 --data-parallel-size 2", -1,
     "an MoE model under --bf16 or --fp16 with --moe-router-dtype fp32", 0,
     needs_moe_router_fp32, set_moe_router_lowp},
    {"moe-fold-cp-edp",
     "with the experts folded onto cp, split their weight gradients over cp by token tile as if "
     "the cp ranks held the same experts: the expert-data-parallel group taken as dp x cp, not "
     "dp (Megatron-core's wrong expert-data-parallel group bug class)",
     "grad.layers.1.mlp.experts.*",
     "--num-experts 4 --context-parallel-size 2 --expert-model-parallel-size 2", -1,
     "an MoE model with ep folded onto cp (ep a multiple of cp > 1, etp tp)", 0,
     needs_moe_fold_cp, set_moe_fold_cp},
    {"encdec-dp-mixup",
     "send the encoder's output to the decoder stage of the next data-parallel replica and take "
     "the gradient back from there (Megatron-LM 5a3b6bcf1f fixed such a DP/PP rank mix-up in the "
     "encoder-decoder bridge)",
     "act.decoder.layers.0.*",
     "--model t5-tiny --encoder-pipeline-model-parallel-size 1 --data-parallel-size 2", -1,
     "an encoder-decoder with encoder stages of its own, dp > 1", 0, needs_encdec_dp,
     set_encdec_mixup},
    {"encdec-grad-sum",
     "sum the encoder output's gradient over the tp/etp decoder ranks an encoder rank feeds, each "
     "of which holds the whole gradient already (Megatron-LM 8af3dae72a: x tp/etp)",
     "grad*encoder.*",
     "--model t5-tiny --tensor-model-parallel-size 2 --encoder-tensor-model-parallel-size 1 "
     "--encoder-pipeline-model-parallel-size 1", -1,
     "an encoder mesh of etp < tp, no sequence parallelism", 0, needs_encdec_sum, set_encdec_sum},
    {"encdec-grad-mean",
     "average those tp/etp copies in fp32 (Megatron-LM 5a3b6bcf1f): (g + g + g) / 3 need not be g",
     "grad*encoder.*",
     "--model t5-tiny --hidden-size 48 --num-attention-heads 6 --ffn-hidden-size 192 "
     "--tensor-model-parallel-size 3 --encoder-tensor-model-parallel-size 1 "
     "--encoder-pipeline-model-parallel-size 1", -1,
     "an encoder mesh with tp/etp >= 3 and not a power of two, no sequence parallelism", 0,
     needs_encdec_mean,
     set_encdec_mean},
    {"encdec-tied-cuts",
     "a head tied across an encoder mesh: all-reduce the embedding's and the head's local shards of "
     "the word embedding's gradient element by element, as Megatron's embedding group does, though "
     "the encoder cuts the vocabulary over etp and the decoder over tp (rows mixed up)",
     "grad.embedding.word_embeddings.weight",
     "--model tests/layouts/models/t5-tiny-tied.json --tensor-model-parallel-size 2 "
     "--encoder-tensor-model-parallel-size 1 --encoder-pipeline-model-parallel-size 1", -1,
     "an encoder-decoder with a tied head and an encoder mesh of etp < tp", 0, needs_encdec_tied,
     set_encdec_tied},
    {"adamw8bit-shard-blocks",
     "cut ZeRO's 8-bit AdamW shards at even pieces and quantize each shard's state in blocks "
     "counted from its own start, each with its own absmax, instead of the global tensor's "
     "blocks (sharded 8-bit optimizer states: a block cut by a shard boundary gets two absmax)",
     "exp_avg*", "--optimizer adamw8bit --data-parallel-size 4 --zero-stage 1", -1,
     "--optimizer adamw8bit, ZeRO stage >= 1, dp > 1", 0, needs_adam8_zero, set_adam8_shard},
    {"replica",
     "flip one bit of device R's parameter replica after every update, ZeRO 0-2 (a replica that "
     "silently drifts, as after a missed broadcast)",
     "param.*", "--data-parallel-size 4 --zero-stage 1", 3, "ZeRO 0-2, R a device of the layout; train: --dump or --digest", 1, needs_replica, set_replica},
};
enum { N_VARIANTS = sizeof variants / sizeof variants[0] };

static int takes_device(const broken_variant_t *b) { return b->example_device >= 0; }

static int unknown(const char *value, perr_t *err) {
    char names[1024] = "";
    for (size_t k = 0, n = 0; k < N_VARIANTS && n < sizeof names; k++)
        n += (size_t)snprintf(names + n, sizeof names - n, "%s%s%s", k ? ", " : "",
                              variants[k].name, takes_device(&variants[k]) ? ":R" : "");
    return perr_set(err, "--test-broken: unknown variant '%s' (expected one of %s, or list)", value,
                    names);
}

int broken_parse(const char *value, const broken_variant_t **out, int *device, perr_t *err) {
    const char *colon = strchr(value, ':');
    const size_t len = colon ? (size_t)(colon - value) : strlen(value);
    for (size_t k = 0; k < N_VARIANTS; k++) {
        const broken_variant_t *b = &variants[k];
        if (strlen(b->name) != len || strncmp(b->name, value, len)) continue;
        if (!takes_device(b) && colon) return unknown(value, err);
        if (takes_device(b) && !colon)
            return perr_set(err, "--test-broken %s: needs its device, %s:R", b->name, b->name);
        long long r = -1;
        if (colon && num_parse_int("--test-broken replica:R", colon + 1, 0, PARITY_MAX_DEVICES - 1,
                                   &r, err))
            return -1;
        *out = b;
        *device = (int)r;
        return 0;
    }
    return unknown(value, err);
}

const char *broken_spelling(const broken_variant_t *b, int device, char *buf, size_t cap) {
    if (takes_device(b)) snprintf(buf, cap, "%s:%d", b->name, device);
    else snprintf(buf, cap, "%s", b->name);
    return buf;
}

int broken_check(const broken_variant_t *b, int device, const pconfig_t *pc,
                 const model_config_t *cfg, int resumed, perr_t *err) {
    char buf[256], name[64];
    const broken_where_t w = {pc, cfg, device, resumed, buf, sizeof buf};
    const char *need = b->needs(&w);
    if (!need) return 0;
    return perr_set(err, "--test-broken %s: needs %s", broken_spelling(b, device, name, sizeof name),
                    need);
}

void broken_apply(const broken_variant_t *b, int device, engine_run_t *run) {
    if (b) b->apply(run, device);
}

void broken_print_help(FILE *f) {
    const char *indent = "                           ";
    fprintf(f, "  --test-broken NAME       re-create one real framework bug in the layout run:\n%s",
            indent);
    int col = 0;
    for (size_t k = 0; k < N_VARIANTS; k++) {
        const broken_variant_t *b = &variants[k];
        const int len = (int)strlen(b->name) + (takes_device(b) ? 2 : 0) + 2;
        if (col && col + len > 62) fprintf(f, "\n%s", indent), col = 0;
        col += fprintf(f, "%s%s%s", b->name, takes_device(b) ? ":R" : "",
                       k + 1 < N_VARIANTS ? ", " : "\n");
    }
    fprintf(f, "%s(replica:R: device R's parameter replica drifts); each is refused on a\n"
               "%slayout where it cannot fire. --test-broken list prints the table (what\n"
               "%seach breaks, the tensor that must diverge first, a layout where it\n"
               "%sfires) and exits\n", indent, indent, indent, indent);
}

void broken_print(FILE *f) {
    fputs("# name\tfirst divergent tensor (on the example)\texample (parity check --model "
          "gpt-micro --steps 1 ...)\tneeds\twhat it breaks\n", f);
    for (size_t k = 0; k < N_VARIANTS; k++) {
        const broken_variant_t *b = &variants[k];
        char name[64];
        fprintf(f, "%s%s\t%s\t--test-broken %s %s\t%s\t%s\n", b->name,
                takes_device(b) ? ":R" : "", b->diverges,
                broken_spelling(b, b->example_device, name, sizeof name), b->example, b->requires,
                b->breaks);
    }
}
