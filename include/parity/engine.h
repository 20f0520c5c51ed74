/* engine.h - the one driver every layout runs on, the golden run's one
 * device included: a tp x cp x dp x pp grid of simulated devices
 * (runtime.h), each running its pipeline stage's schedule (pp.h) over
 * the model's units (model.h), reducing gradients exactly over the
 * data-parallel plan's buckets (dp.h), updating its shard with the golden
 * optimizer, and reassembling global tensors for dumps and checkpoints.
 * ref/parallel/engine/ holds it; the modes' folders (dp/, pp/, tp/, cp/)
 * hold their plans and reports, which the engine calls and which never
 * call back (their reports read run_report.h, filled here).
 *
 *   engine_run_t run = {.model = golden, .pc = layout, .steps = 3, ...};
 *   if (engine_train(&run, &err)) ...;
 *   engine_print_report(&run, stdout);
 */
#ifndef PARITY_ENGINE_H
#define PARITY_ENGINE_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "parity/coll.h"
#include "parity/dp.h"
#include "parity/error.h"
#include "parity/memest.h"
#include "parity/model.h"
#include "parity/pconfig.h"
#include "parity/pp.h"
#include "parity/run_report.h"

/* The config a layout's replicas run: the model with the layout's global
 * batch and its largest microbatch (pconfig.h; it need not divide the
 * batch: model_config_validate_replica). */
void engine_replica_config(const model_config_t *model, const pconfig_t *pc, model_config_t *out);
/* The largest rank's device memory (the ranks of a pipeline stage are
 * alike), the sum over every rank (*all) and the run's host buffers,
 * before anything is allocated (memest.h): the replica
 * (gpt_mem_bytes), the shards and collective buffers a rank allocates,
 * and ZeRO-3's largest set of units gathered at once, from the tables the
 * allocations use. */
/* The layout's flags against the model, in one place: the expert
 * degrees need MoE layers (ep dividing the experts), the encoder's
 * degrees an encoder; a flag that cannot apply is refused by name, never
 * ignored. 0, or -1 with the message. */
int  engine_check_model(const model_config_t *model, const pconfig_t *pc, perr_t *err);
int  engine_memest(const model_config_t *model, const pconfig_t *pc, memest_dev_t *dev, size_t *all,
                   size_t *host, perr_t *err);

/* ---- running a layout --------------------------------------------------- */

struct corpus;
struct dump;
struct ckpt_state;

/* A replicated tensor whose copies disagree. Collecting a dump, every
 * device's copy of a replicated tensor (ZeRO 0-2 parameters; DDP's
 * all-gathered gradients; the loss, lr and norm) is memcmp'd against the
 * one the dump takes: a replica that drifts is a divergence even when the
 * dump's copy is right. */
typedef struct {
    char name[160];   /* the dump's name, e.g. step0.param.layers.0.mlp.dense_4h_to_h.weight */
    uint64_t flat;    /* the first element at which some replica differs */
    int device;       /* the lowest device whose replica differs there */
    int taken;        /* the device whose copy the dump holds */
    int ndiffer;      /* replicas that differ anywhere in the tensor */
    float got, want;  /* device's value and the dump's at flat */
} engine_replica_diff_t;


