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
#include <stddef.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "commands.h"
#include "parity/check.h"
#include "parity/ckpt.h"
#include "parity/corpus.h"
#include "layout_cli.h"
#include "parity/dump.h"
#include "parity/fileio.h"
#include "parity/memest.h"
#include "parity/model.h"
#include "parity/numparse.h"
#include "parity/pconfig.h"
#include "parity/pool.h"
#include "parity/pp.h"
#include "parity/tile.h"

static void usage(FILE *f) {
    fputs(
        "usage: parity train [options]\n"
        "  --model NAME|FILE.json   built-in model (gpt-micro, gpt-tiny, gpt-small) or a JSON\n"
        "                           config file (the \"config\" a dump stores); default gpt-tiny\n"
        "  --steps N                training steps (default 10)\n"
        "  --backend B              tile backend: openblas or portable (default: $PARITY_BACKEND,\n"
        "                           else openblas)\n"
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
        "                           run's (except name and micro_batch)\n"
        "  --threads N              compute threads for the one-device golden run (default 1):\n"
        "                           a contraction's blocks spread over N threads, the same bits\n"
        "                           (pool.h); a layout's devices already share the cores\n"
        "  --quiet                  only the summary line\n"
        "  --print-config           print the resolved config as JSON and exit\n"
        "every flag is given at most once (a repeat is refused, never \"the last one wins\");\n"
        "only --optim repeats, with another KEY each time\n"
        "model and training overrides (Megatron-style):\n"
        "  --num-layers N  --hidden-size N  --num-attention-heads N  --ffn-hidden-size N\n"
        "  --seq-length N  --vocab-size N  --global-batch-size N  --micro-batch-size N\n"
        "  --seed N  --untie-embeddings-and-output-weights\n"
        "  --hidden-dropout P  --attention-dropout P\n"
        "  --lr X  --min-lr X  --lr-warmup-iters N  --lr-decay-iters N\n"
        "  --adam-beta1 X  --adam-beta2 X  --adam-eps X  --weight-decay X  --clip-grad X\n"
        "  --tile-tokens N  --tile-features N  --tile-ffn N   canonical tiles (I1)\n",
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
          "PARITY_STEP_THROUGH_DEVICE (ref/cli/env_check.c)\n",
          f);
}

typedef enum { OPT_INT, OPT_FLOAT, OPT_U64, OPT_TRUE } opt_kind_t;

typedef struct {
    const char *flag;
    opt_kind_t kind;
    size_t offset; /* into model_config_t */
} cfg_opt_t;

#define OFF(f) offsetof(model_config_t, f)
static const cfg_opt_t cfg_opts[] = {
    {"--num-layers", OPT_INT, OFF(layers)},
    {"--hidden-size", OPT_INT, OFF(hidden)},
    {"--num-attention-heads", OPT_INT, OFF(heads)},
    {"--ffn-hidden-size", OPT_INT, OFF(ffn)},
    {"--seq-length", OPT_INT, OFF(seq_length)},
    {"--vocab-size", OPT_INT, OFF(vocab)},
    {"--global-batch-size", OPT_INT, OFF(global_batch)},
    {"--micro-batch-size", OPT_INT, OFF(micro_batch)},
    {"--seed", OPT_U64, OFF(seed)},
    {"--untie-embeddings-and-output-weights", OPT_TRUE, OFF(tied)},
    {"--hidden-dropout", OPT_FLOAT, OFF(hidden_dropout)},
    {"--attention-dropout", OPT_FLOAT, OFF(attention_dropout)},
    {"--lr", OPT_FLOAT, OFF(lr)},
    {"--min-lr", OPT_FLOAT, OFF(min_lr)},
    {"--lr-warmup-iters", OPT_INT, OFF(warmup)},
    {"--lr-decay-iters", OPT_INT, OFF(decay_steps)},
    {"--adam-beta1", OPT_FLOAT, OFF(beta1)},
    {"--adam-beta2", OPT_FLOAT, OFF(beta2)},
    {"--adam-eps", OPT_FLOAT, OFF(eps)},
    {"--weight-decay", OPT_FLOAT, OFF(weight_decay)},
    {"--clip-grad", OPT_FLOAT, OFF(clip_grad)},
    {"--tile-tokens", OPT_INT, OFF(tile_tokens)},
    {"--tile-features", OPT_INT, OFF(tile_features)},
    {"--tile-ffn", OPT_INT, OFF(tile_ffn)},
};
#undef OFF

