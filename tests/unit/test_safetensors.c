/* test_safetensors.c - writer -> reader round trips for every dtype and
 * odd shapes, the byte layout checked independently of the reader,
 * hand-built files, every class of corruption (each with the message it
 * must give), writer misuse, and thousands of random mutations that must
 * never crash (run under `make asan` / `make ubsan`). Interoperability
 * with an independent Python reader is in tests/cli/test_diff.sh. */
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../harness.h"
#include "parity/safetensors.h"

static char tmpdir[] = "/tmp/parity_st_XXXXXX";

static const char *tmp_path(const char *name) {
    static char buf[4][256];
    static int k;
    k = (k + 1) % 4;
    snprintf(buf[k], sizeof buf[k], "%s/%s", tmpdir, name);
    return buf[k];
}

static uint64_t rng_state = 0x853C49E6748FEA9Bull;
static uint64_t rng(void) {
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return rng_state;
}

static long file_size(const char *path) {
    struct stat sb;
    return stat(path, &sb) ? -1 : (long)sb.st_size;
}

static uint8_t *read_file(const char *path, size_t *n) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    long sz = file_size(path);
    uint8_t *buf = malloc(sz > 0 ? (size_t)sz : 1);
    *n = fread(buf, 1, (size_t)sz, f);
    fclose(f);
    return buf;
}

static void write_bytes(const char *path, const void *p, size_t n) {
    /* A fresh file rather than a truncated one: ext4 flushes a file on
     * close after truncating it, which made the fuzz loop 100x slower. */
    unlink(path);
    FILE *f = fopen(path, "wb");
    CHECK(f && fwrite(p, 1, n, f) == n, "cannot write %s", path);
    if (f) fclose(f);
}

/* A file made by hand: the 8-byte length field (little-endian, as the
 * format says), the header text, then `ndata` bytes 0, 1, 2, ... */
static void write_raw(const char *path, uint64_t len_field, const char *header, size_t ndata) {
    size_t hl = strlen(header);
    uint8_t *buf = malloc(8 + hl + ndata + 1);
    for (int i = 0; i < 8; i++) buf[i] = (uint8_t)(len_field >> (8 * i));
    memcpy(buf + 8, header, hl);
    for (size_t i = 0; i < ndata; i++) buf[8 + hl + i] = (uint8_t)i;
    write_bytes(path, buf, 8 + hl + ndata);
    free(buf);
}

/* ---- round trip -------------------------------------------------------- */

typedef struct {
    int ndim;
    int64_t shape[ST_MAX_DIMS];
} shape_t;

static const shape_t shapes[] = {
    {0, {0}},                         /* 0-d scalar: one element */
    {1, {0}},                         /* empty */
    {3, {3, 0, 2}},                   /* zero-size middle dim */
    {1, {7}},                         /* odd length */
    {3, {2, 3, 5}},
    {8, {1, 2, 1, 1, 3, 1, 1, 2}},    /* the maximum rank */
};
enum { NSHAPES = sizeof shapes / sizeof shapes[0] };

static uint64_t numel_of(const shape_t *s) {
    uint64_t n = 1;
    for (int d = 0; d < s->ndim; d++) n *= (uint64_t)s->shape[d];
    return n;
}