typedef struct {
    model_config_t model;        /* the golden model (its global batch) */
    pconfig_t pc;                /* validated layout */
    int steps;
    const struct corpus *data;
    size_t arena_capacity;       /* per device, 0 = unlimited */
    coll_algo_t algo;
    /* Test-only: reduce gradients with plain fp32 ring sums of rounded
     * local gradients, to prove that the checker catches a real bug; 2:
     * the local gradients rounded to bf16 first (a bf16 gradient reduction
     * without fp32 accumulation) */
    int broken_fp32_sums;
    int broken_fp16_clip_scaled; /* fp16: the norm (and clipping) of still-scaled gradients */
    int broken_fp16_scale_lost;  /* fp16 --load: the loss scaler left at its initial state */
    int broken_tp_fp32_sums;  /* the row-parallel completions in fp32 (Megatron-LM 1736's kind) */
    int broken_tp_vocab_pad;  /* a vocabulary padding that depends on tp (Megatron-LM 1754) */
    int broken_pp_mask_key;   /* dropout masks keyed by a stage's microbatch count (PyTorch 55036) */
    int broken_pp_tied_grad;  /* the tied embedding's gradient skips the embedding group */
    /* a head tied across an encoder mesh (etp < tp): the embedding group
     * sums the copies' local shards element by element, as if the two
     * vocabulary cuts were the same */
    int broken_encdec_tied_cuts;
    int broken_pp_stale_w;    /* split backward: W reads dy where B left it (a stale buffer) */
    int broken_zb_early_reduce; /* split backward + overlap: buckets reduced at B, before W */
    int broken_z3_prefetch_reuse; /* ZeRO-3 prefetch into the running unit's buffer */
    int broken_cp_online_softmax; /* the ring merges blocks with online softmax (flash-style) */
    int broken_cp_causal_ring;    /* the ring takes every block as causal (encoder-decoders) */
    /* the encoder's last stage sends its output to the decoder's first
     * stage of the next data-parallel replica, and the gradient comes back
     * from there (Megatron-LM 5a3b6bcf1f fixed such a mix-up of DP and PP
     * ranks in the encoder-decoder bridge) */
    int broken_encdec_dp_mixup;
    /* the encoder rank combines the gradient copies of the tp/etp decoder
     * ranks it feeds as Megatron did: 1 summed (8af3dae72a: x tp/etp), 2
     * averaged in fp32 (5a3b6bcf1f); 0: one copy, the others checked */
    int broken_encdec_combine;
    unsigned broken_moe;          /* GPT_BROKEN_MOE_* bits: routing bugs of MoE frameworks */
    unsigned broken_tp2d;         /* GPT_BROKEN_TP2D_* bits: Colossal-AI 2-D layers' arithmetic */
    /* adamw8bit's ZeRO shards quantize blocks of their own pieces, from
     * each piece's start, instead of the global tensor's blocks (sharded
     * 8-bit states with a per-shard absmax) */
    int broken_adam8_shard_blocks;
    const char *trace_path;   /* --trace: a Chrome trace-event file of the run, or NULL */
    /* Test-only: 1 + the rank whose parameter replica drifts (one bit of
     * one element flipped after every update; ZeRO 0-2), to prove that
     * collection catches a replica that disagrees; 0 = off. */
    int broken_replica;
    /* Test-only checker controls, ENGINE_BROKEN_* bits (all on device or
     * rank 1): proofs that the checker sees optimizer state, coverage and
     * activation gradients. */
    unsigned broken_check;
    /* Collection: the reassembled global tensors of the dumped steps, in a
     * dump_t made for this model (dump.h), or NULL. */
    struct dump *dump;
    const uint8_t *dump_step;    /* [steps] 1 = collect that step, or NULL = all */
    /* Layout-free checkpoints (ckpt.h). resume: start from these global
     * tensors, cut onto the layout's blocks and shards; the run's steps
     * are then resume->step .. resume->step + steps - 1 (data, masks, the
     * learning rate and dump names follow the global step; stats[] and
     * dump_step[] stay indexed from 0). save: after the last step, the
     * state reassembled into global tensors (vectors allocated by the
     * caller, ckpt_state_alloc). NULL: neither. */
    const struct ckpt_state *resume;
    struct ckpt_state *save;
    /* Stop after the first step whose loss or gradient norm is not
     * finite, as the golden run does: both are all-reduced, so every
     * device sees the same values and all stop after the same step. */
    int stop_nonfinite;
    /* results */
    int steps_run;               /* steps completed: steps, or fewer after a stop */
    gpt_step_stats_t *stats;     /* [steps] or NULL */
    gpt_moe_stats_t *moe_steps;  /* MoE models: [steps] each step's routing statistics over
                                    the whole run (routed/dropped [L][E] allocated by the
                                    caller), or NULL */
    device_report_t *reports;    /* [world] or NULL */
    engine_replica_diff_t *replica_diffs; /* collection: one per disagreeing tensor
                                         (malloc'd, the caller frees), or NULL */
    int n_replica_diffs;
} engine_run_t;

/* ENGINE_BROKEN_ADAM_REPLICA: DDP, device 1 flips one bit of its exp_avg
 * replica after every update. ENGINE_BROKEN_ZERO_SHARD: ZeRO >= 1, data-
 * parallel rank 1 changes one element of its exp_avg_sq shard after the
 * last update. ENGINE_BROKEN_UNWRITTEN: device 1 leaves one element of its
 * gradient piece out of the reassembly. ENGINE_BROKEN_TP_INPUT_GRAD:
 * tensor-parallel rank 1 flips one bit of the last layer's input
 * gradient (GPT_BROKEN_TP_INPUT_GRAD). */
