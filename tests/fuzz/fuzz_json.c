/* fuzz_json.c - libFuzzer target for the JSON parser (json.h).
 *
 * Any bytes: parse must either fail with a message or give a tree whose
 * accessors agree with each other (every object key is found again by
 * json_get and gives the member at its index; strings are NUL-terminated
 * at their length; integers read back exactly). */
#include <string.h>

#include "fuzz_common.h"
#include "parity/json.h"

static void walk(const json_t *j, int depth) {
    FUZZ_REQUIRE(depth <= JSON_MAX_DEPTH + 1);
    size_t n = json_len(j);
    switch (json_type(j)) {
    case JSON_OBJECT:
        for (size_t i = 0; i < n; i++) {
            const char *key = json_key_at(j, i);
            FUZZ_REQUIRE(key != NULL);
            FUZZ_REQUIRE(json_get(j, key) == json_at(j, i)); /* keys are unique */
            walk(json_at(j, i), depth + 1);
        }
        break;
    case JSON_ARRAY:
        for (size_t i = 0; i < n; i++) walk(json_at(j, i), depth + 1);
        FUZZ_REQUIRE(json_at(j, n) == NULL);
        break;
    case JSON_STRING: {
        const char *s = json_string(j);
        FUZZ_REQUIRE(s != NULL && s[json_string_len(j)] == '\0');
        break;
    }
    case JSON_NUMBER: {
        int64_t v;
        if (json_int64(j, &v) == 0) FUZZ_REQUIRE((double)v == json_number(j));
        break;
    }
    default:
        FUZZ_REQUIRE(n == 0 && json_string(j) == NULL);
        break;
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    perr_t err;
    err.msg[0] = 0;
    json_t *j = json_parse((const char *)data, size, &err);
    if (!j) {
        FUZZ_REQUIRE(err.msg[0] != 0 && memchr(err.msg, 0, sizeof err.msg) != NULL);
        return 0;
    }
    walk(j, 0);
    json_free(j);
    return 0;
}
