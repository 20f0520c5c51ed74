/* pconfig_validate.c - a layout's flags against each other and the model's
 * batch (pconfig_validate), in phases: the degrees, the grid's world and
 * its rank order, the optimizer's sharding and offload, the batch's split
 * into microbatches. The first rule broken names its flag and stops.
 * The flags' parsing, description and help are pconfig.c's. */
#include "parity/pconfig.h"

#include <string.h>

#include "model/gpt.h"
#include "parity/runtime.h"

/* Megatron-core's rules for an encoder's own degrees (0.9 - 0.13; the
 * model's, pp.h: an encoder-decoder, a decoder pipeline needs encoder
 * stages). The encoder's stages join the grid's pipeline axis before
 * the decoder's: pp becomes epp + pp, and the device count
 * dp*etp*epp*cp + dp*tp*pp*cp. */
static int encoder_validate(pconfig_t *pc, perr_t *err) {
    if (pc->given & PC_ENCODER_STAGES) return 0;
    pc->decoder_pp = pc->pp;
    if (pc->encoder_tp && !pc->encoder_pp)
        return perr_set(err, "encoder-tensor-model-parallel-size: %d needs "
                             "--encoder-pipeline-model-parallel-size > 0 (Megatron's rule: the "
                             "encoder's own tensor-parallel degree lives on pipeline ranks of its own)",
                        pc->encoder_tp);
    if (!pc->encoder_tp) pc->encoder_tp = pc->tp; /* Megatron's default */
    if (pc->encoder_tp > pc->tp)
        return perr_set(err, "encoder-tensor-model-parallel-size: %d exceeds "
                             "tensor-model-parallel-size %d (Megatron's rule: an encoder never has "
                             "more tensor parallelism than its decoder)", pc->encoder_tp, pc->tp);
    if (!pc->encoder_pp) return 0;
    if (pc->tp % pc->encoder_tp)
        return perr_set(err, "encoder-tensor-model-parallel-size: %d does not divide "
                             "tensor-model-parallel-size %d (each encoder rank feeds tp/etp decoder "
                             "ranks)", pc->encoder_tp, pc->tp);
    /* a rank list places both meshes (mesh_grid_init_mapped): only a whole
     * world's; a patterns mapping's one replica of tp x pp positions is
     * no replica of two meshes */
    if (pc->encoder_tp < pc->tp && pc->n_rank_list && !(pc->given & PC_GIVEN_RANK_LIST))
        return perr_set(err, "device_mapping: an encoder mesh of encoder-tensor-model-parallel-size "
                             "%d < tp %d has replicas of etp*epp + tp*pp devices, not one stage grid's: "
                             "give --rank-list with every world rank", pc->encoder_tp, pc->tp);
    if (pc->encoder_tp < pc->tp && pc->ep > 1)
        return perr_set(err, "encoder-tensor-model-parallel-size: %d < tensor-model-parallel-size "
                             "%d (an encoder mesh beside the decoder's): not with expert parallelism",
                        pc->encoder_tp, pc->tp);
    if (pc->n_layer_split)
        return perr_set(err, "pipeline-layer-split: not with --encoder-pipeline-model-parallel-size "
                             "(the encoder's layers split evenly over its %d stages, the decoder's "
                             "over its %d)", pc->encoder_pp, pc->pp);
    if ((long long)pc->pp + pc->encoder_pp > PC_MAX_SPLIT)
        return perr_set(err, "encoder-pipeline-model-parallel-size: %d + pipeline-model-parallel-size "
                             "%d stages: at most %d", pc->encoder_pp, pc->pp, PC_MAX_SPLIT);
    pc->pp += pc->encoder_pp;
    pc->given |= PC_ENCODER_STAGES;
    return 0;
}

/* What one data-parallel replica's devices are, in messages. */
static const char *replica_name(const pconfig_t *pc) {
    return pconfig_hetero(pc) ? "cp*(etp*epp + tp*pp) (an encoder mesh beside the decoder's)" : "tp*pp*cp";
}

/* The pipeline flags among themselves (pp.h checks them against the
 * model's layers): a schedule, and virtual stages only when interleaved. */
const char *pconfig_schedule_name(pc_pp_schedule_t s) {
    switch (s) {
    case PC_PP_GPIPE: return "gpipe";
    case PC_PP_INTERLEAVED: return "interleaved";
    case PC_PP_NAIVE: return "naive";
    case PC_PP_ZB_H1: return "zb-h1";
    case PC_PP_ZB_V: return "zb-v";
    case PC_PP_DUALPIPEV: return "dualpipev";
    case PC_PP_ZB_H2: return "zb-h2";
    default: return "1f1b";
    }
}

