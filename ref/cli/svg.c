/* svg.c - `parity svg`: pictures of a run, drawn by parity itself (svg.h).
 *
 *   parity svg schedule TRACE.json [--logical] -o OUT.svg
 *   parity svg grid [--model NAME] [layout flags of parity train] -o OUT.svg
 *   parity svg collective KIND --ranks N [--algo direct|ring] -o OUT.svg
 *
 * The output is written whole or not at all (fileio.h, the command's
 * transaction); bad input is a message naming the argument, exit 2.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "commands.h"
#include "layout_cli.h"
#include "parity/fileio.h"
#include "parity/numparse.h"
#include "parity/pp.h"
#include "parity/svg.h"

static void usage(FILE *f) {
    fputs("usage: parity svg schedule TRACE.json [--logical] -o OUT.svg\n"
          "       parity svg grid [--model NAME] [layout flags] -o OUT.svg\n"
          "       parity svg collective KIND --ranks N [--algo direct|ring] -o OUT.svg\n"
          "pictures for the documentation, drawn from parity's own data (SVG):\n"
          "  schedule     the pipeline schedule of a trace written by parity train|check --trace:\n"
          "               a row per device, a bar per span coloured by category, a time axis;\n"
          "               each event's ts and dur are from 0 to 1e12 microseconds (11.6 days),\n"
          "               ts + dur too (a later one is refused, naming the event); -o never\n"
          "               names TRACE.json\n"
          "    --logical  forward and backward passes only, in slots (forward 1, backward 2),\n"
          "               each after its row's previous pass and the pass it waits for on the\n"
          "               neighbouring virtual stage; the same bytes on every run\n"
          "  grid         the rank grid --print-layout prints: a box per device (world rank,\n"
          "               tp cp dp pp), a panel per pipeline stage, tp groups outlined, dp groups\n"
          "               coloured\n"
          "    --model NAME   built-in model (gpt-micro, gpt-tiny, gpt-small, gpt-124m, t5-tiny,\n"
          "               t5-small, llava-tiny; default gpt-tiny)\n"
          "    layout flags   those of parity train (see parity train --help) that place devices:\n"
          "               degrees, --rank-order, --rank-list, --parallel-config, the pipeline\n"
          "               and encoder flags, --expert-tensor-parallel-size; --sequence-parallel,\n"
          "               --tensor-parallel-row-linears and --tensor-parallel-mode are said in\n"
          "               the title. Refused by name: run-only flags (--trace, --coll-algo,\n"
          "               --arena-mb, --optim, --step-through, --test-broken), batch overrides,\n"
          "               and what a device does rather than where it sits (recompute, offload,\n"
          "               ZeRO, overlap, buckets, dtypes, --cp-comm-type, microbatches)\n"
          "  collective   one collective's data movement among N ranks, step by step\n"
          "    KIND       all-reduce, reduce-scatter, all-gather, broadcast, all-to-all, send-recv\n"
          "    --ranks N  1..64 (send-recv: 2..64)\n"
          "    --algo direct|ring   the algorithm drawn (default direct)\n"
          "  -o, --output OUT.svg   the picture (required)\n",
          f);
}

static int fail(const char *msg) {
    fprintf(stderr, "%s: %s\n", cli_name, msg);
    return 2;
}

/* The flag's value into *dst, once: 0, or 2 after a message. */
static int take_value(int argc, char **argv, int *i, const char **dst) {
    perr_t err;
    const char *a = argv[*i], *v = *i + 1 < argc ? argv[*i + 1] : NULL;
    if (*dst) {
        fprintf(stderr, "%s: %s given twice\n", cli_name, a);
        return 2;
    }
    if (num_flag_value(a, v, &err)) return fail(err.msg);
    *dst = v;
    *i += 1;
    return 0;
}

/* A command line word that is not a flag: the picture's one operand
 * (what: "TRACE.json", "KIND"). 0, or 2 after a message. */
static int operand(const char *sub, const char *what, const char *a, const char **slot) {
    if (a[0] == '-' && a[1]) {
        fprintf(stderr, "%s: %s: unknown option '%s' (see parity svg --help)\n", cli_name, sub, a);
        return 2;
    }
    if (*slot) {
        fprintf(stderr, "%s: %s: one %s, got '%s' and '%s'\n", cli_name, sub, what, *slot, a);
        return 2;
    }
    *slot = a;
    return 0;
}

