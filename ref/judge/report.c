/* report.c - what `parity judge` says: the first divergence in data-flow
 * order (tensor, step, microbatch, rank and its coordinates, element,
 * got and golden, each judgment in the unit of its tolerance: "12.5 x the
 * envelope"), every tensor worst first, and per class the tolerance the
 * backend would have needed; the same numbers as JSON for --report. */
#include "judge_internal.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "parity/fileio.h"
#include "parity/json.h"
#include "parity/tensor_diff.h"

static const char *fmt_x(double x, char *buf, size_t cap) {
    if (isinf(x)) snprintf(buf, cap, "inf");
    else snprintf(buf, cap, "%.4g", x);
    return buf;
}

static int64_t step_of(const char *name) {
    return strncmp(name, "step", 4) ? -1 : strtoll(name + 4, NULL, 10);
}

/* "rank 2 (dp=1,tp=0)" of the element's worst copy. */
static void fmt_rank(const judge_set_t *s, int rank, char *buf, size_t cap) {
    char c[256];
    if (rank < 0) {
        snprintf(buf, cap, "no rank");
        return;
    }
    const judge_file_t *f = s->by_rank[rank];
    judge_fmt_coords(&f->mesh, f->coord, c, sizeof c);
    snprintf(buf, cap, "rank %d (%s, %s)", rank, c, f->path);
}

static void fmt_value(const judge_tensor_t *t, double v, char *buf, size_t cap) {
    if (t->g.dtype == ST_F32) {
        const float f = (float)v;
        uint32_t u;
        memcpy(&u, &f, 4);
        tensor_format_value(ST_F32, u, buf, cap);
    } else {
        snprintf(buf, cap, "%.17g", v);
    }
}

/* "BEYOND, 12.5 x the envelope (tolerance 32 x)" of a local verdict. */
static const char *fmt_local(const judge_verdict_t *l, char *buf, size_t cap) {
    char r[32];
    if (!l || l->tensor < 0) snprintf(buf, cap, "not recomputed (no unit computes it)");
    else snprintf(buf, cap, "%s, %s x the envelope of its teacher-forced recomputation (tolerance "
                  "%g x)", l->beyond ? "BEYOND" : "within", fmt_x(l->ratio, r, sizeof r), l->multiple);
    return buf;
}

/* The local verdict of tensor i, NULL when none was made. */
static const judge_verdict_t *local_of(const judge_verdict_t *local, int i) {
    return local && local[i].tensor >= 0 ? &local[i] : NULL;
}

/* A tensor is beyond when either judgment finds it so. */
static int beyond(const judge_verdict_t *v, const judge_verdict_t *local, int i) {
    const judge_verdict_t *l = local_of(local, i);
    return v[i].beyond || (l && l->beyond);
}

/* The unit a tensor's name says produced it: the batch (input ids,
 * labels) and the embedding's masks feed the embedding; the untied
 * output layer is the head's. */
static void fmt_unit(const char *name, char *buf, size_t cap) {
    const char *w = strchr(name, '.');
    w = w ? w + 1 : name;
    long l;
    if (sscanf(w, "act.layers.%ld.", &l) == 1 || sscanf(w, "mask.layers.%ld.", &l) == 1)
        snprintf(buf, cap, "layer %ld forward", l);
    else if (!strncmp(w, "act.embedding", 13) || !strcmp(w, "mask.dropout.embedding"))
        snprintf(buf, cap, "embedding forward");
    else if (!strcmp(w, "input_ids") || !strcmp(w, "labels"))
        snprintf(buf, cap, "batch (the embedding's inputs)");
    else if (!strncmp(w, "act.", 4) || !strncmp(w, "mask.", 5) || !strcmp(w, "logits") ||
             !strcmp(w, "loss"))
        snprintf(buf, cap, "head forward");
    else if (sscanf(w, "grad_input.layers.%ld", &l) == 1 || sscanf(w, "grad.layers.%ld.", &l) == 1)
        snprintf(buf, cap, "layer %ld backward", l);
    else if (!strncmp(w, "grad_input.head", 15) || !strncmp(w, "grad.final_layernorm", 20) ||
             !strncmp(w, "grad.output_layer", 17))
        snprintf(buf, cap, "head backward");
    else if (!strncmp(w, "grad.", 5)) snprintf(buf, cap, "embedding backward");
    else snprintf(buf, cap, "optimizer");
}

