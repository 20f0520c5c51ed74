/* data.c - byte-level samples of a text file (corpus.h). */
#include "parity/corpus.h"
#include "parity/fileio.h"
#include "model/gpt.h"
#include "parity/rng.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

int corpus_load(corpus_t *c, const char *path, perr_t *err) {
    memset(c, 0, sizeof *c);
    snprintf(c->path, sizeof c->path, "%s", path);
    long long len;
    FILE *f = pio_open_input(path, "data file", &len, err);
    if (!f) return -1;
    c->bytes = malloc(len > 0 ? (size_t)len : 1);
    if (!c->bytes) {
        fclose(f);
        return perr_set(err, "data file '%s': out of memory for %lld bytes", path, len);
    }
    c->n = fread(c->bytes, 1, (size_t)len, f);
    int bad = ferror(f) || c->n != (size_t)len;
    fclose(f);
    if (bad) {
        corpus_free(c);
        return perr_set(err, "data file '%s': read error", path);
    }
    return 0;
}

void corpus_free(corpus_t *c) {
    free(c->bytes);
    c->bytes = NULL;
    c->n = 0;
}

static int readable(const char *p) { return access(p, R_OK) == 0; }

int corpus_default_path(char *path, size_t cap, perr_t *err) {
    static const char *rel = "ref/data/corpus.txt";
    if (readable(rel)) {
        snprintf(path, cap, "%s", rel);
        return 0;
    }
    char exe[4096];
    ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
    if (n > 0) {
        exe[n] = 0;
        /* build/parity -> ../ ; build-x/o0/parity -> ../../ */
        for (int up = 1; up <= 3; up++) {
            char *slash = strrchr(exe, '/');
            if (!slash) break;
            *slash = 0;
            char cand[4200];
            snprintf(cand, sizeof cand, "%s/../%s", exe, rel);
            if (readable(cand)) {
                snprintf(path, cap, "%s", cand);
                return 0;
            }
        }
    }
    return perr_set(err, "data file: cannot find %s in the working directory or beside the "
                         "parity executable; pass --data FILE",
                    rel);
}

int corpus_check(const corpus_t *c, int vocab, int seq_length, perr_t *err) {
    if (vocab < 256)
        return perr_set(err,
                        "vocab (--vocab-size) = %d is smaller than the data's byte range: tokens "
                        "are bytes of '%s', so vocab must be >= 256",
                        vocab, c->path);
    if (c->n < (size_t)seq_length + 2)
        return perr_set(err, "data file '%s' has %zu bytes; seq_length = %d needs at least %d",
                        c->path, c->n, seq_length, seq_length + 2);
    return 0;
}

void corpus_sample(const corpus_t *c, uint64_t s, int T, int32_t *inputs, int32_t *targets) {
    uint64_t span = (uint64_t)c->n - (uint64_t)T - 1;
    /* (s*T) mod span without overflow for any s */
    uint64_t start = (uint64_t)(((unsigned __int128)s * (uint64_t)T) % span);
    for (int t = 0; t < T; t++) {
        inputs[t] = c->bytes[start + t];
        targets[t] = c->bytes[start + t + 1];
    }
}

void model_sample(const model_config_t *c, const corpus_t *data, uint64_t s, int32_t *inputs,
                  int32_t *targets) {
    const int T = c->seq_length, P = c->encoder_seq_length;
    if (c->arch == MODEL_GPT) {
        corpus_sample(data, s, T, inputs, targets);
        return;
    }
    if (c->arch == MODEL_LLAVA) { /* the text, and the pictures of its bytes */
        corpus_sample(data, s, T - P, inputs + P, targets + P);
        for (int p = 0; p < P; p++) inputs[p] = inputs[P + p % (T - P)], targets[p] = 0;
        return;
    }
    corpus_sample(data, s, P, inputs, targets); /* the source; targets' first P: scratch */
    for (int t = 0; t < T - P; t++) {
        targets[P + t] = inputs[P - 1 - t % P];
        inputs[P + t] = t == 0 ? MODEL_BOS : targets[P + t - 1];
    }
    for (int t = 0; t < P; t++) targets[t] = 0;
}

void llava_picture(const model_config_t *c, int32_t b, float *out) {
    rng_fill_normal(out, (size_t)c->patch_dim, c->seed, rng_stream_id("llava.pictures", 0),
                    (uint64_t)b * (uint64_t)c->patch_dim);
}
