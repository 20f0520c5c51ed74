/* parts.c - the model parts of a layout: what one (pipeline stage,
 * tensor-parallel rank) holds, which its data-parallel ranks replicate.
 * A part's table is its stage's (pipeline: other stages' tensors empty)
 * cut to the tp rank's blocks (placements); these helpers move whole
 * vectors between the global tensors and every part's flat blocks, for
 * initialisation, checkpoints and reassembly, counting each element once.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine_internal.h"

engine_part_t engine_part(const engine_shared_t *sh, int part) {
    engine_part_t p = {&sh->part_tables[part], sh->part_coord[part][GRID_PP],
                       sh->part_coord[part][GRID_TP], {0}, {0}};
    for (int a = 0; a < GRID_NAXES; a++)
        p.sizes[a] = sh->part_sizes[part][a], p.coord[a] = sh->part_coord[part][a];
    return p;
}

/* Whether the devices at coordinates a and b (one stage) hold the same
 * block of every tensor of the stage's table t: the same first index
 * along every axis, and the same coordinate along every axis of partial
 * sums. */
static int same_blocks(const param_table_t *t, const int sizes[GRID_NAXES], const int a[GRID_NAXES],
                       const int b[GRID_NAXES]) {
    for (int i = 0; i < t->count; i++) {
        const placement_t *pl = &t->info[i].pl;
        if (!t->info[i].held) continue;
        for (int x = 0; x < GRID_NAXES; x++)
            if (pl->partial >> x & 1 && a[x] != b[x]) return 0;
        int64_t lo_a[PL_MAX_DIMS], lo_b[PL_MAX_DIMS], ext[PL_MAX_DIMS];
        placement_block(pl, sizes, a, lo_a, ext);
        placement_block(pl, sizes, b, lo_b, ext);
        for (int d = 0; d < pl->ndim; d++)
            if (lo_a[d] != lo_b[d]) return 0;
    }
    return 1;
}

/* The model parts: every stage's distinct sets of blocks (placements at
 * the real coordinates, on the stage's mesh), in coordinate order (tp
 * fastest, then cp, ep, dp; stage slowest), each device's part among
 * them. With 1-D tensor parallelism this is stage * tp + tp rank (on an
 * encoder mesh of etp < tp, the encoder's stages have etp parts each). */
static int find_parts(engine_shared_t *sh, perr_t *err) {
    const int W = sh->world;
    sh->part_coord = calloc((size_t)W, sizeof *sh->part_coord);
    sh->part_sizes = calloc((size_t)W, sizeof *sh->part_sizes);
    sh->part_of = calloc((size_t)W, sizeof *sh->part_of);
    if (!sh->part_coord || !sh->part_sizes || !sh->part_of) return perr_set(err, "dp: out of memory");
    sh->nparts = 0;
    for (int s = 0; s < sh->pp.pp; s++) {
        int size[GRID_NAXES], c[GRID_NAXES], n = 1;
        engine_stage_sizes(sh, s, size);
        for (int a = 0; a < GRID_PP; a++) n *= size[a];
        const param_table_t *t = &sh->tables[s];
        for (int k = 0; k < n; k++) { /* coordinates, axis 0 (tp) fastest */
            int rest = k;
            for (int a = 0; a < GRID_PP; a++) c[a] = rest % size[a], rest /= size[a];
            c[GRID_PP] = s;
            int found = 0;
            for (int q = 0; q < sh->nparts && !found; q++)
                found = sh->part_coord[q][GRID_PP] == s && same_blocks(t, size, sh->part_coord[q], c);
            if (found) continue;
            memcpy(sh->part_coord[sh->nparts], c, sizeof c);
            memcpy(sh->part_sizes[sh->nparts++], size, sizeof size);
        }
    }
    for (int d = 0; d < W; d++) {
        const engine_dev_t dv = engine_device(sh, d);
        sh->part_of[d] = -1;
        for (int q = 0; q < sh->nparts && sh->part_of[d] < 0; q++)
            if (sh->part_coord[q][GRID_PP] == dv.coord[GRID_PP] &&
                same_blocks(&sh->tables[dv.coord[GRID_PP]], dv.size, sh->part_coord[q], dv.coord))
                sh->part_of[d] = q;
    }
    return 0;
}

int engine_part_extra(const engine_shared_t *sh, const engine_part_t *p, int i) {
    if (placement_is_extra_replica(&p->table->info[i].pl, p->sizes, p->coord)) return 1;
    return pp_tied_split(&sh->pp) && i == p->table->wte && p->stage == sh->pp.pp - 1;
}

