/* train.c - `parity train`: the golden run, one device.
 *
 *   parity train --model gpt-tiny --steps 20
 *   parity train --model gpt-micro --steps 3 --dump run.safetensors
 *   parity train --model gpt-tiny --steps 2 --save ckpt
 *   parity train --model gpt-tiny --steps 2 --load ckpt --tensor-model-parallel-size 4
 *
 * Prints one line per step and a summary. Flags follow Megatron-LM's
 * names where Megatron has one; every flag overrides the model config,
 * whatever its position on the command line.
 */
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
#include "parity/check.h"
#include "parity/ckpt.h"
#include "parity/corpus.h"
#include "broken.h"
#include "layout_cli.h"
#include "run_output.h"
#include "parity/dump.h"
#include "parity/fileio.h"
#include "parity/memest.h"
#include "model/gpt.h"
#include "parity/model_flags.h"
#include "parity/names.h"
#include "parity/numparse.h"
#include "parity/pconfig.h"
#include "parity/pool.h"
#include "parity/pp.h"
#include "parity/tile.h"

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
        "mixed precision (Megatron's names; MODEL.md, \"Mixed precision\"; the dense GPT):\n"
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

/* "2 encoder + " before an encoder-decoder's decoder layers ("" for a GPT). */
static const char *enc_layers(const model_config_t *c) {
    static char buf[48];
    snprintf(buf, sizeof buf, "%d encoder + ", c->encoder_layers);
    return c->arch == MODEL_GPT ? "" : buf;
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

/* "0,1,2" -> flags in want[0..steps), for the run's global steps
 * first .. first+steps-1 (first > 0 resumes a checkpoint). */
static int parse_steps_list(const char *s, long long first, int steps, unsigned char *want) {
    perr_t err;
    int n = 1, rc = 0;
    for (const char *c = s; *c; c++) n += *c == ',';
    long long *v = malloc((size_t)n * sizeof *v);
    if (!v || num_parse_int_list("--dump-steps", s, 0, LLONG_MAX, n, v, &n, &err)) {
        fprintf(stderr, "%s: --dump-steps: expected a comma-separated list of steps, got '%s'\n",
                cli_name, s);
        free(v);
        return -1;
    }
    for (int k = 0; k < n && !rc; k++) {
        if (v[k] < first || v[k] - first >= steps) {
            fprintf(stderr, "%s: --dump-steps: step %lld is not run (--steps %d runs "
                            "%lld..%lld%s)\n", cli_name, v[k], steps, first, first + steps - 1,
                    first ? ", from the checkpoint's step" : "");
            rc = -1;
        } else {
            want[v[k] - first] = 1;
        }
    }
    free(v);
    return rc;
}

static double clock_ms(clockid_t id) {
    struct timespec t;
    clock_gettime(id, &t);
    return (double)t.tv_sec * 1e3 + (double)t.tv_nsec * 1e-6;
}
static double now_ms(void) { return clock_ms(CLOCK_MONOTONIC); }
/* CPU time of this thread: what a step costs, even on a machine that
 * other processes share (wall time then includes their turns). */
static double cpu_ms(void) { return clock_ms(CLOCK_THREAD_CPUTIME_ID); }

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static uint32_t bits(float f) {
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return u;
}

/* --trace, --dump and --digest: writable regular files, no two of them
 * one file, and --dump-steps only with something to dump; --save: a
 * directory that can take the checkpoint, with none of the other
 * outputs at it or inside it. */
static int check_outputs(const char *trace_path, const char *dump_path, const char *digest_path,
                         const char *dump_steps, const char *save_dir, int check) {
    perr_t e;
    const char *outs[3] = {trace_path, dump_path, digest_path};
    const char *flag[3] = {"--trace", "--dump", "--digest"};
    /* --trace again: it was checked as it was parsed, maybe before the
     * inputs it must not name */
    for (int k = 0; k < 3; k++)
        if (outs[k] && pio_check_output(outs[k], flag[k], &e)) {
            fprintf(stderr, "%s: %s\n", cli_name, e.msg);
            return -1;
        }
    for (int k = 0; k < 3; k++)
        for (int j = k + 1; j < 3; j++)
            if (outs[k] && outs[j] && pio_same_output(outs[k], outs[j])) {
                fprintf(stderr, "%s: %s '%s' and %s '%s' name the same file; each needs its own\n",
                        cli_name, flag[k], outs[k], flag[j], outs[j]);
                return -1;
            }
    if (dump_steps && check) {
        fprintf(stderr, "parity check: --dump-steps: the checker compares (and dumps) every step; "
                        "use --steps\n");
        return -1;
    }
    if (dump_steps && !dump_path && !digest_path) {
        fprintf(stderr, "%s: --dump-steps: nothing is dumped without --dump or --digest\n", cli_name);
        return -1;
    }
    if (!save_dir) return 0;
    if (check) {
        fprintf(stderr, "parity check: --save: the checker compares runs and saves nothing; use "
                        "parity train --save (a checkpoint is the same from any layout)\n");
        return -1;
    }
    if (ckpt_check_save_dir(save_dir, "--save", &e)) {
        fprintf(stderr, "%s: %s\n", cli_name, e.msg);
        return -1;
    }
    char *file = ckpt_file_path(save_dir);
    if (!file) {
        fprintf(stderr, "%s: out of memory\n", cli_name);
        return -1;
    }
    int rc = 0;
    for (int k = 0; k < 3 && !rc; k++) {
        if (!outs[k]) continue;
        if (pio_same_output(outs[k], file))
            rc = -1, fprintf(stderr, "%s: %s '%s' is the checkpoint file of --save '%s'; each "
                                     "needs its own\n", cli_name, flag[k], outs[k], save_dir);
        else if (pio_output_inside(outs[k], save_dir))
            rc = -1, fprintf(stderr, "%s: %s '%s' is the checkpoint directory of --save '%s' or "
                                     "inside it, which holds only the checkpoint; put it "
                                     "elsewhere\n",
                             cli_name, flag[k], outs[k], save_dir);
    }
    free(file);
    return rc;
}

/* --export-weights and --names: the scheme named, the directory able to
 * take DIR/model.safetensors, no other output (--save's file, --dump,
 * --digest, --trace) the same file; parity check and mpirun refused. */
static int check_export(const char *cmd, int check, const char *export_dir, const char *names,
                        const char *const outs[4], const char *const flag[4]) {
    perr_t e;
    names_scheme_t s;
    if (names && !export_dir) {
        fprintf(stderr, "parity %s: --names: it names the scheme of --export-weights' file; "
                        "give --export-weights DIR too\n", cmd);
        return -1;
    }
    if (!export_dir) return 0;
    if (check) {
        fprintf(stderr, "parity check: --export-weights: the checker compares runs and writes no "
                        "weights; use parity train --export-weights\n");
        return -1;
    }
    if (runtime_processes() > 1) {
        fprintf(stderr, "parity %s: --export-weights: not under mpirun (%d processes); the weights "
                        "are the same from any layout: run it without mpirun\n", cmd,
                runtime_processes());
        return -1;
    }
    if (!names) {
        fprintf(stderr, "parity %s: --export-weights: give --names SCHEME (megatron-lm, "
                        "megatron-core, hf-gpt2 or nanogpt): the names and layouts to write\n", cmd);
        return -1;
    }
    if (names_scheme_parse(names, &s, &e) || ckpt_check_save_dir(export_dir, "--export-weights", &e)) {
        fprintf(stderr, "parity %s: %s\n", cmd, e.msg);
        return -1;
    }
    char *file = names_weights_path(export_dir), *save = outs[3] ? ckpt_file_path(outs[3]) : NULL;
    int rc = file && (save || !outs[3]) ? 0 : (fprintf(stderr, "%s: out of memory\n", cli_name), -1);
    for (int k = 0; k < 4 && !rc; k++) {
        const char *o = k < 3 ? outs[k] : save;
        if (o && (pio_same_output(o, file) || pio_output_inside(o, export_dir)))
            rc = -1, fprintf(stderr, "parity %s: %s '%s' is --export-weights '%s' or inside it, "
                                     "which holds only the weights; each needs its own\n", cmd,
                             flag[k], outs[k], export_dir);
    }
    free(save);
    free(file);
    return rc;
}

/* What the run reads, noted before its outputs are checked, so that no
 * output replaces one (fileio.h); --parallel-config is noted as it is
 * parsed (layout_cli.c). --save may replace --load's checkpoint: it was
 * read whole before the run and is replaced only when the run succeeds
 * (ckpt.h), as Megatron's --save and --load name one directory. */
static void note_inputs(const char *data_path, const char *model, const char *load_dir) {
    static char default_data[4200];
    perr_t e;
    if (!data_path && corpus_default_path(default_data, sizeof default_data, &e) == 0)
        pio_note_input(default_data, "--data (default)");
    pio_note_input(data_path, "--data");
    model_config_t builtin;
    if (model_config_builtin(model, &builtin, NULL)) pio_note_input(model, "--model");
    if (load_dir) pio_note_input_dir(load_dir, "--load", "--save");
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

/* `parity train` and `parity check` run in three parts: parse (what the
 * command line says), validate (the model, the layout, the outputs and
 * the inputs, each refused before anything runs) and run (the golden run
 * here, a layout in layout_cli.c, both through run_output.h). One option
 * parser, so a layout means the same in both commands. */
enum { MAX_CFG_OPTS = 256, MAX_FLAGS = 1024 };

typedef struct {
    const char *cmd; /* argv[0]: train or check, for messages */
    int check;
    const char *model, *backend, *data_path, *dump_path, *dump_steps, *digest_path;
    const char *save_dir, *load_dir, *compare, *export_dir, *names;
    long long steps, threads;
    int quiet, print_config, print_layout, layout_given;
    /* pass 1 keeps the positions of the config overrides; pass 2
     * applies them to the base config --model names, whatever the order */
    int cfg_at[MAX_CFG_OPTS], n_cfg;
    layout_opts_t lo;
} train_args_t;

/* What a validated run starts from; inputs_free releases it. */
typedef struct {
    model_config_t cfg;
    corpus_t data;
    ckpt_state_t resume;
    unsigned char *want; /* [steps] steps to dump */
    unsigned classes;    /* check: --compare's classes */
} train_inputs_t;

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
static int parse_args(train_args_t *t, int argc, char **argv, int check) {
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

int cli_model_config(const char *model, model_config_t *cfg) {
    perr_t err;
    if (model_config_base(model, cfg, &err)) {
        fprintf(stderr, "%s: %s\n", cli_name, err.msg);
        return -1;
    }
    if (model_config_validate(cfg, &err)) {
        fprintf(stderr, "%s: --model %s: invalid config: %s\n", cli_name, model, err.msg);
        return -1;
    }
    return 0;
}

/* The model: --model, then pass 2, the overrides (model_flags.h); a
 * --micro-batch-size is the layout's too (Megatron's arithmetic). */
static int model_config(train_args_t *t, char **argv, model_config_t *cfg) {
    perr_t err;
    const char *flag[MAX_CFG_OPTS], *val[MAX_CFG_OPTS];
    for (int j = 0; j < t->n_cfg; j++) {
        int i = t->cfg_at[j], takes_value = 0;
        model_flag_known(argv[i], &takes_value);
        flag[j] = argv[i];
        val[j] = takes_value ? argv[i + 1] : NULL;
    }
    int micro_given = 0;
    if (model_config_from_flags(t->model, t->n_cfg, flag, val, cfg, &micro_given, &err)) {
        fprintf(stderr, "%s: %s\n", cli_name, err.msg);
        return -1;
    }
    if (micro_given) {
        t->lo.pc.micro_batch = cfg->micro_batch;
        t->lo.pc.given |= PC_GIVEN_MICRO;
    }
    return 0;
}

/* The layout against the model, and the negative control against the
 * layout (broken.h). 0, or -1 after a message. */
static int validate_layout(train_args_t *t, model_config_t *cfg) {
    perr_t err;
    /* a front end's own errors name its keys; later ones name the flags,
     * so they carry the glossary of the file's keys */
    if (layout_opts_resolve(&t->lo, &err)) {
        fprintf(stderr, "parity %s: invalid layout: %s\n", t->cmd, err.msg);
        return -1;
    }
    if (pconfig_validate(&t->lo.pc, cfg->global_batch, &err) || layout_opts_check(&t->lo, cfg, &err)) {
        char origin[512];
        fprintf(stderr, "parity %s: invalid layout%s: %s\n", t->cmd,
                layout_opts_origin(&t->lo, origin, sizeof origin), err.msg);
        return -1;
    }
    /* nvme offload: the directory, before any run (its lock and the run's
     * own directory in it are taken once the inputs are read: train_main) */
    if (t->lo.pc.offload == PC_OFFLOAD_NVME &&
        pio_check_dir(t->lo.pc.offload_path, "--offload-path", &err)) {
        fprintf(stderr, "parity %s: %s\n", t->cmd, err.msg);
        return -1;
    }
    /* NeMo's dtype and grad_sync_dtype (--dtype, --grad-sync-dtype): what
     * the gradients and the optimizer state are rounded to, so the golden
     * run's too (model.h); the model's JSON says them */
    const pc_dtype_t dt[2] = {t->lo.pc.grad_sync_dtype, t->lo.pc.dtype};
    int *field[2] = {&cfg->grad_dtype, &cfg->optim_dtype};
    for (int k = 0; k < 2; k++)
        *field[k] = dt[k] == PC_DTYPE_BF16 ? MODEL_BF16 : MODEL_FP32;
    if (!t->check && t->lo.broken && t->lo.broken->compared_only && !t->dump_path &&
        !t->digest_path) {
        char name[64];
        fprintf(stderr, "parity train: --test-broken %s: a flipped replica shows only in what is "
                        "compared; give --dump or --digest (or use parity check)\n",
                broken_spelling(t->lo.broken, t->lo.broken_device, name, sizeof name));
        return -1;
    }
    return 0;
}

/* The first flag given that runs something (--print-layout and
 * --print-config run nothing), or NULL; trace: --trace counts. */
static const char *runs_flag(const train_args_t *t, int trace) {
    const struct { int given; const char *flag; } r[] = {
        {t->dump_path != NULL, "--dump"},   {t->digest_path != NULL, "--digest"},
        {t->dump_steps != NULL, "--dump-steps"}, {t->save_dir != NULL, "--save"},
        {t->load_dir != NULL, "--load"},   {t->export_dir != NULL, "--export-weights"},
        {t->lo.step_through, "--step-through"},
        {trace && t->lo.trace_path != NULL, "--trace"}};
    for (size_t k = 0; k < sizeof r / sizeof r[0]; k++)
        if (r[k].given) return r[k].flag;
    return NULL;
}

/* --print-layout and --print-config: -1 to go on (neither given), else
 * the exit status. Each refuses the flags that would run something,
 * naming the first. */
static int print_only(const train_args_t *t, const model_config_t *cfg) {
    perr_t err;
    if (t->print_layout) {
        const char *run = t->print_config ? "--print-config" : runs_flag(t, 1);
        if (run) {
            fprintf(stderr, "parity %s: %s: --print-layout prints the layout and exits; it runs "
                            "nothing to print a config of, dump, trace, step through, load or save%s\n",
                    t->cmd, run, !strcmp(run, "--trace") ? " (--trace writes no file)" : "");
            return 2;
        }
        memest_t mem;
        if (memest_layout(cfg, t->layout_given ? &t->lo.pc : NULL, &mem, &err) ||
            layout_print(cfg, &t->lo.pc, &mem, stdout, &err)) {
            layout_opts_blame(&t->lo, &err);
            fprintf(stderr, "parity %s: %s\n", t->cmd, err.msg);
            return 2;
        }
        return 0;
    }
    if (!t->print_config) return -1;
    const char *run = runs_flag(t, 0);
    if (run) {
        fprintf(stderr, "parity %s: %s: --print-config prints the resolved config and exits; it "
                        "runs nothing to --dump, --digest, --load, --save, --export-weights or "
                        "--step-through\n",
                t->cmd, run);
        return 2;
    }
    char *j = model_config_json(cfg);
    printf("%s\n", j ? j : "");
    free(j);
    return 0;
}

/* --export-weights: the parameters the run starts from (--load's, or the
 * seeded init: the golden table's, which every layout cuts its blocks
 * from) in the scheme's names. Written inside the command's output
 * transaction (fileio.h): renamed into place only when the run succeeds. */
static int export_weights(const train_args_t *t, const train_inputs_t *in) {
    if (!t->export_dir) return 0;
    perr_t err;
    names_scheme_t s;
    param_table_t tab;
    names_scheme_parse(t->names, &s, &err); /* checked by check_export */
    if (param_table_build(&tab, &in->cfg, &err)) {
        fprintf(stderr, "parity %s: --export-weights: %s\n", t->cmd, err.msg);
        return -1;
    }
    float *init = t->load_dir ? NULL : malloc((tab.total + 1) * sizeof *init);
    int rc = 0;
    if (!t->load_dir && !init) rc = perr_set(&err, "out of memory");
    if (init) params_init(&tab, in->cfg.seed, init);
    if (!rc) rc = names_weights_export(&in->cfg, s, init ? init : in->resume.params, t->export_dir, &err);
    if (rc) fprintf(stderr, "parity %s: --export-weights: %s\n", t->cmd, err.msg);
    else if (!t->quiet)
        printf("weights: %d parameters (%s names) of step %lld -> %s/%s\n", tab.count, t->names,
               (long long)in->resume.step, t->export_dir, CKPT_FILE);
    free(init);
    param_table_free(&tab);
    return rc;
}

static void inputs_free(train_inputs_t *in) {
    free(in->want);
    ckpt_state_free(&in->resume);
    corpus_free(&in->data);
}

/* The training text, checked against the model. */
static int load_data(const train_args_t *t, train_inputs_t *in) {
    perr_t err;
    char default_data[4200];
    const char *path = t->data_path;
    if (!path) {
        if (corpus_default_path(default_data, sizeof default_data, &err)) {
            fprintf(stderr, "%s: %s\n", cli_name, err.msg);
            return -1;
        }
        path = default_data;
    }
    if (corpus_load(&in->data, path, &err) ||
        corpus_check(&in->data, in->cfg.vocab, in->cfg.seq_length, &err) || tile_init(&err)) {
        fprintf(stderr, "%s: %s\n", cli_name, err.msg);
        return -1;
    }
    return 0;
}

/* --load: the state to start from, and the step it starts at; --save
 * must be able to hold the step the run ends at. */
static int load_resume(const train_args_t *t, train_inputs_t *in) {
    perr_t err;
    if ((t->load_dir || t->save_dir) && in->cfg.precision == MODEL_FP16) {
        /* the checkpoint format has no place for the loss scaler's state
         * or the skipped steps (adam_t == step): refused, not lost */
        fprintf(stderr, "parity %s: %s: checkpoints of --fp16 runs (the loss scaler's state) are "
                        "not built yet; --bf16 and fp32 runs save and load\n", t->cmd,
                t->load_dir ? "--load" : "--save");
        return -1;
    }
    if (t->load_dir) {
        char *saved_backend = NULL;
        if (ckpt_load(t->load_dir, &in->cfg, &in->resume, &saved_backend, &err)) {
            fprintf(stderr, "parity %s: %s\n", t->cmd, err.msg);
            return -1;
        }
        const char *mine = tile_backend_name(tile_get_backend());
        if (saved_backend && strcmp(saved_backend, mine))
            fprintf(stderr, "parity %s: note: the checkpoint was computed with the %s backend; "
                            "this run continues it with %s's bits\n",
                    t->cmd, saved_backend, mine);
        free(saved_backend);
    }
    const long long end = in->resume.step + t->steps;
    if (t->save_dir && end > CKPT_MAX_STEP) { /* refused now, not after the run */
        fprintf(stderr, "parity %s: --save: the run would end at step %lld, beyond the %lld a "
                        "checkpoint holds (ckpt.h)\n", t->cmd, end, (long long)CKPT_MAX_STEP);
        return -1;
    }
    return 0;
}

/* The steps to dump, --threads and --compare. */
static int run_options(const train_args_t *t, train_inputs_t *in) {
    perr_t err;
    if (!(in->want = calloc((size_t)t->steps, 1))) {
        fprintf(stderr, "%s: out of memory\n", cli_name);
        return -1;
    }
    if (t->dump_steps) {
        if (parse_steps_list(t->dump_steps, in->resume.step, (int)t->steps, in->want)) return -1;
    } else {
        for (long long s = 0; s < (t->steps <= 3 ? t->steps : 1); s++) in->want[s] = 1;
    }
    if (t->threads > 1 && (t->check || t->layout_given)) {
        fprintf(stderr, "parity %s: --threads %lld: compute threads are for the one-device golden "
                        "run (parity train without layout options); a layout runs one thread per "
                        "device\n", t->cmd, t->threads);
        return -1;
    }
    if (t->threads > 1 && pool_set_threads((int)t->threads, &err)) {
        fprintf(stderr, "parity %s: --threads: %s\n", t->cmd, err.msg);
        return -1;
    }
    in->classes = CHECK_ALL;
    if (t->compare && (!t->check || check_parse_classes(t->compare, &in->classes, &err))) {
        fprintf(stderr, "%s: %s\n", cli_name,
                t->check ? err.msg : "--compare: only parity check compares tensors");
        return -1;
    }
    return 0;
}

/* Everything a run reads, after its outputs are known to be writable:
 * 0, or -1 after a message (inputs_free releases what was taken). */
static int prepare_inputs(const train_args_t *t, train_inputs_t *in) {
    perr_t err;
    /* --step-through: every run of this command, the golden one too */
    if (t->lo.step_through && devices_set_step_through(1, t->lo.step_focus, &err)) {
        fprintf(stderr, "parity %s: %s\n", t->cmd, err.msg);
        return -1;
    }
    /* output files: fail now, not after the training run, and create
     * nothing until the run has succeeded (fileio.h) */
    note_inputs(t->data_path, t->model, t->load_dir);
    const char *const outs[4] = {t->lo.trace_path, t->dump_path, t->digest_path, t->save_dir};
    const char *const flag[4] = {"--trace", "--dump", "--digest", "--save"};
    if (check_outputs(t->lo.trace_path, t->dump_path, t->digest_path, t->dump_steps, t->save_dir,
                      t->check) ||
        check_export(t->cmd, t->check, t->export_dir, t->names, outs, flag))
        return -1;
    if (load_data(t, in) || load_resume(t, in) || run_options(t, in)) return -1;
    return 0;
}

/* The golden run's memory, before any of it is taken (memest.h), then
 * the model: NULL after a message. */
static gpt_t *golden_model(const run_output_t *o, const model_config_t *cfg, int load) {
    perr_t err;
    memest_t mem;
    gpt_t *g = NULL;
    int bad = memest_layout(cfg, NULL, &mem, &err);
    if (!bad) run_output_memest(o, cfg, load, &mem);
    if (bad || memest_check(&mem, 0, &err) || gpt_new(&g, cfg, &err)) {
        fprintf(stderr, "%s: %s\n", cli_name, err.msg);
        return NULL;
    }
    if (!o->quiet) memest_print(&mem, stdout);
    return g;
}

/* The golden run's dump: its backend named, the initial parameters in. */
static int golden_dump(const run_output_t *o, gpt_t *g, dump_t **out) {
    perr_t err;
    const unsigned what = run_output_dump_what(o);
    if (!what) return 0;
    dump_t *dump = *out = dump_new(g, what);
    if (!dump || dump_set_metadata(dump, "backend", tile_backend_name(tile_get_backend()), &err) ||
        dump_add_init(dump, g, &err)) {
        fprintf(stderr, "%s: dump: %s\n", cli_name, dump ? err.msg : "out of memory");
        return -1;
    }
    return 0;
}

/* The summary line: the losses, and the median step in wall and CPU time. */
static void golden_summary(const model_config_t *cfg, int quiet, double *ms, double *cpu,
                           long long steps, float first_loss, float last_loss) {
    double total = 0;
    for (long long s = 0; s < steps; s++) total += ms[s];
    qsort(ms, (size_t)steps, sizeof(double), cmp_double);
    qsort(cpu, (size_t)steps, sizeof(double), cmp_double);
    printf("summary: model %s | backend %s | %lld steps | loss %.6f -> %.6f (0x%08x) | "
           "step median %.1f ms, min %.1f ms, cpu median %.1f ms, total %.2f s\n",
           cfg->name, tile_backend_name(tile_get_backend()), steps, (double)first_loss,
           (double)last_loss, bits(last_loss), ms[steps / 2], ms[0], cpu[steps / 2], total * 1e-3);
    if (quiet || tile_get_backend() != TILE_BACKEND_OPENBLAS) return;
    int wide, narrow, pair, folded;
    tile_wide_counts(&wide, &narrow);
    tile_pair_counts(&pair, &folded);
    printf("tile blocks: %d shapes checked as one OpenBLAS call each, %d run tile by tile; %d "
           "two-K-tile shapes summed by two calls, %d folded (tile.h: tile_gemm_tiles, "
           "tile_gemm_tiles_pair)\n", wide, narrow, pair, folded);
}

/* The golden run's steps through the one step path, timed: 0, 1 (a
 * non-finite step stops the run) or 2. */
static int golden_steps(const run_output_t *o, const model_config_t *cfg, gpt_t *g,
                        const corpus_t *data, dump_t *dump) {
    perr_t err;
    double *ms = calloc((size_t)o->steps, sizeof(double)), *cpu = calloc((size_t)o->steps, sizeof(double));
    float first_loss = 0, last_loss = 0;
    int rc = 0;
    for (int s = 0; s < o->steps && !rc; s++) {
        gpt_step_stats_t st;
        double t0 = now_ms(), c0 = cpu_ms();
        if (dump_golden_step(g, data, o->first + s, dump && o->want[s] ? dump : NULL, &st, &err)) {
            fprintf(stderr, "%s: dump: %s\n", cli_name, err.msg);
            rc = 2;
            break;
        }
        double dt = now_ms() - t0;
        if (ms && cpu) ms[s] = dt, cpu[s] = cpu_ms() - c0;
        if (s == 0) first_loss = st.loss;
        last_loss = st.loss;
        rc = run_output_step(o, s, &st, dt, !o->quiet);
        if (!o->quiet) gpt_moe_print_step(g, stdout);
    }
    if (rc == 0 && ms && cpu) golden_summary(cfg, o->quiet, ms, cpu, o->steps, first_loss, last_loss);
    free(ms);
    free(cpu);
    return rc;
}

/* `parity train` without layout flags: the one-device golden run. */
static int run_golden(const run_output_t *o, train_inputs_t *in, int load) {
    const model_config_t *cfg = &in->cfg;
    gpt_t *g = golden_model(o, cfg, load);
    if (!g) return 2;
    if (load) ckpt_state_to_gpt(&in->resume, g); /* the golden table is the checkpoint's */
    ckpt_state_free(&in->resume);
    dump_t *dump = NULL;
    int rc = golden_dump(o, g, &dump) ? 2 : 0;
    if (rc == 0 && !o->quiet)
        printf("parity train: model %s (%zu parameters, %s%d layers, hidden %d, heads %d, "
               "seq %d, batch %d x %d tokens, microbatch %d), backend %s%s\n",
               cfg->name, g->table.total, enc_layers(cfg), cfg->layers, cfg->hidden, cfg->heads,
               cfg->seq_length,
               cfg->global_batch, cfg->seq_length, cfg->micro_batch,
               tile_backend_name(tile_get_backend()),
               accum_plain_sums() ? ", PLAIN fp32 SUMS (diagnostic build, not golden)" : "");
    if (rc == 0) rc = golden_steps(o, cfg, g, &in->data, dump);
    float *scratch[2] = {NULL, NULL}; /* adamw8bit: the dequantized moments */
    const ckpt_state_t now = o->save_dir && rc == 0 ? ckpt_state_view_gpt(g, o->first + o->steps, scratch)
                                                    : (ckpt_state_t){0};
    if (rc == 0 && o->save_dir && (!now.adam_m || !now.adam_v)) {
        fprintf(stderr, "%s: --save: out of memory for AdamW's state\n", cli_name);
        rc = 2;
    }
    if (rc == 0) rc = run_output_finish(o, dump, o->quiet ? NULL : "dump", &now);
    free(scratch[0]);
    free(scratch[1]);
    dump_free(dump);
    gpt_free(g);
    return rc;
}

static int train_main(int argc, char **argv, int check) {
    train_args_t t;
    int rc = parse_args(&t, argc, argv, check);
    if (rc >= 0) return rc;
    /* --backend goes through PARITY_BACKEND, so that tile_init does not
     * refuse a portable run on a machine whose OpenBLAS fails its
     * start-up checks; then the environment, as the flags, before
     * anything runs */
    if (t.backend) setenv("PARITY_BACKEND", t.backend, 1);
    if (cli_env_check()) return 2;
    train_inputs_t in = {0};
    if (model_config(&t, argv, &in.cfg) || validate_layout(&t, &in.cfg)) return 2;
    if ((rc = print_only(&t, &in.cfg)) >= 0) return rc;
    /* nvme offload: --offload-path's lock (a run there already: refused,
     * naming it) and this run's own directory, held until the process
     * ends, any way but SIGKILL, and then removed (offload.c) */
    perr_t err;
    int bad = prepare_inputs(&t, &in);
    bad = cli_agree_inputs(&in.cfg, &t.lo.pc, t.lo.parallel_config, &in.data,
                           t.load_dir ? &in.resume : NULL, bad) != 0;
    if (!bad && t.lo.pc.offload == PC_OFFLOAD_NVME && engine_offload_claim(t.lo.pc.offload_path, &err)) {
        fprintf(stderr, "parity %s: %s\n", t.cmd, err.msg);
        bad = 1;
    }
    if (!bad && export_weights(&t, &in)) bad = 1;
    if (bad) {
        inputs_free(&in);
        return 2;
    }
    const int load = t.load_dir != NULL;
    const run_output_t out = {t.dump_path, t.digest_path, t.save_dir, in.want, (int)t.steps,
                              in.resume.step, t.quiet};
    if (check || t.layout_given) {
        layout_job_t job = {&in.cfg, &t.lo, &in.data, out, load ? &in.resume : NULL, in.classes};
        rc = check ? layout_check(&job) : layout_train(&job);
    } else {
        rc = run_golden(&out, &in, load);
    }
    inputs_free(&in);
    return rc;
}

int cmd_train(int argc, char **argv) { return train_main(argc, argv, 0); }
int cmd_check(int argc, char **argv) { return train_main(argc, argv, 1); }