static void test_round_trip_all_dtypes(void) {
    const char *path = tmp_path("round.safetensors");
    st_writer_t *w = st_writer_new();
    perr_t e = {{0}};
    uint8_t *orig[ST_DTYPE_COUNT][NSHAPES];
    uint64_t total = 0;
    for (int dt = 0; dt < ST_DTYPE_COUNT; dt++) {
        for (int s = 0; s < NSHAPES; s++) {
            size_t nbytes = (size_t)numel_of(&shapes[s]) * st_dtype_size((st_dtype_t)dt);
            orig[dt][s] = malloc(nbytes + 1);
            for (size_t i = 0; i < nbytes; i++) orig[dt][s][i] = (uint8_t)rng();
            char name[64];
            snprintf(name, sizeof name, "%s/shape%d", st_dtype_name((st_dtype_t)dt), s);
            CHECK(st_writer_add(w, name, (st_dtype_t)dt, shapes[s].ndim, shapes[s].shape, orig[dt][s], &e) == 0,
                  "%s", e.msg);
            total += nbytes;
        }
    }
    CHECK(st_writer_set_metadata(w, "format", "pt", &e) == 0, "%s", e.msg);
    CHECK(st_writer_set_metadata(w, "note", "quote\" and \xC3\xA9", &e) == 0, "%s", e.msg);
    CHECK(st_writer_set_metadata(w, "format", "parity", &e) == 0, "replacing: %s", e.msg);
    CHECK(st_writer_save(w, path, &e) == 0, "%s", e.msg);
    st_writer_free(w);

    /* The byte layout, read without the reader. */
    size_t n;
    uint8_t *raw = read_file(path, &n);
    CHECK(raw && n >= 8, "file");
    if (!raw) return;
    uint64_t hl = 0;
    for (int i = 0; i < 8; i++) hl |= (uint64_t)raw[i] << (8 * i);
    CHECK(hl % 8 == 0, "header length %llu not a multiple of 8", (unsigned long long)hl);
    CHECK(8 + hl + total == n, "file size %zu != 8 + %llu + %llu", n, (unsigned long long)hl,
          (unsigned long long)total);
    CHECK(raw[8] == '{', "header starts with '{'");
    size_t last = 8 + hl - 1;
    while (last > 8 && raw[last] == ' ') last--;
    CHECK(raw[last] == '}' && 8 + hl - 1 - last < 8, "header ends with '}' + at most 7 spaces");
    CHECK(memmem(raw + 8, hl, "\"__metadata__\":{\"format\":\"parity\"", 33) != NULL, "metadata in header");
    free(raw);

    st_file_t *f = st_open(path, &e);
    CHECK(f != NULL, "%s", e.msg);
    if (!f) return;
    CHECK(st_count(f) == ST_DTYPE_COUNT * NSHAPES, "count %zu", st_count(f));
    CHECK(!strcmp(st_metadata(f, "format"), "parity") && !strcmp(st_metadata(f, "note"), "quote\" and \xC3\xA9"),
          "metadata");
    CHECK(st_metadata(f, "absent") == NULL && st_metadata_count(f) == 2, "metadata count");
    uint64_t expect_begin = 0;
    for (int dt = 0; dt < ST_DTYPE_COUNT; dt++) {
        for (int s = 0; s < NSHAPES; s++) {
            const st_tensor_t *t = st_tensor(f, (size_t)(dt * NSHAPES + s));
            char name[64];
            snprintf(name, sizeof name, "%s/shape%d", st_dtype_name((st_dtype_t)dt), s);
            CHECK(t && !strcmp(t->name, name), "order: %s", name);
            if (!t) continue;
            CHECK(st_find(f, name) == t, "st_find %s", name);
            CHECK((int)t->dtype == dt && t->ndim == shapes[s].ndim, "%s dtype/ndim", name);
            CHECK(!memcmp(t->shape, shapes[s].shape, sizeof(int64_t) * (size_t)t->ndim), "%s shape", name);
            CHECK(st_numel(t) == numel_of(&shapes[s]), "%s numel", name);
            size_t nbytes = (size_t)st_numel(t) * st_dtype_size(t->dtype);
            CHECK(t->begin == expect_begin && t->end == t->begin + nbytes, "%s packed in insertion order", name);
            CHECK(!memcmp(st_data(f, t), orig[dt][s], nbytes), "%s data", name);
            expect_begin = t->end;
            free(orig[dt][s]);
        }
    }
    CHECK(st_find(f, "nope") == NULL && st_tensor(f, st_count(f)) == NULL, "absent");
    st_close(f);

    /* An empty file: header "{}" padded, no data. */
    w = st_writer_new();
    CHECK(st_writer_save(w, path, &e) == 0, "%s", e.msg);
    st_writer_free(w);
    CHECK(file_size(path) == 16, "empty file is 16 bytes, got %ld", file_size(path));
    f = st_open(path, &e);
    CHECK(f && st_count(f) == 0, "empty: %s", e.msg);
    st_close(f);
}

