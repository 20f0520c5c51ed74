/* local.c - the local (teacher-forced) judgment: for each step, parity
 * recomputes every unit exactly from the backend's own reassembled inputs
 * (forced.h: the parameters and AdamW state the step starts from, each
 * unit's input stream and arriving gradient, the update's gradients), and
 * each tensor of the step is compared with its recomputation. A backend's
 * error cannot compound across units or steps there, so the first tensor
 * in data-flow order beyond its local tolerance is in the unit that is
 * wrong. An input the backend did not write (or wrote only in part) is
 * parity's own forced recomputation (the previous unit's output, the
 * previous step's update), so a verdict after it mixes in the error of
 * the units before; the steps with such inputs are recorded
 * (s->local_missing) and the report lists them. The steps start at the
 * golden run's first (o->start.step after --load, whose checkpoint
 * holds the state the first step starts from). The golden model and its
 * text are the oracle's (it is opened from model flags: a dump file has
 * no text to draw batches from). */
#include "model/gpt.h"
#include "judge_internal.h"

#include <stdlib.h>
#include <string.h>

#include "../oracle/oracle_internal.h" /* the oracle's model and text: the judge is its client */
#include "parity/ckpt.h"
#include "parity/forced.h"

typedef struct {
    judge_set_t *s;
    int64_t step, first;        /* this step; the golden run's first */
    char name[256];
    judge_local_missing_t *miss; /* NULL: do not record (a float-order run) */
    size_t cap;                 /* of miss->names */
} get_ctx_t;

enum { MISSING_LISTED = 8 };

/* One input the files lacked, into c->miss (the first MISSING_LISTED by
 * name). Out of memory only shortens the list. */
static void note_missing(get_ctx_t *c, const char *name) {
    judge_local_missing_t *m = c->miss;
    if (m->missing++ >= MISSING_LISTED) return;
    const size_t have = m->names ? strlen(m->names) : 0, need = have + strlen(name) + 3;
    if (need > c->cap) {
        char *grown = realloc(m->names, 2 * need);
        if (!grown) return;
        if (!m->names) grown[0] = 0;
        m->names = grown, c->cap = 2 * need;
    }
    snprintf(m->names + have, c->cap - have, "%s%s", have ? ", " : "", name);
}

/* The backend's tensor that dump_forced_step asks for, by parity's name
 * without the step: the starting state is the step before's (at the
 * golden run's first step init.<p> and the start's AdamW state: zeros
 * at step 0, --load's checkpoint's, which the forced step keeps when
 * none is supplied), the rest the step's own. Only a tensor every
 * element of which some rank supplied is used. */
static const float *get_input(void *ctx, const char *name, size_t numel) {
    get_ctx_t *c = ctx;
    const int state = !strncmp(name, "param.", 6) || !strncmp(name, "exp_avg.", 8) ||
                      !strncmp(name, "exp_avg_sq.", 11);
    const int start = state && c->step == c->first; /* parity's own is the golden start */
    if (start && c->step == 0 && strncmp(name, "param.", 6)) return NULL; /* zeros by definition */
    if (start && !strncmp(name, "param.", 6))
        snprintf(c->name, sizeof c->name, "init.%s", name + 6);
    else
        snprintf(c->name, sizeof c->name, "step%lld.%s", (long long)(c->step - state), name);
    const float *v = NULL;
    for (int i = 0; i < c->s->nt && !v; i++) {
        const judge_tensor_t *t = &c->s->t[i];
        if (strcmp(t->name, c->name) || t->numel != numel || t->g.dtype != ST_F32) continue;
        v = t->value;
        for (uint64_t e = 0; e < t->numel && v; e++)
            if (!t->copies[e]) v = NULL;
    }
    if (c->miss && !start) {
        c->miss->asked++;
        if (!v) note_missing(c, c->name);
    }
    return v;
}

static int64_t step_of(const char *name) {
    return strncmp(name, "step", 4) ? -1 : strtoll(name + 4, NULL, 10);
}

/* One forced step under order ord (NULL: exact) into a fresh dump *d. A
 * tensor the backend did not supply is parity's own, g's as the steps
 * before left it: the exact run steps g itself, a float-order run a copy
 * of g's state (taken before the exact run steps g). */
static int forced_run(judge_set_t *s, oracle_t *o, gpt_t *g, int64_t step,
                      const float_order_t *ord, judge_local_missing_t *miss, dump_t **d,
                      perr_t *err) {
    gpt_t *run = g;
    if (ord) {
        float *scratch[2] = {NULL, NULL};
        const ckpt_state_t view = ckpt_state_view_gpt(g, step, scratch);
        if (gpt_new(&run, &o->cfg, err)) return free(scratch[0]), free(scratch[1]), -1;
        ckpt_state_to_gpt(&view, run);
        free(scratch[0]), free(scratch[1]);
    }
    int rc = 0;
    if (!(*d = dump_new(run, DUMP_TENSORS))) rc = perr_set(err, "judge: out of memory");
    get_ctx_t ctx = {.s = s, .step = step, .first = o->have_start ? o->start.step : 0,
                     .miss = miss};
    forced_inputs_t in = {.get = get_input, .ctx = &ctx};
    gpt_step_stats_t st;
    const float_order_t before = float_order_set(ord);
    if (!rc) rc = dump_forced_step(run, &o->data, step, &in, *d, &st, err);
    float_order_set(&before);
    if (run != g) gpt_free(run);
    if (rc) dump_free(*d), *d = NULL;
    return rc;
}

