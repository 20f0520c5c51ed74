/* envelope.c - how far from the golden run a correct backend may be.
 *
 * The envelope of a tensor is the largest |run - reference| over K
 * legitimate float executions that parity runs itself (float_order.h):
 * the same step with its exact sums replaced by float32 sums in the
 * orders real backends use (sequential, pairwise, reversed, per-rank
 * partial sums grouped by each mesh degree of the files, random
 * chunkings), bf16-rounded around every contraction when the files'
 * parity.precision is bf16. For the trajectory the runs are golden runs
 * (from init, every step) against the golden run; for the local
 * judgment they are teacher-forced steps from the backend's own inputs
 * against the exact forced step (local.c). The envelope is per tensor:
 * a sum of n terms is off by a few roundings of its terms, a distance on
 * the tensor's scale, not on a nearly cancelling element's.
 *
 * The floor of every envelope is one ulp of the tensor's largest finite
 * golden magnitude (oracle_tensor_ulp), so an exactly reproducible
 * tensor (spread 0: the batch's floats, an exact copy) still has a scale
 * to count in. Integer tensors (the batch, masks) have no floor: they
 * must be exact.
 */
#include "model/gpt.h"
#include "judge_internal.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "../oracle/oracle_internal.h" /* the oracle's model, text and start */

double judge_tensor_ulp(const st_tensor_t *g, const void *gd) {
    if (g->dtype != ST_F32 && g->dtype != ST_F64) return 0;
    return oracle_tensor_ulp(g->dtype, gd, st_numel(g));
}

int judge_envelope_orders(const judge_set_t *s, int k, float_order_t *orders) {
    const judge_file_t *f = &s->files[0];
    int n = 0;
    const float_order_kind_t fixed[] = {FLOAT_ORDER_SEQUENTIAL, FLOAT_ORDER_PAIRWISE,
                                        FLOAT_ORDER_REVERSED};
    for (size_t i = 0; i < sizeof fixed / sizeof fixed[0] && n < k; i++)
        orders[n++] = (float_order_t){.kind = fixed[i]};
    /* a tp/dp/cp/pp rank's partial sum, then the reduction: one per degree */
    for (int a = 0; a < f->mesh.n && n < k; a++) {
        int seen = f->mesh.size[a] < 2;
        for (int b = 0; b < a && !seen; b++) seen = f->mesh.size[b] == f->mesh.size[a];
        if (!seen) orders[n++] = (float_order_t){.kind = FLOAT_ORDER_GROUPED, .groups = f->mesh.size[a]};
    }
    for (uint64_t seed = 1; n < k; seed++)
        orders[n++] = (float_order_t){.kind = FLOAT_ORDER_RANDOM, .seed = seed};
    for (int i = 0; i < n; i++) orders[i].bf16 = f->bf16;
    return n;
}

double judge_spread(const judge_tensor_t *t, const st_writer_t *w, const void *ref) {
    const long k = st_writer_find(w, t->name);
    st_tensor_t rt;
    const void *rd = k >= 0 ? st_writer_tensor(w, (size_t)k, &rt) : NULL;
    if (!rd || rt.dtype != t->g.dtype || st_numel(&rt) != t->numel) return 0;
    double d = 0;
    if (t->g.dtype == ST_F32) {
        const float *a = rd, *b = ref;
        for (uint64_t e = 0; e < t->numel; e++) {
            const double x = fabs((double)a[e] - (double)b[e]);
            if (x > d) d = x; /* NaN never wins: a float run's NaN is not an envelope */
        }
    } else if (t->g.dtype == ST_F64) {
        const double *a = rd, *b = ref;
        for (uint64_t e = 0; e < t->numel; e++)
            if (fabs(a[e] - b[e]) > d) d = fabs(a[e] - b[e]);
    }
    return isinf(d) ? 0 : d;
}

int judge_envelope_trajectory(const judge_set_t *s, oracle_t *o, const judge_opts_t *op,
                              double *env, perr_t *err) {
    for (int i = 0; i < s->nt; i++) env[i] = 0;
    const int kmax = judge_runs_max(op);
    if (!o->have_data || kmax < 1) return 0; /* a dump file: the floor only */
    int steps = o->golden_steps;
    float_order_t *orders = malloc((size_t)kmax * sizeof *orders);
    if (!orders) return perr_set(err, "judge: out of memory");
    const int k = judge_envelope_orders(s, kmax, orders);
    int rc = 0;
    for (int r = 0; r < k && !rc; r++) {
        gpt_t *g = NULL;
        if ((rc = gpt_new(&g, &o->cfg, err))) break;
        if (o->have_start) ckpt_state_to_gpt(&o->start, g);
        dump_t *d = dump_new(g, DUMP_TENSORS);
        if (!d) rc = perr_set(err, "judge: out of memory");
        /* the same golden run as the oracle's (oracle_run_golden), in this float order */
        const float_order_t before = float_order_set(&orders[r]);
        if (!rc) rc = dump_add_init(d, g, err);
        for (int st = 0; st < steps && !rc; st++) {
            gpt_step_stats_t stats;
            rc = dump_golden_step(g, &o->data, o->start.step + st, d, &stats, err);
        }
        float_order_set(&before);
        for (int i = 0; i < s->nt && !rc; i++) {
            if (r >= judge_runs_for(op, s->t[i].name)) continue; /* its K runs are done */
            const double x = judge_spread(&s->t[i], dump_writer(d), s->t[i].gd);
            if (x > env[i]) env[i] = x;
        }
        dump_free(d);
        gpt_free(g);
    }
    free(orders);
    return rc;
}