/* Hand-written header in Hugging Face's style (spaces, sorted by
 * alignment): the reader must agree with what we wrote by hand. */
static void test_hand_built(void) {
    const char *path = tmp_path("hand.safetensors");
    const char *hdr = "{\"__metadata__\": {\"format\": \"pt\"}, "
                      "\"b\": {\"dtype\": \"I64\", \"shape\": [], \"data_offsets\": [0, 8]}, "
                      "\"a\": {\"data_offsets\": [8, 14], \"shape\": [3], \"dtype\": \"BF16\"}}  ";
    write_raw(path, strlen(hdr), hdr, 14);
    perr_t e = {{0}};
    st_file_t *f = st_open(path, &e);
    CHECK(f != NULL, "%s", e.msg);
    if (!f) return;
    CHECK(st_count(f) == 2 && !strcmp(st_tensor(f, 0)->name, "b") && !strcmp(st_tensor(f, 1)->name, "a"), "order");
    const st_tensor_t *b = st_find(f, "b"), *a = st_find(f, "a");
    CHECK(b && b->dtype == ST_I64 && b->ndim == 0 && st_numel(b) == 1, "scalar");
    CHECK(a && a->dtype == ST_BF16 && a->ndim == 1 && a->shape[0] == 3 && a->begin == 8, "bf16");
    int64_t bv;
    memcpy(&bv, st_data(f, b), 8);
    CHECK(bv == 0x0706050403020100ll, "little-endian i64: %llx", (unsigned long long)bv);
    CHECK(((const uint8_t *)st_data(f, a))[0] == 8, "a's data");
    CHECK(!strcmp(st_metadata(f, "format"), "pt"), "metadata");
    st_close(f);
    hdr = "{\"__metadata__\":null}   ";
    write_raw(path, strlen(hdr), hdr, 0);
    f = st_open(path, &e);
    CHECK(f && st_count(f) == 0 && st_metadata_count(f) == 0, "null metadata: %s", e.msg);
    st_close(f);
}

/* ---- corrupt files ----------------------------------------------------- */

static void expect_open_error(const char *path, const char *want) {
    perr_t e = {{0}};
    st_file_t *f = st_open(path, &e);
    CHECK(f == NULL, "%s opened but should fail with \"%s\"", path, want);
    CHECK(strstr(e.msg, path) != NULL, "message lacks the path: %s", e.msg);
    CHECK(strstr(e.msg, want) != NULL, "message \"%s\" lacks \"%s\"", e.msg, want);
    st_close(f);
}

/* Header text plus data bytes; the length field is right. */
static void expect_bad_header(const char *hdr, size_t ndata, const char *want) {
    const char *path = tmp_path("bad.safetensors");
    write_raw(path, strlen(hdr), hdr, ndata);
    expect_open_error(path, want);
}

#define T(name, body) "{\"" name "\":" body "}"