/* "<TITLE> name[i, j] (backend's element) (flat e of n), step s, microbatch m,
 * rank r (coords, file)", then the element's values and x's ratios: the
 * same lines for the trajectory's divergence (ref "golden") and the
 * local one (ref "recomputed"). */
static void print_element(FILE *f, const judge_set_t *s, const judge_verdict_t *x,
                          const char *title, const char *judgment, const char *ref) {
    const judge_tensor_t *t = &s->t[x->tensor];
    const uint64_t e = x->beyond ? x->first : x->worst;
    char idx[128], who[512], got[96], want[96], r[32], u[32], mb[48] = "", bk[512] = "";
    tensor_format_coords(t->g.ndim, t->g.shape, e, idx, sizeof idx);
    fmt_rank(s, x->copies ? x->who : -1, who, sizeof who);
    fmt_value(t, x->want, want, sizeof want);
    if (x->mb >= 0) snprintf(mb, sizeof mb, ", microbatch %d", x->mb);
    if (t->backend) {
        /* the element as the backend holds it: its index in the scheme's layout */
        char sidx[128];
        const uint64_t se = t->to_scheme ? t->to_scheme[e] : e;
        tensor_format_coords(t->to_scheme ? t->sndim : t->g.ndim,
                             t->to_scheme ? t->sshape : t->g.shape, se, sidx, sizeof sidx);
        snprintf(bk, sizeof bk, " (%s; the backend's element %s)", t->backend, sidx);
    }
    fprintf(f, "%s %s%s%s (flat %llu of %llu), step %lld%s, %s\n", title, t->name, idx, bk,
            (unsigned long long)e, (unsigned long long)t->numel, (long long)step_of(t->name), mb,
            who);
    if (!x->copies) {
        fprintf(f, "  no rank supplied this element (%s %s)\n", ref, want);
        return;
    }
    fmt_value(t, x->got, got, sizeof got);
    fprintf(f, "  got %s, %s %s; %d cop%s of this element\n", got, ref, want, x->copies,
            x->copies == 1 ? "y" : "ies");
    const double scale = x->envelope > x->floor ? x->envelope : x->floor;
    if (scale > 0)
        fprintf(f, "  %s: %s: %s x the envelope at this element, %s x for the tensor (tolerance "
                   "%g x); %s ulp of the tensor, %llu ulp of the element\n",
                judgment, x->beyond ? "BEYOND" : "within", fmt_x(x->elem_dev / scale, r, sizeof r),
                fmt_x(x->ratio, u, sizeof u), x->multiple,
                fmt_x(x->elem_dev / x->floor, idx, sizeof idx), (unsigned long long)x->elem_ulp);
    else
        fprintf(f, "  %s: %s: an integer tensor must be exact (off by %s)\n", judgment,
                x->beyond ? "BEYOND" : "within", fmt_x(x->elem_dev, r, sizeof r));
}

/* Why no local judgment was made (local NULL). */
static const char *local_missing(const judge_set_t *s) {
    return s->local_unavailable ? s->local_unavailable
                                : "the golden run is a dump: give the model flags";
}

static void print_counts(FILE *f, const judge_tensor_t *t, const judge_verdict_t *x) {
    fprintf(f, "  %llu of %llu elements of this tensor beyond, %llu missing, %llu masked, %llu "
               "ill-conditioned updates (gradient within its envelope of 0: judged locally)\n",
            (unsigned long long)x->nbeyond, (unsigned long long)t->numel,
            (unsigned long long)x->nmissing, (unsigned long long)x->nmasked,
            (unsigned long long)x->nill);
}

