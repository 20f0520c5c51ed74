/* plan.c - `parity plan`: which layouts of a model fit N devices of X MB,
 * cheapest first (plan.h: the enumeration, the filter, the cost model).
 *
 *   parity plan --model gpt-small --devices 8 --device-memory-mb 60
 *   parity plan --model gpt-small --devices 8 --device-memory-mb 60 --json --top 3
 *
 * Each row prints the flags that run it; `parity train --model M <flags>
 * --arena-mb X` admits it, because the row's memory is the estimate that
 * refuses runs over --arena-mb. Bad input is a message naming the flag,
 * exit 2; a budget nothing fits is exit 1, with the smallest layout's need.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "commands.h"
#include "parity/json.h"
#include "parity/numparse.h"
#include "parity/plan.h"
#include "parity/safetensors.h"

enum { PLAN_TABLE_TOP = 20 }; /* rows the table shows without --top */

static void usage(FILE *f) {
    fputs("usage: parity plan --devices N --device-memory-mb X [--model NAME|FILE.json] [options]\n"
          "lists the layouts of the model that fit N devices of X MB each, cheapest first by the\n"
          "cost model below, each with its memory per device by category (the estimate that\n"
          "sizes the arenas and refuses a run over --arena-mb: --print-layout's device_bytes),\n"
          "its communication per step and the flags that run it\n"
          "  --model NAME             built-in GPT model (gpt-micro, gpt-tiny, gpt-small, gpt-124m)\n"
          "                           or a JSON config FILE.json; default gpt-tiny\n"
          "  --devices N              the device count, 1..16384 (required)\n"
          "  --device-memory-mb X     each device's memory in MB (10^6 bytes), as --arena-mb:\n"
          "                           1e-6 (a byte) to 1e9 (required)\n"
          "  --top K                  list the K cheapest (default: 20 in the table, all with --json)\n"
          "  --json                   a JSON array of the rows, for tools\n"
          "  --device-tflops X        the cost model's device arithmetic rate, 0.001 to 1e6\n"
          "                           (default 100)\n"
          "  --link-gbs X             the cost model's device link bandwidth in GB/s, 0.001 to\n"
          "                           1e6 (default 100)\n"
          "enumerated: tensor-, pipeline- and context-parallel sizes dividing N, data-parallel\n"
          "the rest; ZeRO 0-3 (1-3 where dp x cp > 1); micro batch sizes dividing a replica's\n"
          "sequences; recompute none|selective|full; precision fp32|bf16; offload none|cpu (its\n"
          "host transfers, 8 bytes a shard element, count as communication). What\n"
          "the layout check or the estimate refuses is not listed. Not enumerated (give them\n"
          "by hand): sequence parallelism, virtual pipeline stages, the 2-D/2.5-D/3-D tensor\n"
          "modes, Ulysses, fp16 (its loss scale is a choice of its own).\n"
          "cost model: step time = compute / (1 - bubble) + comm / bandwidth, compute = the\n"
          "step's FLOPs (per token 2 Psi + 2 L T h forward, twice that backward; one forward\n"
          "more under full recomputation, the attention core's 2 L T h under selective) / N /\n"
          "device FLOP/s, bubble = (p-1)/(m+p-1), comm = the busiest device's bytes a step,\n"
          "not overlapped. Every flag is given at most once.\n"
          "exit status: 0 listed, 1 nothing fits (the smallest layout's need is said), 2 an error\n",
          f);
}

typedef struct {
    const char *model;
    long long devices, top;
    double budget_mb, tflops, gbs;
    int json;
} plan_args_t;

/* The cost model's rates: from a slow embedded core's GFLOP/s and a
 * 1 MB/s link to 1000 times today's fastest, so that every cost plan
 * prints is a finite number of a sensible size (1e-320 GB/s made the
 * communication time inf, 1e-300 TFLOP/s a 300-digit cost). */
#define PLAN_RATE_MIN 1e-3
#define PLAN_RATE_MAX 1e6

/* A finite decimal number (MB, TFLOP/s, GB/s) in (0, most], and at
 * least `least` when that is > 0. */
