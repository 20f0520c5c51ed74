/* oracle_put.c - a backend's blocks of a tensor, placed as DTensor places
 * them, and the global tensor they reassemble into (oracle.h).
 *
 * Blocks are kept as they came (one per rank), not merged: replicated
 * copies must each be compared against the golden run, and a copy that
 * drifts must be reported at its own rank, so the comparison walks every
 * block (oracle_compare.c).
 */
#include "oracle_internal.h"

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int oracle_check_placement(const char *what, const oracle_placement_t *pl, int tensor_ndim,
                           perr_t *err) {
    if (!pl) return perr_set(err, "%s: no placement", what);
    if (pl->ndim < 0 || pl->ndim > ORACLE_MAX_MESH)
        return perr_set(err, "%s: placement over %d mesh dimensions (0 to %d)", what, pl->ndim,
                        ORACLE_MAX_MESH);
    int64_t ranks = 1;
    for (int i = 0; i < pl->ndim; i++) {
        if (pl->mesh[i] < 1)
            return perr_set(err, "%s: mesh dimension %d has size %d (>= 1)", what, i,
                            pl->mesh[i]);
        /* ranks are ints: a mesh of more is no mesh of this process's */
        if ((ranks *= pl->mesh[i]) > INT_MAX)
            return perr_set(err, "%s: a mesh of more than %d ranks (the product of its sizes "
                                 "up to dimension %d)", what, INT_MAX, i);
        if (pl->coord[i] < 0 || pl->coord[i] >= pl->mesh[i])
            return perr_set(err, "%s: coordinate %d along mesh dimension %d of size %d", what,
                            pl->coord[i], i, pl->mesh[i]);
        const int top = tensor_ndim < 0 ? INT_MAX : tensor_ndim;
        if (pl->shard[i] != ORACLE_REPLICATE && (pl->shard[i] < 0 || pl->shard[i] >= top))
            return perr_set(err, "%s: mesh dimension %d shards axis %d of a %d-axis tensor "
                                 "(Shard(axis) with 0 <= axis < %d, or Replicate)",
                            what, i, pl->shard[i], tensor_ndim, tensor_ndim);
    }
    return 0;
}

int oracle_rank_of(const oracle_placement_t *pl) {
    perr_t e;
    if (oracle_check_placement("oracle_rank_of", pl, -1, &e)) return -1;
    int r = 0; /* < the product of the sizes, an int (checked) */
    for (int i = 0; i < pl->ndim; i++) r = r * pl->mesh[i] + pl->coord[i];
    return r;
}

void oracle_fmt_shape(int ndim, const int64_t *shape, char *buf, size_t cap) {
    size_t n = (size_t)snprintf(buf, cap, "[");
    for (int d = 0; d < ndim && n < cap; d++)
        n += (size_t)snprintf(buf + n, cap - n, "%s%lld", d ? "," : "", (long long)shape[d]);
    if (n < cap) snprintf(buf + n, cap - n, "]");
}

void oracle_chunk(int64_t n, int parts, int index, int64_t *start, int64_t *len) {
    const int64_t chunk = (n + parts - 1) / parts;
    *start = chunk * index < n ? chunk * index : n;
    *len = n - *start < chunk ? n - *start : chunk;
}

/* The block at pl: torch.chunk's cut of every sharded axis, mesh
 * dimensions nesting in order. */
static void placement_block_of(const st_tensor_t *g, const oracle_placement_t *pl, int64_t *lo,
                               int64_t *ext) {
    for (int d = 0; d < g->ndim; d++) lo[d] = 0, ext[d] = g->shape[d];
    for (int i = 0; pl && i < pl->ndim; i++) {
        const int a = pl->shard[i];
        if (a == ORACLE_REPLICATE) continue;
        int64_t start, len;
        oracle_chunk(ext[a], pl->mesh[i], pl->coord[i], &start, &len);
        lo[a] += start, ext[a] = len;
    }
}

