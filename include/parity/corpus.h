/* corpus.h - the training data: bytes of a text file, cut by sample index.
 *
 * Tokens are bytes (vocabulary >= 256). Global sample s starts at byte
 * (s*T) mod (N - T - 1) of the N-byte file; its inputs are T bytes from
 * there and its targets the T bytes one further (MODEL.md, Data). The
 * global sample index of sequence b of step k is k*B + b, so any rank can
 * fetch any sample without reading the others (I3).
 */
#ifndef PARITY_CORPUS_H
#define PARITY_CORPUS_H

#include <stddef.h>
#include <stdint.h>

#include "parity/error.h"

typedef struct corpus {
    uint8_t *bytes;
    size_t n;
    char path[4096];
} corpus_t;

/* Reads the whole file. Errors name the file. */
int  corpus_load(corpus_t *c, const char *path, perr_t *err);
void corpus_free(corpus_t *c);
/* The shipped corpus, ref/data/corpus.txt: looked up in the working
 * directory, then relative to the running executable (build/parity,
 * build-x/o0/parity). Fills path; -1 with the places tried. */
int  corpus_default_path(char *path, size_t cap, perr_t *err);
/* Checks the corpus against the model: every byte value must be a token
 * (vocab >= 256, the byte range) and N > T + 1. Names the field. */
int  corpus_check(const corpus_t *c, int vocab, int seq_length, perr_t *err);
/* inputs/targets [T] of global sample s. */
void corpus_sample(const corpus_t *c, uint64_t s, int T, int32_t *inputs, int32_t *targets);

#endif