float **engine_part_buffers(const engine_shared_t *sh) {
    float **b = calloc((size_t)sh->nparts, sizeof *b);
    for (int t = 0; b && t < sh->nparts; t++)
        if (!(b[t] = calloc(engine_part(sh, t).table->total + 1, sizeof(float)))) {
            engine_part_buffers_free(sh, b);
            return NULL;
        }
    return b;
}

void engine_part_buffers_free(const engine_shared_t *sh, float **b) {
    for (int t = 0; b && t < sh->nparts; t++) free(b[t]);
    free(b);
}

void engine_cut_parts(const engine_shared_t *sh, const float *global, float **local) {
    for (int k = 0; k < sh->nparts; k++) {
        const engine_part_t p = engine_part(sh, k);
        for (int i = 0; i < p.table->count; i++)
            if (p.table->info[i].held)
                placement_take(&p.table->info[i].pl, p.sizes, p.coord,
                               global + sh->global.info[i].offset, local[k] + p.table->info[i].offset);
    }
}

void engine_join_parts(const engine_shared_t *sh, float **local, float *global) {
    for (int k = 0; k < sh->nparts; k++) {
        const engine_part_t p = engine_part(sh, k);
        for (int i = 0; i < p.table->count; i++)
            if (p.table->info[i].held && !engine_part_extra(sh, &p, i))
                placement_put(&p.table->info[i].pl, p.sizes, p.coord,
                              local[k] + p.table->info[i].offset, global + sh->global.info[i].offset);
    }
}

/* The gradient groups: the axes each held tensor's gradient is reduced
 * over (param_info_t.reduce, from its placement: the token axes it is
 * replicated over), their names for the layout ("dp-cp") and sizes. One
 * group, or with expert parallelism two: the dense tensors' over dp-ep-cp
 * ([0], the widest) and the experts' (cut over ep) over dp-cp. The
 * buckets are cut where the group changes (dp_plan.c). */
static int grad_axes(engine_shared_t *sh, perr_t *err) {
    sh->ngroups = 0;
    const char *first = NULL;
    for (int s = 0; s < sh->pp.pp; s++)
        for (int i = 0; i < sh->tables[s].count; i++) {
            const param_info_t *p = &sh->tables[s].info[i];
            if (!p->held) continue;
            int known = 0;
            for (int k = 0; k < sh->ngroups; k++) known |= sh->grad_axes[k] == p->reduce;
            if (known) continue;
            if (sh->ngroups == ENGINE_MAX_GROUPS)
                return perr_set(err, "tensors '%s' and '%s' reduce their gradients over a third "
                                     "set of grid axes: the engine runs at most %d gradient groups",
                                first, p->name, ENGINE_MAX_GROUPS);
            sh->grad_axes[sh->ngroups++] = p->reduce, first = p->name;
        }
    if (sh->ngroups == 0) {
        const int64_t one = 1;
        const placement_t r = placement_replicated(1, &one);
        int size[GRID_NAXES];
        engine_stage_sizes(sh, 0, size);
        sh->grad_axes[sh->ngroups++] = placement_reduce_axes_at(&r, size);
    }
    /* the widest first: the dense tensors' (the loss's, the buffers') */
    if (sh->ngroups == 2 && (sh->grad_axes[1] & ~sh->grad_axes[0])) {
        const unsigned t = sh->grad_axes[0];
        sh->grad_axes[0] = sh->grad_axes[1], sh->grad_axes[1] = t;
    }
    for (int k = 0; k < sh->ngroups; k++) {
        placement_reduce_name(sh->grad_axes[k], sh->grad_name[k], sizeof sh->grad_name[k]);
        sh->grad_n[k] = 1; /* the token axes: the same sizes on every mesh */
        int size[GRID_NAXES];
        engine_stage_sizes(sh, 0, size);
        for (int a = 0; a < GRID_NAXES; a++)
            if (sh->grad_axes[k] >> a & 1) sh->grad_n[k] *= size[a];
        if (!sh->grad_name[k][0]) return perr_set(err, "no tensor reduces its gradient over a token axis");
    }
    return 0;
}

/* Stage tables, then every part's table and plan; with a tied head over
 * stages, the embedding groups (first and last stage of every tp x dp
 * coordinate). */
