/* train_args.c - pass 1 over `parity train`'s and `parity check`'s
 * command line (train_parse_args): --help, the rule that no flag is given
 * twice, the flags of train_args_t itself, and the layout flags and model
 * overrides, whose positions pass 2 applies (train.c). */
#include <errno.h>
#include <limits.h>
#include <stddef.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <sys/stat.h>
#include <unistd.h>

#include "commands.h"
#include "broken.h"
#include "parity/model_flags.h"
#include "parity/numparse.h"
#include "parity/pool.h"
#include "train.h"

static void usage(FILE *f) {
    fputs(
        "usage: parity train [options]\n"
        "  --model NAME|FILE.json   built-in model (gpt-micro, gpt-tiny, gpt-small, gpt-124m;\n"
        "                           encoder-decoders t5-tiny, t5-small; llava-tiny; MoE: a GPT\n"
        "                           with --num-experts E) or a JSON config file (the \"config\"\n"
        "                           a dump stores); default gpt-tiny\n"
        "  --steps N                training steps (default 10)\n"
        "  --backend B              tile backend: openblas or portable (default: $PARITY_BACKEND,\n"
        "                           else openblas; portable: golden/'s bits on any machine)\n"
        "  --data FILE              training text (default ref/data/corpus.txt)\n"
        "  --dump FILE              write a .safetensors dump (see include/parity/dump.h)\n"
        "  --dump-steps LIST        steps to dump, e.g. 0,1,2 (default: all when --steps <= 3,\n"
        "                           else 0)\n"
        "  --digest FILE            write SHA-256 digests of the dumped tensors (golden/ format)\n"
        "  --save DIR               after the last step, write a layout-free checkpoint to DIR\n"
        "                           (created if missing): DIR/model.safetensors, the global\n"
        "                           parameters and AdamW state, replaced all or nothing\n"
        "  --load DIR               continue from the checkpoint in DIR, on any layout: runs\n"
        "                           steps S .. S+N-1 (S its next step, N --steps; --dump-steps\n"
        "                           names these global steps); its config must equal this\n"
        "                           run's (except name and micro_batch); --save may name DIR\n"
        "                           too, continuing it in place (no other output may replace\n"
        "                           a file in it)\n"
        "  --export-weights DIR     write the weights this run starts from (the seeded init, or\n"
        "                           --load's) to DIR/model.safetensors (DIR created if missing)\n"
        "                           in --names' names and layouts, F32, for a backend to start\n"
        "                           from; then the steps run as asked (--save writes the end)\n"
        "  --names SCHEME           the export's names (needed with --export-weights, refused\n"
        "                           without): megatron-lm (parity's), megatron-core, hf-gpt2\n"
        "                           (Conv1D [in, out], c_attn q|k|v), nanogpt (include/parity/\n"
        "                           names.h; the last three: the dense GPT)\n"
        "  --threads N              compute threads for the one-device golden run (default 1):\n"
        "                           a contraction's blocks spread over N threads, the same bits\n"
        "                           (pool.h); a layout's devices already share the cores\n"
        "  --quiet                  only the summary line\n"
        "  --print-config           print the resolved config as JSON and exit\n"
        "every flag is given at most once (a repeat is refused, never \"the last one wins\");\n"
        "only --optim repeats, with another KEY each time. A flag that cannot apply to the\n"
        "model or layout (MoE flags without experts, encoder flags on a GPT, the dynamic\n"
        "scaler's knobs beside a static --loss-scale) is refused by name, never ignored;\n"
        "numbers are decimal (no blanks, '+', hex, inf or nan). No output (--dump, --digest,\n"
        "--trace, --save's file) may name an input (--data or its default, --model FILE.json,\n"
        "--parallel-config, --load's files), by any path or link: refused before the run\n"
        "model and training overrides (Megatron-style):\n"
        "  --num-layers N  --hidden-size N  --num-attention-heads N  --ffn-hidden-size N\n"
        "  --encoder-num-layers N  --encoder-seq-length N   (an encoder-decoder, arch t5)\n"
        "  --seq-length N  --vocab-size N  --global-batch-size N  --micro-batch-size N\n"
        "  --seed N  --untie-embeddings-and-output-weights\n"
        "  --hidden-dropout P  --attention-dropout P\n"
        "  --lr X  --min-lr X  --lr-warmup-iters N  --lr-decay-iters N\n"
        "  --adam-beta1 X  --adam-beta2 X  --adam-eps X  --weight-decay X  --clip-grad X\n"
        "  --optimizer adam|adamw8bit   adam: AdamW, fp32 state (Megatron's adam; default);\n"
        "                           adamw8bit: bitsandbytes-style 8-bit m and v, quantized in\n"
        "                           blocks of each tensor's global flattened index (the golden\n"
        "                           run too; a layout must hold whole blocks)\n"
        "  --optimizer-block N      adamw8bit's block size (default 256, at most 4096; only\n"
        "                           with --optimizer adamw8bit)\n"
        "  --tile-tokens N  --tile-features N  --tile-ffn N   canonical tiles (I1)\n"
        "mixed precision (Megatron's names; MODEL.md, \"Mixed precision\"; the GPT, dense or MoE):\n"
        "  --bf16 | --fp16          activations, their gradients and the weights' compute copy\n"
        "                           rounded to bf16/fp16 at fixed points; fp32 master weights,\n"
        "                           gradients and AdamW state\n"
        "  --loss-scale X (fp16, static; 0: dynamic)  --initial-loss-scale X (2^32)\n"
        "  --min-loss-scale X (1)  --loss-scale-window N (1000)  --hysteresis N (2)   the\n"
        "                           dynamic scaler's knobs: > 0, not with a static scale\n"
        "mixture of experts (Megatron-core names; MODEL.md, \"Mixture of experts\"):\n"
        "  --num-experts E  --moe-router-topk K (default 2)  --moe-layer-freq N (default 1)\n"
        "  --moe-router-pre-softmax  --moe-aux-loss-coeff X  --moe-z-loss-coeff X\n"
        "  --moe-expert-capacity-factor X (0: dropless; capacity is per sequence)\n"
        "  --moe-token-drop-policy probs|position (default probs; needs a capacity factor)\n"
        "  --moe-router-dtype fp32   the router in fp32 under --bf16/--fp16 (default: in the\n"
        "                           model's dtype, Megatron-core's; fp64 is not built)\n"
        "  --make-vocab-size-divisible-by N   pad vocab up to a multiple of N (Megatron pads to\n"
        "                           N x tp; parity to N alone, so the model does not depend on\n"
        "                           the layout, I4); padded rows are ordinary parameters\n",
        f);
    layout_opts_print_help(f);
    fputs("  --print-layout           print the resolved layout and its memory estimate and exit\n"
          "`parity check` takes the same options, runs the golden run and the layout, and\n"
          "compares every tensor of every step with memcmp (every replica too); there,\n"
          "--dump and --digest write the layout run's reassembled tensors, match or not,\n"
          "and --load DIR starts both runs from the checkpoint (--save is refused). Exit\n"
          "status: 0 bit-exact, 1 a mismatch or a run whose loss or gradient norm went\n"
          "non-finite (reported, matched or not), 2 an error. Outputs are written only\n"
          "when a run succeeds (check: exit 0 or 1); a non-finite train run exits 1.\n"
          "  --compare CLASSES        check only: compare these classes of tensors, a comma-\n"
          "                           separated list of act (inputs, activations, masks, logits,\n"
          "                           loss), grad (parameter and unit-input gradients, the norm),\n"
          "                           param (initial and updated parameters, lr), optim (AdamW's\n"
          "                           m, v and step count); default all\n"
          "environment (each checked before anything runs; a bad value exits 2): PARITY_BACKEND,\n"
          "PARITY_MEM_AVAILABLE_MB, PARITY_COLL_ALGO, PARITY_COLL_TIMEOUT, PARITY_COLL_WHOLE_BYTES,\n"
          "PARITY_COLL_SPIN_US, PARITY_COLL_YIELD_US, PARITY_PIN, PARITY_STEP_THROUGH,\n"
          "PARITY_STEP_THROUGH_DEVICE, PARITY_OFFLOAD_KILL_AFTER (tests) (ref/cli/env_check.c)\n",
          f);
}

