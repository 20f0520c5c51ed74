/* moe.h - an MoE layer's MLP: its activations (layer_acts_t.moe) and its
 * own scratch (gpt_scratch_t.moe), laid out by moe.c. Routing, capacity,
 * the combine and the router's backward are moe.c's (the model's
 * semantics); where the experts run on their rows is the experts' dispatch
 * style's (model/styles/experts.h). Shapes: n = b*T tokens of the slot's
 * whole sequences, E experts, k choices a token, R the experts' input rows
 * (moe_rows), F the experts' FFN columns held. */
#ifndef PARITY_MODEL_UNITS_MOE_H
#define PARITY_MODEL_UNITS_MOE_H

#include "model/gpt.h"

/* An MoE layer's activations for one slot: the router's logits and
 * softmax over every expert, each token's k choices (best first), their
 * weights, whether each is within capacity and its row in the experts'
 * input; the experts' rows (per expert, per sequence, whole token tiles)
 * through fc1, GeLU and fc2; the weighted sum. */
typedef struct moe_acts {
    float *logits, *probs;         /* [n,E] */
    int32_t *choice;               /* [n,k] */
    float *weight;                 /* [n,k] */
    uint8_t *kept;                 /* [n,k] */
    int32_t *row;                  /* [n,k] -1: dropped */
    int32_t *rows_of;              /* [E+1] expert e's rows: [rows_of[e], rows_of[e+1]) */
    float *x, *fc1, *h, *hgrad, *y; /* [R,C] [R,F] [R,F] [R,F] [R,C] */
    float *out;                    /* [n,C] combined, before dropout: every position of the
                                      slot's sequences */
    float *out_held;               /* [ns,C] its positions held (sequence or context parallel;
                                      else out) */
    float *in;                     /* [n,C] the MoE input of every position, gathered over cp
                                      (context parallel; else ln2_full) */
    void *dispatch;                /* the dispatch style's own (experts_layout_acts), or NULL */
} moe_acts_t;

/* The MoE's backward scratch, shared by the slots: the experts' rows'
 * output and input gradients [R,C] (the dispatch style reads the one and
 * writes the other), the router's logit and weight gradients [n,E] [n,k]
 * and its input gradient [n,C], one slot's claims on an expert; where the
 * layer holds some positions only (sequence or context parallel), the
 * input's gradient over every position [n,C], and under context
 * parallelism the output's gradient gathered over cp and the gather's
 * parts [n,C]. */
typedef struct moe_scratch {
    float *dy, *dx;
    float *dlogits, *dweight, *dx_router;
    struct moe_claim *claims;
    float *dx_full, *dout, *cp_parts;
} moe_scratch_t;

/* *out := the MoE's scratch carved from cv (measures when cv->base is
 * NULL; NULL without experts). */
void moe_layout_scratch(moe_scratch_t **out, const model_config_t *c, const gpt_local_t *lc,
                        carver_t *cv);

#endif
