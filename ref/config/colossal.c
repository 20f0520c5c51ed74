/* colossal.c - Colossal-AI's `parallel = dict(...)` config file (colossal.h).
 *
 * Colossal-AI executes its config as Python; parity reads it with a lexer
 * and a recursive-descent parser for the literal subset that Colossal-AI's
 * docs and examples use, and evaluates nothing:
 *   statements  NAME = value; `import ...` / `from ... import ...` lines,
 *               skipped (they only bring in names such as AMP_TYPE for other
 *               settings); a lone string (a docstring); comments, blank
 *               lines, backslash continuations, newlines inside brackets.
 *   values      decimal integers and decimals (one sign); '...' and "..."
 *               with the escapes \\ \' \" \n \t \r ('''...''' too); True,
 *               False, None; dict(k=v, ...), {'k': v, ...}, [...], (...);
 *               names and dotted names (AMP_TYPE.NAIVE), opaque outside
 *               `parallel`. Inside it a name must have been assigned a
 *               number, string, bool or None above: Colossal-AI's examples
 *               write size=TENSOR_PARALLEL_SIZE.
 * Anything else (calls other than dict(...), operators, subscripts,
 * statements other than assignments) is an error naming the line. Nesting
 * is capped at MAX_DEPTH, so no input can exhaust the stack.
 */
#include "parity/colossal.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "parity/numparse.h"
#include "parity/runtime.h"

/* MAX_SIZE: a degree or size, at most the devices parity runs */
enum { MAX_DEPTH = 32, MAX_SIZE = PARITY_MAX_DEVICES, STR_KEEP = 16, SHOW = 40 };

typedef enum { T_END, T_NL, T_NAME, T_NUM, T_STR, T_OP } tkind_t;
/* in this order: kinds from V_NAME on cannot be used through a name */
typedef enum { V_ABSENT, V_INT, V_FLOAT, V_STR, V_BOOL, V_NONE, V_NAME, V_DICT, V_LIST } vkind_t;

/* A value as far as parity needs one: scalars in full, containers by kind. */
typedef struct {
    vkind_t k;
    long line;
    const char *s; /* the text as written (a number's without its sign) */
    size_t n;
    int neg;
    char str[STR_KEEP]; /* V_STR: the decoded start, and whether more was cut */
    int str_long;
} val_t;

typedef struct { const char *s; size_t n; val_t v; } binding_t;

/* What `parallel` said: a slot per key it may hold (V_ABSENT until given). */
enum { S_PIPE, S_PIPE_SIZE, S_TENSOR, S_T_SIZE, S_T_MODE, S_T_DEPTH, S_DATA, N_SLOTS };
static const char *const slot_name[N_SLOTS] = {
    "parallel.pipeline",    "parallel.pipeline.size", "parallel.tensor", "parallel.tensor.size",
    "parallel.tensor.mode", "parallel.tensor.depth",  "parallel.data"};
/* The dict being read: keys are checked (and kept) only inside `parallel`. */
typedef enum { C_NONE, C_PAR, C_PIPE, C_TENSOR } ctx_t;
static const char *const ctx_name[] = {"", "parallel", "parallel.pipeline", "parallel.tensor"};
static const char *const ctx_keys[] = {"", "pipeline, tensor and data", "size",
                                       "size, mode and depth"};

typedef struct {
    const char *text, *p, *end, *path;
    long line;
    int brackets; /* open brackets: a newline inside them does not end a statement */
    struct { tkind_t k; char op; int col0; val_t v; } t; /* the token; v.s, v.n, v.line */
    binding_t *names; /* top-level assignments, in order */
    size_t n_names, cap;
    int in_par;    /* reading parallel's value */
    long par_line; /* where parallel was assigned; 0 before */
    val_t slot[N_SLOTS];
    perr_t *err;
} rd_t;

