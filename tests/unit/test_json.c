/* test_json.c - the strict JSON parser: values, escapes, every class of
 * malformed input (with the message it must give), limits, and random
 * mutations that must never crash (run under `make asan` / `make ubsan`). */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "../harness.h"
#include "parity/json.h"

static json_t *parse(const char *s) {
    perr_t e = {{0}};
    json_t *j = json_parse(s, strlen(s), &e);
    CHECK(j != NULL, "parse(%s): %s", s, e.msg);
    return j;
}

/* Parsing must fail with a message containing `want`. */
static void expect_error_n(const char *s, size_t n, const char *want) {
    perr_t e = {{0}};
    json_t *j = json_parse(s, n, &e);
    CHECK(j == NULL, "'%.*s' parsed but should fail", (int)n, s);
    CHECK(strstr(e.msg, want) != NULL, "'%.*s': message \"%s\" lacks \"%s\"", (int)n, s, e.msg, want);
    json_free(j);
}
static void expect_error(const char *s, const char *want) { expect_error_n(s, strlen(s), want); }

static void test_values_and_order(void) {
    json_t *j = parse(" {\"z\": 1, \"a\": [true, false, null, -2.5e2, \"s\"], \"m\": {}} ");
    if (!j) return;
    CHECK(json_type(j) == JSON_OBJECT && json_len(j) == 3, "root");
    CHECK(!strcmp(json_key_at(j, 0), "z") && !strcmp(json_key_at(j, 1), "a") && !strcmp(json_key_at(j, 2), "m"),
          "document order");
    const json_t *a = json_get(j, "a");
    CHECK(a == json_at(j, 1), "json_get and json_at agree");
    CHECK(json_type(a) == JSON_ARRAY && json_len(a) == 5, "array");
    CHECK(json_type(json_at(a, 0)) == JSON_BOOL && json_bool(json_at(a, 0)) == 1, "true");
    CHECK(json_type(json_at(a, 1)) == JSON_BOOL && json_bool(json_at(a, 1)) == 0, "false");
    CHECK(json_type(json_at(a, 2)) == JSON_NULL, "null");
    CHECK(json_number(json_at(a, 3)) == -250.0, "number %g", json_number(json_at(a, 3)));
    CHECK(!strcmp(json_string(json_at(a, 4)), "s"), "string");
    CHECK(json_at(a, 5) == NULL && json_get(a, "x") == NULL && json_get(j, "nope") == NULL, "absent");
    CHECK(json_type(json_get(j, "m")) == JSON_OBJECT && json_len(json_get(j, "m")) == 0, "empty object");
    CHECK(json_string(json_get(j, "z")) == NULL && json_len(json_get(j, "z")) == 0, "wrong-type accessors");
    json_free(j);
    /* Scalars are valid top-level texts (RFC 8259). */
    j = parse("\"top\"");
    CHECK(j && !strcmp(json_string(j), "top"), "scalar root");
    json_free(j);
}

static void test_escapes(void) {
    json_t *j = parse("\"\\\"\\\\\\/\\b\\f\\n\\r\\t\"");
    CHECK(j && !strcmp(json_string(j), "\"\\/\b\f\n\r\t"), "simple escapes");
    json_free(j);
    /* UTF-8 encodings from the Unicode standard: U+00E9, U+20AC, and
     * U+1F600 given as the surrogate pair D83D DE00. */
    j = parse("\"\\u00e9\\u20AC\\ud83d\\ude00x\"");
    CHECK(j && !strcmp(json_string(j), "\xC3\xA9\xE2\x82\xAC\xF0\x9F\x98\x80x"), "unicode escapes");
    json_free(j);
    /* Raw UTF-8 passes through. */
    j = parse("\"\xC3\xA9\xF0\x9F\x98\x80\"");
    CHECK(j && json_string_len(j) == 6, "raw utf-8");
    json_free(j);
    /* U+0000 inside a value: kept, visible through json_string_len. */
    j = parse("\"a\\u0000b\"");
    CHECK(j && json_string_len(j) == 3 && json_string(j)[1] == '\0' && json_string(j)[2] == 'b', "embedded NUL");
    json_free(j);
}

