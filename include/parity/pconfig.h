/* pconfig.h - the one validated description of a parallel layout.
 *
 * Every front end (Megatron-style flags today; the JSON "model parallel
 * patterns" file and Colossal-AI's parallel dict later) fills this struct,
 * and pconfig_validate checks it against the model before any device
 * starts. A layout that cannot be run is a message naming the field and
 * what was expected, never a crash, a hang or a silent fallback.
 */
#ifndef PARITY_PCONFIG_H
#define PARITY_PCONFIG_H

#include <stdio.h>

#include "parity/error.h"
#include "parity/model.h"
#include "parity/runtime.h"

typedef enum { PC_DTYPE_FP32 = 0, PC_DTYPE_BF16, PC_DTYPE_FP16 } pc_dtype_t;
enum { PC_OFFLOAD_NONE = 0, PC_OFFLOAD_CPU = 1, PC_OFFLOAD_NVME = 2 };
/* "none", "cpu", "nvme". */
const char *pconfig_offload_name(int offload);
/* Pipeline schedules (pp.h): 1F1B is Megatron's default; interleaved
 * 1F1B when virtual stages are given; naive: one microbatch at a time
 * through every stage (model parallelism without pipelining). */
typedef enum {
    PC_PP_DEFAULT = 0, PC_PP_1F1B, PC_PP_GPIPE, PC_PP_INTERLEAVED, PC_PP_NAIVE,
    PC_PP_ZB_H1, PC_PP_ZB_V, PC_PP_DUALPIPEV, /* the backward split into B and W (pp.h) */
    PC_PP_ZB_H2
} pc_pp_schedule_t;
/* "1f1b", "gpipe", "interleaved", "naive", "zb-h1", "zb-v", "dualpipev", "zb-h2" */
const char *pconfig_schedule_name(pc_pp_schedule_t s);
/* Whether schedule s splits each backward into B and W (zb-h1, zb-h2, zb-v, dualpipev). */
int pconfig_splits_backward(pc_pp_schedule_t s);
enum { PC_MAX_SPLIT = 64, PC_MAX_CHUNKS = 16 /* = GPT_MAX_CHUNKS */,
       PC_MAX_RANKS = PARITY_MAX_DEVICES };

typedef enum { PC_TP_1D = 0, PC_TP_2D, PC_TP_25D, PC_TP_3D } pc_tp_mode_t;

typedef struct {
    /* degrees; 0 = not given (inferred or 1) */
    int world_size;
    int dp, tp, pp, cp, ep;
    int etp;                   /* --expert-tensor-parallel-size: tp (Megatron's default: each
                                  expert's FFN split over the tp group) or 1 (whole experts on
                                  every tp rank); 0 = not given */
    int sequence_parallel;     /* --sequence-parallel: LayerNorm/dropout regions hold T/tp positions */
    int tp_row_linears;        /* --tensor-parallel-row-linears: every linear row-parallel (the
                                  patterns file's sharding_dim 0) instead of Megatron's pairing */
    /* Colossal-AI's tensor-parallel modes (--tensor-parallel-mode, the
     * Colossal config's tensor=dict(mode=...)): tp devices as q x q (2-D,
     * SUMMA), q x q x depth (2.5-D) or q x q x q (3-D); tp_depth is
     * 2.5-D's depth (0: not given). pconfig_tp_sub gives the sub-axes. */
    int recompute;             /* --recompute-granularity: model.h's MODEL_RECOMPUTE_* */
    int recompute_block;       /* --recompute-method block (1) or uniform (0) */
    int recompute_layers;      /* --recompute-num-layers (full: default 1) */
    int tp_mode;               /* pc_tp_mode_t */
    int tp_depth;
    int cp_comm;               /* --cp-comm-type: 0 p2p (the ring), 1 a2a (Ulysses): cp.h's cp_comm_t */
    char order[32];            /* rank order, first varies fastest: "tp-cp-ep-dp-pp" */
    /* An explicit placement (--rank-list, a patterns device_mapping that is
     * no plain order): rank_list[c] is the world rank at the order's
     * canonical position c (runtime.h's layout_init_mapped). --rank-list
     * gives the whole world; a patterns mapping gives one data-parallel
     * replica (tp x pp positions), repeated for each replica as the slowest
     * axis. pconfig_validate checks it and leaves n_rank_list 0 or the
     * world size. */
    unsigned short rank_list[PC_MAX_RANKS];
    int n_rank_list;
    /* batch: sequences per step and per microbatch; accumulation steps
     * = global / (micro * dp) as in Megatron (micro must divide), or set
     * directly by --accum-degree, which splits a rank's sequences into
     * that many microbatches of sizes differing by at most one (exact
     * sums make any split give the golden bits); micro_batch is then the
     * largest */
    int global_batch, micro_batch, accum_degree;
    /* pipeline parallelism (pp.h) */
    pc_pp_schedule_t pp_schedule;   /* --pipeline-schedule gpipe|1f1b|interleaved|naive|zb-h1|zb-v|dualpipev */
    int vpp;                        /* --virtual-pipeline-model-parallel-size: chunks per stage */
    int layers_per_vstage;          /* --num-layers-per-virtual-pipeline-stage (0: not given) */
    int layer_split[PC_MAX_SPLIT];  /* --pipeline-layer-split 3,3,2: layers per stage */
    int n_layer_split;              /* 0: uniform */
    /* an encoder-decoder's encoder (Megatron-core 0.9 - 0.13): its own
     * tensor- and pipeline-parallel degrees. --encoder-tensor-model-
     * parallel-size (0: not given; then tp) needs encoder pipeline ranks;
     * with encoder_pp > 0 the encoder's units run on stages 0 ..
     * encoder_pp-1 and the decoder's on the decoder_pp stages after them:
     * pconfig_validate makes pp their sum (the grid's stages). */
    int encoder_tp, encoder_pp, decoder_pp;
    /* data parallelism and ZeRO */
    int zero_stage;            /* 0 DDP, 1 optimizer state, 2 + gradients, 3 + parameters */
    int use_distributed_optimizer;
    int overlap_grad_reduce, overlap_param_gather;
    /* DeepSpeed's ZeRO-Offload / ZeRO-Infinity (--offload-optimizer):
     * each rank's optimizer shard in a host arena of its own (cpu) or in a
     * file under offload_path (nvme), read and written bucket by bucket
     * around the update (ref/parallel/engine/offload.c) */
    int offload;               /* PC_OFFLOAD_NONE, _CPU, _NVME */
    char offload_path[256];    /* --offload-path DIR (nvme) */
    double bucket_cap_mb;      /* gradient bucket size; Megatron's default 40 */
    int contiguous_grad_buffer, contiguous_param_buffer;
    pc_dtype_t dtype, grad_sync_dtype;
    /* which flags were given, to tell "not set" from a value */
    unsigned given;
} pconfig_t;

