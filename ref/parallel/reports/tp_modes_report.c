/* tp_modes_report.c - the traffic and memory of Colossal-AI's 2-D, 2.5-D
 * and 3-D tensor-parallel modes (ref/model/styles/tp2d.c, tp3d.c) next to the
 * counters and Colossal's table: tp_report.c's report for those modes. The
 * count itself is tp_modes_count.c's. */
#include <stdio.h>
#include <string.h>

#include "model/gpt.h"
#include "parity/placement.h"
#include "parity/run_report.h"
#include "tp_modes_internal.h"
#include "tp_report_internal.h"

static const char *const t2_group_names[T2_NG] = {"tp", "tp2", "tp3", "vec"};

/* The per-step table: every measured collective of the tp families and
 * every derived one; returns 1 when they differ. */
static int t2_print_table(const tp_step_t *s, const t2_dims_t *D, const t2_count_t *want, FILE *f) {
    char head[64] = "";
    for (int g = 0; g < T2_NG; g++)
        if (D->members[g])
            snprintf(head + strlen(head), sizeof head - strlen(head), "%s%s", g ? " + " : " ",
                     t2_group_names[g]);
    fprintf(f, "  %-20s %-44s | %s\n", "per step",
            t2_three(D) ? "measured (families tp + tp-vec)" : "measured (families tp + tp2)",
            t2_three(D) ? "formula derived from tp3d.c, tp2d.c" : "formula derived from tp2d.c");
    fprintf(f, "  %-14s %-5s %6s %11s %12s %12s | %6s %11s %12s %s elements\n", "collective", "dtype",
            "calls", "elements", "bytes", "bus bytes", "calls", "elements", "bytes", head);
    int bad = 0;
    for (int k = 0; k < COLL_NKINDS; k++)
        for (int d = 0; d < COLL_NDTYPES; d++) {
            double wc = 0, we = 0;
            char split[96] = "";
            for (int g = 0; g < T2_NG; g++) {
                const t2_cell_t *c = &want->c[g][k][d];
                wc += c->calls, we += c->elems;
                if (D->members[g])
                    snprintf(split + strlen(split), sizeof split - strlen(split), "%s%.0f",
                             *split ? " + " : "", c->elems);
            }
            const coll_tally_t x = tp_measured(s, (coll_kind_t)k, (coll_dtype_t)d);
            if (!x.calls && !wc) continue;
            const double es = (double)coll_dtype_size((coll_dtype_t)d), st = s->steps;
            const double calls = (double)x.calls / st, elems = (double)x.bytes / es / st;
            const int differs = calls != wc || elems != we;
            bad |= differs;
            fprintf(f, "  %-14s %-5s %6.0f %11.0f %12.0f %12.0f | %6.0f %11.0f %12.0f  %-21s%s%s\n",
                    coll_kind_name((coll_kind_t)k), coll_dtype_name((coll_dtype_t)d), calls, elems,
                    (double)x.bytes / st, (double)x.bus_bytes / st, wc, we, we * es, split,
                    !wc ? "  not in the formula" : "", differs ? "  <- DIFFERS" : "");
        }
    return bad;
}

/* 3-D's vector groups count as their own family: measured against the
 * formula's vec part, kind by kind; returns 1 when they differ. */
static int t3_print_vec(const tp_step_t *s, const t2_count_t *want, FILE *f) {
    double calls = 0, elems = 0, wc = 0, we = 0;
    int bad = 0;
    for (int k = 0; k < COLL_NKINDS; k++)
        for (int d = 0; d < COLL_NDTYPES; d++) {
            const coll_tally_t *x = s->fam3 ? &s->fam3->by[k][d] : NULL;
            const t2_cell_t *c = &want->c[G_VEC][k][d];
            const double es = (double)coll_dtype_size((coll_dtype_t)d);
            const double mc = x ? (double)x->calls / s->steps : 0, me = x ? (double)x->bytes / es / s->steps : 0;
            bad |= mc != c->calls || me != c->elems;
            calls += mc, elems += me, wc += c->calls, we += c->elems;
        }
    fprintf(f, "  the vector groups (tp2-tp3, tp-tp3; named tp-vec<i>, so told apart by measurement): "
               "%.0f calls, %.0f elements per step; the formula's vec column: %.0f calls, %.0f "
               "elements: %s\n",
            calls, elems, wc, we, bad ? "they DIFFER, kind by kind" : "equal, kind by kind");
    return bad;
}

/* The gradient traffic of the data-parallel machinery (families dp-grads
 * and dp, and any named after tp3), bus and bytes per step. */
typedef struct {
    double rs, rs_bytes, ag, ag_bytes, other;
} t2_grads_t;

