/* shard.h - which piece of the model a replica holds (private; gpt.h
 * includes it): gpt_shard_t, its place in the layout and its groups, and
 * gpt_local_t, the extents computed from it (state/extents.c) that the
 * units and styles read. */
#ifndef PARITY_MODEL_SHARD_H
#define PARITY_MODEL_SHARD_H

#include "parity/model.h"

/* ---- tensor parallelism -------------------------------------------------
 * Which piece of the model a replica holds (Megatron's 1-D tensor
 * parallelism) and the group it completes its sums with. The golden run
 * is gpt_shard_none(): the whole model, no group. */
typedef struct {
    int tp, tp_rank;
    int sp;                 /* sequence parallel: LayerNorm, dropout and residual regions
                               hold positions tp_rank*T/tp .. of every sequence */
    group_t *tp_group;      /* NULL when tp == 1 */
    unsigned broken;        /* GPT_BROKEN_*: deliberately broken variants (checker controls) */
    gpt_units_t units;      /* pipeline parallelism: the units held (n = 0: all) */
    int row_linears;        /* every linear row-parallel (gpt_layout_opts_t.row_linears) */
    int cp, cp_rank;        /* context parallelism: the positions held (cp.h) */
    cp_comm_t cp_comm;      /* ring (p2p) or Ulysses (all-to-all) */
    group_t *cp_group;      /* NULL when cp == 1 */
    int ep, ep_rank;        /* expert parallelism over dp (the grid's ep axis): with no
                               fold this rank runs experts [ep_rank*E/ep, (ep_rank+1)*E/ep)
                               for its ep group's tokens (experts.h's experts_grid) */
    group_t *ep_group;      /* NULL when ep == 1 */
    int expert_tp;          /* etp: experts' FFN split over tp_group, or over etp_group (the tp
                               ranks of tp_rank / etp) when etp < tp (gpt_layout_opts_t.expert_tp) */
    group_t *etp_group;     /* NULL unless 1 < etp < tp */
    int expert_fold;        /* experts split over tp_group or cp_group (gpt_layout_opts_t.expert_fold) */
    int expert_fold_n;      /* the fold's ranks (gpt_layout_opts_t.expert_fold_n) */
    group_t *fold_group;    /* a fold over a run of expert_fold_n < tp tp ranks: theirs */
    /* Colossal-AI's 2-D and 2.5-D tensor parallelism (tp2d.c; pconfig.h's
     * tp_mode): tp x tp devices per depth layer, tp_rank the column and
     * tp_group the row (ranks with the same sequences, every column);
     * tp_row the row and tp_col_group the column; the sequences' block is
     * tp_dep * tp + tp_row of tp * tp_depth. tp_mode 0: Megatron's 1-D. */
    int tp_mode, tp_row, tp_depth, tp_dep;
    group_t *tp_col_group;
    /* 3-D (tp3d.c): tp_row and tp_dep are the tp2 and tp3 coordinates,
     * tp_dep_group the tp3 axis's group, tp_vec_group the stream's
     * sequence blocks (tp2-tp3) and the inner layout's (tp-tp3) */
    group_t *tp_dep_group, *tp_vec_group[2];
    int on_grid;            /* 1: grid_sizes/grid_coord are the device's place on the run's
                               grid, and its parameter table and init evaluate every
                               placement there (param_table_build_at); 0: a grid of tp alone */
    int grid_sizes[GRID_NAXES], grid_coord[GRID_NAXES];
} gpt_shard_t;
static inline gpt_shard_t gpt_shard_none(void) {
    return (gpt_shard_t){.tp = 1, .cp = 1};
}

/* 2-D tensor parallelism: at most this many rows and columns; the
 * block tables' kinds (gpt_local_t.t2w). */
enum { GPT_TP2D_MAX_Q = 32 };
enum { TP2D_HIDDEN, TP2D_HEADS, TP2D_FFN, TP2D_VOCAB };
/* A replica's extents of the tensor-parallel axes. */
typedef struct {
    int heads, head0;       /* attention heads held, and the first one's global index */
    int attn;               /* heads * D: core attention width held */
    int ffn, ffn0;          /* FFN columns held, and the first one */
    int vocab, vocab0;      /* vocabulary rows held, and the first one */
    int seq_parts, seq_part; /* sequence parallelism: positions seq_part*T/seq_parts ..
                               of every sequence in the sharded regions (1, 0: all) */
    int row_linears;        /* every linear row-parallel: heads, attn, ffn are whole, and */
    int cin, cin0;          /* the hidden features this rank contracts (qkv, dense, fc1) */
    int fin, fin0;          /* the FFN features it contracts (fc2); 0 without row_linears */
    /* context parallelism: every token tensor of a slot holds seq_held
     * positions of each sequence, the runs `runs` in order (cp.h; T and
     * [0, T) without it); Ulysses attends heads/cp of the heads held over
     * every position, from head att_head0 */
    int cp, cp_rank, ulysses;
    int ep;                 /* expert-parallel degree (its rank: gpt_shard_t.ep_rank) */
    int expert_ffn, expert_ffn0; /* the experts' FFN columns held: the dense MLP's under
                                    expert tensor parallelism (model.h's expert_tp), else all */
    int expert_fold;        /* experts split over the tp or cp ranks (gpt_layout_opts_t.expert_fold) */
    int seq_held;
    cp_runs_t runs;
    int att_heads, att_head0;
    /* the residual stream's features held: all (hid = hidden), or 2-D's
     * column block [hid0, hid0 + hid) */
    int hid, hid0;
    /* 2-D (tp2d.c): q = tp, each column k's block widths of the hidden
     * features, the attention features (whole heads), the FFN and the
     * vocabulary (t2w[TP2D_*][k], offsets t2o), and the word embedding's
     * rows this rank holds (its row's vocabulary block) */
    int recompute;          /* the replica config's MODEL_RECOMPUTE_* */
    int t2q;
    int t2blocks;           /* the blocks a microbatch's sequences are cut into that a slot is
                               sized for: 2-D q (2.5-D q too: an upper bound), 3-D q^2; else 1 */
    int t2w[4][GPT_TP2D_MAX_Q], t2o[4][GPT_TP2D_MAX_Q];
    int emb_vocab, emb_vocab0;
    int inner_shift;        /* 3-D: the inner layout's sequence block minus the stream's, in
                               blocks (tp_rank - tp_row; gpt_local_place); else 0 */
} gpt_local_t;

#endif