enum { ENGINE_BROKEN_ADAM_REPLICA = 1u, ENGINE_BROKEN_ZERO_SHARD = 2u, ENGINE_BROKEN_UNWRITTEN = 4u,
       ENGINE_BROKEN_TP_INPUT_GRAD = 8u };
/* Trains run->steps steps of the layout; 0, or -1 with a message. */
/* The two meshes of an encoder-decoder layout with an encoder mesh
 * (pconfig_hetero; mesh.h): "encoder" (tp = etp, pp = epp) at world rank
 * 0, "decoder" (tp, the decoder's pp) after it, each on the layout's
 * order, dp, cp and ep. The engine runs on them; --print-layout draws
 * them. */
struct mesh_grid;
int engine_encdec_meshes(struct mesh_grid *G, const pconfig_t *pc, perr_t *err);

int engine_train(engine_run_t *run, perr_t *err);
/* PARITY_OFFLOAD_KILL_AFTER (offload.c's test hook), when set, must be a
 * count >= 1. 0, or -1 with a message naming it. */
int engine_offload_env_check(perr_t *err);
/* nvme offload's place (offload.c): checks --offload-path `dir`, takes
 * its lock (held: refused naming the holder's pid, host and directory;
 * left by a run that died: taken over with a note on stderr, that run's
 * directory removed) and creates this process's own directory in it,
 * parity-offload-<pid>-XXXXXX (0700), where every rank's file is created
 * exclusively. Held until engine_offload_release, which removes it all;
 * atexit and the signal handlers (fileio.h) release it too, so nothing
 * is left after any exit. Claiming again the same dir is a no-op.
 * engine_train claims (and releases) when its caller has not; the CLI
 * claims before anything runs, for the whole process. 0, or -1 with a
 * message naming --offload-path. */
int  engine_offload_claim(const char *dir, perr_t *err);
int  engine_offload_claimed(void);
void engine_offload_release(void);
/* The global index of the run's first step: 0, or the checkpoint's. */
int64_t engine_first_step(const engine_run_t *run);
/* Host bytes a layout adds to load or save a checkpoint, beside the
 * global state (ckpt_host_bytes): every tp rank's AdamW blocks. */
size_t engine_ckpt_host_bytes(const model_config_t *model, const pconfig_t *pc);

/* The run's report: what it measured as a run_report_t, handed to each
 * mode's report in turn (run_report.h): the per-device memory next to the
 * ZeRO formulas and the data-parallel traffic next to 2Psi / 3Psi, then
 * tensor, context and pipeline parallelism's where their degree is > 1. */
void engine_print_report(const engine_run_t *run, FILE *f);

/* Where a layout placed each global tensor, for the divergence report. */
typedef struct {
    model_config_t cfg;   /* the replica config */
    pconfig_t pc;
    param_table_t table;
    dp_plan_t plan;
    pp_plan_t pp;         /* which stage holds which units */
} engine_placement_t;
int  engine_placement_init(engine_placement_t *pl, const model_config_t *model, const pconfig_t *pc,
                           perr_t *err);
void engine_placement_free(engine_placement_t *pl);
/* Which device (and microbatch) produced element `flat` of dump tensor t
 * in this layout, as check.h's describe wants it: batch tensors by
 * sequence; gradients by the owner of the element's bucket piece (the
 * exact reduce-scatter rounds it there); parameters by the device that
 * updates them, for each ZeRO stage; all-reduced scalars. */
void engine_describe_element(const engine_placement_t *pl, const st_tensor_t *t, uint64_t flat, char *buf,
                             size_t cap);
/* World rank `rank` with its coordinates on every axis, sizes of 1
 * included: "5 (tp 1, cp 0, ep 0, dp 0, pp 1)". */
void engine_device_name(const pconfig_t *pc, int rank, char *buf, size_t cap);
/* Element `flat` of dump tensor t in mesh terms, for the first-divergence
 * report (engine/describe_mesh.c): `device` (the world rank that wrote it; -1:
 * the one the layout gives it) named on every axis with this element's
 * sub-axes, "9 (tp 1, cp 0, ep 0, dp 0, pp 1; vpp chunk 1)"; its
 * microbatch, or how the step's microbatches made it; and which mode's
 * reduction touched it last, from its name and the layout alone:
 * "dp: the exact reduce-scatter of gradient bucket 0 ...". Each buffer
 * holds cap bytes. */
void engine_describe_mesh(const engine_placement_t *pl, const st_tensor_t *t, uint64_t flat, int device,
                          char *dev, char *micro, char *touched, size_t cap);

#endif
