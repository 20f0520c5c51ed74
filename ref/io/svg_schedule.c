/* svg_schedule.c - a Chrome trace (trace.h) as a pipeline-schedule picture.
 *
 * Wall clock: one row per device, one bar per span at its measured time,
 * coloured by category; the recv bars are the bubble made visible.
 *
 * Logical (--logical): only the forward and backward passes, a forward
 * one slot wide and a backward two, each placed as early as two rules
 * allow, so the picture is the schedule's shape and not the machine's
 * noise (and is the same bytes on every run):
 *   - a pass starts after the previous pass on its row;
 *   - forward of microbatch m on virtual stage vs starts after forward m
 *     on vs - 1, backward m on vs after backward m on vs + 1 (pp.h:
 *     vs = chunk * pp + stage); with several steps, a step starts after
 *     every pass of the one before (the optimizer waits on the
 *     gradient reduction).
 * The trace names each pass's microbatch and chunk, not its stage, so the
 * stage is read off what the trace does show, without assuming a rank
 * order:
 *   - a stage-0 device never receives activations for chunk 0 (the
 *     embedding starts there): with W devices and K such devices, pp = W/K
 *     and each stage has K devices (its tp x cp x dp replicas);
 *   - the last stage never sends activations from its last chunk;
 *   - in between, every schedule here warms up with fewer forwards the
 *     later the stage (1F1B: min(pp - r, m), interleaved: Megatron's
 *     formula), so devices sort by that count, largest first.
 * Where the trace cannot tell middle stages apart (GPipe or naive with
 * pp > 2: every stage warms up alike), devices of equal warm-up keep
 * rank order, which is the stage order of Megatron's default rank order
 * (pp varies slowest). If the guess is wrong the passes wait on each
 * other in a cycle, which is reported, never drawn.
 */
#include "parity/svg.h"

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "parity/fileio.h"
#include "parity/json.h"

#define MAX_TRACE_BYTES ((size_t)1 << 30)

void svg_trace_free(svg_trace_t *t) {
    free(t->spans);
    t->spans = NULL;
    t->n = 0;
}

/* An optional integer argument of an event: -1 when absent. */
static int arg_int(const json_t *args, const char *key, size_t i, int *out, perr_t *err) {
    const json_t *v = json_get(args, key);
    int64_t x;
    *out = -1;
    if (!v) return 0;
    if (json_int64(v, &x) || x < 0 || x > INT32_MAX)
        return perr_set(err, "event %zu: \"args\".\"%s\": expected an integer >= 0", i, key);
    *out = (int)x;
    return 0;
}

static int str_field(const json_t *e, const char *key, char *dst, size_t cap, size_t i, perr_t *err) {
    const char *s = json_string(json_get(e, key));
    if (!s) return perr_set(err, "event %zu: \"%s\": expected a string", i, key);
    if (strlen(s) >= cap || json_string_len(json_get(e, key)) != strlen(s))
        return perr_set(err, "event %zu: \"%s\": longer than %zu bytes or with a NUL", i, key, cap - 1);
    memcpy(dst, s, strlen(s) + 1);
    return 0;
}

/* A time of the event, microseconds: finite, 0 .. SVG_TRACE_MAX_US. */
static int num_field(const json_t *e, const char *key, double *out, size_t i, perr_t *err) {
    const json_t *v = json_get(e, key);
    if (json_type(v) != JSON_NUMBER || !isfinite(json_number(v)) || json_number(v) < 0 ||
        json_number(v) > SVG_TRACE_MAX_US)
        return perr_set(err, "event %zu: \"%s\": expected a number from 0 to %g (microseconds)", i,
                        key, SVG_TRACE_MAX_US);
    *out = json_number(v);
    return 0;
}

