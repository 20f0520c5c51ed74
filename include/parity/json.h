/* json.h - a small, strict RFC 8259 JSON parser (and a string writer).
 *
 * Used for safetensors headers and config files, so it favours clear
 * errors over leniency: every rejection says where ("line L col C") and
 * what was expected. What it accepts is exactly RFC 8259 with these
 * documented limits:
 *   - nesting deeper than JSON_MAX_DEPTH arrays/objects is an error (the
 *     parser recurses once per level, so hostile input cannot exhaust
 *     the stack);
 *   - duplicate keys in one object are an error naming the key (RFC 8259
 *     leaves their meaning open; for a tensor header they are corruption);
 *   - strings must be valid UTF-8 (no overlong forms, no encoded
 *     surrogates); \uXXXX escapes, including surrogate pairs, decode to
 *     UTF-8 and an unpaired surrogate is an error;
 *   - a string value may contain U+0000 (json_string_len gives its full
 *     length); an object key may not, because keys are looked up and
 *     returned as C strings;
 *   - a number whose magnitude overflows a double is an error. Integer
 *     literals that fit int64 are also kept exactly, so json_get_int64
 *     is exact beyond 2^53;
 *   - no byte-order mark, no comments, no trailing commas.
 *
 * The tree is immutable after parsing. Accessors are NULL/0-safe: asking
 * an array for a key, or a number for its string, returns NULL or 0.
 */
#ifndef PARITY_JSON_H
#define PARITY_JSON_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "parity/error.h"

#define JSON_MAX_DEPTH 64

typedef enum { JSON_NULL, JSON_BOOL, JSON_NUMBER, JSON_STRING, JSON_ARRAY, JSON_OBJECT } json_type_t;
typedef struct json json_t;

/* Parses text[0..len) (need not be NUL-terminated; a NUL byte outside a
 * string is an error). Returns NULL and fills err with
 * "line L col C: expected ..., got ..." on failure. Free with json_free. */
json_t *json_parse(const char *text, size_t len, perr_t *err);
/* Frees a whole document: pass only what json_parse returned (children
 * live in the root's arena and are freed with it). NULL is fine. */
void json_free(json_t *j);

json_type_t json_type(const json_t *j);
const char *json_type_name(json_type_t t);    /* "null", "bool", "number", ... */

/* Object member by key; NULL if absent or obj is not an object.
 * O(log n): members are indexed by key after parsing. */
const json_t *json_get(const json_t *obj, const char *key);
/* Elements of an array / members of an object; 0 for anything else. */
size_t json_len(const json_t *j);
/* i-th array element or object member value, in document order. */
const json_t *json_at(const json_t *j, size_t i);
/* i-th object key, in document order; NULL if not an object. */
const char *json_key_at(const json_t *obj, size_t i);

double json_number(const json_t *j);          /* 0 unless a number */
int json_bool(const json_t *j);               /* 0 unless true */
const char *json_string(const json_t *j);     /* NUL-terminated; NULL unless a string */
size_t json_string_len(const json_t *j);      /* bytes, counting any U+0000 inside */
/* Exact int64 value of a number that is integral and in range (an
 * integer literal, or e.g. 1e3 / 2.0). Returns 0 on success, -1 if j is
 * not such a number. */
int json_int64(const json_t *j, int64_t *out);

/* obj[key] as an int64: -1 with a message naming the key when it is
 * absent, not a number, not integral or out of int64 range. */
int json_get_int64(const json_t *obj, const char *key, int64_t *out, perr_t *err);

/* Writes s as a JSON string literal (quotes included), escaping '"',
 * '\\' and control characters. Bytes >= 0x80 pass through, so valid
 * UTF-8 in gives valid JSON out. */
void json_write_string(FILE *f, const char *s);

#endif