static t2_grads_t t2_grad_traffic(const run_report_t *run) {
    const coll_counters_t *cc = &run->reports[0].comm;
    const double st = run->steps > 0 ? run->steps : 1;
    t2_grads_t g = {0, 0, 0, 0, 0};
    for (int i = 0; i < cc->nfamilies; i++) {
        const coll_family_t *fam = &cc->family[i];
        if (strcmp(fam->name, "dp-grads") && strcmp(fam->name, "dp") && !strstr(fam->name, "tp3"))
            continue;
        for (int k = 0; k < COLL_NKINDS; k++)
            for (int d = 0; d < COLL_NDTYPES; d++) {
                const coll_tally_t *x = &fam->by[k][d];
                if (k == COLL_KIND_REDUCE_SCATTER && d == COLL_XVEC)
                    g.rs += (double)x->bus_bytes / st, g.rs_bytes += (double)x->bytes / st;
                else if (k == COLL_KIND_ALL_GATHER && d == COLL_F32)
                    g.ag += (double)x->bus_bytes / st, g.ag_bytes += (double)x->bytes / st;
                else
                    g.other += (double)x->bus_bytes / st;
            }
    }
    return g;
}

/* The gradient reduction over 2.5-D's depth layers (with dp and cp). */
static void t2_print_depth(const run_report_t *run, const t2_dims_t *D, double psi, FILE *f) {
    const pconfig_t *pc = &run->pc;
    const double MB = 1e6, N = pconfig_grad_ranks(pc);
    const t2_grads_t g = t2_grad_traffic(run);
    const int alone = (pc->dp > 1 ? pc->dp : 1) * (pc->cp > 1 ? pc->cp : 1) == 1;
    fprintf(f, "  depth (tp3): the %d depth layers hold the same weight blocks for other sequences; "
               "their gradients are summed over depth%s (N = %.0f ranks) by the data-parallel "
               "machinery (families dp-grads, dp), once a step:\n",
            D->d, alone ? "" : " x dp x cp", N);
    fprintf(f, "    measured per step: reduce-scatter of open sums %.0f B (bus %.0f), all-gather of "
               "fp32 %.0f B (bus %.0f), other %.0f B bus%s\n",
            g.rs_bytes, g.rs, g.ag_bytes, g.ag, g.other,
            alone ? "" : " (the depth's share is not told apart from dp's and cp's)");
    if (pc->zero_stage <= 2 && psi > 0) {
        const double want_rs = 8 * psi, want_ag = 4 * psi;
        const int eq = g.rs_bytes == want_rs && g.ag_bytes == want_ag;
        fprintf(f, "    formula (ZeRO-%d, Psi = %.0f per device): reduce-scatter 8 Psi = %.0f B, "
                   "all-gather 4 Psi = %.0f B, bus x (N-1)/N = %.3f MB: %s\n",
                pc->zero_stage, psi, want_rs, want_ag, (want_rs + want_ag) * (N - 1) / N / MB,
                eq ? "measured = formula" : "measured DIFFERS from the formula");
        const double colossal = 2 * psi * 4 * (D->d - 1) / D->d;
        fprintf(f, "    Colossal-AI all-reduces them in fp32 over depth: 2 Psi (d-1)/d x 4 B = %.3f MB "
                   "bus; parity's %.3f MB over the depth is %.2fx that (open fp64 sums + fp32 "
                   "values)\n",
                colossal / MB, (g.rs + g.ag) / MB, colossal > 0 ? (g.rs + g.ag) / colossal : 0);
    } else {
        fprintf(f, "    (ZeRO-%d: see the data-parallel report's formula)\n", pc->zero_stage);
    }
}

/* 1-D Megatron at the same device count: the formula test_tp_report.sh
 * holds equal to the measured counters, in bus bytes per step (without
 * recomputation's repeats, as this report's own count of the mode). */
static double t2_megatron_bus(const run_report_t *run, int P, int L, int e, int hd) {
    const pconfig_t *pc = &run->pc;
    const model_config_t *c = &run->model;
    const int T = c->seq_length / (pc->cp > 1 ? pc->cp : 1), per_rank = pc->global_batch / pc->dp;
    tp_step_t s = {P, 0, 0, L, e, hd, c->hidden, c->ffn, pc->accum_degree, (double)per_rank * T, NULL, 1,
                   NULL, NULL, 0, 0};
    tp_term_t t[MAX_TERMS];
    const int nt = tp_terms(L, e, hd, 0, 0, 0, 0, t);
    double bus = 0;
    for (int i = 0; i < nt; i++)
        bus += tp_term_elements(&t[i], &s) * (double)coll_dtype_size(t[i].dt) *
               coll_busbw_factor(t[i].kind, P);
    return bus;
}

