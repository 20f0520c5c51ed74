/* placement.c - blocks of global tensors (placement.h). */
#include "parity/placement.h"

#include <string.h>

placement_t placement_replicated(int ndim, const int64_t *shape) {
    placement_t p;
    memset(&p, 0, sizeof p);
    p.ndim = ndim;
    for (int d = 0; d < ndim; d++) p.shape[d] = shape[d];
    return p;
}

placement_t placement_cut(placement_t p, int axis, grid_axis_t over, int align) {
    if (p.ncuts < PL_MAX_CUTS) p.cut[p.ncuts++] = (pl_cut_t){axis, over, align > 0 ? align : 1, 0, 0};
    return p;
}

placement_t placement_cut_uneven(placement_t p, int axis, grid_axis_t over, int align) {
    if (p.ncuts < PL_MAX_CUTS) p.cut[p.ncuts++] = (pl_cut_t){axis, over, align > 0 ? align : 1, 1, 0};
    return p;
}

placement_t placement_cut_parts(placement_t p, int axis, grid_axis_t over, int align, int parts) {
    if (p.ncuts < PL_MAX_CUTS)
        p.cut[p.ncuts++] = (pl_cut_t){axis, over, align > 0 ? align : 1, 1, parts > 0 ? parts : 0};
    return p;
}

int placement_cut_pieces(const pl_cut_t *c, const int sizes[GRID_NAXES]) {
    return c->parts > 0 ? c->parts : sizes[c->over];
}

int placement_cut_piece(const pl_cut_t *c, const int sizes[GRID_NAXES], const int coord[GRID_NAXES]) {
    return coord[c->over] % placement_cut_pieces(c, sizes);
}

void placement_split(int64_t units, int parts, int part, int64_t *first, int64_t *count) {
    const int64_t base = units / parts, more = units % parts;
    *count = base + (part < more);
    *first = part * base + (part < more ? part : more);
}

int placement_check(const placement_t *p, const int sizes[GRID_NAXES], const char *name,
                    perr_t *err) {
    int64_t ext[PL_MAX_DIMS];
    for (int d = 0; d < p->ndim; d++) ext[d] = p->shape[d];
    for (int k = 0; k < p->ncuts; k++) {
        const pl_cut_t *c = &p->cut[k];
        const int parts = placement_cut_pieces(c, sizes);
        if (sizes[c->over] % parts)
            return perr_set(err, "%s: %d pieces over %s=%d ranks: expected a divisor", name, parts,
                            grid_axis_name(c->over), sizes[c->over]);
        if (c->axis < 0 || c->axis >= p->ndim)
            return perr_set(err, "%s: cut along axis %d of a %d-D tensor", name, c->axis, p->ndim);
        int64_t units = ext[c->axis] / c->align;
        if (c->uneven && ext[c->axis] % c->align == 0 && units % parts) {
            if (units < parts)
                return perr_set(err,
                                "%s: %lld %s of %d along axis %d cannot give each of %s=%d ranks a "
                                "whole tile (I1)",
                                name, (long long)units, units == 1 ? "tile" : "tiles", c->align,
                                c->axis, grid_axis_name(c->over), parts);
            /* the largest piece (rank 0's) bounds a nested cut's check */
            ext[c->axis] = (units / parts + 1) * c->align;
            continue;
        }
        if (ext[c->axis] % c->align || units % parts)
            return perr_set(err,
                            "%s: %s=%d must divide its %lld %s of %d along axis %d (extent %lld): "
                            "a device holds whole canonical tiles (I1)",
                            name, grid_axis_name(c->over), parts, (long long)units,
                            units == 1 ? "block" : "blocks", c->align, c->axis,
                            (long long)ext[c->axis]);
        ext[c->axis] /= parts;
    }
    return 0;
}

void placement_block(const placement_t *p, const int sizes[GRID_NAXES],
                     const int coord[GRID_NAXES], int64_t lo[PL_MAX_DIMS],
                     int64_t extent[PL_MAX_DIMS]) {
    for (int d = 0; d < PL_MAX_DIMS; d++) {
        lo[d] = 0;
        extent[d] = d < p->ndim ? p->shape[d] : 1;
    }
    for (int k = 0; k < p->ncuts; k++) {
        const pl_cut_t *c = &p->cut[k];
        int64_t first, count;
        placement_split(extent[c->axis] / c->align, placement_cut_pieces(c, sizes),
                        placement_cut_piece(c, sizes, coord), &first, &count);
        extent[c->axis] = count * c->align;
        lo[c->axis] += first * c->align;
    }
}

size_t placement_global_numel(const placement_t *p) {
    size_t n = 1;
    for (int d = 0; d < p->ndim; d++) n *= (size_t)p->shape[d];
    return n;
}

size_t placement_local_numel(const placement_t *p, const int sizes[GRID_NAXES]) {
    int64_t lo[PL_MAX_DIMS], ext[PL_MAX_DIMS];
    const int zero[GRID_NAXES] = {0};
    placement_block(p, sizes, zero, lo, ext);
    size_t n = 1;
    for (int d = 0; d < p->ndim; d++) n *= (size_t)ext[d];
    return n;
}

