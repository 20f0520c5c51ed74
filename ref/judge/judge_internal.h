/* judge_internal.h - `parity judge`'s pieces, one concern a file:
 *   rankfile.c  one rank file: its metadata, its tensors' placements (RANKFILES.md)
 *   schemes.c   a backend's parameter names (parity.names, names.h) onto parity's
 *   assemble.c  every rank's blocks of a tensor back into the global tensor,
 *               each copy's deviation from the golden one
 *   envelope.c  how far a correct backend may be: the tensor's scale and spread
 *   verdict.c   the rank files against the golden run, tolerances and masks
 *   report.c    what stdout and --report say
 * Everything a judgment reads lives in a judge_t; nothing is global. */
#ifndef PARITY_JUDGE_INTERNAL_H
#define PARITY_JUDGE_INTERNAL_H

#include <stdint.h>
#include <stdio.h>

#include "parity/error.h"
#include "parity/float_order.h"
#include "parity/names.h"
#include "parity/oracle.h"
#include "parity/safetensors.h"

enum { JUDGE_MAX_AXES = 8, JUDGE_AXIS_NAME = 32, JUDGE_MAX_RANKS = 1 << 16 };
/* A placement's entry for one mesh axis: a tensor axis >= 0 it shards, or */
enum { JP_REPLICATE = -1, JP_PARTIAL = -2 };

/* The mesh of parity.mesh: axis names and sizes in mesh order. */
typedef struct {
    int n;
    char name[JUDGE_MAX_AXES][JUDGE_AXIS_NAME];
    int size[JUDGE_MAX_AXES];
    int ranks; /* their product */
} judge_mesh_t;

/* One contiguous range of a rank's block of one global tensor: elements
 * r0 .. r1-1 (row-major) of the block the placement gives. A whole file
 * tensor is one piece (r0 0, r1 its numel); a flat buffer gives one piece
 * per member it overlaps. */
typedef struct {
    char *name;                 /* the global tensor's full name, "step0.act.layers.0.output" */
    int p[JUDGE_MAX_AXES];      /* per mesh axis: Shard's tensor axis, JP_REPLICATE, JP_PARTIAL */
    int64_t strips[JUDGE_MAX_AXES]; /* per mesh axis: Shard(d, strips=k)'s k (1: plain Shard) */
    int mb, nmb;                /* microbatch mb of nmb (nmb 0: none) */
    double scale;               /* the global values are the local ones times this */
    int ndim;                   /* the local block's shape */
    int64_t shape[ST_MAX_DIMS];
    uint64_t r0, r1;            /* its elements this piece holds */
    st_dtype_t dtype;
    const unsigned char *data;  /* r1 - r0 elements (into the open file) */
    char *where;                /* the file's tensor it came from, for messages */
    char *backend;              /* the scheme's parameter name when parity.names is not parity's
                                   ("transformer.h.0.attn.c_attn.weight"; name is then parity's
                                   full name), else NULL */
    names_map_t map;            /* backend's: the scheme's layout, which shape and placement
                                   speak of (map.alias: the tied head's second key) */
    int unheld;                 /* a flat member this shard holds no element of: its name
                                   and shape are checked, it adds no tensor (r0 = r1 = 0) */
} judge_piece_t;

/* One rank file. */
typedef struct {
    char *path;
    st_file_t *f;
    judge_mesh_t mesh;
    int coord[JUDGE_MAX_AXES];
    int rank;                   /* row-major over the mesh */
    char names[32];             /* parity.names */
    int bf16;                   /* parity.precision is bf16 */
    judge_piece_t *pc;
    int npc;
    int64_t max_step;           /* the highest step<s> named; -1 for init only */
} judge_file_t;

/* Reads one rank file and checks its metadata and every placement (shape
 * against the golden tensor is assemble.c's). 0, or -1 with a message
 * naming the file and the field. */