/* numbers: strict, with the flag named (numparse.h) */
static int parse_int(const char *flag, const char *s, long long lo, long long hi, long long *out) {
    perr_t e;
    if (num_parse_int(flag, s, lo, hi, out, &e)) {
        fprintf(stderr, "%s: %s\n", cli_name, e.msg);
        return -1;
    }
    return 0;
}

static int parse_float(const char *flag, const char *s, float *out) {
    perr_t e;
    if (num_parse_f32(flag, s, out, &e)) {
        fprintf(stderr, "%s: %s\n", cli_name, e.msg);
        return -1;
    }
    return 0;
}

static int apply_cfg_opt(model_config_t *c, const cfg_opt_t *o, const char *val) {
    char *field = (char *)c + o->offset;
    long long v;
    switch (o->kind) {
    case OPT_INT:
        if (parse_int(o->flag, val, -2147483647LL, 2147483647LL, &v)) return -1;
        *(int *)field = (int)v;
        return 0;
    case OPT_U64:
        if (parse_int(o->flag, val, 0, 9007199254740992LL, &v)) return -1;
        *(uint64_t *)field = (uint64_t)v;
        return 0;
    case OPT_FLOAT:
        return parse_float(o->flag, val, (float *)field);
    case OPT_TRUE:
        *(int *)field = 0; /* the only boolean flag unties */
        return 0;
    }
    return -1;
}

/* "0,1,2" -> flags in want[0..steps), for the run's global steps
 * first .. first+steps-1 (first > 0 resumes a checkpoint). */
