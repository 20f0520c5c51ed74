/* extents.c - what one device of a layout holds: its extents (heads,
 * FFN, vocabulary and feature blocks, positions; gpt_local_dims; what
 * the shard's 2-D and 3-D coordinates add, gpt_local_place) and the
 * bytes a replica of it takes (gpt_mem_bytes*, from the same tables the
 * allocation in replica.c uses, gpt_mem_of).
 *
 * The layout arrives as model.h's gpt_layout_opts_t; gpt_local_t is what
 * the units and styles read. The parameter table (params.c) checks the
 * cuts of heads and tiles; the checks here are those of the stream:
 * sequence and context parallelism's positions, the 2-D modes' columns.
 */
#include "model/gpt.h"

#include <string.h>

#include "parity/pconfig.h"
#include "model/styles/tp2d.h"

/* The heads the attention core runs: the heads held, or Ulysses' cp-th
 * group of them (whole heads: cp_check). */
static void cp_attention_heads(gpt_local_t *lc) {
    lc->att_heads = lc->ulysses ? lc->heads / lc->cp : lc->heads;
    lc->att_head0 = lc->head0 + (lc->ulysses ? lc->cp_rank * lc->att_heads : 0);
}

/* Context parallelism's part of gpt_local_dims: the positions held. */
static int cp_local_dims(const model_config_t *c, int tp, int cp_rank, gpt_layout_opts_t lo,
                         gpt_local_t *out, perr_t *err) {
    const int cp = lo.cp > 1 ? lo.cp : 1;
    const cp_comm_t comm = lo.cp_comm;
    if (cp_rank < 0 || cp_rank >= cp) return perr_set(err, "context-parallel rank %d of %d", cp_rank, cp);
    /* an encoder-decoder's one stream (source rows, then target rows) is
     * cut as the GPT's sequence is; each attention block's key spans
     * (attention_span) are honoured tile by tile (ENCDEC.md, "Context
     * parallelism") */
    /* every linear row-parallel keeps every head on every tp rank */
    if (cp_check(cp, comm, c->seq_length, c->tile_tokens, c->heads, out->row_linears ? 1 : tp, err))
        return -1;
    out->cp = cp, out->cp_rank = cp_rank, out->ulysses = cp > 1 && comm == CP_ULYSSES;
    out->ep = lo.ep > 1 ? lo.ep : 1;
    out->runs = cp_runs(cp, cp_rank, c->seq_length, comm);
    out->seq_held = c->seq_length / cp;
    cp_attention_heads(out);
    /* sequence parallelism splits the positions this rank holds */
    if (out->seq_parts > 1 && (out->seq_held / c->tile_tokens) % out->seq_parts)
        return perr_set(err, "sequence-parallel: tensor-model-parallel-size %d must divide the %d "
                             "token tiles a context-parallel rank holds of a sequence (seq_length %d "
                             "/ cp %d / tile_tokens %d): a rank holds whole canonical tiles (I1)",
                        out->seq_parts, out->seq_held / c->tile_tokens, c->seq_length, cp,
                        c->tile_tokens);
    return 0;
}

/* 2-D tensor parallelism's column blocks (tp2d.c): every column's widths
 * of the hidden features (whole tiles), the heads, the FFN and the
 * vocabulary as 1-D tensor parallelism over the tp columns cuts them. */
static int tp2d_local_dims(const model_config_t *c, int q, int col, gpt_layout_opts_t lo,
                           gpt_local_t *out, perr_t *err) {
    if (q > GPT_TP2D_MAX_Q)
        return perr_set(err, "tensor-model-parallel-size: 2-D rows of %d, at most %d", q,
                        GPT_TP2D_MAX_Q);
    if (c->moe_experts > 0)
        return perr_set(err, "tensor-parallel-mode: 2-D tensor parallelism runs the GPT's dense "
                             "layers (this model is %s%s)",
                        model_arch_name(c->arch), c->moe_experts > 0 ? " with experts" : "");
    if (c->arch == MODEL_LLAVA) /* what is left: styles/MODES.md, 2-D */
        return perr_set(err, "tensor-parallel-mode: 2-D tensor parallelism of llava's patch "
                             "embedding is not built: its weight [hidden, patch_dim] needs a 2-D "
                             "placement (the column's features, pieces over the rows) and its "
                             "gather and gradient reduce-scatter over the column (t5's "
                             "encoder-decoder is built)");
    const int tf = c->tile_features;
    if (tf < 1 || c->hidden % tf || c->hidden / tf < q)
        return perr_set(err, "tensor-parallel-mode: the hidden size's %d tiles of %d cannot give "
                             "each of %d columns a whole tile (I1)",
                        tf > 0 ? c->hidden / tf : 0, tf, q);
    out->t2q = q;
    out->t2blocks = lo.tp_mode == PC_TP_3D ? q * q : q;
    gpt_layout_opts_t one_d = lo; /* each column as 1-D cuts it */
    one_d.tp_mode = 0;
    for (int k = 0; k < q; k++) {
        gpt_local_t lk;
        perr_t why;
        if (gpt_local_dims(c, q, k, 0, one_d, &lk, &why))
            return perr_set(err, "%s", why.msg);
        int64_t f0, nf;
        placement_split(c->hidden / tf, q, k, &f0, &nf);
        const int w[4] = {(int)nf * tf, lk.attn, lk.ffn, lk.vocab};
        const int o[4] = {(int)f0 * tf, lk.head0 * (c->hidden / c->heads), lk.ffn0, lk.vocab0};
        for (int t = 0; t < 4; t++) out->t2w[t][k] = w[t], out->t2o[t][k] = o[t];
    }
    out->hid = out->t2w[TP2D_HIDDEN][col], out->hid0 = out->t2o[TP2D_HIDDEN][col];
    return 0;
}