static int is_output_flag(const char *a) { return !strcmp(a, "-o") || !strcmp(a, "--output"); }

/* Draws into `out` (already checked) through one atomic output. */
typedef int (*draw_fn)(FILE *f, void *ctx, perr_t *err);

static int write_svg(const char *out, draw_fn draw, void *ctx) {
    perr_t err;
    pio_out_t o;
    if (pio_out_open(&o, out, "-o", &err)) return fail(err.msg);
    if (draw(o.f, ctx, &err)) {
        pio_out_abort(&o);
        return fail(err.msg);
    }
    if (pio_out_commit(&o, &err)) return fail(err.msg);
    return 0;
}

/* ---- schedule ---- */

typedef struct { svg_trace_t t; int logical; } schedule_ctx_t;

static int draw_schedule(FILE *f, void *ctx, perr_t *err) {
    schedule_ctx_t *c = ctx;
    return svg_schedule(f, &c->t, c->logical,
                        c->logical ? "pipeline schedule (logical slots)" : "pipeline schedule (wall clock)", err);
}

static int cmd_schedule(int argc, char **argv) {
    const char *trace = NULL, *out = NULL;
    int logical = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (is_output_flag(a)) {
            if (take_value(argc, argv, &i, &out)) return 2;
        } else if (!strcmp(a, "--logical")) {
            if (logical) return fail("--logical given twice");
            logical = 1;
        } else if (operand("schedule", "TRACE.json", a, &trace)) {
            return 2;
        }
    }
    if (!trace) return fail("schedule: TRACE.json missing (a file written by parity train --trace)");
    if (!out) return fail("-o OUT.svg missing");
    perr_t err;
    pio_note_input(trace, "TRACE.json"); /* -o never replaces it (fileio.h) */
    if (pio_check_output(out, "-o", &err)) return fail(err.msg);
    schedule_ctx_t c = {.logical = logical};
    if (svg_trace_read(trace, &c.t, &err)) return fail(err.msg);
    const int rc = write_svg(out, draw_schedule, &c);
    svg_trace_free(&c.t);
    return rc;
}

/* ---- grid ---- */

typedef struct {
    const grid_t *G;
    char notes[PC_MAX_SPLIT][160];
    const char *note_of[PC_MAX_SPLIT];
    char title[160];
} grid_ctx_t;

static int draw_grid(FILE *f, void *ctx, perr_t *err) {
    (void)err;
    grid_ctx_t *c = ctx;
    svg_grid(f, c->G, c->note_of, c->title);
    return 0;
}

/* "embedding, layers 0-1" for units [lo, hi) of a model of L layers
 * (unit 0 the embedding, 1..L the layers, L + 1 the head). */
static int describe_units(char *buf, size_t cap, int lo, int hi, int L) {
    int n = 0;
    const int first = lo < 1 ? 1 : lo, last = hi - 1 > L ? L : hi - 1;
    if (lo == 0) n += snprintf(buf + n, cap - (size_t)n, "embedding");
    if (first <= last && (size_t)n < cap)
        n += snprintf(buf + n, cap - (size_t)n, "%slayer%s %d", n ? ", " : "", first < last ? "s" : "", first - 1);
    if (first < last && (size_t)n < cap) n += snprintf(buf + n, cap - (size_t)n, "-%d", last - 1);
    if (hi == L + 2 && (size_t)n < cap) n += snprintf(buf + n, cap - (size_t)n, "%shead", n ? ", " : "");
    return n;
}

/* Flags layout_opts_parse knows that change nothing in the picture: a
 * run's, and the layout's that say what a device does rather than where
 * it sits (the grid is the same with or without them). Refused by name
 * (a flag is used or refused); --sequence-parallel, the row-parallel
 * linears and the tensor-parallel mode are said in the title. */