static int parse_steps_list(const char *s, long long first, int steps, unsigned char *want) {
    const char *p = s;
    if (!*p) goto bad;
    while (*p) {
        char *end;
        errno = 0;
        long v = strtol(p, &end, 10);
        if (errno || end == p || v < 0) goto bad;
        if (v < first || v - first >= steps) {
            fprintf(stderr, "%s: --dump-steps: step %ld is not run (--steps %d runs "
                            "%lld..%lld%s)\n", cli_name,
                    v, steps, first, first + steps - 1, first ? ", from the checkpoint's step" : "");
            return -1;
        }
        want[v - first] = 1;
        p = end;
        if (*p == ',') p++;
        else if (*p) goto bad;
    }
    return 0;
bad:
    fprintf(stderr, "%s: --dump-steps: expected a comma-separated list of steps, got '%s'\n", cli_name,
            s);
    return -1;
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
    for (int k = 1; k < 3; k++) /* --trace was checked as it was parsed */
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

/* `parity train` (check == 0) and `parity check` (check == 1): one
 * option parser, so a layout means the same in both. */
static int train_main(int argc, char **argv, int check) {
    const char *model = "gpt-tiny", *backend = NULL, *data_path = NULL, *dump_path = NULL;
    const char *dump_steps = NULL, *digest_path = NULL, *save_dir = NULL, *load_dir = NULL;
    const char *compare = NULL;
    long long steps = check ? 3 : 10;
    int quiet = 0, print_config = 0, print_layout = 0, layout_given = 0;
    long long threads = 1;
    perr_t err;
    layout_opts_t lo;
    layout_opts_defaults(&lo);

    /* pass 1: the base config and the non-config options; the positions
     * of config overrides are kept for pass 2 */
    enum { MAX_CFG_OPTS = 256 };
    int cfg_at[MAX_CFG_OPTS], n_cfg = 0;
    enum { MAX_FLAGS = 1024 };
    int seen[MAX_FLAGS], nseen = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        int has_val = i + 1 < argc;
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
#define VAL(var)                                                                       \
    do {                                                                               \
        if (num_flag_value(a, has_val ? argv[i + 1] : NULL, &err)) {                   \
            fprintf(stderr, "parity %s: %s\n", argv[0], err.msg);                       \
            return 2;                                                                  \
        }                                                                              \
        var = argv[++i];                                                               \
    } while (0)
        if (!strcmp(a, "--model") || !strcmp(a, "--config")) VAL(model);
        else if (!strcmp(a, "--backend")) VAL(backend);
        else if (!strcmp(a, "--data")) VAL(data_path);
        else if (!strcmp(a, "--dump")) VAL(dump_path);
        else if (!strcmp(a, "--dump-steps")) VAL(dump_steps);
        else if (!strcmp(a, "--digest")) VAL(digest_path);
        else if (!strcmp(a, "--save")) VAL(save_dir);
        else if (!strcmp(a, "--load")) VAL(load_dir);
        else if (!strcmp(a, "--compare")) VAL(compare);
        else if (!strcmp(a, "--steps")) {
            const char *v;
            VAL(v);
            if (parse_int("--steps", v, 1, 1000000000LL, &steps)) return 2;
        } else if (!strcmp(a, "--threads")) {
            const char *v;
            VAL(v);
            if (parse_int("--threads", v, 1, POOL_MAX_THREADS, &threads)) return 2;
        } else if (!strcmp(a, "--quiet")) quiet = 1;
        else if (!strcmp(a, "--print-config")) print_config = 1;
        else if (!strcmp(a, "--print-layout")) print_layout = 1;
        else {
            int j = i, r = strcmp(a, "--global-batch-size") && strcmp(a, "--micro-batch-size")
                               ? layout_opts_parse(&lo, argc, argv, &j, &err)
                               : 0;
            if (r < 0) {
                fprintf(stderr, "parity %s: %s\n", argv[0], err.msg);
                return 2;
            }
            if (r == 1) {
                layout_given = 1;
                i = j - 1;
                continue;
            }
            const cfg_opt_t *o = NULL;
            for (size_t k = 0; k < sizeof cfg_opts / sizeof cfg_opts[0]; k++)
                if (!strcmp(a, cfg_opts[k].flag)) o = &cfg_opts[k];
            if (!o) {
                fprintf(stderr, "%s: unknown option '%s' (see %s --help)\n", cli_name, a, cli_name);
                return 2;
            }
            if (o->kind != OPT_TRUE && num_flag_value(a, has_val ? argv[i + 1] : NULL, &err)) {
                fprintf(stderr, "parity %s: %s\n", argv[0], err.msg);
                return 2;
            }
            if (n_cfg == MAX_CFG_OPTS) {
                fprintf(stderr, "%s: more than %d config options\n", cli_name, MAX_CFG_OPTS);
                return 2;
            }
            cfg_at[n_cfg++] = i;
            if (o->kind != OPT_TRUE) i++;
        }
#undef VAL
    }
    /* the backend's name before anything else, --print-layout and
     * --print-config included: a flag is used or refused */
    if (backend && strcmp(backend, "portable") && strcmp(backend, "openblas")) {
        fprintf(stderr, "%s: --backend: expected openblas or portable, got '%s'\n", cli_name,
                backend);
        return 2;
    }
    /* --backend goes through PARITY_BACKEND, so that tile_init does not
     * refuse a portable run on a machine whose OpenBLAS fails its
     * start-up checks; then the environment, as the flags, before
     * anything runs */
    if (backend) setenv("PARITY_BACKEND", backend, 1);
    if (cli_env_check()) return 2;

    model_config_t cfg;
    if (model_config_builtin(model, &cfg, &err)) {
        /* not a built-in: a config file, starting from empty shape fields */
        const char *ext = strrchr(model, '.');
        if (access(model, F_OK) && !(ext && !strcmp(ext, ".json"))) {
            fprintf(stderr, "%s: --model: %s\n", cli_name, err.msg);
            return 2;
        }
        model_config_builtin("gpt-tiny", &cfg, NULL);
        model_config_t empty = cfg;
        empty.vocab = empty.seq_length = empty.hidden = empty.heads = empty.layers = 0;
        empty.ffn = empty.tile_tokens = empty.tile_features = empty.tile_ffn = 0;
        empty.global_batch = empty.micro_batch = 0;
        const char *base = strrchr(model, '/');
        snprintf(empty.name, sizeof empty.name, "%s", base ? base + 1 : model);
        char *dot = strrchr(empty.name, '.');
        if (dot && !strcmp(dot, ".json")) *dot = 0;
        cfg = empty;
        if (model_config_load(model, &cfg, &err)) {
            fprintf(stderr, "%s: %s\n", cli_name, err.msg);
            return 2;
        }
    }
    /* pass 2: overrides */
    int micro_given = 0;
    for (int j = 0; j < n_cfg; j++) {
        int i = cfg_at[j];
        for (size_t k = 0; k < sizeof cfg_opts / sizeof cfg_opts[0]; k++)
            if (!strcmp(argv[i], cfg_opts[k].flag)) {
                const char *val = cfg_opts[k].kind == OPT_TRUE ? NULL : argv[i + 1];
                if (apply_cfg_opt(&cfg, &cfg_opts[k], val)) return 2;
                if (cfg_opts[k].offset == offsetof(model_config_t, micro_batch)) micro_given = 1;
            }
    }
    /* A global batch the built-in's micro batch does not fit: one microbatch
     * (the golden schedule's; a layout's come from --accum-degree). */
    if (!micro_given && cfg.global_batch > 0 &&
        (cfg.micro_batch > cfg.global_batch || cfg.global_batch % cfg.micro_batch))
        cfg.micro_batch = cfg.global_batch;
    if (model_config_validate(&cfg, &err)) {
        fprintf(stderr, "%s: invalid config: %s\n", cli_name, err.msg);
        return 2;
    }
    /* the layout divides the model's batch: Megatron's arithmetic */
    if (micro_given) {
        lo.pc.micro_batch = cfg.micro_batch;
        lo.pc.given |= PC_GIVEN_MICRO;
    }
    /* a front end's own errors name its keys; later ones name the flags,
     * so they carry the glossary of the file's keys */
    if (layout_opts_resolve(&lo, &err)) {
        fprintf(stderr, "parity %s: invalid layout: %s\n", argv[0], err.msg);
        return 2;
    }
    if (pconfig_validate(&lo.pc, cfg.global_batch, &err) || layout_opts_check(&lo, &cfg, &err)) {
        char origin[512];
        fprintf(stderr, "parity %s: invalid layout%s: %s\n", argv[0],
                layout_opts_origin(&lo, origin, sizeof origin), err.msg);
        return 2;
    }
    if (!check && lo.broken_replica && !dump_path && !digest_path) {
        fprintf(stderr, "parity train: --test-broken-replica: a flipped replica shows only in what "
                        "is compared; give --dump or --digest (or use parity check)\n");
        return 2;
    }
    if (print_layout) {
        if (print_config || dump_path || digest_path || dump_steps || save_dir || load_dir ||
            lo.trace_path || lo.step_through) {
            fprintf(stderr, "parity %s: --print-layout prints the layout and exits; it runs "
                            "nothing to print a config of, dump, trace, step through, load or save%s\n",
                    argv[0], lo.trace_path ? " (--trace writes no file)" : "");
            return 2;
        }
        memest_t mem;
        if (memest_layout(&cfg, layout_given ? &lo.pc : NULL, &mem, &err) ||
            layout_print(&cfg, &lo.pc, &mem, stdout, &err)) {
            layout_opts_blame(&lo, &err);
            fprintf(stderr, "parity %s: %s\n", argv[0], err.msg);
            return 2;
        }
        return 0;
    }
    if (print_config && (dump_path || digest_path || dump_steps || save_dir || load_dir ||
                         lo.step_through)) {
        fprintf(stderr, "parity %s: --print-config prints the resolved config and exits; it runs "
                        "nothing to --dump, --digest, --load, --save or --step-through\n",
                argv[0]);
        return 2;
    }
    if (print_config) {
        char *j = model_config_json(&cfg);
        printf("%s\n", j ? j : "");
        free(j);
        return 0;
    }

    /* --step-through: every run of this command, the golden one too */
    if (lo.step_through && devices_set_step_through(1, lo.step_focus, &err)) {
        fprintf(stderr, "parity %s: %s\n", argv[0], err.msg);
        return 2;
    }
    /* output files: fail now, not after the training run, and create
     * nothing until the run has succeeded (fileio.h) */
    if (check_outputs(lo.trace_path, dump_path, digest_path, dump_steps, save_dir, check))
        return 2;

    /* data */
    char default_data[4200];
    if (!data_path) {
        if (corpus_default_path(default_data, sizeof default_data, &err)) {
            fprintf(stderr, "%s: %s\n", cli_name, err.msg);
            return 2;
        }
        data_path = default_data;
    }
    corpus_t data;
    if (corpus_load(&data, data_path, &err) ||
        corpus_check(&data, cfg.vocab, cfg.seq_length, &err)) {
        fprintf(stderr, "%s: %s\n", cli_name, err.msg);
        corpus_free(&data);
        return 2;
    }

    if (tile_init(&err)) {
        fprintf(stderr, "%s: %s\n", cli_name, err.msg);
        corpus_free(&data);
        return 2;
    }

    /* --load: the state to start from, and the step it starts at */
    ckpt_state_t resume = {0};
    if (load_dir) {
        char *saved_backend = NULL;
        if (ckpt_load(load_dir, &cfg, &resume, &saved_backend, &err)) {
            fprintf(stderr, "parity %s: %s\n", argv[0], err.msg);
            corpus_free(&data);
            return 2;
        }
        const char *mine = tile_backend_name(tile_get_backend());
        if (saved_backend && strcmp(saved_backend, mine))
            fprintf(stderr, "parity %s: note: the checkpoint was computed with the %s backend; "
                            "this run continues it with %s's bits\n",
                    argv[0], saved_backend, mine);
        free(saved_backend);
    }
    const long long first = resume.step;
    if (save_dir && first + steps > CKPT_MAX_STEP) { /* refused now, not after the run */
        fprintf(stderr, "parity %s: --save: the run would end at step %lld, beyond the %lld a "
                        "checkpoint holds (ckpt.h)\n", argv[0], first + steps, (long long)CKPT_MAX_STEP);
        ckpt_state_free(&resume);
        corpus_free(&data);
        return 2;
    }

    unsigned char *want = calloc((size_t)steps, 1);
    if (!want) {
        fprintf(stderr, "%s: out of memory\n", cli_name);
        ckpt_state_free(&resume);
        corpus_free(&data);
        return 2;
    }
    if (dump_steps) {
        if (parse_steps_list(dump_steps, first, (int)steps, want)) {
            free(want);
            ckpt_state_free(&resume);
            corpus_free(&data);
            return 2;
        }
    } else {
        for (long long s = 0; s < (steps <= 3 ? steps : 1); s++) want[s] = 1;
    }

    if (threads > 1 && (check || layout_given)) {
        fprintf(stderr, "parity %s: --threads %lld: compute threads are for the one-device golden "
                        "run (parity train without layout options); a layout runs one thread per "
                        "device\n", argv[0], threads);
        free(want);
        corpus_free(&data);
        return 2;
    }
    if (threads > 1 && pool_set_threads((int)threads, &err)) {
        fprintf(stderr, "parity %s: --threads: %s\n", argv[0], err.msg);
        free(want);
        corpus_free(&data);
        return 2;
    }

    unsigned classes = CHECK_ALL;
    if (compare && (!check || check_parse_classes(compare, &classes, &err))) {
        fprintf(stderr, "%s: %s\n", cli_name,
                check ? err.msg : "--compare: only parity check compares tensors");
        free(want);
        ckpt_state_free(&resume);
        corpus_free(&data);
        return 2;
    }
    if (check || layout_given) {
        layout_job_t job = {&cfg, &lo, &data, (int)steps, want, dump_path, digest_path, quiet,
                            load_dir ? &resume : NULL, save_dir, classes};
        int code = check ? layout_check(&job) : layout_train(&job);
        free(want);
        ckpt_state_free(&resume);
        corpus_free(&data);
        return code;
    }
    /* the golden run's memory, before any of it is taken (memest.h) */
    memest_t mem;
    int dumped = 0;
    for (long long s = 0; s < steps; s++) dumped += want[s] != 0;
    int mem_bad = memest_layout(&cfg, NULL, &mem, &err);
    if (!mem_bad && (dump_path || digest_path))
        memest_add_dump(&mem, &cfg, (dump_path ? DUMP_TENSORS : 0u) | (digest_path ? DUMP_DIGESTS : 0u),
                        dumped);
    if (!mem_bad) mem.host_shared += ckpt_host_bytes(&cfg, load_dir != NULL, save_dir != NULL);
    gpt_t *g = NULL;
    if (mem_bad || memest_check(&mem, 0, &err) || gpt_new(&g, &cfg, &err)) {
        fprintf(stderr, "%s: %s\n", cli_name, err.msg);
        free(want);
        ckpt_state_free(&resume);
        corpus_free(&data);
        return 2;
    }
    if (!quiet) memest_print(&mem, stdout);
    if (load_dir) ckpt_state_to_gpt(&resume, g); /* the golden table is the checkpoint's */
    ckpt_state_free(&resume);
    dump_t *dump = NULL;
    int rc = 0;
    if (dump_path || digest_path) {
        dump = dump_new(g, (dump_path ? DUMP_TENSORS : 0u) | (digest_path ? DUMP_DIGESTS : 0u));
        if (!dump || dump_set_metadata(dump, "backend", tile_backend_name(tile_get_backend()), &err) ||
            dump_add_init(dump, g, &err)) {
            fprintf(stderr, "%s: dump: %s\n", cli_name, dump ? err.msg : "out of memory");
            rc = 2;
            goto done;
        }
    }

    if (!quiet)
        printf("parity train: model %s (%zu parameters, %d layers, hidden %d, heads %d, "
               "seq %d, batch %d x %d tokens, microbatch %d), backend %s%s\n",
               cfg.name, g->table.total, cfg.layers, cfg.hidden, cfg.heads, cfg.seq_length,
               cfg.global_batch, cfg.seq_length, cfg.micro_batch,
               tile_backend_name(tile_get_backend()),
               accum_plain_sums() ? ", PLAIN fp32 SUMS (diagnostic build, not golden)" : "");
    double *ms = calloc((size_t)steps, sizeof(double)), *cpu = calloc((size_t)steps, sizeof(double));
    float first_loss = 0, last_loss = 0;
    for (long long s = 0; s < steps; s++) {
        const long long gs = first + s; /* the global step: data, masks, lr, names */
        gpt_observer_t obs = {0};
        int dumped = dump && want[s];
        if (dumped) dump_begin_step(dump, gs, &obs);
        gpt_step_stats_t st;
        double t0 = now_ms(), c0 = cpu_ms();
        gpt_train_step(g, &data, gs, dumped ? &obs : NULL, &st);
        double dt = now_ms() - t0;
        if (ms && cpu) ms[s] = dt, cpu[s] = cpu_ms() - c0;
        if (dumped && dump_end_step(dump, g, &st, &err)) {
            fprintf(stderr, "%s: dump: %s\n", cli_name, err.msg);
            rc = 2;
            break;
        }
        if (s == 0) first_loss = st.loss;
        last_loss = st.loss;
        if (!quiet)
            printf("step %5lld | loss %.6f (0x%08x) | lr %.4e | grad norm %.6f | %8.1f ms\n", gs,
                   (double)st.loss, bits(st.loss), (double)st.lr, (double)st.grad_norm, dt);
        fflush(stdout);
        const char *bad = step_not_finite(&st);
        if (bad) { /* every layout stops here too (layout_cli.c) */
            fprintf(stderr, "%s: step %lld: %s is not finite\n", cli_name, gs, bad);
            rc = 1;
            break;
        }
    }
    if (rc == 0 && ms && cpu) {
        double total = 0;
        for (long long s = 0; s < steps; s++) total += ms[s];
        qsort(ms, (size_t)steps, sizeof(double), cmp_double);
        qsort(cpu, (size_t)steps, sizeof(double), cmp_double);
        printf("summary: model %s | backend %s | %lld steps | loss %.6f -> %.6f (0x%08x) | "
               "step median %.1f ms, min %.1f ms, cpu median %.1f ms, total %.2f s\n",
               cfg.name, tile_backend_name(tile_get_backend()), steps, (double)first_loss,
               (double)last_loss, bits(last_loss), ms[steps / 2], ms[0], cpu[steps / 2],
               total * 1e-3);
        if (!quiet && tile_get_backend() == TILE_BACKEND_OPENBLAS) {
            int wide, narrow, pair, folded;
            tile_wide_counts(&wide, &narrow);
            tile_pair_counts(&pair, &folded);
            printf("tile blocks: %d shapes checked as one OpenBLAS call each, %d run tile by "
                   "tile; %d two-K-tile shapes summed by two calls, %d folded (tile.h: "
                   "tile_gemm_tiles, tile_gemm_tiles_pair)\n", wide, narrow, pair, folded);
        }
    }
    free(ms);
    free(cpu);
    if (rc == 0 && dump_path && dump_save(dump, dump_path, &err)) {
        fprintf(stderr, "%s: --dump: %s\n", cli_name, err.msg);
        rc = 2;
    }
    if (rc == 0 && digest_path && dump_write_digests(dump, digest_path, &err)) {
        fprintf(stderr, "%s: --digest: %s\n", cli_name, err.msg);
        rc = 2;
    }
    if (rc == 0 && !quiet && dump)
        printf("dump: %d tensors%s%s%s%s\n", dump_count(dump), dump_path ? " -> " : "",
               dump_path ? dump_path : "", digest_path ? ", digests -> " : "",
               digest_path ? digest_path : "");
    if (rc == 0 && save_dir) {
        const ckpt_state_t now = ckpt_state_view_gpt(g, first + steps);
        if (!ckpt_state_finite(&now)) {
            fprintf(stderr, "%s: --save: the parameters or AdamW's state after step %lld are not "
                            "finite; not saving\n", cli_name, first + steps - 1);
            rc = 1;
        } else if (ckpt_save(save_dir, &now, tile_backend_name(tile_get_backend()), &err)) {
            fprintf(stderr, "%s: --save: %s\n", cli_name, err.msg);
            rc = 2;
        } else if (!quiet) {
            printf("checkpoint: step %lld -> %s\n", first + steps, save_dir);
        }
    }
done:
    dump_free(dump);
    gpt_free(g);
    free(want);
    corpus_free(&data);
    return rc;
}

int cmd_train(int argc, char **argv) { return train_main(argc, argv, 0); }
int cmd_check(int argc, char **argv) { return train_main(argc, argv, 1); }
