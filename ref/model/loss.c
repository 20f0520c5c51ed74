/* loss.c - cross-entropy over the vocabulary (MODEL.md, forward 4).
 *
 * The max is exact and the denominator an exact sum rounded once, so a
 * vocabulary split across ranks (vocab-parallel cross-entropy: a max, a
 * target logit and a sum of exps, each reduced) gives the same bits. The
 * 1/N of the mean is applied here, once, from the global token count. */
#include "parity/layers.h"

#include "parity/pmath.h"

/* e[j] = exp(logits[j] - m) into scratch; returns Z = round(sum e), and m. */
static float softmax_terms(const float *row, int V, float *e, float *m_out) {
    float m = row[0];
    for (int j = 1; j < V; j++) m = row[j] > m ? row[j] : m;
    pm_expf_shifted(e, row, m, (size_t)V);
    *m_out = m;
    return sum_f32(e, (size_t)V);
}

void crossentropy_forward(float *loss, const float *logits, const int32_t *targets, int n,
                          int V, float *scratch) {
    for (int i = 0; i < n; i++) {
        const float *row = logits + (size_t)i * V;
        float m, Z = softmax_terms(row, V, scratch, &m);
        float lse = m + pm_logf(Z);
        loss[i] = lse - row[targets[i]];
    }
}

void crossentropy_backward(float *dlogits, const float *logits, const int32_t *targets, int n,
                           int V, int64_t total_tokens, float *scratch) {
    const float N = (float)total_tokens;
    for (int i = 0; i < n; i++) {
        const float *row = logits + (size_t)i * V;
        float *drow = dlogits + (size_t)i * V;
        float m, Z = softmax_terms(row, V, scratch, &m);
        for (int j = 0; j < V; j++) {
            float p = scratch[j] / Z;
            drow[j] = (j == targets[i] ? p - 1.0f : p) / N;
        }
    }
}
