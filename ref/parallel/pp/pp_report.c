/* pp_report.c - a pipeline run next to its schedule's formulas
 * (pp.h): per stage the units it holds, the activation slots its
 * schedule needs (GPipe m, 1F1B min(pp - r, m), interleaved
 * min(warm-up + 1, m v)) against the most microbatches it held at once
 * and the activation memory it measured; the bubble each device measured
 * (1 - its forward/backward seconds over the step's span, from the
 * step's start to the last backward on any stage: the pipeline's flush)
 * against (p - 1)/(m + p - 1) ((p - 1)/(v m + p - 1) interleaved); and
 * the point-to-point traffic against one message per microbatch and
 * stage boundary, a sequence's residual stream each.
 *
 * The theory assumes equal stages and devices that never wait for a
 * core; the embedding and head make the end stages heavier, and on a
 * machine with fewer cores than devices a stage also waits for the CPU:
 * both show as a larger measured bubble.
 *
 * Dependency: engine -> here, never back. The input is run_report.h's
 * run_report_t, which the engine fills after a run (engine/report.c);
 * nothing here includes or calls the engine.
 */
#include <stdio.h>

#include "model/gpt.h"
#include "parity/pp.h"
#include "parity/run_report.h"

/* The first device (dp and tp rank 0 in report order) of each stage. */
static int stage_device(const run_report_t *run, int s) {
    for (int d = 0; d < run->pc.world_size; d++)
        if (run->reports[d].pp_stage == s) return d;
    return -1;
}

/* The encoder-decoder edge: the first device of the last encoder stage
 * sends each microbatch's stream to the k = tp/etp decoder ranks it
 * feeds (over the world group between two meshes, else its pipeline
 * group), the stream they hold: every position, or under sequence
 * parallelism their T/tp. */
static void print_bridge(const run_report_t *run, const pp_plan_t *pp, FILE *f) {
    const pconfig_t *pc = &run->pc;
    const int d = stage_device(run, pc->encoder_pp - 1), k = pc->tp / pc->encoder_tp;
    if (d < 0) return;
    const double steps = run->steps > 0 ? run->steps : 1, MB = 1e6;
    const coll_family_t *fam = coll_counters_family(&run->reports[d].comm,
                                                    pconfig_hetero(pc) ? "world" : "pp");
    const coll_tally_t x = fam ? fam->by[COLL_KIND_SEND][COLL_F32] : (coll_tally_t){0, 0, 0, 0, 0};
    const int per_rank = pc->global_batch / pc->dp;
    const double rows = (double)run->cfg.seq_length / (pc->sequence_parallel ? pc->tp : 1);
    fprintf(f, "  encoder-decoder bridge, device %d (the last encoder stage, %d) per step: %.0f "
               "messages, %.3f MB sent; formula: %d decoder rank%s x m = %d messages, %d sequences x "
               "T%s x h x 4 B each = %.3f MB (the gradients come back alike)\n",
            d, pc->encoder_pp - 1, (double)x.calls / steps, (double)x.sent / steps / MB, k,
            k > 1 ? "s" : "", k * pp->m, per_rank, pc->sequence_parallel ? "/tp" : "",
            k * per_rank * rows * run->cfg.hidden * 4 / MB);
}

/* "emb L0-3", "L4-7 head": what each chunk holds, asking the model which
 * units start the residual stream (the embedding), end it (the head) or
 * carry it on (layers, numbered in order). */
static void units_label(const model_config_t *cfg, const gpt_units_t *u, char *buf, size_t cap) {
    size_t at = 0;
    buf[0] = 0;
    for (int c = 0; c < u->n && at < cap; c++) {
        int l0 = 0, n = 0, first = 0, last = 0;
        for (int k = 0; k < u->hi[c]; k++) {
            const int in = model_unit_takes_stream(cfg, k), out = model_unit_gives_stream(cfg, k);
            if (k < u->lo[c]) l0 += in && out;
            else n += in && out, first |= !in, last |= !out;
        }
        at += (size_t)snprintf(buf + at, cap - at, "%s%s", c ? " | " : "", first ? "emb " : "");
        if (at < cap && n > 0) at += (size_t)snprintf(buf + at, cap - at, "L%d-%d", l0, l0 + n - 1);
        if (at < cap && last) at += (size_t)snprintf(buf + at, cap - at, " head");
    }
}

