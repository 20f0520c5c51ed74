/* tp_report.c - tensor parallelism's traffic and activation memory
 * next to Megatron's formulas (Shoeybi et al. 2019; Korthikanti et al.
 * 2022), as dp/dp_report.c does for ZeRO.
 *
 * Traffic. Megatron's 1-D tensor parallelism all-reduces [b·s, h] four
 * times per layer and microbatch: forward after the attention dense and
 * the MLP fc2 (row-parallel outputs), backward for the qkv and fc1 input
 * gradients (column-parallel inputs); the vocabulary-parallel embedding
 * adds one forward, the LM head's input gradient one backward, and the
 * vocabulary-parallel cross-entropy three of [b·s] (max, sum of exps,
 * target logit). Sequence parallelism replaces each all-reduce by an
 * all-gather / reduce-scatter pair of the same volume. Full recomputation
 * runs a recomputed layer's forward again in its backward, its
 * collectives with it: 2 more all-reduces of [b·s, h] (SP: 2 all-gathers
 * and 2 reduce-scatters; every linear row-parallel: the 4 output
 * all-reduces); selective recomputes attention's core, which has none.
 * parity moves the same tensors, but what is a sum travels open
 * (COLL_XVEC: one fp64 an element, plus an xacc_t for each element whose
 * sum would round) and the softmax denominators as xacc_t: those bytes
 * are the price of exactness and are printed on their own line. The counters tell tensor-parallel
 * traffic from data-parallel traffic by group family (coll.h): "tp".
 *
 * Memory. An activation slot (replica.c's layout_slot) holds per layer and
 * token 4-byte values and 1-byte dropout masks; the formula below is that
 * table written out in h, ffn/t, heads/t, T and the dropout switches, and
 * is checked against the allocation table (gpt_mem_bytes_tp) per layer.
 *
 * Colossal-AI's 2-D, 2.5-D and 3-D modes (tp2d.c, tp3d.c) have their own
 * count, derived call by call from what tp2d.c and tp3d.c move, next to
 * Colossal-AI's table (see "2-D, 2.5-D and 3-D" below).
 *
 * Dependency: engine -> here, never back. The input is run_report.h's
 * run_report_t, which the engine fills after a run (engine/report.c);
 * nothing here includes or calls the engine.
 */
#include <stdio.h>
#include <string.h>

#include "model/gpt.h"
#include "parity/placement.h"
#include "parity/run_report.h"
#include "tp_report_internal.h"

/* What device 0's tensor-parallel group carries per microbatch: its L
 * layers, the embedding (e = 1 when it holds it) and the head (hd = 1);
 * without a pipeline every device holds all three. R of the L layers are
 * recomputed whole: their forward's collectives (the 2 all-reduces, or
 * SP's 2 gathers and 2 reduce-scatters; every linear row-parallel, the 4
 * output all-reduces) come again. Elements count the whole tensor
 * (S / element size, coll.h): an all-gather or reduce-scatter of [b·s, h]
 * counts b·s·h. Terms with no call are left out. */
