/* json.c - strict RFC 8259 parser; see include/parity/json.h.
 *
 * Recursive descent, one C call per nesting level, capped at
 * JSON_MAX_DEPTH so hostile input cannot blow the stack.
 *
 * Memory: every node, string and index of one document lives in an arena
 * of chunks owned by the root, so json_free is one walk over the chunks
 * and an error mid-parse needs no per-node cleanup. While a container is
 * open its children sit on a scratch stack shared by all levels; when it
 * closes they move to one exact-size block of 32-byte nodes (a 100 MB
 * header may hold millions of them). Objects also keep their member
 * indices sorted by key: O(log n) lookups, and duplicate keys found in
 * O(n log n).
 *
 * The accessors and json_write_string are json_access.c's; the node
 * layout both share is json_internal.h.
 */
#include "parity/json.h"

#include <errno.h>
#include <math.h>
#include <stdalign.h>
#include <stdlib.h>
#include <string.h>

#include "io/json_internal.h"

typedef struct chunk {
    struct chunk *next;
    size_t used, cap;
    alignas(max_align_t) unsigned char data[];
} chunk_t;

/* What json_parse returns: the root node first, so a json_t * to the
 * root is also a pointer to its document. */
typedef struct {
    json_t root;
    chunk_t *chunks;
} json_doc_t;

typedef struct {
    const char *key;
    size_t idx;
    size_t line, col;
} key_slot_t;

typedef struct {
    const char *text;
    size_t len, pos;
    size_t line, line_start; /* for "line L col C" in messages */
    perr_t *err;
    json_doc_t *doc;
    json_t *stack; /* children of the open containers */
    size_t nstack, capstack;
    key_slot_t *keys; /* keys of the open objects */
    size_t nkeys, capkeys;
} parser_t;

/* ---- error messages ---------------------------------------------------- */

static void describe_byte_at(const parser_t *p, size_t pos, char *buf, size_t cap) {
    if (pos >= p->len) {
        snprintf(buf, cap, "end of input");
        return;
    }
    unsigned char c = (unsigned char)p->text[pos];
    if (c == 0) snprintf(buf, cap, "NUL byte");
    else if (c >= 0x21 && c < 0x7f) snprintf(buf, cap, "'%c'", c);
    else snprintf(buf, cap, "byte 0x%02x", c);
}

/* "line L col C: expected <what>, got <byte at pos>" */
static int fail_expected(parser_t *p, size_t pos, const char *what) {
    char got[32];
    describe_byte_at(p, pos, got, sizeof got);
    return perr_set(p->err, "line %zu col %zu: expected %s, got %s", p->line,
                    pos - p->line_start + 1, what, got);
}

static int fail_msg(parser_t *p, size_t pos, const char *msg) {
    return perr_set(p->err, "line %zu col %zu: %s", p->line, pos - p->line_start + 1, msg);
}

/* A key made safe to print inside an error message: at most 64 bytes,
 * non-printable bytes as \xNN. */
static void printable_key(const char *s, char *buf, size_t cap) {
    size_t o = 0;
    for (size_t i = 0; s[i] && o + 5 < cap; i++) {
        unsigned char c = (unsigned char)s[i];
        if (i == 64) {
            o += (size_t)snprintf(buf + o, cap - o, "...");
            break;
        }
        if (c >= 0x20 && c < 0x7f && c != '"' && c != '\\') buf[o++] = (char)c;
        else o += (size_t)snprintf(buf + o, cap - o, "\\x%02x", c);
    }
    buf[o < cap ? o : cap - 1] = '\0';
}

/* ---- memory ------------------------------------------------------------ */

static void *arena_alloc(parser_t *p, size_t n) {
    n = (n + 7) & ~(size_t)7;
    chunk_t *c = p->doc->chunks;
    if (!c || c->cap - c->used < n) {
        /* Chunks double from 4 KiB to 1 MiB: small configs stay small. */
        size_t cap = c ? c->cap * 2 : 4096;
        if (cap > (1u << 20)) cap = 1u << 20;
        if (cap < n) cap = n;
        c = malloc(sizeof *c + cap);
        if (!c) return NULL;
        c->next = p->doc->chunks;
        c->used = 0;
        c->cap = cap;
        p->doc->chunks = c;
    }
    void *r = c->data + c->used;
    c->used += n;
    return r;
}