static void test_errors(void) {
    expect_error("", "line 1 col 1: expected a value, got end of input");
    expect_error("   ", "expected a value, got end of input");
    expect_error("[1,]", "expected a value, got ']'");
    expect_error("{\"a\":1,}", "expected '\"' to start an object key, got '}'");
    expect_error("{\"a\" 1}", "expected ':' after object key, got '1'");
    expect_error("[1 2]", "expected ',' or ']' in array, got '2'");
    expect_error("{\"a\":1 \"b\":2}", "expected ',' or '}' in object");
    expect_error("{1:2}", "expected '\"' to start an object key, got '1'");
    expect_error("[1] x", "col 5: expected end of input, got 'x'");
    expect_error("01", "expected end of input, got '1'");
    expect_error("1.", "expected a digit after '.'");
    expect_error("1.e5", "expected a digit after '.'");
    expect_error("-", "expected a digit, got end of input");
    expect_error("-a", "expected a digit, got 'a'");
    expect_error("1e", "expected a digit in the exponent");
    expect_error("1e+", "expected a digit in the exponent");
    expect_error(".5", "expected a value, got '.'");
    expect_error("+1", "expected a value, got '+'");
    expect_error("NaN", "expected a value, got 'N'");
    expect_error("Infinity", "expected a value");
    expect_error("1e999", "number out of range");
    expect_error("-1e400", "number out of range");
    expect_error("tru", "expected 'true', got end of input");
    expect_error("nul1", "expected 'null', got '1'");
    expect_error("[True]", "expected a value, got 'T'");
    expect_error("\"abc", "expected '\"' to close the string, got end of input");
    expect_error("\"a\nb\"", "control characters must be escaped), got byte 0x0a");
    expect_error("\"a\tb\"", "control characters must be escaped");
    expect_error("\"\\x\"", "expected an escape");
    expect_error("\"\\", "expected an escape");
    expect_error("\"\\u12\"", "expected a hex digit in \\u escape, got '\"'");
    expect_error("\"\\u12", "expected a hex digit in \\u escape, got end of input");
    expect_error("\"\\ud800\"", "low surrogate after a high surrogate");
    expect_error("\"\\ud800\\u0041\"", "low surrogate after a high surrogate");
    expect_error("\"\\udc00\"", "unpaired low surrogate");
    expect_error("\"\xff\"", "expected valid UTF-8 in string, got byte 0xff");
    expect_error("\"\xc0\xaf\"", "valid UTF-8");     /* overlong '/' */
    expect_error("\"\xed\xa0\x80\"", "valid UTF-8"); /* encoded surrogate */
    expect_error("\"\xe2\x82\"", "valid UTF-8");     /* truncated sequence */
    expect_error("\"\xf4\x90\x80\x80\"", "valid UTF-8"); /* above U+10FFFF */
    expect_error("\xEF\xBB\xBF{}", "expected a value, got byte 0xef"); /* BOM */
    expect_error("{\"a\\u0000\":1}", "object key contains \\u0000");
    expect_error("[1,", "expected a value, got end of input");
    expect_error_n("[1,\0 2]", 7, "expected a value, got NUL byte");
    expect_error_n("{}\0", 3, "expected end of input, got NUL byte");
    expect_error("{\n  \"a\": 1,\n  \"b\": x}", "line 3 col 8: expected a value, got 'x'");
    expect_error("{\"a\":1,\"b\":2,\n\"a\":3}", "line 2 col 1: duplicate key \"a\" (first at line 1 col 2)");
    expect_error("[{\"k\":[1],\"k\":[2]}]", "duplicate key \"k\"");
}