/* Colossal-AI's bandwidth row for the mode, a fraction of b·s·h */
static double t2_paper_fraction(int mode, int q, int d) {
    return mode == PC_TP_3D    ? 6.0 * (q - 1) / ((double)q * q * q)
           : mode == PC_TP_25D ? 3.0 * (q - 1) * (d + 1) / ((double)d * q)
                               : 6.0 * (q - 1) / q;
}

/* The parameter table's total: of a grid of tp alone (param_grid_tp), or -1 */
static double t2_psi(const run_report_t *run, int tp, gpt_layout_opts_t lo) {
    param_table_t t;
    const param_grid_t g = param_grid_tp(tp, 0, lo);
    if (param_table_build_at(&t, &run->cfg, g.sizes, g.coord, &run->units0, lo, NULL)) return -1;
    const double psi = (double)t.total;
    param_table_free(&t);
    return psi;
}

/* Device 0's own table: the run's grid, every coordinate 0 (3-D's pieces
 * over tp3 are not on a grid of tp alone) */
static double t2_psi_device(const run_report_t *run) {
    int sizes[GRID_NAXES], coord[GRID_NAXES];
    pconfig_grid_sizes(&run->pc, sizes);
    for (int a = 0; a < GRID_NAXES; a++) coord[a] = 0;
    param_table_t t;
    if (param_table_build_at(&t, &run->cfg, sizes, coord, &run->units0, pconfig_tp_opts(&run->pc), NULL))
        return -1;
    const double psi = (double)t.total;
    param_table_free(&t);
    return psi;
}

static void t2_print_how(const t2_dims_t *D, FILE *f) {
    if (t2_three(D)) {
        fprintf(f, "  per linear [out, in] and microbatch (tp3d.c; input, weight, output groups: tp2, "
                   "tp3, tp for qkv, fc1 and the head, tp, tp3, tp2 for dense and fc2): forward X "
                   "[n, K] all-gathered over the input group, W's pieces over tp3, the open sums "
                   "[q n, O] reduce-scattered over the output group, the bias pieces gathered over "
                   "the output layout's vector group; backward the bias gradient reduce-scattered, dY "
                   "all-gathered over the output group, W's pieces again, dX's open sums "
                   "reduce-scattered over the input group, X gathered again, dW's open pieces "
                   "reduce-scattered over tp3\n");
        fprintf(f, "  per LayerNorm: 4 all-reduces of n xacc_t over tp (the stream's features), 3 "
                   "all-gathers of q^2 pieces over the stream's vector group (gamma, beta, gamma), 2 "
                   "reduce-scatters of open pieces; embedding: 2-D's over the stream's vector group "
                   "[q^2 n, C]; head: a first linear with E (no bias), cross-entropy's 3 "
                   "all-reduces over tp2, the inner layout's targets all-gathered (i32) forward and "
                   "backward\n");
        return;
    }
    fprintf(f, "  per linear [out, in] and microbatch (tp2d.c): forward q broadcasts of X[i, k] [n, "
               "w_k] along the row and q of W[j, k] [out_j, w_k] along the column, the bias pieces' "
               "all-gather over the column; backward q W broadcasts + a reduce-scatter of q open "
               "slots [n, w_max] over the row (dX), q X broadcasts + a reduce-scatter of q open slots "
               "[out_j, w_max] over the column (dW), the bias gradient's reduce-scatter over the "
               "column (w_max: the input kind's widest column block)\n");
    fprintf(f, "  per LayerNorm: 4 all-reduces of n xacc_t over the row (mean, variance; backward "
               "2 row sums), 3 all-gathers of q pieces of ceil(w/q) (gamma, beta, gamma), 2 "
               "reduce-scatters of open pieces (dgamma, dbeta); embedding: ids (i32) all-gathered "
               "twice, the lookup reduce-scattered and the gradient all-gathered over the column "
               "[q n, w], the position table's pieces gathered and its gradient reduce-scattered; "
               "head: 2q E broadcasts along the column, q dlogits broadcasts along the row, the "
               "logits' [n, w_max(V)] and dE's [w_max(V), C] open slots reduce-scattered, "
               "cross-entropy's 3 row all-reduces\n");
}

