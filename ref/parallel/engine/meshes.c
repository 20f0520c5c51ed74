/* meshes.c - where a device sits: one grid (grid.h), or an encoder mesh
 * beside the decoder's (mesh.h; Megatron-core's
 * --encoder-tensor-model-parallel-size below tp).
 *
 * With two meshes the encoder's dp*etp*epp*cp devices come first (world
 * ranks from 0), the decoder's dp*tp*pp*cp after them, each mesh a rank
 * layout of the run's order. A device's pipeline coordinate is its global
 * stage (the encoder's 0 .. epp-1, then the decoder's), its sizes its
 * mesh's, its pipeline group its mesh's stages. The two meshes meet at
 * the bridge: encoder tensor-parallel rank q of the last encoder stage
 * feeds decoder ranks q*k .. q*k+k-1 (k = tp/etp) of the first decoder
 * stage of the same data- and context-parallel coordinates (schedule.c).
 */
#include <stdlib.h>
#include <string.h>

#include "engine_internal.h"

int engine_encdec_meshes(mesh_grid_t *G, const pconfig_t *pc, perr_t *err) {
    int enc[GRID_NAXES], dec[GRID_NAXES];
    pconfig_grid_sizes(pc, enc);
    memcpy(dec, enc, sizeof dec);
    enc[GRID_TP] = pc->encoder_tp, enc[GRID_PP] = pc->encoder_pp;
    dec[GRID_PP] = pc->pp - pc->encoder_pp;
    int enc_world = 1;
    for (int a = 0; a < GRID_NAXES; a++) enc_world *= enc[a];
    mesh_spec_t spec[2] = {{"encoder", pc->order, {0}, 0}, {"decoder", pc->order, {0}, enc_world}};
    memcpy(spec[0].size, enc, sizeof enc), memcpy(spec[1].size, dec, sizeof dec);
    /* a rank list places both meshes' positions: the encoder's 0 ..
     * dp*etp*epp*cp - 1 (its order's), then the decoder's */
    return mesh_grid_init_mapped(G, spec, 2, 0, pc->rank_list, pc->n_rank_list, err);
}

int engine_meshes_init(engine_shared_t *sh, perr_t *err) {
    if (!(sh->meshes = calloc(1, sizeof *sh->meshes))) return perr_set(err, "dp: out of memory");
    if (engine_encdec_meshes(sh->meshes, &sh->run->pc, err)) {
        free(sh->meshes);
        sh->meshes = NULL;
        return -1;
    }
    sh->world = sh->meshes->world;
    return 0;
}

void engine_meshes_free(engine_shared_t *sh) {
    if (!sh->meshes) return;
    mesh_grid_free(sh->meshes);
    free(sh->meshes);
    sh->meshes = NULL;
}

engine_dev_t engine_device(const engine_shared_t *sh, int d) {
    engine_dev_t v;
    memset(&v, 0, sizeof v);
    if (!sh->meshes) {
        const grid_device_t gd = grid_device(&sh->grid, d);
        memcpy(v.coord, gd.coord, sizeof v.coord);
        memcpy(v.size, sh->grid.size, sizeof v.size);
        memcpy(v.group, gd.group, sizeof v.group);
        v.local = d;
        return v;
    }
    const mesh_device_t md = mesh_device(sh->meshes, d);
    const mesh_t *M = &sh->meshes->mesh[md.mesh];
    memcpy(v.coord, md.coord, sizeof v.coord);
    memcpy(v.size, M->size, sizeof v.size);
    memcpy(v.group, md.group, sizeof v.group);
    v.mesh = md.mesh, v.local = md.local;
    if (md.mesh == 1) v.coord[GRID_PP] += sh->run->pc.encoder_pp; /* the global stage */
    v.size[GRID_PP] = sh->pp.pp;
    return v;
}