/* Megatron-core's MoE parallel folding: the ranks of a pipeline stage
 * (tp x cp x dp) re-split into the expert grid etp x ep x edp, etp
 * fastest, then ep (Megatron's expert rank order "tp-ep-dp-pp"). parity
 * builds the expert-parallel ranks as a product of whole dense axes:
 *   etp 1, ep = tp              folded onto tp (GPT_EXPERT_FOLD_TP)
 *   ep | dp                     taken out of dp (the grid's ep axis; kept
 *                               ahead of the order below where dp allows it:
 *                               the layout these runs always had)
 *   etp 1, ep = tp x e, e | dp  tp fastest, then e of dp (cp 1)
 *   etp 1, ep | tp, ep < tp     the ep ranks of each run of ep tp ranks
 *                               (expert rank t mod ep; the tp ranks of one
 *                               t / ep hold copies)
 *   etp tp, ep = cp x e, e | dp cp fastest, then e of dp (GPT_EXPERT_FOLD_CP)
 * The fold's axis (model.h's GPT_EXPERT_FOLD_*), or 0: the ep axis alone.
 * pconfig_ep_axis is what the grid's ep axis holds (ep / the fold's size). */
static inline int pconfig_ep_folded(const pconfig_t *pc) {
    const int tp = pc->tp > 1 ? pc->tp : 1, cp = pc->cp > 1 ? pc->cp : 1, dp = pc->dp > 1 ? pc->dp : 1;
    if (pc->ep <= 1) return 0;
    if (pc->etp == 1 && pc->ep == tp) return GPT_EXPERT_FOLD_TP;
    if (pc->dp && dp % pc->ep == 0) return 0;
    if (pc->etp == 1 && tp > 1 && cp == 1 && pc->ep % tp == 0) return GPT_EXPERT_FOLD_TP;
    if (pc->etp == 1 && tp > pc->ep && tp % pc->ep == 0) return GPT_EXPERT_FOLD_TP;
    if ((pc->etp == tp || tp == 1) && cp > 1 && pc->ep % cp == 0) return GPT_EXPERT_FOLD_CP;
    return 0;
}
/* The fold's ranks (its axis's, or a run of ep tp ranks), 1 without one. */
static inline int pconfig_ep_fold_n(const pconfig_t *pc) {
    const int fold = pconfig_ep_folded(pc);
    if (fold == GPT_EXPERT_FOLD_TP) return pc->ep < pc->tp ? pc->ep : pc->tp;
    return fold == GPT_EXPERT_FOLD_CP ? pc->cp : 1;
}
static inline int pconfig_ep_axis(const pconfig_t *pc) {
    return (pc->ep > 1 ? pc->ep : 1) / pconfig_ep_fold_n(pc);
}
/* The model's view of a layout (model.h's gpt_layout_opts_t). */
static inline gpt_layout_opts_t pconfig_tp_opts(const pconfig_t *pc) {
    return (gpt_layout_opts_t){.sp = pc->sequence_parallel != 0,
                               .row_linears = pc->tp_row_linears != 0,
                               .tp_mode = pc->tp_mode,
                               .expert_tp = pc->etp > 1 ? pc->etp : 0,
                               .expert_fold = pconfig_ep_folded(pc),
                               .expert_fold_n = pconfig_ep_fold_n(pc),
                               .cp = pc->cp > 1 ? pc->cp : 1,
                               .cp_comm = pc->cp_comm ? CP_ULYSSES : CP_RING,
                               .ep = pconfig_ep_axis(pc)};
}
/* "1d", "2d", "2.5d", "3d". */
const char *pconfig_tp_mode_name(int mode);
/* tp's sub-axes (grid.h's GRID_TP, GRID_TP2, GRID_TP3): 1-D {tp, 1, 1};
 * 2-D {q, q, 1}; 2.5-D {q, q, depth}; 3-D {q, q, q}. */