/* One layer against Colossal-AI's table, per microbatch. */
static void t2_print_paper(const run_report_t *run, const t2_dims_t *D, const t2_count_t *layer,
                           int bad, FILE *f) {
    const pconfig_t *pc = &run->pc;
    const int q = D->q, mb = run->cfg.micro_batch, T = D->lc->seq_held;
    const double bsh = (double)mb * T * run->model.hidden, frac = t2_paper_fraction(pc->tp_mode, q, D->d);
    const t2_sum_t ly = t2_sum(layer, D, -1, T2_ALL);
    const double P = pc->tp;
    const char *row = t2_three(D) ? "3-D 6(q-1)/q^3" : pc->tp_mode == PC_TP_25D ? "2.5-D 3(q-1)(d+1)/(d q)"
                                                                               : "2-D 6(q-1)/q";
    if (t2_three(D)) {
        const t2_sum_t ag = t2_sum(layer, D, COLL_KIND_ALL_GATHER, T2_AXES);
        const t2_sum_t rs = t2_sum(layer, D, COLL_KIND_REDUCE_SCATTER, T2_AXES);
        fprintf(f, "  per layer per microbatch (derived; the step's totals %s): %.0f collectives, %.0f "
                   "elements, %.0f B, %.0f B bus; of it the 4 linears' all-gathers and reduce-scatters "
                   "over tp, tp2 and tp3: %.0f, %.0f bus elements (%.0f B bus)\n",
                bad ? "DIFFER from the measured ones" : "= measured", ly.calls, ly.elems, ly.bytes,
                ly.bus, ag.calls + rs.calls, ag.bus_elems + rs.bus_elems, ag.bus + rs.bus);
    } else {
        const t2_sum_t bc = t2_sum(layer, D, COLL_KIND_BROADCAST, T2_ALL);
        const t2_sum_t lrs = t2_sum(layer, D, COLL_KIND_REDUCE_SCATTER, T2_ALL);
        fprintf(f, "  per layer per microbatch (derived; the step's totals %s): %.0f collectives, %.0f "
                   "elements, %.0f B, %.0f B bus; of it %.0f broadcasts of X and W blocks, %.0f "
                   "elements (%.0f B); %.0f reduce-scatters, %.0f B (%.0f B of blocks)\n",
                bad ? "DIFFER from the measured ones" : "= measured", ly.calls, ly.elems, ly.bytes,
                ly.bus, bc.calls, bc.elems, bc.bytes, lrs.calls, lrs.bytes, lrs.payload_bytes);
    }
    fprintf(f, "  Colossal-AI's table (communication bandwidth, ring, forward + backward; read as a "
               "fraction of the activation volume b·s·h = %.0f per layer): %s = %.3f -> %.0f "
               "elements, %.0f B in fp32\n",
            bsh, row, frac, frac * bsh, 4 * frac * bsh);
    const double all_x = frac > 0 ? ly.bus / (4 * frac * bsh) : 0;
    if (t2_three(D)) {
        /* the same layer without the backward's second gathers of X and W */
        t2_count_t six, o6, s6;
        int L, e, hd;
        tp_device0_units(run, &L, &e, &hd);
        t2_derive(D, L, e, hd, 1, 0, &six, &o6, &s6);
        const unsigned lin = T2_AXES;
        const double lin8 = t2_sum(layer, D, COLL_KIND_ALL_GATHER, lin).bus_elems +
                            t2_sum(layer, D, COLL_KIND_REDUCE_SCATTER, lin).bus_elems;
        const double lin6 = t2_sum(&six, D, COLL_KIND_ALL_GATHER, lin).bus_elems +
                            t2_sum(&six, D, COLL_KIND_REDUCE_SCATTER, lin).bus_elems;
        fprintf(f, "    it counts, per device, 6 collectives of a linear over q devices, each moving "
                   "(q-1)/q of a gathered block of b·s·h/q^2 (Colossal's Linear3D: the all-gathers of X "
                   "and W and the reduce-scatter of Y forward, the all-gather of dY and the "
                   "reduce-scatters of dX and dW backward; the weight's block counted as if "
                   "activation-sized, one [h, h] linear a layer). parity's 4 linears a layer (qkv "
                   "[3A, C], dense [C, A], fc1 [F, C], fc2 [C, F] on device 0) move %.0f bus "
                   "elements = %.2fx the table's: 8 collectives a linear, parity gathering X and W "
                   "again in the backward where Colossal's Linear3D keeps the forward's; without "
                   "those, %.0f = %.2fx, which is Colossal's 6 a linear on these shapes (the rest "
                   "of the ratio is the shapes: 4 linears of 3h, h, 4h, h outputs and weights not "
                   "activation-sized, against one [h, h])\n",
                lin8, frac > 0 ? lin8 / (frac * bsh) : 0, lin6, frac > 0 ? lin6 / (frac * bsh) : 0);
        fprintf(f, "    everything parity moves per layer, %.0f B bus = %.2fx the table's fp32 bytes "
                   "(open sums in fp64, LayerNorm's xacc_t statistics, vectors; the table's 1-D at P "
                   "= %d: 2(P-1)/P = %.3f)\n",
                ly.bus, all_x, pc->tp, 2 * (P - 1) / P);
        return;
    }
    const t2_sum_t bc = t2_sum(layer, D, COLL_KIND_BROADCAST, T2_ALL);
    fprintf(f, "    it counts the activation and weight broadcasts: parity's broadcasts per layer are "
               "%.0f elements = %.2fx the table's; everything parity moves per layer, %.0f B bus = "
               "%.2fx its fp32 bytes (the table's 1-D at P = %d: 2(P-1)/P = %.3f)\n",
            bc.elems, frac > 0 ? bc.elems / (frac * bsh) : 0, ly.bus, all_x, pc->tp, 2 * (P - 1) / P);
}