int tp_terms(int L, int e, int hd, int sp, int rows, int R, int Rb, tp_term_t *t) {
    const long l4 = 4L * L, again = 4L * L + Rb; /* [b·s, h] a layer, recomputed forward too */
    tp_term_t all[6];
    int n = 0;
    if (rows) { /* every linear row-parallel: 4 open outputs forward, 4 input-gradient gathers */
        all[n++] = (tp_term_t){COLL_KIND_ALL_REDUCE, COLL_XVEC, l4 + 2L * Rb + hd, 5L * (L + R) + hd, 0,
                               0,
                               R ? "qkv, dense, fc1, fc2 outputs (a recomputed layer's twice) + "
                                   "LM-head input grad"
                                 : "qkv, dense, fc1, fc2 outputs + LM-head input grad",
                               L + R};
        all[n++] = (tp_term_t){COLL_KIND_ALL_GATHER, COLL_F32, l4, 3L * L, 0, 0,
                               "input grads of qkv, dense, fc1 [b·s,h], fc2 [b·s,ffn]", L};
        all[n++] = (tp_term_t){COLL_KIND_ALL_REDUCE, COLL_F32, e + 2 * hd, e, 2 * hd, 0,
                               "embedding [b·s,h]; CE max, target logit [b·s]", 0};
        all[n++] = (tp_term_t){COLL_KIND_ALL_REDUCE, COLL_XACC, hd, 0, hd, 0, "CE sum of exps [b·s]", 0};
    } else if (!sp) {
        all[n++] = (tp_term_t){COLL_KIND_ALL_REDUCE, COLL_XVEC, again + hd, again + hd, 0, 0,
                               R ? "4 a layer, 6 a recomputed one + LM-head input grad [b·s,h]"
                                 : "4 a layer + LM-head input grad [b·s,h]",
                               0};
        all[n++] = (tp_term_t){COLL_KIND_ALL_REDUCE, COLL_F32, e + 2 * hd, e, 2 * hd, 0,
                               "embedding [b·s,h]; CE max, target logit [b·s]", 0};
        all[n++] = (tp_term_t){COLL_KIND_ALL_REDUCE, COLL_XACC, hd, 0, hd, 0, "CE sum of exps [b·s]", 0};
    } else {
        all[n++] = (tp_term_t){COLL_KIND_ALL_GATHER, COLL_F32, again + hd + e, again + hd + e, 0, 0,
                               R ? "4 a layer, 6 a recomputed one + LNf out, embedding grad [b·s,h]"
                                 : "4 a layer + LNf out, embedding grad [b·s,h]",
                               0};
        all[n++] = (tp_term_t){COLL_KIND_REDUCE_SCATTER, COLL_XVEC, again + hd, again + hd, 0, 0,
                               R ? "4 a layer, 6 a recomputed one + LM-head input grad [b·s,h]"
                                 : "4 a layer + LM-head input grad [b·s,h]",
                               0};
        all[n++] = (tp_term_t){COLL_KIND_REDUCE_SCATTER, COLL_F32, e, e, 0, 0, "embedding [b·s,h]", 0};
        all[n++] = (tp_term_t){COLL_KIND_ALL_REDUCE, COLL_XVEC, l4 + 2 * hd, 0, 0, l4 + 2 * hd,
                               "LayerNorm weight, bias grads [h]", 0};
        all[n++] = (tp_term_t){COLL_KIND_ALL_REDUCE, COLL_F32, 2 * hd, 0, 2 * hd, 0,
                               "CE max, target logit [b·s]", 0};
        all[n++] = (tp_term_t){COLL_KIND_ALL_REDUCE, COLL_XACC, hd, 0, hd, 0, "CE sum of exps [b·s]", 0};
    }
    int k = 0;
    for (int i = 0; i < n; i++)
        if (all[i].calls) t[k++] = all[i];
    return k;
}

double tp_term_elements(const tp_term_t *t, const tp_step_t *s) {
    return (double)t->nh * s->tokens * s->h + (double)t->nf * s->tokens * s->ffn +
           (double)t->n * s->tokens + (double)t->h * s->m * s->h;
}

coll_tally_t tp_measured(const tp_step_t *s, coll_kind_t k, coll_dtype_t d) {
    coll_tally_t z = {0, 0, 0, 0, 0};
    for (int i = 0; i < 3; i++) {
        const coll_family_t *fam = i == 2 ? s->fam3 : i ? s->fam2 : s->fam;
        if (!fam) continue;
        const coll_tally_t *x = &fam->by[k][d];
        z.calls += x->calls, z.bytes += x->bytes, z.bus_bytes += x->bus_bytes;
        z.sent += x->sent, z.recv += x->recv;
    }
    return z;
}

static int find_term(const tp_term_t *t, int nt, int k, int d) {
    for (int i = 0; i < nt; i++)
        if ((int)t[i].kind == k && (int)t[i].dt == d) return i;
    return -1;
}

/* One table row, per step; returns 1 when measured and formula differ. */
static int print_row(const tp_step_t *s, int k, int d, const tp_term_t *t, FILE *f) {
    const coll_tally_t x = tp_measured(s, (coll_kind_t)k, (coll_dtype_t)d);
    const double es = (double)coll_dtype_size((coll_dtype_t)d), st = s->steps;
    const double calls = (double)x.calls / st, elems = (double)x.bytes / es / st;
    const double want_calls = t ? (double)t->calls * s->m : 0, want = t ? tp_term_elements(t, s) : 0;
    const int differs = calls != want_calls || elems != want;
    fprintf(f, "  %-14s %-5s %6.0f %11.0f %12.0f %12.0f | %6.0f %11.0f %12.0f  %s%s\n",
            coll_kind_name((coll_kind_t)k), coll_dtype_name((coll_dtype_t)d), calls, elems,
            (double)x.bytes / st, (double)x.bus_bytes / st, want_calls, want, want * es,
            t ? t->what : "not in the formula", differs ? "  <- DIFFERS" : "");
    return differs;
}

