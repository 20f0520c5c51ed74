/* layout_cli.c - run a parallel layout for `parity train` / `parity check`. */
#include "layout_cli.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "parity/check.h"
#include "parity/dp.h"
#include "parity/dump.h"
#include "parity/numparse.h"

void layout_opts_defaults(layout_opts_t *lo) {
    memset(lo, 0, sizeof *lo);
    pconfig_defaults(&lo->pc);
    lo->algo = COLL_ALGO_DIRECT;
    coll_algo_from_env(&lo->algo, NULL); /* a bad value is reported by the first collective */
}

int layout_opts_parse(layout_opts_t *lo, int argc, char **argv, int *i, perr_t *err) {
    const char *a = argv[*i], *v = *i + 1 < argc ? argv[*i + 1] : NULL;
    if ((!strcmp(a, "--coll-algo") || !strcmp(a, "--arena-mb")) && num_flag_value(a, v, err))
        return -1;
    if (!strcmp(a, "--coll-algo")) {
        if (v && !strcmp(v, "direct")) lo->algo = COLL_ALGO_DIRECT;
        else if (v && !strcmp(v, "ring")) lo->algo = COLL_ALGO_RING;
        else return perr_set(err, "--coll-algo: expected direct or ring, got '%s'", v ? v : "(nothing)");
        *i += 2;
        return 1;
    }
    if (!strcmp(a, "--arena-mb")) {
        char *end;
        double mb = v ? strtod(v, &end) : 0;
        if (!v || end == v || *end || !(mb > 0) || mb > 1e9)
            return perr_set(err, "--arena-mb: expected a device memory size in MB > 0, got '%s'",
                            v ? v : "(nothing)");
        lo->arena_bytes = (size_t)(mb * 1e6);
        *i += 2;
        return 1;
    }
    if (!strcmp(a, "--test-broken-fp32-sums")) {
        lo->broken_fp32_sums = 1;
        *i += 1;
        return 1;
    }
    return pconfig_parse_flag(&lo->pc, argc, argv, i, err);
}

