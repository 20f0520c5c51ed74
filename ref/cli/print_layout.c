/* print_layout.c - `--print-layout`: the resolved layout as one JSON
 * object, whatever front end described it (Megatron flags, a patterns
 * file, a Colossal-AI dict, NeMo options): the degrees and options
 * pconfig resolved, the rank list if there is one (the world rank at
 * each position of the order), the rank grid (which world rank holds
 * which tensor shard, pipeline stage and data-parallel rank), each
 * stage's units, slots and passes, and the memory estimate. Two
 * descriptions of one layout print the same bytes: the order is printed
 * without its size-1 axes, which place no device differently. */
#include "model/gpt.h"
#include "layout_cli.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "parity/grid.h"
#include "parity/mesh.h"
#include "parity/engine.h"
#include "parity/json.h"
#include "parity/memest.h"
#include "parity/pp.h"

static const char *dtype_name(pc_dtype_t d) {
    return d == PC_DTYPE_BF16 ? "bf16" : d == PC_DTYPE_FP16 ? "fp16" : "fp32";
}

/* The order string without the axes of size 1. */
static void effective_order(const pconfig_t *pc, char *buf, size_t cap) {
    const struct { const char *name; int size; } ax[] = {
        {"tp", pc->tp}, {"cp", pc->cp}, {"ep", pc->ep}, {"dp", pc->dp}, {"pp", pc->pp}};
    size_t used = 0;
    buf[0] = 0;
    for (const char *at = pc->order; *at && used < cap;) {
        for (int a = 0; a < 5; a++)
            if (!strncmp(at, ax[a].name, 2) && ax[a].size > 1)
                used += (size_t)snprintf(buf + used, cap - used, "%s%s", used ? "-" : "", ax[a].name);
        at += at[2] == '-' ? 3 : 2;
        if (at > pc->order + strlen(pc->order)) break;
    }
}

static void print_stages(const pp_plan_t *pp, FILE *f) {
    pp_op_t *ops = malloc((size_t)pp_max_ops(pp) * sizeof *ops);
    fprintf(f, "  \"stages\": [");
    for (int r = 0; r < pp->pp; r++) {
        fprintf(f, "%s\n    {\"stage\": %d, \"layers\": %d, \"units\": [", r ? "," : "", r,
                pp->stage_layers[r]);
        for (int c = 0; c < pp->v; c++)
            fprintf(f, "%s[%d, %d]", c ? ", " : "", pp->units[r].lo[c], pp->units[r].hi[c]);
        fprintf(f, "], \"slots\": %d, \"passes\": \"", pp_in_flight_formula(pp, r));
        const int n = ops ? pp_schedule(pp, r, ops) : 0;
        for (int i = 0; i < n; i++) {
            fprintf(f, "%s%c%d", i ? " " : "",
                    ops[i].fwd ? 'F' : ops[i].part == PP_PASS_W ? 'W' : 'B', ops[i].mb);
            if (pp->v > 1) fprintf(f, ".%d", ops[i].chunk);
        }
        fprintf(f, "\"}");
    }
    fprintf(f, "\n  ],\n");
    free(ops);
}

/* The expert grid of an MoE model: which experts each device runs (its
 * ep rank's: expert0 .. expert0 + experts - 1), and which FFN columns of
 * them it holds (ffn0 .. ffn0 + ffn - 1; expert tensor parallelism: the
 * tp rank's, as the dense MLP's). */
