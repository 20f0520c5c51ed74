/* train_inputs.c - what a validated run reads and writes, checked
 * before anything runs (train_prepare_inputs): the outputs (--dump,
 * --digest, --trace, --save, --export-weights) writable and distinct, no
 * output naming an input, the training text, --load's checkpoint, the
 * steps to dump, --threads and --compare; and --export-weights' file. */
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
#include "parity/fileio.h"
#include "parity/names.h"
#include "parity/numparse.h"
#include "parity/pool.h"
#include "parity/tile.h"
#include "train.h"

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

/* --export-weights: the parameters the run starts from (--load's, or the
 * seeded init: the golden table's, which every layout cuts its blocks
 * from) in the scheme's names. Written inside the command's output
 * transaction (fileio.h): renamed into place only when the run succeeds. */
int train_export_weights(const train_args_t *t, const train_inputs_t *in) {
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

void train_inputs_free(train_inputs_t *in) {
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
 * 0, or -1 after a message (train_inputs_free releases what was taken). */
int train_prepare_inputs(const train_args_t *t, train_inputs_t *in) {
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