/* numbers: strict, with the flag named (numparse.h) */
static int parse_int(const char *flag, const char *s, long long lo, long long hi, long long *out) {
    perr_t e;
    if (num_parse_int(flag, s, lo, hi, out, &e)) {
        fprintf(stderr, "%s: %s\n", cli_name, e.msg);
        return -1;
    }
    return 0;
}

/* One rule for every flag of train and check: given twice is an error,
 * never "the last one wins" (a forgotten --steps 3 in a long command
 * line silently changes the run). --optim alone repeats, each time with
 * another model.optim key (nemo.c refuses a key given twice). --model and
 * --config are one flag. seen[] holds the positions of the flags so far. */
static const char *flag_canon(const char *a) {
    if (!strncmp(a, "--step-through=", 15)) return "--step-through";
    return !strcmp(a, "--config") ? "--model" : a;
}

static int flag_given_twice(char **argv, const int *seen, int nseen, const char *a) {
    if (strncmp(a, "--", 2) || !strcmp(a, "--optim")) return 0;
    for (int k = 0; k < nseen; k++) {
        const char *b = argv[seen[k]];
        if (strcmp(flag_canon(a), flag_canon(b))) continue;
        if (strcmp(a, b)) fprintf(stderr, "parity %s: %s and %s are one flag; give it once\n", argv[0], b, a);
        else fprintf(stderr, "parity %s: %s given twice\n", argv[0], a);
        return 1;
    }
    return 0;
}

