/* engine_internal.h - state shared by the engine's files (not public). */
#ifndef PARITY_ENGINE_INTERNAL_H
#define PARITY_ENGINE_INTERNAL_H

#include <pthread.h>

#include "model/gpt.h"
#include "parity/engine.h"
#include "parity/dump.h"
#include "parity/grid.h"
#include "parity/mesh.h"
#include "parity/pp.h"
#include "parity/runtime.h"
#include "parity/trace.h"
#include "features.h"
#include "links.h"

typedef struct engine_shared engine_shared_t;
enum { ENGINE_MAX_GROUPS = 2, ENGINE_NSCALARS = 5 };
struct engine_rank;

/* meshes.c: a device's place - its coordinates (coord[GRID_PP]: the global
 * pipeline stage), its mesh's sizes (size[GRID_PP]: every stage), its
 * groups (pp: its mesh's stages), its mesh and rank there. */
typedef struct {
    int coord[GRID_NAXES], size[GRID_NAXES];
    group_t *group[GRID_NAXES];
    int mesh, local;
} engine_dev_t;
engine_dev_t engine_device(const engine_shared_t *sh, int d);
/* The mesh sizes of pipeline stage `stage`'s devices. */
void engine_stage_sizes(const engine_shared_t *sh, int stage, int sizes[GRID_NAXES]);
/* An encoder mesh beside the decoder's (pconfig_hetero): sh->meshes and
 * sh->world (engine_encdec_meshes). */
int  engine_meshes_init(engine_shared_t *sh, perr_t *err);
void engine_meshes_free(engine_shared_t *sh);
/* Every group along dims ("dp-cp") of every mesh, named prefix; id_of[d]:
 * device d's. */
typedef struct {
    group_t **groups;
    int n;
    int *id_of; /* [world] */
} engine_groups_t;
int  engine_groups_create(engine_shared_t *sh, const char *dims, const char *prefix,
                          engine_groups_t *out, perr_t *err);
void engine_groups_free(engine_groups_t *g);
/* The encoder-decoder bridge: 1 on the encoder's last stage, -1 on the
 * decoder's first, 0 elsewhere or with one grid; the decoder ranks each
 * encoder rank feeds (tp/etp); the world rank of the i-th peer across. */
int  engine_bridge_side(const struct engine_rank *r);
int  engine_bridge_fanout(const engine_shared_t *sh);
int  engine_bridge_peer(const struct engine_rank *r, int i);
/* A head tied across the meshes: the embedding groups (the encoder's
 * first stage and the decoder's last, every tp rank of both, one group a
 * dp x cp coordinate), and the reduction of the word embedding's open
 * gradient sums over them with the two vocabulary cuts reconciled. */
int  engine_tied_mesh_groups(engine_shared_t *sh, perr_t *err);
void engine_tied_mesh_reduce(struct engine_rank *r, acc_t *a);

/* The parameter-shaped tensors a dump collects, each step: gradients
 * (before the update), then parameters and AdamW's m and v (after it). */
typedef enum { COLLECT_GRAD, COLLECT_PARAM, COLLECT_EXP_AVG, COLLECT_EXP_AVG_SQ, COLLECT_NKINDS } collect_kind_t;

struct engine_rank;
/* a job of the communication thread: fn(r, bucket) */
typedef struct {
    void (*fn)(struct engine_rank *r, int bucket);
    int b;
} engine_comm_job_t;

