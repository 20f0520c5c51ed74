/* broken.c - the checker's negative controls (broken.h), one table.
 *
 * An entry's `needs` refuses a layout on which the bug cannot fire: a
 * negative control that runs and reports "bit-exact yes" would prove
 * nothing, and `parity check` refuses it before its golden run. */
#include "model/gpt.h"
#include "broken.h"
#include "broken_needs.h"
#include "parity/pp.h"

#include <stdio.h>
#include <string.h>

#include "parity/numparse.h"


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
