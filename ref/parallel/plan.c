/* plan.c - `parity plan`'s enumeration, filter and cost model (plan.h).
 *
 * Enumeration: for every tp x pp x cp dividing the devices, dp the rest;
 * every ZeRO stage, micro batch size dividing a replica's sequences, and
 * recompute, precision and offload of the tables below. Each candidate
 * is the flags `parity train` would be given, parsed by
 * pconfig_parse_flag, then validated (pconfig_validate) and estimated
 * (memest_layout): what either refuses is not a layout. Adding a value
 * to an axis is one line in its table.
 *
 * Filter: memest's per-device total (the arenas' size, --print-layout's
 * "device_bytes") at most the budget.
 *
 * Cost model: the estimated time of a step on one device,
 *     cost = compute / (1 - bubble) + comm / bandwidth
 *     compute = step FLOPs / devices / device FLOP/s
 * FLOPs per token 2 Psi + 2 L T h forward (Kaplan et al. 2020), twice
 * that backward, one forward more under full recomputation; every layout
 * splits them evenly over the devices (the work tensor parallelism
 * repeats on every rank, LayerNorms and the like, is left out). bubble is
 * the schedule's theory (pp_bubble_theory: (p-1)/(m+p-1) for 1F1B).
 * comm is the busiest device's bytes a step (plan_comm.c), none of it
 * overlapped with compute (parity overlaps nothing unless asked).
 * Defaults: 100 TFLOP/s and 100 GB/s a device (plan_default_costs).
 */
#include "parity/plan.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "parity/pp.h"
#include "parity/safetensors.h"

const plan_costs_t plan_default_costs = {100e12, 100e9};

/* One value of an enumerated axis: its name in the output and the flags
 * that select it ("": the default). */
typedef struct {
    const char *name, *flags;
    int value; /* precisions: the model's (a model flag, not a layout one) */
} plan_choice_t;

static const plan_choice_t recomputes[] = {
    {"none", "", 0},
    {"selective", "--recompute-granularity selective", 0},
    {"full", "--recompute-granularity full", 0},
};
/* Training precision: a model property (model_config_t.precision), so
 * its flag joins the printed command, not the layout's parse. bf16 keeps
 * fp32 master weights plus a compute copy (MODEL.md), so it never saves
 * memory here; fp16 needs a loss scale the plan cannot choose. */
static const plan_choice_t precisions[] = {
    {"fp32", "", MODEL_FP32},
    {"bf16", "--bf16", MODEL_BF16},
};
/* Optimizer offload: cpu (nvme needs a directory the plan cannot choose;
 * give it by hand). Its host transfers are in the cost's communication. */
static const plan_choice_t offloads[] = {
    {"none", "", 0},
    {"cpu", "--offload-optimizer cpu", 0},
};
#define NCHOICES(a) ((int)(sizeof(a) / sizeof((a)[0])))

/* The candidate's flags into pc through the layout flag parser, as
 * `parity train` parses them. 0, or -1 with a message (a table's flag
 * that is no layout flag: a bug here, not a layout to skip). */
static int parse_flags(const char *flags, pconfig_t *pc, perr_t *err) {
    char buf[PLAN_FLAGS_MAX];
    char *argv[64];
    int argc = 0;
    snprintf(buf, sizeof buf, "%s", flags);
    for (char *tok = strtok(buf, " "); tok && argc < 64; tok = strtok(NULL, " ")) argv[argc++] = tok;
    pconfig_defaults(pc);
    for (int i = 0; i < argc;) {
        const int r = pconfig_parse_flag(pc, argc, argv, &i, err);
        if (r < 0) return -1;
        if (r == 0) return perr_set(err, "plan: '%s' is not a layout flag (plan.c's tables)", argv[i]);
    }
    return 0;
}

/* Appends one admitted candidate's figures to p (the rows that fit) and
 * keeps the smallest. 0, or -1 with a message. */