/* The grid, device 0's place on it, its tokens and blocks. */
static void t2_print_head(const run_report_t *run, const t2_dims_t *D, int L, int m, FILE *f) {
    const pconfig_t *pc = &run->pc;
    const model_config_t *c = &run->model;
    const gpt_local_t *lc = D->lc;
    const int q = D->q, T = lc->seq_held, three = t2_three(D);
    const int mb = run->cfg.micro_batch, nseq = (int)(D->n / T);
    char grid[96];
    if (three)
        snprintf(grid, sizeof grid, "q x q x q = %d x %d x %d", q, q, q);
    else if (pc->tp_mode == PC_TP_25D)
        snprintf(grid, sizeof grid, "q x q x d = %d x %d x %d", q, q, D->d);
    else
        snprintf(grid, sizeof grid, "q x q = %d x %d", q, q);
    fprintf(f, "tensor parallelism: tp=%d %s (Colossal-AI's %s on %s devices); device 0 = %s; per "
               "step %d microbatch%s of b·s = %d x %d tokens, of which its %s n = %d x %d = %.0f "
               "tokens; h = %d in %s blocks of",
            pc->tp, pconfig_tp_mode_name(pc->tp_mode),
            three ? "3-D, Agarwal et al.'s cube" : pc->tp_mode == PC_TP_25D ? "2.5-D, Tesseract"
                                                                             : "2-D, Optimus: SUMMA",
            grid,
            three ? "(tp, tp2, tp3) = (0, 0, 0)"
                  : pc->tp_mode == PC_TP_25D ? "row 0, column 0, depth 0" : "row 0, column 0",
            m, m > 1 ? "es" : "", mb, T, three ? "block (1 of q^2)" : "row's block", nseq, T, D->n,
            c->hidden, three ? "feature" : "column");
    for (int k = 0; k < q; k++) fprintf(f, "%s%d", k ? "+" : " ", lc->t2w[TP2D_HIDDEN][k]);
    fprintf(f, ", L = %d%s\n", L, pc->pp > 1 ? " layers of its pipeline stage" : "");
    if (three)
        fprintf(f, "  3-D: the stream holds the sequences of block c q + b and features of block a, a "
                   "layer's inner layout (qkv, attention, fc1, GeLU) the sequences of block c q + a and "
                   "features of block b, at device (a, b, c) = (tp, tp2, tp3)\n");
    if (pc->tp_mode == PC_TP_25D)
        fprintf(f, "  2.5-D: d = %d depth layers of q x q, each its own b / (q d) sequence blocks "
                   "through the same weight blocks\n", D->d);
}

/* Device 0's measured traffic against 1-D tensor parallelism's at the
 * same device count. */
static void t2_print_compare(const run_report_t *run, const tp_step_t *s, FILE *f) {
    const pconfig_t *pc = &run->pc;
    const int L = s->L, e = s->e, hd = s->hd;
    /* the modes at the same device count */
    double meas_bus = 0, sent = 0, recv = 0;
    for (int k = 0; k < COLL_NKINDS; k++)
        for (int d = 0; d < COLL_NDTYPES; d++) {
            const coll_tally_t x = tp_measured(s, (coll_kind_t)k, (coll_dtype_t)d);
            meas_bus += (double)x.bus_bytes, sent += (double)x.sent, recv += (double)x.recv;
        }
    const double mega = t2_megatron_bus(run, pc->tp, L, e, hd), MB = 1e6;
    const gpt_layout_opts_t plain = {0};
    const int one_d = t2_psi(run, pc->tp, plain) > 0;
    const t2_grads_t gr = t2_grad_traffic(run);
    const double depth = pc->tp_mode == PC_TP_25D ? gr.rs + gr.ag : 0;
    fprintf(f, "  device 0 per step: %.3f MB bus (nccl-tests), %.3f MB sent, %.3f MB received "
               "(coll.h's link bytes, exceptions included)\n",
            meas_bus / s->steps / MB, sent / s->steps / MB, recv / s->steps / MB);
    fprintf(f, "  at %d devices: 1-D tp=%d (Megatron) moves %.3f MB bus per step by its formula (= "
               "measured, test_tp_report.sh)%s; this mode %.2fx that",
            pc->tp, pc->tp, mega / MB, one_d ? "" : " though these tiles do not admit it",
            mega > 0 ? meas_bus / s->steps / mega : 0);
    if (depth > 0)
        fprintf(f, ", %.2fx with the depth's gradient reduction (%.3f MB bus, which 1-D without dp "
                   "does not have)", mega > 0 ? (meas_bus / s->steps + depth) / mega : 0, depth / MB);
    fprintf(f, "\n");
}

