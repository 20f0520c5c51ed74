/* safetensors.c - the .safetensors reader (st_open, st_find, ...) and the
 * dtypes' table; see include/parity/safetensors.h for the format and the
 * rules enforced. The writer is safetensors_write.c.
 *
 * The reader trusts nothing: every length and offset is checked before
 * use, in 64-bit arithmetic with explicit overflow tests, so a corrupt
 * or hostile file yields a message, never an out-of-bounds access
 * (tests/unit/test_safetensors.c mutates files thousands of times under ASan
 * and UBSan to hold us to that).
 */
#include "parity/safetensors.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>

#include "io/safetensors_internal.h"
#include "parity/fileio.h"
#include "parity/json.h"

/* ---- dtypes ------------------------------------------------------------ */

static const struct {
    const char *name;
    size_t size;
    int is_float;
} dtype_info[ST_DTYPE_COUNT] = {
    [ST_F32] = {"F32", 4, 1},         [ST_F64] = {"F64", 8, 1},
    [ST_I32] = {"I32", 4, 0},         [ST_I64] = {"I64", 8, 0},
    [ST_U8] = {"U8", 1, 0},           [ST_I8] = {"I8", 1, 0},
    [ST_F16] = {"F16", 2, 1},         [ST_BF16] = {"BF16", 2, 1},
    [ST_BOOL] = {"BOOL", 1, 0},       [ST_I16] = {"I16", 2, 0},
    [ST_U16] = {"U16", 2, 0},         [ST_U32] = {"U32", 4, 0},
    [ST_U64] = {"U64", 8, 0},         [ST_F8_E4M3] = {"F8_E4M3", 1, 1},
    [ST_F8_E5M2] = {"F8_E5M2", 1, 1},
};

size_t st_dtype_size(st_dtype_t dt) { return (unsigned)dt < ST_DTYPE_COUNT ? dtype_info[dt].size : 0; }
const char *st_dtype_name(st_dtype_t dt) { return (unsigned)dt < ST_DTYPE_COUNT ? dtype_info[dt].name : "?"; }
int st_dtype_is_float(st_dtype_t dt) { return (unsigned)dt < ST_DTYPE_COUNT && dtype_info[dt].is_float; }

int st_dtype_from_name(const char *name, st_dtype_t *out) {
    for (int i = 0; name && i < ST_DTYPE_COUNT; i++) {
        if (!strcmp(dtype_info[i].name, name)) {
            *out = (st_dtype_t)i;
            return 0;
        }
    }
    return -1;
}

uint64_t st_numel(const st_tensor_t *t) {
    uint64_t n;
    return t && shape_numel(t->ndim, t->shape, &n) == 0 ? n : 0;
}

/* ---- reader ------------------------------------------------------------ */

struct st_file {
    char *path;
    size_t n;
    st_tensor_t *tensors;  /* [n] in header order; names owned here */
    size_t *by_name;       /* [n] indices sorted by name, for st_find */
    size_t nmeta;
    char **meta_keys, **meta_vals;
    uint8_t *data;         /* the data buffer, its own aligned block */
    uint64_t data_len;
    uint64_t header_len;
    void *map;             /* st_open_mapped: the whole file, mapped read-only */
    size_t map_len;
};

void st_close(st_file_t *f) {
    if (!f) return;
    for (size_t i = 0; i < f->n; i++) free((char *)f->tensors[i].name);
    for (size_t i = 0; i < f->nmeta; i++) {
        free(f->meta_keys[i]);
        free(f->meta_vals[i]);
    }
    free(f->tensors);
    free(f->by_name);
    free(f->meta_keys);
    free(f->meta_vals);
    if (f->map) munmap(f->map, f->map_len);
    else free(f->data);
    free(f->path);
    free(f);
}

size_t st_count(const st_file_t *f) { return f ? f->n : 0; }
const st_tensor_t *st_tensor(const st_file_t *f, size_t i) { return f && i < f->n ? &f->tensors[i] : NULL; }
const char *st_path(const st_file_t *f) { return f ? f->path : NULL; }

