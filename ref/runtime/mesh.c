/* mesh.c - several rank layouts side by side in one world (mesh.h).
 *
 * Each mesh is an ordinary rank layout over its local ranks 0 .. world-1
 * at positions offset + local rank: the world rank there, or with a rank
 * list (mesh_grid_init_mapped) the list's entry. Nothing here knows about encoders or
 * decoders: the meshes and the selections that join them are the whole
 * vocabulary, so the same code serves an embedding group across pipeline
 * ends or a bridge between two models.
 */
#include "parity/mesh.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Name, order, sizes and offset of one spec, into M with its layout. */
static int mesh_init_one(mesh_t *M, const mesh_spec_t *s, int index, perr_t *e) {
    if (!s->name || !*s->name) return perr_set(e, "mesh %d: name is empty", index);
    if (strlen(s->name) >= sizeof M->name)
        return perr_set(e, "mesh %d: name \"%s\" is longer than %d characters", index, s->name,
                        (int)sizeof M->name - 1);
    snprintf(M->name, sizeof M->name, "%s", s->name);
    for (int a = 0; a < GRID_NAXES; a++)
        if (s->size[a] < 1)
            return perr_set(e, "mesh \"%s\": %s size %d, expected >= 1", M->name,
                            grid_axis_name((grid_axis_t)a), s->size[a]);
    if (s->offset < 0) return perr_set(e, "mesh \"%s\": offset %d, expected >= 0", M->name, s->offset);
    if (s->order && strlen(s->order) >= sizeof M->order)
        return perr_set(e, "mesh \"%s\": order '%s' is longer than %d characters", M->name, s->order,
                        (int)sizeof M->order - 1);
    snprintf(M->order, sizeof M->order, "%s", s->order ? s->order : "");
    /* every axis named, so layout_init refuses by name a size > 1 on an
     * axis the order leaves out (size 1 there is accepted) */
    char spec[128];
    snprintf(spec, sizeof spec, "tp=%d,tp2=%d,tp3=%d,cp=%d,ep=%d,dp=%d,pp=%d", s->size[GRID_TP],
             s->size[GRID_TP2], s->size[GRID_TP3], s->size[GRID_CP], s->size[GRID_EP],
             s->size[GRID_DP], s->size[GRID_PP]);
    perr_t why;
    if (layout_init(&M->layout, s->order, spec, &why))
        return perr_set(e, "mesh \"%s\": %s", M->name, why.msg);
    memcpy(M->size, s->size, sizeof M->size);
    M->offset = s->offset;
    M->world = M->layout.world;
    if (M->offset > PARITY_MAX_DEVICES - M->world)
        return perr_set(e, "mesh \"%s\": ranks %d..%d go beyond %d devices", M->name, M->offset,
                        M->offset + M->world - 1, PARITY_MAX_DEVICES);
    return 0;
}

/* The mesh holding world rank r, -1 for none. */
static int mesh_of(const mesh_grid_t *G, int r) {
    for (int i = 0; i < G->nmesh; i++)
        if (r >= G->mesh[i].offset && r < G->mesh[i].offset + G->mesh[i].world) return i;
    return -1;
}

/* Every rank of 0 .. G->world-1 in exactly one mesh; the first that is
 * not is named, with the meshes around it. */
static int check_tiling(const mesh_grid_t *G, perr_t *e) {
    for (int r = 0; r < G->world; r++) {
        int first = mesh_of(G, r);
        if (first < 0)
            return perr_set(e, "meshes: rank %d is in no mesh (the meshes must cover ranks 0..%d, "
                               "each once)", r, G->world - 1);
        for (int j = first + 1; j < G->nmesh; j++) {
            const mesh_t *A = &G->mesh[first], *B = &G->mesh[j];
            if (r >= B->offset && r < B->offset + B->world)
                return perr_set(e, "meshes: rank %d is in both mesh \"%s\" (ranks %d..%d) and mesh "
                                   "\"%s\" (ranks %d..%d)", r, A->name, A->offset,
                                A->offset + A->world - 1, B->name, B->offset, B->offset + B->world - 1);
        }
    }
    return 0;
}

/* The world rank at position c, and the position of world rank r. */
static int rank_at(const mesh_grid_t *G, int c) { return G->mapped ? G->rank_at[c] : c; }
static int pos_of(const mesh_grid_t *G, int r) { return G->mapped ? G->pos_of[r] : r; }

