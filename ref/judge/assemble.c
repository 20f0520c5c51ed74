/* assemble.c - every rank's pieces of a tensor back into the global
 * tensor, and each copy's distance from the golden one (RANKFILES.md).
 *
 * A piece's block is found as DTensor finds it: for each mesh axis in
 * order, Shard(d) cuts tensor axis d as torch.chunk does (oracle_chunk:
 * axes sharding the same tensor axis nest, the first outermost), then a
 * microbatch [m, M] cuts axis 0 into M equal pieces and keeps the m-th.
 * Shard(d, strips=k) (DTensor's _StridedShard) first cuts the axis into k
 * equal strips and keeps the rank's chunk of each, concatenated: a fused
 * q | k | v weight's tensor-parallel block. So a block is, along each
 * axis, a list of global indices (block_t), not always a range.
 * A copy is what one rank holds, except along Partial(sum) axes: there
 * the ranks that differ only in those coordinates hold addends, summed
 * exactly (xvec, DESIGN.md I2) and rounded once, so a correct backend's
 * partial sums reassemble to the golden bits and a copy is the group's.
 * Every copy of an element is compared (a drifting replica shows at its
 * rank): dev is the largest |copy - golden|, who the rank of that copy.
 */
#include "judge_internal.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "../oracle/oracle_internal.h" /* the model the names name */
#include "parity/xacc.h"

#define FAIL(...) (perr_set(err, __VA_ARGS__), -1)

static void fmt_shape(int ndim, const int64_t *shape, char *buf, size_t cap) {
    size_t n = (size_t)snprintf(buf, cap, "[");
    for (int d = 0; d < ndim && n < cap; d++)
        n += (size_t)snprintf(buf + n, cap - n, "%s%lld", d ? "," : "", (long long)shape[d]);
    if (n < cap) snprintf(buf + n, cap - n, "]");
}

/* The value of element i of a piece's data as a double. */
static double value_at(st_dtype_t dt, const unsigned char *p, uint64_t i) {
    switch (dt) {
    case ST_F32: { float f; memcpy(&f, p + 4 * i, 4); return f; }
    case ST_F64: { double d; memcpy(&d, p + 8 * i, 8); return d; }
    case ST_BF16: {
        uint16_t h; memcpy(&h, p + 2 * i, 2);
        const uint32_t u = (uint32_t)h << 16;
        float f; memcpy(&f, &u, 4);
        return f;
    }
    case ST_F16: {
        uint16_t h; memcpy(&h, p + 2 * i, 2);
        const int e = (h >> 10) & 31, m = h & 1023;
        const double v = e == 31 ? (m ? NAN : INFINITY)
                         : e ? ldexp(1024 + m, e - 25) : ldexp(m, -24);
        return h & 0x8000 ? -v : v;
    }
    case ST_I32: { int32_t v; memcpy(&v, p + 4 * i, 4); return v; }
    case ST_I64: { int64_t v; memcpy(&v, p + 8 * i, 8); return (double)v; }
    default: return p[i]; /* U8, BOOL */
    }
}

/* |got - want| as a judgment reads it: equal NaNs and equal infinities are
 * 0 apart; a NaN or an infinity against anything else is infinitely far. */
static double distance(double got, double want) {
    if (isnan(got) || isnan(want)) return isnan(got) && isnan(want) ? 0 : INFINITY;
    if (isinf(got) || isinf(want)) return got == want ? 0 : INFINITY;
    return fabs(got - want);
}