/* One device of the grid: its coordinates, groups, replica and shards. */
typedef struct engine_rank {
    engine_shared_t *sh;
    int rank, n;           /* index and size of the gradient group: the data-parallel
                              ranks times the context-parallel ones (they split tokens) */
    int data_rank, data_n; /* data-parallel coordinate and degree: which sequences */
    int cp_rank;           /* context-parallel coordinate: which positions */
    group_t *cp_group;     /* the context-parallel group (NULL at cp = 1) */
    int ep_rank;           /* expert-parallel coordinate: which experts it runs */
    group_t *ep_group;     /* the expert-parallel group (NULL at ep = 1) */
    group_t *etp_group;    /* expert tensor parallelism over etp < tp ranks: the tp
                              ranks of tp_rank / etp (NULL otherwise) */
    group_t *fold_group;   /* ep folded onto a run of fold_n < tp tp ranks: theirs */
    int device;            /* world rank on the grid */
    int tp_rank;           /* tensor-parallel coordinate */
    group_t *tp_group;     /* the tensor-parallel group (NULL at tp = 1) */
    group_t *tp_vec[2];    /* 3-D: the stream's and the inner layout's sequence blocks
                              (tp2-tp3, tp-tp3), or NULL */
    int stage;             /* pipeline coordinate */
    int part;              /* the model part held (engine_part; sh->part_of) */
    const dp_plan_t *plan; /* this stage's buckets and shards */
    group_t *pp_group;     /* the stages of this (tp, dp) coordinate */
    group_t *emb_group;    /* tied head, pp > 1: the first and last stage (else NULL) */
    pp_op_t *ops;          /* this stage's schedule (pp.h) */
    int nops;
    /* chunk c's links to virtual stages vs + 1 and vs - 1 (links.h) */
    engine_link_t next[GPT_MAX_CHUNKS], prev[GPT_MAX_CHUNKS];
    int *slot_of;          /* [m * v] the slot of (microbatch, chunk) in flight */
    /* the features a layout switches on (features.h; zeroed when off) */
    engine_wstash_t wstash;     /* split backward: B's weight work until its W */
    engine_loop_t loop;         /* a V's bottom: hand-offs to its own chunk */
    engine_buffered_t buffered; /* a V's sends in flight */
    engine_bridge_t bridge;     /* the encoder's end of the encoder-decoder bridge */
    engine_offload_t off;       /* optimizer state off the device */
    engine_moe_t moe;           /* MoE routing statistics */
    int slot_first[GPT_MAX_CHUNKS + 1]; /* chunk c's pool of slots (engine_stage_slots) */
    trace_buf_t *trace;    /* --trace: this device's spans, or NULL */
    double busy;           /* this step's forward/backward seconds */
    double sched_start;    /* when this step's schedule began (after the step's barrier) */
    group_t *world;        /* every device: the norm, barriers around collection */
    gpt_t *g;              /* the replica: parameters (stages 0-2), open exact sums */
    group_t *group;        /* the gradient group (data x context parallel ranks) */
    group_t *grad_group;   /* the same ranks, for gradient reductions (they may
                              run on the communication thread) */
    /* every gradient group of the device, [0] the one above; expert
     * parallelism adds [1], the expert-data ranks its experts' tensors
     * reduce over: bucket b's is engine_bucket_gi (its rank, size, groups) */
    int grank[ENGINE_MAX_GROUPS], gn[ENGINE_MAX_GROUPS];
    group_t *groups[ENGINE_MAX_GROUPS], *grad_groups[ENGINE_MAX_GROUPS];
    /* overlap_grad_reduce / overlap_param_gather: a communication thread
     * runs comm_job on buckets 0 .. ready-1, in order, while the device
     * thread computes (the backward pass, or the optimizer) */
    void (*comm_job)(struct engine_rank *r, int bucket);
    float *comm_gather_buf; /* the thread's own all-gather buffer */
    pthread_t comm;
    pthread_mutex_t comm_lock;
    pthread_cond_t comm_cond;
    /* the jobs, one FIFO (every rank of a group queues its collectives in
     * the same order): [comm_qcap] ring, jobs comm_fin .. comm_tail - 1
     * queued, comm_fin the number finished; comm_ready buckets handed over */
    engine_comm_job_t *comm_q;
    int comm_qcap;
    long comm_tail, comm_fin;
    int comm_ready, comm_stop, comm_started;
    int comm_inline; /* step-through: jobs run on the device thread (reduce.c) */
    /* written by whichever thread reduces; folded into the report by the
     * device thread once the step's reductions are done (no race) */
    double t_reduce, t_comm;
    uint64_t rs_elems;
    /* shards (stage >= 1: optimizer; stage >= 2: gradients; 3: parameters) */
    float *shard_params, *shard_grads, *shard_m, *shard_v; /* [shard_len] (m, v: fp32 AdamW) */
    uint8_t *shard_mq, *shard_vq;  /* adamw8bit: [shard_len] codes of m and v */
    float *shard_ma, *shard_va;    /* adamw8bit: [shard_qlen] their blocks' absmax */
    /* the exact reduce-scatter's vectors (reduce.c): [0] the send, a
     * round of n blocks of the bucket's open sums; [1] the receive, this
     * rank's block; over scratch_mem, sized by engine_rank_buffers */
    xvec_t scratch[2];
    double *scratch_mem[2];
    float *gather_buf;     /* [max piece * n] */
    float **unit_buf;      /* ZeRO-3: [nbuckets] gathered bucket, or NULL */
    long *unit_ticket;     /* ZeRO-3: [nbuckets] its prefetch's job (engine_comm_wait), or -1 */
    int pass_lo, pass_hi;  /* the pass running: its chunk's units (ZeRO-3's prefetch) */
    int pass_dir;          /* +1 forward, -1 backward */
    int last_micro;        /* inside the step's last microbatch */
    int unit_sums;         /* GPT_UNIT_OPEN_SUMS: gradients rounded unit by unit */
    int adam_t;
    gpt_step_stats_t step_stats; /* this rank's loss, lr and norm (replicas) */
    device_report_t *report;
    const gpt_observer_t *collect; /* forwards batch tensors to the dump */
} engine_rank_t;

