/* pp_sim.c - a schedule run on paper (pp.h): every stage's passes in
 * order, each as soon as what it needs has finished, with fixed pass
 * times. What it gives: whether the schedules deadlock (a stage waits for
 * a pass that waits for it), and the bubble the schedules leave with
 * times T_F, T_B, T_W: the theory the engine's measured bubble is held
 * against, for any schedule, not only the ones with closed forms.
 *
 * Dependencies (the engine's sends and receives):
 *   F of (mb, vs) after F of (mb, vs - 1)   (the stream comes forward)
 *   B of (mb, vs) after B of (mb, vs + 1)   (its gradient comes back)
 *                 and after F of (mb, vs)   (its activations)
 *   W of (mb, vs) after B of (mb, vs)       (the output gradient B kept)
 * A whole backward is B and W at once (T_B + T_W). Sends take no time.
 */
#include <stdlib.h>

#include "parity/pp.h"

int pp_simulate(const pp_plan_t *p, const pp_times_t *t, pp_sim_t *out) {
    const int P = p->pp, V = p->pp * p->v, M = p->m, N = pp_max_ops(p);
    pp_op_t *ops = malloc((size_t)P * (size_t)N * sizeof *ops);
    int *n = calloc((size_t)P, sizeof *n), *at = calloc((size_t)P, sizeof *at);
    double *fin = malloc(3 * (size_t)M * (size_t)V * sizeof *fin); /* [F, B, W][mb][vs] */
    double *clock = calloc((size_t)P, sizeof *clock);
    if (!ops || !n || !at || !fin || !clock) parity_fatal("pipeline simulation: out of memory");
    for (size_t k = 0; k < 3 * (size_t)M * (size_t)V; k++) fin[k] = -1;
#define FIN(kind, mb, vs) fin[((size_t)(kind) * M + (size_t)(mb)) * V + (size_t)(vs)]
    int left = 0;
    for (int r = 0; r < P; r++) left += n[r] = pp_schedule(p, r, ops + (size_t)r * N);
    *out = (pp_sim_t){0};
    for (int progress = 1; left && progress;) {
        progress = 0;
        for (int r = 0; r < P; r++) {
            while (at[r] < n[r]) {
                const pp_op_t *o = &ops[(size_t)r * N + at[r]];
                const int vs = pp_vstage(p, r, o->chunk), mb = o->mb;
                double ready = clock[r], dur;
                if (o->fwd) {
                    if (vs > 0 && FIN(0, mb, vs - 1) < 0) break;
                    if (vs > 0 && FIN(0, mb, vs - 1) > ready) ready = FIN(0, mb, vs - 1);
                    dur = t->f;
                } else if (o->part == PP_PASS_W) {
                    if (FIN(1, mb, vs) < 0) break;
                    if (FIN(1, mb, vs) > ready) ready = FIN(1, mb, vs);
                    dur = t->w;
                } else {
                    if (FIN(0, mb, vs) < 0 || (vs < V - 1 && FIN(1, mb, vs + 1) < 0)) break;
                    if (vs < V - 1 && FIN(1, mb, vs + 1) > ready) ready = FIN(1, mb, vs + 1);
                    dur = o->part == PP_PASS_B ? t->b : t->b + t->w;
                }
                clock[r] = ready + dur;
                out->busy[r] += dur;
                FIN(o->fwd ? 0 : o->part == PP_PASS_W ? 2 : 1, mb, vs) = clock[r];
                if (!o->fwd && o->part == PP_PASS_WHOLE) FIN(2, mb, vs) = clock[r];
                at[r]++, left--, progress = 1;
            }
        }
    }
#undef FIN
    for (int r = 0; r < P; r++)
        if (clock[r] > out->span) out->span = clock[r];
    const int rc = left ? -1 : 0;
    if (rc) /* the stage and pass that wait forever */
        for (int r = 0; r < P; r++)
            if (at[r] < n[r]) {
                out->stuck_stage = r;
                out->stuck = ops[(size_t)r * N + at[r]];
                break;
            }
    free(ops), free(n), free(at), free(fin), free(clock);
    return rc;
}

double pp_sim_bubble(const pp_plan_t *p, const pp_sim_t *s, int r) {
    (void)p;
    return s->span > 0 ? 1.0 - s->busy[r] / s->span : 0.0;
}