static int add_row(plan_t *p, plan_row_t *r, size_t budget, int *cap, perr_t *err) {
    if (p->admitted++ == 0 || r->mem.total < p->smallest.mem.total) p->smallest = *r;
    if (r->mem.total > budget) return 0;
    if (p->n == *cap) {
        const int grow = *cap ? 2 * *cap : 64;
        plan_row_t *rows = realloc(p->rows, (size_t)grow * sizeof *rows);
        if (!rows) return perr_set(err, "plan: out of memory");
        p->rows = rows, *cap = grow;
    }
    p->rows[p->n++] = *r;
    return 0;
}

/* The candidate of these flags: 1 admitted (r filled), 0 refused by
 * validation or the estimate, -1 an error. */
static int evaluate(const model_config_t *model, int devices, const char *flags,
                    const plan_costs_t *costs, plan_row_t *r, perr_t *err) {
    perr_t why;
    pconfig_t pc;
    memset(r, 0, sizeof *r);
    snprintf(r->flags, sizeof r->flags, "%s", flags);
    if (parse_flags(flags, &pc, err)) return -1;
    /* --micro-batch-size is also the model's (train.c's model_config) */
    model_config_t cfg = *model;
    if (pc.micro_batch) cfg.micro_batch = pc.micro_batch;
    memest_t m;
    if (pconfig_validate(&pc, cfg.global_batch, &why) || memest_layout(&cfg, &pc, &m, &why))
        return 0;
    r->tp = pc.tp, r->pp = pc.pp, r->cp = pc.cp, r->dp = pc.dp, r->zero_stage = pc.zero_stage;
    r->micro_batch = pc.micro_batch, r->microbatches = pc.accum_degree;
    r->mem = m.max_dev;
    r->run_bytes = m.all_devices + m.host_shared;
    if (plan_comm(&cfg, &pc, &r->comm, err)) return -1;
    model_config_t rc = cfg; /* a replica's batch, as the estimate's pipeline plan */
    rc.global_batch = pc.global_batch, rc.micro_batch = pc.micro_batch;
    pp_plan_t pp;
    if (pp_plan_build(&pp, &rc, &pc, err)) return -1;
    r->bubble = pp_bubble_theory(&pp);
    r->flops = plan_step_flops(&cfg, pc.recompute) / devices;
    r->compute_s = r->flops / costs->flops_per_s;
    r->comm_s = r->comm.total / costs->bytes_per_s;
    r->cost_s = r->compute_s / (1 - r->bubble) + r->comm_s;
    return 1;
}

static int by_cost(const void *a, const void *b) {
    const plan_row_t *x = a, *y = b;
    if (x->cost_s != y->cost_s) return x->cost_s < y->cost_s ? -1 : 1;
    if (x->mem.total != y->mem.total) return x->mem.total < y->mem.total ? -1 : 1;
    return (x->seq > y->seq) - (x->seq < y->seq);
}

/* " piece" after flags, when piece is not "". */
static void append(char *flags, const char *piece) {
    const size_t n = strlen(flags);
    if (*piece) snprintf(flags + n, PLAN_FLAGS_MAX - n, "%s%s", n ? " " : "", piece);
}

/* n's divisors, ascending, into d; their count. No int has more than
 * 1600 (2,095,133,040 has that many). */
enum { PLAN_MAX_DIVISORS = 1600 };
static int divisors(int n, int d[PLAN_MAX_DIVISORS]) {
    int lo = 0, hi = 0, big[PLAN_MAX_DIVISORS];
    for (int k = 1; (long long)k * k <= n; k++)
        if (n % k == 0) {
            d[lo++] = k;
            if (k != n / k) big[hi++] = n / k;
        }
    while (hi) d[lo++] = big[--hi];
    return lo;
}

/* The flags of the degrees, ZeRO stage and micro batch; sizes of 1 and
 * ZeRO 0 are the defaults, left out; --data-parallel-size always: a run
 * with no layout flag is the golden one. */
