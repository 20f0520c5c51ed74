/* layout_cli.c - run a parallel layout for `parity train` / `parity check`. */
#include "model/gpt.h"
#include "layout_cli.h"

#include "broken.h"
#include "commands.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "parity/check_layout.h"
#include "parity/ckpt.h"
#include "parity/engine.h"
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
         !strcmp(a, "--test-broken")) && num_flag_value(a, v, err))
        return -1;
    if (!strcmp(a, "--parallel-config")) {
        if (lo->parallel_config)
            return perr_set(err, "--parallel-config: given twice ('%s' and '%s')", lo->parallel_config, v);
        lo->parallel_config = v;
        pio_note_input(v, "--parallel-config"); /* never an output (fileio.h) */
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
        double mb;
        if (num_parse_double(a, v, 0.0, 1e9, &mb, err)) return -1;
        if (!(mb > 0))
            return perr_set(err, "--arena-mb: expected a device memory size in MB > 0, got '%s'", v);
        if (mb * 1e6 < 1.0) /* 0 bytes would be 0 = unlimited */
            return perr_set(err, "--arena-mb: '%s' MB is less than one byte (the smallest size is "
                                 "1e-6 MB)", v);
        lo->arena_bytes = cli_mb_bytes(mb);
        *i += 2;
        return 1;
    }
    if (!strcmp(a, "--test-broken")) {
        if (!strcmp(v, "list")) lo->list_broken = 1;
        else if (broken_parse(v, &lo->broken, &lo->broken_device, err)) return -1;
        *i += 2;
        return 1;
    }
    return pconfig_parse_flag(&lo->pc, argc, argv, i, err);
}

int layout_opts_check(const layout_opts_t *lo, const model_config_t *cfg, perr_t *err) {
    const pconfig_t *pc = &lo->pc;
    if (lo->broken && broken_check(lo->broken, lo->broken_device, pc, cfg, lo->resumed, err)) return -1;
    if (lo->step_focus >= pc->world_size)
        return perr_set(err, "--step-through=%d: the layout has devices 0 .. %d", lo->step_focus,
                        pc->world_size - 1);
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
          "checker negative controls (tests only: the checker must report these):\n",
          f);
    broken_print_help(f);
}

