/* pconfig.c - Megatron-style layout flags: defaults, parsing (one phase a
 * group of flags), the one-line description and the help text. Their
 * validation against each other and the model is pconfig_validate.c's. */
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

/* Each parse_*_flag: 1 when flag is one of its own (parsed, *i past it
 * and its value), 0 when not, -1 after a message naming it. */

/* The degrees and batch sizes: integers in a range. */
static int parse_degree_flag(pconfig_t *pc, const char *flag, const char *val, int *i,
                             perr_t *err) {
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
    return 0;
}

/* Where ranks go: the rank order, a rank list, the pipeline's layer split. */
static int parse_order_flag(pconfig_t *pc, const char *flag, const char *val, int *i,
                            perr_t *err) {
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
    return 0;
}

/* The modes: tp's, context parallelism's communication, the pipeline's schedule. */
static int parse_mode_flag(pconfig_t *pc, const char *flag, const char *val, int *i,
                           perr_t *err) {
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
        for (int k = 0; k <= PC_PP_ZB_H2 - PC_PP_1F1B; k++)
            if (!strcmp(val, pconfig_schedule_name((pc_pp_schedule_t)(PC_PP_1F1B + k)))) found = k;
        if (found < 0)
            return perr_set(err, "--pipeline-schedule: expected gpipe, 1f1b, interleaved, naive, "
                                 "zb-h1, zb-h2, zb-v or dualpipev, got '%s'", val);
        pc->pp_schedule = (pc_pp_schedule_t)(PC_PP_1F1B + found);
        pc->given |= PC_GIVEN_SCHEDULE;
        *i += 2;
        return 1;
    }
    return 0;
}

/* Memory and precision: recomputation, optimizer offload, bucket size, dtypes. */
static int parse_memory_flag(pconfig_t *pc, const char *flag, const char *val, int *i,
                             perr_t *err) {
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
    return 0;
}

/* Switches without a value. */
static int parse_switch_flag(pconfig_t *pc, const char *flag, int *i) {
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

int pconfig_parse_flag(pconfig_t *pc, int argc, char **argv, int *i, perr_t *err) {
    const char *flag = argv[*i], *val = *i + 1 < argc ? argv[*i + 1] : NULL;
    int r;
    if ((r = parse_degree_flag(pc, flag, val, i, err)) || (r = parse_order_flag(pc, flag, val, i, err)) ||
        (r = parse_mode_flag(pc, flag, val, i, err)) ||
        (r = parse_memory_flag(pc, flag, val, i, err)))
        return r;
    return parse_switch_flag(pc, flag, i);
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
    char ep[32] = ""; /* expert-parallel ranks: out of the data-parallel ones, or folded */
    const int fold = pconfig_ep_folded(pc), ep_dp = pconfig_ep_axis(pc) > 1;
    if (pc->ep > 1)
        snprintf(ep, sizeof ep, " ep=%d%s%s%s", pc->ep, fold ? "(" : "",
                 fold == GPT_EXPERT_FOLD_TP ? "tp" : fold ? "cp" : "", fold ? ep_dp ? " x dp)" : ")" : "");
    if (pc->etp < pc->tp && pc->tp > 1 && !pc->tp_row_linears) /* not the default: say so */
        snprintf(ep + strlen(ep), sizeof ep - strlen(ep), " etp=%d", pc->etp);
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
          "  --pipeline-schedule gpipe|1f1b|interleaved|naive|zb-h1|zb-h2|zb-v|dualpipev   (default 1f1b;\n"
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
          "                            (zero-bubble schedules: after each unit's last W)\n"
          "  --overlap-param-gather    gather parameters on a communication thread\n"
          "                            (ZeRO-3: the next unit's, prefetched while one runs)\n"
          "  --bucket-cap-mb X         gradient bucket size (default 40)\n"
          "  --dtype D --grad-sync-dtype D   fp32|bf16|fp16: Apex's optimizer state and gradient\n"
          "                            sync (default fp32; the sync defaults to --dtype's)\n",
          f);
}
