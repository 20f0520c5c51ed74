/* runtime.h - simulated devices: threads, memory arenas, rank layouts and
 * process groups (layer 1 of DESIGN.md).
 *
 * A device is a POSIX thread with its own memory arena. devices_run()
 * launches one thread per rank, runs the same function on each (SPMD, like
 * one process per GPU under torchrun) and joins them. Arenas model device
 * memory: a fixed capacity, per-category accounting and high-water marks,
 * and an out-of-memory report that says what filled the device.
 *
 * Ranks are arranged by a rank layout, written the way Megatron-LM writes
 * it: an order string such as "tp-cp-ep-dp-pp" whose FIRST dimension
 * varies fastest, and sizes such as "tp=2,dp=4". Process groups are built
 * from any list of world ranks, so non-rectangular arrangements (an
 * encoder grid beside a decoder grid) need nothing special; helpers make
 * the rectangular ones from a layout.
 *
 *   rank_layout_t L;  perr_t e;
 *   layout_init(&L, "tp-cp-ep-dp-pp", "tp=2,dp=2,pp=2", &e);   // world 8
 *   group_t *tp[4]; group_create_all(&L, "tp", "tp", tp, &e); // [0,1] [2,3] ...
 *   devices_run(L.world, 1 << 30, my_main, &args, &e);
 */
#ifndef PARITY_RUNTIME_H
#define PARITY_RUNTIME_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "parity/error.h"

/* The largest world devices_run accepts: the one cap every other limit
 * derives from (per-rank tables of the collectives, pconfig's degrees
 * and rank lists, the front ends' sizes). 16384 = tp 8 x pp 16 x dp 128
 * of a small model on a 24 GB host (tests/layouts/test_scale_16k.sh). Rank lists
 * are unsigned short, so it stays below 32768. */
#define PARITY_MAX_DEVICES 16384

/* ------------------------------------------------------------------ */
/* Arenas: simulated device memory                                     */
/* ------------------------------------------------------------------ */

typedef enum {
    MEM_PARAMS,
    MEM_GRADS,
    MEM_OPTIMIZER,
    MEM_ACTIVATIONS,
    MEM_COMM,
    MEM_WORKSPACE,
    MEM_NCAT
} mem_cat_t;

typedef struct arena arena_t;

/* A snapshot of an arena's accounting, in requested bytes (alignment
 * padding is not counted, so figures match tensor sizes exactly). */
typedef struct {
    int device;
    size_t capacity;
    size_t in_use[MEM_NCAT], high_water[MEM_NCAT];
    size_t total_in_use, total_high_water; /* peak of the sum, not sum of peaks */
    size_t live_allocations;
} arena_stats_t;

/* capacity 0 means unlimited. Returns NULL only if the host is out of
 * memory for the bookkeeping itself. */
arena_t *arena_create(int device, size_t capacity);
void     arena_destroy(arena_t *a); /* frees every live allocation */

/* 64-byte aligned, zero-filled. bytes may be 0 (a unique pointer). On
 * exceeding the capacity returns NULL and keeps a report (arena_last_error)
 * naming the device, the request (bytes, category, name), the capacity,
 * the use per category and the largest live allocations. The name is
 * copied (up to 39 characters). */
void *arena_alloc(arena_t *a, size_t bytes, mem_cat_t cat, const char *name);
/* The same, but an allocation failure prints the report and exits
 * through parity_fatal: for internal buffers whose absence is unrecoverable. */
void *arena_alloc_or_die(arena_t *a, size_t bytes, mem_cat_t cat, const char *name);
/* Frees a pointer from arena_alloc on this arena; NULL is ignored. A
 * pointer this arena did not hand out is a fatal error. */
void  arena_free(arena_t *a, void *p);

size_t arena_capacity(const arena_t *a);
size_t arena_in_use(const arena_t *a, mem_cat_t cat);     /* MEM_NCAT: total */
size_t arena_high_water(const arena_t *a, mem_cat_t cat); /* MEM_NCAT: peak total */
void   arena_reset_high_water(arena_t *a); /* peaks := current use */
void   arena_get_stats(const arena_t *a, arena_stats_t *out);
/* Multi-line report of the last failed arena_alloc ("" if none). */
const char *arena_last_error(const arena_t *a);
/* Per-category current and high-water use, then the totals. */
void arena_print_report(const arena_t *a, FILE *f);
const char *mem_cat_name(mem_cat_t cat); /* "params", "grads", ... */