static inline void pconfig_tp_sub(const pconfig_t *pc, int sub[3]) {
    const int tp = pc->tp > 1 ? pc->tp : 1, d = pc->tp_depth > 1 ? pc->tp_depth : 1;
    int q = 1;
    if (pc->tp_mode == PC_TP_3D)
        while ((q + 1) * (q + 1) * (q + 1) <= tp) q++;
    else if (pc->tp_mode != PC_TP_1D)
        while ((q + 1) * (q + 1) * d <= tp) q++;
    sub[0] = pc->tp_mode == PC_TP_1D ? tp : q;
    sub[1] = pc->tp_mode == PC_TP_1D ? 1 : q;
    sub[2] = pc->tp_mode == PC_TP_3D ? q : pc->tp_mode == PC_TP_25D ? d : 1;
}
/* The blocks a microbatch's sequences are cut into over tp's sub-axes
 * (2-D: q rows; 2.5-D: q rows x depth; 3-D: q x q): 1 in 1-D. */
static inline int pconfig_tp_batch_blocks(const pconfig_t *pc) {
    int sub[3];
    pconfig_tp_sub(pc, sub);
    return pc->tp_mode == PC_TP_1D ? 1 : sub[1] * sub[2];
}
/* The grid's sizes along tp, tp2, tp3, cp, ep, dp, pp (grid.h's axis
 * order): the expert-parallel ranks are taken out of the data-parallel
 * ones (Megatron's rule), so the dp axis holds dp / ep and ep x (dp axis)
 * is the data-parallel degree. */
static inline void pconfig_grid_sizes(const pconfig_t *pc, int sizes[7]) {
    const int ep = pconfig_ep_axis(pc), dp = pc->dp > 1 ? pc->dp : 1;
    int sub[3];
    pconfig_tp_sub(pc, sub);
    const int s[7] = {sub[0], sub[1], sub[2], pc->cp, ep, dp / ep, pc->pp};
    for (int a = 0; a < 7; a++) sizes[a] = s[a] > 1 ? s[a] : 1;
}
/* Heterogeneous meshes: an encoder mesh of etp < tp (mesh.h; Megatron-
 * core's --encoder-tensor-model-parallel-size) at world ranks 0 ..
 * dp*etp*epp*cp - 1, the decoder's after it. */
static inline int pconfig_hetero(const pconfig_t *pc) {
    return pc->encoder_pp > 0 && pc->encoder_tp > 0 && pc->encoder_tp < pc->tp;
}
/* The tensor-parallel degree of pipeline stage s: the encoder mesh's
 * stages have etp, every other stage tp. */
static inline int pconfig_stage_tp(const pconfig_t *pc, int s) {
    const int tp = pc->tp > 0 ? pc->tp : 1;
    return pconfig_hetero(pc) && s < pc->encoder_pp ? pc->encoder_tp : tp;
}
/* The tensor-parallel degree the model's own entry points take for stage
 * s (gpt_local_dims, param_grid_tp, gpt_mem_bytes_*): tp, an
 * encoder stage's etp, or the 2-D modes' q (as many rows as columns). */
static inline int pconfig_model_tp(const pconfig_t *pc, int s) {
    int sub[3];
    pconfig_tp_sub(pc, sub);
    return pc->tp_mode != PC_TP_1D ? sub[0] : pconfig_stage_tp(pc, s);
}
/* The devices of one data-parallel replica: tp*pp*cp, or with an encoder
 * mesh cp*(etp*epp + tp*decoder_pp) (pp counting both meshes' stages). */
