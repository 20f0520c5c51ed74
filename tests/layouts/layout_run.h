/* layout_run.h - what the layout tests share (test_dp.c, test_pp.c): one
 * golden run, a layout run through engine_train compared with it by the
 * checker (memcmp, check.h), and a broken layout's first-divergence
 * report. Static: each test is one translation unit. */
#ifndef PARITY_TESTS_LAYOUT_RUN_H
#define PARITY_TESTS_LAYOUT_RUN_H

#include <stdlib.h>
#include <string.h>

#include "model/gpt.h"
#include "../harness.h"
#include "parity/check_layout.h"
#include "parity/corpus.h"
#include "parity/dump.h"
#include "parity/engine.h"
#include "parity/tile.h"

/* broken: the negative controls' bits; BROKEN_CHECK(x): the checker's
 * controls (dp.h's ENGINE_BROKEN_* bits x) */
enum { BROKEN_FP32_SUMS = 1, BROKEN_TP_FP32_SUMS = 2, BROKEN_TP_VOCAB_PAD = 4,
       BROKEN_PP_MASK_KEY = 8, BROKEN_PP_TIED_GRAD = 16, BROKEN_CP_ONLINE_SOFTMAX = 32 };
#define BROKEN_CHECK(x) ((int)(x) << 8)

enum { STEPS = 3 };
static model_config_t cfg;
static corpus_t corpus;
static dump_t *golden;

static dump_t *golden_run(const model_config_t *c) {
    gpt_t *g;
    perr_t err;
    if (gpt_new(&g, c, &err)) {
        fprintf(stderr, "%s\n", err.msg);
        return NULL;
    }
    dump_t *d = dump_new(g, DUMP_TENSORS);
    dump_add_init(d, g, &err);
    for (int s = 0; s < STEPS; s++) {
        gpt_observer_t obs = {0};
        gpt_step_stats_t st;
        dump_begin_step(d, s, &obs);
        gpt_train_step(g, &corpus, s, &obs, &st);
        if (dump_end_step(d, g, &st, &err)) fprintf(stderr, "%s\n", err.msg);
    }
    gpt_free(g);
    return d;
}

/* The layout of space-separated layout flags for a batch of B
 * sequences; 0, or -1 with the reason on stderr (flags too long for the
 * buffers are such a reason, never silently cut). */
static int parse_layout(const char *flags, int B, pconfig_t *pc) {
    pconfig_defaults(pc);
    char buf[512], *argv[32];
    int argc = 0;
    if (snprintf(buf, sizeof buf, "%s", flags) >= (int)sizeof buf) {
        fprintf(stderr, "flags too long: '%s'\n", flags);
        return -1;
    }
    char *t = strtok(buf, " ");
    for (; t && argc < 32; t = strtok(NULL, " ")) argv[argc++] = t;
    if (t) {
        fprintf(stderr, "more than 32 flags: '%s'\n", flags);
        return -1;
    }
    perr_t err;
    for (int i = 0; i < argc;)
        if (pconfig_parse_flag(pc, argc, argv, &i, &err) != 1) {
            fprintf(stderr, "bad flags '%s'\n", flags);
            return -1;
        }
    if (pconfig_validate(pc, B, &err)) {
        fprintf(stderr, "%s: %s\n", flags, err.msg);
        return -1;
    }
    return 0;
}

/* Runs one layout of model m against golden dump gd; returns 1 when every
 * golden tensor matched and every replica agreed. broken: BROKEN_* bits;
 * broken_replica: 1 + the device whose replica drifts. */