int pconfig_splits_backward(pc_pp_schedule_t s) {
    return s == PC_PP_ZB_H1 || s == PC_PP_ZB_H2 || s == PC_PP_ZB_V || s == PC_PP_DUALPIPEV;
}

static int pipeline_validate(pconfig_t *pc, perr_t *err) {
    if (pc->n_layer_split && pc->pp < 2) /* one stage holds every layer: nothing to split */
        return perr_set(err, "pipeline-layer-split: needs pipeline-model-parallel-size > 1 (at pp %d "
                             "one stage holds every layer)", pc->pp);
    if (pc->n_layer_split && pc->n_layer_split != pc->pp)
        return perr_set(err, "pipeline-layer-split: %d entries for pipeline-model-parallel-size %d "
                             "(one per stage)", pc->n_layer_split, pc->pp);
    if (pc->vpp && pc->layers_per_vstage)
        return perr_set(err, "virtual-pipeline-model-parallel-size and "
                             "num-layers-per-virtual-pipeline-stage: give one of them");
    const int virtual = pc->vpp > 1 || pc->layers_per_vstage;
    if (virtual && pc->pp < 2)
        return perr_set(err, "%s: virtual stages need pipeline-model-parallel-size >= 2, got %d",
                        pc->vpp > 1 ? "virtual-pipeline-model-parallel-size"
                                    : "num-layers-per-virtual-pipeline-stage", pc->pp);
    if (pc->pp_schedule == PC_PP_DEFAULT)
        pc->pp_schedule = virtual ? PC_PP_INTERLEAVED : PC_PP_1F1B;
    if (pc->pp_schedule == PC_PP_INTERLEAVED) {
        if (!virtual)
            return perr_set(err, "pipeline-schedule: interleaved needs "
                                 "--virtual-pipeline-model-parallel-size V > 1 or "
                                 "--num-layers-per-virtual-pipeline-stage N");
        if (pc->pp < 2)
            return perr_set(err, "pipeline-schedule: interleaved needs pipeline-model-parallel-size "
                                 ">= 2, got %d", pc->pp);
    } else if (virtual) {
        return perr_set(err, "pipeline-schedule: %s %s; virtual stages need --pipeline-schedule "
                             "interleaved", pconfig_schedule_name(pc->pp_schedule),
                        pc->pp_schedule == PC_PP_ZB_V || pc->pp_schedule == PC_PP_DUALPIPEV
                            ? "places its two chunks per stage itself (a V)"
                            : "has one model chunk per stage");
    }
    if ((pc->given & PC_GIVEN_SCHEDULE) && pc->pp < 2) /* accepted and ignored otherwise */
        return perr_set(err, "pipeline-schedule: %s needs pipeline-model-parallel-size > 1 (there is "
                             "no pipeline to schedule at pp %d)",
                        pconfig_schedule_name(pc->pp_schedule), pc->pp);
    /* (a split schedule takes --overlap-grad-reduce: a bucket goes when its
     * units' last W ran, engine_weights_final, as Megatron-core's delayed
     * wgrad) */
    if (!pc->vpp) pc->vpp = 1; /* num-layers-per-virtual-pipeline-stage: pp.h derives it */
    return 0;
}

/* The rank list against the world: --rank-list names every world rank; a
 * patterns mapping names one data-parallel replica's, repeated here for
 * each replica (the slowest axis). The list that places every rank where
 * the order alone would is no list. */
static int rank_list_validate(pconfig_t *pc, perr_t *err) {
    const int n = pc->n_rank_list, world = pc->world_size;
    const int flag = (pc->given & PC_GIVEN_RANK_LIST) != 0;
    perr_t why;
    if (!flag && world % n == 0) {
        for (int c = n; c < world; c++)
            pc->rank_list[c] = (unsigned short)(c / n * n + pc->rank_list[c % n]);
        pc->n_rank_list = world;
    }
    if (layout_check_ranks(pc->rank_list, pc->n_rank_list, world, &why))
        return perr_set(err, "%s: %s; an entry is the world rank at a position of the rank order %s",
                        flag ? "--rank-list" : "device_mapping", why.msg, pc->order);
    int identity = 1;
    for (int c = 0; c < world; c++) identity &= pc->rank_list[c] == c;
    if (identity) pc->n_rank_list = 0;
    return 0;
}

