/* fuzz_safetensors.c - libFuzzer target for the safetensors reader and
 * `parity diff`'s element comparison.
 *
 * Any file: st_open must either refuse it with a message naming the file
 * or give tensors that lie inside the data buffer with the size their
 * dtype and shape say, each found again by name. Each tensor compared
 * with itself has no difference; compared with itself shifted by one
 * element, the differences found are consistent and printable. */
#include <string.h>

#include "fuzz_common.h"
#include "parity/safetensors.h"
#include "parity/tensor_diff.h"

static void diff_checks(const st_file_t *f, const st_tensor_t *t) {
    const uint64_t n = st_numel(t);
    const size_t es = st_dtype_size(t->dtype);
    const uint8_t *a = st_data(f, t);
    tensor_diff_t d;
    FUZZ_REQUIRE(tensor_diff(t->dtype, n, a, a, &d) == 1 && d.ndiff == 0); /* 1: bit-exact */
    if (n < 2) return;
    const int same = tensor_diff(t->dtype, n - 1, a, a + es, &d);
    FUZZ_REQUIRE(same == (d.ndiff == 0) && d.ndiff <= n - 1 && d.nnan <= d.ndiff);
    if (same) return;
    FUZZ_REQUIRE(d.first < n - 1);
    char buf[128];
    tensor_format_value(t->dtype, d.first_a, buf, sizeof buf);
    FUZZ_REQUIRE(memchr(buf, 0, sizeof buf) != NULL);
    tensor_format_coords(t->ndim, t->shape, d.first, buf, sizeof buf);
    FUZZ_REQUIRE(memchr(buf, 0, sizeof buf) != NULL);
}

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
    uint64_t header_len = 0; /* accepted, so size >= 8 + header_len */
    for (int i = 7; i >= 0; i--) header_len = header_len << 8 | data[i];
    const uint64_t data_len = size - 8 - header_len; /* the data buffer */
    for (size_t i = 0; i < st_count(f); i++) {
        const st_tensor_t *t = st_tensor(f, i);
        FUZZ_REQUIRE(t->begin <= t->end && t->end <= data_len);
        FUZZ_REQUIRE(t->end - t->begin == st_numel(t) * st_dtype_size(t->dtype));
        FUZZ_REQUIRE(st_find(f, t->name) == t);
        const uint8_t *bytes = st_data(f, t);
        volatile uint8_t sink = 0;
        for (uint64_t b = 0; b < t->end - t->begin; b++) sink ^= bytes[b]; /* readable */
        (void)sink;
        diff_checks(f, t);
    }
    for (size_t i = 0; i < st_metadata_count(f); i++)
        FUZZ_REQUIRE(st_metadata(f, st_metadata_key_at(f, i)) != NULL);
    st_close(f);
    return 0;
}
