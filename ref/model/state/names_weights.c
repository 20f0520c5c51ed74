/* names_weights.c - weights files in a backend's names (names.h):
 * `parity train --export-weights DIR --names S` writes them, the oracle's
 * --weights FILE reads them.
 *
 * Both walk the golden parameter table and move each global tensor
 * through its map (names.c), so an export read back is the parameter
 * vector it came from, bit for bit, in every scheme.
 */
#include "parity/names.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "parity/ckpt.h"
#include "parity/fileio.h"
#include "parity/safetensors.h"

char *names_weights_path(const char *dir) {
    const size_t n = strlen(dir) + sizeof "/" CKPT_FILE;
    char *p = malloc(n);
    if (p) snprintf(p, n, "%s/%s", dir, CKPT_FILE);
    return p;
}

/* Every parameter in scheme s's names and layouts, in table order; the
 * tied head's second key after the word embedding when s writes it. */
static int add_params(st_writer_t *w, const model_config_t *c, names_scheme_t s,
                      const param_table_t *t, const float *params, perr_t *err) {
    float *buf = malloc((t->total + 1) * sizeof *buf);
    if (!buf) return perr_set(err, "--export-weights: out of memory");
    int exported = 0, rc = 0;
    const char *head = names_tied_head(c, s, &exported);
    for (int i = 0; i < t->count && !rc; i++) {
        char name[160];
        names_map_t m;
        if (names_from_parity(c, s, i, name, sizeof name, &m, err)) {
            rc = -1;
            break;
        }
        names_values_from_parity(c, &m, params + t->info[i].offset, buf);
        rc = st_writer_add(w, name, ST_F32, m.ndim, m.shape, buf, err);
        if (!rc && i == t->wte && exported) /* one tensor, two keys (names.h) */
            rc = st_writer_add(w, head, ST_F32, m.ndim, m.shape, buf, err);
    }
    free(buf);
    return rc;
}

int names_weights_export(const model_config_t *c, names_scheme_t s, const float *params,
                         const char *dir, perr_t *err) {
    param_table_t t;
    if (param_table_build(&t, c, err)) return -1;
    st_writer_t *w = st_writer_new();
    char *file = names_weights_path(dir), *cfg = model_config_json(c);
    int rc = -1, made_dir = 0;
    if (!w || !file || !cfg) {
        perr_set(err, "--export-weights: out of memory");
        goto out;
    }
    if (add_params(w, c, s, &t, params, err) ||
        st_writer_set_metadata(w, "format", NAMES_WEIGHTS_FORMAT, err) ||
        st_writer_set_metadata(w, "parity.names", names_scheme_name(s), err) ||
        st_writer_set_metadata(w, "config", cfg, err))
        goto out;
    if (mkdir(dir, 0777) == 0) made_dir = 1, pio_txn_made_dir(dir); /* removed if the run fails */
    else if (errno != EEXIST) {
        perr_set(err, "--export-weights '%s': cannot create the directory: %s", dir,
                 strerror(errno));
        goto out;
    }
    if (st_writer_save(w, file, err)) {
        if (made_dir) rmdir(dir);
        goto out;
    }
    rc = 0;
out:
    free(cfg);
    free(file);
    if (w) st_writer_free(w);
    param_table_free(&t);
    return rc;
}

/* The scheme to read f in: declared, else the file's parity.names, else
 * detected from its names and shapes. */
static int file_scheme(const model_config_t *c, const st_file_t *f, int declared,
                       names_scheme_t *s, perr_t *err) {
    const char *meta = st_metadata(f, "parity.names");
    names_scheme_t in_file;
    perr_t e;
    if (meta && names_scheme_parse(meta, &in_file, &e))
        return perr_set(err, "%s: its parity.names metadata: %s", st_path(f), e.msg);
    if (meta && declared && in_file != *s)
        return perr_set(err, "%s: --names %s, but the file's parity.names is %s", st_path(f),
                        names_scheme_name(*s), meta);
    if (declared) return 0;
    if (meta) {
        *s = in_file;
        return 0;
    }
    const int n = (int)st_count(f);
    const char **names = malloc((size_t)(n + 1) * sizeof *names);
    int *ndim = malloc((size_t)(n + 1) * sizeof *ndim);
    const int64_t **shape = malloc((size_t)(n + 1) * sizeof *shape);
    int rc = !names || !ndim || !shape ? perr_set(err, "--weights: out of memory") : 0;
    for (int k = 0; k < n && !rc; k++) {
        const st_tensor_t *x = st_tensor(f, (size_t)k);
        names[k] = x->name, ndim[k] = x->ndim, shape[k] = x->shape;
    }
    if (!rc && names_detect_shapes(c, names, ndim, shape, n, s, &e))
        rc = perr_set(err, "%s: no --names and no parity.names metadata, and its tensors name "
                           "no one scheme: %s", st_path(f), e.msg);
    free(names);
    free(ndim);
    free(shape);
    return rc;
}

