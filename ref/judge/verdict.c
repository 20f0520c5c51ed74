/* verdict.c - each reassembled tensor against the golden run: the
 * tolerance that applies to it (--tolerance-for's first matching
 * pattern, else its class's --tolerance, else --multiple), the masked
 * elements skipped, and the ratio of its deviation to its envelope.
 *
 *   scale  = max(envelope, floor)        floor: one ulp of the tensor (envelope.c)
 *   ratio  = max |copy - golden| / scale over unmasked elements and copies
 *   beyond = some element's |copy - golden| > multiple * scale, or missing
 * Integer tensors have scale 0: any difference is beyond (ratio inf).
 */
#include "judge_internal.h"

#include <fnmatch.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "parity/check.h"
#include "model/gpt.h"
#include "parity/tensor_diff.h"

static const char *const CLASS_NAMES[JC_COUNT] = {
    "act", "grad_input", "grad", "param", "exp_avg", "exp_avg_sq", "logits", "loss",
    "grad_norm", "batch"};

const char *judge_class_name(judge_class_t c) {
    return (unsigned)c < JC_COUNT ? CLASS_NAMES[c] : "?";
}

/* The class of "init.<p>" / "step<s>.<what>": the batch's integers, the
 * learning rate and AdamW's count are exact inputs ("batch"). */
judge_class_t judge_class_of(const char *full) {
    if (!strncmp(full, "init.", 5)) return JC_PARAM;
    const char *w = strchr(full, '.');
    w = w ? w + 1 : full;
    static const struct { const char *prefix; judge_class_t c; } map[] = {
        {"act.", JC_ACT}, {"grad_input.", JC_GRAD_INPUT}, {"grad.", JC_GRAD},
        {"param.", JC_PARAM}, {"exp_avg_sq.", JC_EXP_AVG_SQ}, {"exp_avg.", JC_EXP_AVG},
    };
    for (size_t i = 0; i < sizeof map / sizeof map[0]; i++)
        if (!strncmp(w, map[i].prefix, strlen(map[i].prefix))) return map[i].c;
    if (!strcmp(w, "logits")) return JC_LOGITS;
    if (!strcmp(w, "loss")) return JC_LOSS;
    if (!strcmp(w, "grad_norm")) return JC_GRAD_NORM;
    return JC_BATCH;
}

static double multiple_for(const judge_opts_t *op, const char *name, judge_class_t c) {
    for (int i = 0; i < op->nglobs; i++)
        if (!fnmatch(op->globs[i].pattern, name, 0)) return op->globs[i].multiple;
    return op->class_multiple[c] > 0 ? op->class_multiple[c] : op->multiple;
}

int judge_runs_for(const judge_opts_t *op, const char *name) {
    for (int i = 0; i < op->nrun_globs; i++)
        if (!fnmatch(op->run_globs[i].pattern, name, 0)) return op->run_globs[i].runs;
    const int c = op->class_runs[judge_class_of(name)];
    return c >= 0 ? c : op->envelope_runs;
}

int judge_runs_max(const judge_opts_t *op) {
    int k = op->envelope_runs;
    for (int c = 0; c < JC_COUNT; c++)
        if (op->class_runs[c] > k) k = op->class_runs[c];
    for (int i = 0; i < op->nrun_globs; i++)
        if (op->run_globs[i].runs > k) k = op->run_globs[i].runs;
    return k;
}

/* --mask entries onto the tensors' masked[]: each must name a judged
 * tensor and an element inside it. */