void engine_stage_sizes(const engine_shared_t *sh, int stage, int sizes[GRID_NAXES]) {
    if (!sh->meshes) {
        memcpy(sizes, sh->grid.size, GRID_NAXES * sizeof *sizes);
        return;
    }
    memcpy(sizes, sh->meshes->mesh[stage >= sh->run->pc.encoder_pp].size, GRID_NAXES * sizeof *sizes);
    sizes[GRID_PP] = sh->pp.pp;
}

int engine_groups_create(engine_shared_t *sh, const char *dims, const char *prefix,
                         engine_groups_t *out, perr_t *err) {
    memset(out, 0, sizeof *out);
    const int nmesh = sh->meshes ? sh->meshes->nmesh : 1;
    for (int m = 0; m < nmesh; m++)
        out->n += layout_num_groups(sh->meshes ? &sh->meshes->mesh[m].layout : &sh->grid.layout, dims);
    out->groups = calloc((size_t)out->n, sizeof *out->groups);
    out->id_of = calloc((size_t)sh->world, sizeof *out->id_of);
    if (!out->groups || !out->id_of) return perr_set(err, "dp: out of memory");
    for (int m = 0, base = 0; m < nmesh; m++) {
        const rank_layout_t *L = sh->meshes ? &sh->meshes->mesh[m].layout : &sh->grid.layout;
        const int offset = sh->meshes ? sh->meshes->mesh[m].offset : 0, n = layout_num_groups(L, dims);
        char name[48];
        snprintf(name, sizeof name, "%s%s%s", sh->meshes ? sh->meshes->mesh[m].name : "",
                 sh->meshes ? "." : "", prefix);
        const unsigned short *at = sh->meshes && sh->meshes->mapped ? sh->meshes->rank_at : NULL;
        if (group_create_all_mapped(L, dims, name, offset, at, out->groups + base, err)) {
            engine_groups_free(out);
            return -1;
        }
        for (int local = 0; local < L->world; local++)
            out->id_of[at ? at[offset + local] : offset + local] = base + layout_group_id(L, local, dims);
        base += n;
    }
    return 0;
}

void engine_groups_free(engine_groups_t *g) {
    if (g->groups) group_destroy_all(g->groups, g->n);
    free(g->groups);
    free(g->id_of);
    memset(g, 0, sizeof *g);
}

/* ---- the bridge ----------------------------------------------------------- */

int engine_bridge_side(const engine_rank_t *r) {
    const int epp = r->sh->run->pc.encoder_pp;
    if (!r->sh->meshes) return 0;
    return r->stage == epp - 1 ? 1 : r->stage == epp ? -1 : 0;
}

int engine_bridge_fanout(const engine_shared_t *sh) {
    return sh->meshes ? sh->run->pc.tp / sh->run->pc.encoder_tp : 1;
}

/* World rank of the device across the bridge: from the encoder side its
 * i-th decoder peer, from the decoder side its encoder peer. */
int engine_bridge_peer(const engine_rank_t *r, int i) {
    const engine_shared_t *sh = r->sh;
    const engine_dev_t me = engine_device(sh, r->device);
    const int k = engine_bridge_fanout(sh), to_decoder = engine_bridge_side(r) > 0;
    int c[GRID_NAXES];
    memcpy(c, me.coord, sizeof c);
    c[GRID_TP] = to_decoder ? me.coord[GRID_TP] * k + i : me.coord[GRID_TP] / k;
    c[GRID_PP] = to_decoder ? 0 : sh->meshes->mesh[0].size[GRID_PP] - 1;
    if (sh->run->broken_encdec_dp_mixup) /* the encoder's output to the next replica */
        c[GRID_DP] = (c[GRID_DP] + (to_decoder ? 1 : -1) + me.size[GRID_DP]) % me.size[GRID_DP];
    int rank = -1;
    perr_t e;
    if (mesh_select(sh->meshes, to_decoder, c, &rank, &e) != 1)
        parity_fatal("device %d: no bridge peer %d across the encoder-decoder boundary", r->device, i);
    return rank;
}