static int cmp_ms(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* The layout's memory, before anything is allocated: the devices, the
 * reassembly, the dump (train) or both dumps and the golden model kept
 * beside the layout (check). Refuses what does not fit. */
static int estimate(const layout_job_t *job, int check, memest_t *m, perr_t *err) {
    const run_output_t *o = &job->out;
    if (memest_layout(job->cfg, &job->lo->pc, m, err)) return layout_opts_blame(job->lo, err);
    if (check == 2) { /* a check whose golden run is spilled to disk */
        memest_t golden;
        if (memest_layout(job->cfg, NULL, &golden, err)) return -1;
        memest_add_check_stream(m, &golden, job->cfg);
        run_output_t no_dump = {.steps = o->steps}; /* the checkpoint read, if any */
        run_output_memest(&no_dump, job->cfg, job->resume != NULL, m);
    } else if (check) {
        memest_t golden;
        if (memest_layout(job->cfg, NULL, &golden, err)) return -1;
        m->host_shared += golden.all_devices + golden.host_shared;
        memest_add_dump(m, job->cfg, DUMP_TENSORS, o->steps);
        memest_add_dump(m, job->cfg, DUMP_TENSORS | DUMP_SOURCES, o->steps);
        run_output_t no_dump = {.steps = o->steps}; /* the checkpoint read, if any */
        run_output_memest(&no_dump, job->cfg, job->resume != NULL, m);
    } else {
        run_output_memest(o, job->cfg, job->resume != NULL, m);
    }
    if (job->resume || o->save_dir) m->host_shared += engine_ckpt_host_bytes(job->cfg, &job->lo->pc);
    return memest_check(m, job->lo->arena_bytes, err);
}

static int run_dp(const layout_job_t *job, const unsigned char *want, dump_t *dump,
                  gpt_step_stats_t *stats, device_report_t *reports, ckpt_state_t *save,
                  int stop_nonfinite, engine_run_t *run_out, perr_t *err) {
    engine_run_t run = {.model = *job->cfg, .pc = job->lo->pc, .steps = job->out.steps,
                    .data = job->data, .arena_capacity = job->lo->arena_bytes,
                    .algo = job->lo->algo, .trace_path = job->lo->trace_path, .dump = dump,
                    .dump_step = want, .stats = stats, .reports = reports,
                    .resume = job->resume, .save = save, .stop_nonfinite = stop_nonfinite,
                    .moe_steps = run_out->moe_steps};
    broken_apply(job->lo->broken, job->lo->broken_device, &run);
    int rc = engine_train(&run, err);
    *run_out = run;
    return rc;
}

/* The median step (barrier to barrier), and the whole run with set-up. */
static void print_summary(const char *desc, const gpt_step_stats_t *stats, int steps, double wall) {
    double *ms = malloc((size_t)steps * sizeof *ms);
    for (int s = 0; ms && s < steps; s++) ms[s] = 1e3 * stats[s].seconds;
    if (ms) qsort(ms, (size_t)steps, sizeof *ms, cmp_ms);
    printf("summary: layout %s | %d steps | step median %.1f ms | %.1f ms per step (wall, "
           "set-up included)\n",
           desc, steps, ms ? ms[steps / 2] : 0.0, 1e3 * wall / steps);
    free(ms);
}

/* The dump holds device 0's copy of a replicated tensor: a replica that
 * disagrees is said (exit 1), or the dump would hide it. */
static int replicas_agree(const engine_run_t *run) {
    if (!run->n_replica_diffs) return 1;
    const engine_replica_diff_t *d = &run->replica_diffs[0];
    fprintf(stderr, "%s: the replicas of %s disagree: device %d's element %llu is %.9g, device "
                    "%d's (dumped) %.9g; %d tensor%s with disagreeing replicas\n", cli_name,
            d->name, d->device, (unsigned long long)d->flat, (double)d->got, d->taken,
            (double)d->want, run->n_replica_diffs, run->n_replica_diffs == 1 ? "" : "s");
    return 0;
}

static double seconds_since(const struct timespec *t0) {
    struct timespec t1;
    clock_gettime(CLOCK_MONOTONIC, &t1);
    return (double)(t1.tv_sec - t0->tv_sec) + 1e-9 * (double)(t1.tv_nsec - t0->tv_nsec);
}

/* engine_train, then its steps through the one step path (run_output.h):
 * each step's line (the last one under --quiet), stopping where the
 * loss or gradient norm went non-finite; 0, 1 or 2. */
static int train_steps(const layout_job_t *job, dump_t *dump, gpt_step_stats_t *stats,
                       device_report_t *reports, ckpt_state_t *save, engine_run_t *run) {
    perr_t err;
    const run_output_t *o = &job->out;
    if (!stats || !reports) {
        fprintf(stderr, "%s: out of memory\n", cli_name);
        return 2;
    }
    if (run_dp(job, o->want, dump, stats, reports, o->save_dir ? save : NULL, 1, run, &err)) {
        fprintf(stderr, "%s: %s\n", cli_name, err.msg);
        return 2;
    }
    int rc = 0;
    for (int s = 0; s < run->steps_run; s++) {
        if (run_output_step(o, s, &stats[s], -1, !o->quiet || s == run->steps_run - 1)) rc = 1;
        if (run->moe_steps && !o->quiet) moe_print_stats(job->cfg, &run->moe_steps[s], stdout);
    }
    return rc;
}

/* MoE models: [steps] routing statistics for the engine to fill, their
 * counts in one block (*block, freed by the caller with the array). */
static gpt_moe_stats_t *moe_steps_new(const model_config_t *c, int steps, int64_t **block) {
    *block = NULL;
    if (c->moe_experts <= 0) return NULL;
    const size_t cells = (size_t)c->layers * (size_t)c->moe_experts;
    gpt_moe_stats_t *st = calloc((size_t)steps, sizeof *st);
    *block = calloc(2 * cells * (size_t)steps, sizeof **block);
    for (int s = 0; st && *block && s < steps; s++) {
        st[s].routed = *block + 2 * cells * (size_t)s;
        st[s].dropped = st[s].routed + cells;
    }
    return st;
}

int layout_train(const layout_job_t *job) {
    const pconfig_t *pc = &job->lo->pc;
    const run_output_t *o = &job->out;
    perr_t err;
    memest_t mem;
    if (estimate(job, 0, &mem, &err)) {
        fprintf(stderr, "%s: %s\n", cli_name, err.msg);
        return 2;
    }
    const unsigned what = run_output_dump_what(o);
    dump_t *dump = what ? run_output_new_dump(job->cfg, what) : NULL;
    if (what && !dump) {
        fprintf(stderr, "%s: dump: out of memory\n", cli_name);
        return 2;
    }
    gpt_step_stats_t *stats = calloc((size_t)o->steps, sizeof *stats);
    device_report_t *reports = calloc((size_t)pc->world_size, sizeof *reports);
    char desc[160];
    pconfig_describe(pc, desc, sizeof desc);
    if (!o->quiet) {
        printf("parity train: model %s, layout %s (%d devices, %s collectives)\n", job->cfg->name,
               desc, pc->world_size, coll_algo_name(job->lo->algo));
        memest_print(&mem, stdout);
    }
    engine_run_t run = {0};
    int64_t *moe_block;
    run.moe_steps = moe_steps_new(job->cfg, o->steps, &moe_block);
    int rc = 0;
    if (job->cfg->moe_experts > 0 && (!run.moe_steps || !moe_block)) {
        fprintf(stderr, "%s: out of memory\n", cli_name);
        rc = 2;
    }
    ckpt_state_t save = {0};
    if (rc == 0 && o->save_dir && ckpt_state_alloc(&save, job->cfg, &err)) {
        fprintf(stderr, "%s: --save: %s\n", cli_name, err.msg);
        rc = 2;
    }
    struct timespec t0;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    if (rc == 0) rc = train_steps(job, dump, stats, reports, &save, &run);
    const double wall = seconds_since(&t0);
    if (rc == 0) print_summary(desc, stats, o->steps, wall);
    if (rc == 0 && !o->quiet) engine_print_report(&run, stdout);
    if (rc == 0 && !replicas_agree(&run)) rc = 1;
    if (rc == 0) rc = run_output_finish(o, dump, NULL, &save);
    free(run.replica_diffs);
    free(run.moe_steps);
    free(moe_block);
    ckpt_state_free(&save);
    dump_free(dump);
    free(stats);
    free(reports);
    return rc;
}

/* The golden run of a check: one device, the model's own microbatches,
 * every step dumped; with --load it starts from the checkpoint. A run
 * that goes non-finite still runs every step: the checker compares both
 * runs' bits, and says that they are NaN or inf (*bad: its first such
 * step, or -1). With sp, each step (and the init) goes to a dump of its
 * own, spilled to disk, so that one step at a time is in memory; else
 * all of them to golden. */
static int check_golden(const layout_job_t *job, gpt_t *g, dump_t *golden, check_spill_t *sp,
                        int64_t *bad, const char **what, perr_t *err) {
    if (job->resume) ckpt_state_to_gpt(job->resume, g);
    *bad = -1;
    const int64_t first = job->out.first;
    for (int64_t s = first - 1; s < first + job->out.steps; s++) { /* first - 1: the init */
        dump_t *d = sp ? run_output_new_dump(job->cfg, DUMP_TENSORS) : golden;
        if (!d) return perr_set(err, "golden dump: out of memory");
        gpt_step_stats_t st;
        int rc = s < first ? dump_add_init(d, g, err)
                           : dump_golden_step(g, job->data, s, d, &st, err);
        if (!rc && sp) rc = check_spill_add(sp, s < first ? CHECK_SPILL_INIT : s, dump_writer(d), err);
        if (sp) dump_free(d);
        if (rc) return -1;
        if (s >= first && *bad < 0 && (*what = step_not_finite(&st))) *bad = s;
    }
    return sp ? check_spill_seal(sp, err) : 0;
}

/* The verdict's table and what went non-finite: 0 bit-exact, else 1. */
static int check_verdict(const layout_job_t *job, int mismatch, const check_result_t *res,
                         int64_t golden_bad, const char *golden_what, int64_t layout_bad,
                         const char *layout_what) {
    const pconfig_t *pc = &job->lo->pc;
    char desc[160];
    pconfig_describe(pc, desc, sizeof desc);
    if (res->skipped)
        printf("--compare: %d tensors of the classes left out were not compared\n", res->skipped);
    printf("%-48s | %7s | %5s | %16s | %s\n", "layout", "devices", "steps", "tensors compared",
           "bit-exact");
    printf("%-48s | %7d | %5d | %16d | %s\n", desc, pc->world_size, job->out.steps, res->compared,
           mismatch ? "NO" : "yes");
    if (golden_bad >= 0 && layout_bad >= 0) {
        printf("not finite: both runs, the golden run's %s from step %lld, the layout's %s from "
               "step %lld%s\n", golden_what, (long long)golden_bad, layout_what,
               (long long)layout_bad, mismatch ? "" : "; bit-exact, NaN and inf included, but "
                                                      "not a usable run (exit 1)");
        fprintf(stderr, "parity check: both runs went non-finite (the golden run's %s at step "
                        "%lld); parity train stops there\n", golden_what, (long long)golden_bad);
        return 1;
    }
    if (golden_bad >= 0 || layout_bad >= 0) {
        printf("not finite: only the %s run, its %s from step %lld\n",
               golden_bad >= 0 ? "golden" : "layout", golden_bad >= 0 ? golden_what : layout_what,
               (long long)(golden_bad >= 0 ? golden_bad : layout_bad));
        return 1;
    }
    return mismatch ? 1 : 0;
}

/* The layout run of a check, every step dumped, and the comparison
 * (against sp's files as each tensor is made when sp, else against
 * golden at the end): 0 or 1 (check_verdict), 2 after a message when out
 * of memory, or -1 with err set. */
static int check_layout_run(const layout_job_t *job, const engine_placement_t *pl, dump_t *golden,
                            check_spill_t *sp, dump_t *layout, int64_t golden_bad,
                            const char *golden_what, perr_t *err) {
    const run_output_t *o = &job->out;
    engine_run_t run = {0};
    check_layout_t cl = {0};
    unsigned char *all = malloc((size_t)o->steps);
    gpt_step_stats_t *stats = calloc((size_t)o->steps, sizeof *stats);
    int rc = 2;
    if (!all || !stats) {
        fputs("parity check: out of memory\n", stderr);
        goto out;
    }
    memset(all, 1, (size_t)o->steps);
    if (run_dp(job, all, layout, stats, NULL, NULL, 0, &run, err)) {
        rc = -1;
        goto out;
    }
    int64_t layout_bad = -1;
    const char *layout_what = NULL;
    for (int s = 0; s < o->steps && layout_bad < 0; s++)
        if ((layout_what = step_not_finite(&stats[s]))) layout_bad = o->first + s;
    check_owner_t owner;
    if (check_layout_init(&cl, pl, &run, layout, job->cfg->micro_batch, &owner)) {
        fputs("parity check: out of memory\n", stderr);
        goto out;
    }
    check_result_t res;
    int mismatch = sp ? check_spill_finish(sp, &owner, stdout, &res)
                      : check_compare_classes(dump_writer(golden), dump_writer(layout), &owner,
                                              job->compare, stdout, &res);
    rc = check_verdict(job, mismatch, &res, golden_bad, golden_what, layout_bad, layout_what);
out:
    free(all);
    free(stats);
    check_layout_free(&cl);
    free(run.replica_diffs);
    return rc;
}

/* Across processes (mpirun, the MPI transport): what the engine does not
 * merge between processes yet is refused, naming the flag. */
static int mpi_refuse(const layout_job_t *job, perr_t *err) {
    const layout_opts_t *lo = job->lo;
    int on = 0, focus = -1;
    perr_t ignore;
    devices_step_env(&on, &focus, &ignore);
    const struct { int bad; const char *what; } r[] = {
        {lo->trace_path != NULL, "--trace (each process holds its own device's spans)"},
        {lo->step_through || on, "--step-through (devices take turns inside one process)"},
        {job->resume != NULL, "--load"},
        {job->out.save_dir != NULL, "--save"},
        {job->cfg->moe_experts > 0, "mixture-of-experts models (their routing statistics)"},
        {lo->pc.offload != PC_OFFLOAD_NONE, "--offload-optimizer"}};
    if (lo->pc.world_size != runtime_processes())
        return perr_set(err, "the layout has %d devices but mpirun started %d processes: the MPI "
                             "transport runs one device per process (mpirun -np %d)",
                        lo->pc.world_size, runtime_processes(), lo->pc.world_size);
    for (size_t k = 0; k < sizeof r / sizeof r[0]; k++)
        if (r[k].bad)
            return perr_set(err, "under mpirun (%d processes, the MPI transport) %s is not supported "
                                 "yet; run it without mpirun", runtime_processes(), r[k].what);
    return 0;
}

/* The check of a process other than 0 under mpirun: its device's part of
 * the layout run; process 0 runs the golden run and compares. */
static int check_peer(const layout_job_t *job) {
    perr_t err;
    const int steps = job->out.steps;
    dump_t *layout = run_output_new_dump(job->cfg, DUMP_TENSORS | DUMP_SOURCES);
    unsigned char *all = malloc((size_t)steps);
    gpt_step_stats_t *stats = calloc((size_t)steps, sizeof *stats);
    coll_processes_barrier(); /* process 0's golden run */
    int rc = 0;
    engine_run_t run = {0};
    if (!layout || !all || !stats) {
        fprintf(stderr, "parity check (MPI process %d): out of memory\n", runtime_process_rank());
        rc = 2;
    } else {
        memset(all, 1, (size_t)steps);
        if (run_dp(job, all, layout, stats, NULL, NULL, 0, &run, &err)) {
            fprintf(stderr, "parity check (MPI process %d): %s\n", runtime_process_rank(), err.msg);
            rc = 2;
        }
    }
    free(run.replica_diffs);
    free(all);
    free(stats);
    dump_free(layout);
    return rc;
}

int layout_check(const layout_job_t *job) {
    perr_t err;
    if (runtime_processes() > 1) {
        if (mpi_refuse(job, &err)) {
            fprintf(stderr, "parity check: %s\n", err.msg);
            return 2;
        }
        if (runtime_process_rank() > 0) return check_peer(job);
    }
    memest_t mem;
    engine_placement_t pl;
    /* without --dump / --digest neither run's tensors stay in memory:
     * the golden run goes to disk and the layout's are compared as made */
    const int stream = !job->out.dump_path && !job->out.digest_path;
    if (estimate(job, stream ? 2 : 1, &mem, &err) ||
        engine_placement_init(&pl, job->cfg, &job->lo->pc, &err)) {
        fprintf(stderr, "parity check: %s\n", err.msg);
        return 2;
    }
    /* --dump / --digest: the layout run's reassembled tensors, written
     * whether or not they match (a mismatch is when one wants them) */
    dump_t *golden = stream ? NULL : run_output_new_dump(job->cfg, DUMP_TENSORS),
           *layout = run_output_new_dump(job->cfg, DUMP_TENSORS | DUMP_SOURCES |
                                                       (job->out.digest_path ? DUMP_DIGESTS : 0u));
    check_spill_t *sp = NULL;
    gpt_t *g = NULL;
    int rc = 2;
    int64_t golden_bad = -1;
    const char *golden_what = NULL;
    if ((!stream && !golden) || !layout || gpt_new(&g, job->cfg, &err)) {
        fputs("parity check: out of memory\n", stderr);
    } else if ((stream && !(sp = check_spill_new(job->compare, &err))) ||
               check_golden(job, g, golden, sp, &golden_bad, &golden_what, &err)) {
        fprintf(stderr, "parity check: %s\n", err.msg);
    } else {
        gpt_free(g); /* the layout run has its own devices */
        g = NULL;
        coll_processes_barrier(); /* under mpirun the other processes wait for the golden run */
        if (sp) dump_set_sink(layout, check_spill_sink, sp);
        rc = check_layout_run(job, &pl, golden, sp, layout, golden_bad, golden_what, &err);
        if (rc < 0) {
            fprintf(stderr, "parity check: %s\n", err.msg);
            rc = 2;
        } else if (rc < 2) {
            int w = run_output_finish(&job->out, layout, "layout dump", NULL);
            if (w) rc = w;
        }
    }
    check_spill_free(sp);
    gpt_free(g);
    dump_free(golden);
    dump_free(layout);
    engine_placement_free(&pl);
    return rc;
}