void json_free(json_t *j) {
    if (!j) return;
    json_doc_t *doc = (json_doc_t *)j;
    for (chunk_t *c = doc->chunks, *next; c; c = next) {
        next = c->next;
        free(c);
    }
    free(doc);
}

/* Grows a scratch stack to hold one more element. */
static int reserve(void **buf, size_t *cap, size_t n, size_t elem) {
    if (n < *cap) return 0;
    size_t nc = *cap ? *cap * 2 : 64;
    void *g = realloc(*buf, nc * elem);
    if (!g) return -1;
    *buf = g;
    *cap = nc;
    return 0;
}

/* ---- lexing ------------------------------------------------------------ */

static void skip_ws(parser_t *p) {
    while (p->pos < p->len) {
        char c = p->text[p->pos];
        if (c == '\n') {
            p->pos++;
            p->line++;
            p->line_start = p->pos;
        } else if (c == ' ' || c == '\t' || c == '\r') {
            p->pos++;
        } else {
            break;
        }
    }
}

static int hex_digit(char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}

/* Reads the 4 hex digits of a \u escape at p->pos. */
static int read_hex4(parser_t *p, unsigned *out) {
    unsigned v = 0;
    for (int i = 0; i < 4; i++) {
        int d = p->pos < p->len ? hex_digit(p->text[p->pos]) : -1;
        if (d < 0) return fail_expected(p, p->pos, "a hex digit in \\u escape");
        v = v * 16 + (unsigned)d;
        p->pos++;
    }
    *out = v;
    return 0;
}

static size_t utf8_encode(unsigned cp, char *out) {
    if (cp < 0x80) {
        out[0] = (char)cp;
        return 1;
    }
    if (cp < 0x800) {
        out[0] = (char)(0xC0 | (cp >> 6));
        out[1] = (char)(0x80 | (cp & 0x3F));
        return 2;
    }
    if (cp < 0x10000) {
        out[0] = (char)(0xE0 | (cp >> 12));
        out[1] = (char)(0x80 | ((cp >> 6) & 0x3F));
        out[2] = (char)(0x80 | (cp & 0x3F));
        return 3;
    }
    out[0] = (char)(0xF0 | (cp >> 18));
    out[1] = (char)(0x80 | ((cp >> 12) & 0x3F));
    out[2] = (char)(0x80 | ((cp >> 6) & 0x3F));
    out[3] = (char)(0x80 | (cp & 0x3F));
    return 4;
}

/* Length of the valid UTF-8 sequence starting at s[0] (RFC 3629 table:
 * no overlong forms, no surrogates, nothing above U+10FFFF), or 0. */
static size_t utf8_valid_len(const unsigned char *s, size_t avail) {
    unsigned char c = s[0];
    size_t n;
    unsigned char lo = 0x80, hi = 0xBF; /* range of the second byte */
    if (c >= 0xC2 && c <= 0xDF) n = 2;
    else if (c == 0xE0) n = 3, lo = 0xA0;
    else if ((c >= 0xE1 && c <= 0xEC) || c == 0xEE || c == 0xEF) n = 3;
    else if (c == 0xED) n = 3, hi = 0x9F;
    else if (c == 0xF0) n = 4, lo = 0x90;
    else if (c >= 0xF1 && c <= 0xF3) n = 4;
    else if (c == 0xF4) n = 4, hi = 0x8F;
    else return 0;
    if (avail < n) return 0;
    if (s[1] < lo || s[1] > hi) return 0;
    for (size_t i = 2; i < n; i++)
        if (s[i] < 0x80 || s[i] > 0xBF) return 0;
    return n;
}

/* Parses the string literal at p->pos (which is '"') into a fresh,
 * NUL-terminated arena buffer. Decoded text is never longer than its
 * source, so one allocation of the source length suffices. */