int oracle_put(oracle_t *o, const char *name, int64_t step, st_dtype_t dtype, int ndim,
               const int64_t *shape, const void *data, const oracle_placement_t *pl, int rank,
               perr_t *err) {
    char full[160];
    if (!o) return perr_set(err, "oracle_put: no oracle");
    if (oracle_full_name(name, step, full, sizeof full, err)) return -1;
    if (o->golden_steps < 0)
        return perr_set(err, "'%s': no golden run yet (call oracle_run_golden first)", full);
    const long gi = oracle_golden_find(o, full);
    if (gi < 0)
        return perr_set(err, "'%s' is not a golden tensor (the golden run holds steps %lld..%lld; "
                             "names as in dump.h)", full, (long long)o->start.step,
                        (long long)o->start.step + o->golden_steps - 1);
    st_tensor_t g;
    oracle_golden_at(o, gi, &g);
    if ((unsigned)dtype >= ST_DTYPE_COUNT || dtype != g.dtype)
        return perr_set(err, "'%s': dtype %s, the golden tensor's is %s", full,
                        st_dtype_name(dtype), st_dtype_name(g.dtype));
    const oracle_placement_t global = {0};
    if (!pl) pl = &global;
    char what[176];
    snprintf(what, sizeof what, "'%s'", full);
    if (oracle_check_placement(what, pl, g.ndim, err)) return -1;
    if (rank < -1)
        return perr_set(err, "'%s': rank %d (>= 0, or -1 for the placement's row-major rank)",
                        full, rank);
    if (rank < 0) rank = oracle_rank_of(pl);
    int64_t lo[ST_MAX_DIMS], ext[ST_MAX_DIMS];
    placement_block_of(&g, pl, lo, ext);
    char want[160], got[160], glob[160];
    oracle_fmt_shape(g.ndim, ext, want, sizeof want);
    oracle_fmt_shape(g.ndim, g.shape, glob, sizeof glob);
    int same = ndim == g.ndim && (ndim == 0 || shape);
    for (int d = 0; same && d < ndim; d++) same = shape[d] == ext[d];
    if (!same) {
        if (ndim >= 0 && ndim <= ST_MAX_DIMS && (ndim == 0 || shape)) oracle_fmt_shape(ndim, shape, got, sizeof got);
        else snprintf(got, sizeof got, "(%d axes)", ndim);
        return perr_set(err, "'%s' from rank %d: a block of shape %s, but its placement gives "
                             "%s of the global %s", full, rank, got, want, glob);
    }
    uint64_t numel = 1;
    for (int d = 0; d < ndim; d++) numel *= (uint64_t)ext[d];
    const size_t bytes = (size_t)numel * st_dtype_size(dtype);
    if (bytes && !data) return perr_set(err, "'%s' from rank %d: no data", full, rank);
    /* the slot of this tensor, made on its first block */
    int k = 0;
    while (k < o->ns && strcmp(o->s[k].name, full)) k++;
    if (k == o->ns) {
        if (o->ns == o->cap) {
            int cap = o->cap ? 2 * o->cap : 64;
            oracle_slot_t *grown = realloc(o->s, (size_t)cap * sizeof *grown);
            if (!grown) return perr_set(err, "oracle: out of memory");
            o->s = grown, o->cap = cap;
        }
        memset(&o->s[k], 0, sizeof o->s[k]);
        if (!(o->s[k].name = strdup(full))) return perr_set(err, "oracle: out of memory");
        o->s[k].golden = gi;
        o->ns++;
    }
    oracle_slot_t *s = &o->s[k];
    for (int j = 0; j < s->np; j++)
        if (s->p[j].rank == rank)
            return perr_set(err, "'%s': rank %d put a block of it already", full, rank);
    if (s->np == s->cap) {
        int cap = s->cap ? 2 * s->cap : 4;
        oracle_piece_t *grown = realloc(s->p, (size_t)cap * sizeof *grown);
        if (!grown) return perr_set(err, "oracle: out of memory");
        s->p = grown, s->cap = cap;
    }
    oracle_piece_t *p = &s->p[s->np];
    memset(p, 0, sizeof *p);
    if (!(p->data = malloc(bytes ? bytes : 1))) return perr_set(err, "oracle: out of memory");
    if (bytes) memcpy(p->data, data, bytes);
    p->rank = rank;
    p->mesh_ndim = pl->ndim;
    memcpy(p->coord, pl->coord, sizeof p->coord);
    memcpy(p->lo, lo, sizeof p->lo);
    memcpy(p->ext, ext, sizeof p->ext);
    s->np++;
    return 0;
}

void oracle_piece_walk(const st_tensor_t *g, const oracle_piece_t *p,
                       void (*fn)(void *ctx, uint64_t global, uint64_t local), void *ctx) {
    int64_t i[ST_MAX_DIMS] = {0};
    uint64_t n = 1;
    for (int d = 0; d < g->ndim; d++) n *= (uint64_t)p->ext[d];
    for (uint64_t local = 0; local < n; local++) {
        uint64_t flat = 0;
        for (int d = 0; d < g->ndim; d++) flat = flat * (uint64_t)g->shape[d] + (uint64_t)(p->lo[d] + i[d]);
        fn(ctx, flat, local);
        for (int d = g->ndim - 1; d >= 0; d--) { /* the next index, last axis fastest */
            if (++i[d] < p->ext[d]) break;
            i[d] = 0;
        }
    }
}

typedef struct {
    unsigned char *values;
    int32_t *who;
    const unsigned char *src;
    size_t es;
    int rank;
} assemble_t;

static void assemble_one(void *ctx, uint64_t global, uint64_t local) {
    assemble_t *a = ctx;
    if (a->who[global] >= 0 && a->who[global] < a->rank) return; /* the lowest rank's copy */
    a->who[global] = a->rank;
    memcpy(a->values + global * a->es, a->src + local * a->es, a->es);
}

int oracle_assembled(oracle_t *o, const char *name, const void **values, const int32_t **who,
                     perr_t *err) {
    if (!o || !name) return perr_set(err, "oracle_assembled: no oracle or name");
    int k = 0;
    while (k < o->ns && strcmp(o->s[k].name, name)) k++;
    if (k == o->ns) return perr_set(err, "'%s': no block of it was put", name);
    st_tensor_t g;
    oracle_golden_at(o, o->s[k].golden, &g);
    const uint64_t numel = st_numel(&g);
    const size_t es = st_dtype_size(g.dtype);
    free(o->asm_values);
    free(o->asm_who);
    o->asm_values = calloc(numel ? numel : 1, es);
    o->asm_who = malloc((numel ? numel : 1) * sizeof(int32_t));
    if (!o->asm_values || !o->asm_who) return perr_set(err, "oracle: out of memory");
    for (uint64_t i = 0; i < numel; i++) o->asm_who[i] = -1;
    for (int j = 0; j < o->s[k].np; j++) {
        assemble_t a = {o->asm_values, o->asm_who, o->s[k].p[j].data, es, o->s[k].p[j].rank};
        oracle_piece_walk(&g, &o->s[k].p[j], assemble_one, &a);
    }
    if (values) *values = o->asm_values;
    if (who) *who = o->asm_who;
    return 0;
}
