/* loss.c - cross-entropy over the vocabulary (MODEL.md, forward 4).
 *
 * The max is exact and the denominator an exact sum rounded once, so a
 * vocabulary split across ranks (vocab-parallel cross-entropy: a max, a
 * target logit and a sum of exps, each reduced) gives the same bits. The
 * 1/N of the mean is applied here, once, from the global token count. */
#include "parity/layers.h"

#include "parity/pmath.h"

void ce_row_max(float *m, const float *logits, int n, int V) {
    for (int i = 0; i < n; i++) {
        const float *row = logits + (size_t)i * V;
        float mx = row[0];
        for (int j = 1; j < V; j++) mx = row[j] > mx ? row[j] : mx;
        m[i] = mx;
    }
}

void ce_exp_sum(float *Z, xacc_t *zacc, const float *logits, const float *m, int n, int V,
                float *scratch) {
    for (int i = 0; i < n; i++) {
        pm_expf_shifted(scratch, logits + (size_t)i * V, m[i], (size_t)V);
        if (zacc) {
            xacc_init(&zacc[i]);
            xacc_add_array_f32(&zacc[i], scratch, (size_t)V);
        } else {
            Z[i] = sum_f32(scratch, (size_t)V);
        }
    }
}

void ce_target_logit(float *l, const float *logits, const int32_t *targets, int n, int V, int v0) {
    for (int i = 0; i < n; i++) {
        int j = targets[i] - v0;
        l[i] = j >= 0 && j < V ? logits[(size_t)i * V + j] : -0.0f;
    }
}

void ce_loss(float *loss, const float *m, const float *Z, const float *l, int n) {
    for (int i = 0; i < n; i++) loss[i] = (m[i] + pm_logf(Z[i])) - l[i];
}

void crossentropy_backward(float *dlogits, const float *logits, const int32_t *targets,
                           const float *m, const float *Z, int n, int V, int v0,
                           int64_t total_tokens, float *scratch) {
    const float N = (float)total_tokens;
    for (int i = 0; i < n; i++) {
        const float *row = logits + (size_t)i * V;
        float *drow = dlogits + (size_t)i * V;
        pm_expf_shifted(scratch, row, m[i], (size_t)V);
        const int t = targets[i] - v0;
        for (int j = 0; j < V; j++) {
            float p = scratch[j] / Z[i];
            drow[j] = (j == t ? p - 1.0f : p) / N;
        }
    }
}