char *st_escape(const char *s, char *buf, size_t cap) {
    static const char hex[] = "0123456789abcdef";
    size_t o = 0;
    const unsigned char *p = (const unsigned char *)(s ? s : "");
    for (; *p; p++) {
        int esc = *p < 0x20 || *p == 0x7f || (*p == 0xc2 && p[1] >= 0x80 && p[1] <= 0x9f);
        int nesc = esc && *p == 0xc2 ? 2 : esc;
        size_t need = esc ? 4 * (size_t)nesc : 1;
        int last = !p[esc ? nesc : 1];
        if (o + need + (last ? 1 : 4) > cap) { /* o + 4 <= cap holds here */
            memcpy(buf + o, "...", 4);
            return buf;
        }
        for (int k = 0; k < nesc; k++, o += 4) {
            unsigned char c = p[k];
            buf[o] = '\\', buf[o + 1] = 'x', buf[o + 2] = hex[c >> 4], buf[o + 3] = hex[c & 15];
        }
        if (!esc) buf[o++] = (char)*p;
        if (nesc == 2) p++;
    }
    buf[o] = 0;
    return buf;
}
size_t st_metadata_count(const st_file_t *f) { return f ? f->nmeta : 0; }
const char *st_metadata_key_at(const st_file_t *f, size_t i) { return f && i < f->nmeta ? f->meta_keys[i] : NULL; }

const void *st_data(const st_file_t *f, const st_tensor_t *t) {
    if (!f || !t || t->end > f->data_len) return NULL;
    return f->data + t->begin;
}

const char *st_metadata(const st_file_t *f, const char *key) {
    for (size_t i = 0; f && key && i < f->nmeta; i++)
        if (!strcmp(f->meta_keys[i], key)) return f->meta_vals[i];
    return NULL;
}

/* For qsort: sorting needs the tensor table, and qsort has no context
 * argument, so sort (pointer, index) pairs instead. */
typedef struct {
    const st_tensor_t *t;
    size_t idx;
} slot_t;

static int slot_by_name(const void *a, const void *b) {
    return strcmp(((const slot_t *)a)->t->name, ((const slot_t *)b)->t->name);
}

static int slot_by_offset(const void *a, const void *b) {
    const st_tensor_t *x = ((const slot_t *)a)->t, *y = ((const slot_t *)b)->t;
    if (x->begin != y->begin) return x->begin < y->begin ? -1 : 1;
    if (x->end != y->end) return x->end < y->end ? -1 : 1;
    return 0;
}

const st_tensor_t *st_find(const st_file_t *f, const char *name) {
    if (!f || !name) return NULL;
    size_t lo = 0, hi = f->n;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        const st_tensor_t *t = &f->tensors[f->by_name[mid]];
        int c = strcmp(t->name, name);
        if (c == 0) return t;
        if (c < 0) lo = mid + 1;
        else hi = mid;
    }
    return NULL;
}

static int parse_metadata(st_file_t *f, const json_t *m, perr_t *err) {
    if (json_type(m) == JSON_NULL) return 0; /* the reference reads null as "no metadata" */
    if (json_type(m) != JSON_OBJECT)
        return perr_set(err, "%s: \"__metadata__\": expected an object of strings, got %s", f->path,
                        json_type_name(json_type(m)));
    size_t n = json_len(m);
    f->meta_keys = calloc(n ? n : 1, sizeof *f->meta_keys);
    f->meta_vals = calloc(n ? n : 1, sizeof *f->meta_vals);
    if (!f->meta_keys || !f->meta_vals) return perr_set(err, "%s: out of memory", f->path);
    for (size_t i = 0; i < n; i++) {
        const json_t *v = json_at(m, i);
        const char *k = json_key_at(m, i);
        char ek[ST_ESCAPE_CAP(80)];
        if (json_type(v) != JSON_STRING || strlen(json_string(v)) != json_string_len(v)) st_escape(k, ek, sizeof ek);
        if (json_type(v) != JSON_STRING)
            return perr_set(err, "%s: \"__metadata__\": key \"%s\": expected a string, got %s", f->path, ek,
                            json_type_name(json_type(v)));
        if (strlen(json_string(v)) != json_string_len(v))
            return perr_set(err, "%s: \"__metadata__\": key \"%s\": value contains \\u0000", f->path, ek);
        f->meta_keys[i] = strdup(k);
        f->meta_vals[i] = strdup(json_string(v));
        f->nmeta = i + 1;
        if (!f->meta_keys[i] || !f->meta_vals[i]) return perr_set(err, "%s: out of memory", f->path);
    }
    return 0;
}

/* Reads one non-negative integer element of a JSON array. */
static int array_uint(const st_file_t *f, const char *name, const char *field, const json_t *arr, size_t i,
                      int64_t *out, perr_t *err) {
    const json_t *v = json_at(arr, i);
    if (json_type(v) != JSON_NUMBER)
        return perr_set(err, "%s: tensor \"%s\": %s[%zu]: expected a non-negative integer, got %s", f->path,
                        name, field, i, json_type_name(json_type(v)));
    if (json_int64(v, out) || *out < 0)
        return perr_set(err, "%s: tensor \"%s\": %s[%zu]: expected a non-negative integer, got %.17g", f->path,
                        name, field, i, json_number(v));
    return 0;
}