static void test_corrupt_files(void) {
    const char *path = tmp_path("corrupt.safetensors");
    write_bytes(path, "", 0);
    expect_open_error(path, "file is 0 bytes, too short for the 8-byte header length");
    write_bytes(path, "\x10\0\0\0\0", 5);
    expect_open_error(path, "file is 5 bytes, too short");
    write_raw(path, 1000, "{}", 0);
    expect_open_error(path, "header length 1000 exceeds the 2 bytes that follow it");
    write_raw(path, 100000001, "{}", 0);
    expect_open_error(path, "header length 100000001 exceeds the limit");
    write_raw(path, UINT64_MAX, "{}", 0);
    expect_open_error(path, "exceeds the limit");
    write_raw(path, 0, "{}", 0);
    expect_open_error(path, "header length 0 is too short");
    expect_open_error(tmp_path("does-not-exist.safetensors"), "cannot open: No such file or directory");
    expect_open_error(tmpdir, "not a regular file");

    expect_bad_header("{\"a\":", 0, "header: line 1 col 6: expected a value, got end of input");
    expect_bad_header("{\"a\":{} x", 0, "header: line 1 col 9: expected ',' or '}' in object");
    expect_bad_header("[1, 2]", 0, "header: must be a JSON object starting with '{'");
    expect_bad_header("  {}", 0, "must be a JSON object starting with '{'");
    expect_bad_header("{\"a\": {\"dtype\": \"F32\", \"shape\": [1], \"data_offsets\": [0, 4]},\n"
                      " \"a\": {\"dtype\": \"F32\", \"shape\": [1], \"data_offsets\": [4, 8]}}",
                      8, "duplicate key \"a\"");
    expect_bad_header(T("w", "{\"dtype\":\"F33\",\"shape\":[1],\"data_offsets\":[0,4]}"), 4,
                      "tensor \"w\": dtype: unknown \"F33\" (known: F32, F64");
    expect_bad_header(T("w", "{\"dtype\":7,\"shape\":[1],\"data_offsets\":[0,4]}"), 4,
                      "tensor \"w\": dtype: expected a string, got number");
    expect_bad_header(T("w", "{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,4]}"), 4,
                      "tensor \"w\": data_offsets: [0, 4) is 4 bytes, but shape and dtype F32 need 2 elements x 4 "
                      "bytes = 8");
    expect_bad_header(T("w", "{\"dtype\":\"F32\",\"shape\":[],\"data_offsets\":[0,0]}"), 0,
                      "[0, 0) is 0 bytes, but shape and dtype F32 need 1 elements");
    expect_bad_header(T("w", "{\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[0,16]}"), 8,
                      "file is 71 bytes, but its header declares 16 bytes of tensor data: expected 8 + 55 (header) + 16 = 79");
    expect_bad_header(T("w", "{\"dtype\":\"U8\",\"shape\":[0],\"data_offsets\":[4,2]}"), 4,
                      "tensor \"w\": data_offsets: begin 4 > end 2");
    expect_bad_header(T("w", "{\"dtype\":\"U8\",\"shape\":[2],\"data_offsets\":[0]}"), 2,
                      "tensor \"w\": data_offsets: expected [begin, end], got array of length 1");
    expect_bad_header(T("w", "{\"dtype\":\"U8\",\"shape\":[2],\"data_offsets\":[0,-2]}"), 2,
                      "tensor \"w\": data_offsets[1]: expected a non-negative integer, got -2");
    expect_bad_header(T("w", "{\"dtype\":\"U8\",\"shape\":[-2],\"data_offsets\":[0,2]}"), 2,
                      "tensor \"w\": shape[0]: expected a non-negative integer, got -2");
    expect_bad_header(T("w", "{\"dtype\":\"U8\",\"shape\":[1.5],\"data_offsets\":[0,2]}"), 2,
                      "tensor \"w\": shape[0]: expected a non-negative integer, got 1.5");
    expect_bad_header(T("w", "{\"dtype\":\"U8\",\"shape\":[\"2\"],\"data_offsets\":[0,2]}"), 2,
                      "shape[0]: expected a non-negative integer, got string");
    expect_bad_header(T("w", "{\"dtype\":\"U8\",\"shape\":2,\"data_offsets\":[0,2]}"), 2,
                      "tensor \"w\": shape: expected an array of integers, got number");
    expect_bad_header(T("w", "{\"dtype\":\"U8\",\"shape\":[1,1,1,1,1,1,1,1,2],\"data_offsets\":[0,2]}"), 2,
                      "tensor \"w\": shape: 9 dims, parity supports at most 8");
    expect_bad_header(T("w", "{\"dtype\":\"U8\",\"shape\":[4294967296,4294967296,2],\"data_offsets\":[0,2]}"), 2,
                      "tensor \"w\": shape: element count overflows 64 bits");
    expect_bad_header(T("w", "{\"dtype\":\"U8\",\"shape\":[2]}"), 2, "tensor \"w\": missing field \"data_offsets\"");
    expect_bad_header(T("w", "{\"shape\":[2],\"data_offsets\":[0,2]}"), 2, "tensor \"w\": missing field \"dtype\"");
    expect_bad_header(T("w", "{\"dtype\":\"U8\",\"data_offsets\":[0,2]}"), 2, "tensor \"w\": missing field \"shape\"");
    expect_bad_header(T("w", "{\"dtype\":\"U8\",\"shape\":[2],\"data_offsets\":[0,2],\"extra\":1}"), 2,
                      "tensor \"w\": unknown field \"extra\"");
    expect_bad_header(T("w", "[1,2]"), 0, "tensor \"w\": expected an object {dtype, shape, data_offsets}, got array");
    expect_bad_header("{\"a\":{\"dtype\":\"U8\",\"shape\":[8],\"data_offsets\":[0,8]},"
                      "\"b\":{\"dtype\":\"U8\",\"shape\":[8],\"data_offsets\":[4,12]}}",
                      12, "tensors \"a\" [0, 8) and \"b\" [4, 12) overlap");
    expect_bad_header("{\"a\":{\"dtype\":\"U8\",\"shape\":[4],\"data_offsets\":[0,4]},"
                      "\"b\":{\"dtype\":\"U8\",\"shape\":[4],\"data_offsets\":[0,4]}}",
                      4, "tensors \"a\" [0, 4) and \"b\" [0, 4) overlap");
    expect_bad_header("{\"a\":{\"dtype\":\"U8\",\"shape\":[8],\"data_offsets\":[0,8]},"
                      "\"z\":{\"dtype\":\"U8\",\"shape\":[0],\"data_offsets\":[4,4]}}",
                      8, "\"z\" [4, 4) overlap");
    expect_bad_header("{\"a\":{\"dtype\":\"U8\",\"shape\":[4],\"data_offsets\":[0,4]},"
                      "\"b\":{\"dtype\":\"U8\",\"shape\":[4],\"data_offsets\":[8,12]}}",
                      12, "bytes [4, 8) of the data buffer belong to no tensor (gap before \"b\")");
    expect_bad_header(T("w", "{\"dtype\":\"U8\",\"shape\":[4],\"data_offsets\":[0,4]}"), 6,
                      "file is 67 bytes, but its header declares 4 bytes of tensor data: expected 8 + 53 (header) + 4 = 65");
    expect_bad_header("{}", 3, "file is 13 bytes, but its header declares 0 bytes of tensor data");
    expect_bad_header("{\"__metadata__\":[1]}", 0, "\"__metadata__\": expected an object of strings, got array");
    expect_bad_header("{\"__metadata__\":{\"k\":1}}", 0, "\"__metadata__\": key \"k\": expected a string, got number");
    expect_bad_header("{\"__metadata__\":{\"k\":\"a\\u0000b\"}}", 0, "key \"k\": value contains \\u0000");
    expect_bad_header("{\"\xff\":1}", 0, "header: line 1 col 3: expected valid UTF-8");
}

