/* check.c - compare a layout's dump with the golden dump (check.h).
 *
 * The first divergence, in execution order, in mesh terms:
 *
 *   FIRST DIVERGENCE (execution order)
 *     tensor      step0.grad.final_layernorm.weight
 *     step        0
 *     microbatch  all 1 microbatch of the step (summed exactly, rounded once)
 *     element     global index [0] (flat index 0 of 16)
 *     produced by device 2 (tp 0, cp 0, ep 0, dp 1, pp 0; gradient-group rank 1 of 2, ZeRO-0)
 *     placement   the block of tensor-parallel rank 0 (element 0 there), the exact ...
 *     golden      -0.00299471267 (0xbb4442f1)
 *     got         -0.00299471244 (0xbb4442f0)
 *     ulp         1
 *     last touched by dp: the exact reduce-scatter of gradient bucket 0 over group
 *                 'dp-cp' (2 ranks, ZeRO-0) - check the data-parallel gradient reduction
 *     this tensor: 8 of 16 elements differ, max 8 ulp, max rel 5.34e-07
 *
 *  - microbatch: a batch tensor's (activation, mask, unit-input gradient)
 *    "k of m (n sequences; ...)"; a gradient "all m microbatches (summed)";
 *    an update, the loss, the norm say how the step's microbatches made them;
 *  - element: the index in the global (reassembled) tensor, by axis and flat;
 *  - produced by: the device that wrote the element (the dump's sources;
 *    else the one the layout gives it), its coordinates on every axis,
 *    sizes of 1 included (ep is 0 until expert parallelism exists), then
 *    the element's sub-axes: the virtual-pipeline chunk of its unit, the
 *    gradient-group ('dp-cp') rank and ZeRO stage, the context-parallel
 *    chunk of its position, the sequence-parallel slice;
 *  - ulp: the distance of the two floats ("n/a" for integers, masks, NaN);
 *  - last touched by MODE: a suggestion of the mode whose reduction wrote
 *    the element last (tp, cp, dp, pp, optimizer; compute where no
 *    collective writes it), from the tensor's name and the layout alone
 *    (engine/describe_mesh.c), never from which bug was injected.
 * A replica that disagrees and an element nobody wrote are reported with
 * the same lines (their titles say which). */
#include "parity/check.h"

#include <stdlib.h>
#include <string.h>

#include "model/gpt.h"
#include "parity/tensor_diff.h"

/* Execution order from the model's unit kinds (gpt_checkpoint_position,
 * gpt_backward_position): a divergence is reported where it first
 * appears. A unit's input gradient comes out of its backward pass after
 * its weight gradients. */
void check_exec_key(const char *name, long key[4]) {
    key[0] = key[1] = key[2] = key[3] = 0;
    if (!strncmp(name, "init.", 5)) return;
    if (strncmp(name, "step", 4)) {
        key[0] = 1L << 40;
        return;
    }
    char *dot;
    key[0] = 1 + strtol(name + 4, &dot, 10);
    const char *what = *dot == '.' ? dot + 1 : dot;
    if (!strcmp(what, "input_ids") || !strcmp(what, "labels")) key[1] = 0;
    else if (!gpt_checkpoint_position(what, &key[2], &key[3])) {
        key[1] = 1;
        key[3] = key[3] * 2 + (what[0] == 'a'); /* a mask before the output it shapes */
    } else if (!strncmp(what, "act.", 4) || !strncmp(what, "mask.", 5))
        key[1] = 1, key[2] = 1L << 40; /* no kind's: after the known ones */
    else if (!strcmp(what, "loss")) key[1] = 3;
    else if (!strncmp(what, "grad.", 5)) key[1] = 4, key[2] = gpt_backward_position(what + 5);
    else if (!strncmp(what, "grad_input.", 11))
        key[1] = 4, key[2] = gpt_backward_position(what), key[3] = 1;
    else if (!strcmp(what, "grad_norm")) key[1] = 5;
    else if (!strcmp(what, "lr")) key[1] = 6;
    else if (!strcmp(what, "adam_t")) key[1] = 7; /* AdamW: the count, m, v, then the update */
    else if (!strncmp(what, "exp_avg.", 8)) key[1] = 8;
    else if (!strncmp(what, "exp_avg_sq.", 11)) key[1] = 9;
    else if (!strncmp(what, "param.", 6)) key[1] = 10;
    else key[1] = 11;
}

typedef struct {
    long key[4];
    size_t index; /* insertion order breaks ties */
} order_t;