/* name is the tensor's name escaped for messages (st_escape), raw the name itself. */
static int parse_tensor(st_file_t *f, const char *name, const char *raw, const json_t *e, st_tensor_t *t,
                        perr_t *err) {
    if (json_type(e) != JSON_OBJECT)
        return perr_set(err, "%s: tensor \"%s\": expected an object {dtype, shape, data_offsets}, got %s",
                        f->path, name, json_type_name(json_type(e)));
    for (size_t i = 0; i < json_len(e); i++) {
        const char *k = json_key_at(e, i);
        if (strcmp(k, "dtype") && strcmp(k, "shape") && strcmp(k, "data_offsets"))
        {
            char ek[ST_ESCAPE_CAP(40)];
            return perr_set(err, "%s: tensor \"%s\": unknown field \"%s\" (expected dtype, shape, data_offsets)",
                            f->path, name, st_escape(k, ek, sizeof ek));
        }
    }
    const json_t *dt = json_get(e, "dtype"), *shape = json_get(e, "shape"), *offs = json_get(e, "data_offsets");
    if (!dt) return perr_set(err, "%s: tensor \"%s\": missing field \"dtype\"", f->path, name);
    if (!shape) return perr_set(err, "%s: tensor \"%s\": missing field \"shape\"", f->path, name);
    if (!offs) return perr_set(err, "%s: tensor \"%s\": missing field \"data_offsets\"", f->path, name);

    if (json_type(dt) != JSON_STRING)
        return perr_set(err, "%s: tensor \"%s\": dtype: expected a string, got %s", f->path, name,
                        json_type_name(json_type(dt)));
    if (st_dtype_from_name(json_string(dt), &t->dtype) || strlen(json_string(dt)) != json_string_len(dt)) {
        char known[256] = "";
        for (int i = 0; i < ST_DTYPE_COUNT; i++) {
            strcat(known, i ? ", " : "");
            strcat(known, dtype_info[i].name);
        }
        char edt[ST_ESCAPE_CAP(40)];
        return perr_set(err, "%s: tensor \"%s\": dtype: unknown \"%s\" (known: %s)", f->path, name,
                        st_escape(json_string(dt), edt, sizeof edt), known);
    }

    if (json_type(shape) != JSON_ARRAY)
        return perr_set(err, "%s: tensor \"%s\": shape: expected an array of integers, got %s", f->path, name,
                        json_type_name(json_type(shape)));
    if (json_len(shape) > ST_MAX_DIMS)
        return perr_set(err, "%s: tensor \"%s\": shape: %zu dims, parity supports at most %d", f->path, name,
                        json_len(shape), ST_MAX_DIMS);
    t->ndim = (int)json_len(shape);
    for (int d = 0; d < t->ndim; d++)
        if (array_uint(f, name, "shape", shape, (size_t)d, &t->shape[d], err)) return -1;

    if (json_type(offs) != JSON_ARRAY || json_len(offs) != 2)
        return perr_set(err, "%s: tensor \"%s\": data_offsets: expected [begin, end], got %s of length %zu",
                        f->path, name, json_type_name(json_type(offs)), json_len(offs));
    int64_t b, en;
    if (array_uint(f, name, "data_offsets", offs, 0, &b, err)) return -1;
    if (array_uint(f, name, "data_offsets", offs, 1, &en, err)) return -1;
    t->begin = (uint64_t)b;
    t->end = (uint64_t)en;
    if (t->begin > t->end)
        return perr_set(err, "%s: tensor \"%s\": data_offsets: begin %llu > end %llu", f->path, name,
                        (unsigned long long)t->begin, (unsigned long long)t->end);
    uint64_t numel;
    size_t es = st_dtype_size(t->dtype);
    if (shape_numel(t->ndim, t->shape, &numel) || numel > UINT64_MAX / es)
        return perr_set(err, "%s: tensor \"%s\": shape: element count overflows 64 bits", f->path, name);
    if (t->end - t->begin != numel * es)
        return perr_set(err,
                        "%s: tensor \"%s\": data_offsets: [%llu, %llu) is %llu bytes, but shape and dtype %s "
                        "need %llu elements x %zu bytes = %llu",
                        f->path, name, (unsigned long long)t->begin, (unsigned long long)t->end,
                        (unsigned long long)(t->end - t->begin), dtype_info[t->dtype].name,
                        (unsigned long long)numel, es, (unsigned long long)(numel * es));
    t->name = strdup(raw);
    if (!t->name) return perr_set(err, "%s: out of memory", f->path);
    return 0;
}