#define ARG(f) offsetof(train_args_t, f)
static const struct { const char *flag; size_t offset; } path_flags[] = {
    {"--model", ARG(model)},         {"--config", ARG(model)},       {"--backend", ARG(backend)},
    {"--data", ARG(data_path)},      {"--dump", ARG(dump_path)},     {"--dump-steps", ARG(dump_steps)},
    {"--digest", ARG(digest_path)},  {"--save", ARG(save_dir)},      {"--load", ARG(load_dir)},
    {"--compare", ARG(compare)},     {"--export-weights", ARG(export_dir)}, {"--names", ARG(names)},
};
#undef ARG

/* A flag of train_args_t itself: 1 consumed (i advanced past its value),
 * 0 not one, -1 refused (after a message). */
static int parse_own_flag(train_args_t *t, int argc, char **argv, int *i) {
    const char *a = argv[*i], *v = *i + 1 < argc ? argv[*i + 1] : NULL;
    perr_t err;
    if (!strcmp(a, "--quiet")) t->quiet = 1;
    else if (!strcmp(a, "--print-config")) t->print_config = 1;
    else if (!strcmp(a, "--print-layout")) t->print_layout = 1;
    if (!strcmp(a, "--quiet") || !strcmp(a, "--print-config") || !strcmp(a, "--print-layout"))
        return 1;
    int k = 0, n = (int)(sizeof path_flags / sizeof path_flags[0]);
    while (k < n && strcmp(a, path_flags[k].flag)) k++;
    const int counted = !strcmp(a, "--steps") || !strcmp(a, "--threads");
    if (k == n && !counted) return 0;
    if (num_flag_value(a, v, &err)) {
        fprintf(stderr, "parity %s: %s\n", t->cmd, err.msg);
        return -1;
    }
    *i += 1;
    if (k < n) *(const char **)((char *)t + path_flags[k].offset) = v;
    else if (!strcmp(a, "--steps")) return parse_int("--steps", v, 1, 1000000000LL, &t->steps) ? -1 : 1;
    else return parse_int("--threads", v, 1, POOL_MAX_THREADS, &t->threads) ? -1 : 1;
    return 1;
}

/* A layout flag (layout_cli.c) or a model override (cfg_opts, applied
 * in pass 2): 1 consumed, -1 refused (after a message). */
static int parse_other_flag(train_args_t *t, int argc, char **argv, int *i) {
    const char *a = argv[*i];
    perr_t err;
    int j = *i, r = strcmp(a, "--global-batch-size") && strcmp(a, "--micro-batch-size")
                        ? layout_opts_parse(&t->lo, argc, argv, &j, &err)
                        : 0;
    if (r < 0) {
        fprintf(stderr, "parity %s: %s\n", t->cmd, err.msg);
        return -1;
    }
    if (r == 1) {
        t->layout_given = 1;
        *i = j - 1;
        return 1;
    }
    int takes_value = 0;
    if (!model_flag_known(a, &takes_value)) {
        fprintf(stderr, "%s: unknown option '%s' (see %s --help)\n", cli_name, a, cli_name);
        return -1;
    }
    const int drop = !strcmp(a, "--moe-token-drop-policy"); /* its own message */
    if (drop && *i + 1 >= argc) {
        fprintf(stderr, "parity %s: %s needs a value (probs or position)\n", t->cmd, a);
        return -1;
    }
    if (takes_value && !drop && num_flag_value(a, *i + 1 < argc ? argv[*i + 1] : NULL, &err)) {
        fprintf(stderr, "parity %s: %s\n", t->cmd, err.msg);
        return -1;
    }
    if (t->n_cfg == MAX_CFG_OPTS) {
        fprintf(stderr, "%s: more than %d config options\n", cli_name, MAX_CFG_OPTS);
        return -1;
    }
    t->cfg_at[t->n_cfg++] = *i;
    if (takes_value) *i += 1;
    return 1;
}

/* Pass 1 over the command line: -1 to go on, else the exit status
 * (--help and --test-broken list answer and exit 0). */
int train_parse_args(train_args_t *t, int argc, char **argv, int check) {
    memset(t, 0, sizeof *t);
    t->cmd = argv[0];
    t->check = check;
    t->model = "gpt-tiny";
    t->steps = check ? 3 : 10;
    t->threads = 1;
    layout_opts_defaults(&t->lo);
    int seen[MAX_FLAGS], nseen = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            usage(stdout);
            return 0;
        }
        if (flag_given_twice(argv, seen, nseen, a)) return 2;
        if (nseen == MAX_FLAGS) {
            fprintf(stderr, "%s: more than %d flags\n", cli_name, MAX_FLAGS);
            return 2;
        }
        seen[nseen++] = i;
        int r = parse_own_flag(t, argc, argv, &i);
        if (r == 0) r = parse_other_flag(t, argc, argv, &i);
        if (r < 0) return 2;
        if (t->lo.list_broken) {
            broken_print(stdout);
            return 0;
        }
    }
    /* the backend's name before anything else, --print-layout and
     * --print-config included: a flag is used or refused */
    if (t->backend && strcmp(t->backend, "portable") && strcmp(t->backend, "openblas")) {
        fprintf(stderr, "%s: --backend: expected openblas or portable, got '%s'\n", cli_name,
                t->backend);
        return 2;
    }
    return -1;
}
