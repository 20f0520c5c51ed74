/* coll_impl.h - the collectives' shared internals (not public API).
 *
 * Per group, each member owns a slot where it publishes the call it is
 * making (kind, dtype, op, count, root, algorithm, buffer pointers) and,
 * for the ring, a progress counter its neighbours wait on. A group-wide
 * arrival counter implements barriers. Publication is double-buffered by
 * the parity of the call's sequence number: a member can only be one call
 * ahead of the slowest reader (call k+1's arrival barrier cannot complete
 * before everyone has left call k), so call k's record stays readable.
 */
#ifndef PARITY_COLL_IMPL_H
#define PARITY_COLL_IMPL_H

#include <pthread.h>
#include <stdalign.h>
#include <stdatomic.h>
#include <stdint.h>

#include "../runtime/runtime_internal.h"
#include "parity/coll.h"

#define COLL_CACHE_LINE 64
/* Ring pipelines (broadcast, reduce) move data in pieces of this size. */
#define COLL_PIPE_BYTES ((size_t)256 * 1024)

/* A 32-bit word threads can sleep on (a futex) until it reaches a value.
 * Values wrap; "reached" means (int32_t)(value - target) >= 0. */
typedef struct {
    _Atomic uint32_t value;
    _Atomic uint32_t waiters; /* sleepers: wakers skip the syscall when 0 */
} wword_t;

/* What a member publishes for one call. */
typedef struct {
    int kind, dtype, op, algo, root; /* op/root -1 where they do not apply */
    size_t count;
    uint64_t seq; /* the member's call number on this group */
    const void *send;
    void *recv;
    const size_t *send_counts, *send_displs, *recv_counts, *recv_displs;
    size_t send_off, recv_off; /* open sums: send and recv are xvec_t, these
                                  are element offsets into them */
    void *scratch;           /* ring partial sums (reduce-scatter, reduce) */
    uint32_t progress_base;  /* the member's progress counter at entry */
} coll_call_t;

typedef struct p2p_channels p2p_channels_t;

typedef struct {
    alignas(COLL_CACHE_LINE) coll_call_t call[2]; /* by seq & 1 */
    alignas(COLL_CACHE_LINE) wword_t progress;     /* ring hand-offs, owner writes */
    /* Open-sum partials (coll_open_algo.c): the owner rebuilds them only
     * after a call's arrival barrier, peers read them after a barrier or a
     * ring hand-off of that call, so no reader outlives a call. */
    alignas(COLL_CACHE_LINE) xvec_t open[2];
    double *open_mem[2]; /* their sum[] storage, open_cap[k] doubles */
    size_t open_cap[2];
    /* Owner-only from here on. */
    alignas(COLL_CACHE_LINE) uint64_t seq; /* calls made on this group */
    uint64_t phase;                        /* barrier phases passed */
    void *scratch;
    size_t scratch_bytes;
} coll_member_t;

typedef struct {
    int n;
    coll_member_t *members; /* [n] */
    p2p_channels_t *p2p;    /* channels of the pairs that have talked (coll_p2p.c) */
    alignas(COLL_CACHE_LINE) _Atomic uint64_t arrivals; /* barrier arrivals, ever */
    alignas(COLL_CACHE_LINE) wword_t gen;               /* last completed phase */
} coll_state_t;

/* Everything one call needs, on the caller's stack. */
typedef struct {
    group_t *g;
    coll_state_t *cs;
    int me, n, world_rank;
    uint64_t seq;
    coll_member_t *self;
    coll_call_t *call; /* my published record */
    size_t esize;      /* element size */
    int whole;         /* small call: the last rank to arrive does all of it */
} coll_ctx_t;

static inline coll_call_t *peer_call(const coll_ctx_t *c, int j) {
    return &c->cs->members[j].call[c->seq & 1];
}

static inline int coll_use_ring(const coll_ctx_t *c) {
    return c->call->algo == COLL_ALGO_RING && c->n > 1;
}

/* ---- coll.c: the steps of every collective entry point ---- */
/* Who am I in g (fatal when not a member or not a device thread). */
void coll_bind(coll_ctx_t *c, group_t *g, coll_kind_t kind);
coll_call_t coll_make_call(coll_kind_t kind, coll_dtype_t dt, int op, size_t count, int root,
                           const void *send, void *recv);