/* ------------------------------------------------------------------ */
/* Devices                                                             */
/* ------------------------------------------------------------------ */

typedef struct device {
    int rank, world;
    arena_t *arena; /* this device's memory; destroyed when the run ends */
} device_t;

typedef void (*device_main_fn)(device_t *dev, void *arg);

/* Runs fn(dev, arg) on `world` device threads, each with a fresh arena of
 * arena_capacity bytes (0: unlimited), and waits for all of them. Returns
 * 0, or -1 with a message for world < 1 or > PARITY_MAX_DEVICES, a
 * kernel limit the threads would cross (devices_check_limits), a live
 * group naming a rank >= world, a run already in progress (runs do not
 * nest), or a thread that could not be started (then no fn runs at all).
 * To keep figures past the run (arena peaks, results), copy them into arg
 * before fn returns. When 2 or more devices fit the CPUs this process may
 * use, each device is pinned to a CPU of its own (as MPI binds ranks to
 * cores; see device.c for the measurement); PARITY_PIN=0 turns that off. */
int devices_run(int world, size_t arena_capacity, device_main_fn fn, void *arg, perr_t *err);

/* Processes. By default every device is a thread of this one process.
 * Under mpirun the MPI transport (coll.h) makes this process one of P: a
 * run of P > 1 devices then starts only device runtime_process_rank()
 * here (one device per process; a run of another size than P, other
 * than a single device, is refused), its collectives cross processes,
 * and state the engine keeps in host memory is merged between
 * processes where it is read (coll_host_merge). A run of one device (a
 * check's golden run) stays in this process. */
void runtime_set_processes(int nprocs, int rank);
int  runtime_processes(void);    /* 1 unless the MPI transport is up */
int  runtime_process_rank(void); /* 0 .. runtime_processes() - 1 */
/* Whether the current run spans processes (its devices are elsewhere). */
int  runtime_run_distributed(void);
/* Whether this process runs device `rank` of the current (or next) run of
 * `world` devices: every one when the run stays here. */
int  runtime_hosts_device(int world, int rank);

/* Kernel limits that `world` more threads would cross: past them
 * pthread_create fails halfway through the launch (or a later mmap fails
 * inside a device), so devices_run refuses such a run up front, naming
 * the limit. Each device thread costs two mappings (its stack and the
 * guard page below it) and one pid; the headrooms cover the malloc heaps
 * and buffers a run maps later (about 200 mappings at 4096 devices) and
 * threads started meanwhile. -1: not readable (that limit is not
 * checked). */
enum { DEVICES_MAP_HEADROOM = 4096, DEVICES_THREAD_HEADROOM = 256 };
typedef struct {
    long maps, max_maps;         /* /proc/self/maps lines; vm.max_map_count */
    long threads;                /* threads on the host (/proc/loadavg) */
    long pid_max, threads_max;   /* kernel.pid_max, kernel.threads-max */
} host_limits_t;
void host_limits_read(host_limits_t *h);
/* 0, or -1 with a message naming the first limit crossed. */
int  devices_check_limits(int world, const host_limits_t *h, perr_t *err);

/* The calling device thread's device, or NULL outside device threads. */
device_t *device_self(void);
/* Makes the calling thread act as `dev` (device_self() returns it): for a
 * device's helper threads, such as a communication thread that reduces
 * gradient buckets while the device computes. It must make its calls on
 * groups of its own, never concurrently with the device's thread on the
 * same group, since a group's calls are sequenced per member. */
void device_bind_thread(device_t *dev);

/* State of device `rank` in the current (or last) run, readable from any
 * thread: what a hang report prints beside the collective a device waits in. */
typedef enum { DEVICE_NOT_STARTED, DEVICE_RUNNING, DEVICE_FINISHED } device_state_t;
device_state_t device_state(int rank);
/* World size of the current run, 0 when no run is in progress. */
int devices_world(void);
/* CPUs the current run may use (the affinity of the thread that called
 * devices_run, before devices were pinned); outside a run, the calling
 * thread's. Collectives spin only when devices_world() <= this. */
int devices_cpus(void);

