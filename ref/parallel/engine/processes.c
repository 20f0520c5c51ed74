/* processes.c - the engine's host memory when a run spans processes
 * (the MPI transport, coll.h).
 *
 * With threads, the reassembled tensors, the dump's batch tensors, the
 * scalars every device reports, the pipeline's flush times, the device
 * reports and the replica disagreements all live in one host memory
 * that every device writes its part of. Across processes each process
 * has a copy that only its device writes, so at the points where the
 * engine reads what others wrote, the copies are merged:
 *  - the reassembled tensors of a kind: zeroed at the step's start, each
 *    process writes its elements, OR gives every process the whole
 *    (the writers: the max over -1 and the device that wrote);
 *  - scalars: zeroed rows, one written per process, OR;
 *  - batch tensors: gathered to process 0, whose dump ends the step;
 *  - flush times: the max; reports: zeroed rows, OR; replica
 *    disagreements: gathered to process 0 at the end of the run.
 * With one process every function here is a barrier or nothing.
 */
#include <stdlib.h>
#include <string.h>

#include "model/gpt.h"
#include "engine_internal.h"
#include "parity/dump.h"

static int across(void) { return runtime_run_distributed(); }

void engine_zero_for_merge(engine_shared_t *sh) {
    if (!across()) return;
    for (int k = 0; k < COLLECT_NKINDS; k++)
        for (int p = 0; sh->local[k] && p < sh->nparts; p++)
            memset(sh->local[k][p], 0, engine_part(sh, p).table->total * sizeof(float));
    memset(sh->scalars, 0, (size_t)sh->world * sizeof *sh->scalars);
}

void engine_merge_kind(engine_rank_t *r, collect_kind_t k) {
    engine_shared_t *sh = r->sh;
    coll_barrier(r->world); /* every rank's pieces are in */
    if (!across()) return;
    for (int p = 0; p < sh->nparts; p++) {
        const size_t n = engine_part(sh, p).table->total;
        coll_host_merge(r->world, sh->local[k][p], n * sizeof(float), COLL_MERGE_OR);
        if (sh->src_local[k])
            coll_host_merge(r->world, sh->src_local[k][p], n * sizeof(int32_t), COLL_MERGE_MAX_I32);
    }
}

void engine_note_scalars(engine_rank_t *r, const gpt_step_stats_t *st) {
    float *row = r->sh->scalars[r->device];
    row[0] = st->loss, row[1] = st->lr, row[2] = st->grad_norm;
    row[3] = (float)engine_adam_t(r), row[4] = st->loss_scale;
}

static void take_batch(void *ctx, int process, const void *data, size_t len) {
    engine_shared_t *sh = ctx;
    perr_t err;
    if (dump_batch_import(sh->run->dump, data, len, &err))
        parity_fatal("dp: the batch tensors of MPI process %d: %s", process, err.msg);
}

void engine_merge_step(engine_rank_t *r) {
    engine_shared_t *sh = r->sh;
    coll_barrier(r->world); /* every rank's scalars are in */
    if (!across()) return;
    coll_host_merge(r->world, sh->scalars, (size_t)sh->world * sizeof *sh->scalars, COLL_MERGE_OR);
    unsigned char *mine = NULL;
    size_t len = 0;
    perr_t err;
    if (r->device != 0 && dump_batch_export(sh->run->dump, &mine, &len, &err))
        parity_fatal("dp: %s", err.msg);
    coll_host_gather(r->world, mine, len, take_batch, sh);
    free(mine);
}

void engine_merge_flush(engine_rank_t *r) {
    coll_barrier(r->world);
    if (across()) coll_host_merge(r->world, r->sh->sched_end, (size_t)r->sh->world * sizeof(double),
                                  COLL_MERGE_MAX_F64);
}

static void take_diffs(void *ctx, int process, const void *data, size_t len) {
    (void)process;
    engine_shared_t *sh = ctx;
    const engine_replica_diff_t *d = data;
    for (size_t i = 0; i < len / sizeof *d; i++) engine_record_diff(sh, &d[i]);
}

void engine_merge_run(engine_rank_t *r, device_report_t *reports) {
    engine_shared_t *sh = r->sh;
    if (!across()) return;
    coll_host_merge(r->world, reports, (size_t)sh->world * sizeof *reports, COLL_MERGE_OR);
    coll_host_gather(r->world, sh->diffs, r->device ? (size_t)sh->ndiffs * sizeof *sh->diffs : 0,
                     take_diffs, sh);
}