/* Every mesh's groups along every axis, then the world group. */
static int create_groups(mesh_grid_t *G, perr_t *e) {
    for (int i = 0; i < G->nmesh; i++) {
        mesh_t *M = &G->mesh[i];
        for (int a = 0; a < GRID_NAXES; a++) {
            const char *axis = grid_axis_name((grid_axis_t)a);
            int n = layout_num_groups(&M->layout, axis);
            M->groups[a] = calloc((size_t)n, sizeof *M->groups[a]);
            if (!M->groups[a]) return perr_set(e, "mesh \"%s\": out of host memory", M->name);
            char prefix[48];
            snprintf(prefix, sizeof prefix, "%s.%s", M->name, axis);
            if (group_create_all_mapped(&M->layout, axis, prefix, M->offset,
                                        G->mapped ? G->rank_at : NULL, M->groups[a], e))
                return -1;
            M->ngroups[a] = n;
        }
    }
    int *all = malloc((size_t)G->world * sizeof *all);
    for (int r = 0; all && r < G->world; r++) all[r] = r;
    G->all = all ? group_create(all, G->world, "world", e) : NULL;
    free(all);
    return G->all ? 0 : -1;
}

int mesh_grid_init(mesh_grid_t *G, const mesh_spec_t *specs, int n, int world, perr_t *e) {
    memset(G, 0, sizeof *G);
    if (n < 1 || n > MESH_MAX) return perr_set(e, "meshes: %d given, expected 1..%d", n, MESH_MAX);
    if (world < 0 || world > PARITY_MAX_DEVICES)
        return perr_set(e, "meshes: world %d, expected 0 (the meshes' end) .. %d", world,
                        PARITY_MAX_DEVICES);
    int end = 0;
    for (int i = 0; i < n; i++) {
        mesh_t *M = &G->mesh[i];
        if (mesh_init_one(M, &specs[i], i, e)) return -1;
        for (int j = 0; j < i; j++)
            if (strcmp(G->mesh[j].name, M->name) == 0)
                return perr_set(e, "mesh %d: name \"%s\" is already mesh %d's", i, M->name, j);
        if (world && M->offset + M->world > world)
            return perr_set(e, "mesh \"%s\": ranks %d..%d go beyond the world of %d devices",
                            M->name, M->offset, M->offset + M->world - 1, world);
        if (M->offset + M->world > end) end = M->offset + M->world;
        G->nmesh = i + 1;
    }
    G->world = world ? world : end;
    if (check_tiling(G, e) || create_groups(G, e)) {
        mesh_grid_free(G);
        return -1;
    }
    return 0;
}

int mesh_grid_init_mapped(mesh_grid_t *G, const mesh_spec_t *specs, int n, int world,
                          const unsigned short *ranks, int nranks, perr_t *e) {
    if (mesh_grid_init(G, specs, n, world, e)) return -1;
    if (!nranks) return 0;
    perr_t why;
    if (layout_check_ranks(ranks, nranks, G->world, &why)) {
        mesh_grid_free(G);
        return perr_set(e, "meshes: rank list: %s", why.msg);
    }
    /* the groups again, of the placed ranks */
    mesh_grid_free(G);
    G->mapped = 1;
    for (int c = 0; c < nranks; c++) G->rank_at[c] = ranks[c], G->pos_of[ranks[c]] = (unsigned short)c;
    if (create_groups(G, e)) {
        mesh_grid_free(G);
        return -1;
    }
    return 0;
}

void mesh_grid_free(mesh_grid_t *G) {
    for (int i = 0; i < G->nmesh; i++) {
        mesh_t *M = &G->mesh[i];
        for (int a = 0; a < GRID_NAXES; a++) {
            if (M->groups[a]) group_destroy_all(M->groups[a], M->ngroups[a]);
            free(M->groups[a]);
            M->groups[a] = NULL;
            M->ngroups[a] = 0;
        }
    }
    if (G->all) group_destroy(G->all);
    G->all = NULL;
}

int mesh_find(const mesh_grid_t *G, const char *name) {
    for (int i = 0; name && i < G->nmesh; i++)
        if (strcmp(G->mesh[i].name, name) == 0) return i;
    return -1;
}

mesh_device_t mesh_device(const mesh_grid_t *G, int rank) {
    mesh_device_t d;
    memset(&d, 0, sizeof d);
    d.rank = rank;
    d.mesh = rank >= 0 && rank < G->world ? mesh_of(G, pos_of(G, rank)) : -1;
    d.pp_prev = d.pp_next = -1;
    if (d.mesh < 0) return d;
    const mesh_t *M = &G->mesh[d.mesh];
    d.local = pos_of(G, rank) - M->offset;
    for (int a = 0; a < GRID_NAXES; a++) {
        const char *axis = grid_axis_name((grid_axis_t)a);
        d.coord[a] = layout_coord(&M->layout, d.local, axis);
        d.group[a] = M->groups[a][layout_group_id(&M->layout, d.local, axis)];
    }
    int s = d.coord[GRID_PP];
    if (s > 0) d.pp_prev = group_world_rank(d.group[GRID_PP], s - 1);
    if (s + 1 < M->size[GRID_PP]) d.pp_next = group_world_rank(d.group[GRID_PP], s + 1);
    return d;
}

