/* fuzz_ckpt.c - libFuzzer target for checkpoint files (ckpt.h).
 *
 * Any file as a checkpoint of a small model: ckpt_load_file must refuse
 * it with a message, or accept a state whose scalars agree (the AdamW
 * count is the step, within [0, CKPT_MAX_STEP]) and that survives a
 * round trip through ckpt_save unchanged (the same vectors, step and
 * AdamW count). An accepted file is also flipped one bit at a time at
 * positions in its header drawn from the input: each flipped copy must be
 * refused, or load the very same state (a flip the format does not read,
 * such as one inside the header's padding): no flip of the metadata may
 * change what a run resumes from.
 * The seeds are `parity train` of this model saved after one step, in
 * format 2 (parity-ckpt-2) and the format 1 still read (parity-ckpt-1):
 *   parity train --model gpt-micro --hidden-size 8 --num-attention-heads 1
 *     --num-layers 1 --ffn-hidden-size 16 --tile-features 8 --tile-ffn 16
 *     --seq-length 4 --tile-tokens 4 --steps 1 --save DIR */
#include <stdlib.h>
#include <string.h>

#include "fuzz_common.h"
#include "parity/ckpt.h"

static void small_model(model_config_t *c) {
    if (model_config_builtin("gpt-micro", c, NULL)) abort();
    c->hidden = 8, c->heads = 1, c->layers = 1, c->ffn = 16;
    c->tile_features = 8, c->tile_ffn = 16, c->seq_length = 4, c->tile_tokens = 4;
}

static int same_state(const ckpt_state_t *a, const ckpt_state_t *b) {
    const size_t n = a->total * sizeof(float);
    return a->total == b->total && a->step == b->step && a->adam_t == b->adam_t &&
           !memcmp(a->params, b->params, n) && !memcmp(a->adam_m, b->adam_m, n) &&
           !memcmp(a->adam_v, b->adam_v, n);
}

/* Loads bytes as a checkpoint file; 0 when accepted. */
static int load_bytes(const uint8_t *data, size_t size, const model_config_t *cfg,
                      ckpt_state_t *s) {
    char path[64];
    int fd = fuzz_memfile(data, size, path);
    perr_t err;
    err.msg[0] = 0;
    int rc = ckpt_load_file(path, "fuzz", cfg, s, NULL, &err);
    close(fd);
    if (rc) FUZZ_REQUIRE(err.msg[0] != 0 && s->params == NULL);
    return rc;
}

/* Flips a few header bits of an accepted file (see the top). */
static void flip_header_bits(const uint8_t *data, size_t size, const model_config_t *cfg,
                             const ckpt_state_t *s) {
    uint64_t n = 0;
    for (int i = 0; i < 8; i++) n |= (uint64_t)data[i] << (8 * i);
    if (n == 0 || n > size - 8) return;
    uint8_t *copy = malloc(size);
    if (!copy) abort();
    uint64_t h = 1469598103934665603ull; /* FNV-1a of the input: positions the fuzzer steers */
    for (size_t i = 0; i < size; i++) h = (h ^ data[i]) * 1099511628211ull;
    for (int k = 0; k < 8; k++) {
        h = h * 6364136223846793005ull + 1442695040888963407ull;
        const uint64_t bit = (h >> 11) % (n * 8);
        memcpy(copy, data, size);
        copy[8 + bit / 8] ^= (uint8_t)(1u << (bit % 8));
        ckpt_state_t t;
        if (load_bytes(copy, size, cfg, &t) == 0) {
            FUZZ_REQUIRE(same_state(s, &t));
            ckpt_state_free(&t);
        }
    }
    free(copy);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    model_config_t cfg;
    small_model(&cfg);
    ckpt_state_t s, again;
    perr_t err;
    if (load_bytes(data, size, &cfg, &s)) return 0;
    FUZZ_REQUIRE(s.step >= 0 && s.step <= CKPT_MAX_STEP && s.adam_t == s.step);
    flip_header_bits(data, size, &cfg, &s);
    char dir[] = "/tmp/parity-fuzz-ckpt-XXXXXX";
    if (!mkdtemp(dir)) abort();
    FUZZ_REQUIRE(ckpt_save(dir, &s, "portable", &err) == 0);
    FUZZ_REQUIRE(ckpt_load(dir, &cfg, &again, NULL, &err) == 0);
    FUZZ_REQUIRE(same_state(&s, &again));
    char *file = ckpt_file_path(dir);
    if (!file || unlink(file) || rmdir(dir)) abort();
    free(file);
    ckpt_state_free(&s);
    ckpt_state_free(&again);
    return 0;
}
