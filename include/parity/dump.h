/* dump.h - what `parity train --dump` writes, and the golden digests.
 *
 * A dump is a .safetensors file (format "parity-dump-1") with the
 * initial parameters and, for each chosen step s:
 *   step{s}.input_ids, step{s}.labels     I32 [B,T]
 *   step{s}.logits                        F32 [B,T,V]
 *   step{s}.loss, .lr, .grad_norm         F32 [1] (grad_norm before clipping)
 *   step{s}.act.<checkpoint>              F32 [B,T,...] (MODEL.md names)
 *   step{s}.mask.<site>                   U8, 1 = kept (only when p > 0)
 *   step{s}.grad_input.<unit>             F32 [B,T,C] the gradient of the loss with
 *                                         respect to a unit's input ("layers.<l>",
 *                                         "head"): where a backward bug begins
 *   step{s}.grad.<param>                  F32, rounded, before clipping
 *   step{s}.param.<param>                 F32, after the update
 *   step{s}.exp_avg.<param>, .exp_avg_sq.<param>   F32, AdamW's m and v after it
 *   step{s}.adam_t                        I32 [1] AdamW's step count
 * and __metadata__ {config: the model+training config JSON, format}.
 *
 * The digest list is one line per tensor, "sha256-hex  name", sorted by
 * name: the SHA-256 of the tensor's raw little-endian bytes. golden/
 * keeps these lists; any machine can check itself against them.
 */
#ifndef PARITY_DUMP_H
#define PARITY_DUMP_H

#include <stdint.h>

#include "parity/error.h"
#include "parity/model.h"
#include "parity/safetensors.h"

typedef struct dump dump_t;

/* What a dump keeps: the tensors' bytes (for dump_save and dump_writer),
 * their SHA-256 digests (for dump_write_digests), or both; with
 * DUMP_SOURCES (and DUMP_TENSORS) also the device that wrote each
 * element of a tensor (dump_sources_at), which the checker reads for
 * coverage (an element nobody wrote) and to name the device that
 * produced a divergent element. */
enum { DUMP_TENSORS = 1, DUMP_DIGESTS = 2, DUMP_SOURCES = 4 };
dump_t *dump_new(const gpt_t *g, unsigned what);
void    dump_free(dump_t *d);
/* init.<param> from the model's current parameters. */
int     dump_add_init(dump_t *d, const gpt_t *g, perr_t *err);
/* The observer to pass to gpt_train_step for a dumped step. */
void    dump_begin_step(dump_t *d, int64_t step, gpt_observer_t *obs);
/* After gpt_train_step: the collected batch tensors, loss, lr, grad_norm,
 * gradients (seen through the observer) and the updated parameters. */
int     dump_end_step(dump_t *d, const gpt_t *g, const gpt_step_stats_t *st, perr_t *err);
/* One step of the one-device golden run (gpt_train_step on data),
 * observed by dump (or NULL): `parity train`'s, `parity check`'s and the
 * oracle's one golden step path. 0, or -1 when the dump failed. */
struct corpus;
int     dump_golden_step(gpt_t *g, const struct corpus *data, int64_t step, dump_t *d,
                         gpt_step_stats_t *st, perr_t *err);
int     dump_set_metadata(dump_t *d, const char *key, const char *value, perr_t *err);
int     dump_save(const dump_t *d, const char *path, perr_t *err);
int     dump_write_digests(const dump_t *d, const char *path, perr_t *err);
/* Blocks that several replicas report (an activation every tensor-parallel
 * rank holds whole) are compared, not overwritten. A collector names the
 * device whose views arrive next with dump_set_writer (the writer the
 * sources record; 0 by default); dump_replica_diffs gives one record per
 * batch tensor whose replicas disagree (its lowest element), *n of them. */
typedef struct {
    const char *name;   /* "step<s>.<tensor>" (valid while the dump lives) */
    int64_t flat;       /* element of the global tensor */
    int device, taken;  /* the device whose copy differs; the one the dump holds */
    float got, want;    /* their values (bytes and integers as numbers) */
} dump_replica_t;
void dump_set_writer(dump_t *d, int device);
/* The step's batch tensors collected so far, with the device that wrote
 * each element, as bytes (malloc'd into *out): what another process's
 * devices contributed, for dump_batch_import in the process that ends
 * the step (a run across processes, runtime.h). 0, or -1 with a message. */
int dump_batch_export(const dump_t *d, unsigned char **out, size_t *len, perr_t *err);
/* Places an export's elements as if their devices had written them here
 * (replicas compared, the lowest device's copy kept). 0, or -1 with a
 * message when the bytes are not an export of this model's dump. */
int dump_batch_import(dump_t *d, const unsigned char *in, size_t len, perr_t *err);
const dump_replica_t *dump_replica_diffs(const dump_t *d, int *n);
/* The writers of the parameter-shaped tensors (gradients, parameters,
 * AdamW's m and v) of the step the next dump_end_step emits: one int32 per
 * element of the global parameter table each, -1 where no device wrote;
 * NULL members: unknown. The pointers are read by that dump_end_step. */
typedef struct {
    const int32_t *grad, *param, *exp_avg, *exp_avg_sq;
} dump_sources_t;
void dump_set_sources(dump_t *d, const dump_sources_t *src);
/* DUMP_SOURCES: the writer of each element of tensor number `index` (the
 * dump_writer's order), or NULL when not known (init.*, or no sources). */
const int32_t *dump_sources_at(const dump_t *d, size_t index);
/* A sink takes each tensor as it is made (t: name, dtype, shape; data;
 * who: the writer of each element, or NULL), in place of keeping it: a
 * check compares a step's tensors as they come and keeps none of them.
 * The dump then saves, digests and keeps nothing. Non-zero stops the step
 * with err set. */
typedef int (*dump_sink_fn)(void *ctx, const st_tensor_t *t, const void *data, const int32_t *who,
                            perr_t *err);
void dump_set_sink(dump_t *d, dump_sink_fn sink, void *ctx);
/* Tensors added so far. */
int     dump_count(const dump_t *d);
/* The collected tensors (a dump made with DUMP_TENSORS), for comparing two
 * runs in memory (check.h). */
const st_writer_t *dump_writer(const dump_t *d);

#endif