static void t2_print_traffic(const run_report_t *run, const t2_dims_t *D, FILE *f) {
    const pconfig_t *pc = &run->pc;
    const model_config_t *c = &run->model;
    const int m = pc->accum_degree > 0 ? pc->accum_degree : 1;
    const int three = t2_three(D);
    int L, e, hd;
    tp_device0_units(run, &L, &e, &hd);
    const coll_counters_t *cc = &run->reports[0].comm;
    tp_step_t s = {pc->tp, 0, 0, L, e, hd, c->hidden, c->ffn, m, 0, coll_counters_family(cc, "tp"),
                   run->steps > 0 ? run->steps : 1, coll_counters_family(cc, "tp2"),
                   three ? coll_counters_family(cc, "tp-vec") : NULL, 0, 0};
    t2_count_t layer, outer, step;
    t2_derive(D, L, e, hd, m, 1, &layer, &outer, &step);
    t2_print_head(run, D, L, m, f);
    t2_print_how(D, f);
    int bad = t2_print_table(&s, D, &step, f);
    if (three) bad |= t3_print_vec(&s, &step, f);
    fprintf(f, "  %s\n", bad ? "measured and formula DIFFER (a collective added or dropped?)"
                             : "measured = formula: calls, elements and bytes");
    if (!s.fam2)
        fprintf(f, "  (the counters tally a group by its name without the trailing digits: %s; the "
                   "formula's split over them is not measured, only its sum)\n",
                three ? "tp<i>, tp2<j> and tp3<k> all count as family \"tp\"; a linear that "
                        "used the wrong axes with the same counts (--test-broken "
                        "tp3d-no-group-swap) would look the same here, the golden comparison sees it"
                      : "the rows tp<i> and the columns tp2<j> both count as family \"tp\"");
    /* the reduce-scatters: what they move against the blocks they complete */
    const t2_sum_t rs = t2_sum(&step, D, COLL_KIND_REDUCE_SCATTER, T2_ALL);
    fprintf(f, "  reduce-scatters per step: %.0f B of which the blocks they complete are %.0f B "
               "(%.1f%%); the rest pads uneven blocks (%s)\n",
            rs.bytes, rs.payload_bytes, rs.bytes > 0 ? 100 * rs.payload_bytes / rs.bytes : 0,
            three ? "vector and weight pieces moved as large as the largest"
                  : "slots as wide as the kind's widest column block, vector pieces as the largest");
    t2_print_paper(run, D, &layer, bad, f);
    tp_print_exactness(&s, f);
    const double psi = t2_psi_device(run);
    if (pc->tp_mode == PC_TP_25D) t2_print_depth(run, D, psi, f);
    if (three) {
        const t2_grads_t g = t2_grad_traffic(run);
        const double N = pconfig_grad_ranks(pc), want = N > 1 ? 12 * psi * (N - 1) / N : 0;
        fprintf(f, "  no depth reduction: each weight piece is held by one device of the replica "
                   "(1/q^3), so no gradient is summed over tp, tp2 or tp3; the data-parallel "
                   "machinery (families dp-grads, dp; N = %.0f ranks) moved %.0f B bus of gradients "
                   "per step",
                N, g.rs + g.ag);
        if (pc->zero_stage <= 2 && psi > 0)
            fprintf(f, " (ZeRO-%d: reduce-scatter 8 Psi + all-gather 4 Psi, x (N-1)/N = %.0f B: %s)",
                    pc->zero_stage, want, g.rs + g.ag == want ? "= formula" : "DIFFERS");
        fprintf(f, "\n");
    }
    t2_print_compare(run, &s, f);
}

/* Bytes per token of one layer's slot at device 0's blocks: the 1-D table
 * (layer_per_token) with the stream's C, the attention A, the FFN F and
 * the heads of its block. */
static double t2_layer_per_token(const model_config_t *c, const gpt_local_t *lc) {
    const double C = lc->hid, hd = c->hidden_dropout > 0, ad = c->attention_dropout > 0;
    const double heads = (double)lc->attn / (c->hidden / c->heads);
    return 32 * C + 2 * C * hd + 8 + 16.0 * lc->attn + 12.0 * lc->ffn +
           heads * (c->seq_length * (4 + 5 * ad) + 4);
}

