/* judge.c - `parity judge [model flags | --golden DUMP] RANKFILE...`: a
 * backend's rank files (ref/judge/RANKFILES.md) against parity's golden
 * run. Reads every file, reassembles every tensor (ref/judge/assemble.c),
 * judges each against its envelope (verdict.c) and reports the first
 * divergence in data-flow order and every tensor worst first (report.c).
 * Exit 0: every tensor within its tolerance; 1: some tensor beyond; 2:
 * bad input (a message naming the file, rank or field). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../judge/judge_internal.h"
#include "commands.h"
#include "parity/fileio.h"
#include "parity/model_flags.h"
#include "parity/numparse.h"

enum { MAX_ARGS = 256 };

static void usage(FILE *f) {
    fputs("usage: parity judge [--model NAME|FILE.json [model overrides]\n"
          "                     [--load DIR | --weights FILE [--names SCHEME]] | --golden DUMP]\n"
          "                    [--multiple M] [--tolerance CLASS=M,...] [--tolerance-for GLOB=M]\n"
          "                    [--mask 'NAME[i,j,..]=reason'] [--envelope-runs K] [--envelope-runs-for C=K|G=K] [--report FILE.json]\n"
          "                    RANKFILE...\n"
          "  Judges a backend's rank files (one safetensors file per rank, format in\n"
          "  ref/judge/RANKFILES.md) against parity's golden run of the same model:\n"
          "  reassembles every tensor over the mesh and compares it with the golden one.\n"
          "  --model ...          the model, as parity train takes it (--model, overrides,\n"
          "                       --data, --backend); the steps are the files' own (no\n"
          "                       --steps: step<s>. of the names, at most 1000 steps)\n"
          "  --load DIR           the golden run starts from a checkpoint (parity train\n"
          "                       --save's): its parameters, AdamW state and step S; the\n"
          "                       files then name steps S, S+1, ... (init.: its parameters)\n"
          "  --weights FILE       the golden run starts from these parameters (any scheme of\n"
          "                       RANKFILES.md, e.g. parity train --export-weights'), fresh\n"
          "                       AdamW state, step 0\n"
          "  --names SCHEME       --weights' scheme (default: the file's parity.names, or\n"
          "                       detected)\n"
          "  --golden DUMP        the golden run from a `parity train --dump` file instead\n"
          "  --multiple M         a tensor is beyond when an element is more than M x its\n"
          "                       envelope from the golden one (default 32)\n"
          "  --tolerance C=M,...  per class: act, grad_input, grad, param, exp_avg,\n"
          "                       exp_avg_sq, logits, loss, grad_norm, batch\n"
          "  --tolerance-for G=M  per tensor name pattern (fnmatch; the first match wins,\n"
          "                       before the class's)\n"
          "  --mask 'N[i,j]=why'  skip one element (flat index N[k] or one per axis), listed\n"
          "                       in the report with the reason\n"
          "  --report FILE.json   every number, as JSON (written atomically)\n"
          "  --envelope-runs K    the float-order runs the envelope is measured over\n"
          "                       (default 8; 0: the floor only)\n"
          "  --envelope-runs-for C=K or G=K  K runs for a class (as --tolerance's) or a\n"
          "                       tensor name pattern (fnmatch, the first match wins,\n"
          "                       before the class's); repeatable\n"
          "  Each tensor's envelope is its largest |run - reference| over K legitimate float\n"
          "  executions parity runs itself (sequential, pairwise, reversed, grouped by each\n"
          "  mesh degree, random chunkings; bf16-rounded when parity.precision is bf16):\n"
          "  golden runs for the trajectory, teacher-forced steps for the local judgment;\n"
          "  never less than one ulp of the tensor's largest golden magnitude.\n"
          "  The local judgment needs the model flags and a model the forced step supports\n"
          "  (the dense GPT, fp32 or bf16, AdamW, no full recompute); otherwise only the\n"
          "  trajectory is judged and the report says why the local judgment is unavailable.\n"
          "exit status: 0 within tolerance, 1 beyond, 2 bad input\n",
          f);
}

static int bad(const char *fmt, const char *a, const char *b) {
    fprintf(stderr, "%s: ", cli_name);
    fprintf(stderr, fmt, a, b);
    fputc('\n', stderr);
    return 2;
}

/* "act=8,grad=64" */
static int parse_tolerance(const char *v, judge_opts_t *op) {
    char *copy = strdup(v), *save = NULL;
    if (!copy) return bad("%s%s", "out of memory", "");
    int rc = 0;
    for (char *tok = strtok_r(copy, ",", &save); tok && !rc; tok = strtok_r(NULL, ",", &save)) {
        char *eq = strchr(tok, '=');
        int c = 0;
        if (eq) *eq = 0;
        while (c < JC_COUNT && strcmp(judge_class_name(c), tok)) c++;
        perr_t e;
        double m;
        if (!eq || c == JC_COUNT)
            rc = bad("--tolerance '%s': expected CLASS=M, CLASS one of act, grad_input, grad, "
                     "param, exp_avg, exp_avg_sq, logits, loss, grad_norm, batch%s", tok, "");
        else if (num_parse_double("--tolerance", eq + 1, 0, 1e300, &m, &e) || !(m > 0))
            rc = bad("--tolerance %s: the multiple must be a number > 0, got '%s'", tok, eq + 1);
        else op->class_multiple[c] = m;
    }
    free(copy);
    return rc;
}

