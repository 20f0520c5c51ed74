/* describe_mesh.c - an element of a dump tensor in mesh terms, for the
 * first-divergence report (engine.h's engine_describe_mesh): the device on every
 * axis with the element's sub-axes, its microbatch, and which mode's
 * reduction touched it last.
 *
 * The suggestion follows from the tensor's name and the layout alone,
 * never from which negative control ran, so that it stays honest for a
 * real bug. The reductions of a step, in the order they touch a tensor:
 *   forward   tp: the vocab-parallel embedding's all-reduce; the
 *                 row-parallel outputs' all-reduce (reduce-scatter under
 *                 sequence parallelism)
 *             cp: the ring's merge of K/V blocks (p2p), Ulysses' all-to-all
 *             tp: the vocab-parallel cross-entropy (max, sum of exps,
 *                 target logit)
 *             dp: the loss's all-reduce over 'dp-cp'
 *   backward  tp: the LM head's and the column-parallel inputs' gradients
 *             cp: the dK/dV open sums sent back to their owners (ring)
 *             tp: sequence parallelism's LayerNorm gradients
 *             pp: the tied word embedding's embedding-group all-reduce
 *             dp: the buckets' reduce-scatter over 'dp-cp' (ZeRO-k)
 *   update    optimizer: AdamW on the owner's shard, ZeRO's all-gather
 * A tensor that no reduction writes (a LayerNorm output, a GeLU) names
 * the compute that made it: every reduction upstream matched, or the
 * checker would have stopped there. Dropout masks are drawn, not reduced:
 * they name the mode that decides where (and for which microbatch) a
 * draw happens.
 */
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "model/gpt.h"
#include "placement.h"
#include "parity/cp.h"

static int axis(int n) { return n > 1 ? n : 1; }

/* Appends ", " and the formatted text (the first without the comma). */
static void add(char *buf, size_t cap, const char *fmt, ...) {
    size_t at = strlen(buf);
    if (at && at + 2 < cap) memcpy(buf + at, ", ", 3), at += 2;
    va_list ap;
    va_start(ap, fmt);
    if (at < cap) vsnprintf(buf + at, cap - at, fmt, ap);
    va_end(ap);
}

/* The device's rank in its gradient group ('dp-cp'), or -1. */
static int grad_group_rank(const pconfig_t *pc, int device) {
    rank_layout_t L;
    int ranks[PARITY_MAX_DEVICES];
    const int n = report_grid_layout(pc, &L) ? -1 : layout_group_ranks(&L, device, "dp-cp", ranks);
    for (int i = 0; i < n; i++)
        if (ranks[i] == device) return i;
    return -1;
}

/* Sub-axes of a batch element: the virtual-pipeline chunk of its unit,
 * the context-parallel chunk (or Ulysses head) of its position, the
 * sequence-parallel slice. */
static void batch_sub(const engine_placement_t *pl, const engine_batch_at_t *b, char *sub, size_t cap) {
    const pconfig_t *pc = &pl->pc;
    const int cp = axis(pc->cp), tp = axis(pc->tp), T = pl->cfg.seq_length;
    if (pl->pp.v > 1) add(sub, cap, "vpp chunk %d of %d", engine_unit_chunk(&pl->pp, b->unit), pl->pp.v);
    if (cp > 1 && b->head >= 0) add(sub, cap, "Ulysses head %d of cp rank %d", b->head, b->cp_rank);
    int local = b->pos; /* the position's place among those its cp rank holds */
    if (cp > 1 && b->pos >= 0) {
        const cp_runs_t r = cp_runs(cp, b->cp_rank, T, pc->cp_comm ? CP_ULYSSES : CP_RING);
        for (int k = 0, at = 0; k < r.n; at += r.len[k++])
            if (r.len[k] > 0 && b->pos >= r.t0[k] && b->pos < r.t0[k] + r.len[k]) {
                local = at + b->pos - r.t0[k];
                add(sub, cap, "cp chunk %d of %d (positions %d-%d)", r.t0[k] / r.len[k],
                    T / r.len[k], r.t0[k], r.t0[k] + r.len[k] - 1);
            }
    }
    const int per_slice = T / cp / tp;
    if (tp > 1 && pc->sequence_parallel && b->pos >= 0 && per_slice > 0)
        add(sub, cap, "sequence-parallel slice %d of %d", local / per_slice, tp);
}