static void print_first(FILE *f, const judge_set_t *s, const judge_verdict_t *x,
                        const judge_verdict_t *local) {
    print_element(f, s, x, "FIRST DIVERGENCE", "trajectory", "golden");
    char l[256];
    if (local) fprintf(f, "  local: %s\n", fmt_local(&local[x->tensor], l, sizeof l));
    else fprintf(f, "  local: not available (%s)\n", local_missing(s));
    print_counts(f, &s->t[x->tensor], x);
}

/* The local judgment's first divergence: the unit whose teacher-forced
 * recomputation from the backend's own inputs disagrees first. */
static void print_first_local(FILE *f, const judge_set_t *s, const judge_verdict_t *v,
                              const judge_verdict_t *l) {
    char unit[64], r[32];
    fmt_unit(s->t[l->tensor].name, unit, sizeof unit);
    print_element(f, s, l, "FIRST LOCAL DIVERGENCE", "local", "recomputed");
    fprintf(f, "  the %s's recomputation disagrees first (teacher-forced from the backend's "
               "own inputs)\n", unit);
    const judge_verdict_t *x = &v[l->tensor];
    fprintf(f, "  trajectory: %s, %s x the envelope (tolerance %g x)\n",
            x->beyond ? "BEYOND" : "within", fmt_x(x->ratio, r, sizeof r), x->multiple);
    print_counts(f, &s->t[l->tensor], l);
}

typedef struct {
    const judge_verdict_t *v;
    int pos; /* in data-flow order */
} row_t;

static int worst_first(const void *pa, const void *pb) {
    const row_t *a = pa, *b = pb;
    if (a->v->ratio != b->v->ratio) return a->v->ratio > b->v->ratio ? -1 : 1;
    return a->pos - b->pos;
}

/* The rows worst first (malloc'd; NULL when out of memory). */
static row_t *rows_worst_first(const judge_set_t *s, const judge_verdict_t *v, const int *order) {
    row_t *rows = malloc((size_t)(s->nt ? s->nt : 1) * sizeof *rows);
    if (!rows) return NULL;
    for (int k = 0; k < s->nt; k++) rows[k].v = &v[order[k]], rows[k].pos = k;
    qsort(rows, (size_t)s->nt, sizeof *rows, worst_first);
    return rows;
}

/* Per class: the largest ratio (the multiple it would have needed), and
 * whether it has tensors at all. */
static void class_needs(const judge_set_t *s, const judge_verdict_t *v, const judge_verdict_t *local,
                        double *need, double *lneed, int *have) {
    for (int c = 0; c < JC_COUNT; c++) need[c] = 0, lneed[c] = 0, have[c] = 0;
    for (int i = 0; i < s->nt; i++) {
        have[v[i].cls] = 1;
        if (v[i].ratio > need[v[i].cls]) need[v[i].cls] = v[i].ratio;
        const judge_verdict_t *l = local_of(local, i);
        if (l && l->ratio > lneed[v[i].cls]) lneed[v[i].cls] = l->ratio;
    }
}

/* The tolerance class c's tensors were given: the class's (--tolerance,
 * else --multiple), and the distinct --tolerance-for multiples some of its
 * tensors took instead, with how many (up to JUDGE_GIVEN_MAX). */
enum { JUDGE_GIVEN_MAX = 4 };
typedef struct {
    double base;
    int n;                      /* distinct pattern multiples */
    double m[JUDGE_GIVEN_MAX];
    int count[JUDGE_GIVEN_MAX];
    int more;                   /* tensors with a further multiple, not listed */
} given_t;

static given_t class_given(const judge_set_t *s, const judge_opts_t *op, const judge_verdict_t *v,
                           judge_class_t c) {
    given_t g = {.base = op->class_multiple[c] > 0 ? op->class_multiple[c] : op->multiple};
    for (int i = 0; i < s->nt; i++) {
        if (v[i].cls != c || v[i].multiple == g.base) continue;
        int k = 0;
        while (k < g.n && g.m[k] != v[i].multiple) k++;
        if (k == g.n && g.n == JUDGE_GIVEN_MAX) {
            g.more++;
            continue;
        }
        if (k == g.n) g.m[g.n] = v[i].multiple, g.count[g.n++] = 0;
        g.count[k]++;
    }
    return g;
}

