/* safetensors_write.c - the .safetensors writer (st_writer_*; see
 * include/parity/safetensors.h): tensors and metadata collected in
 * memory, then one header and the data written, all or nothing. The
 * reader is safetensors.c. */
#include "parity/safetensors.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "io/safetensors_internal.h"
#include "parity/fileio.h"
#include "parity/json.h"

typedef struct {
    char *name;
    st_dtype_t dtype;
    int ndim;
    int64_t shape[ST_MAX_DIMS];
    uint8_t *data;
    uint64_t nbytes;
} st_entry_t;

struct st_writer {
    st_entry_t *e;
    size_t n, cap;
    size_t *slots, nslots; /* open-addressing set of names: entry index + 1, 0 = empty */
    char **meta_keys, **meta_vals;
    size_t nmeta, metacap;
};

st_writer_t *st_writer_new(void) { return calloc(1, sizeof(st_writer_t)); }

size_t st_writer_count(const st_writer_t *w) { return w->n; }

const void *st_writer_tensor(const st_writer_t *w, size_t i, st_tensor_t *t) {
    if (i >= w->n) return NULL;
    const st_entry_t *e = &w->e[i];
    memset(t, 0, sizeof *t);
    t->name = e->name;
    t->dtype = e->dtype;
    t->ndim = e->ndim;
    memcpy(t->shape, e->shape, sizeof t->shape);
    t->begin = 0;
    t->end = e->nbytes;
    return e->data;
}

/* FNV-1a: names are short, and a model may add tens of thousands, so
 * duplicate detection must not be quadratic. */
static size_t name_hash(const char *s) {
    uint64_t h = 1469598103934665603ull;
    for (; *s; s++) h = (h ^ (unsigned char)*s) * 1099511628211ull;
    return (size_t)h;
}

/* The slot holding `name`, or the empty slot where it would go. */
static size_t *name_slot(const st_writer_t *w, const char *name) {
    size_t mask = w->nslots - 1;
    for (size_t i = name_hash(name) & mask;; i = (i + 1) & mask)
        if (!w->slots[i] || !strcmp(w->e[w->slots[i] - 1].name, name)) return &w->slots[i];
}

long st_writer_find(const st_writer_t *w, const char *name) {
    if (!w->nslots) return -1;
    size_t slot = *name_slot(w, name);
    return slot ? (long)slot - 1 : -1;
}

/* Keeps the set at most half full. */
static int grow_name_set(st_writer_t *w) {
    if (2 * (w->n + 1) <= w->nslots) return 0;
    size_t ns = w->nslots ? 2 * w->nslots : 64;
    size_t *old = w->slots, oldn = w->nslots;
    w->slots = calloc(ns, sizeof *w->slots);
    if (!w->slots) {
        w->slots = old;
        return -1;
    }
    w->nslots = ns;
    for (size_t i = 0; i < oldn; i++)
        if (old[i]) *name_slot(w, w->e[old[i] - 1].name) = old[i];
    free(old);
    return 0;
}

void st_writer_free(st_writer_t *w) {
    if (!w) return;
    for (size_t i = 0; i < w->n; i++) {
        free(w->e[i].name);
        free(w->e[i].data);
    }
    for (size_t i = 0; i < w->nmeta; i++) {
        free(w->meta_keys[i]);
        free(w->meta_vals[i]);
    }
    free(w->e);
    free(w->slots);
    free(w->meta_keys);
    free(w->meta_vals);
    free(w);
}

/* A string can go into the header iff writing it as JSON and parsing it
 * back gives it again: that rejects invalid UTF-8 with the very rules
 * the reader applies. */
static int json_representable(const char *s) {
    char *buf = NULL;
    size_t len = 0;
    FILE *m = open_memstream(&buf, &len);
    if (!m) return 0;
    json_write_string(m, s);
    if (fclose(m)) {
        free(buf);
        return 0;
    }
    json_t *j = json_parse(buf, len, NULL);
    int ok = j && json_string(j) && !strcmp(json_string(j), s);
    json_free(j);
    free(buf);
    return ok;
}

