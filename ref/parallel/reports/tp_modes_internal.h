/* tp_modes_internal.h - the count of Colossal-AI's 2-D, 2.5-D and 3-D
 * tensor-parallel modes' collectives (tp_modes_count.c, the rules written
 * out there call by call) that their report (tp_modes_report.c) prints
 * next to the counters. */
#ifndef PARITY_TP_MODES_INTERNAL_H
#define PARITY_TP_MODES_INTERNAL_H

#include "model/gpt.h"
#include "parity/run_report.h"

/* device 0's tensor-parallel groups: rows, columns, 3-D's weights, the vectors' */
enum { G_TP, G_TP2, G_TP3, G_VEC, T2_NG };
enum { T2_ALL = (1u << T2_NG) - 1, T2_AXES = (1u << G_TP) | (1u << G_TP2) | (1u << G_TP3) };

typedef struct {
    double calls, elems, payload; /* payload: the blocks' own elements (padding excluded) */
} t2_cell_t;

typedef struct {
    t2_cell_t c[T2_NG][COLL_NKINDS][COLL_NDTYPES];
} t2_count_t;

typedef struct {
    int mode, q, d;        /* d: 2.5-D's depth, else 1 */
    double n;              /* device 0's tokens per microbatch */
    int T;                 /* positions: the position table's rows */
    int C, A, F, V;        /* device 0's blocks: hidden, attention, FFN, vocabulary */
    int vec;               /* the vectors' group: 2-D's column (G_TP2), 3-D's G_VEC */
    int members[T2_NG];    /* 0: no such group in this mode */
    const gpt_local_t *lc;
} t2_dims_t;

static inline int t2_three(const t2_dims_t *D) { return D->mode == PC_TP_3D; }

/* Totals over the groups in gmask (bit g: group g): elements of a kind
 * (-1: any), bytes, bus bytes (nccl-tests' factor over the group's
 * members), payload bytes. */
typedef struct {
    double calls, elems, bytes, bus, payload_bytes, bus_elems;
} t2_sum_t;

/* Device 0's dims: its blocks (gpt_local_dims at coordinate 0) and
 * tokens per microbatch. */
int t2_dims(const run_report_t *run, gpt_local_t *lc, t2_dims_t *D);
/* Device 0's collectives for one microbatch of its layers (layer), of its
 * embedding and head (outer) and per step (step). */
void t2_derive(const t2_dims_t *D, int L, int e, int hd, int m, int regather,
               t2_count_t *layer, t2_count_t *outer, t2_count_t *step);
t2_sum_t t2_sum(const t2_count_t *t, const t2_dims_t *D, int kind, unsigned gmask);
/* placement_split's largest piece of R rows over q: the padded piece a collective moves */
double t2_pad(int R, int q);
/* a vector group's padded piece of R rows (tp2d.c's piece_rows) */
double t2_vpad(const t2_dims_t *D, int R);

#endif