/* "32 (64 for 3 tensors by pattern)" */
static const char *fmt_given(const given_t *g, char *buf, size_t cap) {
    size_t n = (size_t)snprintf(buf, cap, "%g", g->base);
    for (int k = 0; k < g->n && n < cap; k++)
        n += (size_t)snprintf(buf + n, cap - n, "%s%g for %d tensor%s", k ? ", " : " (", g->m[k],
                              g->count[k], g->count[k] == 1 ? "" : "s");
    if (g->more && n < cap) n += (size_t)snprintf(buf + n, cap - n, ", %d more", g->more);
    if (g->n && n < cap) snprintf(buf + n, cap - n, " by pattern)");
    return buf;
}

static int count_beyond(const judge_set_t *s, const judge_verdict_t *v, const judge_verdict_t *local) {
    int n = 0;
    for (int i = 0; i < s->nt; i++) n += beyond(v, local, i);
    return n;
}

/* The first tensor in data-flow order the trajectory (traj), the local
 * judgment (loc) or either (any) finds beyond; -1: none. */
static void firsts(const judge_set_t *s, const judge_verdict_t *v, const judge_verdict_t *local,
                   const int *order, int *traj, int *loc, int *any) {
    *traj = *loc = *any = -1;
    for (int k = s->nt - 1; k >= 0; k--) {
        const int i = order[k];
        const judge_verdict_t *l = local_of(local, i);
        if (v[i].beyond) *traj = i;
        if (l && l->beyond) *loc = i;
        if (beyond(v, local, i)) *any = i;
    }
}

static const char *found_by(const judge_verdict_t *v, const judge_verdict_t *local, int i) {
    const judge_verdict_t *l = local_of(local, i);
    return v[i].beyond && l && l->beyond ? "both" : v[i].beyond ? "trajectory" : "local";
}