struct engine_shared {
    engine_run_t *run;
    grid_t grid;           /* tp x dp x pp on the layout's order */
    int have_grid;
    int have_global;       /* global below is built (engine.c) */
    mesh_grid_t *meshes;   /* an encoder mesh beside the decoder's (meshes.c), or NULL */
    int world;             /* devices */
    int (*part_sizes)[GRID_NAXES]; /* [nparts] the sizes of part k's mesh */
    param_table_t global;  /* the golden table: reassembled tensors */
    pp_plan_t pp;          /* stages, chunks and schedule */
    param_table_t *tables; /* [pp] a stage's table at its first device (other stages'
                              tensors empty): which parts hold the same blocks */
    param_table_t *part_tables; /* [nparts] a part's own table: its blocks' shapes (uneven
                              vocabulary tiles differ between tp ranks) */
    dp_plan_t *plans;      /* [nparts] a part's buckets and shards */
    int nparts;            /* model parts: distinct sets of blocks (engine_part; 1-D tp:
                              pp * tp) */
    int (*part_coord)[GRID_NAXES]; /* [nparts] the coordinates of a device holding part k */
    int *part_of;          /* [world] each device's part */
    /* the gradient groups: [0] the dense tensors', [1] (expert parallelism)
     * the experts'; each one's grid axes (bit a: axis a, from the
     * placements, parts.c), name as a layout's group ("dp-ep-cp") and size */
    int ngroups;
    unsigned grad_axes[ENGINE_MAX_GROUPS];
    char grad_name[ENGINE_MAX_GROUPS][32];
    int grad_n[ENGINE_MAX_GROUPS];
    float **params_local, **grads_local; /* [nparts] one part's flat tensors, reassembled */
    group_t **emb_groups;  /* tied head, pp > 1: [tp * dp] embedding groups */
    int n_emb_groups;
    model_config_t cfg;    /* replica config: micro_batch from the layout */
    engine_rank_t *ranks;      /* [n] */
    group_t *group, *grad_group;
    pthread_mutex_t collect_lock;
    float *params_full, *grads_full; /* reassembly for dumps */
    float *m_full, *v_full;          /* AdamW's m and v reassembled for dumps, or NULL */
    float **m_local, **v_local;      /* [nparts] AdamW state of one part: checkpoints
                                        (checkpoint.c) and dumps, or NULL */
    /* a dump's reassembly of kind k (engine_collect_kind): every part's flat
     * vectors (aliases of params_local, ...) and the global one; with the
     * device that wrote each element (-1: none yet this step), so that an
     * element nobody wrote is a divergence and a report names its device */
    float **local[COLLECT_NKINDS], *full[COLLECT_NKINDS];
    int32_t **src_local[COLLECT_NKINDS], *src_full[COLLECT_NKINDS];
    gpt_observer_t dump_obs;         /* the dump's observer for the current step */
    double *sched_end;               /* [world] when each device's schedule of the
                                        current step ended: the pipeline's flush */
    float (*scalars)[ENGINE_NSCALARS]; /* [world] each device's loss, lr, norm, AdamW
                                        step and loss scale (engine_note_scalars) */
    engine_replica_diff_t *diffs;        /* replicas that disagree (collect_lock) */
    int ndiffs, cap_diffs;
    int failed;
    perr_t err;
};

