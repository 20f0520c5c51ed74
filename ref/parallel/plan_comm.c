/* plan_comm.c - a layout's communication per step, from formulas alone
 * (plan.h), for `parity plan`. Each term is the one its mode's report
 * prints next to the measured counters, so a run's report checks it:
 *
 *   dp   (dp/dp_report.c) over the data-parallel plan's buckets, n the
 *        bucket's gradient group (dp x cp), S its elements padded to n
 *        pieces: a reduce-scatter of open sums, 8 S (n-1)/n; ZeRO 0-2 an
 *        all-gather of rounded fp32 values, 4 S (n-1)/n; ZeRO-3 instead
 *        gathers every unit's buckets at its forward and at its backward,
 *        each microbatch (the tied head gathers the embedding's too):
 *        2 m x 4 S (n-1)/n over a unit's buckets.
 *   tp   (reports/tp_report.c's tp_terms, held equal to the counters by
 *        tests/reports/test_tp_report.sh) Megatron's 1-D terms of the stage's
 *        layers, embedding and head, x coll_busbw_factor x the dtype's
 *        bytes (open sums 8, softmax denominators sizeof(xacc_t)).
 *   pp   (pp/pp_report.c) per stage boundary a microbatch's residual
 *        stream each way: B/dp sequences x T/cp (/tp under SP) x h x 4 B.
 *   cp   (reports/cp_report.c's cp_traffic, held equal to the counters by
 *        tests/reports/test_cp_report.sh; the ring) per layer 4 (cp-1) n A floats
 *        of K and V blocks plus (cp-1) n 2A open sums at 8 B: 32 (cp-1) n A
 *        bytes, n = B/dp x T/cp tokens, A = h/tp; Ulysses 32 (cp-1)/cp n A.
 *   recompute runs forwards again in the backward, collectives included
 *        (gpt_recomputed_layers: which layers): full, a recomputed layer's
 *        tp collectives (tp_terms: + 2 all-reduces of open sums of
 *        [b·s, h] a microbatch); full or selective, a recomputed core's
 *        exchange (cp_traffic: the ring + 8 (cp-1) n A, the forward's K and
 *        V; Ulysses + 16 (cp-1)/cp n A, the forward's all-to-alls).
 *   emb  the tied word embedding's gradient, all-reduced as open sums
 *        between the first and the last stage: 8 B an element of the
 *        stage's block (bus factor 1 for two ranks).
 * Left out: the loss and norm all-reduces (bytes), the exact sums'
 * data-dependent exception accumulators, and experts (plan_build refuses
 * MoE models).
 */
#include <string.h>

#include "model/gpt.h"
#include "parallel/reports/cp_report_internal.h"
#include "parity/dp.h"
#include "parity/engine.h"
#include "parity/plan.h"
#include "parity/pp.h"
#include "parallel/reports/tp_report_internal.h"

/* A stage's layers L, whether it holds the embedding (e) and the head
 * (hd): the units that carry, start and end the residual stream. */
static void stage_units(const model_config_t *cfg, const gpt_units_t *u, int *L, int *e, int *hd) {
    *L = 0, *e = 0, *hd = 0;
    for (int k = 0; k < model_num_units(cfg); k++) {
        if (!gpt_units_hold(u, k)) continue;
        const int in = model_unit_takes_stream(cfg, k), out = model_unit_gives_stream(cfg, k);
        *L += in && out, *e |= !in, *hd |= !out;
    }
}

static double ring(int n) { return n > 1 ? (double)(n - 1) / n : 0; }

/* The data-parallel plan's traffic of one stage (t: its table, u: its units). */
static int dp_bytes(const model_config_t *cfg, const pconfig_t *pc, const param_table_t *t,
                    const gpt_units_t *units, double *out, double *offload, perr_t *err) {
    int sizes[GRID_NAXES];
    pconfig_grid_sizes(pc, sizes);
    dp_plan_t p;
    if (dp_plan_build_grid(&p, t, cfg, sizes, pc->zero_stage, pc->bucket_cap_mb, err)) return -1;
    double rs = 0, ag = 0;
    for (int b = 0; b < p.nbuckets; b++) {
        const dp_bucket_t *bk = &p.buckets[b];
        const double S = (double)bk->piece * bk->n;
        rs += 8 * S * ring(bk->n);
        if (p.stage < 3) ag += 4 * S * ring(bk->n);
    }
    for (int u = 0; p.stage == 3 && u < p.nunits; u++) {
        /* only the units the stage runs fire events: a tied head's list
         * names the embedding's bucket on the first stage too */
        if (!gpt_units_hold(units, u)) continue;
        int bs[DP_UNIT_MAX_BUCKETS];
        const int k = dp_unit_buckets(&p, u, bs);
        for (int i = 0; i < k; i++) { /* gathered at the unit's forward and its backward */
            const dp_bucket_t *bk = &p.buckets[bs[i]];
            ag += 2.0 * pc->accum_degree * 4 * (double)bk->piece * bk->n * ring(bk->n);
        }
    }
    *offload = pc->offload ? 8.0 * (double)p.shard_len : 0; /* grads down, params up */
    dp_plan_free(&p);
    *out = rs + ag;
    return 0;
}