static inline long long pconfig_replica_devices(const pconfig_t *pc) {
    const long long cp = pc->cp > 1 ? pc->cp : 1;
    if (pconfig_hetero(pc))
        return cp * ((long long)pc->encoder_tp * pc->encoder_pp +
                     (long long)pc->tp * (pc->pp - pc->encoder_pp));
    return (long long)(pc->tp > 1 ? pc->tp : 1) * (pc->pp > 1 ? pc->pp : 1) * cp;
}
/* The ranks that split the tokens of a step and so sum every weight
 * gradient: data parallelism times context parallelism (Megatron's
 * data-parallel group with context parallelism); ZeRO shards over them. */
static inline int pconfig_grad_ranks(const pconfig_t *pc) {
    /* 2.5-D's depth layers hold the same weights for other sequences */
    const int depth = pc->tp_mode == PC_TP_25D && pc->tp_depth > 1 ? pc->tp_depth : 1;
    return (pc->dp > 0 ? pc->dp : 1) * (pc->cp > 0 ? pc->cp : 1) * depth;
}

enum { /* bits of pconfig_t.given */
    PC_GIVEN_WORLD = 1u << 0, PC_GIVEN_DP = 1u << 1, PC_GIVEN_GLOBAL = 1u << 2,
    PC_GIVEN_MICRO = 1u << 3, PC_GIVEN_ACCUM = 1u << 4, PC_GIVEN_ZERO = 1u << 5,
    PC_GIVEN_NUM_MB = 1u << 6, /* the microbatches came as --num-microbatches (messages name it) */
    PC_GIVEN_BUCKET = 1u << 7,
    PC_GIVEN_RANK_LIST = 1u << 8, /* rank_list came from --rank-list (a patterns mapping otherwise) */
    PC_GIVEN_ORDER = 1u << 9,     /* --rank-order was given (even the default order) */
    PC_GIVEN_CP_COMM = 1u << 10,  /* --cp-comm-type was given */
    PC_GIVEN_SCHEDULE = 1u << 11, /* --pipeline-schedule was given */
    PC_GIVEN_RECOMPUTE_METHOD = 1u << 13, /* --recompute-method was given */
    PC_GIVEN_ETP = 1u << 14,        /* --expert-tensor-parallel-size was given */
    PC_GIVEN_ENCODER_TP = 1u << 15, /* --encoder-tensor-model-parallel-size was given */
    PC_GIVEN_ENCODER_PP = 1u << 16, /* --encoder-pipeline-model-parallel-size was given (0 too) */
    PC_ENCODER_STAGES = 1u << 12, /* pp already counts the encoder's stages (validated once) */
};

/* Defaults: one device, DDP, buckets of 40 MB, fp32, Megatron's order. */
void pconfig_defaults(pconfig_t *pc);

/* Tries to consume argv[*i] (and its value) as a layout flag:
 * returns 1 and advances *i if it was one, 0 if it is not a layout flag,
 * -1 with a message naming the flag on a bad value. Flags:
 *   --world-size N  --data-parallel-size N  --tensor-model-parallel-size N
 *   --pipeline-model-parallel-size N  --context-parallel-size N
 *   --encoder-tensor-model-parallel-size N  --encoder-pipeline-model-parallel-size N
 *   --cp-comm-type p2p|a2a
 *   --expert-model-parallel-size N  --rank-order tp-cp-ep-dp-pp  --rank-list 3,0,2,1
 *   --sequence-parallel
 *   --pipeline-schedule gpipe|1f1b|interleaved|naive|zb-h1|zb-v|dualpipev  --pipeline-layer-split A,B,..
 *   --virtual-pipeline-model-parallel-size V  --num-layers-per-virtual-pipeline-stage N
 *   --global-batch-size N  --micro-batch-size N  --accum-degree N  --num-microbatches N
 *   --zero-stage 0..3  --use-distributed-optimizer  --overlap-grad-reduce
 *   --overlap-param-gather  --bucket-cap-mb X  --no-contiguous-grad-buffer
 *   --no-contiguous-param-buffer  --dtype fp32|bf16|fp16  --grad-sync-dtype ... */
int pconfig_parse_flag(pconfig_t *pc, int argc, char **argv, int *i, perr_t *err);

/* Resolves inferred values against the model's global batch (sequences
 * per step, used when --global-batch-size is absent) and checks every
 * constraint; on success every degree, micro_batch and accum_degree is
 * set. */
int pconfig_validate(pconfig_t *pc, int model_global_batch, perr_t *err);

/* One line, e.g. "dp=4 zero=2 accum=3 micro=2 overlap-grad". */
void pconfig_describe(const pconfig_t *pc, char *buf, size_t len);
void pconfig_print_help(FILE *f);

#endif