static int parse_positive(const char *flag, const char *v, double least, double most, double *out) {
    double x = 0;
    perr_t err;
    if (num_parse_double(flag, v, 0.0, most, &x, &err) || !(x > 0) || x < least) {
        if (least > 0)
            fprintf(stderr, "%s: %s: expected a number from %g to %g, got '%s'\n", cli_name, flag,
                    least, most, v);
        else
            fprintf(stderr, "%s: %s: expected a number > 0 and at most %g, got '%s'\n", cli_name,
                    flag, most, v);
        return -1;
    }
    *out = x;
    return 0;
}

/* -1 to go on, else the exit status (--help: 0; a bad flag: 2). */
static int parse_args(plan_args_t *a, int argc, char **argv) {
    memset(a, 0, sizeof *a);
    a->model = "gpt-tiny";
    a->tflops = plan_default_costs.flops_per_s / 1e12;
    a->gbs = plan_default_costs.bytes_per_s / 1e9;
    const char *seen[16];
    int nseen = 0;
    for (int i = 1; i < argc; i++) {
        const char *f = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        perr_t err;
        if (!strcmp(f, "-h") || !strcmp(f, "--help")) {
            usage(stdout);
            return 0;
        }
        static const char *const known[] = {"--model", "--devices", "--device-memory-mb", "--top",
                                            "--json", "--device-tflops", "--link-gbs"};
        int k = 0;
        while (k < 7 && strcmp(f, known[k])) k++;
        if (k == 7) {
            fprintf(stderr, "%s: unknown option '%s' (see parity plan --help)\n", cli_name, f);
            return 2;
        }
        for (int j = 0; j < nseen; j++)
            if (!strcmp(seen[j], f)) {
                fprintf(stderr, "%s: %s given twice\n", cli_name, f);
                return 2;
            }
        seen[nseen++] = f;
        if (!strcmp(f, "--json")) {
            a->json = 1;
            continue;
        }
        if (num_flag_value(f, v, &err)) {
            fprintf(stderr, "%s: %s\n", cli_name, err.msg);
            return 2;
        }
        i++;
        int bad = 0;
        if (!strcmp(f, "--model")) a->model = v;
        else if (!strcmp(f, "--devices"))
            bad = num_parse_int(f, v, 1, PARITY_MAX_DEVICES, &a->devices, &err);
        else if (!strcmp(f, "--top")) bad = num_parse_int(f, v, 1, 1000000000LL, &a->top, &err);
        else if (!strcmp(f, "--device-memory-mb")) {
            if (parse_positive(f, v, 0, 1e9, &a->budget_mb)) return 2;
            if (a->budget_mb * 1e6 < 1.0) { /* as --arena-mb: 0 bytes would mean unlimited */
                fprintf(stderr, "%s: --device-memory-mb: '%s' MB is less than one byte\n", cli_name, v);
                return 2;
            }
        } else if (parse_positive(f, v, PLAN_RATE_MIN, PLAN_RATE_MAX,
                                  !strcmp(f, "--device-tflops") ? &a->tflops : &a->gbs))
            return 2;
        if (bad) {
            fprintf(stderr, "%s: %s\n", cli_name, err.msg);
            return 2;
        }
    }
    if (!a->devices || !a->budget_mb) {
        fprintf(stderr, "%s: %s is required (e.g. parity plan --model gpt-small --devices 8 "
                        "--device-memory-mb 60)\n", cli_name,
                !a->devices ? "--devices N" : "--device-memory-mb X");
        return 2;
    }
    return -1;
}

/* The model's name on a command line: as given, single-quoted when it
 * holds anything but [A-Za-z0-9._/+-] (a path with a space). */
static void shell_word(const char *s, char *buf, size_t cap) {
    if (!*s || strspn(s, "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789._/+-") !=
                   strlen(s)) {
        size_t n = 0;
        buf[n++] = '\'';
        for (; *s && n + 6 < cap; s++) {
            if (*s == '\'') memcpy(buf + n, "'\\''", 4), n += 4;
            else buf[n++] = *s;
        }
        buf[n++] = '\'';
        buf[n] = 0;
    } else {
        snprintf(buf, cap, "%s", s);
    }
}

static double mb(size_t bytes) { return (double)bytes / 1e6; }