static const char *not_drawn(const char *a) {
    static const char *const run[] = {"--trace", "--coll-algo", "--arena-mb", "--optim",
                                      "--test-broken", "--global-batch-size", "--micro-batch-size",
                                      NULL};
    static const char *const what[] = {
        "--recompute-granularity", "--recompute-method", "--recompute-num-layers",
        "--offload-optimizer", "--offload-path", "--zero-stage", "--use-distributed-optimizer",
        "--overlap-grad-reduce", "--overlap-param-gather", "--bucket-cap-mb", "--dtype",
        "--grad-sync-dtype", "--no-contiguous-grad-buffer", "--no-contiguous-param-buffer",
        "--cp-comm-type", "--accum-degree", "--num-microbatches", NULL};
    for (const char *const *r = run; *r; r++)
        if (!strcmp(a, *r)) return "a run's flag; parity svg grid draws the layout of the built-in "
                                   "model's batch";
    if (!strncmp(a, "--step-through", 14))
        return "a run's flag; parity svg grid draws the layout of the built-in model's batch";
    for (const char *const *w = what; *w; w++)
        if (!strcmp(a, *w)) return "it changes what a device does, not where it sits; see "
                                   "--print-layout";
    return NULL;
}

static int cmd_grid(int argc, char **argv) {
    const char *model = NULL, *out = NULL;
    perr_t err;
    layout_opts_t lo;
    layout_opts_defaults(&lo);
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        for (int j = 1; j < i; j++)
            if (!strncmp(a, "--", 2) && !strcmp(a, argv[j])) {
                fprintf(stderr, "%s: %s given twice\n", cli_name, a);
                return 2;
            }
        if (is_output_flag(a)) {
            if (take_value(argc, argv, &i, &out)) return 2;
        } else if (!strcmp(a, "--model")) {
            if (take_value(argc, argv, &i, &model)) return 2;
        } else if (not_drawn(a)) {
            fprintf(stderr, "%s: %s: not part of the rank grid (%s)\n", cli_name, a, not_drawn(a));
            return 2;
        } else {
            int j = i;
            const int r = layout_opts_parse(&lo, argc, argv, &j, &err);
            if (r < 0) return fail(err.msg);
            if (r == 0) {
                fprintf(stderr, "%s: grid: unknown option '%s' (see parity svg --help)\n", cli_name, a);
                return 2;
            }
            i = j - 1;
        }
    }
    if (!out) return fail("-o OUT.svg missing");
    if (pio_check_output(out, "-o", &err)) return fail(err.msg);
    model_config_t cfg;
    if (model_config_builtin(model ? model : "gpt-tiny", &cfg, &err)) {
        fprintf(stderr, "%s: --model: %s\n", cli_name, err.msg);
        return 2;
    }
    if (layout_opts_resolve(&lo, &err) || pconfig_validate(&lo.pc, cfg.global_batch, &err)) {
        layout_opts_blame(&lo, &err);
        fprintf(stderr, "%s: invalid layout: %s\n", cli_name, err.msg);
        return 2;
    }
    /* the model-dependent checks --print-layout makes (heads, tiles, memory) */
    memest_t mem;
    if (memest_layout(&cfg, &lo.pc, &mem, &err)) {
        layout_opts_blame(&lo, &err);
        fprintf(stderr, "%s: invalid layout: %s\n", cli_name, err.msg);
        return 2;
    }
    const pconfig_t *pc = &lo.pc;
    if (pconfig_hetero(pc)) {
        fprintf(stderr, "%s: svg grid: an encoder mesh beside the decoder's "
                        "(--encoder-tensor-model-parallel-size %d < tp %d) is no one rank grid to draw; "
                        "--print-layout prints both meshes and the bridge\n",
                cli_name, pc->encoder_tp, pc->tp);
        return 2;
    }
    pp_plan_t pp;
    grid_t G;
    int sizes[GRID_NAXES];
    pconfig_grid_sizes(pc, sizes);
    model_config_t rc = cfg;
    rc.micro_batch = pc->micro_batch, rc.global_batch = pc->global_batch;
    if (pp_plan_build(&pp, &rc, pc, &err) ||
        grid_init_mapped(&G, pc->order, sizes, pc->rank_list, pc->n_rank_list, &err)) {
        layout_opts_blame(&lo, &err);
        fprintf(stderr, "%s: invalid layout: %s\n", cli_name, err.msg);
        return 2;
    }
    grid_ctx_t *c = calloc(1, sizeof *c);
    if (!c) {
        grid_free(&G);
        return fail("out of memory");
    }
    c->G = &G;
    for (int r = 0; r < pp.pp; r++) {
        int n = 0;
        for (int k = 0; k < pp.v && (size_t)n < sizeof c->notes[r]; k++) {
            if (k) n += snprintf(c->notes[r] + n, sizeof c->notes[r] - (size_t)n, "; ");
            if ((size_t)n < sizeof c->notes[r])
                n += describe_units(c->notes[r] + n, sizeof c->notes[r] - (size_t)n, pp.units[r].lo[k],
                                    pp.units[r].hi[k], cfg.layers);
        }
        c->note_of[r] = c->notes[r];
    }
    char tp[48] = ""; /* what the tp devices split, where the picture cannot show it */
    if (pc->tp > 1 && (pc->sequence_parallel || pc->tp_row_linears || pc->tp_mode != PC_TP_1D))
        snprintf(tp, sizeof tp, " (tp %s%s%s)", pconfig_tp_mode_name(pc->tp_mode),
                 pc->sequence_parallel ? ", sequence parallel" : "",
                 pc->tp_row_linears ? ", row-parallel linears" : "");
    snprintf(c->title, sizeof c->title, "rank grid of %s on %d devices%s", cfg.name, G.world, tp);
    const int code = write_svg(out, draw_grid, c);
    grid_free(&G);
    free(c);
    return code;
}

