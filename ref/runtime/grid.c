/* grid.c - the device grid: groups along every axis of a rank layout. */
#include "parity/grid.h"

_Static_assert((int)GRID_NAXES == (int)DEVICE_DEBUG_AXES, "runtime.h's debug table holds grid coordinates");

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *const axis_names[GRID_NAXES] = {"tp", "tp2", "tp3", "cp", "ep", "dp", "pp"};

const char *grid_axis_name(grid_axis_t a) {
    return (unsigned)a < GRID_NAXES ? axis_names[a] : "?axis";
}

int grid_init(grid_t *G, const char *order, const int sizes[GRID_NAXES], perr_t *err) {
    return grid_init_mapped(G, order, sizes, NULL, 0, err);
}

/* order with its "tp" standing for tp's sub-axes, "tp-tp2-tp3", where they
 * have size > 1 and the order does not name them itself. */
static void expand_tp(char *out, size_t cap, const char *order, const int sizes[GRID_NAXES]) {
    snprintf(out, cap, "%s", order ? order : "");
    if ((sizes[GRID_TP2] <= 1 && sizes[GRID_TP3] <= 1) || !order || strstr(order, "tp2") ||
        strstr(order, "tp3"))
        return;
    for (const char *p = order; *p; p++) {
        if (p[0] != 't' || p[1] != 'p') continue;
        if ((p == order || p[-1] == '-') && (p[2] == 0 || p[2] == '-')) {
            snprintf(out, cap, "%.*stp-tp2-tp3%s", (int)(p - order), order, p + 2);
            return;
        }
    }
}

int grid_init_mapped(grid_t *G, const char *order, const int sizes[GRID_NAXES],
                     const unsigned short *ranks, int n, perr_t *err) {
    memset(G, 0, sizeof *G);
    expand_tp(G->order, sizeof G->order, order, sizes);
    order = G->order;
    /* sizes for the axes the order names, and for any axis > 1 (which
     * layout_init then refuses by name if the order leaves it out) */
    char spec[160];
    size_t used = 0;
    spec[0] = 0;
    for (int a = 0; a < GRID_NAXES; a++) {
        if (sizes[a] < 1)
            return perr_set(err, "%s: size %d, expected >= 1", axis_names[a], sizes[a]);
        G->size[a] = sizes[a];
        if (sizes[a] > 1 || (order && strstr(order, axis_names[a])))
            used += (size_t)snprintf(spec + used, sizeof spec - used, "%s%s=%d", used ? "," : "",
                                     axis_names[a], sizes[a]);
    }
    if (layout_init_mapped(&G->layout, order, spec, ranks, n, err)) return -1;
    G->world = G->layout.world;
    for (int a = 0; a < GRID_NAXES; a++) {
        int n = layout_num_groups(&G->layout, axis_names[a]);
        G->ngroups[a] = n;
        G->groups[a] = calloc((size_t)n, sizeof *G->groups[a]);
        if (!G->groups[a]) {
            grid_free(G);
            return perr_set(err, "grid: out of memory");
        }
        if (group_create_all(&G->layout, axis_names[a], axis_names[a], G->groups[a], err)) {
            free(G->groups[a]);
            G->groups[a] = NULL;
            grid_free(G);
            return -1;
        }
    }
    int *all = malloc((size_t)G->world * sizeof *all);
    for (int r = 0; all && r < G->world; r++) all[r] = r;
    G->all = all ? group_create(all, G->world, "world", err) : NULL;
    free(all);
    if (!G->all) {
        grid_free(G);
        return perr_set(err, "grid: cannot create the world group");
    }
    return 0;
}

void grid_free(grid_t *G) {
    for (int a = 0; a < GRID_NAXES; a++) {
        if (G->groups[a]) group_destroy_all(G->groups[a], G->ngroups[a]);
        free(G->groups[a]);
        G->groups[a] = NULL;
    }
    if (G->all) group_destroy(G->all);
    G->all = NULL;
}

grid_device_t grid_device(const grid_t *G, int rank) {
    grid_device_t d;
    memset(&d, 0, sizeof d);
    d.rank = rank;
    for (int a = 0; a < GRID_NAXES; a++) {
        d.coord[a] = layout_coord(&G->layout, rank, axis_names[a]);
        d.group[a] = G->groups[a][layout_group_id(&G->layout, rank, axis_names[a])];
    }
    const group_t *pp = d.group[GRID_PP];
    int s = d.coord[GRID_PP];
    d.pp_prev = s > 0 ? group_world_rank(pp, s - 1) : -1;
    d.pp_next = s + 1 < G->size[GRID_PP] ? group_world_rank(pp, s + 1) : -1;
    return d;
}

void grid_describe(const grid_t *G, char *buf, size_t cap) {
    size_t used = 0;
    buf[0] = 0;
    for (int a = 0; a < GRID_NAXES && used < cap; a++)
        if (G->size[a] > 1)
            used += (size_t)snprintf(buf + used, cap - used, "%s=%d ", axis_names[a], G->size[a]);
    if (used < cap)
        snprintf(buf + used, cap - used, "(order %s%s, %d device%s)", G->order,
                 G->layout.mapped ? " with a rank list" : "", G->world, G->world == 1 ? "" : "s");
}
