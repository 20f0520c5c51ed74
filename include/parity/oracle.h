/* oracle.h - parity as a correctness oracle inside another project's tests.
 *
 * A backend (a PyTorch tensor-parallel implementation, a CUDA kernel, a
 * new framework) runs a step of a model parity knows; the oracle runs
 * the same step on one device (the golden run) and says where the
 * backend's tensors first leave the golden ones:
 *
 *     perr_t err;
 *     const char *args[] = {"--model", "gpt-micro", "--steps", "2"};
 *     oracle_t *o = oracle_open(4, args, &err);           // or oracle_open_dump(path)
 *     oracle_run_golden(o, 2, &err);
 *     // each rank's shard, with its DTensor-like placement:
 *     oracle_placement_t pl = {.ndim = 1, .mesh = {2}, .coord = {rank},
 *                              .shard = {0}};              // Shard(0) over a mesh of 2
 *     oracle_put(o, "grad.layers.0.mlp.dense_h_to_4h.weight", 0, ST_F32, 2, shape, data,
 *                &pl, -1, &err);
 *     oracle_divergence_t d;
 *     if (oracle_compare(o, NULL, &d, &err) == 1) puts(d.report);
 *     oracle_close(o);
 *
 * Names are the dump's (dump.h): "act.layers.0.mlp.dense_4h_to_h.output",
 * "grad.<param>", "param.<param>", "loss", ... of step s, i.e. golden
 * tensor "step<s>.<name>"; step -1 takes the full name ("init.<param>").
 *
 * Placements follow DTensor: per mesh dimension Shard(axis) or Replicate;
 * a sharded axis is cut as torch.chunk cuts it (ceil(n/k) elements a
 * piece, the last ones shorter or empty), mesh dimensions that shard the
 * same axis nest in order. The oracle reassembles every tensor a backend
 * put into its global shape, remembering which rank supplied each
 * element. Replicated copies are each compared (a drifting replica is a
 * divergence, reported at its rank), and an element no rank supplied is
 * a divergence whatever the golden value.
 *
 * oracle_compare walks the tensors the backend put in the golden run's
 * execution order (check.h: inputs, the forward pass, the loss, the
 * gradients in backward order, the optimizer) and returns the first
 * divergence. Tensors the backend never put are not compared: a backend
 * checks what it has. Bit-exact by default; a tolerance in ULPs can be
 * given for backends that do not compute exact sums (a float32 or
 * float64 PyTorch model rounds its sums in its own order, so its bits
 * cannot be parity's; the tolerance says how far is still "the same
 * mathematics"). Nothing here is parallel or shared between threads: one
 * oracle, one thread at a time.
 *
 * Every function that can fail on input returns -1 with a message in err
 * (error.h) naming the tensor, flag or field; none aborts on bad input.
 */
#ifndef PARITY_ORACLE_H
#define PARITY_ORACLE_H

#include <stdint.h>

#include "parity/error.h"
#include "parity/safetensors.h"

typedef struct oracle oracle_t;

/* A model from `parity train`'s model flags (model_flags.h): --model NAME
 * (a built-in) or --model FILE.json (a model config, the JSON a dump
 * stores), the overrides (--num-layers N, --lr X, ...), --steps N (the
 * default of oracle_run_golden), --backend openblas|portable (the tile
 * backend, process-wide: PARITY_BACKEND), --data FILE (the training
 * text; default: $PARITY_DATA, then ref/data/corpus.txt found as the
 * program finds it, then share/parity/corpus.txt beside the installed
 * library). The golden run starts from the seeded init, or from
 * --load DIR (a checkpoint, read as parity train --load reads it: its
 * parameters, AdamW state and step S; the golden steps are then the
 * global steps S, S+1, ..., named step<S>. as parity train --load --dump
 * names them) or --weights FILE (parameters in any scheme of names.h,
 * --names SCHEME or the file's parity.names or detected; fresh AdamW
 * state, step 0); init.<param> holds what it starts from. Layout flags
 * are refused: the golden run is one device, the layout is the
 * backend's. NULL with a message on any error. */
oracle_t *oracle_open(int argc, const char *const *argv, perr_t *err);
/* A golden dump written by `parity train ... --dump FILE`: its tensors
 * are the golden ones (nothing runs; oracle_run_golden only checks that
 * the steps asked for are in it). Its "config" must describe its
 * tensors: every parameter of the config's table is there as
 * init.<param>, and every init./step<s>.{grad,param,exp_avg,exp_avg_sq}.
 * tensor is a parameter of the table, F32 of its shape; the first
 * mismatch is named. */
oracle_t *oracle_open_dump(const char *path, perr_t *err);
void oracle_close(oracle_t *o);

/* Runs golden steps 0 .. steps-1 in memory, keeping every tensor the
 * dump would hold (steps 0: --steps, default 1; negative: an error).
 * At most 1000000 steps (--steps' bound), and only as many as the
 * memory estimate (memest.h: the model, and every step's golden tensors
 * kept) says fit in the memory available; more are refused with the
 * estimate before anything runs. Runs once; calling again with the same
 * count is a no-op, another is an error. */
int oracle_run_golden(oracle_t *o, int steps, perr_t *err);
/* The model's config as JSON (the dump's "config"; valid while o lives). */
const char *oracle_config_json(const oracle_t *o);

/* The golden tensors: their count, the i-th (dump order), and one by its
 * full name ("step0.loss"). The data stays valid while o lives. */
