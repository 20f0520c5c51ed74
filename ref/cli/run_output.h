/* run_output.h - the one step path of `parity train` and `parity check`.
 *
 * Every run the CLI makes (the golden run of train, a layout run of
 * train, the two runs of check) ends each step and the run the same way:
 * a step line, a stop at a non-finite loss or gradient norm, then the
 * dump, the digests and the checkpoint, written only through here. So a
 * layout cannot print, dump or save differently from the golden run it
 * is compared with. */
#ifndef PARITY_CLI_RUN_OUTPUT_H
#define PARITY_CLI_RUN_OUTPUT_H

#include <stdint.h>

#include "parity/ckpt.h"
#include "parity/corpus.h"
#include "parity/dump.h"
#include "parity/memest.h"
#include "model/gpt.h"

typedef struct {
    const char *dump_path, *digest_path; /* --dump, --digest, or NULL */
    const char *save_dir;                /* --save, or NULL */
    const unsigned char *want;           /* [steps]: 1 = dump that step */
    int steps;
    int64_t first; /* the first global step (a checkpoint's, with --load) */
    int quiet;
} run_output_t;

/* What the dump keeps: DUMP_TENSORS for --dump, DUMP_DIGESTS for
 * --digest; 0 = nothing is dumped. */
unsigned run_output_dump_what(const run_output_t *o);
/* The host memory of the dump and of the checkpoint read (load) or
 * written, added to m before anything is allocated. */
void run_output_memest(const run_output_t *o, const model_config_t *cfg, int load, memest_t *m);
/* A dump of this model's tensors (it needs the parameter table, not the
 * model's memory), or NULL when out of memory. */
dump_t *run_output_new_dump(const model_config_t *cfg, unsigned what);

/* The run's s-th step: its line when print (with its time when ms >= 0),
 * then 0, or 1 after a message when its loss or gradient norm is not
 * finite (every run stops there: nothing is written). */
int run_output_step(const run_output_t *o, int s, const gpt_step_stats_t *st, double ms, int print);
/* After a successful run: --dump and --digest from dump, the line
 * "LABEL: N tensors -> ..." (none when label is NULL), and --save of
 * save (refused when not finite). 0, 1 (not finite) or 2 (a write). */
int run_output_finish(const run_output_t *o, const dump_t *dump, const char *label,
                      const ckpt_state_t *save);

/* "loss" or "gradient norm" when that value of the step is not finite,
 * else NULL. */
const char *step_not_finite(const gpt_step_stats_t *st);
/* Whether a state's parameters, m and v are all finite: a checkpoint of
 * a run that went non-finite is refused (exit 1, nothing saved). */
int ckpt_state_finite(const ckpt_state_t *s);

#endif
