/* fuzz_ckpt.c - libFuzzer target for checkpoint files (ckpt.h).
 *
 * Any file as a checkpoint of a small model: ckpt_load_file must refuse
 * it with a message, or accept a state that survives a round trip
 * through ckpt_save unchanged (the same vectors, step and AdamW count).
 * The seed is `parity train` of this model saved after one step:
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

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    char path[64];
    int fd = fuzz_memfile(data, size, path);
    model_config_t cfg;
    small_model(&cfg);
    ckpt_state_t s, again;
    perr_t err;
    err.msg[0] = 0;
    int rc = ckpt_load_file(path, "fuzz", &cfg, &s, NULL, &err);
    close(fd);
    if (rc) {
        FUZZ_REQUIRE(err.msg[0] != 0 && s.params == NULL);
        return 0;
    }
    char dir[] = "/tmp/parity-fuzz-ckpt-XXXXXX";
    if (!mkdtemp(dir)) abort();
    FUZZ_REQUIRE(ckpt_save(dir, &s, "fuzz", &err) == 0);
    FUZZ_REQUIRE(ckpt_load(dir, &cfg, &again, NULL, &err) == 0);
    FUZZ_REQUIRE(same_state(&s, &again));
    char *file = ckpt_file_path(dir);
    if (!file || unlink(file) || rmdir(dir)) abort();
    free(file);
    ckpt_state_free(&s);
    ckpt_state_free(&again);
    return 0;
}