void pp_print_report(const run_report_t *run, FILE *f) {
    const pconfig_t *pc = &run->pc;
    const model_config_t cfg = run->cfg;
    pp_plan_t pp;
    if (!run->reports || pc->pp < 2 || pp_plan_build(&pp, &cfg, pc, NULL)) return;
    const double steps = run->steps > 0 ? run->steps : 1, MB = 1e6;
    fprintf(f, "pipeline: pp=%d, %s, m=%d microbatches per step and data-parallel rank, v=%d "
               "chunk%s per stage\n",
            pp.pp, pp_schedule_name(pp.sched), pp.m, pp.v, pp.v > 1 ? "s" : "");
    fprintf(f, "  %-5s %-6s %-26s %14s %9s %9s %10s %10s %8s\n", "stage", "device", "units",
            "slots: formula", "held max", "allocated", "act. MB", "busy ms", "bubble");
    double bubble = 0;
    int n = 0;
    for (int d = 0; d < pc->world_size; d++) {
        const device_report_t *r = &run->reports[d];
        if (r->pp_span > 0) bubble += 1 - r->pp_busy / r->pp_span, n++;
    }
    for (int s = 0; s < pp.pp; s++) {
        const int d = stage_device(run, s);
        if (d < 0) continue;
        const device_report_t *r = &run->reports[d];
        const int slots = r->pp_slots;
        char units[96];
        units_label(&cfg, &pp.units[s], units, sizeof units);
        fprintf(f, "  %-5d %-6d %-26s %14d %9d %9d %10.3f %10.1f %7.1f%%\n", s, d, units,
                pp_in_flight_formula(&pp, s), r->pp_in_flight_peak, slots,
                (double)r->peak[MEM_ACTIVATIONS] / MB, 1e3 * r->pp_busy / steps,
                r->pp_span > 0 ? 100 * (1 - r->pp_busy / r->pp_span) : 0.0);
    }
    fprintf(f, "  (slots in (microbatch, chunk) pairs held from F to the end of their backward: "
               "GPipe m, 1F1B min(pp - r, m), interleaved min(warm-up + 1, m v), ZB-H1 min(pp, m), "
               "ZB-H2 min(2 pp - r, m), "
               "ZB-V min(2 pp, 2 m), DualPipeV 2 pp + 1; act. MB: the device's activation "
               "high-water, slots and backward scratch)\n");
    if (pconfig_splits_backward(pp.sched)) {
        size_t most = 0;
        for (int d = 0; d < pc->world_size; d++)
            if (run->reports[d].pp_wstash_peak > most) most = run->reports[d].pp_wstash_peak;
        fprintf(f, "  split backward: W's inputs (copies of x and dy) held between B and W, at most "
                   "%.3f MB on a device\n", (double)most / MB);
        if (pc->overlap_grad_reduce) {
            fprintf(f, "  overlap: buckets handed to the communication thread during the schedule, "
                       "each as its units' last W ended:");
            for (int s = 0; s < pp.pp; s++)
                if (stage_device(run, s) >= 0)
                    fprintf(f, " stage %d %d", s, run->reports[stage_device(run, s)].buckets_in_schedule);
            fprintf(f, "\n");
        }
    }
    fprintf(f, "  bubble: measured %.1f%% (mean over the %d devices), theory %s = %.1f%%\n",
            n ? 100 * bubble / n : 0.0, n, pp_bubble_formula(&pp), 100 * pp_bubble_theory(&pp));
    /* point to point: device 0's messages against its stage's boundaries */
    const device_report_t *r0 = &run->reports[0];
    /* two meshes: its own mesh's pipeline groups ("encoder.pp0", meshes.c) */
    const char *pp_family = !pconfig_hetero(pc) ? "pp"
                            : r0->pp_stage < pc->encoder_pp ? "encoder.pp" : "decoder.pp";
    const coll_family_t *fam = coll_counters_family(&r0->comm, pp_family);
    const coll_tally_t x = fam ? fam->by[COLL_KIND_SEND][COLL_F32] : (coll_tally_t){0, 0, 0, 0, 0};
    int boundaries = 0;
    for (int c = 0; c < pp.v; c++) {
        const int vs = pp_vstage(&pp, r0->pp_stage, c);
        boundaries += (vs < pp.pp * pp.v - 1) + (vs > 0);
    }
    /* between two meshes the last encoder stage's is the bridge's (below) */
    if (pconfig_hetero(pc) && r0->pp_stage == pc->encoder_pp - 1) boundaries--;
    const double seq = (double)cfg.seq_length / (pc->sequence_parallel ? pc->tp : 1) /
                       (pc->cp > 1 ? pc->cp : 1) * cfg.hidden * 4;
    fprintf(f, "  point to point, device 0 (stage %d) per step: %.0f messages, %.3f MB sent; formula: "
               "%d boundaries x m = %d messages, %d sequences x T%s%s x h x 4 B each boundary = %.3f MB\n",
            r0->pp_stage, (double)x.calls / steps, (double)x.sent / steps / MB, boundaries,
            boundaries * pp.m, pc->global_batch / pc->dp, pc->sequence_parallel ? "/tp" : "",
            pc->cp > 1 ? "/cp" : "",
            boundaries * (pc->global_batch / pc->dp) * seq / MB);
    if (pc->encoder_pp) print_bridge(run, &pp, f);
    if (run->trace_path)
        fprintf(f, "  trace: %s (Perfetto or chrome://tracing: one track per device)\n",
                run->trace_path);
}