static int check_files(judge_set_t *s, perr_t *err) {
    const judge_file_t *a = &s->files[0];
    for (int i = 1; i < s->nfiles; i++) {
        const judge_file_t *b = &s->files[i];
        int same = a->mesh.n == b->mesh.n;
        for (int k = 0; same && k < a->mesh.n; k++)
            same = !strcmp(a->mesh.name[k], b->mesh.name[k]) && a->mesh.size[k] == b->mesh.size[k];
        if (!same)
            return FAIL("%s and %s: their parity.mesh differ (every rank file of a run has the "
                        "same mesh, axes in the same order)", a->path, b->path);
        if (a->bf16 != b->bf16)
            return FAIL("%s and %s: parity.precision differs", a->path, b->path);
    }
    if (!(s->by_rank = calloc((size_t)a->mesh.ranks, sizeof *s->by_rank)))
        return FAIL("judge: out of memory");
    char c[256];
    for (int i = 0; i < s->nfiles; i++) {
        judge_file_t *f = &s->files[i];
        if (s->by_rank[f->rank]) {
            judge_fmt_coords(&f->mesh, f->coord, c, sizeof c);
            return FAIL("%s and %s: both are the rank at %s (rank %d)", s->by_rank[f->rank]->path,
                        f->path, c, f->rank);
        }
        s->by_rank[f->rank] = f;
    }
    for (int r = 0; r < a->mesh.ranks; r++) {
        if (s->by_rank[r]) continue;
        int coord[JUDGE_MAX_AXES];
        for (int k = a->mesh.n - 1, x = r; k >= 0; k--) coord[k] = x % a->mesh.size[k], x /= a->mesh.size[k];
        judge_fmt_coords(&a->mesh, coord, c, sizeof c);
        return FAIL("no rank file for the rank at %s (rank %d of the mesh's %d; %d file%s given)",
                    c, r, a->mesh.ranks, s->nfiles, s->nfiles == 1 ? "" : "s");
    }
    return 0;
}

/* t's per-element arrays, fresh (masked and name are the caller's). */
static int tensor_arrays(judge_tensor_t *t) {
    const size_t n = t->numel ? t->numel : 1;
    t->value = calloc(n, sizeof *t->value);
    t->dev = malloc(n * sizeof *t->dev);
    t->got = calloc(n, sizeof *t->got);
    t->who = malloc(n * sizeof *t->who);
    t->copies = calloc(n, sizeof *t->copies);
    t->mb = malloc(n * sizeof *t->mb);
    if (!t->value || !t->dev || !t->got || !t->who || !t->copies || !t->mb) return -1;
    for (uint64_t e = 0; e < t->numel; e++) t->dev[e] = -1, t->who[e] = -1, t->mb[e] = -1;
    return 0;
}

static void tensor_arrays_free(judge_tensor_t *t) {
    free(t->value), free(t->dev), free(t->got), free(t->who), free(t->copies), free(t->mb);
}

/* A scheme tensor's layout (the first piece of it in the scheme's names):
 * its shape there and the permutation of its elements into parity's,
 * read off names_values_to_parity itself (the indices as two floats of
 * 24 bits each, both exact), so the judge and the weights files cannot
 * disagree about a layout. An alias piece (the tied head's second key)
 * is the word embedding's own layout and only adds to the name. */
static int scheme_layout(judge_tensor_t *t, const judge_piece_t *pc, const model_config_t *c,
                         const char *scheme) {
    char b[320];
    const char *alias = t->backend ? strstr(t->backend, "its tied alias ") : NULL;
    if (pc->map.alias) {
        if (alias) return 0;
        if (t->backend) snprintf(b, sizeof b, "%s and its tied alias %s", t->backend, pc->backend);
        else snprintf(b, sizeof b, "%s: its tied alias %s", scheme, pc->backend);
    } else {
        if (t->from_scheme) return 0;
        snprintf(b, sizeof b, "%s: %s%s%s", scheme, pc->backend, alias ? " and " : "",
                 alias ? alias : "");
    }
    char *nb = strdup(b);
    if (!nb) return -1;
    free(t->backend);
    t->backend = nb;
    if (pc->map.alias) return 0;
    const uint64_t n = t->numel ? t->numel : 1;
    float *in = malloc(n * sizeof *in), *lo = malloc(n * sizeof *lo), *hi = malloc(n * sizeof *hi);
    t->to_scheme = malloc(n * sizeof *t->to_scheme);
    t->from_scheme = malloc(n * sizeof *t->from_scheme);
    int rc = in && lo && hi && t->to_scheme && t->from_scheme ? 0 : -1;
    if (!rc) {
        for (uint64_t i = 0; i < t->numel; i++) in[i] = (float)(i & 0xFFFFFF);
        names_values_to_parity(c, &pc->map, in, lo);
        for (uint64_t i = 0; i < t->numel; i++) in[i] = (float)(i >> 24);
        names_values_to_parity(c, &pc->map, in, hi);
        for (uint64_t e = 0; e < t->numel; e++) {
            t->to_scheme[e] = (uint64_t)hi[e] << 24 | (uint64_t)lo[e];
            t->from_scheme[t->to_scheme[e]] = e;
        }
        t->sndim = pc->map.ndim;
        for (int d = 0; d < t->sndim; d++) t->sshape[d] = pc->map.shape[d];
    }
    free(in), free(lo), free(hi);
    return rc;
}