/* ---- a head tied across the meshes ------------------------------------------ */

/* The tied word embedding's copies: the embedding's on the encoder's
 * first stage, its vocabulary cut over etp, and the head's on the
 * decoder's last, cut over tp. One group a (dp, cp) coordinate holds the
 * etp + tp ranks of both copies, Megatron's embedding group widened to
 * every rank that holds a vocabulary row. */
int engine_tied_mesh_groups(engine_shared_t *sh, perr_t *err) {
    const mesh_grid_t *G = sh->meshes;
    const int n = G->mesh[0].world / (G->mesh[0].size[GRID_TP] * G->mesh[0].size[GRID_PP]);
    if (!(sh->emb_groups = calloc((size_t)n, sizeof *sh->emb_groups)))
        return perr_set(err, "dp: out of memory");
    for (int d = 0; d < G->world; d++) {
        const mesh_device_t md = mesh_device(G, d);
        if (md.mesh != 0 || md.coord[GRID_TP] != 0 || md.coord[GRID_PP] != 0) continue;
        mesh_sel_t sel[2] = {{0, {0}}, {1, {0}}};
        memcpy(sel[0].coord, md.coord, sizeof md.coord), memcpy(sel[1].coord, md.coord, sizeof md.coord);
        sel[0].coord[GRID_TP] = sel[1].coord[GRID_TP] = MESH_ANY;
        sel[1].coord[GRID_PP] = MESH_LAST;
        if (!(sh->emb_groups[sh->n_emb_groups] = mesh_group_select(G, sel, 2, "emb", err))) return -1;
        sh->n_emb_groups++;
    }
    return 0;
}

typedef struct {
    xvec_t *full, *mine;
    int to_full, unreconciled;
} tied_runs_t;

/* A run of the device's block between its open sums and the vocabulary's
 * global rows; the broken variant lays the block at its local offset, as
 * an all-reduce of the local shards would. */
static void tied_run(void *ctx, size_t global_flat, size_t local_flat, size_t n) {
    const tied_runs_t *t = ctx;
    const size_t at = t->unreconciled ? local_flat : global_flat;
    if (t->to_full) xvec_store_range(t->full, at, t->mine, local_flat, n);
    else xvec_store_range(t->mine, local_flat, t->full, at, n);
}

/* The cuts of the two copies need not nest (uneven whole tiles: 6 tiles
 * are 3 + 3 over two ranks, 2 + 2 + 1 + 1 over four), so each device
 * re-blocks its open sums onto the vocabulary's global rows ([V, C], +0
 * on the rows others hold), the group sums them exactly, and each takes
 * its own rows back: every row's gradient is the exact sum of the
 * embedding's and the head's contributions, the golden one, on both
 * copies. Adding +0 to an exact sum changes no bit of its rounding. */
void engine_tied_mesh_reduce(engine_rank_t *r, acc_t *a) {
    const engine_part_t p = engine_part(r->sh, r->part);
    const placement_t *pl = &p.table->info[p.table->wte].pl;
    const size_t n = placement_global_numel(pl);
    double *zeros = calloc(n ? n : 1, sizeof *zeros); /* all-zero bits are +0.0 */
    if (!zeros) parity_fatal("device %d: out of memory for the tied embedding's gradient", r->device);
    xvec_t full;
    xvec_init_with(&full, n, zeros);
    xvec_claim_zero(&full); /* its zeros are real: the runs below store into it */
    tied_runs_t t = {&full, &a->x, 1, r->sh->run->broken_encdec_tied_cuts};
    placement_for_runs(pl, p.sizes, p.coord, tied_run, &t);
    coll_all_reduce_open(r->emb_group, &full, 0, n);
    t.to_full = 0;
    xvec_claim_zero(&a->x); /* every element of the block is stored back */
    placement_for_runs(pl, p.sizes, p.coord, tied_run, &t);
    xvec_free(&full);
    free(zeros);
}