static double t2_table_activations(const model_config_t *cfg, int more, int q,
                                   gpt_layout_opts_t opts) {
    model_config_t c = *cfg;
    c.layers += more;
    gpt_mem_t m;
    if (gpt_mem_bytes_tp(&c, q, opts, 0, &m, NULL)) return -1;
    return (double)m.activations;
}

/* Device 0's parameter blocks, written out (2-D: W[out block j, in block
 * i], vectors in pieces of out/q^2; 3-D: W[out block, piece; in block],
 * vectors in pieces of out/q^3) */
static double t2_params_formula(const run_report_t *run, const t2_dims_t *D, double *layer,
                                double *emb) {
    const model_config_t *cfg = &run->cfg;
    const int q = D->q;
    int L, e, hd;
    tp_device0_units(run, &L, &e, &hd);
    const double C = D->C, A = D->A, F = D->F;
    double E, wpe, lnf;
    if (t2_three(D)) {
        const double vp = t2_vpad(D, D->C);
        *layer = t2_pad(3 * D->A, q) * C + t2_pad(D->C, q) * A + t2_pad(D->F, q) * C +
                 t2_pad(D->C, q) * F + t2_vpad(D, 3 * D->A) + vp + t2_vpad(D, D->F) + vp + 4 * vp;
        E = t2_pad(D->V, q) * C, wpe = t2_vpad(D, cfg->seq_length) * C, lnf = 2 * vp;
    } else {
        const double pc_ = t2_pad(D->C, q);
        *layer = 3 * A * C + C * A + F * C + C * F + t2_pad(3 * D->A, q) + 2 * pc_ + t2_pad(D->F, q) +
                 4 * pc_;
        E = D->lc->t2w[TP2D_VOCAB][0] * C, wpe = t2_pad(cfg->seq_length, q) * C, lnf = 2 * pc_;
    }
    *emb = E + wpe;
    return L * *layer + (e || hd ? E : 0) + (e ? wpe : 0) + (hd ? lnf + (cfg->tied ? 0 : E) : 0);
}