void judge_print(FILE *f, const judge_set_t *s, const judge_opts_t *op, const judge_verdict_t *v,
                 const judge_verdict_t *local, const int *order, const char *envelope_what) {
    const judge_file_t *f0 = &s->files[0];
    char mesh[256] = "";
    for (int a = 0, n = 0; a < f0->mesh.n; a++)
        n += snprintf(mesh + n, sizeof mesh - (size_t)n, "%s%s=%d", a ? "," : "", f0->mesh.name[a],
                      f0->mesh.size[a]);
    fprintf(f, "parity judge: %d rank file%s, mesh %s (%d rank%s), names %s, %s; %d tensors\n",
            s->nfiles, s->nfiles == 1 ? "" : "s", f0->mesh.n ? mesh : "{}", f0->mesh.ranks,
            f0->mesh.ranks == 1 ? "" : "s", s->names[0] ? s->names : f0->names, f0->bf16 ? "bf16" : "fp32", s->nt);
    fprintf(f, "envelope: %s\n", envelope_what);
    if (!local) fprintf(f, "local judgment: not available (%s)\n", local_missing(s));
    int first, lfirst, any;
    firsts(s, v, local, order, &first, &lfirst, &any);
    if (first >= 0) print_first(f, s, &v[first], local);
    else if (any >= 0) fprintf(f, "trajectory: every tensor within its tolerance\n");
    else fprintf(f, "no divergence: every tensor within its tolerance\n");
    if (lfirst >= 0) print_first_local(f, s, v, &local[lfirst]);
    else if (local)
        fprintf(f, "local: every unit's teacher-forced recomputation agrees within tolerance\n");
    if (any >= 0) {
        char unit[64];
        fmt_unit(s->t[any].name, unit, sizeof unit);
        fprintf(f, "first divergence in data-flow order (both judgments): %s, the %s; found by %s\n",
                s->t[any].name, unit, found_by(v, local, any));
    }
    row_t *rows = rows_worst_first(s, v, order);
    fprintf(f, "summary, worst first (ratio: x the envelope; ulp: of the tensor's largest "
               "golden magnitude, and of the worst element):\n");
    fprintf(f, "  %-7s %12s %12s %10s %14s %12s %-10s %s\n", "verdict", "trajectory", "local",
            "tolerance", "ulp(tensor)", "ulp(elem)", "class", "tensor");
    for (int k = 0; rows && k < s->nt; k++) {
        const judge_verdict_t *x = rows[k].v;
        char r[32], u[32], l[32] = "-";
        const judge_verdict_t *lx = local_of(local, x->tensor);
        if (lx) fmt_x(lx->ratio, l, sizeof l);
        fprintf(f, "  %-7s %12s %12s %10g %14s %12llu %-10s %s%s%s%s\n",
                beyond(v, local, x->tensor) ? "BEYOND" : "within", fmt_x(x->ratio, r, sizeof r),
                l, x->multiple,
                fmt_x(x->floor > 0 ? x->dev / x->floor : x->dev > 0 ? INFINITY : 0, u, sizeof u),
                (unsigned long long)x->elem_ulp, judge_class_name(x->cls), s->t[x->tensor].name,
                s->t[x->tensor].backend ? " (" : "",
                s->t[x->tensor].backend ? s->t[x->tensor].backend : "",
                s->t[x->tensor].backend ? ")" : "");
    }
    free(rows);
    for (int m = 0; m < op->nmasks; m++) {
        const judge_mask_t *k = &op->masks[m];
        const judge_tensor_t *t = NULL;
        for (int i = 0; i < s->nt && !t; i++)
            if (!strcmp(s->t[i].name, k->name)) t = &s->t[i];
        char idx[128], d[32];
        tensor_format_coords(t->g.ndim, t->g.shape, k->flat, idx, sizeof idx);
        fprintf(f, "masked %s%s (flat %llu): off by %s, skipped: %s\n", k->name, idx,
                (unsigned long long)k->flat,
                fmt_x(t->copies[k->flat] ? t->dev[k->flat] : INFINITY, d, sizeof d), k->reason);
    }
    double need[JC_COUNT], lneed[JC_COUNT];
    int have[JC_COUNT];
    class_needs(s, v, local, need, lneed, have);
    fprintf(f, "per class, the tolerance this backend needed (x the envelope: trajectory, local) "
               "and the one given:\n");
    for (int c = 0; c < JC_COUNT; c++) {
        if (!have[c]) continue;
        char r[32], l[32] = "-", gv[256];
        if (local) fmt_x(lneed[c], l, sizeof l);
        const given_t g = class_given(s, op, v, (judge_class_t)c);
        fprintf(f, "  %-10s needed %10s %10s   given %s\n", judge_class_name(c),
                fmt_x(need[c], r, sizeof r), l, fmt_given(&g, gv, sizeof gv));
    }
    const int nb = count_beyond(s, v, local);
    if (nb) fprintf(f, "verdict: BEYOND: %d of %d tensors beyond their tolerance\n", nb, s->nt);
    else fprintf(f, "verdict: WITHIN: all %d tensors within their tolerance\n", s->nt);
}

/* A number, or the string "inf" (JSON has no infinity). */
static void jnum(FILE *f, double x) {
    if (isfinite(x)) fprintf(f, "%.17g", x);
    else fprintf(f, "\"%s\"", isnan(x) ? "nan" : x > 0 ? "inf" : "-inf");
}

static void jstr_or_null(FILE *f, const char *s) {
    if (s) json_write_string(f, s);
    else fprintf(f, "null");
}

/* A verdict's numbers and its element (`first`, else the worst): the
 * same keys for the trajectory's and the local judgment's. */
