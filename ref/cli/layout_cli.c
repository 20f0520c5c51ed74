/* layout_cli.c - run a parallel layout for `parity train` / `parity check`. */
#include "layout_cli.h"

#include "commands.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "parity/check_layout.h"
#include "parity/ckpt.h"
#include "parity/dp.h"
#include "parity/dump.h"
#include "parity/fileio.h"
#include "parity/memest.h"
#include "parity/numparse.h"
#include "parity/tile.h"

void layout_opts_defaults(layout_opts_t *lo) {
    memset(lo, 0, sizeof *lo);
    pconfig_defaults(&lo->pc);
    lo->algo = COLL_ALGO_DIRECT;
    lo->step_focus = -1;
    coll_algo_from_env(&lo->algo, NULL); /* a bad value is reported by the first collective */
}

int layout_opts_parse(layout_opts_t *lo, int argc, char **argv, int *i, perr_t *err) {
    const char *a = argv[*i], *v = *i + 1 < argc ? argv[*i + 1] : NULL;
    if ((!strcmp(a, "--coll-algo") || !strcmp(a, "--arena-mb") || !strcmp(a, "--trace") ||
         !strcmp(a, "--parallel-config") || !strcmp(a, "--optim") ||
         !strcmp(a, "--test-broken-replica")) && num_flag_value(a, v, err))
        return -1;
    if (!strcmp(a, "--parallel-config")) {
        if (lo->parallel_config)
            return perr_set(err, "--parallel-config: given twice ('%s' and '%s')", lo->parallel_config, v);
        lo->parallel_config = v;
        *i += 2;
        return 1;
    }
    if (!strcmp(a, "--optim")) {
        if (lo->n_optim == LAYOUT_MAX_OPTIM)
            return perr_set(err, "--optim: more than %d options", LAYOUT_MAX_OPTIM);
        lo->optim[lo->n_optim++] = v;
        *i += 2;
        return 1;
    }
    if (!strcmp(a, "--trace")) {
        if (pio_check_output(v, "--trace", err)) return -1;
        lo->trace_path = v;
        *i += 2;
        return 1;
    }
    if (!strcmp(a, "--step-through") || !strncmp(a, "--step-through=", 15)) {
        long long dev = -1;
        if (a[14] == '=' && num_parse_int("--step-through", a + 15, 0, PARITY_MAX_DEVICES - 1, &dev, err))
            return -1;
        lo->step_through = 1;
        lo->step_focus = (int)dev;
        *i += 1;
        return 1;
    }
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
        if (mb * 1e6 < 1.0) /* 0 bytes would be 0 = unlimited */
            return perr_set(err, "--arena-mb: '%s' MB is less than one byte (the smallest size is "
                                 "1e-6 MB)", v);
        lo->arena_bytes = (size_t)(mb * 1e6);
        *i += 2;
        return 1;
    }
    if (!strcmp(a, "--test-broken-tp-vocab-padding")) {
        lo->broken_tp_vocab_pad = 1;
        *i += 1;
        return 1;
    }
    const struct { const char *flag; int *field; } broken[] = {
        {"--test-broken-tp-fp32-sums", &lo->broken_tp_fp32_sums},
        {"--test-broken-pp-mask-key", &lo->broken_pp_mask_key},
        {"--test-broken-pp-tied-embedding", &lo->broken_pp_tied_grad},
        {"--test-broken-cp-online-softmax", &lo->broken_cp_online_softmax},
    };
    for (size_t k = 0; k < sizeof broken / sizeof broken[0]; k++)
        if (!strcmp(a, broken[k].flag)) {
            *broken[k].field = 1;
            *i += 1;
            return 1;
        }
    if (!strcmp(a, "--test-broken-fp32-sums")) {
        lo->broken_fp32_sums = 1;
        *i += 1;
        return 1;
    }
    if (!strcmp(a, "--test-broken-replica")) {
        long long rank;
        if (num_parse_int(a, v, 0, PARITY_MAX_DEVICES - 1, &rank, err)) return -1;
        lo->broken_replica = (int)rank + 1;
        *i += 2;
        return 1;
    }
    return pconfig_parse_flag(&lo->pc, argc, argv, i, err);
}

