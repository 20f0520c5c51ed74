/* fuzz_safetensors.c - libFuzzer target for the safetensors reader.
 *
 * Any file: st_open must either refuse it with a message naming the file
 * or give tensors that lie inside the data buffer with the size their
 * dtype and shape say, each found again by name. */
#include <string.h>

#include "fuzz_common.h"
#include "parity/safetensors.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    char path[64];
    int fd = fuzz_memfile(data, size, path);
    perr_t err;
    err.msg[0] = 0;
    st_file_t *f = st_open(path, &err);
    close(fd);
    if (!f) {
        FUZZ_REQUIRE(strstr(err.msg, path) != NULL);
        return 0;
    }
    const size_t data_len = size - 8; /* at least; the header comes first */
    for (size_t i = 0; i < st_count(f); i++) {
        const st_tensor_t *t = st_tensor(f, i);
        FUZZ_REQUIRE(t->begin <= t->end && t->end <= data_len);
        FUZZ_REQUIRE(t->end - t->begin == st_numel(t) * st_dtype_size(t->dtype));
        FUZZ_REQUIRE(st_find(f, t->name) == t);
        const uint8_t *bytes = st_data(f, t);
        volatile uint8_t sink = 0;
        for (uint64_t b = 0; b < t->end - t->begin; b++) sink ^= bytes[b]; /* readable */
        (void)sink;
    }
    for (size_t i = 0; i < st_metadata_count(f); i++)
        FUZZ_REQUIRE(st_metadata(f, st_metadata_key_at(f, i)) != NULL);
    st_close(f);
    return 0;
}
