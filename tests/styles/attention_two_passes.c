/* attention_two_passes.c - a test-only attention style (attention.h): the
 * golden core (attention_local) run in two passes, over the first and the
 * second half of the slot's sequences. Exact by construction: every
 * (sequence, head) is its own core (its tiles, softmax rows and mask
 * draws are keyed by the global sequence, I3), so cutting the sequences
 * changes no tile product, no sum and no mask bit. It applies to a
 * tensor-parallel replica without context parallelism (some heads held),
 * so the golden run keeps the built-in style and `parity check` compares
 * the two. Registered ahead of the library's table by a constructor of
 * the `parity` program it is linked into (tests/styles_attention.mk); no
 * file under ref/ knows it.
 *
 * For its test (tests/test_styles_attention.sh): the first forward says
 * on stderr that it ran, and PARITY_TWO_PASSES_BREAK=1 adds 1 to one
 * context value, which the checker must catch. */
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>

#include "model/styles/attention.h"
#include "model/styles/style.h"

static int two_applies(const model_config_t *c, const gpt_local_t *lc) {
    return lc->cp == 1 && lc->heads < c->heads;
}

/* The pass and the core's activations of sequences [b0, b0 + nb): the
 * same tensors from sequence b0 on (qkv [nb, T, 3A], ctx [nb, T, A],
 * e, ehat, keep [nb, H, T, T], z [nb, H, T]). */
static void half_of(const pass_t *p, const attn_acts_t *LA, int b0, int nb, pass_t *q,
                    attn_acts_t *H) {
    const size_t T = (size_t)p->as.T, A = (size_t)p->as.C, heads = (size_t)p->as.H;
    const size_t rows = (size_t)b0 * T, cells = (size_t)b0 * heads * T;
    *q = *p;
    q->n_seq = nb, q->n = nb * p->Tc, q->as.n_seq = nb;
    *H = *LA;
    H->qkv += rows * 3 * A, H->core_qkv += rows * 3 * A;
    H->ctx += rows * A, H->core_ctx += rows * A;
    H->att_e += cells * T, H->att_ehat += cells * T, H->att_z += cells;
    if (H->att_keep) H->att_keep += cells * T;
}

static void two_forward(gpt_t *g, const pass_t *p, attn_acts_t *LA, uint64_t mask_stream,
                        int mask_seq) {
    static atomic_int said;
    const int first = p->n_seq / 2, cut[3] = {0, first, p->n_seq};
    for (int k = first ? 0 : 1; k < 2; k++) {
        pass_t q;
        attn_acts_t H;
        half_of(p, LA, cut[k], cut[k + 1] - cut[k], &q, &H);
        attention_local.forward(g, &q, &H, mask_stream, mask_seq + cut[k]);
    }
    if (!atomic_exchange(&said, 1))
        fprintf(stderr, "two-passes attention: %d + %d sequences\n", first, p->n_seq - first);
    const char *brk = getenv("PARITY_TWO_PASSES_BREAK");
    if (brk && *brk == '1') LA->ctx[0] += 1.0f;
}

static void two_backward(gpt_t *g, const pass_t *p, attn_acts_t *LA, float *dqkv,
                         const float *dctx) {
    const int first = p->n_seq / 2, cut[3] = {0, first, p->n_seq};
    const size_t row = (size_t)p->as.T * (size_t)p->as.C; /* one sequence of ctx */
    for (int k = first ? 0 : 1; k < 2; k++) {
        pass_t q;
        attn_acts_t H;
        half_of(p, LA, cut[k], cut[k + 1] - cut[k], &q, &H);
        attention_local.backward(g, &q, &H, dqkv + (size_t)cut[k] * 3 * row,
                                 dctx + (size_t)cut[k] * row);
    }
}

static const attention_style_t attention_two_passes = {
    .base = {.name = "two-passes", .family = STYLE_ATTENTION, .applies = two_applies,
             .layout_scratch = NULL},
    .comm = CP_RING,
    .layout_acts = NULL,
    .mask_rows = attention_slot_rows,
    .forward = two_forward,
    .backward = two_backward,
};

__attribute__((constructor)) static void register_two_passes(void) {
    if (style_register(&attention_two_passes.base)) abort();
}