/* Step-through mode (stepper.c): the run's devices take turns, one at a
 * time, handing a baton on at every wait of a collective or a
 * point-to-point transfer, in a fixed order (round robin by world rank;
 * with a focus device, that device only when no other can run). Same
 * code, same bits as the threaded run; a debugger stopping the running
 * device stops the whole step, and the watchdog is off unless
 * PARITY_COLL_TIMEOUT is set. A deadlock is reported as soon as no
 * device can run. */
/* For the runs that follow: on 0/1; focus_device -1 (none) or the device
 * that runs only when no other device can (implies on). Overrides the
 * environment. 0, or -1 for a focus outside 0 .. PARITY_MAX_DEVICES-1;
 * devices_run refuses a focus outside its world. */
int devices_set_step_through(int on, int focus_device, perr_t *e);
/* The mode the environment asks for: PARITY_STEP_THROUGH (0 or 1) and
 * PARITY_STEP_THROUGH_DEVICE (a device; implies 1). -1 with a message
 * naming the variable for any other value. */
int devices_step_env(int *on, int *focus_device, perr_t *e);
/* Whether the current run steps through. */
int devices_stepping(void);

/* What every device is doing (device_debug.c), for debuggers and hang
 * reports: ref/debug/parity_gdb.py reads parity_debug. A device thread
 * writes its own entry through the device_note_* calls (no-ops outside
 * device threads); coordinates are noted by whoever builds the grid. */
typedef enum {
    DEVICE_PASS_SETUP, DEVICE_PASS_FORWARD, DEVICE_PASS_BACKWARD, DEVICE_PASS_REDUCE,
    DEVICE_PASS_OPTIMIZER, DEVICE_PASS_DONE
} device_pass_t;
enum { DEVICE_DEBUG_AXES = 7 }; /* tp, tp2, tp3, cp, ep, dp, pp: grid.h's grid_axis_t order */
typedef struct {
    _Atomic int tid;           /* the device thread's Linux thread id (gdb's LWP) */
    _Atomic int has_coords;    /* coord[] was noted for this run */
    _Atomic int coord[DEVICE_DEBUG_AXES];
    _Atomic long long step;    /* -1 before the first */
    _Atomic int pass;          /* device_pass_t */
    _Atomic int unit;          /* the model unit (0 embedding .. L+1 head), -1 none */
    _Atomic int mb, chunk;     /* microbatch and model chunk of the pass, -1 none */
    _Atomic int blocked;       /* step-through: waiting for the baton to come back */
} device_debug_t;
typedef struct {
    _Atomic int world; /* devices of the current run, 0 between runs */
    _Atomic int baton; /* step-through: the device running, -1 none */
    _Atomic int grid[DEVICE_DEBUG_AXES]; /* the grid's size on each axis (coordinates noted) */
    device_debug_t dev[PARITY_MAX_DEVICES];
} parity_debug_t;
extern parity_debug_t parity_debug;
void device_debug_begin(int world); /* devices_run */
void device_debug_end(void);
void device_debug_thread(int rank); /* the device thread, on start */
void device_note_coords(int rank, const int coord[DEVICE_DEBUG_AXES],
                        const int sizes[DEVICE_DEBUG_AXES]);
void device_note_step(int64_t step);
void device_note_pass(device_pass_t pass, int unit);
void device_note_microbatch(int mb, int chunk);
const char *device_pass_name(device_pass_t p);

/* ------------------------------------------------------------------ */
/* Rank layouts (Megatron order strings, first dimension fastest)      */
/* ------------------------------------------------------------------ */

#define LAYOUT_MAX_DIMS 8

typedef struct {
    int ndims;
    char names[LAYOUT_MAX_DIMS][8]; /* in order, e.g. tp cp ep dp pp */
    int sizes[LAYOUT_MAX_DIMS];
    int world;                      /* product of sizes */
    /* An explicit rank list (layout_init_mapped), or none (mapped 0): the
     * order's formula gives every coordinate a canonical position c, and
     * rank_at[c] is the world rank there; pos_of is its inverse. */
    int mapped;
    unsigned short rank_at[PARITY_MAX_DEVICES], pos_of[PARITY_MAX_DEVICES];
} rank_layout_t;

/* order: dimension names joined by '-', each one of tp, cp, ep, dp, pp at
 * most once. sizes: "name=N" joined by ',' (NULL or "" = all 1); a
 * dimension without a size has size 1, and one the order leaves out may
 * only be given as 1. Errors name the field and value. */
