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

static double golden_value(const judge_tensor_t *t, uint64_t e) {
    if (t->g.dtype == ST_F32) {
        float f;
        memcpy(&f, (const unsigned char *)t->gd + 4 * e, 4);
        return f;
    }
    if (t->g.dtype == ST_I32) {
        int32_t i;
        memcpy(&i, (const unsigned char *)t->gd + 4 * e, 4);
        return i;
    }
    if (t->g.dtype == ST_U8) return ((const unsigned char *)t->gd)[e];
    double d = 0;
    if (t->g.dtype == ST_F64) memcpy(&d, (const unsigned char *)t->gd + 8 * e, 8);
    return d;
}

/* "BEYOND, 12.5 x the envelope (tolerance 32 x)" of a local verdict. */
static const char *fmt_local(const judge_verdict_t *l, char *buf, size_t cap) {
    char r[32];
    if (!l || l->tensor < 0) snprintf(buf, cap, "not recomputed (no unit computes it)");
    else snprintf(buf, cap, "%s, %s x the envelope of its teacher-forced recomputation (tolerance "
                  "%g x)", l->beyond ? "BEYOND" : "within", fmt_x(l->ratio, r, sizeof r), l->multiple);
    return buf;
}

/* The unit a tensor's name says produced it. */
static void fmt_unit(const char *name, char *buf, size_t cap) {
    const char *w = strchr(name, '.');
    w = w ? w + 1 : name;
    long l;
    if (sscanf(w, "act.layers.%ld.", &l) == 1) snprintf(buf, cap, "layer %ld forward", l);
    else if (!strncmp(w, "act.embedding", 13)) snprintf(buf, cap, "embedding forward");
    else if (!strncmp(w, "act.", 4) || !strcmp(w, "logits") || !strcmp(w, "loss"))
        snprintf(buf, cap, "head forward");
    else if (sscanf(w, "grad_input.layers.%ld", &l) == 1 || sscanf(w, "grad.layers.%ld.", &l) == 1)
        snprintf(buf, cap, "layer %ld backward", l);
    else if (!strncmp(w, "grad_input.head", 15) || !strncmp(w, "grad.final_layernorm", 20))
        snprintf(buf, cap, "head backward");
    else if (!strncmp(w, "grad.", 5)) snprintf(buf, cap, "embedding backward");
    else snprintf(buf, cap, "optimizer");
}

static void print_first(FILE *f, const judge_set_t *s, const judge_verdict_t *x,
                        const judge_verdict_t *local) {
    const judge_tensor_t *t = &s->t[x->tensor];
    const uint64_t e = x->first;
    char idx[128], who[512], got[96], want[96], r[32], u[32], mb[48] = "";
    tensor_format_coords(t->g.ndim, t->g.shape, e, idx, sizeof idx);
    fmt_rank(s, t->copies[e] ? t->who[e] : -1, who, sizeof who);
    fmt_value(t, golden_value(t, e), want, sizeof want);
    if (t->mb[e] >= 0) snprintf(mb, sizeof mb, ", microbatch %d", t->mb[e]);
    char bk[512] = "";
    if (t->backend) {
        /* the element as the backend holds it: its index in the scheme's layout */
        char sidx[128];
        const uint64_t se = t->to_scheme ? t->to_scheme[e] : e;
        tensor_format_coords(t->to_scheme ? t->sndim : t->g.ndim,
                             t->to_scheme ? t->sshape : t->g.shape, se, sidx, sizeof sidx);
        snprintf(bk, sizeof bk, " (%s; the backend's element %s)", t->backend, sidx);
    }
    fprintf(f, "FIRST DIVERGENCE %s%s%s (flat %llu of %llu), step %lld%s, %s\n", t->name, idx, bk,
            (unsigned long long)e, (unsigned long long)t->numel, (long long)step_of(t->name), mb,
            who);
    if (!t->copies[e]) {
        fprintf(f, "  no rank supplied this element (golden %s)\n", want);
    } else {
        fmt_value(t, t->got[e], got, sizeof got);
        const double scale = x->envelope > x->floor ? x->envelope : x->floor;
        fprintf(f, "  got %s, golden %s; %d cop%s of this element\n", got, want, t->copies[e],
                t->copies[e] == 1 ? "y" : "ies");
        if (scale > 0)
            fprintf(f, "  trajectory: BEYOND: %s x the envelope at this element, %s x for the "
                       "tensor (tolerance %g x); %s ulp of the tensor, %llu ulp of the element\n",
                    fmt_x(t->dev[e] / scale, r, sizeof r), fmt_x(x->ratio, u, sizeof u),
                    x->multiple, fmt_x(t->dev[e] / x->floor, idx, sizeof idx),
                    (unsigned long long)x->elem_ulp);
        else
            fprintf(f, "  trajectory: BEYOND: an integer tensor must be exact (off by %s)\n",
                    fmt_x(t->dev[e], r, sizeof r));
    }
    char l[256];
    fprintf(f, "  local: %s\n", local ? fmt_local(&local[x->tensor], l, sizeof l)
                                      : "not judged (the golden run is a dump: give --model)");
    fprintf(f, "  %llu of %llu elements of this tensor beyond, %llu missing, %llu masked, %llu "
               "ill-conditioned updates (gradient within its envelope of 0: judged locally)\n",
            (unsigned long long)x->nbeyond, (unsigned long long)t->numel,
            (unsigned long long)x->nmissing, (unsigned long long)x->nmasked,
            (unsigned long long)x->nill);
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
        if (local && local[i].tensor >= 0 && local[i].ratio > lneed[v[i].cls])
            lneed[v[i].cls] = local[i].ratio;
    }
}