/* A rank's block of a global tensor: along axis d its ext[d] positions
 * hold the global indices at[d][0 .. ext[d]-1], in order (a range for
 * Shard(d), a range per strip for Shard(d, strips=k)). */
typedef struct {
    int ndim;
    int64_t ext[ST_MAX_DIMS];
    int64_t *at[ST_MAX_DIMS];
} block_t;

static void block_free(block_t *b) {
    for (int d = 0; d < b->ndim; d++) free(b->at[d]);
    memset(b, 0, sizeof *b);
}

static int block_of(const judge_file_t *f, const judge_piece_t *pc, const st_tensor_t *g,
                    block_t *b, perr_t *err);

/* A flat member a shard holds no element of, of golden tensor g: its
 * shape still fits its placement (a scheme name: in the scheme's layout). */
static int unheld_shape(const judge_file_t *f, const judge_piece_t *pc, const st_tensor_t *g,
                        perr_t *err) {
    st_tensor_t sg = *g;
    if (pc->backend && !pc->map.alias) {
        sg.ndim = pc->map.ndim;
        for (int d = 0; d < sg.ndim; d++) sg.shape[d] = pc->map.shape[d];
    }
    block_t b;
    const int rc = block_of(f, pc, &sg, &b, err);
    block_free(&b);
    return rc;
}

/* The global tensors the files name, first appearance first. */
static int collect_names(judge_set_t *s, oracle_t *o, perr_t *err) {
    const char *scheme = strchr(s->names, ' ') ? strchr(s->names, ' ') + 1 : s->names;
    for (int i = 0; i < s->nfiles; i++)
        for (int k = 0; k < s->files[i].npc; k++) {
            const judge_piece_t *pc = &s->files[i].pc[k];
            int j = 0;
            while (j < s->nt && strcmp(s->t[j].name, pc->name)) j++;
            if (j < s->nt) {
                if (pc->backend && scheme_layout(&s->t[j], pc, &o->cfg, scheme))
                    return FAIL("judge: out of memory");
                continue;
            }
            judge_tensor_t t = {0};
            perr_t e;
            char b[160];
            if (oracle_golden(o, pc->name, &t.g, &t.gd, &e))
                return FAIL("%s: %s: unknown tensor '%s' (RANKFILES.md's names of this model, "
                            "steps %lld..%lld)", s->files[i].path, pc->where,
                            st_escape(pc->name, b, sizeof b),
                            (long long)(o->have_start ? o->start.step : 0),
                            (long long)s->files[i].max_step);
            if (pc->unheld) { /* checked, never judged: no rank holds an element of it here */
                if (unheld_shape(&s->files[i], pc, &t.g, err)) return -1;
                continue;
            }
            judge_tensor_t *grown = realloc(s->t, (size_t)(s->nt + 1) * sizeof *grown);
            if (!grown) return FAIL("judge: out of memory");
            s->t = grown;
            t.numel = st_numel(&t.g);
            t.name = strdup(pc->name);
            t.masked = calloc(t.numel ? t.numel : 1, 1);
            const int bad = tensor_arrays(&t);
            s->t[s->nt++] = t;
            if (bad || !t.name || !t.masked ||
                (pc->backend && scheme_layout(&s->t[s->nt - 1], pc, &o->cfg, scheme)))
                return FAIL("judge: out of memory");
        }
    return 0;
}

/* Cuts one axis's global indices at[0 .. n-1] over a mesh axis of `parts`
 * at `coord`: into `strips` equal strips, each as torch.chunk cuts it,
 * keeping the rank's chunk of every strip in strip order (in place: a
 * kept index never moves right). Returns how many are kept. */
static int64_t cut_axis(int64_t *at, int64_t n, int64_t strips, int parts, int coord) {
    const int64_t w = n / strips;
    int64_t kept = 0;
    for (int64_t s = 0; s < strips; s++) {
        int64_t start, len;
        oracle_chunk(w, parts, coord, &start, &len);
        memmove(at + kept, at + s * w + start, (size_t)len * sizeof *at);
        kept += len;
    }
    return kept;
}

/* The piece's block in the global tensor, checked against the piece's
 * shape and dtype (b is the caller's to free, even on failure). */