static int apply_masks(const judge_set_t *s, const judge_opts_t *op, perr_t *err) {
    for (int m = 0; m < op->nmasks; m++) {
        judge_mask_t *k = &op->masks[m];
        int i = 0;
        while (i < s->nt && strcmp(s->t[i].name, k->name)) i++;
        if (i == s->nt)
            return perr_set(err, "--mask '%s': no rank file holds that tensor", k->name);
        const judge_tensor_t *t = &s->t[i];
        if (k->nidx) {
            if (k->nidx != t->g.ndim)
                return perr_set(err, "--mask '%s': %d indices for a %d-axis tensor", k->name,
                                k->nidx, t->g.ndim);
            k->flat = 0;
            for (int d = 0; d < k->nidx; d++) {
                if (k->idx[d] < 0 || k->idx[d] >= t->g.shape[d])
                    return perr_set(err, "--mask '%s': index %lld of axis %d (size %lld)",
                                    k->name, (long long)k->idx[d], d, (long long)t->g.shape[d]);
                k->flat = k->flat * (uint64_t)t->g.shape[d] + (uint64_t)k->idx[d];
            }
        }
        if (k->flat >= t->numel)
            return perr_set(err, "--mask '%s': element %llu of %llu", k->name,
                            (unsigned long long)k->flat, (unsigned long long)t->numel);
        t->masked[k->flat] = 1;
    }
    return 0;
}

double judge_value(const judge_tensor_t *t, uint64_t e) {
    const unsigned char *p = (const unsigned char *)t->gd;
    if (t->g.dtype == ST_F32) {
        float f;
        memcpy(&f, p + 4 * e, 4);
        return f;
    }
    if (t->g.dtype == ST_I32) {
        int32_t i;
        memcpy(&i, p + 4 * e, 4);
        return i;
    }
    if (t->g.dtype == ST_U8) return p[e];
    double d = 0;
    if (t->g.dtype == ST_F64) memcpy(&d, p + 8 * e, 8);
    return d;
}

static uint64_t elem_ulp(const judge_tensor_t *t, uint64_t e) {
    if (t->g.dtype != ST_F32 || !t->copies[e] || isnan(t->got[e])) return 0;
    const float got = (float)t->got[e];
    uint32_t a, b;
    memcpy(&a, &got, 4);
    memcpy(&b, (const unsigned char *)t->gd + 4 * e, 4);
    return tensor_ulp_distance(a, b, 4);
}

void judge_verdict_one(const judge_tensor_t *t, const judge_opts_t *op, double envelope,
                       judge_verdict_t *x) {
    memset(x, 0, sizeof *x);
    x->cls = judge_class_of(t->name);
    x->multiple = multiple_for(op, t->name, x->cls);
    x->floor = judge_tensor_ulp(&t->g, t->gd);
    x->envelope = envelope;
    const double scale = x->envelope > x->floor ? x->envelope : x->floor;
    int have_first = 0;
    x->dev = -1;
    for (uint64_t e = 0; e < t->numel; e++) {
        if (t->masked[e]) {
            x->nmasked++;
            continue;
        }
        if (t->ill && t->ill[e]) {
            x->nill++;
            continue;
        }
        const double d = t->copies[e] ? t->dev[e] : INFINITY;
        if (!t->copies[e]) x->nmissing++;
        if (d > x->dev) x->dev = d, x->worst = e;
        const int bad = scale > 0 ? d > x->multiple * scale : d > 0;
        if (!bad) continue;
        x->nbeyond++;
        if (!have_first) have_first = 1, x->first = e;
    }
    if (x->dev < 0) x->dev = 0; /* every element masked */
    x->beyond = have_first;
    x->ratio = scale > 0 ? x->dev / scale : x->dev > 0 ? INFINITY : 0;
    const uint64_t e = have_first ? x->first : x->worst;
    x->elem_ulp = elem_ulp(t, e);
    x->who = x->mb = -1;
    if (!t->numel) return;
    x->copies = t->copies[e];
    x->want = judge_value(t, e);
    x->got = x->copies ? t->got[e] : NAN;
    x->elem_dev = x->copies ? t->dev[e] : INFINITY;
    if (x->copies) x->who = t->who[e], x->mb = t->mb[e];
}

static int64_t step_of(const char *name) {
    return strncmp(name, "step", 4) ? -1 : strtoll(name + 4, NULL, 10);
}

