/* modes_table.c - every mode `parity modes` composes: its family, the
 * flags that turn it on, one line of what it is. A new mode is a line
 * here; its pairs with every other family are then printed and tested
 * (tests/compose/). Degrees are the smallest that exercise the mode;
 * modes.c merges a pair's flags (the larger degree wins). */
#include "modes.h"

#include <string.h>

#define DP2 "--data-parallel-size 2 "
#define PP2 "--pipeline-model-parallel-size 2 --num-microbatches 4 --num-layers 4 --global-batch-size 8 "
/* DualPipe(V): at least 2 pp microbatches (pp 3 with an encoder stage) */
#define PP2_8 "--pipeline-model-parallel-size 2 --num-microbatches 8 --num-layers 4 --global-batch-size 16 "
#define MOE "--num-experts 4 --moe-router-topk 2 "
#define T5 "--model t5-tiny --global-batch-size 8"

const modes_entry_t modes_table[] = {
    /* data parallelism and ZeRO */
    {"ddp", "dp", NULL, DP2, "data parallel, gradients all-reduced"},
    {"zero1", "dp", NULL, DP2 "--zero-stage 1", "ZeRO-1: the optimizer state sharded"},
    {"zero2", "dp", NULL, DP2 "--zero-stage 2", "ZeRO-2: gradients reduce-scattered too"},
    {"zero3", "dp", NULL, DP2 "--zero-stage 3", "ZeRO-3: parameters gathered unit by unit"},
    {"accum", "accum", NULL, "--num-microbatches 2", "gradient accumulation over microbatches"},
    {"overlap-grad", "overlap-grad", NULL, DP2 "--overlap-grad-reduce",
     "gradient buckets reduced on a communication thread"},
    {"overlap-param", "overlap-param", NULL, DP2 "--zero-stage 1 --overlap-param-gather",
     "parameter all-gathers on a communication thread"},
    /* tensor parallelism: Megatron 1-D and Colossal-AI's modes */
    {"tp", "tp", NULL, "--tensor-model-parallel-size 2", "Megatron 1-D tensor parallel"},
    {"2d", "tp", NULL, "--tensor-model-parallel-size 4 --tensor-parallel-mode 2d --global-batch-size 32",
     "Colossal-AI 2-D (SUMMA) tensor parallel, q 2"},
    {"2.5d", "tp", NULL,
     "--tensor-model-parallel-size 8 --tensor-parallel-mode 2.5d --tensor-parallel-depth 2 "
     "--global-batch-size 64",
     "Colossal-AI 2.5-D (Tesseract), q 2 depth 2"},
    {"3d", "tp", NULL, "--tensor-model-parallel-size 8 --tensor-parallel-mode 3d --global-batch-size 64",
     "Colossal-AI 3-D tensor parallel, q 2"},
    {"sp", "sp", NULL, "--tensor-model-parallel-size 2 --sequence-parallel",
     "Megatron sequence parallelism (tp's LayerNorm and dropout regions split by tokens)"},
    {"row", "row", NULL, "--tensor-model-parallel-size 2 --tensor-parallel-row-linears",
     "every linear row-parallel (the patterns dialect's sharding_dim 0)"},
    /* pipeline schedules */
    {"gpipe", "pp", NULL, PP2 "--pipeline-schedule gpipe", "GPipe"},
    {"1f1b", "pp", NULL, PP2 "--pipeline-schedule 1f1b", "1F1B (PipeDream-flush)"},
    {"interleaved", "pp", NULL, PP2 "--virtual-pipeline-model-parallel-size 2",
     "Megatron's interleaved 1F1B, two chunks a stage"},
    {"zb-h1", "pp", NULL, PP2 "--pipeline-schedule zb-h1", "zero-bubble ZB-H1 (B and W split)"},
    {"zb-h2", "pp", NULL, PP2 "--pipeline-schedule zb-h2", "zero-bubble ZB-H2"},
    {"zb-v", "pp", NULL, PP2 "--pipeline-schedule zb-v", "zero-bubble ZB-V (two chunks in a V)"},
    {"dualpipev", "pp", NULL, PP2_8 "--pipeline-schedule dualpipev", "DeepSeek's DualPipeV"},
    {"dualpipe", "pp", NULL, PP2_8 "--pipeline-schedule dualpipe",
     "DeepSeek's DualPipe (two model copies)"},
    /* context parallelism */
    {"ring", "cp", NULL, "--context-parallel-size 2 --cp-comm-type p2p", "ring attention"},
    {"ulysses", "cp", NULL, "--context-parallel-size 2 --cp-comm-type a2a",
     "Ulysses: heads all-to-all over cp"},
    /* mixture of experts */
    {"moe", "moe", NULL, MOE, "4 experts, top-2 routing, every rank holding all"},
    {"ep", "ep", NULL, MOE DP2 "--expert-model-parallel-size 2",
     "expert parallel out of dp (all-to-all-v)"},
    {"ep-tp", "ep", NULL,
     MOE "--tensor-model-parallel-size 2 --expert-tensor-parallel-size 1 "
         "--expert-model-parallel-size 2",
     "expert parallel folded onto the tp ranks"},
    {"ep-cp", "ep", NULL, MOE "--context-parallel-size 2 --expert-model-parallel-size 2",
     "expert parallel over the cp ranks (Megatron-core's parallel folding)"},
    {"ep-tpdp", "ep", NULL,
     MOE DP2 "--tensor-model-parallel-size 2 --expert-tensor-parallel-size 1 "
             "--expert-model-parallel-size 4",
     "expert parallel over tp x dp (parallel folding)"},
    {"etp", "etp", NULL, MOE "--tensor-model-parallel-size 2 --expert-tensor-parallel-size 2",
     "each expert's FFN split over tp"},
    {"etp-part", "etp", NULL,
     MOE "--hidden-size 32 --tensor-model-parallel-size 4 --expert-tensor-parallel-size 2",
     "each expert's FFN split over 2 of tp's 4 ranks (parallel folding)"},
    /* precision, recomputation, optimizer */
    {"bf16", "precision", NULL, "--bf16", "bf16 compute, fp32 master weights"},
    {"fp16", "precision", NULL, "--fp16", "fp16 with the dynamic loss scaler"},
    {"nemo-bf16", "nemo-dtype", NULL, "--dtype bf16 --grad-sync-dtype bf16",
     "NeMo's bf16 optimizer state and gradient sync"},
    {"nemo-fp16", "nemo-dtype", NULL, "--fp16 --dtype fp16 --grad-sync-dtype fp16",
     "NeMo's fp16 optimizer state and gradient sync (Apex's distributed fused Adam)"},
    {"selective", "recompute", NULL, "--recompute-granularity selective",
     "selective recomputation (attention's core)"},
    {"full", "recompute", NULL, "--recompute-granularity full", "full recomputation, a layer a chunk"},
    {"adamw8bit", "optimizer", NULL, "--optimizer adamw8bit", "block-wise 8-bit AdamW"},
    {"offload-cpu", "offload", NULL, DP2 "--zero-stage 1 --offload-optimizer cpu",
     "ZeRO-Offload: the optimizer shard in host memory"},
    {"offload-nvme", "offload", NULL,
     DP2 "--zero-stage 1 --offload-optimizer nvme --offload-path @TMP",
     "ZeRO-Infinity: the optimizer shard in a file"},
    /* encoder-decoders */
    {"t5", "encdec", T5, "", "T5-style encoder-decoder"},
    {"llava", "encdec", "--model llava-tiny --global-batch-size 8", "",
     "LLaVA-style: ViT encoder, projector, GPT decoder"},
    {"enc-stage", "encdec", T5, "--encoder-pipeline-model-parallel-size 1 --num-microbatches 4",
     "the encoder on a pipeline stage of its own"},
    {"enc-stages", "encdec", T5, "--encoder-pipeline-model-parallel-size 2 --num-microbatches 4",
     "the encoder on two pipeline stages of its own"},
    {"enc-mesh", "encdec", T5,
     "--tensor-model-parallel-size 2 --encoder-tensor-model-parallel-size 1 "
     "--encoder-pipeline-model-parallel-size 1 --num-microbatches 4",
     "the encoder on a mesh of its own, etp 1 < tp 2"},
    {NULL, NULL, NULL, NULL, NULL},
};

int modes_count(void) {
    int n = 0;
    while (modes_table[n].name) n++;
    return n;
}

const char *modes_base(int large) {
    return large ? "--model gpt-tiny --num-layers 4 --global-batch-size 32"
                 : "--model gpt-micro --num-attention-heads 4";
}

/* An encoder-decoder model among the modes. */
static int has_encdec(const modes_entry_t *const *all, int n) {
    for (int k = 0; k < n; k++)
        if (!strcmp(all[k]->family, "encdec")) return 1;
    return 0;
}

const char *modes_extra(const modes_entry_t *with, const modes_entry_t *const *all, int n) {
    if (!strcmp(with->family, "pp") && has_encdec(all, n))
        return "--encoder-pipeline-model-parallel-size 2 --encoder-num-layers 4";
    return "";
}
