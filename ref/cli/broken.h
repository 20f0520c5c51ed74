/* broken.h - the checker's negative controls, one table.
 *
 * Each variant re-creates a real framework bug in one place of the
 * layout run, so that `parity check` must catch it: the test that runs
 * them all (tests/layouts/test_broken.sh) reads this table through
 * `--test-broken list` and holds every entry to the tensor it names as
 * the first to diverge. A variant is selected by `--test-broken NAME`
 * (replica takes its device, `replica:R`); adding one is one entry in
 * broken.c, nothing threaded through the option struct. */
#ifndef PARITY_CLI_BROKEN_H
#define PARITY_CLI_BROKEN_H

#include <stddef.h>
#include <stdio.h>

#include "parity/engine.h"
#include "model/gpt.h"
#include "parity/pconfig.h"

/* What a precondition looks at; buf takes a message built on the spot. */
typedef struct {
    const pconfig_t *pc;
    const model_config_t *cfg;
    int device; /* replica:R's R, else -1 */
    int resumed; /* the run starts from --load */
    char *buf;
    size_t cap;
} broken_where_t;

typedef struct broken_variant {
    const char *name;     /* --test-broken NAME */
    const char *breaks;   /* one line: what goes wrong, and the real bug it models */
    const char *diverges; /* the first divergent tensor on `example`: a shell glob of
                             its name without the "stepN." prefix */
    const char *example;  /* a gpt-micro layout where it fires (check's flags; one that
                             starts with --model names its own model) */
    int example_device;   /* replica:R's R on that layout; -1 when it takes none */
    const char *requires; /* one line: the precondition `needs` checks */
    /* Only what a check shows: parity train needs --dump or --digest. */
    int compared_only;
    /* Whether it can fire on this layout and model: NULL, or what it
     * needs (one phrase, written to buf). */
    const char *(*needs)(const broken_where_t *w);
    /* The run's one field it sets: the only place a variant meets engine_run_t. */
    void (*apply)(engine_run_t *run, int device);
} broken_variant_t;

/* The value of --test-broken ("fp32-sums", "replica:3"): 0, or -1 naming
 * the flag and the known names. "list" is not a variant (broken_print). */
int broken_parse(const char *value, const broken_variant_t **out, int *device, perr_t *err);
/* 0 when the variant can fire on this layout and model, else -1 with
 * "--test-broken NAME: needs ..." in err. */
int broken_check(const broken_variant_t *b, int device, const pconfig_t *pc,
                 const model_config_t *cfg, int resumed, perr_t *err);
/* "fp32-sums" or "replica:3": how the user wrote it, for messages. */
const char *broken_spelling(const broken_variant_t *b, int device, char *buf, size_t cap);
void broken_apply(const broken_variant_t *b, int device, engine_run_t *run);
/* --help's lines for --test-broken, the names from the table. */
void broken_print_help(FILE *f);
/* `--test-broken list`: one entry a line, tab-separated: name, first
 * divergent tensor, example flags, what it needs, what it breaks. */
void broken_print(FILE *f);

#endif