static int block_of(const judge_file_t *f, const judge_piece_t *pc, const st_tensor_t *g,
                    block_t *b, perr_t *err) {
    char want[160], got[160], glob[160];
    memset(b, 0, sizeof *b);
    if (pc->ndim != g->ndim) {
        fmt_shape(g->ndim, g->shape, glob, sizeof glob);
        return FAIL("%s: %s: %d-D here, the global tensor is %s", f->path, pc->where, pc->ndim,
                    glob);
    }
    b->ndim = g->ndim;
    for (int d = 0; d < g->ndim; d++) {
        if (!(b->at[d] = malloc((size_t)(g->shape[d] ? g->shape[d] : 1) * sizeof *b->at[d])))
            return FAIL("judge: out of memory");
        for (int64_t i = 0; i < g->shape[d]; i++) b->at[d][i] = i;
        b->ext[d] = g->shape[d];
    }
    for (int a = 0; a < f->mesh.n; a++) {
        const int d = pc->p[a];
        if (d < 0) continue;
        const int64_t k = pc->strips[a];
        if (b->ext[d] % k)
            return FAIL("%s: %s: placement Shard(%d, strips=%lld) on mesh axis '%s': the %lld "
                        "positions of axis %d (of the global %lld, after the mesh axes before "
                        "it) do not split into %lld equal strips", f->path, pc->where, d,
                        (long long)k, f->mesh.name[a], (long long)b->ext[d], d,
                        (long long)g->shape[d], (long long)k);
        b->ext[d] = cut_axis(b->at[d], b->ext[d], k, f->mesh.size[a], f->coord[a]);
    }
    if (pc->nmb) {
        if (b->ext[0] % pc->nmb)
            return FAIL("%s: %s: microbatch [%d, %d]: the rank's %lld rows of axis 0 do not "
                        "split into %d equal microbatches", f->path, pc->where, pc->mb, pc->nmb,
                        (long long)b->ext[0], pc->nmb);
        b->ext[0] /= pc->nmb;
        memmove(b->at[0], b->at[0] + b->ext[0] * pc->mb, (size_t)b->ext[0] * sizeof *b->at[0]);
    }
    int same = 1;
    for (int d = 0; d < g->ndim; d++) same &= pc->shape[d] == b->ext[d];
    if (!same) {
        fmt_shape(g->ndim, b->ext, want, sizeof want);
        fmt_shape(pc->ndim, pc->shape, got, sizeof got);
        fmt_shape(g->ndim, g->shape, glob, sizeof glob);
        return FAIL("%s: %s: shape %s, but its placement gives %s of the global %s", f->path,
                    pc->where, got, want, glob);
    }
    const int gfloat = st_dtype_is_float(g->dtype), pfloat = st_dtype_is_float(pc->dtype);
    if (gfloat != pfloat)
        return FAIL("%s: %s: dtype %s, the golden tensor is %s (expected a %s dtype)", f->path,
                    pc->where, st_dtype_name(pc->dtype), st_dtype_name(g->dtype),
                    gfloat ? "float" : "integer");
    return 0;
}

/* The global flat index of element r (row-major) of a block b of g. */
static uint64_t global_of(const st_tensor_t *g, const block_t *b, uint64_t r) {
    int64_t idx[ST_MAX_DIMS];
    for (int d = g->ndim - 1; d >= 0; d--) {
        idx[d] = b->ext[d] ? b->at[d][r % (uint64_t)b->ext[d]] : 0;
        r = b->ext[d] ? r / (uint64_t)b->ext[d] : 0;
    }
    uint64_t flat = 0;
    for (int d = 0; d < g->ndim; d++) flat = flat * (uint64_t)g->shape[d] + (uint64_t)idx[d];
    return flat;
}

static double golden_at(const judge_tensor_t *t, uint64_t i) {
    return value_at(t->g.dtype, t->gd, i);
}

/* One copy's value v of element e, from rank r. */
static void take_copy(judge_tensor_t *t, uint64_t e, double v, int r, int mb) {
    const double d = distance(v, golden_at(t, e));
    if (!t->copies[e]++) t->value[e] = (float)v;
    if (d > t->dev[e] || (d == t->dev[e] && r < t->who[e]))
        t->dev[e] = d, t->got[e] = v, t->who[e] = r, t->mb[e] = mb;
}

/* The exact sums of one Partial(sum) group: the ranks whose coordinates
 * off the partial axes are `key`. */
typedef struct {
    int key, rank, want; /* the group; its lowest rank; addends an element takes */
    xvec_t sum;
    int32_t *n;          /* [numel] addends so far */
} addends_t;