/* Every measured collective of the family and every term of the formula. */
static int print_table(const tp_step_t *s, FILE *f) {
    tp_term_t t[MAX_TERMS];
    const int nt = tp_terms(s->L, s->e, s->hd, s->sp, s->rows, s->R, s->Rb, t);
    fprintf(f, "  %-20s %-44s | %s\n", "per step", "measured", "formula");
    fprintf(f, "  %-14s %-5s %6s %11s %12s %12s | %6s %11s %12s\n", "collective", "dtype", "calls",
            "elements", "bytes", "bus bytes", "calls", "elements", "bytes");
    int bad = 0;
    for (int k = 0; k < COLL_NKINDS; k++)
        for (int d = 0; d < COLL_NDTYPES; d++) {
            int i = find_term(t, nt, k, d);
            if (i >= 0 || tp_measured(s, (coll_kind_t)k, (coll_dtype_t)d).calls)
                bad |= print_row(s, k, d, i >= 0 ? &t[i] : NULL, f);
        }
    return bad;
}

static void print_megatron(const tp_step_t *s, double bs, FILE *f) {
    const double per = 4 * bs * s->h, KB = 1e3;
    if (!s->sp)
        fprintf(f, "  Megatron per layer per microbatch: 4 all-reduces of [b·s, h] (forward: attention "
                   "dense and fc2 outputs; backward: qkv and fc1 input gradients)\n");
    else
        fprintf(f, "  Megatron per layer per microbatch (sequence parallel): 4 all-gathers and 4 "
                   "reduce-scatters of [b·s, h], the all-reduces' volume (all-gather before qkv and "
                   "fc1, reduce-scatter after dense and fc2, and their conjugates backward; Megatron "
                   "also gathers the qkv and fc1 inputs again for the weight gradients, parity keeps "
                   "them)\n");
    if (!s->sp)
        fprintf(f, "    = %.0f elements (bytes S): %.1f KB in fp32, %.1f KB in bf16; parity's sums "
                   "travel open, in fp64: %.1f KB\n",
                per, 4 * per / KB, 2 * per / KB, 8 * per / KB);
    else
        fprintf(f, "    = %.0f elements gathered and %.0f reduce-scattered (bytes S): %.1f + %.1f KB "
                   "in fp32, %.1f + %.1f KB in bf16; parity gathers rounded fp32 values and "
                   "reduce-scatters open sums in fp64: %.1f + %.1f KB\n",
                per, per, 4 * per / KB, 4 * per / KB, 2 * per / KB, 2 * per / KB, 4 * per / KB,
                8 * per / KB);
    fprintf(f, "  per microbatch besides: the embedding [b·s, h] (%s), the LM-head input gradient "
               "[b·s, h], cross-entropy's max, sum of exps and target logit [b·s]%s\n",
            s->sp ? "reduce-scatter forward, all-gather backward" : "all-reduce forward",
            s->sp ? "; parity all-reduces LayerNorm weight and bias gradients per microbatch "
                    "(Megatron once a step)" : "");
}

/* What exactness adds, in bus bytes per step: open sums as fp64 (+ the
 * exceptions that moved) instead of fp32 or bf16, xacc_t denominators. */
void tp_print_exactness(const tp_step_t *s, FILE *f) {
    double xbus = 0, exc_sent = 0, exc_recv = 0;
    for (int k = 0; k < COLL_NKINDS; k++) {
        const coll_tally_t x = tp_measured(s, (coll_kind_t)k, COLL_XVEC);
        xbus += (double)x.bus_bytes;
        exc_sent += (double)x.sent - (double)x.bus_bytes;
        exc_recv += (double)x.recv - (double)x.bus_bytes;
    }
    const double xa = (double)tp_measured(s, COLL_KIND_ALL_REDUCE, COLL_XACC).bus_bytes;
    const double st = s->steps, MB = 1e6, xs = (double)sizeof(xacc_t);
    fprintf(f, "  exactness adds per step (bus bytes): open sums as fp64 +%.3f MB over fp32 "
               "(+%.3f MB over bf16), softmax denominators as xacc_t (%.0f B) +%.3f MB over fp32;\n"
               "    and the exception accumulators that moved (data-dependent): %.0f B sent, %.0f B "
               "received\n",
            xbus / 2 / st / MB, xbus * 3 / 4 / st / MB, xs, xa * (1 - 4 / xs) / st / MB,
            exc_sent / st, exc_recv / st);
}