static int by_exec(const void *pa, const void *pb) {
    const order_t *a = pa, *b = pb;
    for (int k = 0; k < 4; k++)
        if (a->key[k] != b->key[k]) return a->key[k] < b->key[k] ? -1 : 1;
    return a->index < b->index ? -1 : a->index > b->index;
}

static int same_layout(const st_tensor_t *a, const st_tensor_t *b) {
    if (a->dtype != b->dtype || a->ndim != b->ndim) return 0;
    for (int d = 0; d < a->ndim; d++)
        if (a->shape[d] != b->shape[d]) return 0;
    return 1;
}

static const check_replica_t *replica_of(const check_owner_t *owner, const char *name) {
    for (int i = 0; owner && i < owner->nreplicas; i++)
        if (!strcmp(owner->replicas[i].name, name)) return &owner->replicas[i];
    return NULL;
}

/* "3 (tp 1, cp 0, ep 0, dp 1, pp 0)", or just the rank when the layout
 * gives no name. */
static void name_device(const check_owner_t *owner, int device, char *buf, size_t cap) {
    if (owner && owner->device_name) owner->device_name(owner->ctx, device, buf, cap);
    else snprintf(buf, cap, "%d", device);
}

static void print_replicas(FILE *f, const check_replica_t *r, const check_owner_t *owner) {
    char dev[160], taken[160];
    name_device(owner, r->device, dev, sizeof dev);
    name_device(owner, r->taken, taken, sizeof taken);
    fprintf(f, "  replicas    device %s's copy differs from device %s's, which the dump holds "
               "(%d replica%s of this tensor differ%s)\n",
            dev, taken, r->ndiffer, r->ndiffer == 1 ? "" : "s", r->ndiffer == 1 ? "s" : "");
}

/* The lines every first-divergence report opens with: the tensor, its
 * step, the microbatch and the element by global index. Fills *m (the
 * element in mesh terms, for `device`: -1 when the layout did not say
 * who wrote it) when the layout can tell; m->device[0] == 0 otherwise. */
static void print_head(FILE *f, const char *title, const st_tensor_t *t, uint64_t flat,
                       int device, const check_owner_t *owner, check_mesh_t *m) {
    char coords[128];
    tensor_format_coords(t->ndim, t->shape, flat, coords, sizeof coords);
    long step = strncmp(t->name, "step", 4) ? -1 : strtol(t->name + 4, NULL, 10);
    m->device[0] = m->microbatch[0] = m->touched[0] = 0;
    if (owner && owner->mesh) owner->mesh(owner->ctx, t, flat, device, m);
    fprintf(f, "FIRST DIVERGENCE (execution order)%s\n", title);
    fprintf(f, "  tensor      %s\n", t->name);
    if (step >= 0) fprintf(f, "  step        %ld\n", step);
    if (m->microbatch[0]) fprintf(f, "  microbatch  %s\n", m->microbatch);
    fprintf(f, "  element     global index %s (flat index %llu of %llu)\n", coords,
            (unsigned long long)flat, (unsigned long long)st_numel(t));
}

/* The ULP distance of a float element; says why there is none otherwise
 * (a mask, token ids, a NaN), so that every report has the line. */
static void print_ulp(FILE *f, st_dtype_t dt, int nan, uint64_t ulp) {
    if (!st_dtype_is_float(dt))
        fprintf(f, "  ulp         n/a (integer values, not floats)\n");
    else if (nan)
        fprintf(f, "  ulp         n/a (NaN)\n");
    else
        fprintf(f, "  ulp         %llu\n", (unsigned long long)ulp);
}

static void print_touched(FILE *f, const check_mesh_t *m) {
    if (m->touched[0]) fprintf(f, "  last touched by %s\n", m->touched);
}

/* A tensor whose dumped copy matched the golden run but whose replicas
 * disagree: the element, both values and the device. */
static void print_replica_divergence(FILE *f, const st_tensor_t *t, const check_replica_t *r,
                                     const check_owner_t *owner) {
    char va[96], vb[96], who[512] = "", gold[512] = "";
    check_mesh_t m;
    uint32_t want, got;
    memcpy(&want, &r->want, sizeof want);
    memcpy(&got, &r->got, sizeof got);
    tensor_format_value(ST_F32, want, va, sizeof va);
    tensor_format_value(ST_F32, got, vb, sizeof vb);
    if (owner->describe) owner->describe(owner->ctx, t, r->flat, who, gold, sizeof who);
    print_head(f, ": the replicas of a tensor disagree", t, r->flat, r->device, owner, &m);
    if (m.device[0]) fprintf(f, "  produced by device %s (its replica)\n", m.device);
    print_replicas(f, r, owner);
    if (who[0]) fprintf(f, "  placement   %s\n", who);
    fprintf(f, "  device %-4d %s (dumped; equals the golden run)\n", r->taken, va);
    fprintf(f, "  device %-4d %s\n", r->device, vb);
    print_ulp(f, ST_F32, r->want != r->want || r->got != r->got,
              tensor_ulp_distance(want, got, sizeof(float)));
    print_touched(f, &m);
}

