/* oracle_internal.h - the oracle's state, shared by its three files:
 * oracle.c (open, the golden run, golden tensors), oracle_put.c (a
 * backend's blocks, their placements, reassembly) and oracle_compare.c
 * (the first divergence). */
#ifndef PARITY_ORACLE_INTERNAL_H
#define PARITY_ORACLE_INTERNAL_H

#include "parity/ckpt.h"
#include "parity/corpus.h"
#include "parity/dump.h"
#include "model/gpt.h"
#include "parity/oracle.h"

/* One block a rank put: where it lies in the global tensor, its bytes. */
typedef struct {
    int rank;
    int coord[ORACLE_MAX_MESH], mesh_ndim;
    int64_t lo[ST_MAX_DIMS], ext[ST_MAX_DIMS];
    unsigned char *data;
} oracle_piece_t;

/* Every block put of one golden tensor. */
typedef struct {
    char *name;      /* full name, "step0.loss" */
    long golden;     /* its index among the golden tensors */
    oracle_piece_t *p;
    int np, cap;
} oracle_slot_t;

struct oracle {
    model_config_t cfg;
    char *config_json;
    int default_steps;
    corpus_t data;
    int have_data;
    dump_t *dump;        /* a golden run in memory ... */
    st_file_t *file;     /* ... or a dump file */
    int golden_steps;    /* steps held; -1 before oracle_run_golden */
    ckpt_state_t start;  /* --load's or --weights' state (have_start); else the seeded init */
    int have_start;      /* from step start.step: the golden steps are named step<start.step>
                            ..., the global steps, as parity train --load --dump names them */
    oracle_slot_t *s;
    int ns, cap;
    unsigned char *asm_values; /* oracle_assembled's buffers */
    int32_t *asm_who;
};

/* The golden tensors, from either source: how many, the i-th (its data),
 * and the index of a full name (-1 when none). */
long        oracle_golden_count(const oracle_t *o);
const void *oracle_golden_at(const oracle_t *o, long i, st_tensor_t *t);
long        oracle_golden_find(const oracle_t *o, const char *name);

/* "step<s>.<name>", or name itself for step -1, into buf. */
int oracle_full_name(const char *name, int64_t step, char *buf, size_t cap, perr_t *err);

/* "[2,16,64]" for a message. */
void oracle_fmt_shape(int ndim, const int64_t *shape, char *buf, size_t cap);

/* Whether pl is a placement (mesh dimensions, sizes >= 1 whose product
 * is an int rank count, coordinates inside them, sharded axes of a
 * tensor of tensor_ndim axes; tensor_ndim -1: any axis >= 0). 0, or -1
 * with a message starting with `what`. */
int oracle_check_placement(const char *what, const oracle_placement_t *pl, int tensor_ndim,
                           perr_t *err);

/* Calls fn for every element of a piece (of golden tensor g) with its
 * global flat index and its index in the piece, in the piece's order. */
void oracle_piece_walk(const st_tensor_t *g, const oracle_piece_t *p,
                       void (*fn)(void *ctx, uint64_t global, uint64_t local), void *ctx);

#endif
