/* coll.h - collectives between device threads (layer 2 of DESIGN.md).
 *
 * Every call is made by all members of a group, NCCL/MPI style, from the
 * member's own device thread; peer and root arguments are group indices.
 * Buffers are the callers' own memory: each rank publishes its pointers
 * and the others read (or write) them directly, so nothing is staged.
 * A call returns when the caller's buffers are its own again.
 *
 * Correctness first:
 *  - Every call records (kind, dtype, op, count, root, algorithm) with a
 *    per-group sequence number, and all members must agree before any
 *    data moves. A disagreement is fatal and names both calls:
 *      collective mismatch in group 'dp0' call #7: rank 0 (world 0) called
 *      all_reduce(f32, sum, count=1024) but rank 1 (world 2) called
 *      all_reduce(f32, sum, count=512)
 *    A call from a thread that is not a member is fatal too.
 *  - A watchdog: a rank that waits longer than the timeout (env
 *    PARITY_COLL_TIMEOUT seconds, default 120, or coll_set_timeout) prints
 *    for EVERY device what it is doing (waiting in which collective of
 *    which group, running, finished) and exits non-zero. A missing rank
 *    gives that report, never a silent hang.
 *  - Waiting spins briefly, then sleeps on a futex, so 32 devices on 2
 *    cores do not melt down.
 *
 * Types and ops. COLL_XACC elements are xacc_t (parity/xacc.h); their sum
 * is the exact xacc_merge, and the result is written in canonical form
 * (carries propagated), so it has the same BITS for every algorithm, rank
 * order and grouping; max/min on COLL_XACC are errors. Integer sums wrap
 * modulo 2^32 / 2^64 (two's complement), so they are exact in any order
 * as well. fp32 sums are plain fp32 additions in a fixed order per
 * algorithm (documented at each algorithm below); they drift between
 * algorithms by design: that drift is what the exact types remove.
 * fp32 max/min order the values -inf < ... < -0 < +0 < ... < +inf, and
 * any NaN makes the result the canonical quiet NaN 0x7fc00000, so max/min
 * never depend on order either. COLL_XVEC, open exact sums (xvec_t), has
 * entry points of its own (coll_*_open, below).
 *
 * Algorithms (per calling thread, coll_set_algo; default from env
 * PARITY_COLL_ALGO=direct|ring, else direct; all members must agree):
 *  - COLL_ALGO_DIRECT: shared memory. All-reduce: rank i reduces slice i
 *    of the buffer from every peer's send buffer, in group order
 *    ((x0 + x1) + x2) + ..., and writes the result into every peer's
 *    receive buffer. Reduce-scatter and reduce use the same order. A small
 *    call (a few KiB when every device has a core, up to 64 KiB of data
 *    when devices outnumber cores; PARITY_COLL_WHOLE_BYTES overrides) is
 *    done entirely by the last rank to arrive, in the same order, while
 *    the others wait: one barrier instead of two and no wake-up round.
 *  - COLL_ALGO_RING: the classic ring. Reduce-scatter runs n-1 steps of
 *    neighbour hand-offs, then all-gather n-1 more; chunk c is summed
 *    starting at rank c+1: ((x[c+1] + x[c+2]) + ...) + x[c] (indices mod
 *    n). Reduce is a pipelined chain ending at the root (starting at
 *    root+1, the same order as chunk `root`). Broadcast and all-gather are
 *    ring pipelines. All-to-all(v) and barrier move data the same way
 *    under both settings.
 *
 * In-place conventions (NCCL's, which the MPI_IN_PLACE forms map onto):
 *  - all-reduce, reduce (at the root), broadcast: send == recv.
 *  - reduce-scatter: recv == send + rank * recv_count (block `rank` is
 *    reduced where it already lies).
 *  - all-gather: send == recv + rank * send_count (this rank's block is
 *    already in place).
 * Any other overlap of send and recv is a fatal error, as is in-place
 * all-to-all(v).
 *
 * Byte counters follow nccl-tests. For a call moving S bytes (S = count *
 * element size for all-reduce, broadcast and reduce; the whole n-block
 * buffer for reduce-scatter, all-gather and all-to-all), algbw = S / time
 * and busbw = algbw * factor, with factor 2(n-1)/n for all-reduce,
 * (n-1)/n for reduce-scatter, all-gather and all-to-all, 1 for broadcast
 * and reduce. A rank's counters add S to `bytes` and S * factor to
 * `bus_bytes`, and count as sent and received the bytes a bandwidth-
 * optimal algorithm moves through that rank's link: S*factor each way
 * for the symmetric collectives; for broadcast the root sends S and every
 * other rank receives S; for reduce every non-root sends S and the root
 * receives S; all-to-all-v and send/recv count their actual bytes to and
 * from other ranks. With one rank nothing is sent.
 */