int st_writer_add(st_writer_t *w, const char *name, st_dtype_t dt, int ndim, const int64_t *shape,
                  const void *data, perr_t *err) {
    if (!w) return perr_set(err, "st_writer_add: writer is NULL");
    if (!name) return perr_set(err, "st_writer_add: tensor name is NULL");
    if (!strcmp(name, "__metadata__"))
        return perr_set(err, "st_writer_add: tensor name \"__metadata__\" is reserved by the format");
    if (!json_representable(name))
        return perr_set(err, "st_writer_add: tensor name \"%.80s\" is not valid UTF-8", name);
    if ((unsigned)dt >= ST_DTYPE_COUNT) return perr_set(err, "st_writer_add: tensor \"%s\": invalid dtype %d", name, (int)dt);
    if (ndim < 0 || ndim > ST_MAX_DIMS)
        return perr_set(err, "st_writer_add: tensor \"%s\": ndim %d, expected 0..%d", name, ndim, ST_MAX_DIMS);
    if (ndim > 0 && !shape) return perr_set(err, "st_writer_add: tensor \"%s\": shape is NULL", name);
    for (int d = 0; d < ndim; d++)
        if (shape[d] < 0)
            return perr_set(err, "st_writer_add: tensor \"%s\": shape[%d] = %lld, expected >= 0", name, d,
                            (long long)shape[d]);
    if (grow_name_set(w)) return perr_set(err, "st_writer_add: out of memory");
    size_t *slot = name_slot(w, name);
    if (*slot) return perr_set(err, "st_writer_add: duplicate tensor name \"%s\"", name);
    uint64_t numel;
    size_t es = st_dtype_size(dt);
    if (shape_numel(ndim, shape, &numel) || numel > (uint64_t)SIZE_MAX / es)
        return perr_set(err, "st_writer_add: tensor \"%s\": byte count overflows", name);
    uint64_t nbytes = numel * es;
    if (nbytes && !data) return perr_set(err, "st_writer_add: tensor \"%s\": data is NULL", name);
    if (w->n == w->cap) {
        size_t nc = w->cap ? w->cap * 2 : 8;
        st_entry_t *g = realloc(w->e, nc * sizeof *g);
        if (!g) return perr_set(err, "st_writer_add: out of memory");
        w->e = g;
        w->cap = nc;
    }
    st_entry_t *e = &w->e[w->n];
    memset(e, 0, sizeof *e);
    e->name = strdup(name);
    e->data = malloc(nbytes ? (size_t)nbytes : 1);
    if (!e->name || !e->data) {
        free(e->name);
        free(e->data);
        return perr_set(err, "st_writer_add: tensor \"%s\": out of memory for %llu bytes", name,
                        (unsigned long long)nbytes);
    }
    if (nbytes) memcpy(e->data, data, (size_t)nbytes);
#if ST_HOST_BIG_ENDIAN
    swap_elements(e->data, nbytes, es);
#endif
    e->dtype = dt;
    e->ndim = ndim;
    for (int d = 0; d < ndim; d++) e->shape[d] = shape[d];
    e->nbytes = nbytes;
    w->n++;
    *slot = w->n;
    return 0;
}

int st_writer_set_metadata(st_writer_t *w, const char *key, const char *value, perr_t *err) {
    if (!w || !key || !value) return perr_set(err, "st_writer_set_metadata: NULL writer, key or value");
    if (!json_representable(key) || !json_representable(value))
        return perr_set(err, "st_writer_set_metadata: key \"%.80s\": key or value is not valid UTF-8", key);
    for (size_t i = 0; i < w->nmeta; i++) {
        if (!strcmp(w->meta_keys[i], key)) {
            char *v = strdup(value);
            if (!v) return perr_set(err, "st_writer_set_metadata: out of memory");
            free(w->meta_vals[i]);
            w->meta_vals[i] = v;
            return 0;
        }
    }
    if (w->nmeta == w->metacap) {
        size_t nc = w->metacap ? w->metacap * 2 : 4;
        char **k = realloc(w->meta_keys, nc * sizeof *k);
        if (k) w->meta_keys = k;
        char **v = k ? realloc(w->meta_vals, nc * sizeof *v) : NULL;
        if (v) w->meta_vals = v;
        if (!k || !v) return perr_set(err, "st_writer_set_metadata: out of memory");
        w->metacap = nc;
    }
    char *k = strdup(key), *v = strdup(value);
    if (!k || !v) {
        free(k);
        free(v);
        return perr_set(err, "st_writer_set_metadata: out of memory");
    }
    w->meta_keys[w->nmeta] = k;
    w->meta_vals[w->nmeta] = v;
    w->nmeta++;
    return 0;
}