static void json_verdict(FILE *f, const judge_set_t *s, const judge_verdict_t *x) {
    const judge_tensor_t *t = &s->t[x->tensor];
    const uint64_t e = x->beyond ? x->first : x->worst;
    fprintf(f, "\"ratio\": ");
    jnum(f, x->ratio);
    fprintf(f, ", \"multiple\": ");
    jnum(f, x->multiple);
    fprintf(f, ", \"envelope\": ");
    jnum(f, x->envelope);
    fprintf(f, ", \"floor\": ");
    jnum(f, x->floor);
    fprintf(f, ", \"deviation\": ");
    jnum(f, x->dev);
    fprintf(f, ", \"ulp_tensor\": ");
    jnum(f, x->floor > 0 ? x->dev / x->floor : x->dev > 0 ? INFINITY : 0);
    fprintf(f, ", \"ulp_element\": %llu, \"elements_beyond\": %llu, \"missing\": %llu, "
               "\"masked\": %llu, \"ill_conditioned\": %llu, \"element\": %llu, \"flat\": %llu, "
               "\"index\": [",
            (unsigned long long)x->elem_ulp, (unsigned long long)x->nbeyond,
            (unsigned long long)x->nmissing, (unsigned long long)x->nmasked, (unsigned long long)x->nill,
            (unsigned long long)e, (unsigned long long)e);
    uint64_t r = e;
    int64_t idx[ST_MAX_DIMS];
    for (int d = t->g.ndim - 1; d >= 0; d--) idx[d] = (int64_t)(r % (uint64_t)t->g.shape[d]), r /= (uint64_t)t->g.shape[d];
    for (int d = 0; d < t->g.ndim; d++) fprintf(f, "%s%lld", d ? ", " : "", (long long)idx[d]);
    fprintf(f, "], \"rank\": %d, \"microbatch\": %d, \"coords\": ", x->copies ? x->who : -1, x->mb);
    char c[256] = "";
    if (x->copies) {
        const judge_file_t *rf = s->by_rank[x->who];
        judge_fmt_coords(&rf->mesh, rf->coord, c, sizeof c);
    }
    json_write_string(f, c);
    fprintf(f, ", \"copies\": %d, \"got\": ", x->copies);
    jnum(f, x->copies ? x->got : NAN);
    fprintf(f, ", \"want\": ");
    jnum(f, t->numel ? x->want : 0);
    fprintf(f, ", \"element_ratio\": ");
    const double scale = x->envelope > x->floor ? x->envelope : x->floor;
    jnum(f, scale > 0 ? x->elem_dev / scale : x->elem_dev > 0 ? INFINITY : 0);
}

/* The tensor's name, scheme name, class, step, unit. */
static void json_head(FILE *f, const judge_set_t *s, int i) {
    const judge_tensor_t *t = &s->t[i];
    char unit[64];
    fmt_unit(t->name, unit, sizeof unit);
    fprintf(f, "\"tensor\": ");
    json_write_string(f, t->name);
    fprintf(f, ", \"backend\": ");
    jstr_or_null(f, t->backend);
    fprintf(f, ", \"class\": \"%s\", \"step\": %lld, \"unit\": ", judge_class_name(judge_class_of(t->name)),
            (long long)step_of(t->name));
    json_write_string(f, unit);
    fprintf(f, ", \"numel\": %llu, ", (unsigned long long)t->numel);
}

/* A tensor: "verdict" both judgments' (beyond if either is), the
 * trajectory's numbers, and "local" the local judgment's (null: none). */
static void json_tensor(FILE *f, const judge_set_t *s, const judge_verdict_t *v,
                        const judge_verdict_t *local, int i) {
    const judge_verdict_t *l = local_of(local, i);
    fprintf(f, "{");
    json_head(f, s, i);
    fprintf(f, "\"verdict\": \"%s\", \"trajectory_verdict\": \"%s\", \"trajectory_ratio\": ",
            beyond(v, local, i) ? "beyond" : "within", v[i].beyond ? "beyond" : "within");
    jnum(f, v[i].ratio);
    fprintf(f, ", ");
    json_verdict(f, s, &v[i]);
    if (!l) {
        fprintf(f, ", \"local\": null}");
        return;
    }
    fprintf(f, ", \"local\": {\"verdict\": \"%s\", ", l->beyond ? "beyond" : "within");
    json_verdict(f, s, l);
    fprintf(f, "}}");
}

/* The local judgment's first divergence: the tensor's head and the local
 * verdict's numbers (the same keys as the trajectory's). */