/* Fatal: "coll_<kind> on group '...', rank r (world w): <msg>; the call was ...". */
_Noreturn void coll_bad_call(const coll_ctx_t *c, const coll_call_t *d, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
int coll_overlap(const void *a, size_t an, const void *b, size_t bn);
/* Publishes the record, waits for every member and checks agreement; the
 * last to arrive does a small call whole (c->whole: nothing left to do). */
void coll_arrive(coll_ctx_t *c, const coll_call_t *d);
/* The whole call on the run's transport: shared memory (arrive, then the
 * algorithm) or, when the run spans processes, messages (ref/coll/mpi/). */
void coll_run(coll_ctx_t *c, coll_call_t *d);
/* "all_reduce(f32, sum, count=4, algo=ring)" for error messages. */
void coll_format_call(char *buf, size_t n, const coll_call_t *d, int show_algo);
int  coll_same_call(const coll_call_t *a, const coll_call_t *b);
/* Clears the watchdog's activity and counts the call. */
void coll_leave(coll_ctx_t *c, uint64_t bytes, uint64_t sent, uint64_t recvd);

/* ---- coll_wait.c: sleeping, waking, the watchdog ---- */
void coll_wword_wait(wword_t *w, uint32_t target);
void coll_wword_set(wword_t *w, uint32_t value);
static inline uint32_t coll_wword_get(wword_t *w) {
    return atomic_load_explicit(&w->value, memory_order_acquire);
}

/* ---- ring hand-offs (coll_ring.c, coll_open_algo.c) ----
 * A member counts the steps of the current call it has finished in its
 * progress word, from the value it published on entry (progress_base). */
static inline int coll_mod(int a, int n) { return ((a % n) + n) % n; }

/* Waits until member j has finished `steps` steps of this call. */
static inline void ring_wait_steps(const coll_ctx_t *c, int j, uint32_t steps) {
    coll_wword_wait(&c->cs->members[j].progress, peer_call(c, j)->progress_base + steps);
}

static inline void ring_done_steps(const coll_ctx_t *c, uint32_t steps) {
    coll_wword_set(&c->self->progress, c->call->progress_base + steps);
}
/* The group barrier: returns when every member has arrived. */
void coll_barrier_wait(coll_ctx_t *c);
/* The same, but the last member to arrive runs hook(c) before it lets the
 * others go: every member is then inside the barrier, so all published
 * records and buffers are stable. */
void coll_barrier_hook(coll_ctx_t *c, void (*hook)(coll_ctx_t *));
/* What the watchdog prints for a device: set on entry, cleared on exit.
 * The table is also what ref/debug/parity_gdb.py's `parity where` reads
 * (by name: keep the fields' names). */
typedef struct {
    alignas(COLL_CACHE_LINE) _Atomic(group_t *) group; /* NULL: not in a collective */
    _Atomic int kind, peer, tag;                       /* peer, tag: send and recv */
    _Atomic uint64_t seq;                              /* the call's number on group */
} coll_activity_t;
extern coll_activity_t coll_activity[PARITY_MAX_DEVICES];
void coll_activity_enter(int world_rank, group_t *g, coll_kind_t kind, uint64_t seq, int peer,
                         int tag);
void coll_activity_exit(int world_rank);
/* Reports once for the whole process and exits; any other thread that
 * gets here meanwhile just waits for the exit. */
_Noreturn void coll_die(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
int64_t coll_timeout_ns(void);
/* CPUs the run may use (devices_cpus: the mask before pinning). */
int coll_cores(void);
/* getenv(name) as a number in [0, max] (an integer when asked): *out = -1
 * when unset or empty; -1 with a message naming the variable otherwise. */
enum { COLL_ENV_MAX_US = 1000000000 };
#define COLL_ENV_MAX_BYTES 1e12
int coll_env_number(const char *name, double max, int integer, double *out, perr_t *e);

/* ---- coll_config.c: the group's state, the layer's host memory ---- */
/* The group's state, built once (by whichever member gets there first). */
coll_state_t *coll_state_of(group_t *g);
/* Grows the calling member's ring scratch to at least bytes. */
void *coll_scratch(coll_ctx_t *c, size_t bytes);
/* Zero-filled and cache-line aligned, counted in coll_host_memory; fatal
 * when the host is out of memory. coll_free takes the size allocated. */
void *coll_alloc(size_t bytes);
void  coll_free(void *p, size_t bytes);

/* ---- coll_counters.c ---- */
/* One call of `kind` on `dt` over g, by world rank (g names the family
 * the call is also tallied under, coll.h; NULL: family ""). */
void coll_count(int world_rank, const group_t *g, coll_kind_t kind, coll_dtype_t dt,
                uint64_t bytes, double factor, uint64_t sent, uint64_t recvd);
/* Adds to sent and recv only (no call, no S): payload whose size only the
 * data knows, such as an open sum's exceptions, counted where it moves. */
void coll_count_traffic(int world_rank, const group_t *g, coll_kind_t kind, coll_dtype_t dt,
                        uint64_t sent, uint64_t recvd);

/* ---- coll_reduce.c: elementwise kernels ---- */
/* dst[k] = ((src[0][k] op src[1][k]) op src[2][k]) ... for k < count.
 * dst may be one of the sources element for element (never shifted).
 * xacc results are written in canonical form. */
void coll_reduce_into(void *dst, const void *const *src, int nsrc, size_t count, coll_dtype_t dt,
                      coll_op_t op);
/* Canonical copy (xacc) or plain copy (others), for one-rank groups. */
void coll_copy_canonical(void *dst, const void *src, size_t count, coll_dtype_t dt);
/* Elements per 64-byte line (at least 1): chunk boundaries align to it. */
size_t coll_align_elems(coll_dtype_t dt);

/* ---- coll_direct.c and coll_ring.c ---- */
/* Chunk i of n over count elements: [i L, (i+1) L) clipped to count, with
 * L = ceil(count / n) rounded up to `align` elements (a cache line): the
 * direct algorithms' slices and the ring's chunks. */
void coll_chunk(size_t count, int n, int i, size_t align, size_t *lo, size_t *hi);
/* Whether a call is small enough for the last arriver to do it whole
 * (a function of the agreed record only, so every member decides alike). */
int  direct_whole_eligible(const coll_call_t *d, int n);
void direct_whole(coll_ctx_t *c); /* the whole call, for every member */
void direct_all_reduce(coll_ctx_t *c);
void direct_reduce_scatter(coll_ctx_t *c);
void direct_all_gather(coll_ctx_t *c);
void direct_broadcast(coll_ctx_t *c);
void direct_reduce(coll_ctx_t *c);
void direct_all_to_all(coll_ctx_t *c);
void direct_all_to_all_v(coll_ctx_t *c);
void ring_all_reduce(coll_ctx_t *c);
void ring_reduce_scatter(coll_ctx_t *c);
void ring_all_gather(coll_ctx_t *c);
void ring_broadcast(coll_ctx_t *c);
void ring_reduce(coll_ctx_t *c);

/* ---- coll_open.c, coll_open_algo.c: open exact sums (COLL_XVEC) ---- */
void open_whole(coll_ctx_t *c); /* direct_whole for COLL_XVEC calls */
void open_direct_all_reduce(coll_ctx_t *c);
void open_direct_reduce_scatter(coll_ctx_t *c);
void open_ring_all_reduce(coll_ctx_t *c);
void open_ring_reduce_scatter(coll_ctx_t *c);
/* dst[doff + i] = (store) or += (merge) src[soff + i] for i < len, exactly.
 * Data crossing from member `from` to member `to` of c's group carries,
 * besides its 8 bytes an element, one xacc_t per slow source element:
 * that payload is counted as sent by `from` and received by `to`. */
void open_move(const coll_ctx_t *c, xvec_t *dst, size_t doff, const xvec_t *src, size_t soff,
               size_t len, int store, int from, int to);
/* A point-to-point delivery: dst += src (ranges of count), serialised with
 * every other delivery touching either vector, exceptions counted. */
void open_deliver(const group_t *g, const xvec_t *src, size_t soff, xvec_t *dst, size_t doff,
                  size_t count, int from_world, int to_world);
/* Frees a member's open partials (group teardown). */
void open_member_free(coll_member_t *m);

/* ---- coll_p2p.c ---- */
struct coll_request {
    int is_send;
    group_t *g;
    int me, peer, tag, world_rank;
    coll_dtype_t dt;
    size_t count;
    void *buf;               /* const for sends; an xvec_t for COLL_XVEC */
    size_t off;              /* COLL_XVEC: the first element in buf */
    wword_t done;            /* 1 when the data has moved */
    /* Two references: the owner's wait and the delivery. The deliverer
     * still touches `done` (to wake sleepers) after the owner may have
     * seen it set, so whoever lets go last frees the request. */
    _Atomic int refs;
    struct coll_request *next;
    struct net_req *net;     /* across processes: the MPI transport's state */
};

/* An empty channel table for n members (O(n) bytes); channels appear
 * as pairs first talk. Freeing also frees requests never waited. */
p2p_channels_t *coll_p2p_channels_create(int n);
void coll_p2p_channels_free(p2p_channels_t *t);
/* Posts a send or a receive; off is an element offset (xvec only). */
coll_request_t *coll_p2p_post(group_t *g, int is_send, void *buf, size_t off, size_t count,
                              coll_dtype_t dt, int peer, int tag);

#endif