/* One complete event into s; i is its index in traceEvents. */
static int read_span(const json_t *e, size_t i, trace_span_t *s, perr_t *err) {
    int64_t tid;
    double ts, dur;
    if (str_field(e, "name", s->name, sizeof s->name, i, err) ||
        str_field(e, "cat", s->cat, sizeof s->cat, i, err) || num_field(e, "ts", &ts, i, err) ||
        num_field(e, "dur", &dur, i, err))
        return -1;
    if (json_int64(json_get(e, "tid"), &tid) || tid < 0 || tid >= 4096)
        return perr_set(err, "event %zu: \"tid\": expected a device number 0..4095", i);
    if (ts + dur > SVG_TRACE_MAX_US)
        return perr_set(err, "event %zu: \"ts\" + \"dur\" = %.15g: beyond the %g microseconds a "
                             "trace may span", i, ts + dur, SVG_TRACE_MAX_US);
    s->device = (int)tid;
    s->t0 = ts;
    s->t1 = ts + dur;
    const json_t *args = json_get(e, "args");
    if (args && json_type(args) != JSON_OBJECT)
        return perr_set(err, "event %zu: \"args\": expected an object", i);
    return arg_int(args, "mb", i, &s->mb, err) || arg_int(args, "chunk", i, &s->chunk, err) ? -1 : 0;
}

int svg_trace_read(const char *path, svg_trace_t *t, perr_t *err) {
    size_t len;
    t->spans = NULL;
    t->n = 0;
    char *text = pio_read_text(path, "trace file", MAX_TRACE_BYTES, &len, err);
    if (!text) return -1;
    json_t *root = json_parse(text, len, err);
    free(text);
    if (!root) {
        char why[sizeof err->msg]; /* err->msg is both the message and an argument */
        snprintf(why, sizeof why, "%s", err->msg);
        return perr_set(err, "trace file '%s': %s", path, why);
    }
    const json_t *ev = json_get(root, "traceEvents");
    int rc = 0;
    if (json_type(ev) != JSON_ARRAY) {
        rc = perr_set(err, "trace file '%s': \"traceEvents\": expected an array", path);
    } else if (!(t->spans = malloc((json_len(ev) ? json_len(ev) : 1) * sizeof *t->spans))) {
        rc = perr_set(err, "trace file '%s': out of memory", path);
    }
    for (size_t i = 0; !rc && i < json_len(ev); i++) {
        const json_t *e = json_at(ev, i);
        const char *ph = json_string(json_get(e, "ph"));
        if (!ph) rc = perr_set(err, "event %zu: \"ph\": expected a string", i);
        else if (!strcmp(ph, "X")) rc = read_span(e, i, &t->spans[t->n++], err);
        /* other phases (thread names, ...) are not drawn */
        if (rc) {
            char why[sizeof err->msg];
            snprintf(why, sizeof why, "%s", err->msg);
            perr_set(err, "trace file '%s': %s", path, why);
        }
    }
    if (!rc && t->n == 0)
        rc = perr_set(err, "trace file '%s': no spans (complete events, \"ph\":\"X\") to draw", path);
    json_free(root);
    if (rc) svg_trace_free(t);
    return rc;
}

/* ---- shared by both pictures ---- */

enum { LEFT = 150, TOP = 44, ROW_H = 26, BAR_H = 18, RIGHT = 20 };

static const char *cat_colour(const char *cat) {
    static const struct { const char *cat, *colour; } map[] = {
        {"forward", "#4e79a7"},   {"backward", "#59a14f"}, {"weight", "#9c755f"}, {"recv", "#e15759"},
        {"send", "#bab0ac"},      {"collective", "#b07aa1"}, {"exact-sum", "#f28e2b"},
        {"optimizer", "#edc948"},
    };
    for (size_t k = 0; k < sizeof map / sizeof map[0]; k++)
        if (!strcmp(cat, map[k].cat)) return map[k].colour;
    return "#999999";
}

static int by_int(const void *a, const void *b) {
    int x = *(const int *)a, y = *(const int *)b;
    return (x > y) - (x < y);
}

/* The distinct devices of the spans, sorted; NULL when out of memory. */
static int *devices_of(const svg_trace_t *t, int *n) {
    int *d = malloc(t->n * sizeof *d);
    if (!d) return NULL;
    for (size_t i = 0; i < t->n; i++) d[i] = t->spans[i].device;
    qsort(d, t->n, sizeof *d, by_int);
    *n = 0;
    for (size_t i = 0; i < t->n; i++)
        if (*n == 0 || d[*n - 1] != d[i]) d[(*n)++] = d[i];
    return d;
}