static void json_local_first(FILE *f, const judge_set_t *s, const judge_verdict_t *l) {
    fprintf(f, "{");
    json_head(f, s, l->tensor);
    fprintf(f, "\"verdict\": \"%s\", ", l->beyond ? "beyond" : "within");
    json_verdict(f, s, l);
    fprintf(f, "}");
}

int judge_write_json(const char *path, const judge_set_t *s, const judge_opts_t *op,
                     const judge_verdict_t *v, const judge_verdict_t *local, const int *order,
                     const char *envelope_what, perr_t *err) {
    pio_out_t out;
    if (pio_out_open(&out, path, "--report", err)) return -1;
    FILE *f = out.f;
    int first, lfirst, any;
    firsts(s, v, local, order, &first, &lfirst, &any);
    fprintf(f, "{\"format\": \"parity-judge-1\", \"ranks\": %d, \"files\": %d, \"envelope\": ",
            s->files[0].mesh.ranks, s->nfiles);
    json_write_string(f, envelope_what);
    fprintf(f, ", \"envelope_runs\": %d, \"verdict\": \"%s\", \"trajectory_verdict\": \"%s\", "
               "\"local\": ",
            op->envelope_runs, any >= 0 ? "beyond" : "within", first >= 0 ? "beyond" : "within");
    if (local) fprintf(f, "{\"verdict\": \"%s\"}", lfirst >= 0 ? "beyond" : "within");
    else fprintf(f, "null");
    fprintf(f, ", \"local_unavailable\": ");
    jstr_or_null(f, local ? NULL : local_missing(s));
    fprintf(f, ",\n \"first\": ");
    if (any >= 0) {
        char unit[64];
        fmt_unit(s->t[any].name, unit, sizeof unit);
        fprintf(f, "{\"tensor\": ");
        json_write_string(f, s->t[any].name);
        fprintf(f, ", \"unit\": ");
        json_write_string(f, unit);
        fprintf(f, ", \"found_by\": \"%s\"}", found_by(v, local, any));
    } else {
        fprintf(f, "null");
    }
    fprintf(f, ",\n \"first_divergence\": ");
    if (first >= 0) json_tensor(f, s, v, local, first);
    else fprintf(f, "null");
    fprintf(f, ",\n \"first_local_divergence\": ");
    if (lfirst >= 0) json_local_first(f, s, &local[lfirst]);
    else fprintf(f, "null");
    fprintf(f, ",\n \"tensors\": [");
    for (int k = 0; k < s->nt; k++) {
        fprintf(f, "%s\n  ", k ? "," : "");
        json_tensor(f, s, v, local, order[k]);
    }
    double need[JC_COUNT], lneed[JC_COUNT];
    int have[JC_COUNT];
    class_needs(s, v, local, need, lneed, have);
    fprintf(f, "],\n \"classes\": {");
    for (int c = 0, n = 0; c < JC_COUNT; c++) {
        if (!have[c]) continue;
        fprintf(f, "%s\"%s\": {\"needed\": ", n++ ? ", " : "", judge_class_name(c));
        jnum(f, need[c]);
        fprintf(f, ", \"needed_local\": ");
        if (local) jnum(f, lneed[c]);
        else fprintf(f, "null");
        const given_t g = class_given(s, op, v, (judge_class_t)c);
        fprintf(f, ", \"given\": ");
        jnum(f, g.base);
        fprintf(f, ", \"given_by_pattern\": [");
        for (int k = 0; k < g.n; k++) {
            fprintf(f, "%s{\"multiple\": ", k ? ", " : "");
            jnum(f, g.m[k]);
            fprintf(f, ", \"tensors\": %d}", g.count[k]);
        }
        fprintf(f, "]}");
    }
    fprintf(f, "},\n \"masks\": [");
    for (int m = 0; m < op->nmasks; m++) {
        fprintf(f, "%s{\"tensor\": ", m ? ", " : "");
        json_write_string(f, op->masks[m].name);
        fprintf(f, ", \"element\": %llu, \"reason\": ", (unsigned long long)op->masks[m].flat);
        json_write_string(f, op->masks[m].reason);
        fprintf(f, "}");
    }
    fprintf(f, "]}\n");
    return pio_out_commit(&out, err);
}