/* "2,48" for a message (at most ST_MAX_DIMS axes: fits 96 bytes). */
static void fmt_shape(int ndim, const int64_t *shape, char *buf, size_t cap) {
    size_t at = 0;
    buf[0] = 0;
    for (int d = 0; d < ndim && at < cap; d++)
        at += (size_t)snprintf(buf + at, cap - at, "%s%lld", d ? "," : "", (long long)shape[d]);
}

/* One tensor of f into params: F32, of the map's shape, named once. */
static int read_tensor(const model_config_t *c, names_scheme_t s, const st_file_t *f,
                       const st_tensor_t *x, const param_table_t *t, unsigned char *seen,
                       float *buf, float *params, const st_tensor_t **alias, perr_t *err) {
    char pn[160], esc[ST_ESCAPE_CAP(96)], got[96], want[96];
    names_map_t m;
    perr_t e;
    if (names_to_parity(c, s, x->name, pn, sizeof pn, &m, &e))
        return perr_set(err, "%s: %s", st_path(f), e.msg);
    int same = x->ndim == m.ndim;
    for (int d = 0; same && d < m.ndim; d++) same = x->shape[d] == m.shape[d];
    if (x->dtype != ST_F32 || !same) {
        fmt_shape(x->ndim, x->shape, got, sizeof got);
        fmt_shape(m.ndim, m.shape, want, sizeof want);
        return perr_set(err, "%s: tensor '%s' is %s [%s]; the %s names expect F32 [%s] (parity's "
                             "'%s')", st_path(f), st_escape(x->name, esc, sizeof esc),
                        st_dtype_name(x->dtype), got, names_scheme_name(s), want, pn);
    }
    if (m.alias) {
        *alias = x;
        return 0;
    }
    if (seen[m.param]++)
        return perr_set(err, "%s: tensor '%s' names parity's '%s' again", st_path(f),
                        st_escape(x->name, esc, sizeof esc), pn);
    memcpy(buf, st_data(f, x), (size_t)(x->end - x->begin)); /* any alignment */
    names_values_to_parity(c, &m, buf, params + t->info[m.param].offset);
    return 0;
}

int names_weights_read(const model_config_t *c, const char *path, int declared,
                       names_scheme_t *s, float *params, perr_t *err) {
    st_file_t *f = st_open(path, err);
    if (!f) return -1;
    param_table_t t;
    if (param_table_build(&t, c, err)) {
        st_close(f);
        return -1;
    }
    unsigned char *seen = calloc((size_t)t.count, 1);
    float *buf = malloc((t.total + 1) * sizeof *buf);
    const st_tensor_t *alias = NULL;
    int rc = !seen || !buf ? perr_set(err, "--weights: out of memory")
                           : file_scheme(c, f, declared, s, err);
    for (size_t k = 0; k < st_count(f) && !rc; k++)
        rc = read_tensor(c, *s, f, st_tensor(f, k), &t, seen, buf, params, &alias, err);
    for (int i = 0; i < t.count && !rc; i++) {
        if (seen[i]) continue;
        char name[160];
        perr_t e;
        rc = names_from_parity(c, *s, i, name, sizeof name, NULL, &e)
                 ? perr_set(err, "%s: %s", path, e.msg)
                 : perr_set(err, "%s: no tensor '%s' (parity's '%s'): every parameter of model %s "
                                 "must be in the file", path, name, t.info[i].name, c->name);
    }
    /* the tied head under its own key: the word embedding's values, or a
     * file of an untied model read as a tied one */
    if (!rc && alias &&
        memcmp(st_data(f, alias), params + t.info[t.wte].offset, (size_t)(alias->end - alias->begin)))
        rc = perr_set(err, "%s: '%s' differs from the word embedding, but model %s ties the head "
                           "to it (give --untie-embeddings-and-output-weights for a separate head)",
                      path, alias->name, c->name);
    free(buf);
    free(seen);
    param_table_free(&t);
    st_close(f);
    return rc;
}