static int print_experts(const model_config_t *cfg, const pconfig_t *pc, const grid_t *G, FILE *f,
                         perr_t *err) {
    /* the expert rank f + nf q: fold rank f (tp or cp, pconfig_ep_folded)
     * fastest, then the ep axis's q (out of dp), Megatron's expert order */
    const int fold = pconfig_ep_folded(pc), ep = pc->ep > 1 ? pc->ep : 1;
    const grid_axis_t fold_axis = fold == GPT_EXPERT_FOLD_CP ? GRID_CP : GRID_TP;
    const int nf = pconfig_ep_fold_n(pc); /* the axis's ranks, or a run of tp ranks */
    const int E = cfg->moe_experts, El = E / ep;
    /* Megatron's edp = world / (etp ep pp): the ranks an expert's
     * gradient is reduced over (here dp / ep x cp, or dp / (ep / cp) when
     * folded onto cp; with etp 1 the tp ranks hold the same expert whole
     * and compute the same gradient) */
    const int cp_edp = fold == GPT_EXPERT_FOLD_CP ? 1 : G->size[GRID_CP];
    const int edp = G->size[GRID_DP] * cp_edp;
    fprintf(f, "  \"experts\": {\"experts\": %d, \"ep\": %d, \"etp\": %d, \"edp\": %d, "
               "\"experts_per_ep_rank\": %d, \"expert_grads_reduced_over\": \"%s\", "
               "\"ep_ranks\": \"%s\", \"devices\": [",
            E, ep, pc->etp, edp, El, cp_edp > 1 ? "dp-cp" : "dp",
            fold == GPT_EXPERT_FOLD_CP ? "the cp ranks, then data-parallel ranks (folded: the "
                                         "outputs all-gathered over cp)"
            : fold ? "the tp ranks, then data-parallel ranks (folded: the outputs all-gathered over tp)"
                   : "data-parallel ranks (the rows sent by all-to-all-v over ep)");
    for (int d = 0; d < G->world; d++) {
        const grid_device_t gd = grid_device(G, d);
        gpt_local_t lc;
        if (gpt_local_dims(cfg, pconfig_model_tp(pc, gd.coord[GRID_PP]), gd.coord[GRID_TP], gd.coord[GRID_CP], pconfig_tp_opts(pc),
                           &lc, err))
            return -1;
        const int q = (fold ? gd.coord[fold_axis] % nf : 0) + nf * gd.coord[GRID_EP];
        fprintf(f, "%s\n    {\"rank\": %d, \"expert0\": %d, \"experts\": %d, \"ffn0\": %d, \"ffn\": %d}",
                d ? "," : "", d, q * El, El, lc.expert_ffn0, lc.expert_ffn);
    }
    fprintf(f, "\n  ]},\n");
    return 0;
}

/* A device's coordinates (pp: its global stage) and mesh (0 encoder,
 * 1 decoder) on the layout's grid or, with an encoder mesh, its meshes. */
static void device_at(const grid_t *G, const mesh_grid_t *M, const pconfig_t *pc, int d,
                      int coord[GRID_NAXES], int *mesh) {
    if (M) {
        const mesh_device_t md = mesh_device(M, d);
        memcpy(coord, md.coord, sizeof md.coord);
        *mesh = md.mesh;
        if (md.mesh == 1) coord[GRID_PP] += pc->encoder_pp;
        return;
    }
    const grid_device_t gd = grid_device(G, d);
    memcpy(coord, gd.coord, sizeof gd.coord);
    *mesh = gd.coord[GRID_PP] >= pc->encoder_pp;
}

/* An encoder-decoder's meshes (encoder_pp > 0): each mesh's ranks, the
 * encoder->decoder pairs of the bridge, Megatron-core's device count and
 * the bridge's bytes a step (schedule.c: each decoder rank of the first
 * decoder stage receives the stream it holds and sends its gradient
 * back, every sequence of its replica). */
static void print_encdec(const model_config_t *cfg, const pconfig_t *pc, const grid_t *G,
                         const mesh_grid_t *M, int world, FILE *f) {
    const int epp = pc->encoder_pp, dpp = pc->pp - epp, etp = pc->encoder_tp, tp = pc->tp;
    const int dp = pc->dp, cp = pc->cp, enc = dp * etp * epp * cp;
    /* two meshes: ranks 0.. and enc..; one grid (etp = tp) or meshes
     * placed by a rank list: each one's ranks, which may interleave */
    fprintf(f, "  \"meshes\": [");
    for (int m = 0; m < 2; m++) {
        fprintf(f, "%s\n    {\"name\": \"%s\", ", m ? "," : "", m ? "decoder" : "encoder");
        if (M && !M->mapped) fprintf(f, "\"offset\": %d, \"ranks\": [%d, %d], ", m ? enc : 0, m ? enc : 0,
                       m ? world - 1 : enc - 1);
        else {
            fprintf(f, "\"ranks\": [");
            for (int d = 0, n = 0; d < world; d++) {
                int c[GRID_NAXES], dm;
                device_at(G, M, pc, d, c, &dm);
                if (dm == m) fprintf(f, "%s%d", n++ ? ", " : "", d);
            }
            fprintf(f, "], ");
        }
        fprintf(f, "\"tp\": %d, \"pp\": %d, \"dp\": %d, \"cp\": %d}", m ? tp : etp, m ? dpp : epp, dp, cp);
    }
    fprintf(f, "\n  ],\n");
    fprintf(f, "  \"device_count\": {\"formula\": \"dp*etp*epp*cp + dp*tp*pp*cp\", "
               "\"value\": \"%d*%d*%d*%d + %d*%d*%d*%d = %d\", \"world_size\": %d},\n",
            dp, etp, epp, cp, dp, tp, dpp, cp, enc + dp * tp * dpp * cp, world);
    fprintf(f, "  \"bridge\": [");
    int first = 1;
    for (int d = 0; d < world; d++) {
        int c[GRID_NAXES], m;
        device_at(G, M, pc, d, c, &m);
        if (c[GRID_PP] != epp - 1) continue;
        fprintf(f, "%s\n    {\"encoder\": %d, \"decoder\": [", first ? "" : ",", d);
        first = 0;
        for (int e = 0, n = 0; e < world; e++) { /* the decoder ranks it feeds */
            int o[GRID_NAXES], om;
            device_at(G, M, pc, e, o, &om);
            int same = o[GRID_PP] == epp && o[GRID_TP] / (tp / etp) == c[GRID_TP];
            for (int a = GRID_CP; a < GRID_PP; a++) same &= o[a] == c[a];
            if (same) fprintf(f, "%s%d", n++ ? ", " : "", e);
        }
        fprintf(f, "]}");
    }
    /* a decoder rank's rows of a sequence: all of them, or its SP block */
    const double rows = (double)cfg->seq_length / (pc->sequence_parallel ? tp : 1);
    const double bytes = 2.0 * tp * pc->global_batch * rows * cfg->hidden * 4; /* cp is 1 */
    fprintf(f, "\n  ],\n  \"bridge_bytes_per_step\": %.0f,\n", bytes);
}