int engine_build_stages(engine_shared_t *sh, perr_t *err) {
    const pconfig_t *pc = &sh->run->pc;
    const int pp = sh->pp.pp;
    sh->tables = calloc((size_t)pp, sizeof *sh->tables);
    if (!sh->tables) return perr_set(err, "dp: out of memory");
    /* each stage's table at its first device's coordinates: the
     * placements, the same on every part of the stage, tell which parts
     * hold the same blocks (find_parts) */
    for (int s = 0; s < pp; s++) {
        int coord[GRID_NAXES] = {0}, size[GRID_NAXES];
        coord[GRID_PP] = s;
        engine_stage_sizes(sh, s, size);
        if (param_table_build_at(&sh->tables[s], &sh->cfg, size, coord, &sh->pp.units[s],
                                 pconfig_tp_opts(pc), err))
            return -1;
    }
    if (grad_axes(sh, err) || find_parts(sh, err)) return -1;
    /* a part's own table and plan: block shapes may differ between the
     * parts of a stage (uneven whole tiles, placement_split), so each
     * part's flat vector is laid out at its own coordinates */
    sh->part_tables = calloc((size_t)sh->nparts, sizeof *sh->part_tables);
    sh->plans = calloc((size_t)sh->nparts, sizeof *sh->plans);
    if (!sh->part_tables || !sh->plans) return perr_set(err, "dp: out of memory");
    for (int k = 0; k < sh->nparts; k++) {
        const int s = sh->part_coord[k][GRID_PP];
        /* adamw8bit: the part's blocks of every tensor are whole quantization
         * blocks (or the layout is refused); the plan cuts ZeRO's pieces at
         * them, unless the broken variant asks for per-shard blocks */
        if (param_table_build_at(&sh->part_tables[k], &sh->cfg, sh->part_sizes[k], sh->part_coord[k],
                                 &sh->pp.units[s], pconfig_tp_opts(pc), err) ||
            adam8_check_blocks(&sh->part_tables[k], &sh->cfg, sh->part_sizes[k], sh->part_coord[k],
                               err) ||
            dp_plan_build_grid_ex(&sh->plans[k], &sh->part_tables[k], &sh->cfg, sh->part_sizes[k],
                                  pc->zero_stage, pc->bucket_cap_mb,
                                  sh->run->broken_adam8_shard_blocks ? DP_PLAN_UNALIGNED : 0u, err))
            return -1;
        if (pp_tied_split(&sh->pp) && sh->cfg.tied) dp_plan_hold_embedding(&sh->plans[k], &sh->part_tables[k]);
    }
    if (!pp_tied_split(&sh->pp) || !sh->cfg.tied) return 0;
    if (sh->meshes) return engine_tied_mesh_groups(sh, err); /* etp + tp ranks a group */
    const int n = sh->grid.world / pp;
    sh->emb_groups = calloc((size_t)n, sizeof *sh->emb_groups);
    if (!sh->emb_groups) return perr_set(err, "dp: out of memory");
    for (int d = 0, k = 0; d < sh->grid.world; d++) {
        const grid_device_t gd = grid_device(&sh->grid, d);
        if (gd.coord[GRID_PP] != 0) continue;
        const int ranks[2] = {d, group_world_rank(gd.group[GRID_PP], pp - 1)};
        if (!(sh->emb_groups[k++] = group_create(ranks, 2, "emb", err))) return -1;
        sh->n_emb_groups = k;
    }
    return 0;
}

void engine_free_stages(engine_shared_t *sh) {
    for (int s = 0; s < sh->pp.pp && sh->tables; s++) param_table_free(&sh->tables[s]);
    for (int k = 0; k < sh->nparts && sh->part_tables; k++) param_table_free(&sh->part_tables[k]);
    for (int k = 0; k < sh->nparts && sh->plans; k++) dp_plan_free(&sh->plans[k]);
    for (int k = 0; k < sh->n_emb_groups; k++) group_destroy(sh->emb_groups[k]);
    free(sh->emb_groups);
    free(sh->part_coord);
    free(sh->part_sizes);
    free(sh->part_of);
    free(sh->tables);
    free(sh->part_tables);
    free(sh->plans);
}

/* The embedding group of a device on the first or last stage. */
group_t *engine_emb_group_of(const engine_shared_t *sh, int device) {
    for (int k = 0; k < sh->n_emb_groups; k++)
        if (group_index_of(sh->emb_groups[k], device) >= 0) return sh->emb_groups[k];
    return NULL;
}