static int parse_glob(const char *v, judge_opts_t *op) {
    const char *eq = strrchr(v, '=');
    perr_t e;
    double m;
    if (!eq || eq == v || num_parse_double("--tolerance-for", eq + 1, 0, 1e300, &m, &e) || !(m > 0))
        return bad("--tolerance-for '%s': expected GLOB=M with M a number > 0%s", v, "");
    judge_glob_t *g = realloc(op->globs, (size_t)(op->nglobs + 1) * sizeof *g);
    if (!g) return bad("%s%s", "out of memory", "");
    op->globs = g;
    if (!(g[op->nglobs].pattern = strndup(v, (size_t)(eq - v)))) return bad("%s%s", "out of memory", "");
    g[op->nglobs++].multiple = m;
    return 0;
}

/* --envelope-runs-for "grad=16" (a class) or "step0.exp_avg_sq.*=16" (a pattern) */
static int parse_runs_for(const char *v, judge_opts_t *op) {
    const char *eq = strrchr(v, '=');
    perr_t e;
    long long k;
    if (!eq || eq == v || num_parse_int("--envelope-runs-for", eq + 1, 0, 1000, &k, &e))
        return bad("--envelope-runs-for '%s': expected CLASS=K or GLOB=K with K a whole number "
                   "0 to 1000%s", v, "");
    int c = 0;
    while (c < JC_COUNT && (strlen(judge_class_name(c)) != (size_t)(eq - v) ||
                            strncmp(judge_class_name(c), v, (size_t)(eq - v))))
        c++;
    if (c < JC_COUNT) {
        op->class_runs[c] = (int)k;
        return 0;
    }
    judge_glob_t *g = realloc(op->run_globs, (size_t)(op->nrun_globs + 1) * sizeof *g);
    if (!g) return bad("%s%s", "out of memory", "");
    op->run_globs = g;
    if (!(g[op->nrun_globs].pattern = strndup(v, (size_t)(eq - v)))) return bad("%s%s", "out of memory", "");
    g[op->nrun_globs++].runs = (int)k;
    return 0;
}

/* "NAME[i,j,k]=reason" or "NAME[flat]=reason" (one index: flat unless the
 * tensor is 1-D, where both mean the same). */