static void test_writer_errors(void) {
    st_writer_t *w = st_writer_new();
    perr_t e = {{0}};
    int64_t shape[2] = {2, 2};
    float x[4] = {1, 2, 3, 4};
    CHECK(st_writer_add(w, "x", ST_F32, 2, shape, x, &e) == 0, "%s", e.msg);
    CHECK(st_writer_add(w, "x", ST_F32, 2, shape, x, &e) == -1 && strstr(e.msg, "duplicate tensor name \"x\""),
          "%s", e.msg);
    CHECK(st_writer_add(w, "__metadata__", ST_F32, 2, shape, x, &e) == -1 && strstr(e.msg, "reserved"), "%s",
          e.msg);
    CHECK(st_writer_add(w, "y", ST_F32, 9, shape, x, &e) == -1 && strstr(e.msg, "ndim 9"), "%s", e.msg);
    CHECK(st_writer_add(w, "y", ST_F32, -1, shape, x, &e) == -1 && strstr(e.msg, "ndim -1"), "%s", e.msg);
    int64_t neg[1] = {-3};
    CHECK(st_writer_add(w, "y", ST_F32, 1, neg, x, &e) == -1 && strstr(e.msg, "shape[0] = -3"), "%s", e.msg);
    CHECK(st_writer_add(w, "y", ST_F32, 2, shape, NULL, &e) == -1 && strstr(e.msg, "data is NULL"), "%s", e.msg);
    int64_t zero[1] = {0};
    CHECK(st_writer_add(w, "empty", ST_F32, 1, zero, NULL, &e) == 0, "empty tensor, NULL data: %s", e.msg);
    CHECK(st_writer_add(w, "bad\xff", ST_F32, 2, shape, x, &e) == -1 && strstr(e.msg, "not valid UTF-8"), "%s",
          e.msg);
    CHECK(st_writer_add(w, "y", (st_dtype_t)99, 2, shape, x, &e) == -1 && strstr(e.msg, "invalid dtype"), "%s",
          e.msg);
    CHECK(st_writer_set_metadata(w, "k", "\xc0\xaf", &e) == -1 && strstr(e.msg, "not valid UTF-8"), "%s", e.msg);
    const char *bad = tmp_path("no-such-dir/out.safetensors");
    CHECK(st_writer_save(w, bad, &e) == -1 && strstr(e.msg, bad) && strstr(e.msg, "does not exist"), "%s", e.msg);
    /* The failed adds left the writer usable and unchanged. */
    const char *path = tmp_path("after-errors.safetensors");
    CHECK(st_writer_save(w, path, &e) == 0, "%s", e.msg);
    st_writer_free(w);
    st_file_t *f = st_open(path, &e);
    CHECK(f && st_count(f) == 2 && st_find(f, "x") && st_find(f, "empty"), "%s", e.msg);
    st_close(f);
    /* Many names: every duplicate is still caught (the writer hashes
     * names; this checks the set against a plain scan's answer). */
    w = st_writer_new();
    int dup_ok = 1;
    for (int i = 0; i < 5000; i++) {
        char name[32];
        snprintf(name, sizeof name, "layer.%d.w", i % 3000); /* i >= 3000 repeats an earlier name */
        int rc = st_writer_add(w, name, ST_U8, 1, zero, NULL, &e);
        if ((rc == 0) != (i < 3000)) dup_ok = 0;
    }
    CHECK(dup_ok, "duplicates among 5000 adds misjudged");
    st_writer_free(w);
    st_dtype_t dt;
    CHECK(st_dtype_from_name("BF16", &dt) == 0 && dt == ST_BF16 && st_dtype_from_name("bf16", &dt) == -1, "names");
    CHECK(st_dtype_size(ST_F64) == 8 && st_dtype_size(ST_BOOL) == 1 && st_dtype_size((st_dtype_t)99) == 0, "sizes");
}

