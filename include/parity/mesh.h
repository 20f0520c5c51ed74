/* mesh.h - a grid of several rectangles: meshes side by side in one world.
 *
 * grid.h's grid_t is one rectangle. An encoder-decoder model (Megatron-LM's
 * and NeMo's --encoder-tensor-model-parallel-size and
 * --encoder-pipeline-model-parallel-size) runs the encoder on one rectangle
 * and the decoder on another: encoder ranks first, then decoder ranks, each
 * with its own tp, pp and dp. A mesh_grid_t holds such rectangles
 * ("meshes"), each a rank layout of its own (order string, sizes) whose
 * local rank 0 sits at a world-rank offset. Together the meshes tile the
 * world 0 .. world-1, each rank in exactly one mesh.
 *
 * Inside a mesh everything is as in grid.h: a coordinate and a group along
 * every axis, made of world ranks. Across meshes, groups come from rank
 * selections: mesh_select picks a mesh's ranks by coordinates (MESH_ANY,
 * MESH_LAST), and a group is the union of selections - the "bridge" that
 * hands the encoder's output to the decoder's first stage, or Megatron's
 * embedding group joining the first and last pipeline stages.
 *
 *   mesh_spec_t s[2] = {
 *       {"encoder", "tp-cp-ep-dp-pp", {1, 1, 1, 1, 1, 2, 1}, 0},   // world ranks 0,1
 *       {"decoder", "tp-cp-ep-dp-pp", {2, 1, 1, 1, 1, 2, 1}, 2}};  // world ranks 2..5
 *   static mesh_grid_t G;                                    // ~130 KiB: not on a stack
 *   mesh_grid_init(&G, s, 2, 6, &err);
 *   // for each dp d: {encoder tp=0 pp=last, dp=d} + {decoder pp=0, dp=d, every tp}
 *   mesh_sel_t b[2] = {{0, {0, 0, 0, 0, 0, MESH_ANY, MESH_LAST}},
 *                      {1, {MESH_ANY, 0, 0, 0, 0, MESH_ANY, 0}}};
 *   group_t *bridge[2];                          // [0,2,3] [1,4,5]
 *   mesh_bridge_create_all(&G, GRID_DP, b, 2, "bridge", bridge, &err);
 *   ... in a device thread:
 *   mesh_device_t d = mesh_device(&G, device_self()->rank);
 *   coll_all_reduce(d.group[GRID_TP], ...);      // within its own mesh
 */
#ifndef PARITY_MESH_H
#define PARITY_MESH_H

#include "parity/error.h"
#include "parity/grid.h"
#include "parity/runtime.h"

#define MESH_MAX 8

/* Coordinates in a mesh_sel_t / mesh_select besides 0 .. size-1. */
#define MESH_ANY  (-1) /* every coordinate along the axis */
#define MESH_LAST (-2) /* size-1: the last pipeline stage, the last tp rank */

/* What the caller asks for; strings are copied. */
typedef struct {
    const char *name;       /* "encoder", "decoder", "A": in every message and group name */
    const char *order;      /* Megatron order, first axis fastest, e.g. "tp-cp-ep-dp-pp" */
    int size[GRID_NAXES];   /* by grid_axis_t; each >= 1, > 1 only on axes the order names */
    int offset;             /* world rank of the mesh's local rank 0 */
} mesh_spec_t;

typedef struct {
    char name[32];
    char order[32];
    int size[GRID_NAXES];
    int offset, world;            /* world ranks offset .. offset+world-1 */
    rank_layout_t layout;         /* local ranks 0 .. world-1 */
    group_t **groups[GRID_NAXES]; /* [axis][layout group id], world ranks, named "decoder.tp0" */
    int ngroups[GRID_NAXES];
} mesh_t;