/* The layout's tensor number j: who wrote each element, or NULL. */
static const int32_t *sources_of(const check_owner_t *owner, long j) {
    return owner && owner->sources && j >= 0 ? owner->sources(owner->ctx, (size_t)j) : NULL;
}

/* An element that no device wrote: the first, and how many. */
static void print_unwritten(FILE *f, const st_tensor_t *t, uint64_t first, uint64_t count,
                            const check_owner_t *owner) {
    char who[512] = "", gold[512] = "";
    check_mesh_t m;
    if (owner && owner->describe) owner->describe(owner->ctx, t, first, who, gold, sizeof who);
    print_head(f, ": an element that no device wrote", t, first, -1, owner, &m);
    if (m.device[0]) fprintf(f, "  expected    from device %s\n", m.device);
    if (who[0]) fprintf(f, "  expected    from %s\n", who);
    print_touched(f, &m);
    fprintf(f, "  this tensor: %llu of %llu elements unwritten (their values are whatever the "
               "reassembly buffer held)\n",
            (unsigned long long)count, (unsigned long long)st_numel(t));
}

/* wrote: the device that wrote element d->first (the dump's sources), -1
 * when not known. */
static void print_divergence(FILE *f, const st_tensor_t *t, const tensor_diff_t *d,
                             const check_owner_t *owner, int wrote) {
    char va[96], vb[96], who_layout[512] = "", who_golden[512] = "";
    check_mesh_t m;
    tensor_format_value(t->dtype, d->first_a, va, sizeof va);
    tensor_format_value(t->dtype, d->first_b, vb, sizeof vb);
    if (owner && owner->describe)
        owner->describe(owner->ctx, t, d->first, who_layout, who_golden, sizeof who_layout);
    print_head(f, "", t, d->first, wrote, owner, &m);
    if (m.device[0]) {
        fprintf(f, "  produced by device %s\n", m.device);
        if (who_layout[0]) fprintf(f, "  placement   %s\n", who_layout);
    } else if (wrote >= 0) {
        char dev[160];
        name_device(owner, wrote, dev, sizeof dev);
        fprintf(f, "  produced by device %s\n", dev);
        if (who_layout[0]) fprintf(f, "  placement   %s\n", who_layout);
    } else if (who_layout[0]) {
        fprintf(f, "  produced by %s\n", who_layout);
    }
    if (who_golden[0]) fprintf(f, "  golden      %s\n", who_golden);
    fprintf(f, "  golden      %s\n  got         %s\n", va, vb);
    print_ulp(f, t->dtype, d->first_nan, d->first_ulp);
    print_touched(f, &m);
    fprintf(f, "  this tensor: %llu of %llu elements differ, max %llu ulp, max rel %.3g\n",
            (unsigned long long)d->ndiff, (unsigned long long)d->numel,
            (unsigned long long)d->max_ulp, d->max_rel);
    const check_replica_t *r = replica_of(owner, t->name);
    if (r) print_replicas(f, r, owner);
}

unsigned check_class_of(const char *name) {
    if (!strncmp(name, "init.", 5)) return CHECK_PARAMETERS;
    const char *what = name;
    if (!strncmp(name, "step", 4) && strchr(name, '.')) what = strchr(name, '.') + 1;
    if (!strncmp(what, "grad", 4)) return CHECK_GRADIENTS; /* grad., grad_input., grad_norm */
    if (!strncmp(what, "param.", 6) || !strcmp(what, "lr")) return CHECK_PARAMETERS;
    if (!strncmp(what, "exp_avg", 7) || !strcmp(what, "adam_t")) return CHECK_OPTIMIZER;
    return CHECK_ACTIVATIONS;
}