/* ---- interoperability ------------------------------------------------- */

/* An independent reader (Python's struct + json) checks a file from our
 * writer: layout, header, coverage, and element values that it computes
 * itself from the same formulas. */
static const char *python_reader =
    "import json, struct, sys\n"
    "blob = open(sys.argv[1], 'rb').read()\n"
    "n = struct.unpack('<Q', blob[:8])[0]\n"
    "assert n % 8 == 0 and len(blob) >= 8 + n, 'header length'\n"
    "hdr = json.loads(blob[8:8 + n].decode('utf-8'))\n"
    "data = blob[8 + n:]\n"
    "assert hdr.pop('__metadata__') == {'format': 'pt', 'by': 'parity \u00e9'}, 'metadata'\n"
    "assert list(hdr) == ['f32', 'i64', 'bf16', 'scalar', 'empty', 'u8'], list(hdr)\n"
    "size = {'F32': 4, 'I64': 8, 'BF16': 2, 'F64': 8, 'U8': 1}\n"
    "spans = sorted(tuple(v['data_offsets']) for v in hdr.values())\n"
    "pos = 0\n"
    "for b, e in spans:\n"
    "    assert b == pos, ('gap or overlap', b, pos)\n"
    "    pos = e\n"
    "assert pos == len(data), 'buffer not covered'\n"
    "def get(name, fmt):\n"
    "    t = hdr[name]\n"
    "    b, e = t['data_offsets']\n"
    "    n = 1\n"
    "    for d in t['shape']: n *= d\n"
    "    assert e - b == n * size[t['dtype']], name\n"
    "    return t, list(struct.unpack('<%d%s' % (n, fmt), data[b:e]))\n"
    "t, v = get('f32', 'f')\n"
    "assert t['dtype'] == 'F32' and t['shape'] == [2, 3], t\n"
    "assert v == [struct.unpack('<f', struct.pack('<f', 0.5 * i - 1))[0] for i in range(6)], v\n"
    "t, v = get('i64', 'q')\n"
    "assert t['dtype'] == 'I64' and v == [-2**40 + i for i in range(4)], v\n"
    "t, v = get('bf16', 'H')\n"
    "assert t['dtype'] == 'BF16' and t['shape'] == [3]\n"
    "assert [struct.unpack('<f', struct.pack('<I', u << 16))[0] for u in v] == [1.0, 2.0, -1.0], v\n"
    "t, v = get('scalar', 'd')\n"
    "assert t['dtype'] == 'F64' and t['shape'] == [] and v == [3.25], (t, v)\n"
    "t, v = get('empty', 'B')\n"
    "assert t['shape'] == [0, 5] and v == [], t\n"
    "t, v = get('u8', 'B')\n"
    "assert v == [255, 0, 7], v\n"
    "print('python reader: ok')\n";

