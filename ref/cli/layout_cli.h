/* layout_cli.h - the parallel-layout side of `parity train` and
 * `parity check` (train.c parses the model; this runs the layout). */
#ifndef PARITY_LAYOUT_CLI_H
#define PARITY_LAYOUT_CLI_H

#include <stddef.h>
#include <stdio.h>

#include "parity/coll.h"
#include "parity/corpus.h"
#include "model/gpt.h"
#include "parity/memest.h"
#include "parity/pconfig.h"
#include "run_output.h"

enum { LAYOUT_MAX_OPTIM = 32 };
typedef struct {
    pconfig_t pc;
    coll_algo_t algo;
    size_t arena_bytes;      /* per device; 0 = unlimited */
    /* --test-broken NAME: a checker negative control (broken.h), or NULL;
     * its device for replica:R; --test-broken list sets list_broken */
    const struct broken_variant *broken;
    int broken_device;
    int list_broken;
    int resumed;             /* --load was given: what fp16-scale-lost needs to fire */
    const char *trace_path;  /* --trace FILE: Chrome trace events of the layout run */
    int step_through;        /* --step-through[=DEVICE]: devices take turns (runtime.h) */
    int step_focus;          /* its DEVICE, -1 without one */
    const char *parallel_config; /* --parallel-config FILE: a patterns or Colossal-AI file */
    int config_json;             /* the file is a patterns file (else Colossal-AI's) */
    const char *optim[LAYOUT_MAX_OPTIM]; /* --optim model.optim.KEY=VALUE (NeMo), in order */
    int n_optim;
} layout_opts_t;

void layout_opts_defaults(layout_opts_t *lo);
/* pconfig flags plus --coll-algo, --arena-mb, --trace, --step-through,
 * --parallel-config, --optim, --test-broken: 1 consumed (and *i advanced), 0 not a layout
 * flag, -1 bad value. */
int  layout_opts_parse(layout_opts_t *lo, int argc, char **argv, int *i, perr_t *err);
/* The help of the flags above (pconfig_print_help's, then these). */
void layout_opts_print_help(FILE *f);
/* frontends.c: --parallel-config and --optim into lo->pc, before
 * pconfig_validate; 0, or -1 with a message naming the key. */
int  layout_opts_resolve(layout_opts_t *lo, perr_t *err);
/* After pconfig_validate: a negative control that cannot fire on this
 * layout and model (it would report "bit-exact yes") is refused, as
 * engine_train refuses the pipeline ones at pp 1. 0, or -1 naming the flag. */
int  layout_opts_check(const layout_opts_t *lo, const model_config_t *cfg, perr_t *err);
/* "" or " (from --parallel-config FILE: its keys = the flags named in
 * messages)": appended to a layout error so that it names the key the
 * user wrote. buf is returned. */
const char *layout_opts_origin(const layout_opts_t *lo, char *buf, size_t cap);
/* -1, with the origin put before err's message when there is one. */
int layout_opts_blame(const layout_opts_t *lo, perr_t *err);
/* print_layout.c: --print-layout's JSON (the resolved layout, the rank
 * grid, each stage's passes, the memory estimate) of a validated pc. */
int  layout_print(const model_config_t *cfg, const pconfig_t *pc, const memest_t *mem, FILE *f,
                  perr_t *err);

typedef struct {
    const model_config_t *cfg;
    layout_opts_t *lo;
    const corpus_t *data;
    run_output_t out;                /* the steps, the ones dumped, --dump, --digest, --save */
    const struct ckpt_state *resume; /* --load: start from it (ckpt.h), or NULL */
    unsigned compare;                /* check: the classes compared (check.h's CHECK_*) */
} layout_job_t;

/* Trains the layout, prints the steps, the memory and traffic report,
 * and writes the reassembled dump: an exit status. */
int layout_train(const layout_job_t *job);
/* Golden run and layout, every step dumped in memory, compared with
 * memcmp: exit 0 when bit-exact, 1 with a first-divergence report, and
 * 1 when a run's loss or gradient norm went non-finite (bit-exact or not:
 * a NaN matched bit for bit is said, never a success). */
int layout_check(const layout_job_t *job);

#endif
