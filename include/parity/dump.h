/* dump.h - what `parity train --dump` writes, and the golden digests.
 *
 * A dump is a .safetensors file (format "parity-dump-1") with the
 * initial parameters and, for each chosen step s:
 *   step{s}.input_ids, step{s}.labels     I32 [B,T]
 *   step{s}.logits                        F32 [B,T,V]
 *   step{s}.loss, .lr, .grad_norm         F32 [1] (grad_norm before clipping)
 *   step{s}.act.<checkpoint>              F32 [B,T,...] (MODEL.md names)
 *   step{s}.mask.<site>                   U8, 1 = kept (only when p > 0)
 *   step{s}.grad.<param>                  F32, rounded, before clipping
 *   step{s}.param.<param>                 F32, after the update
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

typedef struct dump dump_t;

/* What a dump keeps: the tensors' bytes (for dump_save and dump_writer),
 * their SHA-256 digests (for dump_write_digests), or both. */
enum { DUMP_TENSORS = 1, DUMP_DIGESTS = 2 };
dump_t *dump_new(const gpt_t *g, unsigned what);
void    dump_free(dump_t *d);
/* init.<param> from the model's current parameters. */
int     dump_add_init(dump_t *d, const gpt_t *g, perr_t *err);
/* The observer to pass to gpt_train_step for a dumped step. */
void    dump_begin_step(dump_t *d, int64_t step, gpt_observer_t *obs);
/* After gpt_train_step: the collected batch tensors, loss, lr, grad_norm,
 * gradients (seen through the observer) and the updated parameters. */
int     dump_end_step(dump_t *d, const gpt_t *g, const gpt_step_stats_t *st, perr_t *err);
int     dump_set_metadata(dump_t *d, const char *key, const char *value, perr_t *err);
int     dump_save(const dump_t *d, const char *path, perr_t *err);
int     dump_write_digests(const dump_t *d, const char *path, perr_t *err);
/* Blocks that several replicas report (an activation every tensor-parallel
 * rank holds whole) are compared, not overwritten. A collector names the
 * device whose views arrive next with dump_set_writer; dump_replica_diff
 * gives the first disagreement: 1 and *out, or 0. */
typedef struct {
    const char *name;   /* "step<s>.<tensor>" (valid while the dump lives) */
    int64_t flat;       /* element of the global tensor */
    int device, taken;  /* the device whose copy differs; the one the dump holds */
    float got, want;    /* their values (bytes and integers as numbers) */
} dump_replica_t;
void dump_set_writer(dump_t *d, int device);
int  dump_replica_diff(const dump_t *d, dump_replica_t *out);
/* Tensors added so far. */
int     dump_count(const dump_t *d);
/* The collected tensors (a dump made with DUMP_TENSORS), for comparing two
 * runs in memory (check.h). */
const st_writer_t *dump_writer(const dump_t *d);

#endif