#ifndef PARITY_COLL_H
#define PARITY_COLL_H

#include <stddef.h>
#include <stdint.h>

#include "parity/runtime.h"
#include "parity/xacc.h"

typedef enum { COLL_F32, COLL_I32, COLL_I64, COLL_XACC, COLL_XVEC, COLL_NDTYPES } coll_dtype_t;
typedef enum { COLL_SUM, COLL_MAX, COLL_MIN, COLL_NOPS } coll_op_t;
typedef enum { COLL_ALGO_DIRECT, COLL_ALGO_RING, COLL_NALGOS } coll_algo_t;

typedef enum {
    COLL_KIND_ALL_REDUCE,
    COLL_KIND_REDUCE_SCATTER,
    COLL_KIND_ALL_GATHER,
    COLL_KIND_BROADCAST,
    COLL_KIND_REDUCE,
    COLL_KIND_ALL_TO_ALL,
    COLL_KIND_ALL_TO_ALL_V,
    COLL_KIND_BARRIER,
    COLL_KIND_SEND,
    COLL_KIND_RECV,
    COLL_NKINDS
} coll_kind_t;

/* COLL_XVEC: 8, the fp64 sum an open element travels as (its exceptions
 * come on top, see the open sums below). */
size_t      coll_dtype_size(coll_dtype_t dt); /* 4, 4, 8, sizeof(xacc_t), 8 */
const char *coll_dtype_name(coll_dtype_t dt); /* "f32", "i32", "i64", "xacc", "xvec" */
const char *coll_op_name(coll_op_t op);       /* "sum", "max", "min" */
const char *coll_algo_name(coll_algo_t a);    /* "direct", "ring" */
const char *coll_kind_name(coll_kind_t k);    /* "all_reduce", ... */

/* ---- collectives (every member of g calls, in the same order) ---- */

/* recv[k] = op over ranks of send[k], k < count. */
void coll_all_reduce(group_t *g, const void *send, void *recv, size_t count, coll_dtype_t dt,
                     coll_op_t op);
/* send holds n blocks of recv_count; rank i receives op over ranks of block i. */
void coll_reduce_scatter(group_t *g, const void *send, void *recv, size_t recv_count,
                         coll_dtype_t dt, coll_op_t op);
/* recv holds n blocks of send_count; block j is rank j's send. */
void coll_all_gather(group_t *g, const void *send, void *recv, size_t send_count, coll_dtype_t dt);
/* buf of every rank := buf of root. */
void coll_broadcast(group_t *g, void *buf, size_t count, coll_dtype_t dt, int root);
/* recv at root := op over ranks of send; recv is ignored (may be NULL)
 * on other ranks. */
void coll_reduce(group_t *g, const void *send, void *recv, size_t count, coll_dtype_t dt,
                 coll_op_t op, int root);
/* Block j of rank i's send goes to block i of rank j's recv; blocks hold
 * count_per_peer elements. */
void coll_all_to_all(group_t *g, const void *send, void *recv, size_t count_per_peer,
                     coll_dtype_t dt);
/* Rank i sends send_counts[j] elements from send + send_displs[j] to rank
 * j, which receives them at recv + recv_displs[i] and must list the same
 * number in recv_counts[i] (else fatal, naming both ranks). Counts and
 * displacements are in elements; arrays have group_size entries. */
void coll_all_to_all_v(group_t *g, const void *send, const size_t *send_counts,
                       const size_t *send_displs, void *recv, const size_t *recv_counts,
                       const size_t *recv_displs, coll_dtype_t dt);
void coll_barrier(group_t *g);

/* ---- point-to-point: peers are group indices; (sender, receiver, tag)
 * messages match in the order they were posted, as in MPI. A send
 * completes when the receiver has the data (synchronous, like MPI_Ssend),
 * so an unsafe ordering deadlocks every time, not only for large
 * messages; the watchdog then reports it. Count and dtype of matching
 * send and receive must agree (else fatal, naming both). ---- */

typedef struct coll_request coll_request_t;

void coll_send(group_t *g, const void *buf, size_t count, coll_dtype_t dt, int peer, int tag);
void coll_recv(group_t *g, void *buf, size_t count, coll_dtype_t dt, int peer, int tag);
/* Non-blocking forms: the buffer must stay untouched until the request is
 * waited. Every request must be waited exactly once; waiting frees it. */