int check_parse_classes(const char *list, unsigned *out, perr_t *err) {
    static const struct { const char *word; unsigned bits; } words[] = {
        {"act", CHECK_ACTIVATIONS}, {"grad", CHECK_GRADIENTS}, {"param", CHECK_PARAMETERS},
        {"optim", CHECK_OPTIMIZER}, {"all", CHECK_ALL}};
    *out = 0;
    const char *p = list;
    do {
        const size_t len = strcspn(p, ",");
        unsigned bits = 0;
        for (size_t k = 0; k < sizeof words / sizeof words[0]; k++)
            if (strlen(words[k].word) == len && !strncmp(p, words[k].word, len)) bits = words[k].bits;
        if (!bits)
            return perr_set(err, "--compare: '%.*s' is not a class of tensors (expected a comma-"
                                 "separated list of act, grad, param, optim, or all)",
                            (int)len, p);
        *out |= bits;
        p += len;
    } while (*p++ == ',');
    return 0;
}

int check_compare(const st_writer_t *golden, const st_writer_t *got, const check_owner_t *owner,
                  FILE *report, check_result_t *res) {
    return check_compare_classes(golden, got, owner, CHECK_ALL, report, res);
}

/* What the comparison of one golden tensor found: kept for every golden
 * tensor (metadata and a few numbers, never its elements) so that the
 * report can walk them in execution order after the fact, whichever
 * order they were compared in (check_stream). */
enum { SEEN_NOT = 0, SEEN_EXACT, SEEN_DIFF, SEEN_UNWRITTEN, SEEN_OTHER_LAYOUT };

typedef struct {
    st_tensor_t t;          /* the golden tensor's metadata; t.name is name */
    char *name;
    order_t ord;
    int seen;               /* SEEN_* */
    tensor_diff_t d;        /* SEEN_DIFF */
    int wrote;              /* SEEN_DIFF: the device that wrote d.first, -1: not known */
    uint64_t first_unwritten, unwritten; /* SEEN_UNWRITTEN */
} entry_t;

struct check_stream {
    unsigned classes;
    entry_t *e;
    size_t n, cap;
    entry_t **by_name; /* the entries sorted by name, built by check_stream_seal */
};

check_stream_t *check_stream_new(unsigned classes) {
    check_stream_t *cs = calloc(1, sizeof *cs);
    if (cs) cs->classes = classes;
    return cs;
}

void check_stream_free(check_stream_t *cs) {
    if (!cs) return;
    for (size_t i = 0; i < cs->n; i++) free(cs->e[i].name);
    free(cs->e);
    free(cs->by_name);
    free(cs);
}

int check_stream_golden(check_stream_t *cs, const st_tensor_t *t) {
    if (cs->n == cs->cap) {
        size_t cap = cs->cap ? 2 * cs->cap : 1024;
        entry_t *grown = realloc(cs->e, cap * sizeof *grown);
        if (!grown) return -1;
        cs->e = grown, cs->cap = cap;
    }
    entry_t *e = &cs->e[cs->n];
    memset(e, 0, sizeof *e);
    if (!(e->name = strdup(t->name))) return -1;
    e->t = *t;
    e->t.name = e->name;
    check_exec_key(e->name, e->ord.key);
    e->ord.index = cs->n++;
    return 0;
}

static int by_entry_name(const void *pa, const void *pb) {
    return strcmp((*(entry_t *const *)pa)->name, (*(entry_t *const *)pb)->name);
}

int check_stream_seal(check_stream_t *cs) {
    free(cs->by_name);
    if (!(cs->by_name = malloc((cs->n ? cs->n : 1) * sizeof *cs->by_name))) return -1;
    for (size_t i = 0; i < cs->n; i++) cs->by_name[i] = &cs->e[i];
    qsort(cs->by_name, cs->n, sizeof *cs->by_name, by_entry_name);
    return 0;
}

/* The golden entry named name, or NULL (binary search of by_name). */
static entry_t *find_entry(check_stream_t *cs, const char *name) {
    size_t lo = 0, hi = cs->by_name ? cs->n : 0;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        int c = strcmp(cs->by_name[mid]->name, name);
        if (!c) return cs->by_name[mid];
        if (c < 0) lo = mid + 1;
        else hi = mid;
    }
    return NULL;
}

int check_stream_wants(check_stream_t *cs, const char *name) {
    entry_t *e = find_entry(cs, name);
    return e && (check_class_of(name) & cs->classes);
}

