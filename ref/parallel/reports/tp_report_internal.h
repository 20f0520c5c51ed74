/* tp_report_internal.h - what the 1-D report (tp_report.c) shares with the
 * report of Colossal-AI's 2-D, 2.5-D and 3-D modes (tp_modes_report.c). */
#ifndef PARITY_TP_REPORT_INTERNAL_H
#define PARITY_TP_REPORT_INTERNAL_H

#include <stdio.h>

#include "model/gpt.h"
#include "parity/run_report.h"

enum { MAX_TERMS = 8 };

/* One row of the formula: a collective on a dtype, per microbatch. */
typedef struct {
    coll_kind_t kind;
    coll_dtype_t dt;
    long calls;        /* per microbatch */
    long nh, n, h;     /* elements per microbatch: nh [b·s, h] + n [b·s] + h [h] */
    const char *what;
    long nf;           /* + nf [b·s, ffn] */
} tp_term_t;

/* The step of device 0: m microbatches over `tokens` tokens in all, its
 * L layers, whether it holds the embedding (e) and the head (hd). */
typedef struct {
    int tp, sp, rows, L, e, hd, h, ffn, m;
    double tokens;
    const coll_family_t *fam; /* device 0's "tp" tallies, or NULL */
    double steps;
    const coll_family_t *fam2; /* 2-D: device 0's "tp2" tallies when they count apart, or NULL */
    const coll_family_t *fam3; /* 3-D: device 0's vector groups' ("tp-vec"), or NULL */
    int R;                     /* of the L layers, those full recomputation runs forward again
                                  (gpt_recomputed_layers) */
    int Rb;                    /* their blocks (attention blocks and MLPs: 2 a GPT layer, 3 a
                                  T5 decoder layer; gpt_recomputed_blocks) */
} tp_step_t;

/* Megatron's 1-D terms of device 0 (L layers, e: the embedding, hd: the
 * head; R of the layers recomputed whole, their forward's collectives
 * again in the backward: one per block of the Rb blocks they hold, two
 * with every linear row-parallel), into t [MAX_TERMS]; their count. */
int tp_terms(int L, int e, int hd, int sp, int rows, int R, int Rb, tp_term_t *t);
double tp_term_elements(const tp_term_t *t, const tp_step_t *s);
/* device 0's tallies of a kind and dtype over its tensor-parallel families */
coll_tally_t tp_measured(const tp_step_t *s, coll_kind_t k, coll_dtype_t d);
/* what exactness adds: the open sums' fp64 over fp32 and the slow elements */
void tp_print_exactness(const tp_step_t *s, FILE *f);
/* Device 0's units: layers L, the embedding e, the head hd. */
void tp_device0_units(const run_report_t *run, int *L, int *e, int *hd);
/* The 2-D, 2.5-D and 3-D modes' traffic and memory (tp_modes_report.c). */
void tp_modes_print_report(const run_report_t *run, FILE *f);

#endif