/* The last reduction of a batch tensor ("what": its name after the step). */
static void batch_touched(const engine_placement_t *pl, const char *what, const engine_batch_at_t *b,
                          char *buf, size_t cap) {
    const pconfig_t *pc = &pl->pc;
    const int tp = axis(pc->tp), cp = axis(pc->cp), sp = pc->sequence_parallel;
    char unit[32];
    model_unit_name(&pl->cfg, b->unit, unit, sizeof unit);
    /* a checkpoint: its name within its unit and what writes it last */
    const char *rest = strchr(what, '.') ? strchr(what, '.') + 1 : what;
    ckpt_writer_t w = CKPT_COMPUTE;
    gpt_checkpoint_writer(what, &rest, &w);
    if (!strcmp(what, "input_ids") || !strcmp(what, "labels")) {
        snprintf(buf, cap, "data: the loader's batch (data-parallel rank %d's sequences, "
                 "microbatch %d); no collective touches it", b->dp_rank, b->micro);
    } else if (!strncmp(what, "mask.", 5)) {
        if (pl->pp.pp > 1)
            snprintf(buf, cap, "pp: stage %d's dropout draw for microbatch %d (no reduction: a mask "
                     "is keyed by step, site and the sequence's place in the batch, whatever the "
                     "schedule) - check the pipeline's microbatch bookkeeping", b->stage, b->micro);
        else if (cp > 1)
            snprintf(buf, cap, "cp: the dropout draw of context-parallel rank %d's positions (no "
                     "reduction: keyed by the global position) - check the position mapping",
                     b->cp_rank);
        else if (tp > 1)
            snprintf(buf, cap, "tp: the dropout draw of a tensor-parallel rank's heads or "
                     "sequence-parallel slice (no reduction: keyed by the global head and "
                     "position) - check the tensor-parallel index mapping");
        else
            snprintf(buf, cap, "dp: the dropout draw of data-parallel rank %d's microbatch %d (no "
                     "reduction: keyed by the sequence's place in the global batch)",
                     b->dp_rank, b->micro);
    } else if (!strncmp(what, "act.", 4)) {
        const int row = tp > 1 && (w == CKPT_TP_ROW || (pc->tp_row_linears && w == CKPT_TP_ROW_LINEARS));
        if (row)
            snprintf(buf, cap, "tp: the row-parallel %s completing the partial sums of %s's %s "
                     "over the tensor-parallel group - check the tensor-parallel reduction",
                     sp ? "reduce-scatter (sequence parallel)" : "all-reduce", unit, rest);
        else if (cp > 1 && w == CKPT_CP_ATTENTION)
            snprintf(buf, cap, "%s", pc->cp_comm
                     ? "cp: the Ulysses all-to-all (heads for positions) around the core attention "
                       "- check the context-parallel exchange"
                     : "cp: the ring attention merge (p2p) of the K/V blocks' partial softmax "
                       "sums - check the context-parallel exchange and merge");
        else if (tp > 1 && w == CKPT_TP_VOCAB_EMBEDDING)
            snprintf(buf, cap, "tp: the vocab-parallel embedding's %s of the rows each rank holds "
                     "- check the tensor-parallel reduction", sp ? "reduce-scatter" : "all-reduce");
        else
            snprintf(buf, cap, "compute: %s's %s on its device (no collective writes it, and every "
                     "reduction before it matched the golden run)", unit, rest);
    } else if (w == CKPT_TP_VOCAB_HEAD) {
        snprintf(buf, cap, "%s", tp > 1
                 ? "tp: the vocab-parallel LM head and its softmax reductions (max, sum of exps, "
                   "target logit over the tensor-parallel group) - check the vocab-parallel "
                   "cross-entropy and padding"
                 : "compute: the LM head (no collective writes the logits)");
    } else if (!strncmp(what, "grad_input.", 11)) {
        if (tp > 1 && !model_unit_gives_stream(&pl->cfg, b->unit))
            snprintf(buf, cap, "tp: the %s of the LM head's input gradient (vocab-parallel) over "
                     "the tensor-parallel group", sp ? "reduce-scatter" : "all-reduce");
        else if (tp > 1)
            snprintf(buf, cap, "tp: the %s of %s's input gradients over the tensor-parallel group "
                     "- check the tensor-parallel reduction",
                     pc->tp_row_linears ? "all-gather (every linear row-parallel)"
                     : sp ? "reduce-scatter (sequence parallel)" : "all-reduce", unit);
        else if (cp > 1)
            snprintf(buf, cap, "%s", pc->cp_comm
                     ? "cp: the Ulysses all-to-all of the attention gradients"
                     : "cp: the ring's dK/dV open sums sent back to their owners (p2p)");
        else
            snprintf(buf, cap, "compute: the backward of %s (no collective writes it)", unit);
    }
}