static int row_of(const int *dev, int ndev, int device) {
    const int *p = bsearch(&device, dev, (size_t)ndev, sizeof *dev, by_int);
    return p ? (int)(p - dev) : -1;
}

static void bar(FILE *f, const trace_span_t *s, double x, double w, int row, int label) {
    const double y = TOP + row * ROW_H + (ROW_H - BAR_H) / 2.0;
    fprintf(f, "<g class=\"span %s\" data-device=\"%d\"><rect x=\"%.2f\" y=\"%.1f\" width=\"%.2f\" "
               "height=\"%d\" fill=\"%s\" stroke=\"white\" stroke-width=\"0.5\"/><title>",
            s->cat, s->device, x, y, w, BAR_H, cat_colour(s->cat));
    svg_escape(f, s->name);
    fputs(" (", f);
    svg_escape(f, s->cat);
    fputs(")</title>", f);
    if (label) {
        fputs("\n", f);
        svg_text(f, x + w / 2, y + BAR_H - 5, "text-anchor=\"middle\" fill=\"white\"", s->name);
    }
    fputs("</g>\n", f);
}

static void row_labels(FILE *f, const int *dev, const int *stage, int ndev) {
    char buf[64];
    for (int r = 0; r < ndev; r++) {
        if (stage) snprintf(buf, sizeof buf, "device %d (stage %d)", dev[r], stage[r]);
        else snprintf(buf, sizeof buf, "device %d", dev[r]);
        svg_text(f, LEFT - 8, TOP + r * ROW_H + ROW_H / 2.0 + 4, "class=\"row\" text-anchor=\"end\"", buf);
    }
}

/* The categories drawn, each once, in a row under the bars. */
static void legend(FILE *f, const svg_trace_t *t, const uint8_t *drawn, double y) {
    double x = LEFT;
    for (size_t i = 0; i < t->n; i++) {
        if (!drawn[i]) continue;
        int seen = 0;
        for (size_t j = 0; j < i && !seen; j++) seen = drawn[j] && !strcmp(t->spans[j].cat, t->spans[i].cat);
        if (seen) continue;
        fprintf(f, "<rect x=\"%.1f\" y=\"%.1f\" width=\"12\" height=\"12\" fill=\"%s\"/>\n", x, y - 10,
                cat_colour(t->spans[i].cat));
        svg_text(f, x + 16, y, "class=\"legend\"", t->spans[i].cat);
        x += 26 + 7 * (double)strlen(t->spans[i].cat);
    }
}

/* ---- wall clock ---- */

/* A tick spacing of 1, 2 or 5 times a power of ten giving at most ~10 ticks. */
static double tick_step(double span) {
    double p = pow(10, floor(log10(span / 10)));
    for (int k = 0; k < 3; k++) {
        const double m[] = {1, 2, 5};
        if (span / (m[k] * p) <= 10) return m[k] * p;
    }
    return 10 * p;
}