/* ---- collective ---- */

typedef struct { svg_coll_t kind; coll_algo_t algo; int n; } pic_ctx_t;

static int draw_collective(FILE *f, void *ctx, perr_t *err) {
    const pic_ctx_t *c = ctx;
    return svg_collective(f, c->kind, c->algo, c->n, err);
}

static int cmd_collective(int argc, char **argv) {
    const char *kind = NULL, *ranks = NULL, *algo = NULL, *out = NULL;
    perr_t err;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (is_output_flag(a)) {
            if (take_value(argc, argv, &i, &out)) return 2;
        } else if (!strcmp(a, "--ranks")) {
            if (take_value(argc, argv, &i, &ranks)) return 2;
        } else if (!strcmp(a, "--algo")) {
            if (take_value(argc, argv, &i, &algo)) return 2;
        } else if (operand("collective", "KIND", a, &kind)) {
            return 2;
        }
    }
    pic_ctx_t c = {.algo = COLL_ALGO_DIRECT};
    long long n;
    if (!kind) return fail("collective: KIND missing (all-reduce, reduce-scatter, all-gather, broadcast, "
                           "all-to-all or send-recv)");
    if (svg_coll_parse(kind, &c.kind, &err)) return fail(err.msg);
    if (!ranks) return fail("--ranks N missing");
    if (num_parse_int("--ranks", ranks, c.kind == SVG_SEND_RECV ? 2 : 1, SVG_MAX_RANKS, &n, &err))
        return fail(err.msg);
    c.n = (int)n;
    if (algo && !strcmp(algo, "ring")) c.algo = COLL_ALGO_RING;
    else if (algo && strcmp(algo, "direct")) {
        fprintf(stderr, "%s: --algo: expected direct or ring, got '%s'\n", cli_name, algo);
        return 2;
    }
    if (!out) return fail("-o OUT.svg missing");
    if (pio_check_output(out, "-o", &err)) return fail(err.msg);
    return write_svg(out, draw_collective, &c);
}

int cmd_svg(int argc, char **argv) {
    cli_name = "parity svg";
    const char *sub = argc > 1 ? argv[1] : NULL;
    for (int i = 1; i < argc; i++)
        if (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help")) {
            usage(stdout);
            return 0;
        }
    if (!sub) {
        usage(stderr);
        return 2;
    }
    if (!strcmp(sub, "schedule")) return cmd_schedule(argc - 1, argv + 1);
    if (!strcmp(sub, "grid")) return cmd_grid(argc - 1, argv + 1);
    if (!strcmp(sub, "collective")) return cmd_collective(argc - 1, argv + 1);
    fprintf(stderr, "%s: unknown picture '%s': expected schedule, grid or collective\n", cli_name, sub);
    return 2;
}