static void t2_print_memory(const run_report_t *run, const t2_dims_t *D, FILE *f) {
    const pconfig_t *pc = &run->pc;
    const model_config_t cfg = run->cfg;
    const gpt_local_t *lc = D->lc;
    const int q = D->q, three = t2_three(D);
    const gpt_layout_opts_t opts = pconfig_tp_opts(pc);
    const double MB = 1e6;
    int L, e, hd;
    tp_device0_units(run, &L, &e, &hd);
    double layer, emb;
    const double want = t2_params_formula(run, D, &layer, &emb);
    const double C = D->C, A = D->A, F = D->F, Vr = three ? D->V : lc->t2w[TP2D_VOCAB][0];
    const gpt_layout_opts_t plain = {0};
    const double psi = t2_psi_device(run), golden = t2_psi(run, 1, plain),
                 one_d = t2_psi(run, pc->tp, plain);
    const double arena = (double)run->reports[0].peak[MEM_PARAMS];
    if (three) {
        fprintf(f, "parameters per device: 3-D placement pieces, every weight [out, in] as W[out block, "
                   "piece over tp3; in block] (1/q^3 of it), vectors and the position table in pieces "
                   "of out/q^3 (a block over one axis, pieces over the other two)\n");
        fprintf(f, "  device 0's pieces: L x (ceil(3A/q) C + ceil(C/q) A + ceil(F/q) C + ceil(C/q) F + "
                   "the bias and LayerNorm pieces) + E ceil(V_0/q) C + the position table's piece = "
                   "%d x %.0f + %.0f = %.0f elements (C = %.0f, A = %.0f, F = %.0f, V_0 = %.0f)\n",
                L, layer, emb, want, C, A, F, Vr);
    } else {
        fprintf(f, "parameters per device: 2-D placement blocks, every weight [out, in] as W[out block "
                   "j, in block i] (1/q^2 of it), vectors and the position table in out/q^2 pieces%s\n",
                pc->tp_mode == PC_TP_25D ? ", the same blocks on every depth layer" : "");
        fprintf(f, "  device 0's blocks: L x (3A C + C A + F C + C F + the bias and LayerNorm pieces) + "
                   "E V_0 C + the position table's piece = %d x %.0f + %.0f = %.0f elements (C = %.0f, "
                   "A = %.0f, F = %.0f, V_0 = %.0f)\n",
                L, layer, emb, want, C, A, F, Vr);
    }
    fprintf(f, "  the parameter table: %.0f (%s); measured arena high-water %.0f B = %.0f x 4 B\n", psi,
            psi == want ? "= formula" : "DIFFERS from the formula", arena, arena / 4);
    fprintf(f, "  against the golden model's %.0f: 1/%.2f (q^%d = %d%s)%s; 1-D tp=%d holds ", golden,
            psi > 0 ? golden / psi : 0, three ? 3 : 2, three ? q * q * q : q * q,
            three ? "; uneven blocks and pieces make it less" : "",
            pc->tp_mode == PC_TP_25D ? ", replicated over depth" : "", pc->tp);
    if (one_d > 0)
        fprintf(f, "%.0f per device (this mode: %.2fx)\n", one_d, psi / one_d);
    else
        fprintf(f, "- (its tiles do not admit tp=%d)\n", pc->tp);
    /* activations */
    const int slot_seq = (cfg.micro_batch + lc->t2blocks - 1) / lc->t2blocks; /* replica.c's slot_sequences */
    const double per_tok = t2_layer_per_token(&cfg, lc), slot_tok = (double)slot_seq * lc->seq_held;
    const double all = t2_table_activations(&cfg, 0, q, opts);
    const double more = all < 0 ? -1 : t2_table_activations(&cfg, 1, q, opts);
    const double hdp = cfg.hidden_dropout > 0, V = lc->vocab;
    const double outer = (20 + 4 * V + 16 * C + C * hdp + 4) * slot_tok;
    fprintf(f, "activation memory per device: its blocks C = %.0f%s, A = %.0f, F = %.0f, %.0f heads, "
               "vocabulary %.0f%s; hidden dropout %s, attention dropout %s\n",
            C, three ? " (the stream's features, tp)" : "", A, F, A / (cfg.hidden / cfg.heads), V,
            three ? " (the inner layout's, tp2)" : "", hdp > 0 ? "on" : "off",
            cfg.attention_dropout > 0 ? "on" : "off");
    fprintf(f, "  per layer per token (bytes): 32C + 2C[hidden dropout] + 8 + 16A + 12F + heads (T (4 + "
               "5[attention dropout]) + 4) = %.0f B\n", per_tok);
    fprintf(f, "  a slot holds b/%d x s = %d x %d = %.0f tokens (its block of the microbatch%s); device "
               "0's %s uses n = %.0f of them\n",
            lc->t2blocks, slot_seq, lc->seq_held, slot_tok,
            pc->tp_mode == PC_TP_25D ? ", sized for a row's: a depth layer's is 1/d of it" : "",
            three ? "block" : "row", D->n);
    fprintf(f, "  %-8s %10s %13s %17s %15s %13s %15s\n", "formula:", "per token", "per layer", "L layers",
            "table: layer", "emb., head", "rest: scratch");
    fprintf(f, "  %-8s %8.0f B %10.3f MB %14.3f MB",
            three ? "3-D" : pc->tp_mode == PC_TP_25D ? "2.5-D" : "2-D", per_tok, per_tok * slot_tok / MB,
            L * per_tok * slot_tok / MB);
    if (all < 0 || more < 0)
        fprintf(f, "   (the layout is not admitted)\n");
    else
        fprintf(f, " %12.3f MB %10.3f MB %12.3f MB\n", (more - all) / MB, outer / MB,
                (all - cfg.layers * (more - all) - outer) / MB);
    const double colossal = per_tok * D->n;
    fprintf(f, "  Colossal-AI's table: activations O(1/%s) of one device's: sized for the %s's n "
               "tokens, a layer's slot would be %.3f MB (here %.3f MB)\n",
            three ? "q^3" : pc->tp_mode == PC_TP_25D ? "(d q^2)" : "q^2", three ? "block" : "row",
            colossal / MB, per_tok * slot_tok / MB);
    const gpt_units_t u = run->units0;
    gpt_mem_t m0;
    const double table = gpt_mem_bytes_mp(&cfg, q, opts, &u, u.n ? run->reports[0].pp_slots : 0, 0,
                                          &m0, NULL) ? -1 : (double)m0.activations;
    fprintf(f, "  measured high-water, device 0: %.3f MB; the allocation table: %.3f MB\n",
            (double)run->reports[0].peak[MEM_ACTIVATIONS] / MB, table / MB);
}

void tp_modes_print_report(const run_report_t *run, FILE *f) {
    gpt_local_t lc;
    t2_dims_t D;
    if (t2_dims(run, &lc, &D)) {
        fprintf(f, "tensor parallelism: tp=%d %s; device 0's blocks cannot be derived (no report)\n",
                run->pc.tp, pconfig_tp_mode_name(run->pc.tp_mode));
        return;
    }
    t2_print_traffic(run, &D, f);
    t2_print_memory(run, &D, f);
}