/* Megatron's 1-D tensor-parallel terms of a stage, in bus bytes; R of
 * its layers recomputed whole (their forward's collectives again). */
static double tp_bytes(const model_config_t *cfg, const pconfig_t *pc, int L, int e, int hd, int R,
                       int Rb, double tokens) {
    if (pc->tp < 2) return 0;
    tp_term_t t[MAX_TERMS];
    const int nt = tp_terms(L, e, hd, pc->sequence_parallel, pc->tp_row_linears, R, Rb, t);
    tp_step_t s = {.tp = pc->tp, .sp = pc->sequence_parallel, .rows = pc->tp_row_linears, .L = L,
                   .e = e, .hd = hd, .h = cfg->hidden, .ffn = cfg->ffn, .m = pc->accum_degree,
                   .tokens = tokens, .steps = 1, .R = R, .Rb = Rb};
    double bytes = 0;
    for (int i = 0; i < nt; i++)
        bytes += tp_term_elements(&t[i], &s) * coll_busbw_factor(t[i].kind, pc->tp) *
                 (double)coll_dtype_size(t[i].dt);
    return bytes;
}

int plan_comm(const model_config_t *model, const pconfig_t *pc, plan_comm_t *out, perr_t *err) {
    memset(out, 0, sizeof *out);
    if (pc->tp_mode != PC_TP_1D || pconfig_hetero(pc) || pc->ep > 1)
        return perr_set(err, "plan: communication formulas are written for 1-D tensor parallelism "
                             "on one grid without experts");
    model_config_t cfg; /* a replica's: the layout's batch and recomputation */
    engine_replica_config(model, pc, &cfg);
    pp_plan_t pp;
    if (pp_plan_build(&pp, &cfg, pc, err)) return -1;
    const int tp = pc->tp > 1 ? pc->tp : 1, cp = pc->cp > 1 ? pc->cp : 1;
    const double seqs = (double)pc->global_batch / pc->dp, T = (double)cfg.seq_length / cp;
    const double n = seqs * T, A = (double)cfg.hidden / tp;
    for (int s = 0; s < pp.pp; s++) {
        param_table_t t;
        const param_grid_t g = param_grid_tp(pconfig_model_tp(pc, s), 0, pconfig_tp_opts(pc));
        if (param_table_build_at(&t, &cfg, g.sizes, g.coord, &pp.units[s], pconfig_tp_opts(pc), err))
            return -1;
        plan_comm_t c = {0};
        int L, e, hd, cores;
        stage_units(&cfg, &pp.units[s], &L, &e, &hd);
        const int R = gpt_recomputed_layers(&cfg, &pp.units[s], NULL, &cores);
        int rc = dp_bytes(&cfg, pc, &t, &pp.units[s], &c.dp, &c.offload, err);
        c.tp = tp_bytes(&cfg, pc, L, e, hd, R, gpt_recomputed_blocks(&cfg, &pp.units[s]), n);
        int boundaries = 0;
        for (int ch = 0; ch < pp.v; ch++) {
            const int vs = pp_vstage(&pp, s, ch);
            boundaries += (vs < pp.pp * pp.v - 1) + (vs > 0);
        }
        c.pp = boundaries * n / (pc->sequence_parallel ? tp : 1) * cfg.hidden * 4;
        if (cp > 1) {
            const int blocks = gpt_attention_blocks(&cfg, &pp.units[s], &cores);
            const cp_traffic_t x = cp_traffic(cp, pc->cp_comm, n, A, blocks, cores);
            c.cp = x.kv + x.open + x.a2a;
        }
        if (pp.pp > 1 && cfg.tied && (s == 0 || s == pp.pp - 1))
            c.emb = 8.0 * (double)t.info[t.wte].numel * coll_busbw_factor(COLL_KIND_ALL_REDUCE, 2);
        param_table_free(&t);
        if (rc) return -1;
        c.total = c.dp + c.tp + c.pp + c.cp + c.emb + c.offload;
        /* the busiest device: each family's largest stage, and the largest sum */
        double *mine[] = {&out->dp, &out->tp, &out->pp, &out->cp, &out->emb, &out->offload,
                          &out->total};
        const double theirs[] = {c.dp, c.tp, c.pp, c.cp, c.emb, c.offload, c.total};
        for (int k = 0; k < 7; k++)
            if (theirs[k] > *mine[k]) *mine[k] = theirs[k];
    }
    return 0;
}

double plan_step_flops(const model_config_t *cfg, int recompute) {
    param_table_t t;
    if (param_table_build(&t, cfg, NULL)) return 0;
    const double psi = (double)t.total;
    param_table_free(&t);
    const double attn = 2.0 * cfg->layers * cfg->seq_length * cfg->hidden, fwd = 2 * psi + attn;
    /* recomputation runs a forward again: full, all of it; selective, the
     * attention core (the scores and their product with V) */
    const double again = recompute == MODEL_RECOMPUTE_FULL ? fwd
                         : recompute == MODEL_RECOMPUTE_SELECTIVE ? attn : 0;
    return (double)cfg->global_batch * cfg->seq_length * (3 * fwd + again);
}