int judge_ill_conditioned(judge_set_t *s, const double *env, perr_t *err) {
    for (int i = 0; i < s->nt; i++) {
        judge_tensor_t *t = &s->t[i];
        const judge_class_t c = judge_class_of(t->name);
        if (c != JC_PARAM || t->g.dtype != ST_F32) /* the moments are linear in g: no flip */
            continue;
        const int64_t step = step_of(t->name);
        const char *w = strchr(t->name, '.'), *p = w ? strchr(w + 1, '.') : NULL;
        if (step < 0 || !p) continue; /* init.<p>: no update yet */
        p++; /* step<s>.param.<p>: the parameter's name */
        for (int j = 0; j < s->nt; j++) {
            const judge_tensor_t *gt = &s->t[j];
            const int64_t gs = step_of(gt->name);
            char want[320];
            snprintf(want, sizeof want, "step%lld.grad.%s", (long long)gs, p);
            if (gs < 0 || gs > step || strcmp(gt->name, want) || gt->numel != t->numel ||
                gt->g.dtype != ST_F32)
                continue;
            const double fl = judge_tensor_ulp(&gt->g, gt->gd);
            const double tol = JUDGE_ILL_ENVELOPES * (env[j] > fl ? env[j] : fl);
            const float *g = gt->gd;
            for (uint64_t e = 0; e < t->numel; e++) {
                if (!(fabs((double)g[e]) <= tol)) continue;
                if (!t->ill && !(t->ill = calloc(t->numel, 1))) return perr_set(err, "judge: out of memory");
                t->ill[e] = 1;
            }
        }
    }
    return 0;
}

int judge_verdicts(const judge_set_t *s, const judge_opts_t *op, const double *envelope,
                   judge_verdict_t *v, perr_t *err) {
    if (apply_masks(s, op, err)) return -1;
    for (int i = 0; i < s->nt; i++) {
        judge_verdict_one(&s->t[i], op, envelope ? envelope[i] : 0, &v[i]);
        v[i].tensor = i;
    }
    return 0;
}

enum { NKEY = 5 };
typedef struct {
    long key[NKEY];
    int i;
} order_t;

static int by_exec(const void *pa, const void *pb) {
    const order_t *a = pa, *b = pb;
    for (int k = 0; k < NKEY; k++)
        if (a->key[k] != b->key[k]) return a->key[k] < b->key[k] ? -1 : 1;
    return a->i - b->i;
}

/* check_exec_key orders the units; inside one unit it gives every
 * gradient (and every optimizer tensor) the same key. Here the
 * parameter's place in its kind's table breaks the tie: gradients in
 * reverse (the backward uses the parameters last to first: a layer's
 * mlp.dense_4h_to_h before its input_layernorm), the optimizer's tensors
 * and init.* in the table's order; activations keep their checkpoint
 * order (check_exec_key's key[3]). Never the file's order. */
static void exec_key(const char *name, long key[NKEY]) {
    check_exec_key(name, key);
    key[4] = 0;
    const char *w = strncmp(name, "init.", 5) ? strchr(name, '.') : name + 4;
    if (!w) return;
    w++;
    static const char *const opt[] = {"exp_avg.", "exp_avg_sq.", "param.", NULL};
    if (!strncmp(name, "step", 4) && !strncmp(w, "grad.", 5)) {
        const int p = gpt_param_position(w + 5);
        key[4] = p >= 0 ? -p : 0;
        return;
    }
    const char *p = !strncmp(name, "init.", 5) ? w : NULL;
    for (int k = 0; opt[k] && !p; k++)
        if (!strncmp(w, opt[k], strlen(opt[k]))) p = w + strlen(opt[k]);
    if (!p) return;
    /* the optimizer walks the table: units first to last, each's tensors in order */
    key[2] = -gpt_backward_position(p);
    key[4] = gpt_param_position(p);
}

void judge_exec_order(const judge_set_t *s, int *order) {
    order_t *o = malloc((size_t)(s->nt ? s->nt : 1) * sizeof *o);
    if (!o) { /* the files' order, then: still every tensor once */
        for (int i = 0; i < s->nt; i++) order[i] = i;
        return;
    }
    for (int i = 0; i < s->nt; i++) exec_key(s->t[i].name, o[i].key), o[i].i = i;
    qsort(o, (size_t)s->nt, sizeof *o, by_exec);
    for (int i = 0; i < s->nt; i++) order[i] = o[i].i;
    free(o);
}