/* Colossal-AI's tensor-parallel modes: tp's sub-axes by their meaning. */
static const char *const tp_axis_names[4][3] = {
    {"tp", "-", "-"}, {"column", "row", "-"}, {"column", "row", "depth"}, {"output", "input", "weight"}};

static void print_tp_mode(const pconfig_t *pc, const int sizes[GRID_NAXES], FILE *f) {
    const char *const *n = tp_axis_names[pc->tp_mode];
    fprintf(f, "  \"tp_mode\": {\"mode\": \"%s\", \"sub_axes\": [", pconfig_tp_mode_name(pc->tp_mode));
    for (int a = 0, k = 0; a < 3; a++)
        if (sizes[GRID_TP + a] > 1)
            fprintf(f, "%s{\"axis\": \"%s\", \"name\": \"%s\", \"size\": %d}", k++ ? ", " : "",
                    grid_axis_name((grid_axis_t)(GRID_TP + a)), n[a], sizes[GRID_TP + a]);
    fprintf(f, "], \"groups\": \"%s\"},\n",
            pc->tp_mode == PC_TP_3D
                ? "a linear's input, weight and output groups are along input, weight and output; "
                  "the second of a pair swaps input and output"
                : "a row group (the same sequences, every column) is along_column, a column group "
                  "along_row");
}

/* A device's sub-coordinates, and the world ranks of its group along each
 * ("along_column": the ranks that differ from it in the column only, a
 * 2-D row). */
static void print_tp_sub(const pconfig_t *pc, const grid_t *G, int d, FILE *f) {
    const grid_device_t gd = grid_device(G, d);
    const char *const *n = tp_axis_names[pc->tp_mode];
    fprintf(f, "\"tp_sub\": {");
    for (int a = 0, k = 0; a < 3; a++) {
        const group_t *g = gd.group[GRID_TP + a];
        if (G->size[GRID_TP + a] < 2) continue;
        fprintf(f, "%s\"%s\": %d, \"along_%s\": [", k++ ? ", " : "", n[a], gd.coord[GRID_TP + a], n[a]);
        for (int i = 0; i < group_size(g); i++) fprintf(f, "%s%d", i ? ", " : "", group_world_rank(g, i));
        fprintf(f, "]");
    }
    fprintf(f, "}, ");
}