/* The JSON header, padded with spaces to a multiple of 8 bytes. */
static char *build_header(const st_writer_t *w, size_t *len) {
    char *buf = NULL;
    size_t n = 0;
    FILE *m = open_memstream(&buf, &n);
    if (!m) return NULL;
    fputc('{', m);
    int first = 1;
    if (w->nmeta) {
        fputs("\"__metadata__\":{", m);
        for (size_t i = 0; i < w->nmeta; i++) {
            if (i) fputc(',', m);
            json_write_string(m, w->meta_keys[i]);
            fputc(':', m);
            json_write_string(m, w->meta_vals[i]);
        }
        fputc('}', m);
        first = 0;
    }
    uint64_t off = 0;
    for (size_t i = 0; i < w->n; i++) {
        const st_entry_t *e = &w->e[i];
        if (!first) fputc(',', m);
        first = 0;
        json_write_string(m, e->name);
        fprintf(m, ":{\"dtype\":\"%s\",\"shape\":[", st_dtype_name(e->dtype));
        for (int d = 0; d < e->ndim; d++) fprintf(m, "%s%lld", d ? "," : "", (long long)e->shape[d]);
        fprintf(m, "],\"data_offsets\":[%llu,%llu]}", (unsigned long long)off,
                (unsigned long long)(off + e->nbytes));
        off += e->nbytes;
    }
    fputc('}', m);
    while (ftell(m) % 8) fputc(' ', m);
    if (fclose(m)) {
        free(buf);
        return NULL;
    }
    *len = n;
    return buf;
}

/* The file's bytes to f: 1 when every write succeeded (the stream's
 * error flag says the rest). *err set only for a header over the limit
 * or out of memory (-1). */
static int write_file(const st_writer_t *w, FILE *f, const char *path, perr_t *err) {
    size_t hlen;
    char *hdr = build_header(w, &hlen);
    if (!hdr) return perr_set(err, "%s: out of memory building the header", path);
    if (hlen > ST_MAX_HEADER) {
        free(hdr);
        return perr_set(err, "%s: header would be %zu bytes, over the format's limit of %llu", path, hlen,
                        ST_MAX_HEADER);
    }
    uint8_t len8[8];
    for (int i = 0; i < 8; i++) len8[i] = (uint8_t)((uint64_t)hlen >> (8 * i));
    int ok = fwrite(len8, 1, 8, f) == 8 && fwrite(hdr, 1, hlen, f) == hlen;
    for (size_t i = 0; ok && i < w->n; i++)
        ok = w->e[i].nbytes == 0 || fwrite(w->e[i].data, 1, (size_t)w->e[i].nbytes, f) == w->e[i].nbytes;
    free(hdr);
    return ok;
}

int st_writer_save(const st_writer_t *w, const char *path, perr_t *err) {
    if (!w || !path) return perr_set(err, "st_writer_save: NULL writer or path");
    /* all or nothing: a temporary file renamed over the target (fileio.h) */
    pio_out_t out;
    if (pio_out_open(&out, path, "safetensors file", err)) return -1;
    if (write_file(w, out.f, path, err) < 0) {
        pio_out_abort(&out);
        return -1;
    }
    return pio_out_commit(&out, err); /* sees the stream's error flag */
}

int st_writer_save_scratch(const st_writer_t *w, const char *path, perr_t *err) {
    if (!w || !path) return perr_set(err, "st_writer_save_scratch: NULL writer or path");
    FILE *f = fopen(path, "wbx");
    if (!f) return perr_set(err, "%s: cannot create: %s", path, strerror(errno));
    int ok = write_file(w, f, path, err);
    if (ok < 0) {
        fclose(f);
        return -1;
    }
    ok = ok && !ferror(f);
    int e = errno;
    if (fclose(f) && ok) ok = 0, e = errno;
    return ok ? 0 : perr_set(err, "%s: write failed: %s", path, e ? strerror(e) : "I/O error");
}