int layout_opts_check(const layout_opts_t *lo, const model_config_t *cfg, perr_t *err) {
    const pconfig_t *pc = &lo->pc;
    if (lo->broken_fp32_sums && pc->dp == 1)
        return perr_set(err, "--test-broken-fp32-sums: needs data-parallel-size > 1 (one replica "
                             "has no gradient sums across ranks to break)");
    if (lo->broken_tp_fp32_sums && pc->tp == 1)
        return perr_set(err, "--test-broken-tp-fp32-sums: needs tensor-model-parallel-size > 1");
    if (lo->broken_tp_vocab_pad) {
        if (pc->tp == 1)
            return perr_set(err, "--test-broken-tp-vocab-padding: needs tensor-model-parallel-size > 1");
        const long unit = 128L * pc->tp;
        if (cfg->vocab % unit == 0)
            return perr_set(err, "--test-broken-tp-vocab-padding: the vocabulary of %d is already a "
                                 "multiple of 128 x tp = %ld, so nothing is padded", cfg->vocab, unit);
    }
    /* dp_train refuses these too; here they are refused before the golden
     * run that `parity check` makes first */
    if ((lo->broken_pp_mask_key || lo->broken_pp_tied_grad) && pc->pp == 1)
        return perr_set(err, "--test-broken-pp-%s: needs pipeline-model-parallel-size > 1",
                        lo->broken_pp_mask_key ? "mask-key" : "tied-embedding");
    /* a stage's microbatch count is then the sequence's index in the
     * batch: the mis-keyed masks are the right ones */
    if (lo->broken_pp_mask_key && pc->micro_batch == 1 && pc->dp == 1)
        return perr_set(err, "--test-broken-pp-mask-key: with one sequence per microbatch and one "
                             "data-parallel rank, a stage's microbatch count equals the sequence's "
                             "index, so the masks come out right; use fewer microbatches or dp > 1");
    if (lo->step_focus >= pc->world_size)
        return perr_set(err, "--step-through=%d: the layout has devices 0 .. %d", lo->step_focus,
                        pc->world_size - 1);
    if (lo->broken_cp_online_softmax && (pc->cp == 1 || pc->cp_comm))
        return perr_set(err, "--test-broken-cp-online-softmax: needs the ring (context-parallel-"
                             "size > 1, --cp-comm-type p2p)");
    return 0;
}

void layout_opts_print_help(FILE *f) {
    pconfig_print_help(f);
    fputs("  --coll-algo direct|ring  collective algorithm of the layout (default direct)\n"
          "  --parallel-config FILE   the layout from a JSON \"model parallel patterns\" file\n"
          "                           (mode, sharding_size, sharding_dim, stage_cnt, accum_degree,\n"
          "                           device_mapping) or a Colossal-AI config (parallel = dict(...))\n"
          "  --optim model.optim.KEY=VALUE   NeMo's optimizer options (name, dtype, grad_sync_dtype,\n"
          "                           overlap_grad_sync, overlap_param_sync, bucket_cap_mb,\n"
          "                           contiguous_param_buffer, contiguous_grad_buffer); repeatable\n"
          "  --trace FILE             write a Chrome trace-event file (Perfetto, chrome://tracing):\n"
          "                           one track per device, forward/backward spans per\n"
          "                           (microbatch, chunk), receives, exact sums, optimizer\n"
          "  --step-through[=DEVICE]  devices take turns, one at a time, handing a baton on at\n"
          "                           every collective or p2p wait, in rank order (same bits;\n"
          "                           for gdb: stopping the running device stops the step; no\n"
          "                           watchdog unless PARITY_COLL_TIMEOUT is set). =DEVICE: every\n"
          "                           other device runs until it needs DEVICE, then DEVICE runs.\n"
          "                           Also PARITY_STEP_THROUGH=1, PARITY_STEP_THROUGH_DEVICE=N\n"
          "  --arena-mb N             device memory of each simulated device (default unlimited);\n"
          "                           a layout whose estimated memory exceeds it, or the host's\n"
          "                           available memory (PARITY_MEM_AVAILABLE_MB overrides\n"
          "                           /proc/meminfo), is refused before anything is allocated\n"
          "checker negative controls (tests only: the checker must report these):\n"
          "  --test-broken-fp32-sums  reduce gradients with plain fp32 ring sums\n"
          "  --test-broken-tp-fp32-sums  complete row-parallel sums in fp32 (each rank rounds\n"
          "                           its partial, then adds): the reduction-order bug\n"
          "  --test-broken-tp-vocab-padding  pad the vocabulary to a multiple of 128 x tp and let\n"
          "                           the padded columns into the softmax (Megatron-LM 1754)\n"
          "  --test-broken-pp-mask-key  key a stage's dropout masks by its own microbatch count,\n"
          "                           not the sequences' place in the batch (PyTorch 55036)\n"
          "  --test-broken-pp-tied-embedding  skip the embedding group's reduction of the tied\n"
          "                           word embedding's gradient (first and last stage)\n"
          "  --test-broken-cp-online-softmax  merge the ring's blocks with flash-style online\n"
          "                           softmax rescaling in arrival order (cp > 1, p2p)\n"
          "  --test-broken-replica R  flip one bit of device R's parameter replica after every\n"
          "                           update (ZeRO 0-2)\n",
          f);
}

