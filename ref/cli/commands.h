/* commands.h - the subcommands of the `parity` program, one file each. */
#ifndef PARITY_CLI_COMMANDS_H
#define PARITY_CLI_COMMANDS_H

#include <stddef.h>

#include "parity/ckpt.h"
#include "parity/corpus.h"
#include "model/gpt.h"
#include "parity/pconfig.h"

/* Each takes the arguments after the subcommand name (argv[0] is the
 * subcommand) and returns the process exit status. */
int cmd_diff(int argc, char **argv);   /* diff.c  */
int cmd_train(int argc, char **argv);  /* train.c */
int cmd_check(int argc, char **argv);  /* train.c: golden vs layout */
int cmd_svg(int argc, char **argv);    /* svg.c: pictures (schedule, grid, collective) */
int cmd_plan(int argc, char **argv);   /* plan.c: the layouts that fit a device budget */
int cmd_judge(int argc, char **argv);  /* judge.c: a backend's rank files against the golden run */
int cmd_modes(int argc, char **argv);  /* modes.c: every mode and every pair, supported or refused */

/* A memory size flag in MB (10^6 bytes; --arena-mb) to the nearest byte.
 * Truncating would make 33.0824 MB 33082399 bytes (the product rounds
 * just below), one byte short of an estimate printed as 33.0824 MB, and
 * refuse a run that fits. */
static inline size_t cli_mb_bytes(double mb) { return (size_t)(mb * 1e6 + 0.5); }

/* train.c: --model's config as train reads it (a built-in, else a JSON
 * file), validated; 0, or -1 after a message naming --model. */
int cli_model_config(const char *model, model_config_t *cfg);

/* "parity train", "parity check", "parity plan", ...: the command that was run,
 * which every message names (main.c sets it before dispatching). */
extern const char *cli_name;

/* env_check.c: every PARITY_* variable a run reads, at start-up; 0, or 2
 * after a message naming the variable and its valid values. */
int cli_env_check(void);

/* agree.c: under mpirun, every process resolved the same model config,
 * layout, text and checkpoint (coll.h); 0, or -1 after a message (every
 * process reaches the same verdict). A process whose inputs could not be
 * read (failed_here, after its own message) takes part too, so that the
 * others stop with it instead of waiting. */
int cli_agree_inputs(const model_config_t *cfg, const pconfig_t *pc, const char *parallel_config,
                     const corpus_t *data, const ckpt_state_t *resume, int failed_here);

#endif