static void test_python_reads_our_file(void) {
    const char *py = "/usr/bin/python3";
    if (access(py, X_OK)) {
        printf("        %s not found: interop check skipped\n", py);
        return;
    }
    const char *path = tmp_path("interop.safetensors"), *script = tmp_path("reader.py");
    write_bytes(script, python_reader, strlen(python_reader));
    float f32[6];
    for (int i = 0; i < 6; i++) f32[i] = 0.5f * (float)i - 1.0f;
    int64_t i64[4];
    for (int i = 0; i < 4; i++) i64[i] = -(1ll << 40) + i;
    uint16_t bf16[3] = {0x3F80, 0x4000, 0xBF80}; /* 1, 2, -1 */
    double scalar = 3.25;
    uint8_t u8[3] = {255, 0, 7};
    int64_t s23[2] = {2, 3}, s4[1] = {4}, s3[1] = {3}, s05[2] = {0, 5};
    st_writer_t *w = st_writer_new();
    perr_t e = {{0}};
    int rc = st_writer_add(w, "f32", ST_F32, 2, s23, f32, &e) | st_writer_add(w, "i64", ST_I64, 1, s4, i64, &e) |
             st_writer_add(w, "bf16", ST_BF16, 1, s3, bf16, &e) |
             st_writer_add(w, "scalar", ST_F64, 0, NULL, &scalar, &e) |
             st_writer_add(w, "empty", ST_U8, 2, s05, NULL, &e) | st_writer_add(w, "u8", ST_U8, 1, s3, u8, &e) |
             st_writer_set_metadata(w, "format", "pt", &e) | st_writer_set_metadata(w, "by", "parity \xC3\xA9", &e) |
             st_writer_save(w, path, &e);
    st_writer_free(w);
    CHECK(rc == 0, "%s", e.msg);
    char cmd[700];
    snprintf(cmd, sizeof cmd, "%s '%s' '%s' 2>&1", py, script, path);
    FILE *p = popen(cmd, "r");
    char line[512] = "", all[2048] = "";
    while (p && fgets(line, sizeof line, p)) strncat(all, line, sizeof all - strlen(all) - 1);
    int status = p ? pclose(p) : -1;
    CHECK(status == 0 && strstr(all, "python reader: ok"), "python says: %s", all);
}

/* ---- fuzz -------------------------------------------------------------- */

/* Mutates a valid file thousands of times (random bytes anywhere, digits
 * in the header, the length field, truncation, extension) and opens
 * each. Success or a message are both fine; a crash, a sanitizer report
 * or an out-of-range tensor on success is not. */