const char *pconfig_tp_mode_name(int mode) {
    static const char *const names[] = {"1d", "2d", "2.5d", "3d"};
    return mode >= PC_TP_1D && mode <= PC_TP_3D ? names[mode] : "?";
}

/* Colossal-AI's 2-D, 2.5-D and 3-D modes: the degree's shape, and what
 * they do not combine with (yet). */
static int tp_mode_validate(const pconfig_t *pc, perr_t *err) {
    const int tp = pc->tp > 1 ? pc->tp : 1;
    if (pc->tp_depth && pc->tp_mode != PC_TP_25D)
        return perr_set(err, "tensor-parallel-depth: only mode 2.5d takes a depth (the mode is %s)",
                        pconfig_tp_mode_name(pc->tp_mode));
    if (pc->tp_mode == PC_TP_1D) return 0;
    const char *mode = pconfig_tp_mode_name(pc->tp_mode);
    if (pc->tp_mode == PC_TP_25D && !pc->tp_depth)
        return perr_set(err, "tensor-parallel-depth: missing: mode 2.5d needs --tensor-parallel-depth "
                             "D (tp = q x q x D)");
    int sub[3];
    pconfig_tp_sub(pc, sub);
    if (tp < 2 || sub[0] * sub[1] * sub[2] != tp || sub[0] < 2)
        return perr_set(err, "tensor-model-parallel-size: %d for mode %s: expected %s with q >= 2", tp,
                        mode,
                        pc->tp_mode == PC_TP_2D    ? "a square q x q (4, 9, 16, ...)"
                        : pc->tp_mode == PC_TP_3D ? "a cube q x q x q (8, 27, ...)"
                                                  : "q x q x depth");
    const struct { int bad; const char *what; } refused[] = {
        {pc->sequence_parallel, "sequence-parallel (Megatron 1-D's)"},
        {pc->tp_row_linears, "tensor-parallel-row-linears (Megatron 1-D's)"},
        {pc->ep > 1, "expert parallelism"},
        {pc->encoder_pp > 0 && pc->encoder_tp < pc->tp,
         "an encoder mesh of fewer tensor-parallel ranks (--encoder-tensor-model-parallel-size)"},
    };
    for (size_t k = 0; k < sizeof refused / sizeof *refused; k++)
        if (refused[k].bad)
            return perr_set(err, "tensor-parallel-mode: %s is not combined with %s in parity", mode,
                            refused[k].what);
    return 0;
}

/* Each microbatch's sequences are cut into whole blocks over tp's
 * sub-axes (Colossal's [b/q, s, h/q]). */
static int tp_batch_validate(const pconfig_t *pc, perr_t *err) {
    const int nb = pconfig_tp_batch_blocks(pc), per = pc->global_batch / pc->dp, m = pc->accum_degree;
    if (nb == 1) return 0;
    if (per % m || (per / m) % nb)
        return perr_set(err, "micro-batch-size: mode %s cuts each microbatch's sequences into %d "
                             "blocks (%s), but %d sequences per data-parallel rank in %d microbatches "
                             "are not whole multiples of %d",
                        pconfig_tp_mode_name(pc->tp_mode), nb,
                        pc->tp_mode == PC_TP_3D ? "q x q" : pc->tp_mode == PC_TP_25D ? "q x depth" : "q",
                        per, m, nb);
    return 0;
}

/* Megatron's rules: a method and a count belong to full recomputation
 * (given alone they would be ignored); full without them is uniform, one
 * layer a chunk (Megatron asks for both; the choice is recorded in
 * CONTRIBUTING). The count's bound is the model's (gpt_local_dims). */
static int recompute_validate(pconfig_t *pc, perr_t *err) {
    const int full = pc->recompute == MODEL_RECOMPUTE_FULL;
    if ((pc->given & PC_GIVEN_RECOMPUTE_METHOD) && !full)
        return perr_set(err, "recompute-method: needs --recompute-granularity full (%s)",
                        pc->recompute ? "selective recomputes every attention core" : "not given");
    if (pc->recompute_layers && !full)
        return perr_set(err, "recompute-num-layers: needs --recompute-granularity full (%s)",
                        pc->recompute ? "selective recomputes every attention core" : "not given");
    if (full && !pc->recompute_layers) pc->recompute_layers = 1;
    return 0;
}

/* The degrees' defaults and what each allows alone: dtypes, expert tensor
 * parallelism, context parallelism's count and comm type, then the
 * encoder, pipeline, tp mode and recompute rules, then the 1-D tp
 * options. */
