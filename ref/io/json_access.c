/* json_access.c - reading a parsed JSON document (json_type, json_get,
 * json_at, ...; include/parity/json.h) and writing a JSON string. The
 * parser that builds the nodes is json.c; their layout json_internal.h. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "io/json_internal.h"

json_type_t json_type(const json_t *j) { return j ? (json_type_t)j->type : JSON_NULL; }

const char *json_type_name(json_type_t t) {
    static const char *names[] = {"null", "bool", "number", "string", "array", "object"};
    return (unsigned)t < 6 ? names[t] : "?";
}

const json_t *json_get(const json_t *obj, const char *key) {
    if (!obj || obj->type != JSON_OBJECT || !key || !obj->n) return NULL;
    const json_object_index_t *ix = obj->b.obj;
    size_t lo = 0, hi = obj->n;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        int c = strcmp(ix->keys[ix->order[mid]], key);
        if (c == 0) return &obj->a.items[ix->order[mid]];
        if (c < 0) lo = mid + 1;
        else hi = mid;
    }
    return NULL;
}

size_t json_len(const json_t *j) {
    return j && (j->type == JSON_ARRAY || j->type == JSON_OBJECT) ? j->n : 0;
}

const json_t *json_at(const json_t *j, size_t i) {
    return i < json_len(j) ? &j->a.items[i] : NULL;
}

const char *json_key_at(const json_t *obj, size_t i) {
    if (!obj || obj->type != JSON_OBJECT || i >= obj->n) return NULL;
    return obj->b.obj->keys[i];
}

double json_number(const json_t *j) { return j && j->type == JSON_NUMBER ? j->a.num : 0.0; }
int json_bool(const json_t *j) { return j && j->type == JSON_BOOL ? (int)j->flag : 0; }
const char *json_string(const json_t *j) { return j && j->type == JSON_STRING ? j->a.str : NULL; }
size_t json_string_len(const json_t *j) { return j && j->type == JSON_STRING ? j->n : 0; }

int json_int64(const json_t *j, int64_t *out) {
    if (!j || j->type != JSON_NUMBER) return -1;
    if (j->flag) {
        *out = j->b.i64;
        return 0;
    }
    /* Not an exact integer literal (1e3, 2.0, or beyond int64): accept
     * it only when the double is integral and every integer up to its
     * magnitude is representable, so no precision was lost in parsing. */
    double v = j->a.num;
    if (v != floor(v) || fabs(v) > 9007199254740992.0) return -1;
    *out = (int64_t)v;
    return 0;
}

int json_get_int64(const json_t *obj, const char *key, int64_t *out, perr_t *err) {
    if (!obj || obj->type != JSON_OBJECT) return perr_set(err, "\"%s\": expected an object holding it", key);
    const json_t *v = json_get(obj, key);
    if (!v) return perr_set(err, "\"%s\": missing", key);
    if (v->type != JSON_NUMBER)
        return perr_set(err, "\"%s\": expected an integer, got %s", key, json_type_name((json_type_t)v->type));
    if (json_int64(v, out))
        return perr_set(err, "\"%s\": expected an integer in int64 range, got %.17g", key, v->a.num);
    return 0;
}

void json_write_string(FILE *f, const char *s) {
    if (!s) {
        fputs("null", f);
        return;
    }
    fputc('"', f);
    for (; *s; s++) {
        unsigned char c = (unsigned char)*s;
        switch (c) {
        case '"': fputs("\\\"", f); break;
        case '\\': fputs("\\\\", f); break;
        case '\b': fputs("\\b", f); break;
        case '\f': fputs("\\f", f); break;
        case '\n': fputs("\\n", f); break;
        case '\r': fputs("\\r", f); break;
        case '\t': fputs("\\t", f); break;
        default:
            if (c < 0x20) fprintf(f, "\\u%04x", c);
            else fputc(c, f);
        }
    }
    fputc('"', f);
}