static void test_mutation_fuzz(void) {
    const char *src = tmp_path("fuzz-src.safetensors"), *path = tmp_path("fuzz.safetensors");
    st_writer_t *w = st_writer_new();
    perr_t e = {{0}};
    float a[6] = {1, 2, 3, 4, 5, 6};
    double s = 3.5;
    uint16_t h[3] = {1, 2, 3};
    uint8_t u[5] = {9, 8, 7, 6, 5};
    int64_t sa[2] = {2, 3}, sh[1] = {3}, su[1] = {5}, sz[2] = {0, 4};
    st_writer_add(w, "a", ST_F32, 2, sa, a, &e);
    st_writer_add(w, "s", ST_F64, 0, NULL, &s, &e);
    st_writer_add(w, "h", ST_BF16, 1, sh, h, &e);
    st_writer_add(w, "z", ST_I32, 2, sz, NULL, &e);
    st_writer_add(w, "u", ST_U8, 1, su, u, &e);
    st_writer_set_metadata(w, "format", "pt", &e);
    CHECK(st_writer_save(w, src, &e) == 0, "%s", e.msg);
    st_writer_free(w);
    size_t n0;
    uint8_t *orig = read_file(src, &n0);
    if (!orig) return;
    uint64_t hl = 0;
    for (int i = 0; i < 8; i++) hl |= (uint64_t)orig[i] << (8 * i);
    uint8_t *buf = malloc(n0 + 64);
    int opened = 0, rejected = 0, bad_msg = 0;
    for (int trial = 0; trial < 4000; trial++) {
        size_t n = n0;
        memcpy(buf, orig, n0);
        int edits = 1 + (int)(rng() % 3);
        for (int k = 0; k < edits; k++) {
            switch (rng() % 6) {
            case 0: buf[rng() % n] = (uint8_t)rng(); break;
            case 1: { /* a digit in the header becomes another digit */
                size_t pos = 8 + rng() % hl;
                if (pos < n && buf[pos] >= '0' && buf[pos] <= '9') buf[pos] = (uint8_t)('0' + rng() % 10);
                break;
            }
            case 2: buf[rng() % 8] = (uint8_t)rng(); break; /* length field */
            case 3: n = rng() % (n + 1); break;               /* truncate */
            case 4: { /* extend with random bytes */
                size_t add = 1 + rng() % 16;
                for (size_t i = 0; i < add; i++) buf[n + i] = (uint8_t)rng();
                n += add;
                break;
            }
            default: buf[8 + rng() % hl] = "{}[]\":,0123456789 "[rng() % 19]; break;
            }
            if (n == 0 || n + 16 > n0 + 64) break;
        }
        write_bytes(path, buf, n);
        perr_t err = {{0}};
        st_file_t *f = st_open(path, &err);
        if (!f) {
            rejected++;
            if (!strstr(err.msg, path)) bad_msg++;
            continue;
        }
        opened++;
        /* Touch every byte of every tensor: ASan catches any overrun. */
        unsigned sum = 0;
        for (size_t i = 0; i < st_count(f); i++) {
            const st_tensor_t *t = st_tensor(f, i);
            const uint8_t *p = st_data(f, t);
            CHECK(st_find(f, t->name) == t, "st_find after fuzz");
            CHECK(t->end - t->begin == st_numel(t) * st_dtype_size(t->dtype), "size rule");
            for (uint64_t b = 0; b < t->end - t->begin; b++) sum += p[b];
        }
        (void)sum;
        st_close(f);
    }
    CHECK(bad_msg == 0, "%d rejections without the path in the message", bad_msg);
    CHECK(opened > 0 && rejected > 0, "opened %d rejected %d", opened, rejected);
    printf("        fuzz: %d mutated files opened, %d rejected\n", opened, rejected);
    free(buf);
    free(orig);
}

int main(void) {
    if (harness_mkdtemp(tmpdir)) return 1;
    RUN(test_round_trip_all_dtypes);
    RUN(test_hand_built);
    RUN(test_corrupt_files);
    RUN(test_writer_errors);
    RUN(test_python_reads_our_file);
    RUN(test_mutation_fuzz);
    harness_rmtree(tmpdir);
    return harness_done();
}