int gpt_local_dims(const model_config_t *c, int tp, int tp_rank, int cp_rank, gpt_layout_opts_t lo,
                   gpt_local_t *out, perr_t *err) {
    const int sp = lo.sp != 0, row = lo.row_linears && tp > 1;
    memset(out, 0, sizeof *out);
    if (row && sp)
        return perr_set(err, "sequence-parallel: not with every linear row-parallel (sharding_dim "
                             "0): it shards the regions Megatron's pairing replicates");
    if (tp < 1 || tp_rank < 0 || tp_rank >= tp)
        return perr_set(err, "tensor-parallel rank %d of %d", tp_rank, tp);
    if (sp && (c->seq_length / c->tile_tokens) % tp)
        return perr_set(err, "sequence-parallel: tensor-model-parallel-size %d must divide the %d "
                             "token tiles of a sequence (seq_length %d / tile_tokens %d): a rank "
                             "holds whole canonical tiles (I1)",
                        tp, c->seq_length / c->tile_tokens, c->seq_length, c->tile_tokens);
    out->seq_parts = sp ? tp : 1;
    out->seq_part = sp ? tp_rank : 0;
    /* the cuts (heads, tiles) are checked where the table is built
     * (param_table_build_at), which every caller does next */
    /* heads, FFN and vocabulary tiles: whole blocks, of unequal counts
     * where tp does not divide them (the placements' rule, placement_split;
     * heads in blocks of param_head_unit) */
    const int hu = c->heads % tp ? param_head_unit(c) : 1;
    out->heads = c->heads / tp;
    out->head0 = tp_rank * out->heads;
    if (hu > 0) {
        int64_t h0, nh;
        placement_split(c->heads / hu, tp, tp_rank, &h0, &nh);
        out->heads = (int)nh * hu, out->head0 = (int)h0 * hu;
    }
    out->attn = out->heads * (c->hidden / c->heads);
    int64_t f0 = 0, nf = 0, vt0 = 0, nvt = 0;
    if (c->tile_ffn > 0) placement_split(c->ffn / c->tile_ffn, tp, tp_rank, &f0, &nf);
    out->ffn = (int)nf * c->tile_ffn;
    out->ffn0 = (int)f0 * c->tile_ffn;
    if (c->tile_features > 0) placement_split(c->vocab / c->tile_features, tp, tp_rank, &vt0, &nvt);
    out->vocab = (int)nvt * c->tile_features;
    out->vocab0 = (int)vt0 * c->tile_features;
    /* experts: split as the dense MLP is, or whole */
    const int etp = lo.expert_tp > 1 && tp > 1 && !row ? lo.expert_tp : 1;
    out->expert_ffn = etp > 1 ? out->ffn : c->ffn;
    out->expert_ffn0 = etp > 1 ? out->ffn0 : 0;
    if (etp > 1 && etp < tp && c->tile_ffn > 0) { /* etp rank tp_rank mod etp's piece */
        placement_split(c->ffn / c->tile_ffn, etp, tp_rank % etp, &f0, &nf);
        out->expert_ffn = (int)nf * c->tile_ffn, out->expert_ffn0 = (int)f0 * c->tile_ffn;
    }
    /* folded onto tp or cp: that group of ranks holding the same rows */
    out->expert_fold = lo.expert_fold == GPT_EXPERT_FOLD_TP && tp > 1   ? GPT_EXPERT_FOLD_TP
                       : lo.expert_fold == GPT_EXPERT_FOLD_CP && lo.cp > 1 ? GPT_EXPERT_FOLD_CP
                                                                           : 0;
    out->hid = c->hidden, out->hid0 = 0;
    if (c->recompute == MODEL_RECOMPUTE_FULL && c->recompute_layers > c->layers)
        return perr_set(err, "recompute-num-layers: %d exceeds the model's %d layers",
                        c->recompute_layers, c->layers);
    out->recompute = c->recompute;
    if (lo.tp_mode && tp > 1 && tp2d_local_dims(c, tp, tp_rank, lo, out, err))
        return -1;
    if (row) { /* attention and GeLU whole; each linear contracts its slice of features */
        out->row_linears = 1;
        out->heads = c->heads, out->head0 = 0, out->attn = c->hidden;
        out->ffn = c->ffn, out->ffn0 = 0;
        out->cin = c->hidden / tp, out->cin0 = tp_rank * out->cin;
        out->fin = c->ffn / tp, out->fin0 = tp_rank * out->fin;
    }
    return cp_local_dims(c, tp, cp_rank, lo, out, err);
}

