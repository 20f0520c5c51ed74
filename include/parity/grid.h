/* grid.h - the device grid of a parallel run: who is where, with whom.
 *
 * One rank layout (Megatron's order string, first dimension fastest, e.g.
 * "tp-cp-ep-dp-pp") and the process groups of every axis, built once by
 * the main thread before the devices start. A device looks itself up
 * (grid_device) and finds its coordinate and its group along each axis,
 * and its pipeline neighbours. Groups are made of world ranks, so later
 * non-rectangular grids (an encoder beside a decoder) can hand devices
 * groups of any shape through the same grid_device_t. A rank list
 * (grid_init_mapped) places the order's positions on any world ranks.
 *
 *   grid_t G;
 *   grid_init(&G, "tp-cp-ep-dp-pp", (int[GRID_NAXES]){tp, 1, 1, cp, ep, dp, pp}, &err);
 *   ... in a device thread:
 *   grid_device_t d = grid_device(&G, device_self());
 *   coll_all_reduce(d.group[GRID_TP], ...);
 */
#ifndef PARITY_GRID_H
#define PARITY_GRID_H

#include "parity/error.h"
#include "parity/runtime.h"

/* GRID_TP2 and GRID_TP3 are tensor parallelism's sub-axes (Colossal-AI's
 * 2-D, 2.5-D and 3-D modes, pconfig.h's tp_mode); with 1-D tensor
 * parallelism they have size 1 and GRID_TP is the whole tp group. Their
 * meaning by mode (the stream's features are always cut over GRID_TP, its
 * sequences over GRID_TP2 x GRID_TP3):
 *   2-D   tp: column (its groups are the rows)   tp2: row      tp3: -
 *   2.5-D tp: column                              tp2: row      tp3: depth
 *   3-D   tp: output                              tp2: input    tp3: weight
 * An order string's "tp" stands for "tp-tp2-tp3" (tp fastest). */
typedef enum {
    GRID_TP, GRID_TP2, GRID_TP3, GRID_CP, GRID_EP, GRID_DP, GRID_PP, GRID_NAXES
} grid_axis_t;

/* "tp", "tp2", "tp3", "cp", "ep", "dp", "pp". */
const char *grid_axis_name(grid_axis_t a);

typedef struct {
    rank_layout_t layout;
    char order[32];
    int size[GRID_NAXES];
    int world;
    group_t **groups[GRID_NAXES]; /* [axis][group id] */
    int ngroups[GRID_NAXES];
    group_t *all;                 /* every device: the loss and the gradient norm */
} grid_t;

/* One device's view. */
typedef struct {
    int rank;
    int coord[GRID_NAXES];
    group_t *group[GRID_NAXES];   /* never NULL; a size-1 group along an unused axis */
    int pp_prev, pp_next;         /* world ranks of the neighbouring stages, -1 at the ends */
} grid_device_t;

/* sizes[a] >= 1 for every axis; order names each axis at most once (an
 * axis it leaves out must have size 1). Errors name the axis. */
int  grid_init(grid_t *G, const char *order, const int sizes[GRID_NAXES], perr_t *err);
/* grid_init with an explicit rank list (layout_init_mapped): ranks[c] is
 * the world rank at the order's canonical position c, n = the world;
 * n 0: grid_init. Device d keeps world rank d; the list decides
 * its coordinates, and so every group along every axis. */
int  grid_init_mapped(grid_t *G, const char *order, const int sizes[GRID_NAXES],
                      const unsigned short *ranks, int n, perr_t *err);
void grid_free(grid_t *G);
grid_device_t grid_device(const grid_t *G, int rank);
/* "tp=2 dp=4 (order tp-cp-ep-dp-pp)" */
void grid_describe(const grid_t *G, char *buf, size_t cap);

#endif