/* Sub-axes and the last reduction of a parameter-shaped element. */
static void param_mesh(const engine_placement_t *pl, const char *pname, const char *kind,
                       const engine_param_at_t *a, int device, char *sub, char *micro, char *buf,
                       size_t cap) {
    const pconfig_t *pc = &pl->pc;
    const int tp = axis(pc->tp), N = a->N, z = a->z, m = pc->accum_degree;
    char unit[32];
    model_unit_name(&pl->cfg, a->unit, unit, sizeof unit);
    if (pl->pp.v > 1) add(sub, cap, "vpp chunk %d of %d", engine_unit_chunk(&pl->pp, a->unit), pl->pp.v);
    if (N > 1) add(sub, cap, "gradient-group rank %d of %d, ZeRO-%d", grad_group_rank(pc, device), N, z);
    if (!strcmp(kind, "grad")) {
        snprintf(micro, cap, "all %d microbatch%s of the step (summed exactly, rounded once)", m,
                 m == 1 ? "" : "es");
        char before[256] = "";
        if (a->tied)
            snprintf(before, sizeof before, "pp: the embedding group's all-reduce of the tied word "
                     "embedding gradient (the first and the last stage's open sums)");
        else if (tp > 1 && pc->sequence_parallel && strstr(pname, "layernorm"))
            snprintf(before, sizeof before, "tp: the all-reduce of the sequence-parallel "
                     "LayerNorm gradient's partial sums over the tensor-parallel group");
        if (N > 1)
            snprintf(buf, cap, "dp: the exact reduce-scatter of gradient bucket %d over group "
                     "'dp-cp' (%d ranks, ZeRO-%d) - check the data-parallel gradient reduction%s%s",
                     a->b, N, z, before[0] ? "; before it, " : "", before);
        else if (before[0])
            snprintf(buf, cap, "%s - check that reduction", before);
        else
            snprintf(buf, cap, "compute: the backward of %s, accumulated exactly over the step's "
                     "microbatches (no collective reduces this gradient in this layout)", unit);
        return;
    }
    snprintf(micro, cap, "none: the update, after the step's %d microbatch%s", m,
             m == 1 ? "" : "es");
    const char *what = !strcmp(kind, "param") ? "the parameter" : !strcmp(kind, "exp_avg")
                       ? "AdamW's m" : "AdamW's v";
    if (N == 1)
        snprintf(buf, cap, "optimizer: AdamW updates %s on the device holding the block (no "
                 "data-parallel replicas)", what);
    else if (z == 0)
        snprintf(buf, cap, "optimizer: AdamW updates %s on every data-parallel replica (DDP) from "
                 "the same gradients; the replicas must stay identical - check the update",
                 what);
    else if (!strcmp(kind, "param") && z < 3)
        snprintf(buf, cap, "optimizer (AdamW on the owner shard, then the ZeRO-%d all-gather over "
                 "'dp-cp') - check the update and the gather", z);
    else
        snprintf(buf, cap, "optimizer: AdamW updates %s on the owner's ZeRO-%d shard (bucket %d, "
                 "piece %d)", what, z, a->b, a->k);
}