/* Device 0's units by what they do to the residual stream: a layer takes
 * and gives it, the embedding starts it, the head ends it. */
void tp_device0_units(const run_report_t *run, int *L, int *e, int *hd) {
    const model_config_t *c = &run->model;
    const gpt_units_t u = run->units0;
    *L = 0, *e = 0, *hd = 0;
    for (int k = 0; k < model_num_units(c); k++) {
        if (!gpt_units_hold(&u, k)) continue;
        const int in = model_unit_takes_stream(c, k), out = model_unit_gives_stream(c, k);
        *L += in && out, *e |= !in, *hd |= !out;
    }
}

/* Colossal-AI's 1-D row (its tensor-parallel table: bandwidth 2(P-1)/P,
 * read per layer as a fraction of b·s·h) next to one layer of the
 * formula above, in bus elements (nccl-tests' factors over P). */
static void print_colossal_1d(const tp_step_t *s, double bs, FILE *f) {
    tp_term_t t[MAX_TERMS];
    const int nt = tp_terms(1, 0, 0, s->sp, s->rows, 0, 0, t);
    tp_step_t one = *s;
    one.L = 1, one.e = 0, one.hd = 0, one.m = 1, one.tokens = bs;
    double elems = 0, bus = 0;
    for (int i = 0; i < nt; i++) {
        const double x = tp_term_elements(&t[i], &one), fac = coll_busbw_factor(t[i].kind, s->tp);
        elems += x * fac, bus += x * fac * (double)coll_dtype_size(t[i].dt);
    }
    const double P = s->tp, frac = 2 * (P - 1) / P, bsh = bs * s->h;
    fprintf(f, "  Colossal-AI's table (1-D, communication bandwidth, ring, forward + backward; read as a "
               "fraction of the activation volume b·s·h = %.0f per layer): 2(P-1)/P = %.3f -> %.0f "
               "elements; parity's layer above: %.0f bus elements = %.2fx the table's (%.0f B bus)\n",
            bsh, frac, frac * bsh, elems, frac > 0 ? elems / (frac * bsh) : 0, bus);
}