static int parse_string_raw(parser_t *p, char **out, size_t *out_len) {
    size_t start = ++p->pos; /* past the opening quote */
    size_t end = start;
    while (end < p->len && p->text[end] != '"') end += p->text[end] == '\\' ? 2 : 1;
    if (end > p->len) end = p->len;
    char *buf = arena_alloc(p, end - start + 1);
    if (!buf) return fail_msg(p, start, "out of memory");
    size_t o = 0;
    for (;;) {
        if (p->pos >= p->len) return fail_expected(p, p->pos, "'\"' to close the string");
        unsigned char c = (unsigned char)p->text[p->pos];
        if (c == '"') {
            p->pos++;
            break;
        }
        if (c < 0x20)
            return fail_expected(p, p->pos, "a string character (control characters must be escaped)");
        if (c >= 0x80) {
            size_t n = utf8_valid_len((const unsigned char *)p->text + p->pos, p->len - p->pos);
            if (!n) return fail_expected(p, p->pos, "valid UTF-8 in string");
            memcpy(buf + o, p->text + p->pos, n);
            o += n;
            p->pos += n;
            continue;
        }
        if (c != '\\') {
            buf[o++] = (char)c;
            p->pos++;
            continue;
        }
        size_t esc = p->pos++;
        char e = p->pos < p->len ? p->text[p->pos] : 0;
        const char *simple = "\"\\/bfnrt";
        const char *decoded = "\"\\/\b\f\n\r\t";
        const char *hit = e ? strchr(simple, e) : NULL;
        if (hit) {
            buf[o++] = decoded[hit - simple];
            p->pos++;
            continue;
        }
        if (e != 'u')
            return fail_expected(p, p->pos, "an escape (one of \\\" \\\\ \\/ \\b \\f \\n \\r \\t \\uXXXX)");
        p->pos++;
        unsigned cp, lo;
        if (read_hex4(p, &cp)) return -1;
        if (cp >= 0xDC00 && cp <= 0xDFFF) return fail_msg(p, esc, "unpaired low surrogate in \\u escape");
        if (cp >= 0xD800 && cp <= 0xDBFF) {
            if (p->pos + 1 >= p->len || p->text[p->pos] != '\\' || p->text[p->pos + 1] != 'u')
                return fail_expected(p, p->pos, "a \\uDC00-\\uDFFF low surrogate after a high surrogate");
            p->pos += 2;
            if (read_hex4(p, &lo)) return -1;
            if (lo < 0xDC00 || lo > 0xDFFF)
                return fail_msg(p, p->pos - 6, "expected a \\uDC00-\\uDFFF low surrogate after a high surrogate");
            cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
        }
        o += utf8_encode(cp, buf + o);
    }
    buf[o] = '\0';
    *out = buf;
    *out_len = o;
    return 0;
}

/* Strict number grammar: -?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)? */
static int parse_number(parser_t *p, json_t *out) {
    const char *t = p->text;
    size_t s = p->pos, i = s;
    int is_integer = 1;
    if (i < p->len && t[i] == '-') i++;
    if (i < p->len && t[i] == '0') {
        i++;
    } else if (i < p->len && t[i] >= '1' && t[i] <= '9') {
        while (i < p->len && t[i] >= '0' && t[i] <= '9') i++;
    } else {
        return fail_expected(p, i, "a digit");
    }
    if (i < p->len && t[i] == '.') {
        is_integer = 0;
        i++;
        if (i >= p->len || t[i] < '0' || t[i] > '9') return fail_expected(p, i, "a digit after '.'");
        while (i < p->len && t[i] >= '0' && t[i] <= '9') i++;
    }
    if (i < p->len && (t[i] == 'e' || t[i] == 'E')) {
        is_integer = 0;
        i++;
        if (i < p->len && (t[i] == '+' || t[i] == '-')) i++;
        if (i >= p->len || t[i] < '0' || t[i] > '9') return fail_expected(p, i, "a digit in the exponent");
        while (i < p->len && t[i] >= '0' && t[i] <= '9') i++;
    }
    size_t n = i - s;
    size_t digits = n - (t[s] == '-');
    if (is_integer && digits <= 18) {
        /* Fast path for the common case (shapes, offsets): fits int64
         * exactly, and the int64 -> double conversion rounds to nearest,
         * as strtod would. */
        int64_t v = 0;
        for (size_t k = s + (t[s] == '-'); k < i; k++) v = v * 10 + (t[k] - '0');
        if (t[s] == '-') v = -v;
        out->type = JSON_NUMBER;
        out->a.num = (t[s] == '-' && v == 0) ? -0.0 : (double)v;
        out->flag = 1;
        out->b.i64 = v;
        p->pos = i;
        return 0;
    }
    /* strtod needs a NUL-terminated copy; the input need not be one. */
    char small[64];
    char *copy = n < sizeof small ? small : malloc(n + 1);
    if (!copy) return fail_msg(p, s, "out of memory");
    memcpy(copy, t + s, n);
    copy[n] = '\0';
    double v = strtod(copy, NULL);
    int exact = 0;
    int64_t iv = 0;
    if (is_integer) {
        errno = 0;
        long long ll = strtoll(copy, NULL, 10);
        if (errno == 0) exact = 1, iv = ll;
    }
    if (copy != small) free(copy);
    if (isinf(v)) return fail_msg(p, s, "number out of range for a double");
    out->type = JSON_NUMBER;
    out->a.num = v;
    out->flag = (uint32_t)exact;
    out->b.i64 = iv;
    p->pos = i;
    return 0;
}

