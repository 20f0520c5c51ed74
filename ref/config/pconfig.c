/* pconfig.c - Megatron-style layout flags and their validation. */
#include "parity/pconfig.h"

#include <errno.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>

#include "model/gpt.h"
#include "parity/numparse.h"
#include "parity/runtime.h"

const char *pconfig_offload_name(int offload) {
    return offload == PC_OFFLOAD_CPU ? "cpu" : offload == PC_OFFLOAD_NVME ? "nvme" : "none";
}

void pconfig_defaults(pconfig_t *pc) {
    memset(pc, 0, sizeof *pc);
    strcpy(pc->order, "tp-cp-ep-dp-pp");
    pc->bucket_cap_mb = 40.0; /* Megatron's DDP default */
    pc->contiguous_grad_buffer = 1;
    pc->contiguous_param_buffer = 1;
}

static int parse_int(const char *flag, const char *s, int lo, int hi, int *out, perr_t *err) {
    long long v;
    if (num_parse_int(flag, s, lo, hi, &v, err)) return -1;
    *out = (int)v;
    return 0;
}

static int parse_dtype(const char *flag, const char *s, pc_dtype_t *out, perr_t *err) {
    static const char *names[] = {"fp32", "bf16", "fp16"};
    for (int k = 0; k < 3; k++)
        if (s && !strcmp(s, names[k])) {
            *out = (pc_dtype_t)k;
            return 0;
        }
    return perr_set(err, "%s: expected fp32, bf16 or fp16, got '%s'", flag, s ? s : "(nothing)");
}

/* A list of integers such as 3,3,2, each in [lo, hi], at most max of
 * them, into out[0 .. *n) (numparse's list); otherwise "FLAG: expected
 * WHAT, got '...'" or "FLAG: more than MAX NOUN". */
static int parse_list(const char *flag, const char *val, long lo, long hi, int max, const char *what,
                      const char *noun, int *out, int *n, perr_t *err) {
    perr_t why;
    int entries = 1;
    for (const char *c = val; *c; c++) entries += *c == ',';
    if (entries > max) return perr_set(err, "%s: more than %d %s", flag, max, noun);
    long long *v = malloc((size_t)entries * sizeof *v);
    if (!v) return perr_set(err, "%s: out of memory", flag);
    const int bad = num_parse_int_list(flag, val, lo, hi, entries, v, n, &why);
    for (int k = 0; !bad && k < *n; k++) out[k] = (int)v[k];
    free(v);
    if (bad) return perr_set(err, "%s: expected %s, got '%s'", flag, what, val);
    return 0;
}

typedef struct {
    const char *flag;
    int *field;
    int lo, hi;
    unsigned given;
} int_flag_t;