static int degrees_validate(pconfig_t *pc, perr_t *err) {
    /* NeMo's (Apex's) optimizer dtypes, fp32, bf16 or fp16: the model's in
     * parity (train.c copies them into the model config, so the golden run
     * does the same; its validation checks them) */
    if (pc->tp == 0) pc->tp = 1;
    if (pc->pp == 0) pc->pp = 1;
    if (pc->cp == 0) pc->cp = 1;
    if (pc->ep == 0) pc->ep = 1;
    /* Megatron's default: experts split over the tp group as the dense
     * MLP is; 1 keeps them whole; a divisor of tp splits them over etp tp
     * ranks (the expert grid's etp fastest: tp rank t holds piece t mod
     * etp, the tp ranks of t / etp copies of one piece, as they hold the
     * same tokens). A degree not dividing tp would take ranks of other
     * tokens (cp or dp) into one expert's contraction: not built. */
    if (pc->etp == 0) pc->etp = pc->tp_row_linears ? 1 : pc->tp;
    if (pc->etp > 1 && pc->tp % pc->etp)
        return perr_set(err, "expert-tensor-parallel-size: %d: expected 1 (whole experts on every "
                             "tensor-parallel rank) or a divisor of tensor-model-parallel-size %d "
                             "(each expert's FFN split over etp of the tp ranks, which hold the same "
                             "tokens); an etp across cp or dp ranks is not built",
                        pc->etp, pc->tp);
    if (pc->etp > 1 && pc->tp_row_linears)
        return perr_set(err, "expert-tensor-parallel-size: %d with every linear row-parallel "
                             "(--tensor-parallel-row-linears): expected 1", pc->etp);
    if (pc->cp > 2047) /* model.h's options hold it in 11 bits */
        return perr_set(err, "context-parallel-size: %d, expected at most 2047", pc->cp);
    if (pc->cp_comm && pc->cp == 1)
        return perr_set(err, "cp-comm-type: a2a (Ulysses) needs context-parallel-size > 1");
    if ((pc->given & PC_GIVEN_CP_COMM) && pc->cp == 1) /* p2p too: accepted and ignored otherwise */
        return perr_set(err, "cp-comm-type: p2p (ring attention) needs context-parallel-size > 1");
    if (encoder_validate(pc, err) || pipeline_validate(pc, err) || tp_mode_validate(pc, err) ||
        recompute_validate(pc, err))
        return -1;
    if (pc->tp_row_linears && pc->tp == 1)
        return perr_set(err, "tensor-parallel-row-linears: needs tensor-model-parallel-size > 1");
    if (pc->tp_row_linears && pc->sequence_parallel)
        return perr_set(err, "sequence-parallel: not with every linear row-parallel "
                             "(--tensor-parallel-row-linears, sharding_dim 0)");
    if (pc->sequence_parallel && pc->tp == 1)
        return perr_set(err, "sequence-parallel: needs tensor-model-parallel-size > 1 (it shards "
                             "the regions tensor parallelism replicates)");
    return 0;
}

/* The world against the degrees: at most PARITY_MAX_DEVICES, every axis
 * larger than 1 in the rank order, dp inferred from --world-size where
 * not given (*dp_inferred_out), expert parallelism within dp.
 * *model_par_out: one data-parallel replica's devices. */