/* Tensors sorted by offset must tile [0, data_len) exactly. */
static int check_coverage(st_file_t *f, perr_t *err) {
    slot_t *s = malloc((f->n ? f->n : 1) * sizeof *s);
    if (!s) return perr_set(err, "%s: out of memory", f->path);
    for (size_t i = 0; i < f->n; i++) s[i] = (slot_t){&f->tensors[i], i};
    qsort(s, f->n, sizeof *s, slot_by_offset);
    uint64_t pos = 0;
    const st_tensor_t *prev = NULL;
    int rc = 0;
    char ep[ST_ESCAPE_CAP(80)], et[ST_ESCAPE_CAP(80)];
    for (size_t i = 0; i < f->n && !rc; i++) {
        const st_tensor_t *t = s[i].t;
        if (t->begin != pos) st_escape(t->name, et, sizeof et);
        if (t->begin < pos)
            rc = perr_set(err, "%s: tensors \"%s\" [%llu, %llu) and \"%s\" [%llu, %llu) overlap in the data buffer",
                          f->path, st_escape(prev->name, ep, sizeof ep), (unsigned long long)prev->begin,
                          (unsigned long long)prev->end, et, (unsigned long long)t->begin, (unsigned long long)t->end);
        else if (t->begin > pos)
            rc = perr_set(err, "%s: bytes [%llu, %llu) of the data buffer belong to no tensor (gap before \"%s\")",
                          f->path, (unsigned long long)pos, (unsigned long long)t->begin, et);
        pos = t->end;
        prev = t;
    }
    if (!rc && pos != f->data_len)
        rc = perr_set(err, "%s: bytes [%llu, %llu) at the end of the data buffer belong to no tensor", f->path,
                      (unsigned long long)pos, (unsigned long long)f->data_len);
    free(s);
    return rc;
}

static int build_name_index(st_file_t *f, perr_t *err) {
    slot_t *s = malloc((f->n ? f->n : 1) * sizeof *s);
    f->by_name = malloc((f->n ? f->n : 1) * sizeof *f->by_name);
    if (!s || !f->by_name) {
        free(s);
        return perr_set(err, "%s: out of memory", f->path);
    }
    for (size_t i = 0; i < f->n; i++) s[i] = (slot_t){&f->tensors[i], i};
    qsort(s, f->n, sizeof *s, slot_by_name);
    for (size_t i = 0; i < f->n; i++) f->by_name[i] = s[i].idx;
    free(s);
    return 0; /* the JSON parser already rejected duplicate names */
}

static int read_exact(FILE *fp, void *buf, uint64_t n) {
    return n == 0 || fread(buf, 1, (size_t)n, fp) == (size_t)n ? 0 : -1;
}

static int open_header(st_file_t *f, FILE *fp, json_t **root, perr_t *err) {
    struct stat sb;
    if (fstat(fileno(fp), &sb)) return perr_set(err, "%s: cannot stat: %s", f->path, strerror(errno));
    if (!S_ISREG(sb.st_mode)) return perr_set(err, "%s: not a regular file", f->path);
    uint64_t size = (uint64_t)sb.st_size;
    if (size < 8)
        return perr_set(err, "%s: file is %llu bytes, too short for the 8-byte header length", f->path,
                        (unsigned long long)size);
    uint8_t len8[8];
    if (read_exact(fp, len8, 8)) return perr_set(err, "%s: cannot read the header length", f->path);
    uint64_t n = 0;
    for (int i = 7; i >= 0; i--) n = n << 8 | len8[i];
    if (n > ST_MAX_HEADER)
        return perr_set(err, "%s: header length %llu exceeds the limit of %llu bytes", f->path,
                        (unsigned long long)n, ST_MAX_HEADER);
    if (n > size - 8)
        return perr_set(err, "%s: header length %llu exceeds the %llu bytes that follow it in the file", f->path,
                        (unsigned long long)n, (unsigned long long)(size - 8));
    if (n < 2) return perr_set(err, "%s: header length %llu is too short for a JSON object", f->path,
                               (unsigned long long)n);
    char *hdr = malloc((size_t)n);
    if (!hdr) return perr_set(err, "%s: out of memory for a %llu-byte header", f->path, (unsigned long long)n);
    if (read_exact(fp, hdr, n)) {
        free(hdr);
        return perr_set(err, "%s: cannot read the %llu-byte header", f->path, (unsigned long long)n);
    }
    if (hdr[0] != '{') {
        free(hdr);
        return perr_set(err, "%s: header: must be a JSON object starting with '{'", f->path);
    }
    perr_t jerr;
    *root = json_parse(hdr, (size_t)n, &jerr);
    free(hdr);
    if (!*root) return perr_set(err, "%s: header: %s", f->path, jerr.msg);
    f->data_len = size - 8 - n; /* what the file holds; read_data checks it against the header first */
    f->header_len = n;
    return 0;
}