static void print_table(const plan_args_t *a, const model_config_t *cfg, const plan_t *p, int shown,
                        const char *model_word) {
    const double flops = plan_step_flops(cfg, 0);
    char name[ST_ESCAPE_CAP(sizeof cfg->name)];
    st_escape(cfg->name, name, sizeof name); /* a config file's name field */
    printf("parity plan: model %s, %lld device%s of %.2f MB: %d layout%s fit%s, of %d admitted (%d "
           "combinations tried)\n", name, a->devices, a->devices == 1 ? "" : "s", a->budget_mb,
           p->n, p->n == 1 ? "" : "s", p->n == 1 ? "s" : "", p->admitted, p->candidates);
    printf("memory per device (MB): memest's estimate = what the arenas allocate (--print-layout's "
           "device_bytes); sums: the open exact gradient sums; comm: collective buffers\n"
           "comm MB/step: the busiest device's bus bytes a step (plan_comm.c's formulas)\n");
    printf("cost model: step ms = compute / (1 - bubble) + comm / %g GB/s; compute = %.4g GFLOP a "
           "step (x4/3 with full recomputation; selective: + the attention core again) / %lld devices / %g TFLOP/s; bubble = (p-1)/(m+p-1)\n",
           a->gbs, flops / 1e9, a->devices, a->tflops);
    printf("%3s %3s %3s %3s %4s %4s %4s %9s %9s %7s | %8s %8s %8s %8s %8s %8s %8s %9s | %12s | %9s\n",
           "#", "tp", "pp", "cp", "dp", "zero", "mbs", "recompute", "precision", "offload", "params",
           "grads", "sums", "optim", "act", "comm", "work", "total", "comm MB/step", "cost ms");
    for (int i = 0; i < shown; i++) {
        const plan_row_t *r = &p->rows[i];
        const memest_dev_t *m = &r->mem;
        printf("%3d %3d %3d %3d %4d %4d %4d %9s %9s %7s | %8.2f %8.2f %8.2f %8.2f %8.2f %8.2f %8.2f "
               "%9.2f | %12.3f | %9.4f\n",
               i + 1, r->tp, r->pp, r->cp, r->dp, r->zero_stage, r->micro_batch,
               r->recompute, r->precision, r->offload, mb(m->params), mb(m->grads), mb(m->open_sums),
               mb(m->optimizer), mb(m->activations), mb(m->comm), mb(m->workspace), mb(m->total),
               r->comm.total / 1e6, 1e3 * r->cost_s);
        printf("    parity train --model %s %s\n", model_word, r->flags);
    }
    if (shown < p->n)
        printf("(%d more layout%s fit; --top %d lists them all)\n", p->n - shown,
               p->n - shown == 1 ? "" : "s", p->n);
}

/* Every fractional number a row prints, finite: JSON has no inf or NaN,
 * and a table of them says nothing. The flags' ranges keep them finite;
 * this is the last word, before a byte is printed (exit 2, nothing
 * printed). */
static int rows_finite(const plan_t *p, int shown) {
    for (int i = 0; i < shown; i++) {
        const plan_row_t *r = &p->rows[i];
        const struct { const char *name; double v; } num[] = {
            {"comm_bytes_per_step.dp", r->comm.dp},   {"comm_bytes_per_step.tp", r->comm.tp},
            {"comm_bytes_per_step.pp", r->comm.pp},   {"comm_bytes_per_step.cp", r->comm.cp},
            {"comm_bytes_per_step.emb", r->comm.emb}, {"comm_bytes_per_step.offload", r->comm.offload},
            {"comm_bytes_per_step.total", r->comm.total}, {"flops_per_device", r->flops},
            {"bubble", r->bubble}, {"compute_s", r->compute_s}, {"comm_s", r->comm_s},
            {"cost_s", r->cost_s},
        };
        for (size_t k = 0; k < sizeof num / sizeof num[0]; k++)
            if (!isfinite(num[k].v)) {
                fprintf(stderr, "%s: row %d (%s): %s is %g, not a number; the cost model "
                                "overflowed (see --device-tflops and --link-gbs)\n",
                        cli_name, i + 1, r->flags, num[k].name, num[k].v);
                return -1;
            }
    }
    return 0;
}