int  layout_init(rank_layout_t *L, const char *order, const char *sizes, perr_t *e);
/* layout_init, then ranks[c] (n = the world entries, a permutation of
 * 0..world-1) is the world rank at canonical position c, the rank the
 * order's formula alone would give: every coordinate, group and rank
 * below follows the list. n 0 (ranks NULL or not): layout_init. Errors
 * name the rank list and what was expected. */
int  layout_init_mapped(rank_layout_t *L, const char *order, const char *sizes,
                        const unsigned short *ranks, int n, perr_t *e);
/* Whether ranks[0..n) is a permutation of 0..world-1; the message says
 * which entry is not (a rank out of range or there twice) or that the
 * length is not the world's, and what was expected; the caller names
 * the list. */
int  layout_check_ranks(const unsigned short *ranks, int n, int world, perr_t *e);
/* Coordinate of rank along dim; 0 for a known dimension the order does
 * not name (size 1), -1 for an unknown name or a rank out of range. */
int  layout_coord(const rank_layout_t *L, int rank, const char *dim);
int  layout_size(const rank_layout_t *L, const char *dim); /* 1 if absent, -1 unknown */
/* coords[i] is the coordinate along L->names[i]; -1 if out of range. */
int  layout_rank_of(const rank_layout_t *L, const int *coords);
/* The ranks that differ from `rank` only along `dims` ("dp", or several
 * joined by '-': "dp-cp"), ordered by their combined index over those
 * dimensions, the layout's order deciding which varies fastest (as in
 * Megatron, "dp-cp" and "cp-dp" name the same group). Writes them to
 * ranks_out (room for L->world) and returns how many, or -1 for an
 * unknown dimension name or a rank out of range. */
int  layout_group_ranks(const rank_layout_t *L, int rank, const char *dims, int *ranks_out);
/* How many such groups there are, and which one `rank` belongs to
 * (groups are numbered by the combined index of the other dimensions). */
int  layout_num_groups(const rank_layout_t *L, const char *dims);
int  layout_group_id(const rank_layout_t *L, int rank, const char *dims);
/* "tp groups: [0,1] [2,3] ..." for every dimension, then rank -> coords. */
void layout_print_map(const rank_layout_t *L, FILE *f);

/* ------------------------------------------------------------------ */
/* Process groups                                                      */
/* ------------------------------------------------------------------ */

typedef struct group group_t;

/* A group of n devices given by world rank; group index i is
 * world_ranks[i]. Usually created by the main thread before devices_run
 * and shared by the member threads. Errors: n < 1, a negative, duplicate
 * or too large rank (inside a run: >= the run's world). The name (copied,
 * up to 63 characters) appears in every error and hang report. */
group_t *group_create(const int *world_ranks, int n, const char *name, perr_t *e);
void     group_destroy(group_t *g);
int      group_size(const group_t *g);
/* Index of the calling device thread in g, or -1 if it is not a member
 * (or the caller is not a device thread). */
int      group_rank(const group_t *g);
int      group_world_rank(const group_t *g, int group_index);
/* Index of world rank r in g, or -1. */
int      group_index_of(const group_t *g, int world_rank);
const char *group_name(const group_t *g);

/* Creates every group of a layout along dims: out[layout_group_id(...)]
 * for each of the layout_num_groups(L, dims) groups, named prefix0,
 * prefix1, ... Returns 0, or -1 (nothing left allocated). */
int  group_create_all(const rank_layout_t *L, const char *dims, const char *prefix,
                      group_t **out, perr_t *e);
/* The same for a layout whose rank 0 is world rank first_rank (one mesh
 * of several, mesh.h): every member is shifted by first_rank. */
int  group_create_all_at(const rank_layout_t *L, const char *dims, const char *prefix,
                         int first_rank, group_t **out, perr_t *e);
/* The same again for meshes placed by a rank list (mesh.h): the member at
 * position first_rank + local is world rank rank_at[first_rank + local]
 * (rank_at NULL: first_rank + local). */
int  group_create_all_mapped(const rank_layout_t *L, const char *dims, const char *prefix,
                             int first_rank, const unsigned short *rank_at, group_t **out,
                             perr_t *e);
void group_destroy_all(group_t **groups, int n);

#endif