coll_request_t *coll_isend(group_t *g, const void *buf, size_t count, coll_dtype_t dt, int peer,
                           int tag);
coll_request_t *coll_irecv(group_t *g, void *buf, size_t count, coll_dtype_t dt, int peer, int tag);
void coll_wait(coll_request_t *req);
void coll_wait_all(int n, coll_request_t **reqs); /* NULL entries are skipped */

/* ---- open exact sums (xvec_t, parity/xacc.h) as a collective type ----
 *
 * Every element of a result is the EXACT sum over ranks of the elements
 * given, still open (unrounded), so any algorithm, rank order or grouping
 * gives the same exact value, and rounding it once (xvec_round, or
 * xvec_get and xacc_round_f32) gives the same bits as merging every
 * rank's vector into one xvec in any order. inf and NaN terms follow
 * xacc.h's rules whatever the order. This is how a layer leaves its
 * output open and lets the reduction finish it (DESIGN.md §6): tensor
 * parallelism all-reduces row-parallel outputs, sequence parallelism
 * reduce-scatters along tokens, data parallelism reduces gradient
 * buckets, a pipeline stage returns a gradient to its owner.
 *
 * Ranges are (xvec, offset, count) in elements. The collectives are
 * checked like every other (dtype "xvec", so a rank calling the fp32
 * all-reduce while another calls the open one is a mismatch naming both
 * calls), are watched by the watchdog and take both algorithms
 * (coll_set_algo), with the slices and chunks described above:
 *  - direct: each rank sums its slice of every peer's vector into a
 *    partial of its own; after a barrier every rank copies every slice
 *    into its own vector (reduce-scatter: its block, straight into recv);
 *  - ring: partial sums pass around the ring in chunks (reduce-scatter
 *    steps), then finished chunks do (all-gather steps).
 * COLL_XVEC given to the other entry points is an error.
 *
 * A vector given to a call belongs to the call until it returns (to the
 * request's wait for the non-blocking forms): other threads read it, and
 * results are stored by its owner's thread, or, for a small call, by the
 * last rank to arrive while the owner waits. A lazily zeroed vector
 * (xvec_zero) may be passed anywhere; it is cleared first when only part
 * of it is written, claimed (never cleared) when all of it is.
 *
 * Wire format and counters: an element moves as its fp64 sum (8 bytes)
 * plus, when it is slow (xvec_is_slow), its xacc_t: the exception
 * payload. S counts 8 bytes an element (count for all-reduce, the n
 * blocks for reduce-scatter) and bus_bytes S times the usual factor;
 * sent/recv count the fp64 traffic by the same rules as the other types
 * plus sizeof(xacc_t) for every slow element each rank actually sent or
 * received, which depends on the data and on the algorithm. */

/* v[offset + k] := the exact sum over ranks of v[offset + k], k < count,
 * in place on every rank. */
void coll_all_reduce_open(group_t *g, xvec_t *v, size_t offset, size_t count);
/* send[send_offset ...] holds n blocks of recv_count elements; rank i's
 * recv[recv_offset + k] := the exact sum over ranks of block i's element
 * k. recv's elements are OVERWRITTEN (stored), not added to. In place:
 * recv == send and recv_offset == send_offset + rank * recv_count; recv
 * may otherwise be the send vector only outside send's range. */
void coll_reduce_scatter_open(group_t *g, const xvec_t *send, size_t send_offset, xvec_t *recv,
                              size_t recv_offset, size_t recv_count);
/* Point-to-point, matched and synchronous like coll_send/coll_recv (dtype
 * "xvec" in mismatch reports). A receive ADDS, exactly: v[offset + k] +=
 * the sender's element k. So several messages received into one range
 * (gradients returned to their owner by several stages, or by the same
 * peer over time) sum to the same bits in any arrival order, and a
 * receive into a freshly zeroed vector is a copy. Outstanding receives
 * into one vector, and sends from a vector being received into, are safe:
 * deliveries touching the same vector are serialised. */
void coll_send_open(group_t *g, const xvec_t *v, size_t offset, size_t count, int peer, int tag);
void coll_recv_open(group_t *g, xvec_t *v, size_t offset, size_t count, int peer, int tag);
coll_request_t *coll_isend_open(group_t *g, const xvec_t *v, size_t offset, size_t count, int peer,
                                int tag);
