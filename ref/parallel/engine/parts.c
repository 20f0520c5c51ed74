/* parts.c - the model parts of a layout: what one (pipeline stage,
 * tensor-parallel rank) holds, which its data-parallel ranks replicate.
 * A part's table is its stage's (pipeline: other stages' tensors empty)
 * cut to the tp rank's blocks (placements); these helpers move whole
 * vectors between the global tensors and every part's flat blocks, for
 * initialisation, checkpoints and reassembly, counting each element once.
 */
#include <stdlib.h>

#include "engine_internal.h"

engine_part_t engine_part(const engine_shared_t *sh, int part) {
    const int tp = sh->grid.size[GRID_TP];
    engine_part_t p = {&sh->tables[part / tp], part / tp, part % tp, {tp, 1, 1, 1, 1}, {part % tp, 0, 0, 0, 0}};
    return p;
}

int engine_part_extra(const engine_shared_t *sh, const engine_part_t *p, int i) {
    if (placement_is_extra_replica(&p->table->info[i].pl, p->sizes, p->coord)) return 1;
    return sh->pp.pp > 1 && i == p->table->wte && p->stage == sh->pp.pp - 1;
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

/* Stage tables and plans; with a tied head over stages, the embedding
 * groups (first and last stage of every tp x dp coordinate). */
int engine_build_stages(engine_shared_t *sh, perr_t *err) {
    const pconfig_t *pc = &sh->run->pc;
    const int pp = sh->pp.pp;
    sh->tables = calloc((size_t)pp, sizeof *sh->tables);
    sh->plans = calloc((size_t)pp, sizeof *sh->plans);
    if (!sh->tables || !sh->plans) return perr_set(err, "dp: out of memory");
    for (int s = 0; s < pp; s++) {
        if (param_table_build_mp(&sh->tables[s], &sh->cfg, pc->tp, &sh->pp.units[s],
                                 pconfig_tp_opts(pc), err) ||
            dp_plan_build(&sh->plans[s], &sh->tables[s], &sh->cfg, pconfig_grad_ranks(pc), pc->zero_stage,
                          pc->bucket_cap_mb, err))
            return -1;
        if (pp > 1 && sh->cfg.tied) dp_plan_hold_embedding(&sh->plans[s], &sh->tables[s]);
    }
    if (pp == 1 || !sh->cfg.tied) return 0;
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
    for (int s = 0; s < sh->pp.pp && sh->plans; s++) dp_plan_free(&sh->plans[s]);
    for (int k = 0; k < sh->n_emb_groups; k++) group_destroy(sh->emb_groups[k]);
    free(sh->emb_groups);
    free(sh->tables);
    free(sh->plans);
}

/* The embedding group of a device on the first or last stage. */
group_t *engine_emb_group_of(const engine_shared_t *sh, int device) {
    for (int k = 0; k < sh->n_emb_groups; k++)
        if (group_index_of(sh->emb_groups[k], device) >= 0) return sh->emb_groups[k];
    return NULL;
}