static int world_validate(pconfig_t *pc, int *model_par_out, int *dp_inferred_out, perr_t *err) {
    /* degrees are <= PARITY_MAX_DEVICES each: their products in 64 bits, the world at most
     * PARITY_MAX_DEVICES simulated devices */
    const long long mp = pconfig_replica_devices(pc);
    if (mp > PARITY_MAX_DEVICES || (long long)(pc->dp ? pc->dp : 1) * mp > PARITY_MAX_DEVICES)
        return perr_set(err, "world-size: tp %d x pp %d x cp %d x dp %d devices exceeds the %d "
                             "simulated devices parity runs", pc->tp, pc->pp, pc->cp,
                        pc->dp ? pc->dp : 1, PARITY_MAX_DEVICES);
    int model_par = (int)mp; /* devices of one data-parallel replica */
    const struct { const char *name; int size; } axes[] = {
        {"tp", pc->tp}, {"pp", pc->pp}, {"cp", pc->cp}, {"ep", pc->ep}, {"dp", pc->dp}};
    for (int a = 0; a < 5; a++)
        if (axes[a].size > 1 && !strstr(pc->order, axes[a].name))
            return perr_set(err, "rank-order: '%s' leaves out %s, whose size is %d", pc->order,
                            axes[a].name, axes[a].size);
    const int dp_inferred = pc->dp == 0;
    if (pc->dp == 0) { /* inferred from the world size, as Megatron does */
        int world = pc->world_size ? pc->world_size : model_par; /* dp = 1 */
        if (world % model_par)
            return perr_set(err, "world-size: %d is not divisible by %s = %d", world, replica_name(pc),
                            model_par);
        pc->dp = world / model_par;
    }
    if (pc->world_size && pc->world_size != pc->dp * model_par)
        return perr_set(err, "world-size: %d does not equal data-parallel-size %d x %s %d",
                        pc->world_size, pc->dp, replica_name(pc), model_par);
    pc->world_size = pc->dp * model_par;
    /* Megatron's expert grid (pconfig_ep_folded): ep ranks out of dp, or
     * folded onto tp (etp 1) or cp (etp tp), then the rest of ep out of dp */
    if (pc->etp > 1 && pc->etp < pc->tp && pconfig_hetero(pc))
        return perr_set(err, "expert-tensor-parallel-size: %d < tensor-model-parallel-size %d: not "
                             "with an encoder mesh beside the decoder's", pc->etp, pc->tp);
    const long long stage = (long long)pc->tp * pc->cp * pc->dp; /* a stage's ranks */
    if (pc->ep > 1 && (stage % pc->etp || (stage / pc->etp) % pc->ep))
        return perr_set(err, "expert-model-parallel-size: %d does not divide the %lld ranks of a "
                             "pipeline stage over expert-tensor-parallel-size %d (tp %d x cp %d x dp "
                             "%d / etp): no expert grid etp x ep x edp tiles them (Megatron-core's "
                             "rule)", pc->ep, stage, pc->etp, pc->tp, pc->cp, pc->dp);
    const int fold = pconfig_ep_folded(pc), ep_dp = pconfig_ep_axis(pc);
    if ((fold && pc->dp % ep_dp) || (!fold && pc->dp % pc->ep))
        return perr_set(err, "expert-model-parallel-size: %d must divide data-parallel-size %d "
                             "(the expert-parallel ranks are data-parallel ranks, Megatron's rule), "
                             "or equal tensor-model-parallel-size %d with "
                             "--expert-tensor-parallel-size 1 (folded onto the tp ranks), or divide "
                             "tp (etp 1), or be tp (etp 1, cp 1) or cp (etp tp) times a divisor of dp "
                             "(Megatron's expert rank order, etp fastest: the folded grid)",
                        pc->ep, pc->dp, pc->tp);
    *model_par_out = model_par, *dp_inferred_out = dp_inferred;
    return 0;
}

/* The rank list, then ZeRO and the distributed optimizer, offload and
 * parameter gathering, and the buffers and buckets. */
static int optimizer_validate(pconfig_t *pc, perr_t *err) {
    if (pc->n_rank_list && rank_list_validate(pc, err)) return -1;
    if (pc->use_distributed_optimizer && !(pc->given & PC_GIVEN_ZERO)) pc->zero_stage = 1;
    if (pc->use_distributed_optimizer && pc->zero_stage == 0)
        return perr_set(err, "zero-stage: 0 contradicts --use-distributed-optimizer (stage >= 1)");
    if (pc->offload && pc->zero_stage == 0)
        return perr_set(err, "offload-optimizer: %s needs the optimizer state sharded (--zero-stage "
                             ">= 1, as DeepSpeed's ZeRO-Offload); DDP keeps it in every replica",
                        pconfig_offload_name(pc->offload));
    if (pc->offload == PC_OFFLOAD_NVME && !pc->offload_path[0])
        return perr_set(err, "offload-optimizer: nvme needs --offload-path DIR (where each rank's "
                             "optimizer file goes)");
    if (pc->offload_path[0] && pc->offload != PC_OFFLOAD_NVME)
        return perr_set(err, "offload-path: only --offload-optimizer nvme reads it (here %s)",
                        pconfig_offload_name(pc->offload));
    /* stages 1-2: the optimizer's all-gather overlaps the update; 3: each
     * unit's all-gather is prefetched while the unit before it runs */
    if (pc->overlap_param_gather && pc->zero_stage == 0)
        return perr_set(err, "overlap-param-gather: needs the distributed optimizer (ZeRO stage 1 "
                             "or 2, its all-gather after the update) or ZeRO-3 (each unit's, "
                             "prefetched); stage 0 gathers no parameters");
    if (!pc->contiguous_grad_buffer || !pc->contiguous_param_buffer)
        return perr_set(err, "%s: not supported: parity always keeps a replica's %s in one "
                             "contiguous buffer (and shards as back-to-back bucket pieces)",
                        !pc->contiguous_grad_buffer ? "contiguous-grad-buffer" : "contiguous-param-buffer",
                        !pc->contiguous_grad_buffer ? "rounded gradients" : "parameters");
    if (!(pc->bucket_cap_mb > 0.0))
        return perr_set(err, "bucket-cap-mb: expected > 0, got %g", pc->bucket_cap_mb);
    return 0;
}

