/* json_internal.h - a parsed JSON node's layout, shared by the parser
 * (json.c) and the accessors (json_access.c); internal to ref/io. */
#ifndef PARITY_IO_JSON_INTERNAL_H
#define PARITY_IO_JSON_INTERNAL_H

#include <stddef.h>
#include <stdint.h>

#include "parity/json.h"

typedef struct {
    char **keys;   /* [n] keys in document order, NUL-terminated */
    size_t *order; /* [n] member indices sorted by key */
} json_object_index_t;

struct json {
    uint32_t type;
    uint32_t flag; /* JSON_BOOL: the value; JSON_NUMBER: 1 if b.i64 is exact */
    size_t n;      /* string bytes, or element / member count */
    union {
        double num;
        char *str;
        json_t *items; /* [n] array elements / object member values */
    } a;
    union {
        int64_t i64;
        json_object_index_t *obj;
    } b;
};

#endif