static int schedule_wall(FILE *f, const svg_trace_t *t, const char *title, perr_t *err) {
    int ndev;
    int *dev = devices_of(t, &ndev);
    uint8_t *drawn = calloc(t->n, 1);
    if (!dev || !drawn) {
        free(dev);
        free(drawn);
        return perr_set(err, "out of memory");
    }
    double lo = t->spans[0].t0, hi = t->spans[0].t1;
    for (size_t i = 0; i < t->n; i++) {
        lo = fmin(lo, t->spans[i].t0);
        hi = fmax(hi, t->spans[i].t1);
    }
    /* microseconds; under the trace's resolution (%.3f: a nanosecond)
     * one, so that the ticks' power of ten stays a normal number */
    const double W = 900, range = hi - lo >= 1e-3 ? hi - lo : 1;
    const int h = TOP + ndev * ROW_H + 60;
    svg_begin(f, LEFT + (int)W + RIGHT, h, title);
    svg_text(f, 10, 20, "font-size=\"14\" font-weight=\"bold\"", title);
    row_labels(f, dev, NULL, ndev);
    for (size_t i = 0; i < t->n; i++) {
        const trace_span_t *s = &t->spans[i];
        const double x = LEFT + (s->t0 - lo) / range * W, w = fmax(0.5, (s->t1 - s->t0) / range * W);
        const int pass = !strcmp(s->cat, "forward") || !strcmp(s->cat, "backward") ||
                         !strcmp(s->cat, "weight");
        bar(f, s, x, w, row_of(dev, ndev, s->device), pass && w >= 7.0 * (double)strlen(s->name));
        drawn[i] = 1;
    }
    /* the time axis, in ms from the first span */
    const double axis_y = TOP + ndev * ROW_H + 6, step = tick_step(range / 1000);
    fprintf(f, "<line x1=\"%d\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#333\"/>\n", LEFT, axis_y,
            LEFT + W, axis_y);
    for (int k = 0; k * step <= range / 1000 * (1 + 1e-9); k++) {
        const double x = LEFT + k * step * 1000 / range * W;
        char buf[32];
        snprintf(buf, sizeof buf, "%g", k * step);
        fprintf(f, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#333\"/>\n", x, axis_y, x,
                axis_y + 4);
        svg_text(f, x, axis_y + 16, "class=\"tick\" text-anchor=\"middle\"", buf);
    }
    svg_text(f, LEFT + W, axis_y + 30, "text-anchor=\"end\"", "time (ms)");
    legend(f, t, drawn, axis_y + 30);
    svg_end(f);
    free(dev);
    free(drawn);
    return 0;
}

/* ---- logical slots ---- */

static int is_pass(const trace_span_t *s) { return !strcmp(s->cat, "forward") || !strcmp(s->cat, "backward"); }

typedef struct {
    int ndev, *dev;            /* sorted devices, one row each */
    int pp, per, v, m, steps;  /* stages, devices per stage, chunks, microbatches, steps */
    int *stage;                /* [row] */
    int *step;                 /* [span] the step of a pass (its occurrence on its row), -1 not a pass */
} sched_t;

static void sched_free(sched_t *S) {
    free(S->dev);
    free(S->stage);
    free(S->step);
}

/* Whether row's device has a span named `name` of chunk c. */
static int row_has(const svg_trace_t *t, int device, const char *name, int c) {
    for (size_t i = 0; i < t->n; i++)
        if (t->spans[i].device == device && t->spans[i].chunk == c && !strcmp(t->spans[i].name, name)) return 1;
    return 0;
}

typedef struct { int key[3], row; } order_t; /* key: end (0 first, 1 middle, 2 last), -warm-up, device */

static int by_order(const void *a, const void *b) {
    const order_t *x = a, *y = b;
    for (int k = 0; k < 3; k++)
        if (x->key[k] != y->key[k]) return (x->key[k] > y->key[k]) - (x->key[k] < y->key[k]);
    return 0;
}