/* The global batch over dp ranks and microbatches (--accum-degree or
 * --micro-batch-size), then what tp modes and pipeline schedules need of
 * the microbatch count. */
static int batch_validate(pconfig_t *pc, int model_global_batch, int model_par, int dp_inferred,
                          perr_t *err) {
    if (!pc->global_batch) pc->global_batch = model_global_batch;
    if (pc->global_batch < 1) /* only a model without sequences gets here (flags need >= 1) */
        return perr_set(err, "global-batch-size: %d: expected at least 1 sequence per step",
                        pc->global_batch);
    int B = pc->global_batch, dp = pc->dp;
    if (B % dp && dp_inferred && pc->world_size > 1)
        return perr_set(err, "world-size: %d devices / %s %d = data-parallel-size %d, which does not "
                             "divide the global batch of %d sequences (each rank needs whole sequences)",
                        pc->world_size, replica_name(pc), model_par, dp, B);
    if (B % dp)
        return perr_set(err, "data-parallel-size: %d does not divide the global batch of %d "
                             "sequences (each rank needs whole sequences)", dp, B);
    if (pc->given & PC_GIVEN_ACCUM) {
        /* exact sums make any split of a rank's sequences into microbatches
         * give the golden bits, so --accum-degree need not divide them: the
         * sizes differ by at most one (micro_batch is the largest) */
        const char *accum = pc->given & PC_GIVEN_NUM_MB ? "num-microbatches" : "accum-degree";
        if (pc->accum_degree > B / dp)
            return perr_set(err, "%s: %d microbatches need at least %d sequences per "
                                 "data-parallel rank, but there are %d (global batch %d / dp %d)",
                            accum, pc->accum_degree, pc->accum_degree, B / dp, B, dp);
        int micro = (B / dp + pc->accum_degree - 1) / pc->accum_degree;
        if ((pc->given & PC_GIVEN_MICRO) && pc->micro_batch != micro)
            return perr_set(err, "micro-batch-size: %d contradicts %s %d "
                                 "(global %d / (dp %d x accum %d) = %d)",
                            pc->micro_batch, accum, pc->accum_degree, B, dp, pc->accum_degree, micro);
        pc->micro_batch = micro;
    } else {
        if (!pc->micro_batch) pc->micro_batch = B / dp;
        if ((B / dp) % pc->micro_batch)
            return perr_set(err, "micro-batch-size: %d does not divide the %d sequences per "
                                 "data-parallel rank (global batch %d / dp %d)",
                            pc->micro_batch, B / dp, B, dp);
        pc->accum_degree = B / dp / pc->micro_batch;
    }
    if (tp_batch_validate(pc, err)) return -1;
    if (pc->pp_schedule == PC_PP_DUALPIPEV && pc->accum_degree < 2 * pc->pp)
        return perr_set(err, "num-microbatches: %d, but dualpipev needs at least 2 x pipeline-model-"
                             "parallel-size = %d (microbatches enter at both arms of the V)",
                        pc->accum_degree, 2 * pc->pp);
    if (pc->pp_schedule == PC_PP_INTERLEAVED && pc->accum_degree % pc->pp)
        return perr_set(err, "num-microbatches: %d is not a multiple of pipeline-model-parallel-size "
                             "%d, which the interleaved schedule needs (microbatches go round the "
                             "stages in groups of pp)", pc->accum_degree, pc->pp);
    return 0;
}

int pconfig_validate(pconfig_t *pc, int model_global_batch, perr_t *err) {
    int model_par = 0, dp_inferred = 0; /* set by world_validate */
    if (degrees_validate(pc, err) || world_validate(pc, &model_par, &dp_inferred, err) ||
        optimizer_validate(pc, err) ||
        batch_validate(pc, model_global_batch, model_par, dp_inferred, err))
        return -1;
    return 0;
}