/* rank.c: the buffers a rank allocates beside its replica (shards, the
 * exact sums being reduced, all-gather buffers), sized by the plan; one
 * table for setup and for the estimate (engine_memest), so they cannot drift.
 * With r, ptr is the field setup fills; without, NULL. */
typedef struct {
    void **ptr;
    size_t bytes;
    mem_cat_t cat;
    const char *name;
    int want;
    int host; /* 1: the rank's host arena (cpu offload), not the device's */
} engine_buf_t;
enum { ENGINE_NBUFS = 14 };
void engine_rank_buffers(const dp_plan_t *p, const pconfig_t *pc, engine_rank_t *r, engine_buf_t out[ENGINE_NBUFS]);
/* rank.c: a device's set-up (0, or -1 after engine_fail) and teardown
 * (after a failed set-up too). */
int  engine_setup_rank(engine_rank_t *r, device_t *dev);
void engine_teardown_rank(engine_rank_t *r, device_t *dev);
/* reduce.c: the exact reduce-scatter moves a bucket in rounds whose
 * send (n blocks of open sums) stays near ENGINE_ROUND_BYTES, so that it is
 * still in cache when the peers read it; a round's block length for
 * pieces of `piece` elements over n ranks (scratch_mem[0] holds n blocks,
 * scratch_mem[1] one; smaller buffers make the rounds smaller). */
enum { ENGINE_ROUND_BYTES = 256 << 10 };
static inline size_t engine_round_elems(size_t piece, int n) {
    size_t c = ENGINE_ROUND_BYTES / sizeof(double) / (size_t)n;
    c = c >= 8 ? c & ~(size_t)7 : 1; /* blocks on 64-byte lines */
    return c < piece ? c : piece;
}
/* A model part: what one (pipeline stage, tensor-parallel rank) holds,
 * which the data-parallel ranks replicate; its table and its coordinates
 * for the placements. */
typedef struct {
    const param_table_t *table;
    int stage, tp_rank;
    int sizes[GRID_NAXES], coord[GRID_NAXES];
} engine_part_t;
engine_part_t engine_part(const engine_shared_t *sh, int part);
/* Tensor i of a part is a copy that another part holds too and that
 * counts once: replicated over tp (ranks > 0), or the tied word
 * embedding on the last stage (the first stage's counts). Empty tensors
 * (another stage's) are not extra: callers skip them. */
int engine_part_extra(const engine_shared_t *sh, const engine_part_t *p, int i);
/* One flat buffer per model part, each of its table's size (zeroed):
 * reassembly and checkpoint state. NULL when memory is short;
 * engine_part_buffers_free takes NULL too. */
float **engine_part_buffers(const engine_shared_t *sh);
void    engine_part_buffers_free(const engine_shared_t *sh, float **b);
/* parts.c: the stages' and parts' tables and the parts' plans (sh->tables,
 * sh->part_tables, sh->plans) and,
 * with a tied head over stages, the embedding groups (the first and last
 * stage of every tp x dp coordinate); freed by engine_free_stages. */
