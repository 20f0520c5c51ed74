/* train.c - `parity train` (the golden run, one device, or a layout) and
 * `parity check`: the command's course.
 *
 *   parity train --model gpt-tiny --steps 20
 *   parity train --model gpt-micro --steps 3 --dump run.safetensors
 *   parity train --model gpt-tiny --steps 2 --save ckpt
 *   parity train --model gpt-tiny --steps 2 --load ckpt --tensor-model-parallel-size 4
 *
 * Prints one line per step and a summary. Flags follow Megatron-LM's
 * names where Megatron has one; every flag overrides the model config,
 * whatever its position on the command line.
 *
 * This file: the model and the layout validated (pass 2 applies the
 * model overrides), --print-layout and --print-config, and the run's
 * course (train_main); the parts are train.h's. */
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

#include "broken.h"
#include "commands.h"
#include "parity/fileio.h"
#include "parity/memest.h"
#include "parity/model_flags.h"
#include "parity/pconfig.h"
#include "train.h"

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
    t->lo.resumed = t->load_dir != NULL;
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
        *field[k] = dt[k] == PC_DTYPE_BF16 ? MODEL_BF16 : dt[k] == PC_DTYPE_FP16 ? MODEL_FP16 : MODEL_FP32;
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

static int train_main(int argc, char **argv, int check) {
    train_args_t t;
    int rc = train_parse_args(&t, argc, argv, check);
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
    int bad = train_prepare_inputs(&t, &in);
    bad = cli_agree_inputs(&in.cfg, &t.lo.pc, t.lo.parallel_config, &in.data,
                           t.load_dir ? &in.resume : NULL, bad) != 0;
    if (!bad && t.lo.pc.offload == PC_OFFLOAD_NVME && engine_offload_claim(t.lo.pc.offload_path, &err)) {
        fprintf(stderr, "parity %s: %s\n", t.cmd, err.msg);
        bad = 1;
    }
    if (!bad && train_export_weights(&t, &in)) bad = 1;
    if (bad) {
        train_inputs_free(&in);
        return 2;
    }
    const int load = t.load_dir != NULL;
    const run_output_t out = {t.dump_path, t.digest_path, t.save_dir, in.want, (int)t.steps,
                              in.resume.step, t.quiet};
    if (check || t.layout_given) {
        layout_job_t job = {&in.cfg, &t.lo, &in.data, out, load ? &in.resume : NULL, in.classes};
        rc = check ? layout_check(&job) : layout_train(&job);
    } else {
        rc = train_run_golden(&out, &in, load);
    }
    train_inputs_free(&in);
    return rc;
}

int cmd_train(int argc, char **argv) { return train_main(argc, argv, 0); }
int cmd_check(int argc, char **argv) { return train_main(argc, argv, 1); }