static void print_traffic(const run_report_t *run, FILE *f) {
    const pconfig_t *pc = &run->pc;
    const model_config_t *c = &run->model;
    /* context parallelism: a rank holds T/cp positions of each sequence */
    const int T = c->seq_length / (pc->cp > 1 ? pc->cp : 1), per_rank = pc->global_batch / pc->dp;
    int L, e, hd;
    tp_device0_units(run, &L, &e, &hd);
    tp_step_t s = {pc->tp, pc->sequence_parallel, pc->tp_row_linears, L, e, hd, c->hidden, c->ffn, pc->accum_degree, (double)per_rank * T,
                   coll_counters_family(&run->reports[0].comm, "tp"), run->steps > 0 ? run->steps : 1, NULL,
                   NULL, gpt_recomputed_layers(&run->cfg, &run->units0, NULL, NULL),
                   gpt_recomputed_blocks(&run->cfg, &run->units0)};
    const int even = per_rank % pc->accum_degree == 0;
    fprintf(f, "tensor parallelism: tp=%d%s%s; device 0's tensor-parallel group per step: %d "
               "microbatch%s of b·s = %d x %d = %d tokens%s, h = %d, L = %d%s%s\n",
            pc->tp, s.sp ? " with sequence parallelism" : "",
            s.rows ? ", every linear row-parallel (sharding_dim 0)" : "", s.m, s.m > 1 ? "es" : "",
            pc->micro_batch, T, pc->micro_batch * T, even ? "" : " (the largest)", s.h, s.L,
            pc->pp > 1 ? " layers of its pipeline stage" : "",
            pc->pp > 1 ? (s.e && s.hd ? ", the embedding and the head"
                          : s.e ? ", the embedding" : s.hd ? ", the head" : ", no embedding or head")
                       : "");
    if (s.rows)
        fprintf(f, "  per layer per microbatch: 4 all-reduces of open sums (the qkv [b·s, 3h], dense "
                   "[b·s, h], fc1 [b·s, ffn] and fc2 [b·s, h] outputs) and, backward, 4 all-gathers "
                   "of the input gradients' columns (qkv, dense, fc1 [b·s, h], fc2 [b·s, ffn]); "
                   "attention and GeLU run whole on every rank\n");
    else
        print_megatron(&s, (double)pc->micro_batch * T, f);
    if (s.R)
        fprintf(f, "  full recomputation: %d of the %d layers run their forward again in the backward, "
                   "collectives included; each adds per microbatch %s\n",
                s.R, s.L,
                s.rows ? "its 4 output all-reduces of open sums"
                : s.sp ? "2 all-gathers and 2 reduce-scatters of [b·s, h]"
                       : "2 all-reduces of [b·s, h] (the dense and fc2 outputs)");
    else if (run->cfg.recompute == MODEL_RECOMPUTE_SELECTIVE)
        fprintf(f, "  selective recomputation: attention's core runs again in the backward, without a "
                   "tensor-parallel collective\n");
    const int bad = print_table(&s, f);
    fprintf(f, "  %s\n", bad ? "measured and formula DIFFER (a collective added or dropped?)"
                             : "measured = formula: calls, elements and bytes");
    print_colossal_1d(&s, (double)pc->micro_batch * T, f);
    tp_print_exactness(&s, f);
}

/* ---- activation memory -------------------------------------------------- */

/* One layer's slot bytes per token held (report_layer_per_token). */
static double layer_per_token(const model_config_t *c, int t, int sp) {
    double core, out;
    return report_layer_per_token(c, t, sp, 0, &core, &out);
}

/* The slot outside the layers: input and target ids, the losses, the
 * softmax max and denominator (20), logits (4V/t); sharded under SP: the
 * embedding output and mask, LayerNorm-f x-hat, output and 1/std, the
 * residual gradient (16h + h + 4); SP keeps LNf's output gathered (4h). */
static double outer_per_token(const model_config_t *c, int t, int sp) {
    const double h = c->hidden, hd = c->hidden_dropout > 0;
    const double fixed = 20 + 4.0 * c->vocab / t, rep = 16 * h + h * hd + 4;
    return sp ? fixed + rep / t + 4 * h : fixed + rep;
}

/* The allocation table's activations (slot and backward scratch) for the
 * replica of cfg with `more` layers added, or -1 when the layout is not
 * admitted. */
static double table_bytes(const model_config_t *cfg, int more, int tp, int sp,
                          gpt_layout_opts_t cpo) {
    model_config_t c = *cfg;
    c.layers += more;
    gpt_mem_t m;
    cpo.sp = sp;
    if (gpt_mem_bytes_tp(&c, tp, cpo, 0, &m, NULL)) return -1;
    return (double)m.activations;
}

/* cpo: the layout but its tensor-parallel forms (sp, row_linears): under
 * context parallelism a slot holds T/cp positions, each attending to all T */
static void print_memory_column(const model_config_t *cfg, int tp, int sp, gpt_layout_opts_t cpo,
                                FILE *f) {
    const double n = (double)cfg->micro_batch * cfg->seq_length / cpo.cp, L = cfg->layers,
                 MB = 1e6;
    const double layer = layer_per_token(cfg, tp, sp) * n, outer = outer_per_token(cfg, tp, sp) * n;
    /* the table's bytes of one layer: one more layer's worth */
    const double all = table_bytes(cfg, 0, tp, sp, cpo);
    const double more = all < 0 ? -1 : table_bytes(cfg, 1, tp, sp, cpo);
    fprintf(f, "  %-8s %8.0f B %10.3f MB %14.3f MB", sp ? "with SP" : "no SP",
            layer_per_token(cfg, tp, sp), layer / MB, L * layer / MB);
    if (all < 0 || more < 0) {
        fprintf(f, "   (the layout is not admitted)\n");
        return;
    }
    fprintf(f, " %12.3f MB %10.3f MB %12.3f MB\n", (more - all) / MB, outer / MB,
            (all - L * (more - all) - outer) / MB);
}