static addends_t *group_for(addends_t **gs, int *ng, const judge_file_t *f, const judge_piece_t *pc,
                          uint64_t numel) {
    int key = 0, want = 1, low = 0;
    for (int a = 0; a < f->mesh.n; a++) {
        const int partial = pc->p[a] == JP_PARTIAL;
        key = key * f->mesh.size[a] + (partial ? 0 : f->coord[a]);
        low = key;
        if (partial) want *= f->mesh.size[a];
    }
    key = 2 * key + pc->map.alias; /* the tied head's addends sum apart: another copy */
    for (int i = 0; i < *ng; i++)
        if ((*gs)[i].key == key) return &(*gs)[i];
    addends_t *grown = realloc(*gs, (size_t)(*ng + 1) * sizeof *grown);
    if (!grown) return NULL;
    *gs = grown;
    addends_t *g = &grown[*ng];
    memset(g, 0, sizeof *g);
    g->key = key, g->rank = low, g->want = want;
    if (xvec_init(&g->sum, numel ? numel : 1)) return NULL;
    if (!(g->n = calloc(numel ? numel : 1, sizeof *g->n))) return xvec_free(&g->sum), NULL;
    (*ng)++;
    return g;
}

/* A tensor's pieces are cut in the scheme's layout when the backend
 * names it in another scheme (sg: that shape; from_scheme moves each
 * element to parity's index). The tied head's second key (map.alias) is
 * another copy of the word embedding, with its own stamps. */
static int assemble_one(judge_set_t *s, judge_tensor_t *t, perr_t *err) {
    const size_t n = t->numel ? t->numel : 1;
    int32_t *stamps = malloc(2 * n * sizeof *stamps);
    addends_t *gs = NULL;
    int ng = 0, rc = stamps ? 0 : FAIL("judge: out of memory");
    for (uint64_t e = 0; e < 2 * t->numel && !rc; e++) stamps[e] = -1;
    st_tensor_t sg = t->g;
    if (t->from_scheme) {
        sg.ndim = t->sndim;
        for (int d = 0; d < t->sndim; d++) sg.shape[d] = t->sshape[d];
    }
    for (int r = 0; r < s->files[0].mesh.ranks && !rc; r++) {
        const judge_file_t *f = s->by_rank[r];
        for (int k = 0; k < f->npc && !rc; k++) {
            const judge_piece_t *pc = &f->pc[k];
            if (strcmp(pc->name, t->name)) continue;
            block_t b;
            if ((rc = block_of(f, pc, &sg, &b, err))) {
                block_free(&b);
                break;
            }
            int32_t *stamp = stamps + (pc->map.alias ? t->numel : 0);
            int partial = 0;
            for (int a = 0; a < f->mesh.n; a++) partial |= pc->p[a] == JP_PARTIAL;
            addends_t *g = NULL;
            if (partial && !st_dtype_is_float(t->g.dtype)) {
                rc = FAIL("%s: %s: Partial(sum) of the integer tensor '%s'", f->path, pc->where,
                          t->name);
                block_free(&b);
                break;
            }
            if (partial && !(g = group_for(&gs, &ng, f, pc, t->numel))) {
                rc = FAIL("judge: out of memory");
                block_free(&b);
                break;
            }
            for (uint64_t i = pc->r0; i < pc->r1; i++) {
                uint64_t e = global_of(&sg, &b, i);
                if (t->from_scheme) e = t->from_scheme[e];
                if (stamp[e] == r) {
                    rc = FAIL("%s: %s: element %llu of '%s' is given twice by this rank",
                              f->path, pc->where, (unsigned long long)e, t->name);
                    break;
                }
                stamp[e] = r;
                const double v = value_at(pc->dtype, pc->data, i - pc->r0) * pc->scale;
                if (!g) {
                    take_copy(t, e, v, r, pc->nmb ? pc->mb : -1);
                } else {
                    const float x = (float)v; /* an addend is a float; scale 2^k keeps it exact */
                    xvec_add(&g->sum, e, &x, 1);
                    g->n[e]++;
                }
            }
            block_free(&b);
        }
    }
    for (int i = 0; i < ng; i++) {
        addends_t *g = &gs[i];
        for (uint64_t e = 0; e < t->numel && !rc; e++) {
            if (!g->n[e]) continue;
            if (g->n[e] != g->want) {
                rc = FAIL("'%s': element %llu has %d of its %d Partial(sum) addends (the ranks "
                          "of rank %d's group; every rank along a Partial axis holds one)",
                          t->name, (unsigned long long)e, g->n[e], g->want, g->rank);
                break;
            }
            xacc_t a;
            xvec_get(&g->sum, e, &a);
            take_copy(t, e, xacc_round_f32(&a), g->rank, -1);
        }
        xvec_free(&g->sum);
        free(g->n);
    }
    free(gs);
    free(stamps);
    return rc;
}

