/* coll_config.c - names, the per-thread algorithm choice, and the
 * per-group state the collectives keep (see coll_impl.h).
 */
#include "coll_impl.h"

#include <stdlib.h>
#include <string.h>

/* ---- names ---- */

const char *coll_dtype_name(coll_dtype_t dt) {
    static const char *const n[] = {"f32", "i32", "i64", "xacc"};
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

/* ---- per-group state ---- */

static void state_free(void *p) {
    coll_state_t *cs = p;
    for (int i = 0; i < cs->n; i++) free(cs->members[i].scratch);
    coll_p2p_channels_free(cs->channels, cs->n);
    free(cs->members);
    free(cs);
}

static void *zalloc_aligned(size_t bytes) {
    bytes = (bytes + COLL_CACHE_LINE - 1) / COLL_CACHE_LINE * COLL_CACHE_LINE;
    void *p = aligned_alloc(COLL_CACHE_LINE, bytes);
    if (!p) parity_fatal("collectives: out of host memory (%zu bytes)", bytes);
    memset(p, 0, bytes);
    return p;
}

coll_state_t *coll_state_of(group_t *g) {
    coll_state_t *cs = atomic_load_explicit(&g->coll, memory_order_acquire);
    if (cs) return cs;
    coll_state_t *mine = zalloc_aligned(sizeof *mine);
    mine->n = g->n;
    mine->members = zalloc_aligned((size_t)g->n * sizeof *mine->members);
    mine->channels = coll_p2p_channels_create(g->n);
    void *expected = NULL;
    if (atomic_compare_exchange_strong(&g->coll, &expected, mine)) {
        g->coll_free = state_free; /* read by group_destroy after the run */
        return mine;
    }
    state_free(mine); /* another member won the race */
    return expected;
}

void *coll_scratch(coll_ctx_t *c, size_t bytes) {
    coll_member_t *m = c->self;
    if (m->scratch_bytes < bytes) {
        /* Safe to free: the only reader of my scratch (my ring successor)
         * finished with it before my previous call returned. */
        free(m->scratch);
        m->scratch = zalloc_aligned(bytes);
        m->scratch_bytes = bytes;
    }
    return m->scratch;
}