int  engine_build_stages(engine_shared_t *sh, perr_t *err);
void engine_free_stages(engine_shared_t *sh);
/* The embedding group of a device, or NULL (not on either end, untied, pp = 1). */
group_t *engine_emb_group_of(const engine_shared_t *sh, int device);
/* Global vector <-> every part's flat blocks through the placements
 * (join: one copy of each element, engine_part_extra's skipped). */
void engine_cut_parts(const engine_shared_t *sh, const float *global, float **local);
void engine_join_parts(const engine_shared_t *sh, float **local, float *global);
/* What a replica leaves to the stage's shards (gpt_new_ex's omit). */
unsigned engine_replica_omits(int stage);
/* The same, plus GPT_UNIT_OPEN_SUMS where each unit's gradients are
 * rounded as soon as its backward ends, into the replica's gradients:
 * then the pieces a group of one reduces into (engine_grad_piece). */
unsigned engine_replica_flags(const pconfig_t *pc, const pp_plan_t *pp, int stage);
void engine_fail(engine_shared_t *sh, const char *msg);

/* collect.c: the reassembly of global tensors for dumps and the
 * checker, outside the simulated devices (no collective, no device memory). */
void engine_collect_batch(void *ctx, const gpt_view_t *v);
/* This rank's pieces of a sharded vector of kind k (gradients, ZeRO-3
 * parameters, ZeRO >= 1 AdamW state) into its part's flat vector `out`;
 * src (or NULL) records this device as their writer. */
void engine_collect_pieces(engine_rank_t *r, collect_kind_t k, float **outs, int32_t **srcs);
/* This rank's share of kind k into its part's flat vector: its pieces
 * where its ZeRO stage shards k (gradients always: the reduce-scatter's
 * owner rounded them), the whole replica on data-parallel rank 0. */
void engine_collect_part(engine_rank_t *r, collect_kind_t k, float **outs, int32_t **srcs);
/* One int32 vector per model part, of its table's size (-1 unset after
 * engine_collect_reset); NULL when memory is short. */
int32_t **engine_part_sources(const engine_shared_t *sh);
void      engine_part_sources_free(const engine_shared_t *sh, int32_t **b);
/* Step `step`'s tensors of kind k, reassembled (a collective over the
 * world: every device calls it): each rank's pieces or rank 0's replica
 * into its part, every other replica compared, then on device 0 every
 * part into the global tensor (engine_collect_tp). */
void engine_collect_kind(engine_rank_t *r, int64_t step, collect_kind_t k);
/* Device 0, before a collected step: nothing written yet. */
void engine_collect_reset(engine_shared_t *sh);
/* The sources of the reassembled tensors, for dump_set_sources. */
void engine_collect_sources(const engine_shared_t *sh, dump_sources_t *out);
/* A read-only view of the model with the global parameters and gradients. */
gpt_t engine_global_view(const engine_shared_t *sh, const gpt_t *g);
/* Every part's flat tensors of kind k into the global ones through the
 * placements, with their sources; a block several parts hold (a tensor
 * replicated over tp, the tied embedding on the last stage) is compared,
 * not copied. */
void engine_collect_tp(engine_shared_t *sh, int64_t step, collect_kind_t k);
/* This rank's replica of every parameter-shaped tensor (kind "grad" or
 * "param") against the copy the dump took (taken: a device, or -1 for
 * each element's bucket-piece owner); disagreements are recorded. */
void engine_check_replica(engine_rank_t *r, int64_t step, const char *kind, const float *mine,
                          const float *taken, int taken_device);
/* AdamW's step count as a device keeps it (DDP: in its replica). */
int engine_adam_t(const engine_rank_t *r);
/* Every rank's loss, lr, norm (step_stats) and AdamW step count against
 * device 0's. */
void engine_check_scalars(engine_shared_t *sh, int64_t step);
/* Adds a disagreement to sh->diffs (one record per tensor: the first
 * element, the lowest device; ndiffer summed). */
void engine_record_diff(engine_shared_t *sh, const engine_replica_diff_t *d);

/* processes.c: host memory across processes (a run of the MPI transport);
 * with one process, barriers. */