/* The header's tensors declare the data buffer's size (the largest end
 * offset; check_coverage then requires them to tile it). A file larger
 * or smaller than 8 + header + that is refused before a data byte is
 * read, so a huge or sparse file costs neither time nor memory. */
static int read_data(st_file_t *f, FILE *fp, int mapped, perr_t *err) {
    uint64_t declared = 0;
    for (size_t i = 0; i < f->n; i++)
        if (f->tensors[i].end > declared) declared = f->tensors[i].end;
    if (declared != f->data_len)
        return perr_set(err,
                        "%s: file is %llu bytes, but its header declares %llu bytes of tensor data: expected 8 + "
                        "%llu (header) + %llu = %llu bytes",
                        f->path, (unsigned long long)(8 + f->header_len + f->data_len), (unsigned long long)declared,
                        (unsigned long long)f->header_len, (unsigned long long)declared,
                        (unsigned long long)(8 + f->header_len + declared));
    if (check_coverage(f, err)) return -1;
    if (mapped) { /* page cache: the kernel may drop the pages again */
        f->map_len = (size_t)(8 + f->header_len + f->data_len);
        void *m = mmap(NULL, f->map_len, PROT_READ | PROT_WRITE, MAP_PRIVATE /* copy on write: the byte swap of a big-endian host */, fileno(fp), 0);
        if (m == MAP_FAILED)
            return perr_set(err, "%s: cannot map the file: %s", f->path, strerror(errno));
        f->map = m;
        f->data = (uint8_t *)m + 8 + f->header_len;
        return 0;
    }
    f->data = malloc(f->data_len ? (size_t)f->data_len : 1);
    if (!f->data)
        return perr_set(err, "%s: out of memory for a %llu-byte data buffer", f->path,
                        (unsigned long long)f->data_len);
    if (read_exact(fp, f->data, f->data_len))
        return perr_set(err, "%s: cannot read the %llu-byte data buffer (file changed while reading?)", f->path,
                        (unsigned long long)f->data_len);
    return 0;
}

static st_file_t *open_file(const char *path, int mapped, perr_t *err) {
    if (!path) {
        perr_set(err, "st_open: path is NULL");
        return NULL;
    }
    st_file_t *f = calloc(1, sizeof *f);
    if (!f || !(f->path = strdup(path))) {
        free(f);
        perr_set(err, "%s: out of memory", path);
        return NULL;
    }
    FILE *fp = pio_open_input(path, "safetensors file", NULL, err);
    if (!fp) {
        st_close(f);
        return NULL;
    }
    json_t *root = NULL;
    if (open_header(f, fp, &root, err)) goto fail;

    size_t members = json_len(root);
    f->tensors = calloc(members ? members : 1, sizeof *f->tensors);
    if (!f->tensors) {
        perr_set(err, "%s: out of memory", path);
        goto fail;
    }
    for (size_t i = 0; i < members; i++) {
        const char *key = json_key_at(root, i);
        const json_t *v = json_at(root, i);
        if (!strcmp(key, "__metadata__")) {
            if (parse_metadata(f, v, err)) goto fail;
            continue;
        }
        char ename[ST_ESCAPE_CAP(200)];
        if (parse_tensor(f, st_escape(key, ename, sizeof ename), key, v, &f->tensors[f->n], err)) goto fail;
        f->n++;
    }
    json_free(root);
    root = NULL;
    if (read_data(f, fp, mapped, err) || build_name_index(f, err)) goto fail;
    fclose(fp);
    fp = NULL;
#if ST_HOST_BIG_ENDIAN
    for (size_t i = 0; i < f->n; i++)
        swap_elements(f->data + f->tensors[i].begin, f->tensors[i].end - f->tensors[i].begin,
                      st_dtype_size(f->tensors[i].dtype));
#endif
    return f;
fail:
    if (fp) fclose(fp);
    json_free(root);
    st_close(f);
    return NULL;
}

st_file_t *st_open(const char *path, perr_t *err) { return open_file(path, 0, err); }

st_file_t *st_open_mapped(const char *path, perr_t *err) { return open_file(path, 1, err); }
