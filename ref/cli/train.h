/* train.h - what the parts of `parity train` and `parity check` share
 * (internal to ref/cli): the parsed command line and the validated
 * inputs.
 *
 * The two commands run in three parts: parse (what the command line
 * says: train_args.c), validate (the model and the layout: train.c; the
 * outputs and the inputs: train_inputs.c, each refused before anything
 * runs) and run (the golden run: train_golden.c; a layout: layout_cli.c;
 * both through run_output.h). One option parser, so a layout means the
 * same in both commands. */
#ifndef PARITY_CLI_TRAIN_H
#define PARITY_CLI_TRAIN_H

#include "parity/ckpt.h"
#include "parity/corpus.h"
#include "layout_cli.h"
#include "run_output.h"
#include "model/gpt.h"

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

/* train_args.c: pass 1 over the command line into *t: -1 to go on, else
 * the exit status (--help and --test-broken list answer and exit 0). */
int train_parse_args(train_args_t *t, int argc, char **argv, int check);

/* train_inputs.c: everything a run reads, after its outputs are known to
 * be writable: 0, or -1 after a message (train_inputs_free releases what
 * was taken). */
int train_prepare_inputs(const train_args_t *t, train_inputs_t *in);
void train_inputs_free(train_inputs_t *in);

/* train_inputs.c: --export-weights' file, inside the command's output
 * transaction: 0, or -1 after a message. */
int train_export_weights(const train_args_t *t, const train_inputs_t *in);

/* train_golden.c: `parity train` without layout flags, the one-device
 * golden run: the exit status. */
int train_run_golden(const run_output_t *o, train_inputs_t *in, int load);

#endif