static int cmp_ms(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static dump_t *new_dump(const model_config_t *cfg, unsigned what) {
    gpt_t *g;
    perr_t err;
    if (gpt_new_ex(&g, cfg, GPT_NO_OPTIMIZER, NULL, &err)) return NULL;
    dump_t *d = dump_new(g, what);
    gpt_free(g);
    return d;
}

static int run_dp(const layout_job_t *job, dump_t *dump, gpt_step_stats_t *stats,
                  dp_device_report_t *reports, dp_run_t *run_out, perr_t *err) {
    dp_run_t run = {.model = *job->cfg, .pc = job->lo->pc, .steps = job->steps, .data = job->data,
                    .arena_capacity = job->lo->arena_bytes, .algo = job->lo->algo,
                    .broken_fp32_sums = job->lo->broken_fp32_sums, .dump = dump,
                    .dump_step = job->want, .stats = stats, .reports = reports};
    int rc = dp_train(&run, err);
    *run_out = run;
    return rc;
}

int layout_train(const layout_job_t *job) {
    const pconfig_t *pc = &job->lo->pc;
    perr_t err;
    dump_t *dump = NULL;
    if (job->dump_path || job->digest_path) {
        dump = new_dump(job->cfg, (job->dump_path ? DUMP_TENSORS : 0u) |
                                      (job->digest_path ? DUMP_DIGESTS : 0u));
        if (!dump) {
            fputs("parity train: dump: out of memory\n", stderr);
            return 2;
        }
    }
    gpt_step_stats_t *stats = calloc((size_t)job->steps, sizeof *stats);
    dp_device_report_t *reports = calloc((size_t)pc->dp, sizeof *reports);
    char desc[160];
    pconfig_describe(pc, desc, sizeof desc);
    if (!job->quiet)
        printf("parity train: model %s, layout %s (%d devices, %s collectives)\n", job->cfg->name,
               desc, pc->world_size, coll_algo_name(job->lo->algo));
    dp_run_t run;
    int rc = 0;
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    if (!stats || !reports || run_dp(job, dump, stats, reports, &run, &err)) {
        fprintf(stderr, "parity train: %s\n", stats && reports ? err.msg : "out of memory");
        rc = 2;
    }
    for (int s = 0; rc == 0 && s < job->steps; s++) {
        uint32_t u;
        memcpy(&u, &stats[s].loss, sizeof u);
        if (!job->quiet || s == job->steps - 1)
            printf("step %5d | loss %.6f (0x%08x) | lr %.4e | grad norm %.6f\n", s,
                   (double)stats[s].loss, u, (double)stats[s].lr, (double)stats[s].grad_norm);
    }
    clock_gettime(CLOCK_MONOTONIC, &t1);
    double wall = (double)(t1.tv_sec - t0.tv_sec) + 1e-9 * (double)(t1.tv_nsec - t0.tv_nsec);
    if (rc == 0) {
        /* the median step (barrier to barrier), and the whole run with set-up */
        double *ms = malloc((size_t)job->steps * sizeof *ms);
        for (int s = 0; ms && s < job->steps; s++) ms[s] = 1e3 * stats[s].seconds;
        if (ms) qsort(ms, (size_t)job->steps, sizeof *ms, cmp_ms);
        printf("summary: layout %s | %d steps | step median %.1f ms | %.1f ms per step (wall, "
               "set-up included)\n",
               desc, job->steps, ms ? ms[job->steps / 2] : 0.0, 1e3 * wall / job->steps);
        free(ms);
    }
    if (rc == 0 && !job->quiet) dp_print_report(&run, stdout);
    if (rc == 0 && job->dump_path && dump_save(dump, job->dump_path, &err)) {
        fprintf(stderr, "parity train: --dump: %s\n", err.msg);
        rc = 2;
    }
    if (rc == 0 && job->digest_path && dump_write_digests(dump, job->digest_path, &err)) {
        fprintf(stderr, "parity train: --digest: %s\n", err.msg);
        rc = 2;
    }
    dump_free(dump);
    free(stats);
    free(reports);
    return rc;
}

/* Who produced an element in the layout run, for the divergence report. */
typedef struct {
    const pconfig_t *pc;
    int golden_micro, T;
} owner_ctx_t;

static void describe(void *ctx, const st_tensor_t *t, uint64_t flat, char *lay, char *gold,
                     size_t cap) {
    const owner_ctx_t *o = ctx;
    const char *what = strchr(t->name, '.');
    what = what ? what + 1 : t->name;
    int batch = t->ndim >= 2 && (strncmp(what, "act.", 4) == 0 || strncmp(what, "mask.", 5) == 0 ||
                                 !strcmp(what, "logits") || !strcmp(what, "input_ids") ||
                                 !strcmp(what, "labels"));
    if (batch) {
        uint64_t per_seq = st_numel(t) / (uint64_t)t->shape[0];
        int seq = (int)(flat / per_seq), per_rank = o->pc->global_batch / o->pc->dp;
        int rank = seq / per_rank, in_rank = seq % per_rank, accum = o->pc->accum_degree;
        int k = 0, start = 0;
        for (; k < accum; k++) { /* the uneven split of pconfig.h */
            int size = per_rank / accum + (k < per_rank % accum);
            if (in_rank < start + size) break;
            start += size;
        }
        snprintf(lay, cap, "device %d (dp rank %d), microbatch %d of %d, sequence %d", rank, rank,
                 k, accum, seq);
        snprintf(gold, cap, "device 0, microbatch %d, sequence %d", seq / o->golden_micro, seq);
    } else if (!strncmp(what, "grad.", 5) || !strncmp(what, "param.", 6)) {
        snprintf(lay, cap, "the owner of that element's bucket piece (ZeRO-%d over %d devices; "
                           "replicated on every device for stage 0)",
                 o->pc->zero_stage, o->pc->dp);
    } else {
        snprintf(lay, cap, "every device (an exact all-reduce over %d devices)", o->pc->dp);
    }
}

int layout_check(const layout_job_t *job) {
    const pconfig_t *pc = &job->lo->pc;
    perr_t err;
    unsigned char *all = malloc((size_t)job->steps);
    dump_t *golden = new_dump(job->cfg, DUMP_TENSORS), *layout = new_dump(job->cfg, DUMP_TENSORS);
    gpt_t *g = NULL;
    int rc = 2;
    if (!all || !golden || !layout || gpt_new(&g, job->cfg, &err)) {
        fputs("parity check: out of memory\n", stderr);
        goto out;
    }
    memset(all, 1, (size_t)job->steps);
    /* the golden run: one device, the model's own microbatches */
    if (dump_add_init(golden, g, &err)) goto fail;
    for (int s = 0; s < job->steps; s++) {
        gpt_observer_t obs = {0};
        gpt_step_stats_t st;
        dump_begin_step(golden, s, &obs);
        gpt_train_step(g, job->data, s, &obs, &st);
        if (dump_end_step(golden, g, &st, &err)) goto fail;
    }
    layout_job_t lj = *job;
    lj.want = all;
    dp_run_t run;
    if (run_dp(&lj, layout, NULL, NULL, &run, &err)) goto fail;
    owner_ctx_t oc = {pc, job->cfg->micro_batch, job->cfg->seq_length};
    check_owner_t owner = {&oc, describe};
    check_result_t res;
    char desc[160];
    pconfig_describe(pc, desc, sizeof desc);
    int bad = check_compare(dump_writer(golden), dump_writer(layout), &owner, stdout, &res);
    printf("%-44s | %7s | %5s | %16s | %s\n", "layout", "devices", "steps", "tensors compared",
           "bit-exact");
    printf("%-44s | %7d | %5d | %16d | %s\n", desc, pc->world_size, job->steps, res.compared,
           bad ? "NO" : "yes");
    rc = bad ? 1 : 0;
    goto out;
fail:
    fprintf(stderr, "parity check: %s\n", err.msg);
out:
    gpt_free(g);
    dump_free(golden);
    dump_free(layout);
    free(all);
    return rc;
}