static int parse_literal(parser_t *p, const char *word, json_t *out, json_type_t type, int flag) {
    size_t n = strlen(word);
    for (size_t k = 0; k < n; k++) {
        if (p->pos + k >= p->len || p->text[p->pos + k] != word[k]) {
            char what[16];
            snprintf(what, sizeof what, "'%s'", word);
            return fail_expected(p, p->pos + k, what);
        }
    }
    p->pos += n;
    out->type = type;
    out->flag = (uint32_t)flag;
    return 0;
}

/* ---- containers -------------------------------------------------------- */

static int parse_value(parser_t *p, json_t *out, int depth);

/* Moves the top n scratch nodes into one exact-size arena block. */
static json_t *pop_children(parser_t *p, size_t base) {
    size_t n = p->nstack - base;
    json_t *items = n ? arena_alloc(p, n * sizeof *items) : NULL;
    if (n && !items) return NULL;
    if (n) memcpy(items, p->stack + base, n * sizeof *items);
    p->nstack = base;
    return items;
}

/* Parses one value onto the scratch stack. */
static int push_value(parser_t *p, int depth) {
    json_t v = {0};
    if (parse_value(p, &v, depth)) return -1;
    /* Reserve after parsing: the child's own children used the stack. */
    if (reserve((void **)&p->stack, &p->capstack, p->nstack, sizeof *p->stack))
        return fail_msg(p, p->pos, "out of memory");
    p->stack[p->nstack++] = v;
    return 0;
}

static int parse_array(parser_t *p, json_t *out, int depth) {
    size_t base = p->nstack;
    p->pos++; /* '[' */
    skip_ws(p);
    if (p->pos < p->len && p->text[p->pos] == ']') {
        p->pos++;
    } else {
        for (;;) {
            skip_ws(p);
            if (push_value(p, depth + 1)) return -1;
            skip_ws(p);
            if (p->pos < p->len && p->text[p->pos] == ',') {
                p->pos++;
                continue;
            }
            if (p->pos < p->len && p->text[p->pos] == ']') {
                p->pos++;
                break;
            }
            return fail_expected(p, p->pos, "',' or ']' in array");
        }
    }
    out->type = JSON_ARRAY;
    out->n = p->nstack - base;
    out->a.items = pop_children(p, base);
    if (out->n && !out->a.items) return fail_msg(p, p->pos, "out of memory");
    return 0;
}

static int key_slot_cmp(const void *a, const void *b) {
    const key_slot_t *x = a, *y = b;
    int c = strcmp(x->key, y->key);
    if (c) return c;
    return x->idx < y->idx ? -1 : x->idx > y->idx;
}

/* Builds the object's index from its n key slots (document order):
 * keys in order, then member indices sorted by key. Rejects duplicate
 * keys, naming the key and both positions. */
static int index_object(parser_t *p, json_t *obj, key_slot_t *slots) {
    size_t n = obj->n;
    json_object_index_t *ix = arena_alloc(p, sizeof *ix);
    char **keys = arena_alloc(p, (n ? n : 1) * sizeof *keys);
    size_t *order = arena_alloc(p, (n ? n : 1) * sizeof *order);
    if (!ix || !keys || !order) return fail_msg(p, p->pos, "out of memory");
    ix->keys = keys;
    ix->order = order;
    for (size_t i = 0; i < n; i++) ix->keys[i] = (char *)slots[i].key;
    if (n > 1) qsort(slots, n, sizeof *slots, key_slot_cmp);
    for (size_t i = 1; i < n; i++) {
        if (!strcmp(slots[i - 1].key, slots[i].key)) {
            char k[300];
            printable_key(slots[i].key, k, sizeof k);
            return perr_set(p->err, "line %zu col %zu: duplicate key \"%s\" (first at line %zu col %zu)",
                            slots[i].line, slots[i].col, k, slots[i - 1].line, slots[i - 1].col);
        }
    }
    for (size_t i = 0; i < n; i++) ix->order[i] = slots[i].idx;
    obj->b.obj = ix;
    return 0;
}