int  judge_file_open(judge_file_t *jf, const char *path, perr_t *err);
void judge_file_close(judge_file_t *jf);
/* "dp=1,tp=0" */
void judge_fmt_coords(const judge_mesh_t *m, const int *coord, char *buf, size_t cap);

/* One copy of a global tensor: a rank's block, or the exact sum of the
 * addends of a Partial(sum) group (its lowest rank named). */
typedef struct {
    char *name;                 /* full name */
    st_tensor_t g;              /* the golden tensor */
    const void *gd;
    uint64_t numel;
    float *value;               /* [numel] the assembled tensor (lowest rank's copy) */
    double *dev;                /* [numel] max over copies |copy - golden|; -1 none supplied */
    double *got;                /* [numel] the worst copy's value */
    int32_t *who;               /* [numel] the worst copy's rank */
    int32_t *copies;            /* [numel] how many copies */
    int32_t *mb;                /* [numel] the worst copy's microbatch (-1: none) */
    unsigned char *masked;      /* [numel] 1: skipped (--mask) */
    unsigned char *ill;         /* [numel] or NULL: 1: an ill-conditioned update, skipped by
                                   the trajectory (judge_ill_conditioned) */
    char *backend;              /* "hf-gpt2: transformer.h.0.attn.c_attn.weight" (a scheme
                                   tensor), else NULL */
    int sndim;                  /* the scheme's shape of it (backend only) */
    int64_t sshape[ST_MAX_DIMS];
    uint64_t *from_scheme;      /* [numel] the scheme's flat index -> parity's; NULL: the same */
    uint64_t *to_scheme;        /* [numel] its inverse */
} judge_tensor_t;

/* One step of the local judgment whose forced step asked for inputs the
 * files did not hold (whole): parity's own recomputation stood in. */
typedef struct {
    int64_t step;
    int asked, missing;         /* inputs the forced step asked for; of them not supplied */
    char *names;                /* "act.layers.0.output, grad_input.head, ... (and 3 more)" */
} judge_local_missing_t;

/* The whole set of rank files reassembled against the golden tensors. */
typedef struct {
    judge_file_t *files;
    int nfiles;
    judge_file_t **by_rank;     /* [mesh.ranks] */
    judge_tensor_t *t;
    int nt;
    char names[48];             /* the scheme the files use ("hf-gpt2", "auto: nanogpt") */
    const char *local_unavailable; /* NULL when the local judgment ran, else a one-line reason */
    judge_local_missing_t *local_missing; /* the steps with inputs not supplied (judge_local) */
    int nlocal_missing;
} judge_set_t;

/* The most steps a judgment runs (the golden run, K envelope runs and
 * K+1 forced steps each): a file naming a later step is refused. */
#define JUDGE_MAX_STEPS 1000

/* Every file's parameter tensors (init., param., grad., exp_avg.,
 * exp_avg_sq. of a scheme name) renamed to parity's, each piece keeping
 * the scheme's name and map (schemes.c). One scheme for all files: the
 * declared one, or (auto) names_detect's over the file's names. 0, or -1
 * with a message naming the file, the tensor and the name (exit 2). */
int judge_names_resolve(judge_set_t *s, const model_config_t *c, perr_t *err);

/* Reassembles every tensor the files hold (o: the golden run, run for
 * every step the files name). 0, or -1 with a message (exit 2). */
int  judge_assemble(judge_set_t *s, oracle_t *o, perr_t *err);
void judge_set_free(judge_set_t *s);

/* The tolerance classes (--tolerance CLASS=M). */
typedef enum {
    JC_ACT, JC_GRAD_INPUT, JC_GRAD, JC_PARAM, JC_EXP_AVG, JC_EXP_AVG_SQ, JC_LOGITS, JC_LOSS,
    JC_GRAD_NORM, JC_BATCH, JC_COUNT
} judge_class_t;
const char *judge_class_name(judge_class_t c);
judge_class_t judge_class_of(const char *full_name);