int pconfig_parse_flag(pconfig_t *pc, int argc, char **argv, int *i, perr_t *err) {
    const char *flag = argv[*i], *val = *i + 1 < argc ? argv[*i + 1] : NULL;
    const int_flag_t ints[] = {
        {"--world-size", &pc->world_size, 1, PARITY_MAX_DEVICES, PC_GIVEN_WORLD},
        {"--data-parallel-size", &pc->dp, 1, PARITY_MAX_DEVICES, PC_GIVEN_DP},
        {"--tensor-model-parallel-size", &pc->tp, 1, PARITY_MAX_DEVICES, 0},
        {"--pipeline-model-parallel-size", &pc->pp, 1, PARITY_MAX_DEVICES, 0},
        {"--context-parallel-size", &pc->cp, 1, PARITY_MAX_DEVICES, 0},
        {"--expert-model-parallel-size", &pc->ep, 1, PARITY_MAX_DEVICES, 0},
        {"--expert-tensor-parallel-size", &pc->etp, 1, PARITY_MAX_DEVICES, PC_GIVEN_ETP},
        {"--global-batch-size", &pc->global_batch, 1, INT_MAX, PC_GIVEN_GLOBAL},
        {"--micro-batch-size", &pc->micro_batch, 1, INT_MAX, PC_GIVEN_MICRO},
        {"--accum-degree", &pc->accum_degree, 1, INT_MAX, PC_GIVEN_ACCUM},
        {"--num-microbatches", &pc->accum_degree, 1, INT_MAX, PC_GIVEN_ACCUM | PC_GIVEN_NUM_MB},
        {"--virtual-pipeline-model-parallel-size", &pc->vpp, 1, PC_MAX_CHUNKS, 0},
        {"--num-layers-per-virtual-pipeline-stage", &pc->layers_per_vstage, 1, 4096, 0},
        {"--zero-stage", &pc->zero_stage, 0, 3, PC_GIVEN_ZERO},
        {"--encoder-tensor-model-parallel-size", &pc->encoder_tp, 1, PARITY_MAX_DEVICES,
         PC_GIVEN_ENCODER_TP},
        {"--encoder-pipeline-model-parallel-size", &pc->encoder_pp, 0, PARITY_MAX_DEVICES,
         PC_GIVEN_ENCODER_PP},
        {"--tensor-parallel-depth", &pc->tp_depth, 1, PARITY_MAX_DEVICES, 0},
    };
    for (size_t k = 0; k < sizeof ints / sizeof ints[0]; k++) {
        if (strcmp(flag, ints[k].flag)) continue;
        /* one field, two names: given both, which would win is a guess */
        if ((ints[k].given & PC_GIVEN_ACCUM) && (pc->given & PC_GIVEN_ACCUM) &&
            !(pc->given & PC_GIVEN_NUM_MB) != !(ints[k].given & PC_GIVEN_NUM_MB))
            return perr_set(err, "%s: --num-microbatches and --accum-degree are one setting; give one",
                            flag);
        if (!strcmp(flag, "--zero-stage") && val && num_is_decimal(val, 0) &&
            strcmp(val, "0") && strcmp(val, "1") && strcmp(val, "2") && strcmp(val, "3"))
            /* a clearer message than the range for the common mistake */
            return perr_set(err, "--zero-stage: unknown ZeRO stage %s (expected 0, 1, 2 or 3)", val);
        if (parse_int(flag, val, ints[k].lo, ints[k].hi, ints[k].field, err)) return -1;
        pc->given |= ints[k].given;
        *i += 2;
        return 1;
    }
    if (!strcmp(flag, "--rank-order")) {
        /* the runtime's own validator: each of tp, cp, ep, dp, pp at most
         * once; a dimension the order leaves out has size 1 */
        rank_layout_t L;
        perr_t why;
        if (num_flag_value(flag, val, err)) return -1;
        if (strlen(val) >= sizeof pc->order || layout_init(&L, val, NULL, &why))
            return perr_set(err, "--rank-order: expected an order such as tp-cp-ep-dp-pp, got "
                                 "'%s'%s%s",
                            val, strlen(val) >= sizeof pc->order ? "" : ": ",
                            strlen(val) >= sizeof pc->order ? "" : why.msg);
        strcpy(pc->order, val);
        pc->given |= PC_GIVEN_ORDER;
        *i += 2;
        return 1;
    }
    if (!strcmp(flag, "--recompute-granularity") || !strcmp(flag, "--recompute-method")) {
        /* Megatron's names: full (a layer's input kept; uniform chunks of
         * N layers or the first N layers, block) or selective (attention's
         * core recomputed) */
        if (num_flag_value(flag, val, err)) return -1;
        const int gran = flag[12] == 'g';
        const char *names[2][2] = {{"uniform", "block"}, {"full", "selective"}};
        int k = 0;
        while (k < 2 && strcmp(val, names[gran][k])) k++;
        if (k == 2)
            return perr_set(err, "%s: unknown value '%s' (expected %s or %s)", flag, val,
                            names[gran][0], names[gran][1]);
        if (gran) pc->recompute = k ? MODEL_RECOMPUTE_SELECTIVE : MODEL_RECOMPUTE_FULL;
        else pc->recompute_block = k, pc->given |= PC_GIVEN_RECOMPUTE_METHOD;
        *i += 2;
        return 1;
    }
    if (!strcmp(flag, "--offload-optimizer")) {
        if (num_flag_value(flag, val, err)) return -1;
        int k = PC_OFFLOAD_NONE;
        while (k <= PC_OFFLOAD_NVME && strcmp(val, pconfig_offload_name(k))) k++;
        if (k > PC_OFFLOAD_NVME)
            return perr_set(err, "%s: unknown value '%s' (expected none, cpu or nvme)", flag, val);
        pc->offload = k;
        *i += 2;
        return 1;
    }
    if (!strcmp(flag, "--offload-path")) {
        if (num_flag_value(flag, val, err)) return -1;
        if (!val[0] || strlen(val) >= sizeof pc->offload_path)
            return perr_set(err, "--offload-path: expected a directory of 1 to %zu bytes, got %zu",
                            sizeof pc->offload_path - 1, strlen(val));
        for (const char *c = val; *c; c++) /* it is printed in --print-layout's JSON as it is */
            if (*c == '"' || *c == '\\' || (unsigned char)*c < 0x20)
                return perr_set(err, "--offload-path: a quote, backslash or control byte is not "
                                     "accepted in the directory's name");
        strcpy(pc->offload_path, val);
        *i += 2;
        return 1;
    }
    if (!strcmp(flag, "--recompute-num-layers")) {
        if (parse_int(flag, val, 1, MODEL_MAX_LAYERS, &pc->recompute_layers, err)) return -1;
        *i += 2;
        return 1;
    }
    if (!strcmp(flag, "--tensor-parallel-mode")) {
        if (num_flag_value(flag, val, err)) return -1;
        int mode = -1;
        for (int m = PC_TP_1D; m <= PC_TP_3D; m++)
            if (!strcmp(val, pconfig_tp_mode_name(m))) mode = m;
        if (mode < 0)
            return perr_set(err, "--tensor-parallel-mode: expected 1d, 2d, 2.5d or 3d (Colossal-AI's "
                                 "modes), got '%s'", val);
        pc->tp_mode = mode;
        *i += 2;
        return 1;
    }
    if (!strcmp(flag, "--cp-comm-type")) {
        if (num_flag_value(flag, val, err)) return -1;
        if (!strcmp(val, "p2p") || !strcmp(val, "a2a"))
            pc->cp_comm = val[0] == 'a';
        else if (!strcmp(val, "all_gather") || !strcmp(val, "a2a+p2p"))
            return perr_set(err, "--cp-comm-type: '%s' is Megatron's, but parity implements p2p "
                                 "(the ring) and a2a (Ulysses) only", val);
        else
            return perr_set(err, "--cp-comm-type: expected p2p or a2a, got '%s'", val);
        pc->given |= PC_GIVEN_CP_COMM;
        *i += 2;
        return 1;
    }
    if (!strcmp(flag, "--pipeline-schedule")) {
        if (num_flag_value(flag, val, err)) return -1;
        int found = -1;
        for (int k = 0; k < 7; k++)
            if (!strcmp(val, pconfig_schedule_name((pc_pp_schedule_t)(PC_PP_1F1B + k)))) found = k;
        if (found < 0)
            return perr_set(err, "--pipeline-schedule: expected gpipe, 1f1b, interleaved, naive, "
                                 "zb-h1, zb-v or dualpipev, got '%s'", val);
        pc->pp_schedule = (pc_pp_schedule_t)(PC_PP_1F1B + found);
        pc->given |= PC_GIVEN_SCHEDULE;
        *i += 2;
        return 1;
    }
    if (!strcmp(flag, "--pipeline-layer-split")) {
        if (num_flag_value(flag, val, err) ||
            parse_list(flag, val, 1, 4096, PC_MAX_SPLIT, "layers per stage such as 3,3,2 (each >= 1)",
                       "stages", pc->layer_split, &pc->n_layer_split, err))
            return -1;
        *i += 2;
        return 1;
    }
    if (!strcmp(flag, "--rank-list")) {
        /* the world rank at each canonical position of the rank order;
         * pconfig_validate checks it is a permutation of the world */
        int ranks[PC_MAX_RANKS];
        if (num_flag_value(flag, val, err) ||
            parse_list(flag, val, 0, PC_MAX_RANKS - 1, PC_MAX_RANKS,
                       "the world rank at each position of the rank order, such as 3,0,2,1",
                       "ranks", ranks, &pc->n_rank_list, err))
            return -1;
        for (int c = 0; c < pc->n_rank_list; c++) pc->rank_list[c] = (unsigned short)ranks[c];
        pc->given |= PC_GIVEN_RANK_LIST;
        *i += 2;
        return 1;
    }
    if (!strcmp(flag, "--bucket-cap-mb")) {
        double v;
        if (num_parse_double(flag, val, 0.0, 1e6, &v, err)) return -1;
        if (!(v > 0.0))
            return perr_set(err, "--bucket-cap-mb: expected a size in MB > 0, got '%s'", val);
        pc->bucket_cap_mb = v;
        pc->given |= PC_GIVEN_BUCKET;
        *i += 2;
        return 1;
    }
    if (!strcmp(flag, "--dtype") || !strcmp(flag, "--grad-sync-dtype")) {
        if (num_flag_value(flag, val, err)) return -1;
        if (parse_dtype(flag, val, flag[2] == 'd' ? &pc->dtype : &pc->grad_sync_dtype, err))
            return -1;
        *i += 2;
        return 1;
    }
    struct { const char *flag; int *field; int value; } bools[] = {
        {"--use-distributed-optimizer", &pc->use_distributed_optimizer, 1},
        {"--overlap-grad-reduce", &pc->overlap_grad_reduce, 1},
        {"--sequence-parallel", &pc->sequence_parallel, 1},
        {"--tensor-parallel-row-linears", &pc->tp_row_linears, 1},
        {"--overlap-param-gather", &pc->overlap_param_gather, 1},
        {"--no-contiguous-grad-buffer", &pc->contiguous_grad_buffer, 0},
        {"--no-contiguous-param-buffer", &pc->contiguous_param_buffer, 0},
    };
    for (size_t k = 0; k < sizeof bools / sizeof bools[0]; k++) {
        if (strcmp(flag, bools[k].flag)) continue;
        *bools[k].field = bools[k].value;
        *i += 1;
        return 1;
    }
    return 0;
}


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
    if (pc->encoder_tp < pc->tp && (pc->n_rank_list || pc->ep > 1))
        return perr_set(err, "encoder-tensor-model-parallel-size: %d < tensor-model-parallel-size "
                             "%d (an encoder mesh beside the decoder's): not with %s",
                        pc->encoder_tp, pc->tp, pc->n_rank_list ? "--rank-list" : "expert parallelism");
    if (pc->vpp > 1 || pc->layers_per_vstage)
        return perr_set(err, "encoder-pipeline-model-parallel-size: not with virtual pipeline "
                             "stages (Megatron's encoder pipeline has one chunk a stage)");
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
    default: return "1f1b";
    }
}

