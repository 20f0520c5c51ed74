/* train_golden.c - the one-device golden run of `parity train` (no
 * layout flags; train_run_golden): its memory checked, the model built
 * (or loaded), its steps timed through the one step path, the summary
 * line, and its outputs (dump, digest, checkpoint) through run_output.h. */
#include <errno.h>
#include <limits.h>
#include <stddef.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <sys/stat.h>
#include <unistd.h>

#include "commands.h"
#include "parity/ckpt.h"
#include "parity/dump.h"
#include "parity/memest.h"
#include "parity/tile.h"
#include "train.h"

/* "2 encoder + " before an encoder-decoder's decoder layers ("" for a GPT). */
static const char *enc_layers(const model_config_t *c) {
    static char buf[48];
    snprintf(buf, sizeof buf, "%d encoder + ", c->encoder_layers);
    return c->arch == MODEL_GPT ? "" : buf;
}

static double clock_ms(clockid_t id) {
    struct timespec t;
    clock_gettime(id, &t);
    return (double)t.tv_sec * 1e3 + (double)t.tv_nsec * 1e-6;
}
static double now_ms(void) { return clock_ms(CLOCK_MONOTONIC); }
/* CPU time of this thread: what a step costs, even on a machine that
 * other processes share (wall time then includes their turns). */
static double cpu_ms(void) { return clock_ms(CLOCK_THREAD_CPUTIME_ID); }

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static uint32_t bits(float f) {
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return u;
}

/* The golden run's memory, before any of it is taken (memest.h), then
 * the model: NULL after a message. */
static gpt_t *golden_model(const run_output_t *o, const model_config_t *cfg, int load) {
    perr_t err;
    memest_t mem;
    gpt_t *g = NULL;
    int bad = memest_layout(cfg, NULL, &mem, &err);
    if (!bad) run_output_memest(o, cfg, load, &mem);
    if (bad || memest_check(&mem, 0, &err) || gpt_new(&g, cfg, &err)) {
        fprintf(stderr, "%s: %s\n", cli_name, err.msg);
        return NULL;
    }
    if (!o->quiet) memest_print(&mem, stdout);
    return g;
}

/* The golden run's dump: its backend named, the initial parameters in. */
static int golden_dump(const run_output_t *o, gpt_t *g, dump_t **out) {
    perr_t err;
    const unsigned what = run_output_dump_what(o);
    if (!what) return 0;
    dump_t *dump = *out = dump_new(g, what);
    if (!dump || dump_set_metadata(dump, "backend", tile_backend_name(tile_get_backend()), &err) ||
        dump_add_init(dump, g, &err)) {
        fprintf(stderr, "%s: dump: %s\n", cli_name, dump ? err.msg : "out of memory");
        return -1;
    }
    return 0;
}

/* The summary line: the losses, and the median step in wall and CPU time. */
static void golden_summary(const model_config_t *cfg, int quiet, double *ms, double *cpu,
                           long long steps, float first_loss, float last_loss) {
    double total = 0;
    for (long long s = 0; s < steps; s++) total += ms[s];
    qsort(ms, (size_t)steps, sizeof(double), cmp_double);
    qsort(cpu, (size_t)steps, sizeof(double), cmp_double);
    printf("summary: model %s | backend %s | %lld steps | loss %.6f -> %.6f (0x%08x) | "
           "step median %.1f ms, min %.1f ms, cpu median %.1f ms, total %.2f s\n",
           cfg->name, tile_backend_name(tile_get_backend()), steps, (double)first_loss,
           (double)last_loss, bits(last_loss), ms[steps / 2], ms[0], cpu[steps / 2], total * 1e-3);
    if (quiet || tile_get_backend() != TILE_BACKEND_OPENBLAS) return;
    int wide, narrow, pair, folded;
    tile_wide_counts(&wide, &narrow);
    tile_pair_counts(&pair, &folded);
    printf("tile blocks: %d shapes checked as one OpenBLAS call each, %d run tile by tile; %d "
           "two-K-tile shapes summed by two calls, %d folded (tile.h: tile_gemm_tiles, "
           "tile_gemm_tiles_pair)\n", wide, narrow, pair, folded);
}

/* The golden run's steps through the one step path, timed: 0, 1 (a
 * non-finite step stops the run) or 2. */
static int golden_steps(const run_output_t *o, const model_config_t *cfg, gpt_t *g,
                        const corpus_t *data, dump_t *dump) {
    perr_t err;
    double *ms = calloc((size_t)o->steps, sizeof(double)), *cpu = calloc((size_t)o->steps, sizeof(double));
    float first_loss = 0, last_loss = 0;
    int rc = 0;
    for (int s = 0; s < o->steps && !rc; s++) {
        gpt_step_stats_t st;
        double t0 = now_ms(), c0 = cpu_ms();
        if (dump_golden_step(g, data, o->first + s, dump && o->want[s] ? dump : NULL, &st, &err)) {
            fprintf(stderr, "%s: dump: %s\n", cli_name, err.msg);
            rc = 2;
            break;
        }
        double dt = now_ms() - t0;
        if (ms && cpu) ms[s] = dt, cpu[s] = cpu_ms() - c0;
        if (s == 0) first_loss = st.loss;
        last_loss = st.loss;
        rc = run_output_step(o, s, &st, dt, !o->quiet);
        if (!o->quiet) gpt_moe_print_step(g, stdout);
    }
    if (rc == 0 && ms && cpu) golden_summary(cfg, o->quiet, ms, cpu, o->steps, first_loss, last_loss);
    free(ms);
    free(cpu);
    return rc;
}

/* `parity train` without layout flags: the one-device golden run. */
int train_run_golden(const run_output_t *o, train_inputs_t *in, int load) {
    const model_config_t *cfg = &in->cfg;
    gpt_t *g = golden_model(o, cfg, load);
    if (!g) return 2;
    if (load) ckpt_state_to_gpt(&in->resume, g); /* the golden table is the checkpoint's */
    ckpt_state_free(&in->resume);
    dump_t *dump = NULL;
    int rc = golden_dump(o, g, &dump) ? 2 : 0;
    if (rc == 0 && !o->quiet)
        printf("parity train: model %s (%zu parameters, %s%d layers, hidden %d, heads %d, "
               "seq %d, batch %d x %d tokens, microbatch %d), backend %s%s\n",
               cfg->name, g->table.total, enc_layers(cfg), cfg->layers, cfg->hidden, cfg->heads,
               cfg->seq_length,
               cfg->global_batch, cfg->seq_length, cfg->micro_batch,
               tile_backend_name(tile_get_backend()),
               accum_plain_sums() ? ", PLAIN fp32 SUMS (diagnostic build, not golden)" : "");
    if (rc == 0) rc = golden_steps(o, cfg, g, &in->data, dump);
    float *scratch[2] = {NULL, NULL}; /* adamw8bit: the dequantized moments */
    const ckpt_state_t now = o->save_dir && rc == 0 ? ckpt_state_view_gpt(g, o->first + o->steps, scratch)
                                                    : (ckpt_state_t){0};
    if (rc == 0 && o->save_dir && (!now.adam_m || !now.adam_v)) {
        fprintf(stderr, "%s: --save: out of memory for AdamW's state\n", cli_name);
        rc = 2;
    }
    if (rc == 0) rc = run_output_finish(o, dump, o->quiet ? NULL : "dump", &now);
    free(scratch[0]);
    free(scratch[1]);
    dump_free(dump);
    gpt_free(g);
    return rc;
}