coll_request_t *coll_irecv_open(group_t *g, xvec_t *v, size_t offset, size_t count, int peer,
                                int tag);

/* ---- configuration ---- */

/* Sets the calling thread's algorithm; returns the previous one. */
coll_algo_t coll_set_algo(coll_algo_t algo);
coll_algo_t coll_get_algo(void);
/* Parses PARITY_COLL_ALGO: 0 with *out set (direct when unset), or -1
 * with a message naming the bad value. The first collective a thread
 * makes calls this and treats an error as fatal. */
int coll_algo_from_env(coll_algo_t *out, perr_t *e);
/* Every PARITY_COLL_* variable (ALGO, TIMEOUT, WHOLE_BYTES, SPIN_US,
 * YIELD_US) at once, for a check at start-up: 0, or -1 with a message
 * naming the variable and its valid range. The collectives refuse the
 * same values where they read them (coll_die). */
int coll_env_check(perr_t *e);
/* Watchdog timeout in seconds for every thread; returns the previous one.
 * Before the first call, PARITY_COLL_TIMEOUT (a positive number) sets it. */
double coll_set_timeout(double seconds);
double coll_get_timeout(void);

/* ---- byte counters (see the conventions above) ----
 *
 * Besides the totals by kind, a rank's calls are tallied by family and
 * dtype, so that traffic of different parallel axes on one device can be
 * told apart (tensor parallelism's all-reduces of open sums from data
 * parallelism's loss and norm, which are all-reduces too). A call's
 * family is its group's name without the trailing index: "tp" for tp0,
 * tp1, ...; "dp", "dp-grads", "world" (the grid names its groups so,
 * grid.h); the first COLL_FAMILY_NAME - 1 characters. A rank keeps
 * COLL_MAX_FAMILIES families from its last reset on; calls of any further
 * one are tallied under the last, named "*". coll_counters_add names no
 * group: family "". */

typedef struct {
    uint64_t calls, bytes, bus_bytes, sent, recv; /* as the totals below */
} coll_tally_t;

enum { COLL_MAX_FAMILIES = 8, COLL_FAMILY_NAME = 16 };

typedef struct {
    char name[COLL_FAMILY_NAME];
    coll_tally_t by[COLL_NKINDS][COLL_NDTYPES];
} coll_family_t;

typedef struct {
    uint64_t calls[COLL_NKINDS];
    uint64_t bytes[COLL_NKINDS];     /* S, the algbw numerator */
    uint64_t bus_bytes[COLL_NKINDS]; /* S * busbw factor */
    uint64_t sent[COLL_NKINDS], recv[COLL_NKINDS];
    int nfamilies;                   /* in order of first use */
    coll_family_t family[COLL_MAX_FAMILIES];
} coll_counters_t;

/* Counters of one world rank, accumulated over runs until reset. */
void   coll_counters_get(int world_rank, coll_counters_t *out);
/* -1: every rank. Zeroes the tallies and forgets the families; call it
 * while the rank has no call in flight (at the start of a run). */
void   coll_counters_reset(int world_rank);
/* A family's tallies in a snapshot, or NULL when the rank made no call in it. */
const coll_family_t *coll_counters_family(const coll_counters_t *c, const char *family);
/* Adds one call of `kind` moving S = bytes of open sums (COLL_XVEC, busbw
 * factor `factor`) to a rank's counters: for data movement built by hand
 * above this layer. The open-sum collectives (coll_*_open) count
 * themselves; nothing in parity calls this today. */
void   coll_counters_add(int world_rank, coll_kind_t kind, uint64_t bytes, double factor);
/* nccl-tests' busbw factor for a collective over n ranks. */
double coll_busbw_factor(coll_kind_t kind, int n);

/* ---- transports: shared memory, or MPI across processes ----
 *
 * Shared memory is the default: devices are threads of one process and
 * read each other's buffers (the algorithms above). Launched by mpirun,
 * coll_mpi_init makes this process one of P (runtime.h: one device per
 * process, world rank = MPI rank) and every collective of a run of P
 * devices travels as MPI messages instead (ref/coll/mpi/):
 *  - each call first exchanges its record (kind, dtype, op, count, root,
 *    algorithm, sequence number) with every member, and a disagreement
 *    is fatal with the same message as above, before any data moves;
 *  - data moves as the direct algorithm moves it (rank i reduces slice i
 *    of every member's buffer, then sends the result to all), and an
 *    fp32 sum adds in the order of the algorithm the call names (direct:
 *    group order; ring: chunk c from rank c + 1 on), so the bits are the
 *    shared-memory run's for either setting; exact types are exact;
 *  - open sums travel in the wire format described above (the fp64 sums,
 *    then each slow element's index and xacc_t);
 *  - point-to-point messages carry (dtype, count) ahead of the data and
 *    the receiver checks them (a mismatch names both ranks); sends are
 *    synchronous (MPI_Issend), as here;
 *  - the watchdog names the members whose messages never came and stops
 *    every process (MPI_Abort); a fatal error in any process does too.
 * Counters count the same bytes as the shared-memory run. */