int pconfig_splits_backward(pc_pp_schedule_t s) {
    return s == PC_PP_ZB_H1 || s == PC_PP_ZB_V || s == PC_PP_DUALPIPEV;
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
    if (pconfig_splits_backward(pc->pp_schedule) && pc->overlap_grad_reduce)
        return perr_set(err, "pipeline-schedule: %s defers weight gradients to W passes; "
                             "--overlap-grad-reduce (buckets reduced as each unit's backward ends) "
                             "is not built with it", pconfig_schedule_name(pc->pp_schedule));
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
        {pc->cp > 1, "context-parallel-size > 1"},
        {pc->ep > 1, "expert parallelism"},
        {pc->encoder_pp > 0, "an encoder's own degrees"},
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

int pconfig_validate(pconfig_t *pc, int model_global_batch, perr_t *err) {
    /* NeMo's (Apex's) optimizer dtypes: the model's in parity (train.c
     * copies them into the model config, so the golden run does the same) */
    if (pc->dtype == PC_DTYPE_FP16)
        return perr_set(err, "dtype: fp16 optimizer state is not supported (bf16 and fp32 are; "
                             "for fp16 training use --fp16)");
    if (pc->grad_sync_dtype == PC_DTYPE_FP16)
        return perr_set(err, "grad_sync_dtype: fp16 is not supported (bf16 and fp32 are; an fp16 "
                             "gradient sync needs the loss scale there)");
    if (pc->tp == 0) pc->tp = 1;
    if (pc->pp == 0) pc->pp = 1;
    if (pc->cp == 0) pc->cp = 1;
    if (pc->ep == 0) pc->ep = 1;
    /* Megatron's default: experts split over the tp group as the dense
     * MLP is; 1 keeps them whole. Other degrees would fold the expert
     * grid across cp or dp ranks (Megatron's parallel folding): not built. */
    if (pc->etp == 0) pc->etp = pc->tp_row_linears ? 1 : pc->tp;
    if (pc->etp != 1 && pc->etp != pc->tp)
        return perr_set(err, "expert-tensor-parallel-size: %d: expected 1 (whole experts on every "
                             "tensor-parallel rank) or tensor-model-parallel-size %d (each expert's "
                             "FFN split over the tp group); other degrees are not built",
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
    if (pc->dp % pc->ep && !pconfig_ep_folded(pc))
        return perr_set(err, "expert-model-parallel-size: %d must divide data-parallel-size %d "
                             "(the expert-parallel ranks are data-parallel ranks, Megatron's rule), "
                             "or equal tensor-model-parallel-size %d with "
                             "--expert-tensor-parallel-size 1 (folded onto the tp ranks)",
                        pc->ep, pc->dp, pc->tp);
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
    if (pc->overlap_param_gather && pc->zero_stage != 1 && pc->zero_stage != 2)
        return perr_set(err, "overlap-param-gather: needs the distributed optimizer (ZeRO stage 1 "
                             "or 2) whose parameter all-gather it overlaps; stage %d %s",
                        pc->zero_stage,
                        pc->zero_stage == 0 ? "gathers no parameters"
                                            : "gathers each unit just in time (not yet prefetched)");
    if (!pc->contiguous_grad_buffer || !pc->contiguous_param_buffer)
        return perr_set(err, "%s: not supported: parity always keeps a replica's %s in one "
                             "contiguous buffer (and shards as back-to-back bucket pieces)",
                        !pc->contiguous_grad_buffer ? "contiguous-grad-buffer" : "contiguous-param-buffer",
                        !pc->contiguous_grad_buffer ? "rounded gradients" : "parameters");
    if (!(pc->bucket_cap_mb > 0.0))
        return perr_set(err, "bucket-cap-mb: expected > 0, got %g", pc->bucket_cap_mb);
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

void pconfig_describe(const pconfig_t *pc, char *buf, size_t len) {
    char tp[64] = "", pp[48] = "";
    if (pc->tp > 1 && pc->tp_mode != PC_TP_1D) {
        int sub[3];
        pconfig_tp_sub(pc, sub);
        snprintf(tp, sizeof tp, "tp=%d %s(%dx%dx%d) ", pc->tp, pconfig_tp_mode_name(pc->tp_mode),
                 sub[0], sub[1], sub[2]);
    } else if (pc->tp > 1)
        snprintf(tp, sizeof tp, "tp=%d%s%s ", pc->tp, pc->sequence_parallel ? " sp" : "",
                 pc->tp_row_linears ? " row" : "");
    if (pc->encoder_pp)
        snprintf(pp, sizeof pp, "epp=%d pp=%d %s ", pc->encoder_pp, pc->decoder_pp,
                 (pc->pp_schedule ? pconfig_schedule_name(pc->pp_schedule) : ""));
    else if (pc->pp > 1)
        snprintf(pp, sizeof pp, "pp=%d %s ", pc->pp, (pc->pp_schedule ? pconfig_schedule_name(pc->pp_schedule) : ""));
    char cp[32] = "";
    if (pc->cp > 1) snprintf(cp, sizeof cp, "cp=%d %s ", pc->cp, pc->cp_comm ? "a2a" : "p2p");
    char ep[32] = ""; /* expert-parallel ranks, out of the data-parallel ones */
    if (pc->ep > 1) snprintf(ep, sizeof ep, " ep=%d%s", pc->ep, pconfig_ep_folded(pc) ? "(tp)" : "");
    if (pc->etp == 1 && pc->tp > 1 && !pc->tp_row_linears) /* not the default: say so */
        snprintf(ep + strlen(ep), sizeof ep - strlen(ep), " etp=1");
    char recompute[48] = "";
    if (pc->recompute == MODEL_RECOMPUTE_SELECTIVE) snprintf(recompute, sizeof recompute, " recompute=selective");
    else if (pc->recompute)
        snprintf(recompute, sizeof recompute, " recompute=full %s %d",
                 pc->recompute_block ? "block" : "uniform", pc->recompute_layers);
    snprintf(buf, len, "%s%s%sdp=%d%s zero=%d accum=%d micro=%d%s%s%s%s%s", tp, cp, pp, pc->dp, ep,
             pc->zero_stage, pc->accum_degree, pc->micro_batch,
             pc->overlap_grad_reduce ? " overlap-grad" : "",
             pc->overlap_param_gather ? " overlap-param" : "", recompute,
             pc->offload ? " offload=" : "", pc->offload ? pconfig_offload_name(pc->offload) : "");
}

void pconfig_print_help(FILE *f) {
    fputs("layout (Megatron-style):\n"
          "  --data-parallel-size N | --world-size N   data-parallel degree (dp = world/(tp*pp*cp))\n"
          "  --tensor-model-parallel-size N   Megatron 1-D tensor parallelism (heads, FFN and\n"
          "                            vocabulary tiles split, whole tiles of unequal counts\n"
          "                            where tp does not divide them, the first ranks one more;\n"
          "                            exact row-parallel sums)\n"
          "  --sequence-parallel       with tp: LayerNorm and dropout regions hold T/tp positions\n"
          "                            (all-gather before column-, reduce-scatter after row-parallel)\n"
          "  --tensor-parallel-row-linears   with tp: every linear split on its input features (row-\n"
          "                            parallel, outputs completed across tp), attention and GeLU whole\n"
          "  --tensor-parallel-mode 1d|2d|2.5d|3d   Colossal-AI's mode for the tp devices: 1d\n"
          "                            (Megatron's, the default), 2d (SUMMA on q x q), 2.5d (q x q x\n"
          "                            depth), 3d (q x q x q); an order's tp is then tp-tp2-tp3\n"
          "  --tensor-parallel-depth D 2.5d's depth (tp = q x q x D)\n"
          "  --recompute-granularity full|selective   activation recomputation (the same bits):\n"
          "                            full keeps a chunk of layers' input and runs its forward again\n"
          "                            in the backward; selective keeps all but attention's core\n"
          "                            (scores, softmax, dropout), recomputed from qkv\n"
          "  --recompute-method uniform|block   full: chunks of N layers (uniform, the default), or\n"
          "                            only the first N layers of each stage's run, each alone (block)\n"
          "  --recompute-num-layers N  full: N (default 1; at most the model's layers; block: at\n"
          "                            most a stage's run of layers)\n"
          "  --offload-optimizer none|cpu|nvme   DeepSpeed's ZeRO-Offload (--zero-stage >= 1): each\n"
          "                            rank's optimizer shard in a host arena (cpu) or a file read\n"
          "                            and written bucket by bucket around the update (nvme)\n"
          "  --offload-path DIR        nvme: an existing directory; the ranks' optimizer files go\n"
          "                            into a directory of the run's own in it,\n"
          "                            parity-offload-PID-XXXXXX, removed when the run ends (scratch,\n"
          "                            never kept to resume from: --save is); its lock,\n"
          "                            parity-offload.lock, refuses a second run there, naming its\n"
          "                            pid; the next run removes a SIGKILLed run's leftovers (a note)\n"
          "  --pipeline-model-parallel-size N   pipeline stages (layers split uniformly)\n"
          "  --pipeline-layer-split A,B,..  layers per stage instead (one entry per stage)\n"
          "  --encoder-pipeline-model-parallel-size N   an encoder-decoder's encoder on N stages of\n"
          "                            its own before the decoder's pp (Megatron-core 0.9-0.13)\n"
          "  --encoder-tensor-model-parallel-size N   the encoder's tp (<= tp; default tp; needs the\n"
          "                            encoder's own stages; below tp: not built yet)\n"
          "  --pipeline-schedule gpipe|1f1b|interleaved|naive|zb-h1|zb-v|dualpipev   (default 1f1b;\n"
          "                           zero-bubble ones split each backward into B and W; interleaved with virtual\n"
          "                            stages; naive: one microbatch at a time, no pipelining)\n"
          "  --virtual-pipeline-model-parallel-size V | --num-layers-per-virtual-pipeline-stage N\n"
          "                            interleaving: V model chunks per stage\n"
          "  --num-microbatches N      microbatches per step and data-parallel rank (= --accum-degree)\n"
          "  --context-parallel-size N  split every sequence over N ranks (weight gradients summed\n"
          "                            over dp x cp)\n"
          "  --cp-comm-type p2p|a2a    p2p: ring attention, rank r keeps chunks r and 2N-1-r of 2N;\n"
          "                            a2a: DeepSpeed-Ulysses, all-to-all sequence <-> heads\n"
          "  --expert-model-parallel-size N   MoE models: N of the data-parallel ranks split the\n"
          "                            experts (each runs E/N of them for the N ranks' tokens,\n"
          "                            rows exchanged by all-to-all-v); N divides dp and E,\n"
          "                            or N = tp with --expert-tensor-parallel-size 1: folded\n"
          "                            onto the tp ranks (Megatron's parallel folding)\n"
          "  --expert-tensor-parallel-size N   MoE models: tp (default: each expert's FFN split over\n"
          "                            tp) or 1 (whole)\n"
          "  --rank-order ORDER        Megatron's rank order, first fastest (default tp-cp-ep-dp-pp)\n"
          "  --rank-list R0,R1,..      the world rank at each position of the rank order (a\n"
          "                            permutation of 0..world-1): e.g. tp=2 pp=2 with 3,0,2,1 puts\n"
          "                            stage 0's shards on devices 3 and 0, stage 1's on 2 and 1\n"
          "  --global-batch-size N --micro-batch-size N   accumulation = global/(micro*dp)\n"
          "  --accum-degree N          accumulation steps, directly\n"
          "  --zero-stage 0|1|2|3      0 DDP, 1 optimizer state, 2 + gradients, 3 + parameters\n"
          "  --use-distributed-optimizer   ZeRO-1 (NeMo/Megatron distributed optimizer)\n"
          "  --overlap-grad-reduce     reduce gradient buckets on a communication thread\n"
          "  --overlap-param-gather    gather parameters on a communication thread\n"
          "  --bucket-cap-mb X         gradient bucket size (default 40)\n"
          "  --dtype fp32 --grad-sync-dtype fp32   (bf16/fp16: not yet supported)\n",
          f);
}