/* m, v, the steps and each row's stage (the header says how). */
static int infer_stages(const svg_trace_t *t, sched_t *S, perr_t *err) {
    S->m = S->v = S->steps = 0;
    for (size_t i = 0; i < t->n; i++) {
        const trace_span_t *s = &t->spans[i];
        if (!is_pass(s)) continue;
        if (s->mb < 0 || s->chunk < 0)
            return perr_set(err, "event '%s' on device %d: a %s pass without \"args\".\"mb\" and \"chunk\"",
                            s->name, s->device, s->cat);
        if (s->mb >= 4096 || s->chunk >= 64)
            return perr_set(err, "event '%s' on device %d: microbatch %d or chunk %d too large to draw", s->name,
                            s->device, s->mb, s->chunk);
        S->m = s->mb + 1 > S->m ? s->mb + 1 : S->m;
        S->v = s->chunk + 1 > S->v ? s->chunk + 1 : S->v;
    }
    /* a pass's step: how often the same pass came before on its row */
    const size_t per_row = 2 * (size_t)S->m * (size_t)S->v;
    int *seen = calloc((size_t)S->ndev * (per_row ? per_row : 1), sizeof *seen);
    if (!seen) return perr_set(err, "out of memory");
    for (size_t i = 0; i < t->n; i++) {
        const trace_span_t *s = &t->spans[i];
        S->step[i] = -1;
        if (!is_pass(s)) continue;
        const size_t k = (size_t)row_of(S->dev, S->ndev, s->device) * per_row +
                         ((size_t)!strcmp(s->cat, "forward") * (size_t)S->m + (size_t)s->mb) * (size_t)S->v +
                         (size_t)s->chunk;
        S->step[i] = seen[k]++;
        if (S->step[i] + 1 > S->steps) S->steps = S->step[i] + 1;
    }
    free(seen);
    if (S->m == 0) return perr_set(err, "no forward or backward passes to lay out (--logical)");
    order_t *o = malloc((size_t)S->ndev * sizeof *o);
    if (!o) return perr_set(err, "out of memory");
    int nfirst = 0, nlast = 0;
    for (int r = 0; r < S->ndev; r++) {
        const int d = S->dev[r], first = !row_has(t, d, "recv activation", 0);
        const int last = !row_has(t, d, "send activation", S->v - 1);
        int warm = 0; /* forwards before the first backward */
        for (size_t i = 0; i < t->n; i++) {
            if (t->spans[i].device != d || S->step[i] != 0) continue;
            if (!strcmp(t->spans[i].cat, "backward")) break;
            warm++;
        }
        nfirst += first;
        nlast += last;
        o[r] = (order_t){{first ? 0 : last ? 2 : 1, -warm, d}, r};
    }
    if (nfirst == 0 || S->ndev % nfirst || (nfirst != S->ndev && nlast != nfirst)) {
        free(o);
        return perr_set(err, "cannot tell the pipeline stages: of %d devices, %d never receive chunk 0's "
                             "activations (stage 0) and %d never send chunk %d's (the last stage); "
                             "expected equal counts dividing the devices",
                        S->ndev, nfirst, nlast, S->v - 1);
    }
    S->per = nfirst;
    S->pp = S->ndev / nfirst;
    qsort(o, (size_t)S->ndev, sizeof *o, by_order);
    for (int k = 0; k < S->ndev; k++) S->stage[o[k].row] = k / S->per;
    free(o);
    return 0;
}

/* Each pass's slot (start) by the two rules of the header; -1 on a cycle. */
static int place_passes(const svg_trace_t *t, const sched_t *S, int *start, int *end_slot, perr_t *err) {
    const int V = S->pp * S->v, nkey = S->steps * 2 * S->m * V;
    int *done = calloc((size_t)nkey, sizeof *done), *fin = calloc((size_t)nkey, sizeof *fin);
    int *row_end = calloc((size_t)S->ndev, sizeof *row_end), *step_left = calloc((size_t)S->steps, sizeof *step_left);
    int *step_end = calloc((size_t)S->steps, sizeof *step_end);
    size_t *next = calloc((size_t)S->ndev, sizeof *next);
    int rc = 0;
    if (!done || !fin || !row_end || !step_left || !step_end || !next) {
        rc = perr_set(err, "out of memory");
        goto out;
    }
    for (size_t i = 0; i < t->n; i++)
        if (S->step[i] >= 0) step_left[S->step[i]]++;
#define KEY(st, fwd, mb, vs) ((((st) * 2 + (fwd)) * S->m + (mb)) * V + (vs))
    for (;;) {
        int progress = 0, pending = 0;
        for (int r = 0; r < S->ndev; r++) {
            for (size_t i = next[r]; i < t->n; i = ++next[r]) {
                const trace_span_t *s = &t->spans[i];
                if (s->device != S->dev[r] || S->step[i] < 0) continue;
                const int st = S->step[i], fwd = !strcmp(s->cat, "forward");
                const int vs = s->chunk * S->pp + S->stage[r];
                int ready = st == 0 || step_left[st - 1] == 0, at = row_end[r];
                if (st > 0 && step_end[st - 1] > at) at = step_end[st - 1];
                const int dep = fwd ? vs - 1 : vs + 1;
                if (ready && dep >= 0 && dep < V) {
                    const int k = KEY(st, fwd, s->mb, dep);
                    ready = done[k] == S->per;
                    if (fin[k] > at) at = fin[k];
                }
                if (!ready) {
                    pending = 1;
                    break;
                }
                start[i] = at;
                end_slot[i] = at + (fwd ? 1 : 2);
                row_end[r] = end_slot[i];
                const int k = KEY(st, fwd, s->mb, vs);
                done[k]++;
                if (end_slot[i] > fin[k]) fin[k] = end_slot[i];
                if (end_slot[i] > step_end[st]) step_end[st] = end_slot[i];
                step_left[st]--;
                progress = 1;
            }
        }
        if (!pending) break;
        if (!progress) {
            rc = perr_set(err, "the passes wait on each other in a cycle with the stages read off the "
                               "trace (pp %d, %d devices a stage); is every pass of every device in it?",
                          S->pp, S->per);
            break;
        }
    }
#undef KEY
out:
    free(done);
    free(fin);
    free(row_end);
    free(step_left);
    free(step_end);
    free(next);
    return rc;
}