void check_stream_tensor(check_stream_t *cs, const void *gd, const st_tensor_t *u, const void *ld,
                         const int32_t *src) {
    entry_t *e = find_entry(cs, u->name);
    if (!e || !(check_class_of(e->name) & cs->classes)) return;
    if (!same_layout(&e->t, u)) {
        e->seen = SEEN_OTHER_LAYOUT;
        return;
    }
    const uint64_t numel = st_numel(&e->t);
    uint64_t unwritten = 0, first_unwritten = 0;
    for (uint64_t k = 0; src && k < numel; k++) unwritten += src[k] < 0; /* vectorised */
    while (unwritten && src[first_unwritten] >= 0) first_unwritten++;
    if (unwritten) {
        e->seen = SEEN_UNWRITTEN;
        e->unwritten = unwritten, e->first_unwritten = first_unwritten;
        return;
    }
    if (tensor_diff(e->t.dtype, numel, gd, ld, &e->d)) {
        e->seen = SEEN_EXACT;
        return;
    }
    e->seen = SEEN_DIFF;
    e->wrote = src && src[e->d.first] >= 0 ? src[e->d.first] : -1;
}

int check_stream_finish(check_stream_t *cs, const check_owner_t *owner, FILE *report,
                        check_result_t *res) {
    memset(res, 0, sizeof *res);
    order_t *ord = malloc((cs->n ? cs->n : 1) * sizeof *ord);
    if (!ord) {
        if (report) fputs("check: out of memory\n", report);
        return 1;
    }
    for (size_t i = 0; i < cs->n; i++) ord[i] = cs->e[i].ord;
    qsort(ord, cs->n, sizeof *ord, by_exec);
    int bad = 0;
    for (size_t k = 0; k < cs->n; k++) {
        const entry_t *e = &cs->e[ord[k].index];
        const st_tensor_t *t = &e->t;
        if (!(check_class_of(t->name) & cs->classes)) {
            res->skipped++;
            continue;
        }
        res->compared++;
        if (e->seen == SEEN_NOT || e->seen == SEEN_OTHER_LAYOUT) {
            res->missing++;
            if (!bad && report)
                fprintf(report, "FIRST DIVERGENCE (execution order)\n  tensor      %s\n  %s\n",
                        t->name, e->seen ? "has another dtype or shape in the layout run"
                                         : "is missing from the layout run");
            if (!bad) snprintf(res->first_bad, sizeof res->first_bad, "%s", t->name);
            bad = 1;
            continue;
        }
        if (e->seen == SEEN_UNWRITTEN) {
            res->unwritten++;
            if (!bad && report) print_unwritten(report, t, e->first_unwritten, e->unwritten, owner);
            if (!bad) snprintf(res->first_bad, sizeof res->first_bad, "%s", t->name);
            bad = 1;
            continue;
        }
        const check_replica_t *rep = replica_of(owner, t->name);
        res->replicas += rep != NULL;
        if (e->seen == SEEN_EXACT) {
            res->exact++;
            if (!rep) continue;
            if (!bad && report) print_replica_divergence(report, t, rep, owner);
        } else if (!bad && report) {
            print_divergence(report, t, &e->d, owner, e->wrote);
        }
        if (!bad) snprintf(res->first_bad, sizeof res->first_bad, "%s", t->name);
        bad = 1;
    }
    if (bad && report)
        fprintf(report, "  in all: %d of %d tensors bit-exact, %d missing, %d with replicas that "
                        "disagree, %d with unwritten elements\n",
                res->exact, res->compared, res->missing, res->replicas, res->unwritten);
    free(ord);
    return bad;
}

/* The in-memory comparison: both runs' writers whole, through the same
 * stream (the tensors in golden order; the report orders them itself). */
int check_compare_classes(const st_writer_t *golden, const st_writer_t *got,
                          const check_owner_t *owner, unsigned classes, FILE *report,
                          check_result_t *res) {
    check_stream_t *cs = check_stream_new(classes);
    const size_t n = st_writer_count(golden);
    st_tensor_t t, u;
    int oom = !cs;
    for (size_t i = 0; !oom && i < n; i++) {
        st_writer_tensor(golden, i, &t);
        oom = check_stream_golden(cs, &t) != 0;
    }
    if (oom || check_stream_seal(cs)) {
        check_stream_free(cs);
        memset(res, 0, sizeof *res);
        if (report) fputs("check: out of memory\n", report);
        return 1;
    }
    for (size_t i = 0; i < n; i++) {
        const void *gd = st_writer_tensor(golden, i, &t);
        long j = st_writer_find(got, t.name);
        if (j < 0) continue;
        const void *ld = st_writer_tensor(got, (size_t)j, &u);
        check_stream_tensor(cs, gd, &u, ld, sources_of(owner, j));
    }
    int bad = check_stream_finish(cs, owner, report, res);
    check_stream_free(cs);
    return bad;
}