static int parse_mask(const char *v, judge_opts_t *op) {
    const char *lb = strchr(v, '['), *rb = lb ? strchr(lb, ']') : NULL;
    if (!lb || lb == v || !rb || rb[1] != '=' || !rb[2])
        return bad("--mask '%s': expected NAME[flat or i,j,k]=reason%s", v, "");
    judge_mask_t k = {0};
    char idx[256];
    snprintf(idx, sizeof idx, "%.*s", (int)(rb - lb - 1), lb + 1);
    perr_t e;
    long long vals[ST_MAX_DIMS];
    int n = 0;
    if (num_parse_int_list("--mask", idx, 0, (long long)1 << 62, ST_MAX_DIMS, vals, &n, &e) || n < 1)
        return bad("--mask '%s': %s", v, n < 1 && !e.msg[0] ? "no index" : e.msg);
    if (n == 1) k.flat = (uint64_t)vals[0];
    else {
        k.nidx = n;
        for (int d = 0; d < n; d++) k.idx[d] = vals[d];
    }
    k.name = strndup(v, (size_t)(lb - v));
    k.reason = strdup(rb + 2);
    /* a grown array is op's at once: opts_free frees it, never the old one */
    judge_mask_t *m = k.name && k.reason ? realloc(op->masks, (size_t)(op->nmasks + 1) * sizeof *m)
                                         : NULL;
    if (!m) return free(k.name), free(k.reason), bad("%s%s", "out of memory", "");
    op->masks = m;
    m[op->nmasks++] = k;
    return 0;
}

static void opts_free(judge_opts_t *op) {
    for (int i = 0; i < op->nglobs; i++) free(op->globs[i].pattern);
    for (int i = 0; i < op->nmasks; i++) free(op->masks[i].name), free(op->masks[i].reason);
    for (int i = 0; i < op->nrun_globs; i++) free(op->run_globs[i].pattern);
    free(op->globs);
    free(op->run_globs);
    free(op->masks);
}

typedef struct {
    const char *golden, *report;
    const char *model[MAX_ARGS];
    int nmodel;
    char **files;
    int nfiles;
    unsigned seen; /* the flags that may be given once */
} args_t;

static int parse_args(int argc, char **argv, args_t *a, judge_opts_t *op) {
    for (int i = 1; i < argc; i++) {
        const char *f = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        perr_t e;
        int takes = 0;
        if (!strcmp(f, "-h") || !strcmp(f, "--help")) {
            usage(stdout);
            return 1;
        }
        if (strncmp(f, "--", 2)) {
            pio_note_input(argv[i], "RANKFILE");
            a->files[a->nfiles++] = argv[i];
            continue;
        }
        const int ours = !strcmp(f, "--golden") || !strcmp(f, "--report") ||
                         !strcmp(f, "--multiple") || !strcmp(f, "--tolerance") ||
                         !strcmp(f, "--tolerance-for") || !strcmp(f, "--mask") ||
                         !strcmp(f, "--envelope-runs") || !strcmp(f, "--envelope-runs-for");
        /* the oracle's own flags, then parity train's model overrides (model_flags.h) */
        const int oracle_flag = !strcmp(f, "--model") || !strcmp(f, "--config") ||
                                !strcmp(f, "--backend") || !strcmp(f, "--data") ||
                                !strcmp(f, "--load") || !strcmp(f, "--weights") ||
                                !strcmp(f, "--names");
        if (!strcmp(f, "--steps"))
            return bad("--steps: the steps judged are the rank files' own (their step<s>. "
                       "names); parity judge takes no --steps%s%s", "", "");
        const int override = !ours && !oracle_flag && model_flag_known(f, &takes);
        if (!ours && !oracle_flag && !override)
            return bad("unknown option '%s' (see %s --help)", f, cli_name);
        const int valued = ours || oracle_flag || takes;
        if (valued && num_flag_value(f, v, &e)) return bad("%s%s", e.msg, "");
        if (!ours) {
            if (a->nmodel + 2 > MAX_ARGS) return bad("more than %s model flags%s", "128", "");
            a->model[a->nmodel++] = f;
            if (valued) a->model[a->nmodel++] = v, i++;
            continue;
        }
        i++;
        /* a flag given twice is refused, never "the last one wins" (--tolerance-for
         * and --mask add one each) */
        const int once = !strcmp(f, "--golden") ? 1 : !strcmp(f, "--report") ? 2
                         : !strcmp(f, "--multiple") ? 4 : !strcmp(f, "--tolerance") ? 8
                         : !strcmp(f, "--envelope-runs") ? 16 : 0;
        if (a->seen & once) return bad("%s given twice%s", f, "");
        a->seen |= once;
        if (!strcmp(f, "--golden")) a->golden = v, pio_note_input(v, "--golden");
        else if (!strcmp(f, "--report")) a->report = v;
        else if (!strcmp(f, "--multiple")) {
            if (num_parse_double("--multiple", v, 0, 1e300, &op->multiple, &e) || !(op->multiple > 0))
                return bad("--multiple: expected a number > 0, got '%s'%s", v, "");
        } else if (!strcmp(f, "--envelope-runs")) {
            long long k;
            if (num_parse_int("--envelope-runs", v, 0, 1000, &k, &e))
                return bad("--envelope-runs: expected a whole number 0 to 1000, got '%s'%s", v, "");
            op->envelope_runs = (int)k;
        } else if (!strcmp(f, "--envelope-runs-for")) {
            if (parse_runs_for(v, op)) return 2;
        } else if (!strcmp(f, "--tolerance")) {
            if (parse_tolerance(v, op)) return 2;
        } else if (!strcmp(f, "--tolerance-for")) {
            if (parse_glob(v, op)) return 2;
        } else if (parse_mask(v, op)) {
            return 2;
        }
    }
    if (a->golden && a->nmodel)
        return bad("--golden %s and the model flags (%s ...): give one golden run", a->golden,
                   a->model[0]);
    if (!a->nfiles) return bad("no rank files given (%s --help)%s", cli_name, "");
    return 0;
}