/* Under mpirun (OMPI_COMM_WORLD_SIZE or PMIX_RANK set): initialises MPI
 * with MPI_THREAD_MULTIPLE and tells the runtime this process's place.
 * Otherwise does nothing. 0, or -1 with a message (MPI missing from the
 * build, or no thread support). */
int  coll_mpi_init(int *argc, char ***argv, perr_t *e);
/* MPI_Finalize on a normal exit (every process must get here); a no-op
 * when MPI is not up. An exit without it stops every process. */
void coll_mpi_finalize(void);
/* Whether this build has the MPI transport; whether mpirun started this
 * process (MPI is up, even with one process). */
int  coll_mpi_built(void);
int  coll_mpi_launched(void);
/* "shm" or "mpi": the transport of the current run. */
const char *coll_transport_name(void);
/* A barrier of the processes outside any run, without the watchdog: one
 * process may take long alone (a check's golden run) while the others
 * wait here. No-op with one process. */
void coll_processes_barrier(void);

/* Before any work, every process must have been given the same things
 * (ref/coll/mpi/mpi_agree.c). coll_processes_agree_args compares the
 * argument lists and every PARITY_* variable; a difference names the
 * process and the first differing argument or variable. Then
 * coll_processes_agree_items compares what the arguments resolved to
 * (the model config, the layout, the data, a checkpoint: digests of
 * each item's bytes). Every process reaches the same verdict at once:
 * 0, or -1 with the same message on each, and then
 * coll_processes_stopped_together() is 1 (the processes may end with
 * MPI_Finalize, as on success, instead of stopping each other). No-ops
 * with one process. */
typedef struct {
    const char *what;   /* "the model config" */
    const char *source; /* where it came from, for the message: "--model and its file" */
    const void *data;
    size_t len;
} coll_agree_item_t;
enum { COLL_AGREE_MAX_ITEMS = 16 };
int coll_processes_agree_args(int argc, char **argv, perr_t *e);
int coll_processes_agree_items(int n, const coll_agree_item_t *items, perr_t *e);
int coll_processes_stopped_together(void);
/* Every process failed alike (an agreement proved it): they end
 * together, as after a refused agreement. */
void coll_processes_stop_together(void);

/* Host memory the engine keeps beside its devices (reassembled tensors,
 * per-device figures) is one copy per process. Every member of g calls
 * these, from its device thread; g must hold every device of the run.
 * With one process they are a barrier (the copy is shared already).
 * Across processes:
 *  - coll_host_merge: buf becomes, in every process, OR of the
 *    processes' bytes (each wrote its own elements into zeros), or the
 *    elementwise max of int32 / fp64 values;
 *  - coll_host_gather: the process of group rank 0 gets every other
 *    process's `len` bytes through take(ctx, process, data, len), in
 *    process order (its own are already in place). */
typedef enum { COLL_MERGE_OR, COLL_MERGE_MAX_I32, COLL_MERGE_MAX_F64 } coll_merge_t;
void coll_host_merge(group_t *g, void *buf, size_t bytes, coll_merge_t how);
typedef void (*coll_host_take_fn)(void *ctx, int process, const void *data, size_t len);
void coll_host_gather(group_t *g, const void *mine, size_t len, coll_host_take_fn take, void *ctx);

/* ---- host memory of the collectives' own bookkeeping ----
 * Group state, p2p channels, ring scratch and pending requests: what the
 * layer costs beyond the devices' arenas, in bytes, now and at its peak.
 * A group holds a slot per member (a few hundred bytes each) from its
 * first collective until group_destroy, built once however many members
 * arrive together; point-to-point adds a row of n pointers per member
 * that talks and a channel per pair that talks, so groups that never use
 * send/recv (data parallelism) pay nothing for it. */
void coll_host_memory(size_t *in_use, size_t *peak); /* either may be NULL */
void coll_host_memory_reset_peak(void);              /* peak := in use now */

#endif
