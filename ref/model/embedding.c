/* embedding.c - token + learned position embeddings (MODEL.md, forward 1).
 *
 * The backward scatters each token's gradient row into the rows of the
 * tables it came from. Several tokens can hit the same row, in any
 * order and on any rank: the sums are exact, so that order is free. */
#include "parity/layers.h"

#include <stddef.h>

void embedding_forward(float *x, const int32_t *tokens, int n_seq, int T, int C,
                       const float *wte, const float *wpe) {
    for (int s = 0; s < n_seq; s++)
        for (int t = 0; t < T; t++) {
            size_t i = (size_t)s * T + t;
            const float *we = wte + (size_t)tokens[i] * C;
            const float *pe = wpe + (size_t)t * C;
            float *xi = x + i * C;
            for (int c = 0; c < C; c++) xi[c] = we[c] + pe[c];
        }
}

void embedding_backward(acc_t *dwte, acc_t *dwpe, const float *dx, const int32_t *tokens,
                        int n_seq, int T, int C) {
    for (int s = 0; s < n_seq; s++)
        for (int t = 0; t < T; t++) {
            size_t i = (size_t)s * T + t;
            acc_add(dwte, (size_t)tokens[i] * C, dx + i * C, (size_t)C);
            acc_add(dwpe, (size_t)t * C, dx + i * C, (size_t)C);
        }
}