static void print_json(const plan_t *p, int shown, const char *model_word) {
    printf("[");
    for (int i = 0; i < shown; i++) {
        const plan_row_t *r = &p->rows[i];
        const memest_dev_t *m = &r->mem;
        char cmd[PLAN_FLAGS_MAX + 4200];
        snprintf(cmd, sizeof cmd, "parity train --model %s %s", model_word, r->flags);
        printf("%s\n  {\"row\": %d, \"tp\": %d, \"pp\": %d, \"cp\": %d, \"dp\": %d, \"zero_stage\": %d, "
               "\"micro_batch\": %d, \"microbatches\": %d, \"recompute\": \"%s\", \"precision\": \"%s\", "
               "\"offload\": \"%s\",\n",
               i ? "," : "", i + 1, r->tp, r->pp, r->cp, r->dp, r->zero_stage, r->micro_batch,
               r->microbatches, r->recompute, r->precision, r->offload);
        printf("   \"memory_bytes\": {\"params\": %zu, \"grads\": %zu, \"open_sums\": %zu, \"optimizer\": "
               "%zu, \"activations\": %zu, \"comm\": %zu, \"workspace\": %zu, \"total\": %zu},\n"
               "   \"run_host_bytes\": %zu,\n",
               m->params, m->grads, m->open_sums, m->optimizer, m->activations, m->comm, m->workspace,
               m->total, r->run_bytes);
        printf("   \"comm_bytes_per_step\": {\"dp\": %.0f, \"tp\": %.0f, \"pp\": %.0f, \"cp\": %.0f, "
               "\"emb\": %.0f, \"offload\": %.0f, \"total\": %.0f},\n",
               r->comm.dp, r->comm.tp, r->comm.pp, r->comm.cp, r->comm.emb, r->comm.offload,
               r->comm.total);
        printf("   \"flops_per_device\": %.6g, \"bubble\": %.6g, \"compute_s\": %.6g, \"comm_s\": %.6g, "
               "\"cost_s\": %.6g,\n", r->flops, r->bubble, r->compute_s, r->comm_s, r->cost_s);
        printf("   \"flags\": ");
        json_write_string(stdout, r->flags);
        printf(", \"command\": ");
        json_write_string(stdout, cmd);
        printf("}");
    }
    printf("%s]\n", shown ? "\n" : "");
}

int cmd_plan(int argc, char **argv) {
    plan_args_t a;
    int rc = parse_args(&a, argc, argv);
    if (rc >= 0) return rc;
    model_config_t cfg;
    if (cli_model_config(a.model, &cfg)) return 2;
    const plan_costs_t costs = {a.tflops * 1e12, a.gbs * 1e9};
    const size_t budget = cli_mb_bytes(a.budget_mb); /* as --arena-mb */
    plan_t p;
    perr_t err;
    if (plan_build(&p, &cfg, (int)a.devices, budget, &costs, &err)) {
        fprintf(stderr, "%s: %s\n", cli_name, err.msg);
        return 2;
    }
    char name[ST_ESCAPE_CAP(sizeof cfg.name)];
    st_escape(cfg.name, name, sizeof name); /* a config file's name field */
    if (!p.admitted) {
        fprintf(stderr, "%s: nothing fits: no layout of %s runs on --devices %lld (%d combinations "
                        "tried; tp x pp x cp must divide the devices and suit the model's tiles, "
                        "layers and batch; --print-layout says why one is refused)\n",
                cli_name, name, a.devices, p.candidates);
        return 1;
    }
    if (!p.n) {
        fprintf(stderr, "%s: nothing fits --device-memory-mb %g: the smallest of the %d layouts of %s "
                        "on %lld devices needs %.2f MB a device (%s)\n",
                cli_name, a.budget_mb, p.admitted, name, a.devices, mb(p.smallest.mem.total),
                p.smallest.flags);
        plan_free(&p);
        return 1;
    }
    char word[4200];
    shell_word(a.model, word, sizeof word);
    const int want = a.top ? (int)(a.top < p.n ? a.top : p.n) : a.json ? p.n
                                                             : (p.n < PLAN_TABLE_TOP ? p.n : PLAN_TABLE_TOP);
    rc = rows_finite(&p, want) ? 2 : 0;
    if (!rc && a.json) print_json(&p, want, word);
    else if (!rc) print_table(&a, &cfg, &p, want, word);
    plan_free(&p);
    return rc;
}
