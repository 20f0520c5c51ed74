/* check_layout.h - the checker's view of a layout run (check.h's owner)
 * for the one driver (engine.h): which device and microbatch should have
 * produced an element (engine_describe_element), which device did write it
 * (the dump's sources), device names with their grid coordinates, and
 * every replica disagreement that the run's collection (parameter-shaped
 * tensors, scalars) and its dump (batch tensors) found.
 *
 *   check_layout_t cl;
 *   check_owner_t owner;
 *   check_layout_init(&cl, &placement, &run, layout_dump, golden_micro, &owner);
 *   check_compare(golden, dump_writer(layout_dump), &owner, stdout, &res);
 *   check_layout_free(&cl);
 */
#ifndef PARITY_CHECK_LAYOUT_H
#define PARITY_CHECK_LAYOUT_H

#include "parity/check.h"
#include "parity/dump.h"
#include "parity/engine.h"

typedef struct {
    const engine_placement_t *pl;
    const dump_t *layout;
    int golden_micro;        /* the golden run's microbatch (sequences) */
    check_replica_t *reps;   /* the run's and the dump's disagreements */
    int nreps;
} check_layout_t;

/* 0, or -1 when out of memory. run: after engine_train (its replica_diffs);
 * layout: the dump the run collected into. */
int  check_layout_init(check_layout_t *cl, const engine_placement_t *pl, const engine_run_t *run,
                       const dump_t *layout, int golden_micro, check_owner_t *owner);
void check_layout_free(check_layout_t *cl);

#endif