void engine_zero_for_merge(engine_shared_t *sh);           /* the step's start, a lead */
void engine_merge_kind(engine_rank_t *r, collect_kind_t k); /* after the pieces of kind k */
void engine_note_scalars(engine_rank_t *r, const gpt_step_stats_t *st);
void engine_merge_step(engine_rank_t *r);                  /* scalars and batch tensors */
void engine_merge_flush(engine_rank_t *r);                 /* the step's end: sched_end */
void engine_merge_run(engine_rank_t *r, device_report_t *reports); /* the run's end */

/* reduce.c: the exact reduce-scatter of bucket b into the rank's piece
 * (fp32, rounded once) at out[0 .. piece). */
void engine_reduce_bucket(engine_rank_t *r, int b, float *out);
/* Everything not yet reduced; called after the last microbatch. */
void engine_reduce_pending(engine_rank_t *r);
/* Overlap: buckets up to (not including) `upto` are ready for the job. */
void engine_buckets_ready(engine_rank_t *r, int upto);
/* Hands the remaining buckets to the thread and waits until it is done. */
void engine_comm_finish(engine_rank_t *r);
long engine_comm_push(engine_rank_t *r, void (*fn)(engine_rank_t *, int), int b);
void engine_comm_wait(engine_rank_t *r, long ticket);
void engine_comm_use_for_reduce(engine_rank_t *r);
void engine_comm_use_for_gather(engine_rank_t *r);
/* The communication thread's job of gathering bucket b's parameters. */
void engine_gather_params_job(engine_rank_t *r, int b);
int  engine_comm_start(engine_rank_t *r, device_t *dev);
void engine_comm_stop(engine_rank_t *r);
/* optimizer.c: an all-gather's n padded pieces of bucket b in buf
 * ([piece * n]) moved back to back, the bucket's flat elements
 * (block-aligned pieces differ in length, dp.h); nothing for even ones. */
void engine_join_pieces(const dp_plan_t *p, int b, float *buf);
/* The reverse: the bucket's flat elements in buf to n padded pieces, the
 * padding zeroed. */
void engine_split_pieces(const dp_plan_t *p, int b, float *buf);
/* Where bucket b's rounded gradient piece goes for this stage. */
float *engine_grad_piece(engine_rank_t *r, int b);

/* checkpoint.c: layout-free checkpoints (ckpt.h). prepare: before the tp
 * blocks are cut (engine_train), the resumed parameters replace the initial
 * ones and the AdamW state is cut to tp blocks; engine_setup_rank: the rank's
 * optimizer state (replica or ZeRO shard) and step count; collect: after
 * the last step, every rank's parameters and AdamW state into run->save
 * (a collective over the world: every device calls it). */
int  engine_ckpt_prepare(engine_shared_t *sh, perr_t *err);
void engine_ckpt_setup_rank(engine_rank_t *r);
void engine_ckpt_collect(engine_rank_t *r);
void engine_ckpt_free(engine_shared_t *sh);

/* optimizer.c: parameters and the optimizer over shards. */
void engine_unit_event(void *ctx, gpt_t *g, int unit, int event);
void engine_weights_final(engine_rank_t *r);
/* This rank's reduced gradient pieces (DDP: all) made what its norm and
 * update read: rounded to the gradient dtype, unscaled (fp16). */
void  engine_finish_grads(engine_rank_t *r);
float engine_grad_norm(engine_rank_t *r);
/* DDP: every rank's rounded pieces to every rank (fp32 all-gather). */
void engine_all_gather_grads(engine_rank_t *r);
void engine_update(engine_rank_t *r, float lr, float grad_norm);

double engine_now(void);

/* schedule.c: one step's forward and backward passes on this rank: the
 * stage's schedule over its microbatches (pp = 1: one at a time, the
 * golden order), activations and gradients to and from the neighbouring
 * stages; then the tied embedding's gradient over the embedding group. */