static int schedule_logical(FILE *f, const svg_trace_t *t, const char *title, perr_t *err) {
    sched_t S = {0};
    int *start = malloc(t->n * sizeof *start), *end = malloc(t->n * sizeof *end);
    uint8_t *drawn = calloc(t->n, 1);
    S.dev = devices_of(t, &S.ndev);
    S.stage = S.dev ? malloc((size_t)S.ndev * sizeof *S.stage) : NULL;
    S.step = malloc(t->n * sizeof *S.step);
    int rc = 0;
    if (!start || !end || !drawn || !S.dev || !S.stage || !S.step) rc = perr_set(err, "out of memory");
    if (!rc) rc = infer_stages(t, &S, err);
    if (!rc) rc = place_passes(t, &S, start, end, err);
    if (!rc) {
        enum { U = 22 }; /* pixels a slot */
        int slots = 0;
        for (size_t i = 0; i < t->n; i++)
            if (S.step[i] >= 0 && end[i] > slots) slots = end[i];
        svg_begin(f, LEFT + slots * U + RIGHT, TOP + S.ndev * ROW_H + 60, title);
        svg_text(f, 10, 20, "font-size=\"14\" font-weight=\"bold\"", title);
        char sub[160];
        snprintf(sub, sizeof sub, "logical slots: forward 1, backward 2; pp %d, %d chunk%s a stage, "
                                  "%d microbatches", S.pp, S.v, S.v > 1 ? "s" : "", S.m);
        svg_text(f, 10, 36, "fill=\"#555\"", sub);
        row_labels(f, S.dev, S.stage, S.ndev);
        for (size_t i = 0; i < t->n; i++) {
            if (S.step[i] < 0) continue;
            bar(f, &t->spans[i], LEFT + start[i] * U, (end[i] - start[i]) * U,
                row_of(S.dev, S.ndev, t->spans[i].device), 1);
            drawn[i] = 1;
        }
        const int axis_y = TOP + S.ndev * ROW_H + 6;
        fprintf(f, "<line x1=\"%d\" y1=\"%d\" x2=\"%d\" y2=\"%d\" stroke=\"#333\"/>\n", LEFT, axis_y,
                LEFT + slots * U, axis_y);
        for (int k = 0; k <= slots; k += 5) {
            char buf[16];
            snprintf(buf, sizeof buf, "%d", k);
            svg_text(f, LEFT + k * U, axis_y + 16, "class=\"tick\" text-anchor=\"middle\"", buf);
        }
        svg_text(f, LEFT + slots * U, axis_y + 30, "text-anchor=\"end\"", "slot");
        legend(f, t, drawn, axis_y + 30);
        svg_end(f);
    }
    sched_free(&S);
    free(start);
    free(end);
    free(drawn);
    return rc;
}

int svg_schedule(FILE *f, const svg_trace_t *t, int logical, const char *title, perr_t *err) {
    if (!t->n) return perr_set(err, "no spans to draw");
    return logical ? schedule_logical(f, t, title, err) : schedule_wall(f, t, title, err);
}