const char *step_not_finite(const gpt_step_stats_t *st) {
    if (!isfinite(st->loss)) return "loss";
    if (!isfinite(st->grad_norm)) return "gradient norm";
    return NULL;
}

int ckpt_state_finite(const ckpt_state_t *s) {
    const float *v[3] = {s->params, s->adam_m, s->adam_v};
    for (int k = 0; k < 3; k++)
        for (size_t i = 0; v[k] && i < s->total; i++)
            if (!isfinite(v[k][i])) return 0;
    return 1;
}

static int cmp_ms(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* A dump needs the model's config and parameter table, not its memory. */
static dump_t *new_dump(const model_config_t *cfg, unsigned what) {
    gpt_t shape = {.cfg = *cfg};
    if (param_table_build(&shape.table, cfg, NULL)) return NULL;
    dump_t *d = dump_new(&shape, what);
    param_table_free(&shape.table);
    return d;
}

/* The layout's memory, before anything is allocated: the devices, the
 * reassembly, the dump (train) or both dumps and the golden model kept
 * beside the layout (check). Refuses what does not fit. */
static int estimate(const layout_job_t *job, int check, memest_t *m, perr_t *err) {
    if (memest_layout(job->cfg, &job->lo->pc, m, err)) return layout_opts_blame(job->lo, err);
    if (check) {
        memest_t golden;
        if (memest_layout(job->cfg, NULL, &golden, err)) return -1;
        m->host_shared += golden.all_devices + golden.host_shared;
        memest_add_dump(m, job->cfg, DUMP_TENSORS, job->steps);
        memest_add_dump(m, job->cfg, DUMP_TENSORS | DUMP_SOURCES, job->steps);
    } else if (job->dump_path || job->digest_path) {
        int dumped = 0;
        for (int s = 0; s < job->steps; s++) dumped += job->want[s] != 0;
        memest_add_dump(m, job->cfg, (job->dump_path ? DUMP_TENSORS : 0u) |
                                         (job->digest_path ? DUMP_DIGESTS : 0u), dumped);
    }
    if (job->resume || job->save_dir)
        m->host_shared += ckpt_host_bytes(job->cfg, job->resume != NULL, job->save_dir != NULL) +
                          dp_ckpt_host_bytes(job->cfg, &job->lo->pc);
    return memest_check(m, job->lo->arena_bytes, err);
}

static int run_dp(const layout_job_t *job, dump_t *dump, gpt_step_stats_t *stats,
                  dp_device_report_t *reports, ckpt_state_t *save, int stop_nonfinite,
                  dp_run_t *run_out, perr_t *err) {
    dp_run_t run = {.model = *job->cfg, .pc = job->lo->pc, .steps = job->steps, .data = job->data,
                    .arena_capacity = job->lo->arena_bytes, .algo = job->lo->algo,
                    .broken_fp32_sums = job->lo->broken_fp32_sums,
                    .broken_tp_fp32_sums = job->lo->broken_tp_fp32_sums,
                    .broken_tp_vocab_pad = job->lo->broken_tp_vocab_pad,
                    .broken_pp_mask_key = job->lo->broken_pp_mask_key,
                    .broken_pp_tied_grad = job->lo->broken_pp_tied_grad,
                    .broken_cp_online_softmax = job->lo->broken_cp_online_softmax,
                    .trace_path = job->lo->trace_path,
                    .broken_replica = job->lo->broken_replica, .dump = dump,
                    .dump_step = job->want, .stats = stats, .reports = reports,
                    .resume = job->resume, .save = save, .stop_nonfinite = stop_nonfinite};
    int rc = dp_train(&run, err);
    *run_out = run;
    return rc;
}

int layout_train(const layout_job_t *job) {
    const pconfig_t *pc = &job->lo->pc;
    perr_t err;
    memest_t mem;
    if (estimate(job, 0, &mem, &err)) {
        fprintf(stderr, "%s: %s\n", cli_name, err.msg);
        return 2;
    }
    dump_t *dump = NULL;
    if (job->dump_path || job->digest_path) {
        dump = new_dump(job->cfg, (job->dump_path ? DUMP_TENSORS : 0u) |
                                      (job->digest_path ? DUMP_DIGESTS : 0u));
        if (!dump) {
            fprintf(stderr, "%s: dump: out of memory\n", cli_name);
            return 2;
        }
    }
    gpt_step_stats_t *stats = calloc((size_t)job->steps, sizeof *stats);
    dp_device_report_t *reports = calloc((size_t)pc->world_size, sizeof *reports);
    char desc[160];
    pconfig_describe(pc, desc, sizeof desc);
    if (!job->quiet) {
        printf("parity train: model %s, layout %s (%d devices, %s collectives)\n", job->cfg->name,
               desc, pc->world_size, coll_algo_name(job->lo->algo));
        memest_print(&mem, stdout);
    }
    dp_run_t run = {0};
    int rc = 0;
    ckpt_state_t save = {0};
    if (job->save_dir && ckpt_state_alloc(&save, job->cfg, &err)) {
        fprintf(stderr, "%s: --save: %s\n", cli_name, err.msg);
        rc = 2;
    }
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    if (rc == 0 && (!stats || !reports ||
                    run_dp(job, dump, stats, reports, job->save_dir ? &save : NULL, 1, &run,
                           &err))) {
        fprintf(stderr, "%s: %s\n", cli_name, stats && reports ? err.msg : "out of memory");
        rc = 2;
    }
    const int64_t first = job->resume ? job->resume->step : 0;
    const int ran = rc == 0 ? run.steps_run : 0;
    for (int s = 0; s < ran; s++) {
        uint32_t u;
        memcpy(&u, &stats[s].loss, sizeof u);
        const char *bad = step_not_finite(&stats[s]);
        if (!job->quiet || s == ran - 1)
            printf("step %5lld | loss %.6f (0x%08x) | lr %.4e | grad norm %.6f\n",
                   (long long)(first + s), (double)stats[s].loss, u, (double)stats[s].lr,
                   (double)stats[s].grad_norm);
        if (bad) { /* as the golden run stops (train.c): nothing is written */
            fflush(stdout);
            fprintf(stderr, "%s: step %lld: %s is not finite\n", cli_name, (long long)(first + s),
                    bad);
            rc = 1;
        }
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
    if (rc == 0 && run.n_replica_diffs) { /* the dump holds device 0's copy: say so */
        const dp_replica_diff_t *d = &run.replica_diffs[0];
        fprintf(stderr, "%s: the replicas of %s disagree: device %d's element %llu is "
                        "%.9g, device %d's (dumped) %.9g; %d tensor%s with disagreeing replicas\n", cli_name,
                d->name, d->device, (unsigned long long)d->flat, (double)d->got, d->taken,
                (double)d->want, run.n_replica_diffs, run.n_replica_diffs == 1 ? "" : "s");
        rc = 1;
    }
    free(run.replica_diffs);
    if (rc == 0 && job->dump_path && dump_save(dump, job->dump_path, &err)) {
        fprintf(stderr, "%s: --dump: %s\n", cli_name, err.msg);
        rc = 2;
    }
    if (rc == 0 && job->digest_path && dump_write_digests(dump, job->digest_path, &err)) {
        fprintf(stderr, "%s: --digest: %s\n", cli_name, err.msg);
        rc = 2;
    }
    if (rc == 0 && job->save_dir && !ckpt_state_finite(&save)) {
        fprintf(stderr, "%s: --save: the parameters or AdamW's state after step %lld are not "
                        "finite; not saving\n", cli_name, (long long)save.step - 1);
        rc = 1;
    }
    if (rc == 0 && job->save_dir) {
        if (ckpt_save(job->save_dir, &save, tile_backend_name(tile_get_backend()), &err)) {
            fprintf(stderr, "%s: --save: %s\n", cli_name, err.msg);
            rc = 2;
        } else if (!job->quiet) {
            printf("checkpoint: step %lld -> %s\n", (long long)save.step, job->save_dir);
        }
    }
    ckpt_state_free(&save);
    dump_free(dump);
    free(stats);
    free(reports);
    return rc;
}

int layout_check(const layout_job_t *job) {
    const pconfig_t *pc = &job->lo->pc;
    perr_t err;
    memest_t mem;
    if (estimate(job, 1, &mem, &err)) {
        fprintf(stderr, "parity check: %s\n", err.msg);
        return 2;
    }
    dp_placement_t pl;
    if (dp_placement_init(&pl, job->cfg, pc, &err)) {
        fprintf(stderr, "parity check: %s\n", err.msg);
        return 2;
    }
    dp_run_t run = {0};
    check_layout_t cl = {0};
    unsigned char *all = malloc((size_t)job->steps);
    /* --dump / --digest: the layout run's reassembled tensors, written
     * whether or not they match (a mismatch is when one wants them) */
    dump_t *golden = new_dump(job->cfg, DUMP_TENSORS),
           *layout = new_dump(job->cfg, DUMP_TENSORS | DUMP_SOURCES |
                                            (job->digest_path ? DUMP_DIGESTS : 0u));
    gpt_t *g = NULL;
    gpt_step_stats_t *stats = NULL;
    int rc = 2;
    if (!all || !golden || !layout || gpt_new(&g, job->cfg, &err)) {
        fputs("parity check: out of memory\n", stderr);
        goto out;
    }
    memset(all, 1, (size_t)job->steps);
    /* the golden run: one device, the model's own microbatches; with
     * --load, both runs start from the checkpoint */
    if (job->resume) ckpt_state_to_gpt(job->resume, g);
    const int64_t first = job->resume ? job->resume->step : 0;
    /* a run that goes non-finite still runs every step here: the checker
     * compares both runs' bits, and says that they are NaN or inf */
    int64_t golden_bad = -1, layout_bad = -1;
    const char *golden_what = NULL, *layout_what = NULL;
    if (dump_add_init(golden, g, &err)) goto fail;
    for (int64_t s = first; s < first + job->steps; s++) {
        gpt_observer_t obs = {0};
        gpt_step_stats_t st;
        dump_begin_step(golden, s, &obs);
        gpt_train_step(g, job->data, s, &obs, &st);
        if (dump_end_step(golden, g, &st, &err)) goto fail;
        if (golden_bad < 0 && (golden_what = step_not_finite(&st))) golden_bad = s;
    }
    layout_job_t lj = *job;
    lj.want = all;
    if (!(stats = calloc((size_t)job->steps, sizeof *stats))) {
        fputs("parity check: out of memory\n", stderr);
        goto out;
    }
    if (run_dp(&lj, layout, stats, NULL, NULL, 0, &run, &err)) goto fail;
    for (int s = 0; s < job->steps && layout_bad < 0; s++)
        if ((layout_what = step_not_finite(&stats[s]))) layout_bad = first + s;
    check_owner_t owner;
    if (check_layout_init(&cl, &pl, &run, layout, job->cfg->micro_batch, &owner)) {
        fputs("parity check: out of memory\n", stderr);
        goto out;
    }
    check_result_t res;
    char desc[160];
    pconfig_describe(pc, desc, sizeof desc);
    int bad = check_compare_classes(dump_writer(golden), dump_writer(layout), &owner, job->compare,
                                    stdout, &res);
    if (res.skipped)
        printf("--compare: %d tensors of the classes left out were not compared\n", res.skipped);
    printf("%-48s | %7s | %5s | %16s | %s\n", "layout", "devices", "steps", "tensors compared",
           "bit-exact");
    printf("%-48s | %7d | %5d | %16d | %s\n", desc, pc->world_size, job->steps, res.compared,
           bad ? "NO" : "yes");
    rc = bad ? 1 : 0;
    if (golden_bad >= 0 && layout_bad >= 0) {
        printf("not finite: both runs, the golden run's %s from step %lld, the layout's %s from "
               "step %lld%s\n", golden_what, (long long)golden_bad, layout_what,
               (long long)layout_bad, bad ? "" : "; bit-exact, NaN and inf included, but not a "
                                                  "usable run (exit 1)");
        fprintf(stderr, "parity check: both runs went non-finite (the golden run's %s at step "
                        "%lld); parity train stops there\n", golden_what, (long long)golden_bad);
        rc = 1;
    } else if (golden_bad >= 0 || layout_bad >= 0) {
        printf("not finite: only the %s run, its %s from step %lld\n",
               golden_bad >= 0 ? "golden" : "layout", golden_bad >= 0 ? golden_what : layout_what,
               (long long)(golden_bad >= 0 ? golden_bad : layout_bad));
        rc = 1;
    }
    if (job->dump_path && dump_save(layout, job->dump_path, &err)) goto fail;
    if (job->digest_path && dump_write_digests(layout, job->digest_path, &err)) goto fail;
    if (job->dump_path || job->digest_path)
        printf("layout dump: %d tensors%s%s%s%s\n", dump_count(layout), job->dump_path ? " -> " : "",
               job->dump_path ? job->dump_path : "", job->digest_path ? ", digests -> " : "",
               job->digest_path ? job->digest_path : "");
    goto out;
fail:
    rc = 2;
    fprintf(stderr, "parity check: %s\n", err.msg);
out:
    gpt_free(g);
    dump_free(golden);
    dump_free(layout);
    free(all);
    free(stats);
    check_layout_free(&cl);
    free(run.replica_diffs);
    dp_placement_free(&pl);
    return rc;
}