int layout_print(const model_config_t *cfg, const pconfig_t *pc, const memest_t *mem, FILE *f,
                 perr_t *err) {
    pp_plan_t pp;
    grid_t G;
    static mesh_grid_t M; /* ~130 KiB: not on a stack */
    const int hetero = pconfig_hetero(pc);
    int sizes[GRID_NAXES];
    pconfig_grid_sizes(pc, sizes);
    model_config_t rc = *cfg;
    rc.micro_batch = pc->micro_batch, rc.global_batch = pc->global_batch;
    if (pp_plan_build(&pp, &rc, pc, err)) return -1;
    if (hetero ? engine_encdec_meshes(&M, pc, err)
               : grid_init_mapped(&G, pc->order, sizes, pc->rank_list, pc->n_rank_list, err))
        return -1;
    const int world = hetero ? M.world : G.world;
    char order[32];
    effective_order(pc, order, sizeof order);
    fprintf(f, "{\n  \"model\": ");
    json_write_string(f, cfg->name);
    fprintf(f, ",\n  \"layout\": {\"world_size\": %d, \"dp\": %d, \"tp\": %d, \"pp\": %d, \"cp\": %d, "
               "\"ep\": %d, \"order\": \"%s\", \"sequence_parallel\": %s, \"tp_linears\": \"%s\",\n",
            pc->world_size, pc->dp, pc->tp, pc->pp, pc->cp, pc->ep, order[0] ? order : "none",
            pc->sequence_parallel ? "true" : "false",
            pc->tp < 2 ? "none" : pc->tp_row_linears ? "row" : "column-then-row");
    if (pc->n_rank_list) { /* only then: a plain order prints as it did */
        fprintf(f, "    \"rank_list\": [");
        for (int c = 0; c < pc->n_rank_list; c++) fprintf(f, "%s%d", c ? ", " : "", pc->rank_list[c]);
        fprintf(f, "],\n");
    }
    if (pc->cp > 1) /* only then: the other dialects have no context parallelism to print */
        fprintf(f, "    \"cp_comm_type\": \"%s\", \"cp_positions\": \"%s\",\n", pc->cp_comm ? "a2a" : "p2p",
                pc->cp_comm ? "rank r: the r-th of cp contiguous pieces"
                            : "rank r: chunks r and 2cp-1-r of 2cp");
    fprintf(f, "    \"pipeline_schedule\": \"%s\", \"virtual_stages\": %d, \"layer_split\": [",
            pc->pp > 1 ? pp_schedule_name(pp.sched) : "none", pp.v);
    for (int r = 0; r < pp.pp; r++) fprintf(f, "%s%d", r ? ", " : "", pp.stage_layers[r]);
    fprintf(f, "],\n    \"global_batch\": %d, \"micro_batch\": %d, \"microbatches\": %d,\n",
            pc->global_batch, pc->micro_batch, pc->accum_degree);
    fprintf(f, "    \"zero_stage\": %d, \"overlap_grad_reduce\": %s, \"overlap_param_gather\": %s, "
               "\"bucket_cap_mb\": %.9g, \"dtype\": \"%s\", \"grad_sync_dtype\": \"%s\"},\n",
            pc->zero_stage, pc->overlap_grad_reduce ? "true" : "false",
            pc->overlap_param_gather ? "true" : "false", pc->bucket_cap_mb, dtype_name(pc->dtype),
            dtype_name(pc->grad_sync_dtype));
    if (pc->tp_mode != PC_TP_1D) print_tp_mode(pc, sizes, f);
    if (pc->offload) /* only then, as recompute */
        fprintf(f, "  \"offload_optimizer\": {\"device\": \"%s\", \"path\": \"%s\"},\n",
                pconfig_offload_name(pc->offload), pc->offload_path);
    if (pc->recompute) /* only then: the dialects without it print as they did */
        fprintf(f, "  \"recompute\": {\"granularity\": \"%s\", \"method\": \"%s\", \"num_layers\": %d},\n",
                pc->recompute == MODEL_RECOMPUTE_FULL ? "full" : "selective",
                pc->recompute != MODEL_RECOMPUTE_FULL ? "none" : pc->recompute_block ? "block" : "uniform",
                pc->recompute == MODEL_RECOMPUTE_FULL ? pc->recompute_layers : 0);
    fprintf(f, "  \"devices\": [");
    for (int d = 0; d < world; d++) {
        int c[GRID_NAXES], mesh;
        device_at(&G, hetero ? &M : NULL, pc, d, c, &mesh);
        fprintf(f, "%s\n    {\"rank\": %d, ", d ? "," : "", d);
        if (pc->encoder_pp) fprintf(f, "\"mesh\": \"%s\", ", mesh ? "decoder" : "encoder");
        fprintf(f, "\"tp\": %d, ", c[GRID_TP]);
        if (pc->tp_mode != PC_TP_1D) print_tp_sub(pc, &G, d, f);
        if (pc->cp > 1) fprintf(f, "\"cp\": %d, ", c[GRID_CP]);
        /* the data-parallel rank counts the ep ranks taken out of dp */
        if (pc->ep > 1) fprintf(f, "\"ep\": %d, ", c[GRID_EP]);
        fprintf(f, "\"pp\": %d, \"dp\": %d}", c[GRID_PP], c[GRID_DP] * sizes[GRID_EP] + c[GRID_EP]);
    }
    fprintf(f, "\n  ],\n");
    if (pc->encoder_pp) print_encdec(cfg, pc, &G, hetero ? &M : NULL, world, f);
    const int bad = !hetero && cfg->moe_experts > 0 && print_experts(cfg, pc, &G, f, err);
    if (hetero) mesh_grid_free(&M);
    else grid_free(&G);
    if (bad) return -1;
    print_stages(&pp, f);
    fprintf(f, "  \"memory\": {\"device_bytes\": %zu, \"all_devices_bytes\": %zu, \"host_bytes\": %zu}\n}\n",
            mem->max_dev.total, mem->all_devices, mem->host_shared);
    return 0;
}