static int64_t step_of(const char *name) {
    return strncmp(name, "step", 4) ? -1 : strtoll(name + 4, NULL, 10);
}

/* The golden steps the files need, from the golden run's first (--load's
 * step S: the files name steps S, S+1, ...; a dump's steps count from 0),
 * at most JUDGE_MAX_STEPS: each is a golden step, K envelope runs and K+1
 * forced steps. A name outside them is refused naming its file. */
static int golden_steps(const judge_set_t *s, const oracle_t *o, int64_t *steps, perr_t *err) {
    const int64_t first = o->have_start ? o->start.step : 0;
    *steps = 0;
    char b[160];
    for (int i = 0; i < s->nfiles; i++)
        for (int k = 0; k < s->files[i].npc; k++) {
            const judge_file_t *f = &s->files[i];
            const int64_t st = step_of(f->pc[k].name);
            if (st < 0) continue;
            if (st < first)
                return FAIL("%s: %s: tensor '%s' is of step %lld, before the golden run's "
                            "first step %lld (--load's checkpoint is at step %lld)", f->path,
                            f->pc[k].where, st_escape(f->pc[k].name, b, sizeof b), (long long)st,
                            (long long)first, (long long)first);
            if (st - first >= JUDGE_MAX_STEPS)
                return FAIL("%s: %s: tensor '%s' is of step %lld: judging it would run %lld "
                            "golden steps (and %lld forced ones per float order), more than the "
                            "judge's bound of %d steps", f->path, f->pc[k].where,
                            st_escape(f->pc[k].name, b, sizeof b), (long long)st,
                            (long long)(st - first + 1), (long long)(st - first + 1),
                            JUDGE_MAX_STEPS);
            if (st - first + 1 > *steps) *steps = st - first + 1;
        }
    return 0;
}

int judge_assemble(judge_set_t *s, oracle_t *o, perr_t *err) {
    if (!s->nfiles) return FAIL("no rank files given (parity judge ... RANKFILE.safetensors...)");
    if (check_files(s, err)) return -1;
    int64_t steps = 0;
    if (golden_steps(s, o, &steps, err)) return -1;
    /* the names after the golden run: a dump's model is known from then on */
    if (oracle_run_golden(o, steps ? (int)steps : 1, err) || judge_names_resolve(s, &o->cfg, err))
        return -1;
    if (collect_names(s, o, err)) return -1;
    if (!s->nt) return FAIL("the rank files hold no tensor (nothing to judge)");
    for (int i = 0; i < s->nt; i++)
        if (assemble_one(s, &s->t[i], err)) return -1;
    return 0;
}

int judge_assemble_against(judge_set_t *s, const judge_tensor_t *t, const void *ref,
                           judge_tensor_t *out, perr_t *err) {
    *out = *t;
    out->gd = ref;
    out->ill = NULL; /* the local judgment judges every update (judge_ill_conditioned) */
    out->backend = NULL; /* t's own (the layout's arrays are shared, not freed here) */
    if (tensor_arrays(out)) {
        tensor_arrays_free(out);
        return FAIL("judge: out of memory");
    }
    return assemble_one(s, out, err);
}

void judge_tensor_free(judge_tensor_t *t) { tensor_arrays_free(t); }

void judge_set_free(judge_set_t *s) {
    for (int i = 0; i < s->nt; i++) {
        judge_tensor_t *t = &s->t[i];
        tensor_arrays_free(t);
        free(t->name), free(t->masked), free(t->ill);
        free(t->backend), free(t->from_scheme), free(t->to_scheme);
    }
    free(s->t);
    for (int i = 0; i < s->nlocal_missing; i++) free(s->local_missing[i].names);
    free(s->local_missing);
    for (int i = 0; i < s->nfiles; i++) judge_file_close(&s->files[i]);
    free(s->files);
    free(s->by_rank);
    memset(s, 0, sizeof *s);
}