void engine_run_schedule(engine_rank_t *r, int64_t step, const gpt_observer_t *obs);
/* The slots of this stage: a pool per chunk, chunk c's at first[c] ..
 * first[c + 1] - 1 (first may be NULL); returns their number. */
int  engine_stage_slots(const pp_plan_t *pp, int stage, int *first);
/* --trace: a span on this device's track (no-op without a trace). */
void engine_span(engine_rank_t *r, const char *name, const char *cat, double t0, int mb, int chunk);

/* offload.c: the optimizer state off the device (pconfig.h's offload).
 * engine_offload_open at setup (nvme: creates the rank's file; 0, or -1
 * after engine_fail naming the file), engine_offload_close at teardown.
 * The update: _begin, then for each bucket b in order _get (where AdamW's
 * m and v of b's piece are: the shards, or a staging slot the file was
 * read into, nvme, the next bucket's read started behind it) and _put
 * (nvme: the slot's write started), then _end (every write done). _read
 * and _write move n values of state `which` (0 m, 1 v) at shard offset o
 * between the file and buf, synchronously (collection, checkpoints). */
int  engine_offload_open(engine_rank_t *r);
void engine_offload_close(engine_rank_t *r);
void engine_offload_begin(engine_rank_t *r);
void engine_offload_get(engine_rank_t *r, int b, float **m, float **v);
void engine_offload_put(engine_rank_t *r, int b);
void engine_offload_end(engine_rank_t *r);
void engine_offload_read(engine_rank_t *r, int which, size_t o, size_t n, float *buf);
void engine_offload_write(engine_rank_t *r, int which, size_t o, size_t n, const float *buf);
/* adamw8bit's state of bucket b's piece: codes [piece] and absmax entries
 * [qpiece] of m and v, at the piece's first element and block. */
typedef struct {
    uint8_t *mq, *vq;
    float *ma, *va;
} engine_adam8_piece_t;
/* A staging slot's floats (engine_rank_buffers allocates two of m and v). */
size_t engine_offload_slot_floats(const dp_plan_t *p);
/* The update's _get under adamw8bit: the shards' own, or (nvme) the slot
 * the file was read into. */
engine_adam8_piece_t engine_offload_get8(engine_rank_t *r, int b);
/* Outside the update (collection, checkpoints): bucket b's 8-bit piece,
 * the shards' own or (nvme) read into slot 0; _store8 writes slot 0 back. */
engine_adam8_piece_t engine_offload_load8(engine_rank_t *r, int b);
void engine_offload_store8(engine_rank_t *r, int b);

/* MoE models: the step's routing statistics over the run (report.c):
 * each sequence counted once (by its tp and cp coordinate 0 devices,
 * every tp and cp rank repeating the same counts), summed over the world;
 * device 0 keeps them in run->moe_steps. Every device calls it. */
void engine_moe_stats(engine_rank_t *r, int64_t step);

/* Bucket b's gradient group: 0, or 1 for expert tensors (their own
 * reduction axes); the device's rank in it, its size and its groups (the
 * device thread's, the communication thread's). */
static inline int engine_bucket_gi(const engine_rank_t *r, int b) {
    return r->sh->ngroups > 1 && r->plan->buckets[b].reduce == r->sh->grad_axes[1];
}
static inline int engine_bucket_rank(const engine_rank_t *r, int b) { return r->grank[engine_bucket_gi(r, b)]; }
static inline int engine_bucket_n(const engine_rank_t *r, int b) { return r->gn[engine_bucket_gi(r, b)]; }
static inline group_t *engine_bucket_group(const engine_rank_t *r, int b) {
    return r->groups[engine_bucket_gi(r, b)];
}
static inline group_t *engine_bucket_comm_group(const engine_rank_t *r, int b) {
    return r->grad_groups[engine_bucket_gi(r, b)];
}
/* Whether the device's copy of a replicated tensor is the one a dump
 * takes for its part: rank 0 of its last gradient group (the experts'
 * when there are two: the part's devices are that group). */
static inline int engine_part_lead(const engine_rank_t *r) { return r->grank[r->sh->ngroups - 1] == 0; }

#endif
