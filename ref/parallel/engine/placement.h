/* placement.h - where a layout puts an element (not public API): the
 * engine's helpers behind engine_describe_element and
 * engine_describe_mesh (placement.c, describe_mesh.c). */
#ifndef PARITY_ENGINE_PLACEMENT_H
#define PARITY_ENGINE_PLACEMENT_H

#include <stdio.h>

#include "parity/engine.h"

/* ---- where an element lies, for the divergence report ----------------- */

/* Whether dump tensor t ("what": its name after "step<s>.") is a batch
 * tensor [B, ...] (activations, masks, unit-input gradients, logits,
 * inputs, labels). */
int engine_is_batch(const st_tensor_t *t, const char *what);
/* engine_device_name with sub-axes after a ';' (sub may be NULL or ""). */
void engine_device_name_sub(const pconfig_t *pc, int rank, const char *sub, char *buf, size_t cap);
/* The chunk (virtual pipeline stage of its stage) holding unit `unit`. */
int engine_unit_chunk(const pp_plan_t *pp, int unit);

/* Element `flat` of a batch tensor: its sequence, the data-parallel rank
 * that holds it, the microbatch, its position and the context-parallel
 * rank holding it, its unit and stage, and the device the layout gives it
 * (tensor-parallel rank 0's). */
typedef struct {
    int seq, dp_rank, micro, nmicro, msize; /* microbatch `micro` of nmicro, msize sequences */
    int pos;        /* position along T, -1 if none (or cut by head: Ulysses) */
    int head;       /* the head of a Ulysses [B, H, T, T] tensor, else -1 */
    int cp_rank, unit, stage, device;
} engine_batch_at_t;
void engine_batch_at(const engine_placement_t *pl, const st_tensor_t *t, uint64_t flat, engine_batch_at_t *b);

/* Element `flat` of a parameter-shaped tensor: table entry i, its unit
 * and stage, the tensor-parallel rank tr whose block holds it (element
 * `local` there), bucket b's piece k ([lo, hi)) of N gradient-group
 * ranks under ZeRO-z, and the owner's world rank. tied: the word
 * embedding shared by the first and the last stage. 0, -1 for an
 * unknown name, -2 when a table cannot be built. */
typedef struct {
    int i, unit, stage, tied, tr, b, k, N, z, owner;
    size_t local, lo, hi;
} engine_param_at_t;
int engine_param_at(const engine_placement_t *pl, const char *pname, uint64_t flat, engine_param_at_t *o);

#endif