/* The float orders' part of it: which runs, in which orders. */
static void envelope_runs(const judge_set_t *s, const judge_opts_t *op, int from_dump, char *buf,
                          size_t cap) {
    const int local = !s->local_unavailable;
    float_order_t orders[64];
    const int runs = judge_runs_max(op);
    const int k = judge_envelope_orders(s, runs < 64 ? runs : 64, orders);
    size_t n = (size_t)snprintf(buf, cap, "the largest |run - reference| over %d float-order run%s "
                                "(%s", runs, runs == 1 ? "" : "s",
                                from_dump ? "local only: the trajectory's golden run is a dump"
                                : local ? "trajectory: golden runs; local: forced steps"
                                        : "trajectory only: golden runs");
    for (int i = 0; i < k && n < cap; i++) {
        char o[64];
        n += (size_t)snprintf(buf + n, cap - n, "%s%s", i ? ", " : ": ",
                              float_order_name(&orders[i], o, sizeof o));
    }
    if (n < cap)
        n += (size_t)snprintf(buf + n, cap - n, "%s), at least one ulp of the tensor's largest "
                              "golden magnitude", runs > 64 ? ", ..." : "");
    int set = op->nrun_globs;
    for (int c = 0; c < JC_COUNT; c++) set += op->class_runs[c] >= 0;
    if (set && n < cap)
        snprintf(buf + n, cap - n, "; %d --envelope-runs-for setting%s: a tensor of K runs takes "
                 "the first K", set, set == 1 ? "" : "s");
}

/* What the envelope is, for the report's first lines: the float orders
 * and which judgments ran them (a dump has no trajectory runs; the local
 * judgment may be unavailable). */
static void envelope_what(const judge_set_t *s, const judge_opts_t *op, int from_dump, char *buf,
                          size_t cap) {
    const int local = !s->local_unavailable;
    if (judge_runs_max(op) < 1 || (from_dump && !local)) {
        snprintf(buf, cap, "one ulp of the tensor's largest golden magnitude (no float-order runs: "
                 "%s)", judge_runs_max(op) < 1 ? "--envelope-runs 0"
                        : "the golden run is a dump and the local judgment did not run");
    } else {
        envelope_runs(s, op, from_dump, buf, cap);
    }
    const size_t n = strlen(buf);
    if (!local && !from_dump && n < cap)
        snprintf(buf + n, cap - n, "; no local judgment: %s", s->local_unavailable);
}

/* Which inputs of the local judgment the files lacked, step by step: there
 * the forced step used parity's own recomputation instead, so a verdict
 * downstream of it mixes in the error of the units before (RANKFILES.md
 * "What a local judgment reads"). */
