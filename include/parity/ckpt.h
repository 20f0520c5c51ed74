/* ckpt.h - layout-free checkpoints: `parity train --save DIR`, `--load DIR`.
 *
 * A checkpoint holds the GLOBAL tensors, whole, named and ordered as the
 * golden run's parameter table names them, whatever layout wrote it; a
 * layout that loads it cuts its own blocks and shards from them through
 * the placements (DESIGN.md §2, §6). So a checkpoint written at
 * tp=4 x dp=2 under ZeRO-1 holds the golden run's tensors at the same
 * step (the whole file is byte for byte the golden one when the config
 * and backend are the same: tests/cli/test_ckpt.sh), and any layout can
 * continue from it with the golden bits: data, dropout masks and the
 * learning rate are keyed by the global step (I3), which the checkpoint
 * carries.
 *
 * On disk: a directory DIR holding one file, DIR/model.safetensors
 * (safetensors.h), written all or nothing (fileio.h), so a failed save
 * leaves the previous checkpoint intact and saving into the DIR one
 * loaded from is safe:
 *   param.<name>    F32 [global shape]  parameters after the last step run
 *   adam_m.<name>   F32 [global shape]  AdamW first moments
 *   adam_v.<name>   F32 [global shape]  AdamW second moments
 *                   (adamw8bit: dequantized, code x block absmax, which is
 *                   the whole 8-bit state, model.h; loading checks that
 *                   every value is one)
 * in that order, each group in table order, and __metadata__:
 *   format   "parity-ckpt-2"
 *   config   the model and training config JSON (as dumps store it)
 *   step     the next step to run (decimal): a run of N steps from step 0
 *            saves N
 *   adam_t   AdamW steps taken (decimal), for the bias correction
 *   backend  the tile backend that computed it: openblas, portable or
 *            unknown (information: another backend continues the run,
 *            with that backend's bits)
 *   loss_scaler  --fp16 runs only, and always there: "scale S growth G
 *            hysteresis_left H skipped K" (S with 9 significant digits,
 *            which an fp32 survives exactly); adam_t + K = step
 *   sha256   SHA-256 of the metadata and the data: each of the keys
 *            above in that order, its value, each followed by a 0 byte,
 *            then every tensor's bytes in the order above. A bit flipped
 *            anywhere, in a step count, the config's name or a tensor,
 *            which the format's own checks cannot see, is refused on load
 * and nothing else. Loading checks, before the digest (so a message names
 * the field): the keys, the config against the run's (any field but
 * "name" and "micro_batch", which leave the bits alone: exact sums make
 * any microbatch split give the same ones), step in [0, CKPT_MAX_STEP],
 * adam_t equal to step less the loss scaler's skipped steps (parity's
 * AdamW updates once every step the scaler does not skip, so any other
 * count is not a file parity wrote), the backend's name, and each tensor's presence and
 * shape before the state is allocated. The AdamW bias correction
 * multiplies beta adam_t times in fp64 (adamw.c; an O(log t) power would
 * round differently), so the count is bounded twice: by CKPT_MAX_STEP and
 * the step here (2^31 - 2 with step 2 was a hang: 6.5 s a step at 1e8),
 * and in adamw.c, whose loop stops, with the same bits, once beta^i is
 * below 2^-26 (351 products at beta 0.95). Only a consistent file with a
 * count near 2^30 and a beta within about 1e-7 of 1 is still slow: as
 * slow as the run that would have written it.
 * Format 1 ("parity-ckpt-1", before the digest covered the metadata) is
 * still read, with the same checks and its own digest, of the tensors
 * only (its step and adam_t must still agree, so one flipped digit is
 * refused); ckpt_save writes format 2, so a resumed run saves the new one.
 */
#ifndef PARITY_CKPT_H
#define PARITY_CKPT_H

#include <stddef.h>
#include <stdint.h>

#include "parity/error.h"
#include "parity/model.h"

#define CKPT_FORMAT "parity-ckpt-2"
#define CKPT_FORMAT_V1 "parity-ckpt-1" /* read, never written: its digest is the tensors' */
/* The largest step (and AdamW count) a checkpoint may hold: the count is
 * an int that a resumed run still increments. */
#define CKPT_MAX_STEP ((int64_t)1 << 30)
#define CKPT_FILE "model.safetensors"

/* fp16's dynamic loss scaler (Megatron saves it as the optimizer state
 * dict's `grad_scaler`): the scale, the clean steps since it last grew,
 * the overflows it still tolerates before it halves, the steps skipped. */
typedef struct ckpt_scaler {
    float scale;
    int growth, hysteresis_left;
    int64_t skipped;
} ckpt_scaler_t;

/* A training state in global tensors: what a checkpoint holds. */
typedef struct ckpt_state {
    model_config_t cfg;
    int64_t step;         /* the next step to run */
    int adam_t;           /* AdamW steps taken: step minus the scaler's skipped steps */
    ckpt_scaler_t scaler; /* fp16 only (zero otherwise) */
    size_t total;         /* elements per vector: the golden table's total */
    float *params, *adam_m, *adam_v; /* [total] each, at the golden table's offsets */
} ckpt_state_t;

/* Zeroed vectors for cfg's golden table. */
int  ckpt_state_alloc(ckpt_state_t *s, const model_config_t *cfg, perr_t *err);
void ckpt_state_free(ckpt_state_t *s);

/* Before a run, creating nothing: `dir` exists as a directory whose
 * model.safetensors may be replaced, or does not exist and its parent
 * is a writable directory. `flag` names it in messages ("--save"). */
int  ckpt_check_save_dir(const char *dir, const char *flag, perr_t *err);
/* The path of the checkpoint file in dir (malloc'd; NULL when out of memory). */
char *ckpt_file_path(const char *dir);
/* Writes s into dir (created if missing; removed again if this call
 * created it and the write failed). */
int  ckpt_save(const char *dir, const ckpt_state_t *s, const char *backend, perr_t *err);
/* Reads dir into s (allocated here; ckpt_state_free) for a run of cfg:
 * refuses a missing or corrupt file, another format, a config that
 * differs (naming the field), a missing, extra or misshapen tensor, a
 * digest that does not match. *backend (if not NULL) gets the saving
 * run's backend, malloc'd. */
int  ckpt_load(const char *dir, const model_config_t *cfg, ckpt_state_t *s, char **backend,
               perr_t *err);
/* The same for the checkpoint file itself; `who` starts every message
 * (ckpt_load's is "--load 'DIR'"). */
int  ckpt_load_file(const char *file, const char *who, const model_config_t *cfg,
                    ckpt_state_t *s, char **backend, perr_t *err);
/* The golden model (gpt_new: the whole table, with optimizer state) from
 * a state (the same config), and a state that views the model's own
 * vectors, for saving (do not ckpt_state_free it). Under adamw8bit the
 * moments are dequantized into scratch[0] and scratch[1] (malloc'd; the
 * caller frees both; adam_m or adam_v NULL when out of memory), else
 * nothing is copied and they are NULL. */
void ckpt_state_to_gpt(const ckpt_state_t *s, gpt_t *g);
ckpt_state_t ckpt_state_view_gpt(const gpt_t *g, int64_t next_step, float *scratch[2]);
/* Host bytes a save (the state and the file built in memory) or a load
 * (the file read whole, and the state) holds: for memest.h's host line. */
size_t ckpt_host_bytes(const model_config_t *cfg, int load, int save);

#endif