typedef struct mesh_grid {
    int nmesh, world;
    mesh_t mesh[MESH_MAX];        /* in the caller's order, whatever the offsets */
    group_t *all;                 /* every device: the loss and the gradient norm */
    /* A rank list (mesh_grid_init_mapped), or none (mapped 0): the meshes
     * tile positions 0 .. world-1 (offset + local rank) and rank_at[c] is
     * the world rank at position c; pos_of is its inverse. */
    int mapped;
    unsigned short rank_at[PARITY_MAX_DEVICES], pos_of[PARITY_MAX_DEVICES];
} mesh_grid_t;

/* One device's view, like grid_device_t. */
typedef struct {
    int rank;                     /* world */
    int mesh;                     /* index into G->mesh; -1 for a rank not in the grid */
    int local;                    /* rank within the mesh: rank - offset */
    int coord[GRID_NAXES];
    group_t *group[GRID_NAXES];   /* within the mesh; size 1 along an unused axis */
    int pp_prev, pp_next;         /* world ranks of the mesh's neighbouring stages, -1 at its ends */
} mesh_device_t;

/* n meshes (1 .. MESH_MAX) covering world ranks 0 .. world-1 exactly once
 * (world 0: up to the end of the last mesh). Errors name the mesh and the
 * field (name, order, a size, offset), or the first rank no mesh holds or
 * two meshes hold. On error nothing is left allocated. */
int  mesh_grid_init(mesh_grid_t *G, const mesh_spec_t *specs, int n, int world, perr_t *e);
/* mesh_grid_init with the meshes' positions placed by a rank list, as
 * --rank-list places one grid's (layout_init_mapped): ranks[c] is the
 * world rank at position c (mesh m's local rank l is position
 * offset_m + l), a permutation of 0 .. world-1; n 0: mesh_grid_init. Every
 * coordinate, group and selection below follows the list. */
int  mesh_grid_init_mapped(mesh_grid_t *G, const mesh_spec_t *specs, int n, int world,
                           const unsigned short *ranks, int nranks, perr_t *e);
void mesh_grid_free(mesh_grid_t *G);
/* Index of the mesh called name, or -1. */
int  mesh_find(const mesh_grid_t *G, const char *name);
mesh_device_t mesh_device(const mesh_grid_t *G, int rank);

/* Mesh `mesh`'s world ranks whose coordinate on every axis a is coord[a]
 * (MESH_ANY: any, MESH_LAST: the last), in the mesh's order (its first
 * axis fastest), into ranks_out (room for the mesh's world). Returns how
 * many, or -1 naming the mesh and the axis of a coordinate out of range. */
int  mesh_select(const mesh_grid_t *G, int mesh, const int coord[GRID_NAXES], int *ranks_out,
                 perr_t *e);

/* A group of any world ranks of the grid: group_create, refusing a rank
 * outside 0 .. G->world-1 or one given twice (the message names the group,
 * the entry and the rank). */
group_t *mesh_group_create(const mesh_grid_t *G, const int *ranks, int n, const char *name,
                           perr_t *e);

/* One selection of mesh_select. */
typedef struct {
    int mesh;
    int coord[GRID_NAXES];
} mesh_sel_t;

/* The group of the union of nsel selections, in their order (group index
 * 0 is the first selection's first rank: a broadcast root). Selections
 * that meet are refused, as a repeated rank. */
group_t *mesh_group_select(const mesh_grid_t *G, const mesh_sel_t *sel, int nsel, const char *name,
                           perr_t *e);
/* For each coordinate v along axis, the group of the selections with
 * coord[axis] := v, named prefix0, prefix1, ...: e.g. along dp, each data
 * parallel replica's encoder-to-decoder bridge. Every selected mesh must
 * have the same size along axis (the message names the two meshes).
 * out has room for that size; returns it, or -1 (nothing left allocated). */
int  mesh_bridge_create_all(const mesh_grid_t *G, grid_axis_t axis, const mesh_sel_t *sel, int nsel,
                            const char *prefix, group_t **out, perr_t *e);

#endif