static void print_missing(FILE *f, const judge_set_t *s) {
    for (int i = 0; i < s->nlocal_missing; i++) {
        const judge_local_missing_t *m = &s->local_missing[i];
        fprintf(f, "local: step %lld: %d of its %d inputs not in the rank files (or not whole); "
                "parity's own recomputation used instead (verdicts after them mix in the units "
                "before): %s\n", (long long)m->step, m->missing, m->asked, m->names);
    }
}

int cmd_judge(int argc, char **argv) {
    cli_name = "parity judge";
    judge_opts_t op = {.multiple = JUDGE_DEFAULT_MULTIPLE,
                       .envelope_runs = JUDGE_DEFAULT_ENVELOPE_RUNS};
    for (int c = 0; c < JC_COUNT; c++) op.class_runs[c] = -1; /* --envelope-runs' */
    args_t a = {0};
    judge_set_t s = {0};
    oracle_t *o = NULL;
    judge_verdict_t *v = NULL, *local = NULL;
    int *order = NULL;
    double *env = NULL;
    perr_t err;
    int rc;
    if (!(a.files = calloc((size_t)argc, sizeof *a.files))) return bad("%s%s", "out of memory", "");
    if ((rc = parse_args(argc, argv, &a, &op))) {
        rc = rc == 1 ? 0 : rc;
        goto done;
    }
    rc = 2;
    if (a.report && pio_check_output(a.report, "--report", &err)) goto fail;
    if (!(s.files = calloc((size_t)a.nfiles, sizeof *s.files))) goto oom;
    for (int i = 0; i < a.nfiles; i++, s.nfiles++)
        if (judge_file_open(&s.files[i], a.files[i], &err)) {
            s.nfiles++;
            goto fail;
        }
    o = a.golden ? oracle_open_dump(a.golden, &err) : oracle_open(a.nmodel, a.model, &err);
    if (!o || judge_assemble(&s, o, &err)) goto fail;
    v = calloc((size_t)s.nt, sizeof *v);
    order = calloc((size_t)s.nt, sizeof *order);
    if (!v || !order) goto oom;
    if (!(env = calloc((size_t)s.nt, sizeof *env))) goto oom;
    /* the masks first (judge_verdicts applies them; the local judgment
     * reads them), then the local judgment, which needs the model and its
     * text (not a dump) and a model the forced step supports */
    if (judge_envelope_trajectory(&s, o, &op, env, &err) || judge_verdicts(&s, &op, env, v, &err))
        goto fail;
    char why[sizeof err.msg];
    if (a.golden) {
        s.local_unavailable = "the golden run is a dump (--golden): the local judgment recomputes "
                              "from the model and its text";
    } else {
        if (!(local = calloc((size_t)s.nt, sizeof *local))) goto oom;
        const int lr = judge_local(&s, o, &op, local, &err);
        if (lr < 0) goto fail;
        if (lr > 0) {
            snprintf(why, sizeof why, "%s", err.msg);
            s.local_unavailable = why;
            free(local), local = NULL;
        }
    }
    /* an ill-conditioned update is skipped by the trajectory only where
     * the local judgment judged it (judge_ill_conditioned): else the
     * trajectory judges every element */
    if (!s.local_unavailable &&
        (judge_ill_conditioned(&s, env, &err) || judge_verdicts(&s, &op, env, v, &err)))
        goto fail;
    judge_exec_order(&s, order);
    char what[1024];
    envelope_what(&s, &op, a.golden != NULL, what, sizeof what);
    judge_print(stdout, &s, &op, v, local, order, what);
    print_missing(stdout, &s);
    if (a.report && judge_write_json(a.report, &s, &op, v, local, order, what, &err)) goto fail;
    rc = 0;
    for (int i = 0; i < s.nt; i++) rc |= v[i].beyond || (local && local[i].tensor >= 0 && local[i].beyond);
    goto done;
oom:
    perr_set(&err, "out of memory");
fail:
    fprintf(stderr, "%s: %s\n", cli_name, err.msg);
    rc = 2;
done:
    free(v);
    free(env);
    free(local);
    free(order);
    oracle_close(o);
    judge_set_free(&s);
    opts_free(&op);
    free(a.files);
    return rc;
}