/* "tp+dp": the axes with more than one rank, or "" */
static void axes_used(const pconfig_t *pc, char *buf, size_t cap) {
    const char *names[] = {"tp", "cp", "dp", "pp"};
    const int sizes[] = {axis(pc->tp), axis(pc->cp), pc->dp, axis(pc->pp)};
    buf[0] = 0;
    for (int i = 0; i < 4; i++)
        if (sizes[i] > 1)
            snprintf(buf + strlen(buf), cap - strlen(buf), "%s%s", buf[0] ? "+" : "", names[i]);
}

void engine_describe_mesh(const engine_placement_t *pl, const st_tensor_t *t, uint64_t flat, int device,
                          char *dev, char *micro, char *touched, size_t cap) {
    const pconfig_t *pc = &pl->pc;
    const int m = pc->accum_degree, N = pconfig_grad_ranks(pc), tp = axis(pc->tp);
    char sub[256] = "";
    micro[0] = touched[0] = 0;
    const char *what = strchr(t->name, '.');
    what = what ? what + 1 : t->name;
    engine_param_at_t a;
    if (!strncmp(t->name, "init.", 5)) {
        snprintf(micro, cap, "none: the initial parameters");
        snprintf(touched, cap, "init: params_init on the host, copied to every device (no "
                 "collective)");
    } else if (engine_is_batch(t, what)) {
        engine_batch_at_t b;
        engine_batch_at(pl, t, flat, &b);
        if (device < 0) device = b.device;
        batch_sub(pl, &b, sub, sizeof sub);
        snprintf(micro, cap, "%d of %d (%d sequence%s; sequence %d of the batch, data-parallel "
                 "rank %d's)", b.micro, b.nmicro, b.msize, b.msize == 1 ? "" : "s", b.seq,
                 b.dp_rank);
        batch_touched(pl, what, &b, touched, cap);
    } else {
        static const char *const kinds[] = {"grad", "param", "exp_avg_sq", "exp_avg"};
        int k = 0;
        size_t len = 0;
        for (; k < 4; k++) {
            len = strlen(kinds[k]);
            if (!strncmp(what, kinds[k], len) && what[len] == '.') break;
        }
        if (k < 4 && engine_param_at(pl, what + len + 1, flat, &a) == 0) {
            if (device < 0) device = a.owner;
            param_mesh(pl, what + len + 1, kinds[k], &a, device, sub, micro, touched, cap);
        } else if (!strcmp(what, "loss")) {
            const char *ce = "tp: the vocab-parallel softmax reductions (max, sum of exps, target "
                             "logit over the tensor-parallel group) - check the vocab-parallel "
                             "cross-entropy and padding";
            snprintf(micro, cap, "all %d microbatch%s of the step (summed exactly)", m,
                     m == 1 ? "" : "es");
            if (N > 1)
                snprintf(touched, cap, "dp: the exact all-reduce of the loss's open sums over group "
                         "'dp-cp' (%d ranks)%s%s", N, tp > 1 ? "; before it, " : "",
                         tp > 1 ? ce : "");
            else if (tp > 1)
                snprintf(touched, cap, "%s", ce);
            else
                snprintf(touched, cap, "compute: the head's cross-entropy, summed exactly over "
                         "the step's microbatches%s", pl->pp.pp > 1 ? " on the last stage" : "");
        } else if (!strcmp(what, "grad_norm")) {
            char axes[32];
            axes_used(pc, axes, sizeof axes);
            snprintf(micro, cap, "none: the step's gradients (all %d microbatch%s, summed)", m,
                     m == 1 ? "" : "es");
            if (axes[0])
                snprintf(touched, cap, "%s: the exact all-reduce of the squared gradients' open "
                         "sums over every device - check the norm's reduction", axes);
            else
                snprintf(touched, cap, "compute: the norm of the gradients (no collective)");
        } else {
            snprintf(micro, cap, "none: one value per step");
            snprintf(touched, cap, "%s", !strcmp(what, "adam_t")
                     ? "optimizer: AdamW's step count, kept on every device"
                     : "schedule: lr_schedule of the step, on every device (no collective)");
        }
    }
    engine_device_name_sub(pc, device < 0 ? 0 : device, sub, dev, cap);
}