int oracle_count(const oracle_t *o);
int oracle_tensor_at(const oracle_t *o, int i, st_tensor_t *t, const void **data);
int oracle_golden(const oracle_t *o, const char *name, st_tensor_t *t, const void **data,
                  perr_t *err);

/* Where a backend's block of a tensor lives (DTensor's placements). */
#define ORACLE_MAX_MESH 4
enum { ORACLE_REPLICATE = -1 };
typedef struct {
    int ndim;                    /* mesh dimensions; 0: the block is the global tensor */
    int mesh[ORACLE_MAX_MESH];   /* the mesh's size along each */
    int coord[ORACLE_MAX_MESH];  /* this rank's coordinate along each */
    int shard[ORACLE_MAX_MESH];  /* the tensor axis it shards (Shard(axis)), or
                                    ORACLE_REPLICATE */
} oracle_placement_t;

/* torch.chunk's cut of an axis of n elements into `parts` (>= 1): piece
 * `index` (0 <= index < parts) starts at *start and holds *len elements
 * (ceil(n/parts) a piece, the last ones shorter or empty). The oracle's
 * and `parity judge`'s one cut. */
void oracle_chunk(int64_t n, int parts, int index, int64_t *start, int64_t *len);

/* The row-major rank of pl's coordinates (DeviceMesh(arange(n)).view(mesh)),
 * or -1 when pl is NULL or no placement (mesh dimensions 0..ORACLE_MAX_MESH,
 * sizes >= 1 whose product is at most INT_MAX, coordinates inside them). */
int oracle_rank_of(const oracle_placement_t *pl);

/* One block of tensor `name` of step `step` (dtype, local shape, data:
 * row-major, copied) from rank `rank` (-1: oracle_rank_of(pl); below -1
 * refused) at
 * placement pl (NULL: the global tensor). The dtype and the shape the
 * placement gives must be the golden tensor's; a rank may put a block
 * once. */
int oracle_put(oracle_t *o, const char *name, int64_t step, st_dtype_t dtype, int ndim,
               const int64_t *shape, const void *data, const oracle_placement_t *pl, int rank,
               perr_t *err);
/* Forgets every block put (a new step of the backend to compare). */
void oracle_clear(oracle_t *o);

/* The reassembled global tensor of a full name: its values (for each
 * element the lowest rank's copy) and who[flat], the rank that supplied
 * it (-1: none). Valid until the next oracle_assembled, clear or close. */
int oracle_assembled(oracle_t *o, const char *name, const void **values, const int32_t **who,
                     perr_t *err);

/* How far a float element may be from the golden one. max_ulp 0 is
 * bit-exact (the default, for exact backends). ORACLE_ULP_ELEMENT
 * counts ULPs of the golden element: right for results that are one
 * rounding of an exact value. ORACLE_ULP_TENSOR counts ULPs of the
 * tensor's largest golden magnitude: a float backend's sum of n terms
 * is off by about n roundings of its terms, which can be millions of
 * ULPs of an element that nearly cancels, yet tiny against the tensor.
 * Integers (token ids, masks, step counts) are always exact, and an
 * infinity matches only itself (it is one ULP past the largest float,
 * but an overflow is not a rounding). max_ulp above ORACLE_MAX_ULP (a
 * negative count cast to unsigned) is refused, and so is a tensor-scale
 * tolerance that is no finite distance. */
enum { ORACLE_ULP_ELEMENT = 0, ORACLE_ULP_TENSOR = 1 };
#define ORACLE_MAX_ULP ((uint64_t)INT64_MAX)
typedef struct {
    uint64_t max_ulp;
    int scale; /* ORACLE_ULP_* */
} oracle_tolerance_t;

/* The spacing of floats at the largest finite magnitude of numel F32 (or
 * F64) values: ORACLE_ULP_TENSOR's unit, and `parity judge`'s floor of
 * every envelope. */
double oracle_tensor_ulp(st_dtype_t dt, const void *data, uint64_t numel);

enum { ORACLE_DIFF_VALUE = 1, ORACLE_DIFF_MISSING = 2 };
typedef struct {
    int kind;               /* 0: none; ORACLE_DIFF_VALUE, ORACLE_DIFF_MISSING (no rank
                               supplied the element) */
    char tensor[160];       /* the full name, "step1.act.layers.0.mlp.dense_4h_to_h.output" */
    int64_t step;           /* -1 for init.* */
    uint64_t flat;          /* the element in the global tensor */
    int ndim;
    int64_t index[ST_MAX_DIMS]; /* ... by axis */
    double got, want;       /* the values (integers as numbers); got 0 when missing */
    uint64_t got_bits, want_bits;
    uint64_t ulp;           /* ULP distance of got and want (floats; 0 otherwise) */
    int rank;               /* the rank that supplied the element (-1 when missing) */
    int copies, bad_copies; /* ranks that supplied it; of which out of tolerance */
    uint64_t ndiff, numel;  /* this tensor: elements out of tolerance or missing, all */
    uint64_t max_ulp;       /* this tensor: the largest ULP distance of a supplied copy */
    int compared;           /* tensors compared (all, not only up to this one) */
    char report[1024];      /* one line saying all of the above */
} oracle_divergence_t;

/* Compares what was put (tol NULL: bit-exact): 0 when every tensor put
 * matches, 1 with the first divergence in *out, -1 on error (nothing
 * put, a bad tolerance). out->compared: the tensors compared (0 and 1). */
int oracle_compare(oracle_t *o, const oracle_tolerance_t *tol, oracle_divergence_t *out,
                   perr_t *err);

#endif