int placement_is_extra_replica(const placement_t *p, const int sizes[GRID_NAXES],
                               const int coord[GRID_NAXES]) {
    for (int a = 0; a < GRID_NAXES; a++) {
        /* the pipeline axis holds different units, not copies: a stage
         * holds its own tensors (param_info_t.held) */
        if (a == GRID_PP || sizes[a] == 1 || coord[a] == 0 || (p->partial >> a & 1u)) continue;
        int cuts = 0;
        for (int k = 0; k < p->ncuts; k++)
            if (p->cut[k].over == (grid_axis_t)a)
                cuts |= coord[a] < placement_cut_pieces(&p->cut[k], sizes) ? 1 : 2;
        if (cuts != 1) return 1; /* not cut, or a copy of a piece of fewer than the axis's ranks */
    }
    return 0;
}

void placement_for_runs(const placement_t *p, const int sizes[GRID_NAXES],
                        const int coord[GRID_NAXES],
                        void (*run)(void *ctx, size_t global_flat, size_t local_flat, size_t n),
                        void *ctx) {
    int64_t lo[PL_MAX_DIMS], ext[PL_MAX_DIMS], gstride[PL_MAX_DIMS];
    placement_block(p, sizes, coord, lo, ext);
    const int nd = p->ndim > 0 ? p->ndim : 1;
    int64_t shape[PL_MAX_DIMS];
    for (int d = 0; d < nd; d++) shape[d] = p->ndim > 0 ? p->shape[d] : 1;
    gstride[nd - 1] = 1;
    for (int d = nd - 2; d >= 0; d--) gstride[d] = gstride[d + 1] * shape[d + 1];
    size_t rows = 1;
    for (int d = 0; d < nd - 1; d++) rows *= (size_t)ext[d];
    const size_t len = (size_t)ext[nd - 1];
    for (size_t r = 0; r < rows; r++) {
        /* r -> the block coordinates of the row, last row axis fastest */
        size_t rem = r, g = (size_t)lo[nd - 1];
        for (int d = nd - 2; d >= 0; d--) {
            size_t i = rem % (size_t)ext[d];
            rem /= (size_t)ext[d];
            g += ((size_t)lo[d] + i) * (size_t)gstride[d];
        }
        run(ctx, g, r * len, len);
    }
}

typedef struct {
    float *dst;
    const float *src;
    int to_global;
    int64_t first_diff;
    size_t local_diff;
} copy_ctx_t;

static void copy_run(void *vctx, size_t g, size_t l, size_t n) {
    copy_ctx_t *c = vctx;
    if (c->to_global)
        memcpy(c->dst + g, c->src + l, n * sizeof(float));
    else
        memcpy(c->dst + l, c->src + g, n * sizeof(float));
}

void placement_put(const placement_t *p, const int sizes[GRID_NAXES], const int coord[GRID_NAXES],
                   const float *local, float *global) {
    copy_ctx_t c = {global, local, 1, -1, 0};
    placement_for_runs(p, sizes, coord, copy_run, &c);
}

void placement_take(const placement_t *p, const int sizes[GRID_NAXES], const int coord[GRID_NAXES],
                    const float *global, float *local) {
    copy_ctx_t c = {local, global, 0, -1, 0};
    placement_for_runs(p, sizes, coord, copy_run, &c);
}

static void compare_run(void *vctx, size_t g, size_t l, size_t n) {
    copy_ctx_t *c = vctx;
    if (c->first_diff >= 0 || !memcmp(c->src + l, c->dst + g, n * sizeof(float))) return;
    for (size_t i = 0; i < n; i++)
        if (memcmp(c->src + l + i, c->dst + g + i, sizeof(float))) {
            c->first_diff = (int64_t)(g + i);
            c->local_diff = l + i;
            return;
        }
}

int64_t placement_compare(const placement_t *p, const int sizes[GRID_NAXES],
                          const int coord[GRID_NAXES], const float *local, const float *global,
                          size_t *local_index) {
    copy_ctx_t c = {(float *)global, local, 0, -1, 0};
    placement_for_runs(p, sizes, coord, compare_run, &c);
    if (local_index) *local_index = c.local_diff;
    return c.first_diff;
}

size_t placement_global_index(const placement_t *p, const int sizes[GRID_NAXES],
                              const int coord[GRID_NAXES], size_t local_flat) {
    int64_t lo[PL_MAX_DIMS], ext[PL_MAX_DIMS];
    placement_block(p, sizes, coord, lo, ext);
    size_t g = 0, rem = local_flat, stride = 1;
    size_t gstride[PL_MAX_DIMS];
    for (int d = p->ndim - 1; d >= 0; d--) {
        gstride[d] = stride;
        stride *= (size_t)p->shape[d];
    }
    for (int d = p->ndim - 1; d >= 0; d--) {
        size_t i = rem % (size_t)ext[d];
        rem /= (size_t)ext[d];
        g += ((size_t)lo[d] + i) * gstride[d];
    }
    return g;
}
