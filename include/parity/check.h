/* check.h - the equivalence checker: a layout's tensors against the
 * golden run's, bit for bit.
 *
 * Both runs collect the same named global tensors (dump.h): a layout
 * reassembles its shards first, using each tensor's placement. The
 * checker walks the golden tensors in execution order (inputs, then the
 * forward pass layer by layer, logits, loss, the gradients in backward
 * order, the norm, and the updated parameters), compares each with memcmp,
 * and reports the first divergence: tensor, step, microbatch, element
 * (its global index, flat and by axis), both values, the ULP distance,
 * the device that produced the element on every axis of the mesh, and the
 * mode whose reduction touched it last (the layout answers those through
 * check_owner_t, so the checker itself knows no layout; check.c's header
 * shows the report).
 *
 * Coverage: where the layout tells who wrote each element (sources), an
 * element that no device wrote is a divergence even when its (zero)
 * value happens to equal the golden one.
 *
 * A layout holds some tensors several times (replicas). Its collection
 * memcmp's every replica against the copy it dumps and hands the
 * disagreements over as check_replica_t: a replica that drifts is a
 * divergence even when the dumped copy equals the golden one, reported
 * in the same execution order and naming the device.
 */
#ifndef PARITY_CHECK_H
#define PARITY_CHECK_H

#include <stdint.h>
#include <stdio.h>

#include "parity/error.h"
#include "parity/safetensors.h"

/* A replicated tensor whose copies disagree inside the layout run. */
typedef struct {
    const char *name;  /* the dump's tensor name */
    uint64_t flat;     /* the first element at which a replica differs */
    int device;        /* the (lowest) device whose replica differs there */
    int taken;         /* the device whose copy the dump holds */
    int ndiffer;       /* replicas that differ anywhere in the tensor */
    float got, want;   /* the replica's value and the dumped copy's */
} check_replica_t;

/* An element in mesh terms (check_owner_t's mesh), each line of the
 * report as the layout words it. */
typedef struct {
    char device[512];     /* "9 (tp 1, cp 0, ep 0, dp 0, pp 1; vpp chunk 1)" */
    char microbatch[512]; /* "1 of 2 (2 sequences; ...)", "all 2 microbatches of the step ..." */
    char touched[512];    /* the mode whose reduction touched it last: "dp: the exact ..." */
} check_mesh_t;

typedef struct {
    void *ctx;
    /* Describes which device(s) and microbatch produced element `flat` of
     * tensor t (name as in the dump) in the layout run, and in the golden
     * run; may be NULL. */
    void (*describe)(void *ctx, const st_tensor_t *t, uint64_t flat, char *layout_buf,
                     char *golden_buf, size_t cap);
    /* Replica disagreements found while collecting (may be NULL). */
    const check_replica_t *replicas;
    int nreplicas;
    /* The device that wrote each element of the layout run's tensor
     * number `index` (in its writer's order), -1 where no device did; NULL
     * when not tracked. An element no device wrote is a divergence
     * (coverage), whatever its value. May be NULL. */
    const int32_t *(*sources)(void *ctx, size_t index);
    /* A world rank with its grid coordinates, "3 (tp 1, dp 1)" (may be NULL). */
    void (*device_name)(void *ctx, int device, char *buf, size_t cap);
    /* Element `flat` of tensor t in mesh terms: `device` (the one that
     * wrote it; -1 when not known: the one the layout gives it) with its
     * coordinates on every axis and the element's sub-axes, the
     * microbatch, and which mode's reduction touched it last, from the
     * tensor's name and the layout (may be NULL). */
    void (*mesh)(void *ctx, const st_tensor_t *t, uint64_t flat, int device, check_mesh_t *out);
} check_owner_t;

typedef struct {
    int compared;   /* golden tensors looked at */
    int exact;      /* of which bit-exact */
    int missing;    /* absent from the layout run, or of another dtype/shape */
    int replicas;   /* tensors whose replicas disagree in the layout run */
    int unwritten;  /* tensors with an element no device wrote */
    int skipped;    /* of a class left out (check_compare_classes) */
    char first_bad[160]; /* name of the first divergent tensor, "" if none */
} check_result_t;