static void layout_flags(char *base, int tp, int pp, int cp, int dp, int z, int mb) {
    const struct { const char *flag; int v, dflt; } opt[] = {
        {"--tensor-model-parallel-size", tp, 1}, {"--pipeline-model-parallel-size", pp, 1},
        {"--context-parallel-size", cp, 1},      {"--data-parallel-size", dp, 0},
        {"--zero-stage", z, 0},                  {"--micro-batch-size", mb, 0},
    };
    base[0] = 0;
    for (int k = 0; k < 6; k++)
        if (opt[k].v != opt[k].dflt) {
            char f[80];
            snprintf(f, sizeof f, "%s %d", opt[k].flag, opt[k].v);
            append(base, f);
        }
}

/* The candidates of one layout (base: its degrees, ZeRO stage and micro
 * batch) over the recompute, precision and offload tables. */
static int try_choices(plan_t *p, const model_config_t *cfg, int devices, const char *base,
                       size_t budget, const plan_costs_t *costs, int *cap, perr_t *err) {
    for (int rc = 0; rc < NCHOICES(recomputes); rc++)
        for (int pr = 0; pr < NCHOICES(precisions); pr++)
            for (int of = 0; of < NCHOICES(offloads); of++) {
                char flags[PLAN_FLAGS_MAX] = "";
                append(flags, base);
                append(flags, recomputes[rc].flags);
                append(flags, offloads[of].flags);
                model_config_t model = *cfg;
                model.precision = precisions[pr].value;
                plan_row_t r;
                const int got = evaluate(&model, devices, flags, costs, &r, err);
                p->candidates++;
                if (got < 0) return -1;
                if (!got) continue;
                append(r.flags, precisions[pr].flags);
                r.recompute = recomputes[rc].name;
                r.precision = precisions[pr].name;
                r.offload = offloads[of].name;
                r.seq = p->candidates;
                if (add_row(p, &r, budget, cap, err)) return -1;
            }
    return 0;
}

int plan_build(plan_t *p, const model_config_t *cfg, int devices, size_t budget_bytes,
               const plan_costs_t *costs, perr_t *err) {
    memset(p, 0, sizeof *p);
    char name[ST_ESCAPE_CAP(sizeof cfg->name)];
    if (cfg->arch != MODEL_GPT || cfg->moe_experts > 0)
        return perr_set(err, "--model %s: plan enumerates dense GPT models only (its communication "
                             "formulas have no encoder mesh or experts); give such a layout by hand",
                        st_escape(cfg->name, name, sizeof name));
    int cap = 0;
    /* divisors only: 16384 = 2^14 devices make 680 (tp, pp, cp) */
    for (int tp = 1; tp <= devices; tp++)
        for (int pp = 1; devices % tp == 0 && pp <= devices / tp; pp++)
            for (int cp = 1; (devices / tp) % pp == 0 && cp <= devices / tp / pp; cp++) {
                if ((devices / tp / pp) % cp) continue;
                const int dp = devices / tp / pp / cp;
                /* micro batches: the divisors of a replica's B/dp sequences
                 * (validation refuses a dp that does not divide B) */
                int mbs[PLAN_MAX_DIVISORS];
                const int nmb = divisors(cfg->global_batch / dp > 0 ? cfg->global_batch / dp : 1, mbs);
                for (int z = 0; z <= 3; z++) {
                    if (z > 0 && dp * cp == 1) continue; /* ZeRO shards over dp x cp: nothing to shard */
                    for (int k = 0; k < nmb; k++) {
                        char base[PLAN_FLAGS_MAX];
                        layout_flags(base, tp, pp, cp, dp, z, mbs[k]);
                        if (try_choices(p, cfg, devices, base, budget_bytes, costs, &cap, err))
                            return plan_free(p), -1;
                    }
                }
            }
    if (p->n) qsort(p->rows, (size_t)p->n, sizeof *p->rows, by_cost);
    return 0;
}

void plan_free(plan_t *p) {
    free(p->rows);
    p->rows = NULL;
    p->n = 0;
}