static int fail(rd_t *r, long line, const char *key, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static int fail(rd_t *r, long line, const char *key, const char *fmt, ...) {
    char msg[768];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    if (!key && r->in_par) key = "parallel";
    return perr_set(r->err, "%s:%ld: %s%s%s", r->path, line, key ? key : "", key ? ": " : "", msg);
}

/* The file's text in a message: at most SHOW bytes, unprintable ones as '?'. */
static const char *show(const char *s, size_t n, char out[SHOW + 4]) {
    size_t k = 0;
    for (; k < n && k < SHOW; k++) out[k] = s[k] >= 0x20 && s[k] < 0x7f ? s[k] : '?';
    if (n > SHOW) memcpy(out + k, "...", 3), k += 3;
    out[k] = 0;
    return out;
}

static const char *what(const val_t *v, char out[96]) {
    char b[SHOW + 4];
    const char *pre = v->k == V_FLOAT ? "the float " : v->k == V_NAME ? "the name " : "";
    if (v->k == V_DICT || v->k == V_LIST) return v->k == V_DICT ? "a dict" : "a list or tuple";
    if (v->k == V_STR)
        snprintf(out, 96, "the string '%s%s'", show(v->str, strlen(v->str), b),
                 v->str_long ? "..." : "");
    else
        snprintf(out, 96, "%s%s%s", pre, v->neg ? "-" : "", show(v->s, v->n, b));
    return out;
}

static const char *tdesc(const rd_t *r, char out[64]) {
    char b[SHOW + 4];
    if (r->t.k == T_END) return "the end of the file";
    if (r->t.k == T_NL) return "the end of the line";
    if (r->t.k == T_STR) return "a string";
    if (r->t.k == T_OP) snprintf(out, 64, "'%c'", r->t.op);
    else snprintf(out, 64, "'%s'", show(r->t.v.s, r->t.v.n, b));
    return out;
}

static int is_alpha(int c) { return c == '_' || ((c | 32) >= 'a' && (c | 32) <= 'z'); }
static int is_digit(int c) { return c >= '0' && c <= '9'; }
static int is_op(const rd_t *r, char op) { return r->t.k == T_OP && r->t.op == op; }
static int is_word(const char *s, size_t n, const char *w) {
    return n == strlen(w) && !memcmp(s, w, n);
}

static int lex_string(rd_t *r, const char *p, const char *e) {
    val_t *v = &r->t.v;
    const char q = *p;
    size_t k = 0;
    r->t.k = T_STR, v->k = V_STR;
    if (e - p >= 3 && p[1] == q && p[2] == q) { /* '''...''': a docstring, kept as nothing */
        for (p += 3, v->str_long = 1;; p++) {
            if (p >= e) return fail(r, v->line, NULL, "unterminated triple-quoted string");
            if (*p == '\n') r->line++;
            if (*p == '\\' && p + 1 < e) r->line += p[1] == '\n', p++;
            else if (*p == q && e - p >= 3 && p[1] == q && p[2] == q) break;
        }
        p += 2;
    } else {
        for (p++; p >= e || *p != q; p++) {
            if (p >= e || *p == '\n')
                return fail(r, v->line, NULL, "unterminated string (its %c is not closed on "
                                              "this line)", q);
            unsigned char c = (unsigned char)*p;
            if (c == '\\') {
                static const char from[] = "nrt\\'\"\n", to[] = "\n\r\t\\'\"";
                const char *m = ++p < e ? memchr(from, *p, sizeof from - 1) : NULL;
                if (!m)
                    return fail(r, v->line, NULL, "unsupported escape in a string (\\\\ \\' "
                                                  "\\\" \\n \\t \\r only)");
                if (*m == '\n') { r->line++; continue; } /* a continued line */
                c = (unsigned char)to[m - from];
            } else if (c < 0x20 ? c != '\t' : c == 0x7f) {
                return fail(r, v->line, NULL, "control byte 0x%02x in a string", c);
            }
            if (k + 1 < STR_KEEP) v->str[k++] = (char)c;
            else v->str_long = 1;
        }
    }
    v->n = (size_t)(p + 1 - v->s), r->p = p + 1;
    return 0;
}

static int lex(rd_t *r) {
    const char *p = r->p, *e = r->end, *s;
    for (;; p++) { /* blanks, comments, continuations, newlines inside brackets */
        if (p < e && *p == '#') {
            while (p + 1 < e && p[1] != '\n') p++;
        } else if (p < e && *p == '\\') {
            p += p + 1 < e && p[1] == '\r';
            if (p + 1 >= e || p[1] != '\n')
                return fail(r, r->line, NULL, "a '\\' outside a string must end the line");
            p++, r->line++;
        } else if (p < e && *p == '\n' && r->brackets > 0) {
            r->line++;
        } else if (p >= e || !*p || !strchr(" \t\r\f", *p)) {
            break;
        }
    }
    memset(&r->t, 0, sizeof r->t);
    r->t.v.s = s = p, r->t.v.line = r->line, r->t.col0 = p == r->text || p[-1] == '\n';
    const unsigned char c = p < e ? (unsigned char)*p : 0;
    char b[SHOW + 4];
    if (p == e) {
        r->t.k = T_END;
    } else if (c == '\n') {
        r->t.k = T_NL, r->line++, p++;
    } else if (c == '\'' || c == '"') {
        return lex_string(r, p, e);
    } else if (is_alpha(c)) {
        while (p < e && (is_alpha(*p) || is_digit(*p))) p++;
        r->t.k = T_NAME;
        if (p < e && (*p == '\'' || *p == '"') && p - s <= 2 &&
            strspn(s, "rRbBfFuU") >= (size_t)(p - s))
            return fail(r, r->line, NULL, "string prefixes (r'', b'', f'') are not understood");
    } else if (is_digit(c) || (c == '.' && p + 1 < e && is_digit(p[1]))) {
        int fl = 0, bad = 0;
        while (p < e && is_digit(*p)) p++;
        if (p < e && *p == '.')
            for (fl = 1, p++; p < e && is_digit(*p);) p++;
        if (p < e && (*p | 32) == 'e') {
            fl = 1, p += 1 + (p + 1 < e && (p[1] == '+' || p[1] == '-'));
            bad = p >= e || !is_digit(*p);
            while (p < e && is_digit(*p)) p++;
        }
        const char *q = p; /* 0x10, 1_000, 2j, 1.2.3: not read */
        while (q < e && (is_alpha(*q) || is_digit(*q) || *q == '.')) q++;
        if (bad || q > p)
            return fail(r, r->line, NULL, "'%s' is not a decimal number", show(s, q - s, b));
        if (!fl && p - s > 1 && *s == '0')
            return fail(r, r->line, NULL, "'%s': leading zeros", show(s, p - s, b));
        r->t.k = T_NUM, r->t.v.k = fl ? V_FLOAT : V_INT;
    } else if (c && strchr("()[]{},:=.-+*", c)) {
        r->t.k = T_OP, r->t.op = (char)c, p++;
        if (strchr("([{", c)) r->brackets++;
        else if (strchr(")]}", c) && r->brackets > 0) r->brackets--;
    } else if (c >= 0x20 && c < 0x7f) {
        return fail(r, r->line, NULL, "unexpected '%c' (literal values only)", c);
    } else {
        return fail(r, r->line, NULL, "unexpected byte 0x%02x", c);
    }
    r->t.v.n = (size_t)(p - s), r->p = p;
    return 0;
}

static const binding_t *lookup(const rd_t *r, const char *s, size_t n) {
    for (size_t i = r->n_names; i-- > 0;) /* the latest assignment */
        if (r->names[i].n == n && !memcmp(r->names[i].s, s, n)) return &r->names[i];
    return NULL;
}

/* The slot of a key of parallel's dicts and the context of its value. */
static int key_slot(rd_t *r, ctx_t ctx, const char *k, size_t n, long line, int *slot,
                    ctx_t *child) {
    static const struct { ctx_t ctx; const char *key; int slot; ctx_t child; } keys[] = {
        {C_PAR, "pipeline", S_PIPE, C_PIPE},  {C_PAR, "tensor", S_TENSOR, C_TENSOR},
        {C_PAR, "data", S_DATA, C_NONE},      {C_PIPE, "size", S_PIPE_SIZE, C_NONE},
        {C_TENSOR, "size", S_T_SIZE, C_NONE}, {C_TENSOR, "mode", S_T_MODE, C_NONE},
        {C_TENSOR, "depth", S_T_DEPTH, C_NONE}};
    for (size_t i = 0; i < sizeof keys / sizeof keys[0]; i++)
        if (keys[i].ctx == ctx && is_word(k, n, keys[i].key)) {
            *slot = keys[i].slot, *child = keys[i].child;
            return 0;
        }
    char b[SHOW + 4], key[96];
    snprintf(key, sizeof key, "%s.%s", ctx_name[ctx], show(k, n, b));
    return fail(r, line, key, "unknown key (%s takes %s)", ctx_name[ctx], ctx_keys[ctx]);
}

static int parse_value(rd_t *r, ctx_t ctx, int depth, val_t *out);

/* Items up to `close` of a list or tuple ('l'), dict(k=v, ...) ('k') or
 * {k: v, ...} ('d'); in parallel's dicts (ctx) each value goes to its slot. */
static int parse_items(rd_t *r, char close, char form, ctx_t ctx, int depth, long open) {
    char d[64], w[96];
    for (;;) {
        if (r->t.k == T_END)
            return fail(r, open, NULL, "this line's bracket is never closed with '%c'", close);
        if (is_op(r, close)) return lex(r);
        const char *key = NULL;
        size_t kn = 0;
        const long kline = r->t.v.line;
        val_t kv, v;
        if (form == 'k') {
            if (r->t.k != T_NAME)
                return fail(r, kline, NULL, "dict(...) takes key=value, got %s", tdesc(r, d));
            key = r->t.v.s, kn = r->t.v.n;
            if (lex(r)) return -1;
            if (!is_op(r, '=')) return fail(r, kline, NULL, "expected '=', got %s", tdesc(r, d));
            if (lex(r)) return -1;
        } else if (form == 'd') {
            if (parse_value(r, C_NONE, depth + 1, &kv)) return -1;
            if (!is_op(r, ':')) return fail(r, kline, NULL, "expected ':', got %s", tdesc(r, d));
            if (lex(r)) return -1;
            if (ctx != C_NONE && (kv.k != V_STR || kv.str_long))
                return fail(r, kline, ctx_name[ctx], "expected a string key, got %s", what(&kv, w));
            key = kv.str, kn = strlen(kv.str);
        }
        int slot = -1;
        ctx_t child = C_NONE;
        if (ctx != C_NONE && key_slot(r, ctx, key, kn, kline, &slot, &child)) return -1;
        if (parse_value(r, child, depth + 1, &v)) return -1;
        if (slot >= 0 && r->slot[slot].k)
            return fail(r, kline, slot_name[slot], "given twice (lines %ld and %ld)",
                        r->slot[slot].line, kline);
        if (slot >= 0) r->slot[slot] = v;
        if (is_op(r, ',')) {
            if (lex(r)) return -1;
        } else if (!is_op(r, close)) {
            return fail(r, r->t.v.line, NULL, "expected ',' or '%c' (for line %ld), got %s", close,
                        open, tdesc(r, d));
        }
    }
}

static int parse_value(rd_t *r, ctx_t ctx, int depth, val_t *out) {
    char d[64], b[SHOW + 4];
    const long line = r->t.v.line;
    if (depth >= MAX_DEPTH) return fail(r, line, NULL, "nested deeper than %d levels", MAX_DEPTH);
    const int neg = is_op(r, '-'), sign = neg || is_op(r, '+');
    if (sign && lex(r)) return -1;
    if (sign && r->t.k != T_NUM)
        return fail(r, line, NULL, "a sign must precede a number, got %s", tdesc(r, d));
    *out = r->t.v, out->neg = neg;
    if (r->t.k == T_NUM || r->t.k == T_STR) return lex(r);
    if (is_op(r, '(') || is_op(r, '[') || is_op(r, '{')) {
        const char open = r->t.op, close = open == '(' ? ')' : open == '[' ? ']' : '}';
        if (lex(r)) return -1;
        out->k = open == '{' ? V_DICT : V_LIST;
        if (open == '(' && !is_op(r, ')')) { /* (v) is v; (v, ...) a tuple */
            if (parse_value(r, ctx, depth + 1, out)) return -1;
            if (is_op(r, ')')) return lex(r);
            if (!is_op(r, ','))
                return fail(r, r->t.v.line, NULL, "expected ',' or ')' (for line %ld), got %s",
                            line, tdesc(r, d));
            out->k = V_LIST, out->line = line;
            if (lex(r)) return -1;
        }
        return parse_items(r, close, open == '{' ? 'd' : 'l', open == '{' ? ctx : C_NONE, depth,
                           line);
    }
    if (r->t.k != T_NAME) return fail(r, line, NULL, "expected a value, got %s", tdesc(r, d));
    const char *s = r->t.v.s;
    size_t n = r->t.v.n;
    int dotted = 0;
    if (lex(r)) return -1;
    if (is_word(s, n, "dict") && is_op(r, '(')) {
        out->k = V_DICT;
        return lex(r) ? -1 : parse_items(r, ')', 'k', ctx, depth, line);
    }
    for (; is_op(r, '.'); dotted = 1) { /* a dotted name: AMP_TYPE.NAIVE */
        if (lex(r)) return -1;
        if (r->t.k != T_NAME)
            return fail(r, line, NULL, "expected a name after '.', got %s", tdesc(r, d));
        n = (size_t)(r->t.v.s + r->t.v.n - s);
        if (lex(r)) return -1;
    }
    if (is_op(r, '('))
        return fail(r, line, NULL, "'%s(...)': only dict(...) calls are read", show(s, n, b));
    out->s = s, out->n = n, out->k = V_NAME;
    if (!dotted && (is_word(s, n, "True") || is_word(s, n, "False"))) {
        out->k = V_BOOL;
    } else if (!dotted && is_word(s, n, "None")) {
        out->k = V_NONE;
    } else if (r->in_par) { /* Colossal-AI's examples: size=TENSOR_PARALLEL_SIZE */
        const binding_t *bd = dotted ? NULL : lookup(r, s, n);
        if (!bd) return fail(r, line, NULL, "'%s' is not a name assigned above", show(s, n, b));
        if (bd->v.k >= V_NAME)
            return fail(r, line, NULL, "'%s' (line %ld) is not a number or string", show(s, n, b),
                        bd->v.line);
        *out = bd->v, out->line = line;
    }
    return 0;
}

static int bind(rd_t *r, const char *s, size_t n, const val_t *v) {
    /* lookups scan the names: a bound keeps a hostile file linear enough */
    enum { MAX_NAMES = 4096 };
    if (r->n_names == MAX_NAMES)
        return fail(r, v->line, NULL, "more than %d assignments (a parallel config needs a few)",
                    (int)MAX_NAMES);
    if (r->n_names == r->cap) {
        size_t cap = r->cap ? 2 * r->cap : 16;
        binding_t *nb = realloc(r->names, cap * sizeof *nb);
        if (!nb) return fail(r, v->line, NULL, "out of memory");
        r->names = nb, r->cap = cap;
    }
    const binding_t *alias = v->k == V_NAME ? lookup(r, v->s, v->n) : NULL; /* TP = TP_SIZE */
    r->names[r->n_names++] = (binding_t){s, n, alias ? alias->v : *v};
    return 0;
}

static int parse_stmt(rd_t *r) {
    char d[64], w[96];
    const long line = r->t.v.line;
    if (r->t.k == T_NL) return lex(r);
    if (!r->t.col0) return fail(r, line, NULL, "unexpected indent (a statement starts its line)");
    if (r->t.k == T_NAME && (is_word(r->t.v.s, r->t.v.n, "import") ||
                             is_word(r->t.v.s, r->t.v.n, "from"))) {
        /* names for other settings' values (AMP_TYPE): nothing parity reads */
        int open = 0;
        do {
            if (lex(r)) return -1;
            open += is_op(r, '(') - is_op(r, ')');
            if (open < 0) return fail(r, line, NULL, "unbalanced ')' in an import line");
        } while (r->t.k == T_NAME || (r->t.k == T_OP && strchr(".,()*", r->t.op)));
        if (open) return fail(r, line, NULL, "an import line's '(' is never closed");
    } else if (r->t.k == T_STR) { /* a docstring */
        if (lex(r)) return -1;
    } else {
        if (r->t.k != T_NAME)
            return fail(r, line, NULL, "expected NAME = value, got %s", tdesc(r, d));
        const char *s = r->t.v.s;
        const size_t n = r->t.v.n;
        const int par = is_word(s, n, "parallel");
        if (lex(r)) return -1;
        if (!is_op(r, '=')) return fail(r, line, NULL, "expected '=', got %s", tdesc(r, d));
        if (par && r->par_line)
            return fail(r, line, "parallel", "assigned twice (lines %ld and %ld); give one layout",
                        r->par_line, line);
        val_t v;
        r->in_par = par;
        if (lex(r) || parse_value(r, par ? C_PAR : C_NONE, 0, &v)) return -1;
        r->in_par = 0;
        if (par && v.k != V_DICT)
            return fail(r, line, "parallel", "expected dict(...) or {...}, got %s", what(&v, w));
        if (par) r->par_line = line;
        else if (bind(r, s, n, &v)) return -1;
    }
    if (r->t.k != T_NL && r->t.k != T_END)
        return fail(r, r->t.v.line, NULL, "expected the end of the line, got %s (literal values "
                                          "only)", tdesc(r, d));
    return 0;
}

/* Slot i as an integer in [1, MAX_SIZE], by numparse's rules and messages. */
static int get_int(rd_t *r, int i, long long *out) {
    const val_t *v = &r->slot[i];
    char d[96], buf[SHOW + 2], key[512];
    if (v->k != V_INT)
        return fail(r, v->line, slot_name[i], "expected an integer in [1, %d], got %s", MAX_SIZE,
                    what(v, d));
    if (v->n > SHOW)
        return fail(r, v->line, slot_name[i], "'%s' is out of range: expected an integer in "
                                              "[1, %d]", what(v, d), MAX_SIZE);
    buf[0] = '-', memcpy(buf + 1, v->s, v->n), buf[v->n + 1] = 0;
    snprintf(key, sizeof key, "%s:%ld: %s", r->path, v->line, slot_name[i]);
    return num_parse_int(key, buf + !v->neg, 1, MAX_SIZE, out, r->err);
}

static long long root(long long x, int k) { /* the largest q with q^k <= x (x <= MAX_SIZE) */
    long long q = 1;
    while ((k == 2 ? (q + 1) * (q + 1) : (q + 1) * (q + 1) * (q + 1)) <= x) q++;
    return q;
}

/* The tensor dict: its size and mode (None or '1d', '2d', '2.5d' with its
 * depth, '3d', 'sequence'). Colossal-AI's legacy mode='sequence' (Li et al.,
 * ring self-attention: the sequence split over the tensor group, RingQK and
 * RingAV pass keys and values round it) is context parallelism over a ring,
 * so it becomes parity's cp ring (--context-parallel-size N --cp-comm-type
 * p2p) with no tensor cut. Colossal splits the sequence contiguously and
 * parity zigzags it (2*cp chunks): the load balance differs, the bits are the
 * golden run's either way. */
static int tensor(rd_t *r, long long *tp, int *tp_mode, int *tp_depth, long long *cp) {
    static const char *const modes[] = {"1d", "2d", "2.5d", "3d", "sequence"};
    const val_t *t = &r->slot[S_TENSOR], *m = &r->slot[S_T_MODE], *dv = &r->slot[S_T_DEPTH];
    const long size_line = r->slot[S_T_SIZE].line;
    char w[96];
    long long size, depth = 1, q;
    int mode = -1; /* None */
    if (t->k == V_INT)
        return fail(r, t->line, "parallel.tensor", "a size needs a mode, e.g. tensor=dict(size=%s, "
                                                   "mode='1d')", what(t, w));
    if (t->k != V_DICT)
        return fail(r, t->line, "parallel.tensor", "expected dict(size=N, mode='1d'), got %s",
                    what(t, w));
    /* Colossal-AI reads tensor['size']: a dict without one is a KeyError there */
    if (!r->slot[S_T_SIZE].k)
        return fail(r, t->line, "parallel.tensor.size", "missing: write tensor=dict(size=N, "
                                                        "mode='1d')");
    if (get_int(r, S_T_SIZE, &size)) return -1;
    for (int k = 0; m->k == V_STR && !m->str_long && k < 5; k++)
        if (!strcmp(m->str, modes[k])) mode = k;
    if (m->k != V_ABSENT && m->k != V_NONE && mode < 0)
        return fail(r, m->line, "parallel.tensor.mode", "expected '1d', '2d', '2.5d', '3d', "
                                                        "'sequence' or None, got %s", what(m, w));
    if (dv->k && mode != 2)
        return fail(r, dv->line, "parallel.tensor.depth", "only mode '2.5d' takes a depth (the "
                    "mode is %s%s%s)", mode < 0 ? "" : "'", mode < 0 ? "None" : modes[mode],
                    mode < 0 ? "" : "'");
    if (mode < 0 && size > 1)
        return fail(r, size_line, "parallel.tensor.mode", "missing: size %lld needs a mode, e.g. "
                                                          "mode='1d' (Megatron 1-D)", size);
    if (mode == 2 && !dv->k)
        return fail(r, m->line, "parallel.tensor.depth", "missing: mode '2.5d' needs depth=D with "
                                                         "size = q x q x D");
    if (mode == 2 && get_int(r, S_T_DEPTH, &depth)) return -1;
    if (size % depth)
        return fail(r, dv->line, "parallel.tensor.depth", "%lld does not divide the size %lld "
                                                          "(2.5d needs size = q x q x depth)",
                    depth, size);
    q = root(size / depth, mode == 3 ? 3 : 2);
    if (mode == 1 && q * q != size)
        return fail(r, size_line, "parallel.tensor.size", "2d needs a square size, got %lld "
                                                          "(SUMMA runs on a q x q grid)", size);
    if (mode == 2 && q * q != size / depth)
        return fail(r, size_line, "parallel.tensor.size", "2.5d needs size = q x q x depth, got "
                    "%lld / depth %lld = %lld, not a square", size, depth, size / depth);
    if (mode == 3 && q * q * q != size)
        return fail(r, size_line, "parallel.tensor.size", "3d needs a cube size, got %lld (a "
                                                          "q x q x q cube)", size);
    if (mode <= 0) return *tp = size, 0;
    if (mode >= 1 && mode <= 3) { /* pconfig_t's modes: 2d, 2.5d, 3d */
        *tp = size, *tp_mode = mode == 1 ? PC_TP_2D : mode == 2 ? PC_TP_25D : PC_TP_3D;
        *tp_depth = mode == 2 ? (int)depth : 0;
        return 0;
    }
    /* mode 4, 'sequence': the size is the ring's, tensor parallelism stays 1 */
    return *cp = size, 0;
}

int colossal_parse(const char *text, size_t len, const char *path, pconfig_t *pc, perr_t *err) {
    if (!path) path = "<config>";
    if (!text && len) return perr_set(err, "%s: no text to read", path);
    if (!text) text = "";
    rd_t r = {.text = text, .p = text, .end = text + len, .path = path, .line = 1, .err = err};
    long long pp = 1, tp = 1, dp = 0;
    int rc = lex(&r);
    while (!rc && r.t.k != T_END) rc = parse_stmt(&r);
    free(r.names);
    if (rc) return -1;
    /* Colossal-AI defaults a file without `parallel` to one device; a file
     * given to parity for its layout without one is more likely the wrong file */
    if (!r.par_line)
        return perr_set(err, "parallel: not found in %s (Colossal-AI's layout: parallel = "
                             "dict(pipeline=P, tensor=dict(size=T, mode='1d')))", path);
    /* pipeline=N, or pipeline=dict(size=N) (Colossal-AI reads its 'size') */
    const val_t *pv = &r.slot[S_PIPE];
    if (pv->k == V_DICT && !r.slot[S_PIPE_SIZE].k)
        return fail(&r, pv->line, "parallel.pipeline.size", "missing: write pipeline=dict(size=N) "
                                                            "or pipeline=N");
    if (pv->k && get_int(&r, pv->k == V_DICT ? S_PIPE_SIZE : S_PIPE, &pp)) return -1;
    int tp_mode = PC_TP_1D, tp_depth = 0;
    long long cp = 0;
    if (r.slot[S_TENSOR].k && tensor(&r, &tp, &tp_mode, &tp_depth, &cp)) return -1;
    if (r.slot[S_DATA].k && get_int(&r, S_DATA, &dp)) return -1;
    /* one source per degree: with a Megatron flag as well, one of the two would go unread */
    if (pc->pp)
        return fail(&r, r.par_line, "parallel.pipeline",
                    "the layout also comes from --pipeline-model-parallel-size; give one");
    if (pc->tp)
        return fail(&r, r.par_line, "parallel.tensor", "the layout also comes from "
                                                       "--tensor-model-parallel-size; give one");
    if (dp && pc->dp)
        return fail(&r, r.slot[S_DATA].line, "parallel.data", "the layout also comes from "
                                                              "--data-parallel-size; give one");
    if (tp_mode != PC_TP_1D && (pc->tp_mode != PC_TP_1D || pc->tp_depth))
        return fail(&r, r.par_line, "parallel.tensor.mode", "the mode also comes from "
                                                            "--tensor-parallel-mode; give one");
    if (cp && (pc->cp > 1 || (pc->given & PC_GIVEN_CP_COMM)))
        return fail(&r, r.par_line, "parallel.tensor.mode", "'sequence' is the cp ring; the "
                    "layout also comes from --context-parallel-size or --cp-comm-type; give one");
    pc->pp = (int)pp, pc->tp = (int)tp;
    if (cp) pc->cp = (int)cp, pc->cp_comm = 0; /* the ring: cp.h's CP_RING */
    if (tp_mode != PC_TP_1D) pc->tp_mode = tp_mode, pc->tp_depth = tp_depth;
    /* Colossal-AI ignores `data` (it infers world / (pipeline x tensor)); parity
     * keeps it so that pconfig_validate checks it against the world size */
    if (dp) pc->dp = (int)dp, pc->given |= PC_GIVEN_DP;
    return 0;
}