static void print_memory(const run_report_t *run, FILE *f) {
    const model_config_t cfg = run->cfg;
    const int t = run->pc.tp, sp = run->pc.sequence_parallel;
    const double h = cfg.hidden, a = cfg.heads, T = cfg.seq_length, MB = 1e6;
    fprintf(f, "activation memory per device: one slot of b·s = %d x %d tokens, tp=%d%s; hidden dropout "
               "%s, attention dropout %s\n",
            cfg.micro_batch, cfg.seq_length / (run->pc.cp > 1 ? run->pc.cp : 1), t,
            run->pc.cp > 1 ? " (T/cp positions, attending to all T)" : "",
            cfg.hidden_dropout > 0 ? "on" : "off",
            cfg.attention_dropout > 0 ? "on" : "off");
    fprintf(f, "  per layer per token (bytes): 32h + 2h[hidden dropout] + 8 + (16h + 12 ffn + heads "
               "(T (4 + 5[attention dropout]) + 4)) / t\n"
               "    with SP: (32h + 2h[hidden dropout] + 8) / t + 8h (the gathered LayerNorm outputs) "
               "+ the same split part\n");
    fprintf(f, "  Megatron's (16-bit values, 1-byte masks, dropout on): 10h + 24h/t + 5 heads T/t = "
               "%.0f B, with SP 34h/t + 5 heads T/t = %.0f B\n",
            10 * h + 24 * h / t + 5 * a * T / t, 34 * h / t + 5 * a * T / t);
    fprintf(f, "  %-8s %10s %13s %17s %15s %13s %15s\n", "formula:", "per token", "per layer",
            "L layers", "table: layer", "emb., head", "rest: scratch");
    if (run->pc.tp_row_linears) {
        /* the split part is whole on every rank: tp = 1's layer */
        /* the split part is tp = 1's; the embedding, head and scratch
         * columns of the table are not written out for this form */
        fprintf(f, "  every linear row-parallel: qkv, attention and FFN activations whole, %.0f B per "
                   "token and layer (t = 1 in the split part)\n",
                layer_per_token(&cfg, 1, 0));
    } else {
        gpt_layout_opts_t cpo = pconfig_tp_opts(&run->pc);
        cpo.sp = 0, cpo.row_linears = 0;
        print_memory_column(&cfg, t, 0, cpo, f);
        print_memory_column(&cfg, t, 1, cpo, f);
    }
    /* device 0's own table: its stage's units and its schedule's slots */
    const gpt_units_t u = run->units0;
    gpt_mem_t m0;
    const double all = gpt_mem_bytes_mp(&cfg, t, pconfig_tp_opts(&run->pc), &u,
                                        u.n ? run->reports[0].pp_slots : 0, 0,
                                        &m0, NULL) ? -1 : (double)m0.activations;
    fprintf(f, "  (table: the allocation's own sizes, gpt_mem_bytes_tp, 64-byte aligned buffers; rest: "
               "its backward scratch and tp buffers, and the alignment)\n");
    fprintf(f, "  measured high-water, device 0: %.3f MB (this run, %s SP%s); the allocation table: "
               "%.3f MB\n",
            (double)run->reports[0].peak[MEM_ACTIVATIONS] / MB, sp ? "with" : "without",
            u.n ? ", its stage's units and slots" : "", all / MB);
}

void tp_print_report(const run_report_t *run, FILE *f) {
    if (pconfig_hetero(&run->pc)) { /* device 0 is an encoder's: its tp is not the run's */
        fprintf(f, "tensor parallelism: an encoder mesh of tp=%d beside the decoder's tp=%d; the "
                   "per-group traffic and memory tables are drawn for one grid only (pp report: "
                   "the encoder-decoder bridge)\n", run->pc.encoder_tp, run->pc.tp);
        return;
    }
    if (!run->reports || run->pc.tp < 2) return;
    if (run->pc.tp_mode == PC_TP_2D || run->pc.tp_mode == PC_TP_25D || run->pc.tp_mode == PC_TP_3D) {
        tp_modes_print_report(run, f); /* not the 1-D tables: they would only say DIFFER */
        return;
    }
    print_traffic(run, f);
    print_memory(run, f);
}