static void test_numbers(void) {
    json_t *j = parse("[0, -0, 1e-400, 123456789012345678, -9223372036854775808, 9223372036854775808, 1e3, 2.0, "
                      "1.5, 4E+2, 3e-1, 1e16]");
    if (!j) return;
    int64_t v;
    CHECK(json_int64(json_at(j, 0), &v) == 0 && v == 0, "0");
    CHECK(json_int64(json_at(j, 1), &v) == 0 && v == 0 && signbit(json_number(json_at(j, 1))), "-0");
    CHECK(json_number(json_at(j, 2)) == 0.0, "underflow to 0");
    CHECK(json_int64(json_at(j, 3), &v) == 0 && v == 123456789012345678ll, "exact beyond 2^53: %lld", (long long)v);
    CHECK(json_int64(json_at(j, 4), &v) == 0 && v == INT64_MIN, "INT64_MIN");
    CHECK(json_int64(json_at(j, 5), &v) == -1, "2^63 is out of int64 range");
    CHECK(json_number(json_at(j, 5)) == 9223372036854775808.0, "2^63 as double");
    CHECK(json_int64(json_at(j, 6), &v) == 0 && v == 1000, "1e3");
    CHECK(json_int64(json_at(j, 7), &v) == 0 && v == 2, "2.0");
    CHECK(json_int64(json_at(j, 8), &v) == -1, "1.5 is not integral");
    CHECK(json_number(json_at(j, 9)) == 400.0, "4E+2");
    CHECK(json_number(json_at(j, 10)) == 0.3, "3e-1 rounds like the C literal 0.3");
    CHECK(json_int64(json_at(j, 11), &v) == -1, "1e16 (non-literal above 2^53) is refused");
    json_free(j);
}

static void test_get_int64_errors(void) {
    json_t *j = parse("{\"n\": 7, \"s\": \"7\", \"f\": 7.5}");
    if (!j) return;
    int64_t v = 0;
    perr_t e = {{0}};
    CHECK(json_get_int64(j, "n", &v, &e) == 0 && v == 7, "n");
    CHECK(json_get_int64(j, "missing", &v, &e) == -1 && strstr(e.msg, "\"missing\": missing"), "%s", e.msg);
    CHECK(json_get_int64(j, "s", &v, &e) == -1 && strstr(e.msg, "\"s\": expected an integer, got string"), "%s",
          e.msg);
    CHECK(json_get_int64(j, "f", &v, &e) == -1 && strstr(e.msg, "\"f\"") && strstr(e.msg, "7.5"), "%s", e.msg);
    CHECK(json_get_int64(json_get(j, "n"), "n", &v, &e) == -1, "not an object");
    json_free(j);
}

static void test_depth_limit(void) {
    static char buf[2 * 1000000 + 8];
    for (int depth = JSON_MAX_DEPTH; depth <= JSON_MAX_DEPTH + 1; depth++) {
        size_t n = 0;
        for (int i = 0; i < depth; i++) buf[n++] = '[';
        for (int i = 0; i < depth; i++) buf[n++] = ']';
        perr_t e = {{0}};
        json_t *j = json_parse(buf, n, &e);
        if (depth == JSON_MAX_DEPTH) CHECK(j != NULL, "depth %d must parse: %s", depth, e.msg);
        else CHECK(j == NULL && strstr(e.msg, "nesting deeper than 64"), "depth %d: %s", depth, e.msg);
        json_free(j);
    }
    /* A million open brackets / braces: an error, not a stack overflow. */
    memset(buf, '[', 1000000);
    expect_error_n(buf, 1000000, "nesting deeper");
    for (int i = 0; i < 1000000; i += 5) memcpy(buf + i, "{\"a\":", 5);
    expect_error_n(buf, 1000000, "nesting deeper");
}

/* Every proper prefix of an object is truncated input and must fail. */
static void test_truncated(void) {
    const char *doc = "{\"w\": {\"dtype\": \"F32\", \"shape\": [2, 3], \"x\": [1.5e-3, true, null, \"\\u00e9\\ud83d\\ude00\"]}}";
    size_t n = strlen(doc);
    json_t *full = parse(doc);
    json_free(full);
    for (size_t k = 0; k < n; k++) {
        perr_t e = {{0}};
        json_t *j = json_parse(doc, k, &e);
        CHECK(j == NULL && e.msg[0], "prefix of length %zu parsed", k);
        json_free(j);
    }
}