/* The forced run's value of tensor t (w: its dump), or NULL when t is not
 * of this step or the forced step does not recompute it. */
static const void *forced_of(const st_writer_t *w, const judge_tensor_t *t, int64_t step) {
    const long j = step_of(t->name) == step ? st_writer_find(w, t->name) : -1;
    st_tensor_t ft;
    const void *fd = j >= 0 ? st_writer_tensor(w, (size_t)j, &ft) : NULL;
    return fd && ft.dtype == t->g.dtype && st_numel(&ft) == t->numel ? fd : NULL;
}

/* A step's missing inputs into s->local_missing (none missing: nothing). */
static int keep_missing(judge_set_t *s, judge_local_missing_t *m, perr_t *err) {
    if (!m->missing) return free(m->names), 0;
    if (m->missing > MISSING_LISTED && m->names) {
        char more[48];
        snprintf(more, sizeof more, " (and %d more)", m->missing - MISSING_LISTED);
        char *grown = realloc(m->names, strlen(m->names) + strlen(more) + 1);
        if (grown) strcat(grown, more), m->names = grown;
    }
    judge_local_missing_t *grown =
        realloc(s->local_missing, (size_t)(s->nlocal_missing + 1) * sizeof *grown);
    if (!grown || !m->names) return free(m->names), perr_set(err, "judge: out of memory");
    s->local_missing = grown;
    s->local_missing[s->nlocal_missing++] = *m;
    return 0;
}

int judge_local(judge_set_t *s, oracle_t *o, const judge_opts_t *op, judge_verdict_t *local,
                perr_t *err) {
    for (int i = 0; i < s->nt; i++) local[i].tensor = -1;
    if (!o->have_data)
        return perr_set(err, "the golden run is a dump: the local judgment recomputes from the "
                             "model and its text (give the model flags, --model ...)"), 1;
    /* the golden run's steps (judge_assemble ran them): from its first */
    const int64_t first = o->have_start ? o->start.step : 0;
    int64_t last = first - 1;
    for (int i = 0; i < s->nt; i++)
        if (step_of(s->t[i].name) > last) last = step_of(s->t[i].name);
    const int kmax = judge_runs_max(op) > 0 ? judge_runs_max(op) : 0;
    float_order_t *orders = malloc((size_t)(kmax ? kmax : 1) * sizeof *orders);
    double *env = calloc((size_t)(s->nt ? s->nt : 1), sizeof *env);
    gpt_t *g = NULL;
    int rc = orders && env ? 0 : perr_set(err, "judge: out of memory");
    if (!rc) rc = gpt_new(&g, &o->cfg, err);
    if (!rc && o->have_start) ckpt_state_to_gpt(&o->start, g);
    const int k = rc ? 0 : judge_envelope_orders(s, kmax, orders);
    dump_t **dr = calloc((size_t)(k ? k : 1), sizeof *dr);
    if (!rc && !dr) rc = perr_set(err, "judge: out of memory");
    int unavailable = 0;
    for (int64_t step = first; step <= last && !rc; step++) {
        /* the envelope: the same forced step in K float orders against the
         * exact one. The first call is the forced step's first: a model it
         * does not support is refused there, before anything changed
         * (forced.h: "... not supported yet"), and only the trajectory is
         * judged. */
        for (int r = 0; r < k && !rc; r++) {
            rc = forced_run(s, o, g, step, &orders[r], NULL, &dr[r], err);
            unavailable = rc && step == first && !r && strstr(err->msg, "not supported yet");
        }
        judge_local_missing_t miss = {.step = step};
        dump_t *d = NULL;
        if (!rc) {
            rc = forced_run(s, o, g, step, NULL, &miss, &d, err);
            unavailable = rc && step == first && !k && strstr(err->msg, "not supported yet");
        }
        if (!rc) rc = keep_missing(s, &miss, err);
        else free(miss.names);
        const st_writer_t *w = d ? dump_writer(d) : NULL;
        for (int r = 0; r < k && !rc; r++) {
            for (int i = 0; i < s->nt; i++) {
                const judge_tensor_t *t = &s->t[i];
                const void *fd = forced_of(w, t, step);
                if (!fd || r >= judge_runs_for(op, t->name)) continue;
                const double x = judge_spread(t, dump_writer(dr[r]), fd);
                if (x > env[i]) env[i] = x;
            }
        }
        for (int r = 0; r < k; r++) dump_free(dr[r]), dr[r] = NULL;
        for (int i = 0; i < s->nt && !rc; i++) {
            const judge_tensor_t *t = &s->t[i];
            const void *fd = forced_of(w, t, step);
            if (!fd) continue;
            judge_tensor_t lt;
            rc = judge_assemble_against(s, t, fd, &lt, err);
            if (!rc) {
                judge_verdict_one(&lt, op, env[i], &local[i]);
                local[i].tensor = i;
            }
            judge_tensor_free(&lt);
        }
        dump_free(d);
    }
    gpt_free(g);
    free(dr);
    free(orders);
    free(env);
    return unavailable ? 1 : rc;
}
