/* embedding.c - token + learned position embeddings (MODEL.md, forward 1).
 *
 * The forward is a lookup then a position add, one fp32 add per element
 * (we + pe); a vocabulary-parallel rank looks up only the rows it holds
 * and fills the others with -0, the identity of IEEE addition, so the
 * tensor-parallel sum of the lookups is the owner's row, bit for bit,
 * before the same add. The backward scatters each token's gradient row
 * into the rows of the tables it came from. Several tokens can hit the
 * same row, in any order and on any rank: the sums are exact, so that
 * order is free. */
#include "parity/layers.h"

#include <stddef.h>

void embedding_lookup(float *x, const int32_t *tokens, int n, int C, const float *wte, int v0,
                      int nv) {
    for (int i = 0; i < n; i++) {
        float *xi = x + (size_t)i * C;
        int r = tokens[i] - v0;
        if (r >= 0 && r < nv) {
            const float *we = wte + (size_t)r * C;
            for (int c = 0; c < C; c++) xi[c] = we[c];
        } else {
            for (int c = 0; c < C; c++) xi[c] = -0.0f;
        }
    }
}

void embedding_add_positions(float *x, int n_seq, int Tl, int t0, int C, const float *wpe) {
    for (int s = 0; s < n_seq; s++)
        for (int t = 0; t < Tl; t++) {
            float *xi = x + ((size_t)s * Tl + t) * C;
            const float *pe = wpe + (size_t)(t0 + t) * C;
            for (int c = 0; c < C; c++) xi[c] = xi[c] + pe[c];
        }
}

void embedding_backward(acc_t *dwte, acc_t *dwpe, const float *dx, const int32_t *tokens,
                        int n_seq, int T, int t0, int C, int v0, int nv) {
    for (int s = 0; s < n_seq; s++)
        for (int t = 0; t < T; t++) {
            size_t i = (size_t)s * T + t;
            int r = tokens[i] - v0;
            if (r >= 0 && r < nv) acc_add(dwte, (size_t)r * C, dx + i * C, (size_t)C);
            acc_add(dwpe, (size_t)(t0 + t) * C, dx + i * C, (size_t)C);
        }
}
