/* memest.h - every device's memory, estimated before anything is allocated.
 *
 * A layout that cannot fit should be refused in milliseconds with the
 * figures, not found out after minutes of zero-filling arenas on the way
 * to the OOM killer. The estimate is computed from the same size tables
 * the allocations use (gpt_mem_bytes for a replica, the data-parallel
 * plan for shards and collective buffers), so it is what the arenas will
 * count: tests/unit/test_memest.c holds it at or above every category's
 * measured high-water mark and close to it.
 *
 *   memest_t m;
 *   if (memest_layout(&cfg, &pc, &m, &err) || memest_check(&m, arena_bytes, &err))
 *       refuse(err.msg);          // before any device starts
 *   memest_print(&m, stdout);
 *
 * Not counted: per-device host bookkeeping outside the arena (each
 * replica's contraction workspace, under a megabyte; parameter tables),
 * the exact sums' rare fallback accumulators (data-dependent), and
 * allocator overhead (64 bytes an arena allocation).
 */
#ifndef PARITY_MEMEST_H
#define PARITY_MEMEST_H

#include <stddef.h>
#include <stdio.h>

#include "parity/error.h"
#include "parity/model.h"
#include "parity/pconfig.h"

/* One device, by arena category (runtime.h's mem_cat_t; grads + open_sums
 * is the arena's grads category). */
typedef struct {
    size_t params;      /* parameters or the parameter shard; ZeRO-3: + units gathered at once */
    size_t grads;       /* rounded gradients, or the gradient shard */
    size_t open_sums;   /* the open exact gradient sums (8 bytes an element, I2) */
    size_t optimizer;   /* AdamW m and v, or their shards */
    size_t activations; /* one microbatch's activations and backward scratch */
    size_t comm;        /* exact sums being reduced, all-gather buffers */
    size_t workspace;   /* the arena's workspace category */
    size_t total;       /* the sum: what must fit --arena-mb */
    size_t host;        /* cpu offload: the optimizer shard in the rank's host arena (not in
                           total: it is not the device's; the run's host figure counts it) */
} memest_dev_t;

typedef struct {
    int devices;
    memest_dev_t max_dev;  /* the largest device; pipeline stages differ: each
                              category's largest over the stages */
    size_t all_devices;    /* the sum over devices of their totals */
    size_t host_shared;    /* run-wide host buffers outside the devices: the
                              reassembly of global tensors, dumps, a golden
                              model kept beside the layout */
} memest_t;

/* The estimate of a run: pc a validated layout, or NULL for the golden
 * run (one device, gpt_new: the model's own micro_batch, no collective
 * buffers). 0, or -1 with a message. Fast: nothing is allocated but
 * tables. */
/* d->total := the sum of d's categories. */
void memest_sum(memest_dev_t *d);
int  memest_layout(const model_config_t *cfg, const pconfig_t *pc, memest_t *out, perr_t *err);

/* Adds what a dump (dump.h) holds on the host while it collects `steps`
 * steps: what = DUMP_TENSORS and/or DUMP_DIGESTS, as dump_new. */
void memest_add_dump(memest_t *m, const model_config_t *cfg, unsigned what, int steps);
/* The bytes of the tensors a DUMP_TENSORS dump of `steps` steps keeps
 * (tests compare it with a real dump). */
size_t memest_dump_tensor_bytes(const model_config_t *cfg, int steps);
/* A check that streams (check.h check_spill): the golden run alone (its
 * model, one step's dump), then the layout run (m: its devices and
 * engine buffers) with the collection's staging; the golden step it
 * reads back is mapped, page cache, not counted. Adds to m so that its
 * total is the larger of the two. */
void memest_add_check_stream(memest_t *m, const memest_t *golden, const model_config_t *cfg);

/* 0 when the run fits; else -1 with a message giving the estimate:
 *  - the largest device exceeds arena_bytes (0 = unlimited): the message
 *    names --arena-mb and the categories;
 *  - all devices plus the host buffers exceed the memory available: the
 *    message gives both figures. Available is MemAvailable from
 *    /proc/meminfo, or PARITY_MEM_AVAILABLE_MB when set (tests; a
 *    machine with memory reserved for others); unknown = no check. */
int  memest_check(const memest_t *m, size_t arena_bytes, perr_t *err);
/* The bytes memest_check compares against; 0 when unknown. A
 * /proc/meminfo without MemAvailable (kernels before 3.14) gives MemFree +
 * Cached, with a note on stderr. */
size_t memest_available(void);
/* The same from a meminfo file (memest_available reads /proc/meminfo). */
size_t memest_meminfo_available(const char *path);
/* PARITY_MEM_AVAILABLE_MB, when set, must be a number of MB in
 * [MEMEST_ENV_MIN_MB, MEMEST_ENV_MAX_MB]: 0, "abc" or 1e300 would switch
 * the check off or overflow. 0, or -1 with a message naming it
 * (memest_check calls it first). */
#define MEMEST_ENV_MIN_MB 1.0
#define MEMEST_ENV_MAX_MB 1e9
int memest_env_check(perr_t *err);

/* Two lines: the largest device by category, then all devices and the
 * host buffers. */
void memest_print(const memest_t *m, FILE *f);

#endif