/* The spacing of floats at the tensor's largest finite golden magnitude:
 * the floor of every envelope, so an exactly reproducible tensor still
 * has a scale. 0 for integer tensors (they must be exact). */
double judge_tensor_ulp(const st_tensor_t *g, const void *gd);
/* Element e of the reference t->gd as a double (f32, i32, u8, f64). */
double judge_value(const judge_tensor_t *t, uint64_t e);

/* The envelope's float orders (envelope.c): the first k of sequential,
 * pairwise, reversed, grouped(g) for each distinct mesh degree g > 1 of
 * the files, random(1), random(2), ...; each with bf16 when the files'
 * parity.precision is bf16. orders[k]; returns k. */
int judge_envelope_orders(const judge_set_t *s, int k, float_order_t *orders);
/* max |w's tensor t->name - ref| over its elements (ref: t's shape and
 * dtype); 0 when w does not hold it or a difference is not finite. */
double judge_spread(const judge_tensor_t *t, const st_writer_t *w, const void *ref);

/* What the user asked for. */
typedef struct {
    char *pattern;
    double multiple;            /* --tolerance-for's multiple */
    int runs;                   /* --envelope-runs-for's K */
} judge_glob_t;
typedef struct {
    char *name;                 /* full tensor name */
    int nidx;                   /* 0: flat given; else the index by axis */
    int64_t idx[ST_MAX_DIMS];
    uint64_t flat;
    char *reason;
} judge_mask_t;
typedef struct {
    double multiple;            /* --multiple (default JUDGE_DEFAULT_MULTIPLE) */
    double class_multiple[JC_COUNT]; /* 0: --multiple's */
    judge_glob_t *globs;
    int nglobs;
    judge_mask_t *masks;
    int nmasks;
    int envelope_runs;          /* --envelope-runs K */
    int class_runs[JC_COUNT];   /* --envelope-runs-for CLASS=K; -1: envelope_runs */
    judge_glob_t *run_globs;    /* --envelope-runs-for GLOB=K (the first match wins) */
    int nrun_globs;
} judge_opts_t;
#define JUDGE_DEFAULT_MULTIPLE 32.0
#define JUDGE_DEFAULT_ENVELOPE_RUNS 8

/* The float-order runs the envelope of tensor `name` (a full name) is
 * measured over: the first --envelope-runs-for pattern it matches, else
 * its class's, else --envelope-runs; and the most any tensor asks for
 * (the runs made: a tensor of K takes the spread of the first K). */
int judge_runs_for(const judge_opts_t *op, const char *name);
int judge_runs_max(const judge_opts_t *op);

/* The trajectory envelope: env[i] = tensor i's largest |run - golden| over
 * op->envelope_runs golden runs of o's model (every step the golden run
 * holds) under judge_envelope_orders. All 0 (the floor) for a golden run
 * from a dump file. 0, or -1 with err set. */
int judge_envelope_trajectory(const judge_set_t *s, oracle_t *o, const judge_opts_t *op,
                              double *env, perr_t *err);

/* One tensor's judgment. */
typedef struct {
    int tensor;                 /* index in the set */
    judge_class_t cls;
    double multiple;            /* the tolerance that applies */
    double envelope, floor;     /* spread over the float runs; one tensor-scale ulp */
    double dev;                 /* max over unmasked elements and copies */
    double ratio;               /* dev / max(envelope, floor); inf: integers differ, or missing */
    int beyond;
    uint64_t first;             /* first element beyond (flat), when beyond */
    uint64_t worst;             /* the element of dev */
    uint64_t nbeyond, nmissing, nmasked, nill;
    uint64_t elem_ulp;          /* ulps of the element `first` (or worst), float32 */
    /* that element (`first`, or worst) as the report names it: */
    double got, want;           /* the worst copy's value, the reference's */
    double elem_dev;            /* |got - want| (inf: no copy) */
    int who, mb, copies;        /* the worst copy's rank (-1: none), microbatch (-1), copies */
} judge_verdict_t;

