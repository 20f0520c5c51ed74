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
    return mesh_grid_init(G, spec, 2, 0, err);
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
        if (group_create_all_at(L, dims, name, offset, out->groups + base, err)) {
            engine_groups_free(out);
            return -1;
        }
        for (int local = 0; local < L->world; local++)
            out->id_of[offset + local] = base + layout_group_id(L, local, dims);
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