static int count_beyond(const judge_set_t *s, const judge_verdict_t *v, const judge_verdict_t *local) {
    int n = 0;
    for (int i = 0; i < s->nt; i++) n += v[i].beyond || (local && local[i].tensor >= 0 && local[i].beyond);
    return n;
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
    int first = -1;
    for (int k = 0; k < s->nt && first < 0; k++)
        if (v[order[k]].beyond) first = order[k];
    if (first >= 0) print_first(f, s, &v[first], local);
    else fprintf(f, "no divergence: every tensor within its tolerance\n");
    int lfirst = -1;
    for (int k = 0; local && k < s->nt && lfirst < 0; k++)
        if (local[order[k]].tensor >= 0 && local[order[k]].beyond) lfirst = order[k];
    if (lfirst >= 0) {
        char unit[64], l[256];
        fmt_unit(s->t[lfirst].name, unit, sizeof unit);
        fprintf(f, "FIRST LOCAL DIVERGENCE: the %s's recomputation disagrees first, at %s: %s\n",
                unit, s->t[lfirst].name, fmt_local(&local[lfirst], l, sizeof l));
    } else if (local) {
        fprintf(f, "local: every unit's teacher-forced recomputation agrees within tolerance\n");
    }
    row_t *rows = rows_worst_first(s, v, order);
    fprintf(f, "summary, worst first (ratio: x the envelope; ulp: of the tensor's largest "
               "golden magnitude, and of the worst element):\n");
    fprintf(f, "  %-7s %12s %12s %10s %14s %12s %-10s %s\n", "verdict", "trajectory", "local",
            "tolerance", "ulp(tensor)", "ulp(elem)", "class", "tensor");
    for (int k = 0; rows && k < s->nt; k++) {
        const judge_verdict_t *x = rows[k].v;
        char r[32], u[32], l[32] = "-";
        const judge_verdict_t *lx = local && local[x->tensor].tensor >= 0 ? &local[x->tensor] : NULL;
        if (lx) fmt_x(lx->ratio, l, sizeof l);
        fprintf(f, "  %-7s %12s %12s %10g %14s %12llu %-10s %s%s%s%s\n",
                x->beyond || (lx && lx->beyond) ? "BEYOND" : "within", fmt_x(x->ratio, r, sizeof r),
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
        char r[32], l[32] = "-";
        if (local) fmt_x(lneed[c], l, sizeof l);
        fprintf(f, "  %-10s needed %10s %10s   given %g\n", judge_class_name(c),
                fmt_x(need[c], r, sizeof r), l,
                op->class_multiple[c] > 0 ? op->class_multiple[c] : op->multiple);
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

static void json_tensor(FILE *f, const judge_set_t *s, const judge_verdict_t *x,
                        const judge_verdict_t *l) {
    const judge_tensor_t *t = &s->t[x->tensor];
    const uint64_t e = x->beyond ? x->first : x->worst;
    fprintf(f, "{\"tensor\": ");
    json_write_string(f, t->name);
    fprintf(f, ", \"backend\": ");
    if (t->backend) json_write_string(f, t->backend);
    else fprintf(f, "null");
    fprintf(f, ", \"class\": \"%s\", \"step\": %lld, \"numel\": %llu, \"verdict\": \"%s\", "
               "\"trajectory_ratio\": ", judge_class_name(x->cls), (long long)step_of(t->name),
            (unsigned long long)t->numel, x->beyond ? "beyond" : "within");
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
               "\"masked\": %llu, \"ill_conditioned\": %llu, \"element\": %llu, \"index\": [",
            (unsigned long long)x->elem_ulp, (unsigned long long)x->nbeyond,
            (unsigned long long)x->nmissing, (unsigned long long)x->nmasked, (unsigned long long)x->nill,
            (unsigned long long)e);
    uint64_t r = e;
    int64_t idx[ST_MAX_DIMS];
    for (int d = t->g.ndim - 1; d >= 0; d--) idx[d] = (int64_t)(r % (uint64_t)t->g.shape[d]), r /= (uint64_t)t->g.shape[d];
    for (int d = 0; d < t->g.ndim; d++) fprintf(f, "%s%lld", d ? ", " : "", (long long)idx[d]);
    fprintf(f, "], \"rank\": %d, \"microbatch\": %d, \"coords\": ", t->numel && t->copies[e] ? t->who[e] : -1,
            t->numel ? t->mb[e] : -1);
    char c[256] = "";
    if (t->numel && t->copies[e]) {
        const judge_file_t *rf = s->by_rank[t->who[e]];
        judge_fmt_coords(&rf->mesh, rf->coord, c, sizeof c);
    }
    json_write_string(f, c);
    fprintf(f, ", \"got\": ");
    jnum(f, t->numel && t->copies[e] ? t->got[e] : NAN);
    fprintf(f, ", \"want\": ");
    jnum(f, t->numel ? golden_value(t, e) : 0);
    if (!l || l->tensor < 0) {
        fprintf(f, ", \"local\": null}");
        return;
    }
    fprintf(f, ", \"local\": {\"verdict\": \"%s\", \"ratio\": ", l->beyond ? "beyond" : "within");
    jnum(f, l->ratio);
    fprintf(f, ", \"envelope\": ");
    jnum(f, l->envelope);
    fprintf(f, ", \"floor\": ");
    jnum(f, l->floor);
    fprintf(f, ", \"deviation\": ");
    jnum(f, l->dev);
    fprintf(f, ", \"element\": %llu, \"elements_beyond\": %llu}}",
            (unsigned long long)(l->beyond ? l->first : l->worst), (unsigned long long)l->nbeyond);
}

int judge_write_json(const char *path, const judge_set_t *s, const judge_opts_t *op,
                     const judge_verdict_t *v, const judge_verdict_t *local, const int *order,
                     const char *envelope_what, perr_t *err) {
    pio_out_t out;
    if (pio_out_open(&out, path, "--report", err)) return -1;
    FILE *f = out.f;
    int first = -1;
    for (int k = 0; k < s->nt && first < 0; k++)
        if (v[order[k]].beyond) first = order[k];
    fprintf(f, "{\"format\": \"parity-judge-1\", \"ranks\": %d, \"files\": %d, \"envelope\": ",
            s->files[0].mesh.ranks, s->nfiles);
    json_write_string(f, envelope_what);
    fprintf(f, ", \"envelope_runs\": %d, \"verdict\": \"%s\",\n \"first_divergence\": ",
            op->envelope_runs, first >= 0 ? "beyond" : "within");
    if (first >= 0) json_tensor(f, s, &v[first], local ? &local[first] : NULL);
    else fprintf(f, "null");
    fprintf(f, ",\n \"tensors\": [");
    for (int k = 0; k < s->nt; k++) {
        fprintf(f, "%s\n  ", k ? "," : "");
        json_tensor(f, s, &v[order[k]], local ? &local[order[k]] : NULL);
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
        fprintf(f, ", \"given\": ");
        jnum(f, op->class_multiple[c] > 0 ? op->class_multiple[c] : op->multiple);
        fprintf(f, "}");
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
