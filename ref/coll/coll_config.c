/* coll_config.c - names, the per-thread algorithm choice, the per-group
 * state the collectives keep (see coll_impl.h), and the count of host
 * memory that state takes (coll_host_memory).
 */
#include "coll_impl.h"
#include "parity/numparse.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

/* ---- names ---- */

const char *coll_dtype_name(coll_dtype_t dt) {
    static const char *const n[] = {"f32", "i32", "i64", "xacc", "xvec"};
    return (unsigned)dt < COLL_NDTYPES ? n[dt] : "?dtype";
}
const char *coll_op_name(coll_op_t op) {
    static const char *const n[] = {"sum", "max", "min"};
    return (unsigned)op < COLL_NOPS ? n[op] : "?op";
}
const char *coll_algo_name(coll_algo_t a) {
    static const char *const n[] = {"direct", "ring"};
    return (unsigned)a < COLL_NALGOS ? n[a] : "?algo";
}
const char *coll_kind_name(coll_kind_t k) {
    static const char *const n[] = {"all_reduce", "reduce_scatter", "all_gather", "broadcast",
                                    "reduce", "all_to_all", "all_to_all_v", "barrier", "send", "recv"};
    return (unsigned)k < COLL_NKINDS ? n[k] : "?kind";
}

/* ---- algorithm selection ---- */

static _Thread_local int thread_algo = -1; /* -1: not yet read from the env */

int coll_algo_from_env(coll_algo_t *out, perr_t *e) {
    const char *v = getenv("PARITY_COLL_ALGO");
    *out = COLL_ALGO_DIRECT;
    if (!v || !*v || strcmp(v, "direct") == 0) return 0;
    if (strcmp(v, "ring") == 0) return *out = COLL_ALGO_RING, 0;
    return perr_set(e, "PARITY_COLL_ALGO='%s' is not a collective algorithm (expected direct or ring)", v);
}

/* ---- the PARITY_COLL_* numbers ---- */

int coll_env_number(const char *name, double max, int integer, double *out, perr_t *e) {
    const char *v = getenv(name);
    *out = -1;
    if (!v || !*v) return 0;
    char *end;
    errno = 0;
    double d = strtod(v, &end);
    if (!num_is_decimal(v, 1) || end == v || *end || errno || !isfinite(d) || !(d >= 0) || d > max || (integer && d != floor(d)))
        return perr_set(e, "%s='%.100s' is not valid: expected %s from 0 to %g", name, v,
                        integer ? "an integer" : "a number", max);
    *out = d;
    return 0;
}

int coll_env_check(perr_t *e) {
    coll_algo_t a;
    double d;
    if (coll_algo_from_env(&a, e) || coll_env_number("PARITY_COLL_WHOLE_BYTES", COLL_ENV_MAX_BYTES, 1, &d, e) ||
        coll_env_number("PARITY_COLL_SPIN_US", COLL_ENV_MAX_US, 0, &d, e) ||
        coll_env_number("PARITY_COLL_YIELD_US", COLL_ENV_MAX_US, 0, &d, e))
        return -1;
    if (coll_env_number("PARITY_COLL_TIMEOUT", 1e9, 0, &d, e) == 0 && d != 0) return 0;
    return perr_set(e, "PARITY_COLL_TIMEOUT='%.100s' is not a timeout: expected a positive number of seconds "
                       "up to 1e9", getenv("PARITY_COLL_TIMEOUT"));
}

coll_algo_t coll_get_algo(void) {
    if (thread_algo < 0) {
        coll_algo_t a;
        perr_t e;
        if (coll_algo_from_env(&a, &e) != 0) coll_die("%s", e.msg);
        thread_algo = (int)a;
        (void)coll_timeout_ns(); /* report a bad PARITY_COLL_TIMEOUT now, not at the first long wait */
    }
    return (coll_algo_t)thread_algo;
}