static int parse_object(parser_t *p, json_t *out, int depth) {
    size_t base = p->nstack, kbase = p->nkeys;
    p->pos++; /* '{' */
    skip_ws(p);
    if (p->pos < p->len && p->text[p->pos] == '}') {
        p->pos++;
    } else {
        for (;;) {
            skip_ws(p);
            if (p->pos >= p->len || p->text[p->pos] != '"')
                return fail_expected(p, p->pos, "'\"' to start an object key");
            key_slot_t slot = {NULL, p->nkeys - kbase, p->line, p->pos - p->line_start + 1};
            size_t kpos = p->pos, klen;
            char *key;
            if (parse_string_raw(p, &key, &klen)) return -1;
            if (strlen(key) != klen)
                return fail_msg(p, kpos, "object key contains \\u0000, which parity does not support in keys");
            slot.key = key;
            if (reserve((void **)&p->keys, &p->capkeys, p->nkeys, sizeof *p->keys))
                return fail_msg(p, p->pos, "out of memory");
            p->keys[p->nkeys++] = slot;
            skip_ws(p);
            if (p->pos >= p->len || p->text[p->pos] != ':')
                return fail_expected(p, p->pos, "':' after object key");
            p->pos++;
            skip_ws(p);
            if (push_value(p, depth + 1)) return -1;
            skip_ws(p);
            if (p->pos < p->len && p->text[p->pos] == ',') {
                p->pos++;
                continue;
            }
            if (p->pos < p->len && p->text[p->pos] == '}') {
                p->pos++;
                break;
            }
            return fail_expected(p, p->pos, "',' or '}' in object");
        }
    }
    out->type = JSON_OBJECT;
    out->n = p->nstack - base;
    out->a.items = pop_children(p, base);
    if (out->n && !out->a.items) return fail_msg(p, p->pos, "out of memory");
    if (index_object(p, out, out->n ? p->keys + kbase : NULL)) return -1;
    p->nkeys = kbase;
    return 0;
}

static int parse_value(parser_t *p, json_t *out, int depth) {
    if (p->pos >= p->len) return fail_expected(p, p->pos, "a value");
    char c = p->text[p->pos];
    switch (c) {
    case '{':
    case '[':
        if (depth >= JSON_MAX_DEPTH) {
            char msg[96];
            snprintf(msg, sizeof msg, "nesting deeper than %d arrays/objects", JSON_MAX_DEPTH);
            return fail_msg(p, p->pos, msg);
        }
        return c == '{' ? parse_object(p, out, depth) : parse_array(p, out, depth);
    case '"': {
        char *s;
        size_t n;
        if (parse_string_raw(p, &s, &n)) return -1;
        out->type = JSON_STRING;
        out->a.str = s;
        out->n = n;
        return 0;
    }
    case 't': return parse_literal(p, "true", out, JSON_BOOL, 1);
    case 'f': return parse_literal(p, "false", out, JSON_BOOL, 0);
    case 'n': return parse_literal(p, "null", out, JSON_NULL, 0);
    default:
        if (c == '-' || (c >= '0' && c <= '9')) return parse_number(p, out);
        return fail_expected(p, p->pos, "a value");
    }
}

json_t *json_parse(const char *text, size_t len, perr_t *err) {
    if (!text && len) {
        perr_set(err, "line 1 col 1: expected JSON text, got a NULL pointer");
        return NULL;
    }
    json_doc_t *doc = calloc(1, sizeof *doc);
    if (!doc) {
        perr_set(err, "out of memory");
        return NULL;
    }
    parser_t p = {.text = text, .len = len, .line = 1, .err = err, .doc = doc};
    skip_ws(&p);
    int rc = parse_value(&p, &doc->root, 0);
    if (!rc) {
        skip_ws(&p);
        if (p.pos < p.len) rc = fail_expected(&p, p.pos, "end of input");
    }
    free(p.stack);
    free(p.keys);
    if (rc) {
        json_free(&doc->root);
        return NULL;
    }
    return &doc->root;
}

