/* check_layout.c - the checker's view of a layout run (check_layout.h). */
#include "parity/check_layout.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void describe(void *ctx, const st_tensor_t *t, uint64_t flat, char *lay, char *gold,
                     size_t cap) {
    const check_layout_t *cl = ctx;
    engine_describe_element(cl->pl, t, flat, lay, cap);
    if (cl->golden_micro > 0 && strstr(lay, "microbatch")) { /* a batch tensor */
        uint64_t seq = flat / (st_numel(t) / (uint64_t)t->shape[0]);
        snprintf(gold, cap, "device 0, microbatch %llu, sequence %llu",
                 (unsigned long long)(seq / (uint64_t)cl->golden_micro), (unsigned long long)seq);
    }
}

static const int32_t *sources(void *ctx, size_t index) {
    const check_layout_t *cl = ctx;
    return dump_sources_at(cl->layout, index);
}

static void device_name(void *ctx, int device, char *buf, size_t cap) {
    const check_layout_t *cl = ctx;
    engine_device_name(&cl->pl->pc, device, buf, cap);
}

static void mesh(void *ctx, const st_tensor_t *t, uint64_t flat, int device, check_mesh_t *out) {
    const check_layout_t *cl = ctx;
    _Static_assert(sizeof out->device == sizeof out->touched &&
                       sizeof out->microbatch == sizeof out->touched, "one cap for the three");
    engine_describe_mesh(cl->pl, t, flat, device, out->device, out->microbatch, out->touched,
                     sizeof out->touched);
}

int check_layout_init(check_layout_t *cl, const engine_placement_t *pl, const engine_run_t *run,
                      const dump_t *layout, int golden_micro, check_owner_t *owner) {
    int nbatch = 0;
    const dump_replica_t *batch = dump_replica_diffs(layout, &nbatch);
    *cl = (check_layout_t){pl, layout, golden_micro, NULL, 0};
    cl->reps = calloc((size_t)(run->n_replica_diffs + nbatch) + 1, sizeof *cl->reps);
    if (!cl->reps) return -1;
    for (int i = 0; i < run->n_replica_diffs; i++) {
        const engine_replica_diff_t *d = &run->replica_diffs[i];
        cl->reps[cl->nreps++] =
            (check_replica_t){d->name, d->flat, d->device, d->taken, d->ndiffer, d->got, d->want};
    }
    for (int i = 0; i < nbatch; i++) /* activations several devices hold, compared by the dump */
        cl->reps[cl->nreps++] = (check_replica_t){batch[i].name, (uint64_t)batch[i].flat,
                                                  batch[i].device, batch[i].taken, 1, batch[i].got,
                                                  batch[i].want};
    *owner = (check_owner_t){cl, describe, cl->reps, cl->nreps, sources, device_name, mesh};
    return 0;
}

void check_layout_free(check_layout_t *cl) {
    free(cl->reps);
    cl->reps = NULL;
}