void gpt_local_place(const model_config_t *c, const gpt_shard_t *shard, gpt_local_t *lc) {
    if (!lc->t2q) return;
    /* the word embedding's rows: its row's vocabulary block */
    const int b = shard->tp_row;
    lc->emb_vocab = lc->t2w[TP2D_VOCAB][b];
    lc->emb_vocab0 = lc->t2o[TP2D_VOCAB][b];
    if (shard->tp_mode != PC_TP_3D) return;
    /* 3-D: piece tp_dep of it; the inner layout's blocks are tp2's */
    int64_t f, nv;
    placement_split(lc->emb_vocab, lc->t2q, shard->tp_dep, &f, &nv);
    lc->emb_vocab0 += (int)f, lc->emb_vocab = (int)nv;
    const int D = c->hidden / c->heads;
    lc->attn = lc->t2w[TP2D_HEADS][b], lc->heads = lc->attn / D;
    lc->head0 = lc->t2o[TP2D_HEADS][b] / D;
    cp_attention_heads(lc);
    lc->ffn = lc->t2w[TP2D_FFN][b], lc->ffn0 = lc->t2o[TP2D_FFN][b];
    lc->vocab = lc->t2w[TP2D_VOCAB][b], lc->vocab0 = lc->t2o[TP2D_VOCAB][b];
    /* the inner layout holds block tp_dep*q + tp_rank, the stream
     * tp_dep*q + tp_row (unit_inner_shift) */
    lc->inner_shift = shard->tp_rank - shard->tp_row;
}

int gpt_mem_bytes(const model_config_t *cfg, unsigned omit, gpt_mem_t *out, perr_t *err) {
    const gpt_layout_opts_t one = {0};
    return gpt_mem_bytes_tp(cfg, 1, one, omit, out, err);
}

int gpt_mem_bytes_tp(const model_config_t *cfg, int tp, gpt_layout_opts_t lo, unsigned omit,
                     gpt_mem_t *out, perr_t *err) {
    const gpt_units_t all = {0, {0}, {0}};
    return gpt_mem_bytes_mp(cfg, tp, lo, &all, 0, omit, out, err);
}

int gpt_mem_bytes_mp(const model_config_t *cfg, int tp, gpt_layout_opts_t lo, const gpt_units_t *units,
                     int n_slots, unsigned omit, gpt_mem_t *out, perr_t *err) {
    memset(out, 0, sizeof *out);
    param_table_t t;
    gpt_local_t lc;
    const param_grid_t g = param_grid_tp(tp, 0, lo); /* rank 0 of tp, and of ep */
    if (model_config_validate_replica(cfg, err) || gpt_local_dims(cfg, tp, 0, 0, lo, &lc, err) ||
        param_table_build_at(&t, cfg, g.sizes, g.coord, units, lo, err))
        return -1;
    gpt_mem_of(cfg, &t, omit, &lc, tp, units, units->n ? n_slots : 0, out);
    param_table_free(&t);
    return 0;
}

gpt_layout_opts_t gpt_shard_layout(const gpt_shard_t *shard) {
    return (gpt_layout_opts_t){
        .sp = shard->sp, .row_linears = shard->row_linears, .tp_mode = shard->tp_mode,
        .expert_tp = shard->expert_tp, .expert_fold = shard->expert_fold,
        .expert_fold_n = shard->expert_fold_n,
        .cp = shard->cp > 1 ? shard->cp : 1,
        .cp_comm = shard->cp > 1 && shard->cp_comm == CP_ULYSSES ? CP_ULYSSES : CP_RING,
        .ep = shard->ep > 1 ? shard->ep : 1};
}

int gpt_shard_check_groups(const gpt_shard_t *shard, perr_t *err) {
    if (shard->tp > 1 && !shard->tp_group)
        return perr_set(err, "tensor parallelism over %d ranks needs a group", shard->tp);
    if (shard->cp > 1 && !shard->cp_group)
        return perr_set(err, "context parallelism over %d ranks needs a group", shard->cp);
    if (shard->tp_mode != PC_TP_1D && shard->tp > 1 && !shard->tp_col_group)
        return perr_set(err, "2-D tensor parallelism over %d x %d ranks needs a column group",
                        shard->tp, shard->tp);
    return 0;
}