coll_algo_t coll_set_algo(coll_algo_t algo) {
    coll_algo_t prev = coll_get_algo();
    if ((unsigned)algo >= COLL_NALGOS) coll_die("coll_set_algo: %d is not a coll_algo_t", (int)algo);
    thread_algo = (int)algo;
    return prev;
}

/* ---- host memory of the layer's own bookkeeping (coll_host_memory) ---- */

static _Atomic size_t host_in_use, host_peak;

/* What an allocation of bytes really takes: whole cache lines. */
static size_t line_bytes(size_t bytes) {
    return (bytes + COLL_CACHE_LINE - 1) / COLL_CACHE_LINE * COLL_CACHE_LINE;
}

void *coll_alloc(size_t bytes) {
    bytes = line_bytes(bytes);
    void *p = aligned_alloc(COLL_CACHE_LINE, bytes ? bytes : COLL_CACHE_LINE);
    if (!p) parity_fatal("collectives: out of host memory (%zu bytes)", bytes);
    memset(p, 0, bytes);
    size_t now = atomic_fetch_add(&host_in_use, bytes) + bytes;
    size_t peak = atomic_load(&host_peak);
    while (now > peak && !atomic_compare_exchange_weak(&host_peak, &peak, now)) {
    }
    return p;
}

void coll_free(void *p, size_t bytes) {
    if (!p) return;
    atomic_fetch_sub(&host_in_use, line_bytes(bytes));
    free(p);
}

void coll_host_memory(size_t *in_use, size_t *peak) {
    if (in_use) *in_use = atomic_load(&host_in_use);
    if (peak) *peak = atomic_load(&host_peak);
}

void coll_host_memory_reset_peak(void) { atomic_store(&host_peak, atomic_load(&host_in_use)); }

/* ---- per-group state ---- */

static void state_free(void *p) {
    coll_state_t *cs = p;
    for (int i = 0; i < cs->n; i++) {
        coll_free(cs->members[i].scratch, cs->members[i].scratch_bytes);
        open_member_free(&cs->members[i]);
    }
    coll_p2p_channels_free(cs->p2p);
    coll_free(cs->members, (size_t)cs->n * sizeof *cs->members);
    coll_free(cs, sizeof *cs);
}

/* O(n) bytes: a slot per member and an empty p2p table (coll_p2p.c adds
 * channels as pairs start talking). */
static coll_state_t *state_create(int n) {
    coll_state_t *cs = coll_alloc(sizeof *cs);
    cs->n = n;
    cs->members = coll_alloc((size_t)n * sizeof *cs->members);
    cs->p2p = coll_p2p_channels_create(n);
    return cs;
}

/* The first member to get here builds the state while the others wait on
 * the group's lock, so a group has one copy, never one per thread (with a
 * copy per racing thread, 1024 devices entering their first collective
 * together ran the host out of memory). After that, one acquire load. */
coll_state_t *coll_state_of(group_t *g) {
    coll_state_t *cs = atomic_load_explicit(&g->coll, memory_order_acquire);
    if (cs) return cs;
    pthread_mutex_lock(&g->coll_mu);
    cs = atomic_load_explicit(&g->coll, memory_order_relaxed);
    if (!cs) {
        cs = state_create(g->n);
        g->coll_free = state_free; /* read by group_destroy after the run */
        atomic_store_explicit(&g->coll, cs, memory_order_release);
    }
    pthread_mutex_unlock(&g->coll_mu);
    return cs;
}

void *coll_scratch(coll_ctx_t *c, size_t bytes) {
    coll_member_t *m = c->self;
    if (m->scratch_bytes < bytes) {
        /* Safe to free: the only reader of my scratch (my ring successor)
         * finished with it before my previous call returned. */
        coll_free(m->scratch, m->scratch_bytes);
        m->scratch = coll_alloc(bytes);
        m->scratch_bytes = bytes;
    }
    return m->scratch;
}