/* Returns 0 when every golden tensor is present and bit-exact; else 1,
 * with the first-divergence report printed to report (may be NULL). */
int check_compare(const st_writer_t *golden, const st_writer_t *got, const check_owner_t *owner,
                  FILE *report, check_result_t *res);

/* Classes of tensors (`parity check --compare act,grad,param,optim`):
 * activations (inputs, labels, activation checkpoints, masks, logits, the
 * loss), gradients (parameter and unit-input gradients, the norm),
 * parameters (initial and updated, the learning rate), and the optimizer
 * state (AdamW's m, v and step count). The default is all of them. */
enum { CHECK_ACTIVATIONS = 1u, CHECK_GRADIENTS = 2u, CHECK_PARAMETERS = 4u, CHECK_OPTIMIZER = 8u,
       CHECK_ALL = 15u };
unsigned check_class_of(const char *name);
/* "act,grad,param,optim" (any non-empty subset, or "all") into CHECK_*
 * bits; -1 with a message naming the word that is none of them. */
int check_parse_classes(const char *list, unsigned *out, perr_t *err);
/* check_compare over the tensors of the given classes only; the others
 * are counted in res->skipped. */
int check_compare_classes(const st_writer_t *golden, const st_writer_t *got,
                          const check_owner_t *owner, unsigned classes, FILE *report,
                          check_result_t *res);

/* The same comparison, one tensor at a time, for a run that keeps no
 * dump (`parity check` without --dump/--digest): memory for the golden
 * tensors' names and a few numbers each, never their elements.
 *   check_stream_golden  every golden tensor's metadata, in golden order
 *   check_stream_seal    after the last one (-1: out of memory)
 *   check_stream_tensor  a layout tensor u (elements ld, writers src or
 *                        NULL) against the golden one of its name (gd):
 *                        coverage, then memcmp; others are ignored
 *   check_stream_finish  the verdict and report of check_compare_classes,
 *                        in execution order, whatever order they came in
 * check_compare_classes is this stream over two writers. */
typedef struct check_stream check_stream_t;
check_stream_t *check_stream_new(unsigned classes); /* NULL: out of memory */
void check_stream_free(check_stream_t *cs);
int  check_stream_golden(check_stream_t *cs, const st_tensor_t *t);
int  check_stream_seal(check_stream_t *cs);
/* Whether a layout tensor of this name is compared (a golden one, of a
 * class asked for). */
int  check_stream_wants(check_stream_t *cs, const char *name);
void check_stream_tensor(check_stream_t *cs, const void *gd, const st_tensor_t *u, const void *ld,
                         const int32_t *src);
int  check_stream_finish(check_stream_t *cs, const check_owner_t *owner, FILE *report,
                         check_result_t *res);

/* The golden run of a check spilled to disk, one safetensors file a step
 * in a fresh $TMPDIR/parity-check-XXXXXX, removed by check_spill_free:
 *   check_spill_add    a golden step's (or the init's) writer, saved
 *   check_spill_seal   after the golden run
 *   check_spill_sink   a dump_sink_fn (dump.h) for the layout run's dump:
 *                      each tensor compared as it is made
 *   check_spill_finish the verdict and report (check_stream_finish) */
typedef struct check_spill check_spill_t;
enum { CHECK_SPILL_INIT = -1, CHECK_SPILL_NONE = -2 }; /* steps are >= 0 */
check_spill_t *check_spill_new(unsigned classes, perr_t *err);
void check_spill_free(check_spill_t *sp);
int  check_spill_add(check_spill_t *sp, int64_t step, const st_writer_t *w, perr_t *err);
int  check_spill_seal(check_spill_t *sp, perr_t *err);
int  check_spill_sink(void *ctx, const st_tensor_t *t, const void *data, const int32_t *who,
                      perr_t *err);
int  check_spill_finish(check_spill_t *sp, const check_owner_t *owner, FILE *report,
                        check_result_t *res);

/* The execution-order sort key of a dump tensor name (exposed for tests). */
void check_exec_key(const char *name, long key[4]);

#endif