static int run_layout_of(const model_config_t *m, dump_t *gd, const char *flags, coll_algo_t algo,
                         int broken, int broken_replica, int *compared, FILE *report) {
    pconfig_t pc;
    perr_t err;
    if (parse_layout(flags, m->global_batch, &pc)) return 0;
    gpt_t *g;
    gpt_new(&g, m, &err);
    dump_t *d = dump_new(g, DUMP_TENSORS | DUMP_SOURCES);
    gpt_free(g);
    engine_run_t run = {.model = *m, .pc = pc, .steps = STEPS, .data = &corpus, .algo = algo,
                    .broken_fp32_sums = broken & 1, .broken_tp_fp32_sums = (broken & 2) != 0,
                    .broken_tp_vocab_pad = (broken & 4) != 0,
                    .broken_pp_mask_key = (broken & BROKEN_PP_MASK_KEY) != 0,
                    .broken_pp_tied_grad = (broken & BROKEN_PP_TIED_GRAD) != 0,
                    .broken_cp_online_softmax = (broken & BROKEN_CP_ONLINE_SOFTMAX) != 0,
                    .broken_check = (unsigned)broken >> 8,
                    .broken_replica = broken_replica, .dump = d};
    int ok = engine_train(&run, &err) == 0;
    if (!ok) fprintf(stderr, "%s: %s\n", flags, err.msg);
    check_result_t res = {0};
    engine_placement_t pl;
    if (ok && engine_placement_init(&pl, m, &pc, &err) == 0) {
        check_layout_t cl;
        check_owner_t owner;
        ok = check_layout_init(&cl, &pl, &run, d, m->micro_batch, &owner) == 0 &&
             check_compare(dump_writer(gd), dump_writer(d), &owner, report, &res) == 0;
        check_layout_free(&cl);
        engine_placement_free(&pl);
    } else {
        ok = 0;
    }
    free(run.replica_diffs);
    *compared = res.compared;
    dump_free(d);
    return ok;
}


/* A layout of model m that must give golden run gd's bits: one table
 * row (flags, tensors compared, match), and a failed check if not.
 * Inline: not every test that includes this uses it. */
static inline void expect_golden(const model_config_t *m, dump_t *gd, const char *flags) {
    int n = 0, ok = run_layout_of(m, gd, flags, COLL_ALGO_DIRECT, 0, 0, &n, stderr);
    printf("%-100s %6d %9s\n", flags, n, ok ? "yes" : "NO");
    fflush(stdout);
    CHECK(ok, "layout %s differs from the golden run", flags);
}

/* Runs a layout with controls that must make it differ from the golden
 * run and returns the checker's report (malloc'd, "" when there is none). */
static char *mismatch_report(const char *flags, coll_algo_t algo, int broken, int broken_replica) {
    char *buf = NULL;
    size_t len = 0;
    FILE *rep = open_memstream(&buf, &len);
    int n, ok = run_layout_of(&cfg, golden, flags, algo, broken, broken_replica, &n, rep);
    fclose(rep);
    CHECK(!ok, "%s (broken %#x, replica %d) must not match the golden run", flags, broken,
          broken_replica);
    return buf ? buf : strdup("");
}

/* A broken layout's first-divergence report (malloc'd), with a value. */
static inline char *broken_report(const char *flags, int broken, int broken_replica) {
    char *buf = mismatch_report(flags, COLL_ALGO_RING, broken, broken_replica);
    CHECK(strstr(buf, "FIRST DIVERGENCE") && strstr(buf, "ulp"),
          "the checker must print a first-divergence report, got:\n%s", buf);
    return buf;
}

/* A broken layout's report must name `tensor` (the checker's "tensor"
 * line) and contain `where` (the rank, stage or microbatch it blames);
 * the report is printed under `what`. */
static inline void expect_caught(const char *flags, int broken, const char *tensor, const char *where,
                          const char *what) {
    char line[192];
    snprintf(line, sizeof line, "tensor      %s", tensor);
    char *buf = broken_report(flags, broken, 0);
    if (buf) {
        CHECK(strstr(buf, line) && strstr(buf, where), "%s: expected %s (%s), got:\n%s", what,
              tensor, where, buf);
        printf("broken variant (%s), as reported:\n%s", what, buf);
    }
    free(buf);
}

/* PARITY_DP_MATRIX=small: the sanitizer builds' smaller matrices. */
static int small_matrix(void) {
    const char *m = getenv("PARITY_DP_MATRIX");
    return m && !strcmp(m, "small");
}

/* The layout tests' model (gpt-tiny; small: gpt-micro with a batch of 12),
 * corpus and golden run, on the portable backend: the same bits on any
 * machine, and on these small tiles faster than OpenBLAS's per-call
 * overhead. */
static int layout_test_setup(void) {
    perr_t err;
    if (!getenv("PARITY_BACKEND")) setenv("PARITY_BACKEND", "portable", 1);
    if (tile_init(&err) || model_config_builtin(small_matrix() ? "gpt-micro" : "gpt-tiny", &cfg, &err) ||
        corpus_load(&corpus, "ref/data/corpus.txt", &err)) {
        fprintf(stderr, "setup: %s\n", err.msg);
        return -1;
    }
    if (small_matrix()) cfg.global_batch = cfg.micro_batch = 12;
    golden = golden_run(&cfg);
    return golden ? 0 : -1;
}

#endif
