/* placement.h - where the pieces of a global tensor live, as in PyTorch's
 * DTensor: sharded along tensor axes over grid axes, replicated over the
 * rest, or holding partial sums.
 *
 * A placement is data, so the generic operations are written once:
 * the block a device holds, initialisation keyed by global index (every
 * shard equals the golden slice, I3), reassembly of the global tensor
 * (with every replica compared against the copy taken), resharding for
 * checkpoints, and which device's copy counts in a global norm (a
 * replicated tensor counts once, not once per replica).
 *
 * Cuts nest: cut k divides the piece left by cuts 0..k-1 along its axis
 * into `parts` pieces of whole `align` blocks, taking piece coord[over].
 * The pieces are equal, or, for a cut marked `uneven` whose block count
 * does not divide by parts, whole blocks of unequal counts: Megatron's
 * rule, the first (count mod parts) ranks hold one block more
 * (placement_split), so rank 0 always holds a largest piece. 2D tensor
 * parallelism cuts one weight twice (rows over one group, columns over
 * another); 1D cuts once:
 *
 *   column-parallel W [out,in]:  {.axis = 0, .over = GRID_TP, .align = tile}
 *   row-parallel    W [out,in]:  {.axis = 1, .over = GRID_TP, .align = tile}
 *   vocab-parallel wte [V,C]:    {.axis = 0, .over = GRID_TP, .align = tile}
 *
 * The sizes come from the grid (grid.h); a device's position is its
 * grid coordinate vector.
 */
#ifndef PARITY_PLACEMENT_H
#define PARITY_PLACEMENT_H

#include <stddef.h>
#include <stdint.h>

#include "parity/error.h"
#include "parity/grid.h"

#define PL_MAX_DIMS 4
#define PL_MAX_CUTS 4

typedef struct {
    int axis;        /* tensor axis that is cut */
    grid_axis_t over;/* the grid axis whose group holds the pieces */
    int align;       /* every piece is a multiple of this along the axis
                        (a canonical tile, a whole head): I1 */
    int uneven;      /* 1: pieces may hold unequal numbers of whole blocks */
    int parts;       /* 0: sizes[over] pieces, piece coord[over]; else `parts`
                        pieces (dividing sizes[over]), piece coord[over] mod parts,
                        the ranks at coord >= parts holding copies (expert tensor
                        parallelism over a divisor of tp: placement_cut_parts) */
} pl_cut_t;

typedef struct {
    int ndim;
    int64_t shape[PL_MAX_DIMS]; /* global */
    int ncuts;
    pl_cut_t cut[PL_MAX_CUTS];
    unsigned partial;           /* bit a: partial sums over grid axis a */
} placement_t;

/* A replicated tensor of the given global shape. */
placement_t placement_replicated(int ndim, const int64_t *shape);
/* p with one more cut (equal pieces), or one that may be uneven. */
placement_t placement_cut(placement_t p, int axis, grid_axis_t over, int align);
placement_t placement_cut_uneven(placement_t p, int axis, grid_axis_t over, int align);
/* An uneven cut into `parts` pieces along `over`, rank coord[over] taking
 * piece coord[over] mod parts. */
placement_t placement_cut_parts(placement_t p, int axis, grid_axis_t over, int align, int parts);
/* How many pieces cut c makes, and which one coordinate `coord` holds. */
int placement_cut_pieces(const pl_cut_t *c, const int sizes[GRID_NAXES]);
int placement_cut_piece(const pl_cut_t *c, const int sizes[GRID_NAXES], const int coord[GRID_NAXES]);

/* Piece `part` of `units` whole blocks over `parts` ranks: blocks
 * [*first, *first + *count), the first units % parts ranks holding one
 * more (equal pieces when parts divides units). */
void placement_split(int64_t units, int parts, int part, int64_t *first, int64_t *count);

/* Whether the placement can be realised on a grid with these axis
 * sizes; the message names the tensor (`name`) and says what must divide
 * what (an uneven cut: that every rank gets a whole block). */
int placement_check(const placement_t *p, const int sizes[GRID_NAXES], const char *name,
                    perr_t *err);

/* The block held at grid coordinate `coord`: its first global index and
 * its extent along every axis. */
void   placement_block(const placement_t *p, const int sizes[GRID_NAXES],
                       const int coord[GRID_NAXES], int64_t lo[PL_MAX_DIMS],
                       int64_t extent[PL_MAX_DIMS]);
/* The elements of the block held at coordinate 0 (a largest block). */
size_t placement_local_numel(const placement_t *p, const int sizes[GRID_NAXES]);
size_t placement_global_numel(const placement_t *p);

/* Whether a device holds one of several identical copies that is not the
 * first (a nonzero coordinate along a grid axis of size > 1 that neither
 * cuts the tensor nor holds partial sums; the pipeline axis never: stages
 * hold different units, and a copy one shares with another (the tied
 * word embedding) is the caller's rule): such a copy must be left out
 * of global sums such as the gradient norm, and is compared, not copied,
 * on reassembly. */
int placement_is_extra_replica(const placement_t *p, const int sizes[GRID_NAXES],
                               const int coord[GRID_NAXES]);

/* Calls run(ctx, global_flat, local_flat, n) for each contiguous run of
 * the device's block (runs along the last axis), in local order. */
void placement_for_runs(const placement_t *p, const int sizes[GRID_NAXES],
                        const int coord[GRID_NAXES],
                        void (*run)(void *ctx, size_t global_flat, size_t local_flat, size_t n),
                        void *ctx);

/* The global flat index of element local_flat of the device's block. */
size_t placement_global_index(const placement_t *p, const int sizes[GRID_NAXES],
                              const int coord[GRID_NAXES], size_t local_flat);
/* local block -> its place in the global tensor. */
void placement_put(const placement_t *p, const int sizes[GRID_NAXES], const int coord[GRID_NAXES],
                   const float *local, float *global);
/* global tensor -> the device's block (initialising a shard from golden
 * values, loading a checkpoint onto another layout). */
void placement_take(const placement_t *p, const int sizes[GRID_NAXES], const int coord[GRID_NAXES],
                    const float *global, float *local);
/* memcmp of the device's block against the global tensor: -1 if equal,
 * else the global flat index of the first differing element (and, if
 * local_index is not NULL, its index in the block). */
int64_t placement_compare(const placement_t *p, const int sizes[GRID_NAXES],
                          const int coord[GRID_NAXES], const float *local, const float *global,
                          size_t *local_index);

#endif