static void test_many_keys(void) {
    /* 20000 keys: lookups by binary search, and a duplicate placed last
     * must still be found (naming the key). */
    enum { N = 20000 };
    static char buf[N * 24 + 64];
    size_t o = 0;
    buf[o++] = '{';
    for (int i = 0; i < N; i++) o += (size_t)sprintf(buf + o, "%s\"k%d\":%d", i ? "," : "", (i * 7919) % N, i);
    buf[o++] = '}';
    perr_t e = {{0}};
    json_t *j = json_parse(buf, o, &e);
    CHECK(j && json_len(j) == N, "%s", e.msg);
    int bad = 0;
    for (int i = 0; j && i < N; i++) {
        char key[16];
        sprintf(key, "k%d", (i * 7919) % N);
        int64_t v;
        if (json_get_int64(j, key, &v, &e) || v != i) bad++;
    }
    CHECK(bad == 0, "%d lookups wrong", bad);
    json_free(j);
    o--; /* replace the closing brace by a duplicate of an early key */
    o += (size_t)sprintf(buf + o, ",\"k%d\":0}", (5 * 7919) % N);
    char want[32];
    sprintf(want, "duplicate key \"k%d\"", (5 * 7919) % N);
    expect_error_n(buf, o, want);
}

static void test_write_string_round_trip(void) {
    const char *cases[] = {"", "plain", "q\"uote", "back\\slash", "ctl\x01\x1f\n\r\t\b\f", "\xC3\xA9\xE2\x82\xAC",
                           "slash/ and \x7f"};
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        char *buf = NULL;
        size_t len = 0;
        FILE *m = open_memstream(&buf, &len);
        json_write_string(m, cases[k]);
        fclose(m);
        perr_t e = {{0}};
        json_t *j = json_parse(buf, len, &e);
        CHECK(j && !strcmp(json_string(j), cases[k]), "case %zu: %s -> %s", k, buf, e.msg);
        for (size_t i = 0; i < len; i++) CHECK((unsigned char)buf[i] >= 0x20, "raw control byte in output");
        json_free(j);
        free(buf);
    }
}

static uint64_t rng_state = 0x2545F4914F6CDD1Dull;
static uint64_t rng(void) {
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return rng_state;
}

/* Random edits of a valid document: any outcome but a crash is fine; a
 * failure must come with a positioned message. */
static void test_mutation_fuzz(void) {
    const char *doc = "{\"__metadata__\":{\"format\":\"pt\"},\"w\":{\"dtype\":\"F32\",\"shape\":[2,3],"
                      "\"data_offsets\":[0,24]},\"s\":[\"\\u00e9\\ud83d\\ude00\",-1.5e-3,true,false,null,[],{}]}";
    size_t n0 = strlen(doc);
    char buf[512];
    const char alphabet[] = "{}[]\":,\\u0123456789eE+-.tfn \x00\x80\xff\xc3\xed";
    int parsed = 0, failed = 0;
    for (int trial = 0; trial < 20000; trial++) {
        size_t n = n0;
        memcpy(buf, doc, n);
        int edits = 1 + (int)(rng() % 4);
        for (int k = 0; k < edits; k++) {
            size_t pos = rng() % n;
            switch (rng() % 3) {
            case 0: buf[pos] = alphabet[rng() % (sizeof alphabet - 1)]; break;
            case 1: n = pos; break; /* truncate */
            default:
                if (n + 1 < sizeof buf) {
                    memmove(buf + pos + 1, buf + pos, n - pos);
                    buf[pos] = (char)rng();
                    n++;
                }
            }
            if (n == 0) break;
        }
        perr_t e = {{0}};
        json_t *j = json_parse(buf, n, &e);
        if (j) parsed++;
        else {
            failed++;
            CHECK(strncmp(e.msg, "line ", 5) == 0, "message without position: %s", e.msg);
        }
        json_free(j);
    }
    CHECK(parsed > 0 && failed > 0, "parsed %d failed %d", parsed, failed);
}

int main(void) {
    RUN(test_values_and_order);
    RUN(test_escapes);
    RUN(test_errors);
    RUN(test_numbers);
    RUN(test_get_int64_errors);
    RUN(test_depth_limit);
    RUN(test_truncated);
    RUN(test_many_keys);
    RUN(test_write_string_round_trip);
    RUN(test_mutation_fuzz);
    return harness_done();
}