int mesh_select(const mesh_grid_t *G, int mesh, const int coord[GRID_NAXES], int *ranks_out,
                perr_t *e) {
    if (mesh < 0 || mesh >= G->nmesh)
        return perr_set(e, "mesh_select: mesh %d, expected 0..%d", mesh, G->nmesh - 1);
    const mesh_t *M = &G->mesh[mesh];
    int want[GRID_NAXES];
    for (int a = 0; a < GRID_NAXES; a++) {
        want[a] = coord[a] == MESH_LAST ? M->size[a] - 1 : coord[a];
        if (want[a] != MESH_ANY && (want[a] < 0 || want[a] >= M->size[a]))
            return perr_set(e, "mesh \"%s\": %s coordinate %d, expected 0..%d (or MESH_ANY, "
                               "MESH_LAST)", M->name, grid_axis_name((grid_axis_t)a), coord[a],
                            M->size[a] - 1);
    }
    int n = 0;
    for (int local = 0; local < M->world; local++) {
        int match = 1;
        for (int a = 0; a < GRID_NAXES && match; a++)
            match = want[a] == MESH_ANY ||
                    layout_coord(&M->layout, local, grid_axis_name((grid_axis_t)a)) == want[a];
        if (match) ranks_out[n++] = rank_at(G, M->offset + local);
    }
    return n;
}

group_t *mesh_group_create(const mesh_grid_t *G, const int *ranks, int n, const char *name,
                           perr_t *e) {
    if (!name) name = "group";
    for (int i = 0; ranks && i < n; i++)
        if (ranks[i] < 0 || ranks[i] >= G->world)
            return perr_set(e, "group '%s': entry %d is rank %d, not in the grid's ranks 0..%d", name,
                            i, ranks[i], G->world - 1),
                   NULL;
    return group_create(ranks, n, name, e); /* refuses n < 1 and a rank given twice */
}

group_t *mesh_group_select(const mesh_grid_t *G, const mesh_sel_t *sel, int nsel, const char *name,
                           perr_t *e) {
    if (!name) name = "group";
    size_t cap = 0;
    for (int i = 0; i < nsel; i++)
        if (sel[i].mesh >= 0 && sel[i].mesh < G->nmesh) cap += (size_t)G->mesh[sel[i].mesh].world;
    int *ranks = malloc((cap ? cap : 1) * sizeof *ranks);
    if (!ranks) return perr_set(e, "group '%s': out of host memory", name), NULL;
    int n = 0;
    for (int i = 0; i < nsel; i++) {
        perr_t why;
        int k = mesh_select(G, sel[i].mesh, sel[i].coord, ranks + n, &why);
        if (k < 0) {
            free(ranks);
            return perr_set(e, "group '%s': selection %d: %s", name, i, why.msg), NULL;
        }
        n += k;
    }
    group_t *g = mesh_group_create(G, ranks, n, name, e);
    free(ranks);
    return g;
}

int mesh_bridge_create_all(const mesh_grid_t *G, grid_axis_t axis, const mesh_sel_t *sel, int nsel,
                           const char *prefix, group_t **out, perr_t *e) {
    if (!prefix) prefix = "bridge";
    if ((unsigned)axis >= GRID_NAXES) return perr_set(e, "bridge '%s': axis %d unknown", prefix, axis);
    if (nsel < 1) return perr_set(e, "bridge '%s': no selections", prefix);
    const char *an = grid_axis_name(axis);
    for (int i = 0; i < nsel; i++)
        if (sel[i].mesh < 0 || sel[i].mesh >= G->nmesh)
            return perr_set(e, "bridge '%s': selection %d: mesh %d, expected 0..%d", prefix, i,
                            sel[i].mesh, G->nmesh - 1);
    const mesh_t *M0 = &G->mesh[sel[0].mesh];
    int size = M0->size[axis];
    for (int i = 1; i < nsel; i++) {
        const mesh_t *M = &G->mesh[sel[i].mesh];
        if (M->size[axis] != size)
            return perr_set(e, "bridge '%s': mesh \"%s\" has %s=%d but mesh \"%s\" has %s=%d (a "
                               "bridge along %s needs the same size in every mesh)", prefix,
                            M0->name, an, size, M->name, an, M->size[axis], an);
    }
    mesh_sel_t *at = malloc((size_t)nsel * sizeof *at);
    if (!at) return perr_set(e, "bridge '%s': out of host memory", prefix);
    memcpy(at, sel, (size_t)nsel * sizeof *at);
    int v = 0;
    for (; v < size; v++) {
        for (int i = 0; i < nsel; i++) at[i].coord[axis] = v;
        char name[64];
        snprintf(name, sizeof name, "%s%d", prefix, v);
        out[v] = mesh_group_select(G, at, nsel, name, e);
        if (!out[v]) break;
    }
    free(at);
    if (v == size) return size;
    group_destroy_all(out, v);
    return -1;
}
