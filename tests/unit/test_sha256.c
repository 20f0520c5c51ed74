/* test_sha256.c - SHA-256 against the FIPS 180-2 example vectors and
 * against the system's sha256sum on generated files. */
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "../harness.h"
#include "parity/sha256.h"

/* FIPS 180-2, appendix B (one-block, multi-block, long message) and the
 * well-known digest of the empty message. */
static void test_fips_vectors(void) {
    char hex[65];
    sha256_hex("abc", 3, hex);
    CHECK(!strcmp(hex, "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"), "abc: %s", hex);
    const char *m448 = "abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq";
    sha256_hex(m448, strlen(m448), hex);
    CHECK(!strcmp(hex, "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1"), "448-bit: %s", hex);
    sha256_hex("", 0, hex);
    CHECK(!strcmp(hex, "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"), "empty: %s", hex);
}

static void test_million_a(void) {
    /* Streamed in 1000 pieces of 1000, and in one piece: same digest. */
    static char buf[1000000];
    memset(buf, 'a', sizeof buf);
    sha256_ctx_t c;
    sha256_init(&c);
    for (int i = 0; i < 1000; i++) sha256_update(&c, buf + 1000 * i, 1000);
    uint8_t d[32];
    char hex[65];
    sha256_final(&c, d);
    sha256_to_hex(d, hex);
    CHECK(!strcmp(hex, "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0"), "streamed: %s", hex);
    sha256_hex(buf, sizeof buf, hex);
    CHECK(!strcmp(hex, "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0"), "one shot: %s", hex);
}

static uint64_t rng_state = 0x9E3779B97F4A7C15ull;
static uint64_t rng(void) {
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return rng_state;
}

/* Runs `sha256sum path` and returns its 64 hex digits. */
static int system_sha256(const char *path, char out[65]) {
    char cmd[512];
    snprintf(cmd, sizeof cmd, "sha256sum '%s'", path);
    FILE *p = popen(cmd, "r");
    if (!p) return -1;
    int ok = fscanf(p, "%64s", out) == 1;
    return pclose(p) == 0 && ok ? 0 : -1;
}

/* Lengths around the 55/56/64-byte padding boundaries, plus a large
 * random file, each checked against the independent sha256sum. */
static void test_against_sha256sum(void) {
    char path[] = "/tmp/parity_sha256_XXXXXX";
    int fd = mkstemp(path);
    CHECK(fd >= 0, "mkstemp failed");
    if (fd < 0) return;
    close(fd);
    static uint8_t data[300001];
    for (size_t i = 0; i < sizeof data; i++) data[i] = (uint8_t)rng();
    size_t lens[] = {1, 55, 56, 57, 63, 64, 65, 119, 120, 127, 128, 129, 1000, sizeof data};
    for (size_t k = 0; k < sizeof lens / sizeof lens[0]; k++) {
        FILE *f = fopen(path, "wb");
        CHECK(f && fwrite(data, 1, lens[k], f) == lens[k], "write");
        if (f) fclose(f);
        char want[65] = "", got[65];
        CHECK(system_sha256(path, want) == 0, "sha256sum failed");
        sha256_hex(data, lens[k], got);
        CHECK(!strcmp(got, want), "len %zu: ours %s, sha256sum %s", lens[k], got, want);
    }
    remove(path);
}

/* Random split points: streaming must equal one-shot. */
static void test_streaming_splits(void) {
    static uint8_t data[5000];
    for (size_t i = 0; i < sizeof data; i++) data[i] = (uint8_t)rng();
    for (int trial = 0; trial < 200; trial++) {
        size_t n = rng() % sizeof data;
        uint8_t want[32], got[32];
        sha256(data, n, want);
        sha256_ctx_t c;
        sha256_init(&c);
        for (size_t pos = 0; pos < n;) {
            size_t take = rng() % 150;
            if (take > n - pos) take = n - pos;
            sha256_update(&c, data + pos, take);
            pos += take;
        }
        sha256_final(&c, got);
        CHECK(!memcmp(want, got, 32), "trial %d len %zu", trial, n);
    }
}

int main(void) {
    RUN(test_fips_vectors);
    RUN(test_million_a);
    RUN(test_against_sha256sum);
    RUN(test_streaming_splits);
    return harness_done();
}