/* Judges every tensor of s against the golden run; v[s->nt] in the
 * set's order. envelope[i]: tensor i's spread (0: none measured). */
int judge_verdicts(const judge_set_t *s, const judge_opts_t *op, const double *envelope,
                   judge_verdict_t *v, perr_t *err);

/* AdamW's update is ill-conditioned where the gradient is within its
 * envelope of 0: at step 0 it is lr x sign(g), so a legitimate float
 * difference in a gradient next to 0 flips the update by 2 lr, and the
 * parameter keeps that difference in every later step. The float-order
 * runs sample such a flip only by chance; no envelope of a few runs
 * covers it. So for each parameter the elements whose golden gradient at
 * some step <= S is within JUDGE_ILL_ENVELOPES x its envelope of 0 are
 * skipped by the trajectory's verdict of step S's param. (counted,
 * reported; the moments are linear in g and judged whole), and only there: the local
 * judgment recomputes those updates exactly from the backend's own
 * gradients, so a wrong update is still caught. Needs the gradients in
 * the rank files (a parameter without them is judged whole). env: the
 * trajectory envelopes. JUDGE_ILL_ENVELOPES is the correct backends'
 * worst gradient ratio measured (7.1 in bf16, tests/torch/test_backends.py)
 * rounded up, not grad's tolerance: a bf16 gradient's envelope is a few
 * bf16 ulps of its largest element, and 32 of them would cover most of
 * the tensor. Called only when the local judgment ran (cmd_judge): with
 * --golden, or a model the forced step refuses, the trajectory judges
 * every element. 0, or -1 when out of memory. */
#define JUDGE_ILL_ENVELOPES 8.0
int judge_ill_conditioned(judge_set_t *s, const double *env, perr_t *err);

/* One tensor's judgment against the reference t->gd (the golden run's,
 * or the teacher-forced step's); x->tensor is left 0. */
void judge_verdict_one(const judge_tensor_t *t, const judge_opts_t *op, double envelope,
                       judge_verdict_t *x);

/* The local judgment (local.c): each step from the golden run's first
 * (o->start.step with --load) recomputed teacher-forced from the
 * backend's reassembled tensors (forced.h) and every tensor of the step
 * compared with its recomputation; local[i].tensor is -1 for a tensor
 * the forced step does not recompute (init.*, the batch). The steps
 * whose inputs the files lacked go to s->local_missing. Needs the golden
 * run from model flags (o holds the model and its text) and a model the
 * forced step supports: 1 with the reason in err when it is not (a
 * dump, an MoE model, fp16, ...; nothing judged), 0, or -1 on error. */
int judge_local(judge_set_t *s, oracle_t *o, const judge_opts_t *op, judge_verdict_t *local,
                perr_t *err);
/* Re-reads tensor t's pieces against another reference ref (t's shape and
 * dtype) into *out: out's dev, got, who, copies, value, mb are fresh. */
int judge_assemble_against(judge_set_t *s, const judge_tensor_t *t, const void *ref,
                           judge_tensor_t *out, perr_t *err);
void judge_tensor_free(judge_tensor_t *t);

/* The tensors' indices in data-flow order (check_exec_key). */
void judge_exec_order(const judge_set_t *s, int *order);

/* stdout; and the JSON report (path NULL: none), written atomically. */
void judge_print(FILE *f, const judge_set_t *s, const judge_opts_t *op, const judge_verdict_t *v,
                 const judge_verdict_t *local, const int *order, const char *envelope_what);
int  judge_write_json(const char *path, const judge_set_t *s, const judge_opts_t *op,
                      const judge_verdict_t *v, const judge_verdict_t *local, const int *order,
                      const char *envelope_what, perr_t *err);

#endif
