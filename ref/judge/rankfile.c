/* rankfile.c - one rank file of a backend under test (RANKFILES.md): its
 * metadata (format, mesh, coordinates, naming scheme, precision) and the
 * placement of every tensor in it, checked field by field so that a
 * malformed file is refused with its path, the tensor and the field,
 * never half read. Each file tensor becomes one or more pieces
 * (judge_internal.h): a plain tensor one, a flat-buffer shard one per
 * member it overlaps. Whether a piece's shape fits the golden tensor is
 * assemble.c's question: this file does not know the model. */
#include "judge_internal.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "parity/json.h"

enum { MAX_MB = 1 << 20 };
static const int64_t MAX_DIM = (int64_t)1 << 40;

/* A message naming the file (and a field), escaped: names come from the file. */
#define FAIL(...) (perr_set(err, __VA_ARGS__), -1)

static const char *esc(const char *s, char *buf, size_t cap) { return st_escape(s, buf, cap); }

void judge_fmt_coords(const judge_mesh_t *m, const int *coord, char *buf, size_t cap) {
    size_t n = 0;
    buf[0] = 0;
    for (int i = 0; i < m->n && n < cap; i++)
        n += (size_t)snprintf(buf + n, cap - n, "%s%s=%d", i ? "," : "", m->name[i], coord[i]);
    if (!m->n) snprintf(buf, cap, "(one device)");
}

/* A metadata value parsed as JSON, or NULL with a message. */
static json_t *meta_json(const judge_file_t *jf, const char *key, int required, perr_t *err) {
    const char *v = st_metadata(jf->f, key);
    if (!v) {
        if (required) perr_set(err, "%s: no metadata '%s' (RANKFILES.md: every rank file has "
                                    "parity.format, parity.mesh and parity.coords)", jf->path, key);
        else err->msg[0] = 0;
        return NULL;
    }
    perr_t e;
    json_t *j = json_parse(v, strlen(v), &e);
    if (!j) perr_set(err, "%s: metadata '%s' is not JSON: %s", jf->path, key, e.msg);
    return j;
}

static int parse_mesh(judge_file_t *jf, perr_t *err) {
    json_t *j = meta_json(jf, "parity.mesh", 1, err);
    if (!j) return -1;
    judge_mesh_t *m = &jf->mesh;
    int rc = 0;
    int64_t ranks = 1;
    char b[160];
    if (json_type(j) != JSON_OBJECT) {
        rc = FAIL("%s: parity.mesh: expected a JSON object of axis name to size ({\"dp\": 2, "
                  "\"tp\": 2}, {} for one device), got a %s", jf->path,
                  json_type_name(json_type(j)));
    } else if (json_len(j) > JUDGE_MAX_AXES) {
        rc = FAIL("%s: parity.mesh has %zu axes (at most %d)", jf->path, json_len(j),
                  JUDGE_MAX_AXES);
    }
    m->n = rc ? 0 : (int)json_len(j);
    for (int i = 0; i < m->n && !rc; i++) {
        const char *k = json_key_at(j, i);
        int64_t size;
        if (!*k || strlen(k) >= JUDGE_AXIS_NAME)
            rc = FAIL("%s: parity.mesh axis '%s': a name of 1 to %d bytes", jf->path,
                      esc(k, b, sizeof b), JUDGE_AXIS_NAME - 1);
        else if (json_int64(json_at(j, i), &size) || size < 1 || size > JUDGE_MAX_RANKS)
            rc = FAIL("%s: parity.mesh axis '%s': its size must be an integer 1 to %d", jf->path,
                      esc(k, b, sizeof b), JUDGE_MAX_RANKS);
        else if ((ranks *= size) > JUDGE_MAX_RANKS)
            rc = FAIL("%s: parity.mesh has more than %d ranks", jf->path, JUDGE_MAX_RANKS);
        else {
            snprintf(m->name[i], JUDGE_AXIS_NAME, "%s", k);
            m->size[i] = (int)size;
        }
    }
    m->ranks = (int)ranks;
    json_free(j);
    return rc;
}

static int parse_coords(judge_file_t *jf, perr_t *err) {
    json_t *j = meta_json(jf, "parity.coords", 1, err);
    if (!j) return -1;
    const judge_mesh_t *m = &jf->mesh;
    int rc = 0;
    char b[160];
    if (json_type(j) != JSON_OBJECT)
        rc = FAIL("%s: parity.coords: expected a JSON object of axis name to coordinate, got a %s",
                  jf->path, json_type_name(json_type(j)));
    for (size_t i = 0; !rc && i < json_len(j); i++) {
        int known = 0;
        for (int a = 0; a < m->n; a++) known |= !strcmp(m->name[a], json_key_at(j, i));
        if (!known)
            rc = FAIL("%s: parity.coords has axis '%s', which parity.mesh lacks", jf->path,
                      esc(json_key_at(j, i), b, sizeof b));
    }
    jf->rank = 0;
    for (int a = 0; a < m->n && !rc; a++) {
        const json_t *c = json_get(j, m->name[a]);
        int64_t v;
        if (!c) rc = FAIL("%s: parity.coords lacks mesh axis '%s'", jf->path, m->name[a]);
        else if (json_int64(c, &v) || v < 0 || v >= m->size[a])
            rc = FAIL("%s: parity.coords '%s': expected an integer 0 to %d (the mesh's size %d)",
                      jf->path, m->name[a], m->size[a] - 1, m->size[a]);
        else jf->coord[a] = (int)v, jf->rank = jf->rank * m->size[a] + (int)v;
    }
    json_free(j);
    return rc;
}

/* "Replicate()", "Partial(sum)", "Shard(d)" or "Shard(d, strips=k)" (d may
 * count from the end of an ndim-axis tensor) into *out and *strips (1
 * without). -1 not a placement, -2 d outside the block, -3 a bad k. */
static int parse_one_placement(const char *s, int ndim, int *out, int64_t *strips) {
    *strips = 1;
    if (!strcmp(s, "Replicate()")) return *out = JP_REPLICATE, 0;
    if (!strcmp(s, "Partial(sum)")) return *out = JP_PARTIAL, 0;
    if (strncmp(s, "Shard(", 6)) return -1;
    char *end;
    const char *num = s + 6;
    if (!((*num >= '0' && *num <= '9') || (*num == '-' && num[1] >= '0' && num[1] <= '9')))
        return -1;
    long d = strtol(num, &end, 10);
    if (!strncmp(end, ", strips=", 9) || !strncmp(end, ",strips=", 8)) {
        const char *k = strchr(end, '=') + 1;
        if (*k < '0' || *k > '9') return -3;
        const long long v = strtoll(k, &end, 10);
        if (strcmp(end, ")")) return -1;
        if (v < 1 || v > MAX_DIM) return -3;
        *strips = v;
    } else if (strcmp(end, ")")) {
        return -1;
    }
    if (d < 0) d += ndim;
    if (d < 0 || d >= ndim) return -2;
    return *out = (int)d, 0;
}

/* A "p" array over the mesh into p[] and strips[]. what: "tensor 'x'" for
 * messages. */
static int parse_p(const judge_file_t *jf, const char *what, const json_t *pj, int ndim, int *p,
                   int64_t *strips, perr_t *err) {
    for (int a = 0; a < JUDGE_MAX_AXES; a++) p[a] = JP_REPLICATE, strips[a] = 1;
    if (!pj) return 0;
    if (json_type(pj) != JSON_ARRAY || (int)json_len(pj) != jf->mesh.n)
        return FAIL("%s: %s: placement \"p\" must be an array of %d string%s, one per mesh axis",
                    jf->path, what, jf->mesh.n, jf->mesh.n == 1 ? "" : "s");
    char b[160];
    for (int a = 0; a < jf->mesh.n; a++) {
        const char *s = json_string(json_at(pj, a));
        const int rc = s ? parse_one_placement(s, ndim, &p[a], &strips[a]) : -1;
        if (rc == -2)
            return FAIL("%s: %s: placement '%s' on mesh axis '%s' shards an axis a %d-axis "
                        "block does not have", jf->path, what, esc(s, b, sizeof b),
                        jf->mesh.name[a], ndim);
        if (rc == -3)
            return FAIL("%s: %s: placement '%s' on mesh axis '%s': strips must be an integer "
                        ">= 1 (Shard(d, strips=k))", jf->path, what, esc(s, b, sizeof b),
                        jf->mesh.name[a]);
        if (rc)
            return FAIL("%s: %s: placement on mesh axis '%s' is '%s'; expected Replicate(), "
                        "Shard(d), Shard(d, strips=k) or Partial(sum)", jf->path, what,
                        jf->mesh.name[a], s ? esc(s, b, sizeof b) : "(not a string)");
    }
    return 0;
}

/* A shape array into shape[] (ndim at most ST_MAX_DIMS). */
static int parse_shape(const judge_file_t *jf, const char *what, const json_t *sj, int *ndim,
                       int64_t *shape, perr_t *err) {
    if (json_type(sj) != JSON_ARRAY || json_len(sj) > ST_MAX_DIMS)
        return FAIL("%s: %s: \"shape\" must be an array of at most %d sizes", jf->path, what,
                    ST_MAX_DIMS);
    *ndim = (int)json_len(sj);
    for (int d = 0; d < *ndim; d++)
        if (json_int64(json_at(sj, d), &shape[d]) || shape[d] < 0 || shape[d] > MAX_DIM)
            return FAIL("%s: %s: \"shape\" entry %d must be an integer 0 to 2^40", jf->path,
                        what, d);
    return 0;
}

/* The elements of a shape, or UINT64_MAX past MAX_NUMEL (each axis is at
 * most 2^40: the product could wrap). */
static const uint64_t MAX_NUMEL = (uint64_t)1 << 48;
static uint64_t numel_of(int ndim, const int64_t *shape) {
    uint64_t n = 1;
    for (int d = 0; d < ndim; d++) {
        if (!shape[d]) return 0;
        if (n > MAX_NUMEL / (uint64_t)shape[d]) return UINT64_MAX;
        n *= (uint64_t)shape[d];
    }
    return n;
}

/* The step a full name belongs to (-1 init.), or -2 when it is neither. */
static int64_t step_of(const char *name) {
    if (!strncmp(name, "init.", 5)) return -1;
    if (strncmp(name, "step", 4) || name[4] < '0' || name[4] > '9') return -2;
    char *end;
    const long long s = strtoll(name + 4, &end, 10);
    return *end == '.' && end[1] && s < 1000000 ? s : -2;
}

static int add_piece(judge_file_t *jf, const judge_piece_t *pc, perr_t *err) {
    char b[160];
    const int64_t s = step_of(pc->name);
    if (s == -2)
        return FAIL("%s: tensor '%s': not a tensor name of RANKFILES.md (init.<param> or "
                    "step<s>.<what>)", jf->path, esc(pc->name, b, sizeof b));
    if (s > jf->max_step) jf->max_step = s;
    judge_piece_t *grown = realloc(jf->pc, (size_t)(jf->npc + 1) * sizeof *grown);
    if (!grown) return FAIL("%s: out of memory", jf->path);
    jf->pc = grown;
    jf->pc[jf->npc] = *pc;
    if (!(jf->pc[jf->npc].name = strdup(pc->name)) || !(jf->pc[jf->npc].where = strdup(pc->where)))
        return FAIL("%s: out of memory", jf->path);
    jf->npc++;
    return 0;
}

/* "name@mb3" -> name (into buf) and 3; *mb -1 without a suffix. */
static int strip_mb(const char *name, char *buf, size_t cap, int *mb) {
    *mb = -1;
    snprintf(buf, cap, "%s", name);
    char *at = strrchr(buf, '@');
    if (!at) return 0;
    char *end;
    if (strncmp(at, "@mb", 3) || at[3] < '0' || at[3] > '9') return -1;
    const long m = strtol(at + 3, &end, 10);
    if (*end || m >= MAX_MB) return -1;
    *mb = (int)m;
    *at = 0;
    return 0;
}

static int check_keys(const judge_file_t *jf, const char *what, const json_t *o,
                      const char *const *keys, perr_t *err) {
    char b[160];
    for (size_t i = 0; i < json_len(o); i++) {
        int known = 0;
        for (int k = 0; keys[k]; k++) known |= !strcmp(keys[k], json_key_at(o, i));
        if (!known)
            return FAIL("%s: %s: unknown placement field '%s'", jf->path, what,
                        esc(json_key_at(o, i), b, sizeof b));
    }
    return 0;
}

/* A flat-buffer shard: one piece per member the range [offset, offset+n)
 * overlaps (members' local blocks concatenated, row-major). */
static int add_flat(judge_file_t *jf, const st_tensor_t *t, const char *what, const json_t *fl,
                    double scale, perr_t *err) {
    static const char *const keys[] = {"offset", "members", NULL};
    static const char *const mkeys[] = {"name", "shape", "p", NULL};
    if (json_type(fl) != JSON_OBJECT || check_keys(jf, what, fl, keys, err))
        return json_type(fl) != JSON_OBJECT
                   ? FAIL("%s: %s: \"flat\" must be an object {offset, members}", jf->path, what)
                   : -1;
    int64_t offset;
    const json_t *mem = json_get(fl, "members");
    if (json_int64(json_get(fl, "offset"), &offset) || offset < 0)
        return FAIL("%s: %s: flat \"offset\" must be an integer >= 0", jf->path, what);
    if (json_type(mem) != JSON_ARRAY || !json_len(mem))
        return FAIL("%s: %s: flat \"members\" must be a non-empty array", jf->path, what);
    if (t->ndim != 1)
        return FAIL("%s: %s: a flat-buffer shard is 1-D, this one has %d axes", jf->path, what,
                    t->ndim);
    const uint64_t n = (uint64_t)t->shape[0], es = st_dtype_size(t->dtype);
    const unsigned char *data = st_data(jf->f, t);
    uint64_t start = 0;
    char mwhat[400], b[160];
    for (size_t k = 0; k < json_len(mem); k++) {
        const json_t *m = json_at(mem, k);
        snprintf(mwhat, sizeof mwhat, "%s flat member %zu", what, k);
        if (json_type(m) != JSON_OBJECT)
            return FAIL("%s: %s: expected an object {name, shape, p}", jf->path, mwhat);
        if (check_keys(jf, mwhat, m, mkeys, err)) return -1;
        const char *name = json_string(json_get(m, "name"));
        if (!name || !*name) return FAIL("%s: %s: no \"name\"", jf->path, mwhat);
        snprintf(mwhat, sizeof mwhat, "%s flat member '%s'", what, esc(name, b, sizeof b));
        judge_piece_t pc = {.name = (char *)name, .scale = scale, .dtype = t->dtype,
                            .where = (char *)what};
        if (parse_shape(jf, mwhat, json_get(m, "shape"), &pc.ndim, pc.shape, err) ||
            parse_p(jf, mwhat, json_get(m, "p"), pc.ndim, pc.p, pc.strips, err))
            return -1;
        const uint64_t size = numel_of(pc.ndim, pc.shape);
        if (size > MAX_NUMEL || start + size > MAX_NUMEL)
            return FAIL("%s: %s: \"shape\" has more than 2^48 elements (with the members "
                        "before it)", jf->path, mwhat);
        const uint64_t lo = start > (uint64_t)offset ? start : (uint64_t)offset;
        const uint64_t hi = start + size < (uint64_t)offset + n ? start + size : (uint64_t)offset + n;
        /* a member this shard holds none of is still checked (its name, its
         * shape against its placement: assemble.c), so a wrong one is never
         * hidden by where the buffer happens to be cut */
        pc.unheld = lo >= hi;
        pc.r0 = pc.unheld ? 0 : lo - start, pc.r1 = pc.unheld ? 0 : hi - start;
        pc.data = pc.unheld ? data : data + (lo - (uint64_t)offset) * es;
        if (add_piece(jf, &pc, err)) return -1;
        start += size;
    }
    if (n && (uint64_t)offset >= start)
        return FAIL("%s: %s: flat offset %lld is past the members' %llu elements (the shard "
                    "would hold padding only)", jf->path, what, (long long)offset,
                    (unsigned long long)start);
    return 0;
}

/* One file tensor and its placement (pj: NULL when parity.placements does
 * not list it: the whole global tensor). */
static int add_tensor(judge_file_t *jf, const st_tensor_t *t, const json_t *pj, perr_t *err) {
    static const char *const keys[] = {"p", "microbatch", "scale", "flat", NULL};
    char name[256], b[160], what[300];
    int mb;
    snprintf(what, sizeof what, "tensor '%s'", esc(t->name, b, sizeof b));
    if (strip_mb(t->name, name, sizeof name, &mb))
        return FAIL("%s: %s: a name suffix must be @mb<m>, m a microbatch number", jf->path, what);
    if (!st_dtype_is_float(t->dtype) && t->dtype != ST_I32 && t->dtype != ST_I64 &&
        t->dtype != ST_U8 && t->dtype != ST_BOOL)
        return FAIL("%s: %s: dtype %s (F32, BF16, F16, F64; I32, I64, U8 or BOOL for the batch "
                    "and masks)", jf->path, what, st_dtype_name(t->dtype));
    if (t->dtype == ST_F8_E4M3 || t->dtype == ST_F8_E5M2)
        return FAIL("%s: %s: dtype %s is not read (F32, BF16, F16 or F64)", jf->path, what,
                    st_dtype_name(t->dtype));
    judge_piece_t pc = {.name = name, .scale = 1, .dtype = t->dtype, .where = what};
    pc.ndim = t->ndim;
    memcpy(pc.shape, t->shape, sizeof pc.shape);
    pc.r1 = st_numel(t);
    pc.data = st_data(jf->f, t);
    for (int a = 0; a < JUDGE_MAX_AXES; a++) pc.p[a] = JP_REPLICATE, pc.strips[a] = 1;
    if (pj) {
        if (json_type(pj) != JSON_OBJECT)
            return FAIL("%s: %s: its placement must be a JSON object {p, microbatch, scale, flat}",
                        jf->path, what);
        if (check_keys(jf, what, pj, keys, err)) return -1;
        const json_t *sj = json_get(pj, "scale"), *mj = json_get(pj, "microbatch");
        if (sj) {
            pc.scale = json_number(sj);
            if (json_type(sj) != JSON_NUMBER || !isfinite(pc.scale) || pc.scale == 0)
                return FAIL("%s: %s: \"scale\" must be a finite non-zero number", jf->path, what);
        }
        if (json_get(pj, "flat")) {
            if (mj || mb >= 0)
                return FAIL("%s: %s: a flat-buffer shard has no microbatch (its members are "
                            "whole tensors)", jf->path, what);
            /* the flat tensor's own "p" only says which axis cut the buffer,
             * but it is still a placement (RANKFILES.md): a typo is refused */
            int fp[JUDGE_MAX_AXES];
            int64_t fs[JUDGE_MAX_AXES];
            if (parse_p(jf, what, json_get(pj, "p"), 1, fp, fs, err)) return -1;
            return add_flat(jf, t, what, json_get(pj, "flat"), pc.scale, err);
        }
        if (parse_p(jf, what, json_get(pj, "p"), t->ndim, pc.p, pc.strips, err)) return -1;
        if (mj) {
            int64_t m, n;
            if (json_type(mj) != JSON_ARRAY || json_len(mj) != 2 || json_int64(json_at(mj, 0), &m) ||
                json_int64(json_at(mj, 1), &n) || n < 1 || n > MAX_MB || m < 0 || m >= n)
                return FAIL("%s: %s: \"microbatch\" must be [m, M] with 0 <= m < M <= %d",
                            jf->path, what, MAX_MB);
            if (mb >= 0 && mb != m)
                return FAIL("%s: %s: its name says microbatch %d, its placement %lld", jf->path,
                            what, mb, (long long)m);
            if (!t->ndim)
                return FAIL("%s: %s: a microbatch cuts axis 0; a scalar has none", jf->path, what);
            pc.mb = (int)m, pc.nmb = (int)n;
        }
    }
    if (mb >= 0 && !pc.nmb)
        return FAIL("%s: %s: an @mb suffix needs \"microbatch\": [m, M] in its placement",
                    jf->path, what);
    return add_piece(jf, &pc, err);
}

static int parse_tensors(judge_file_t *jf, perr_t *err) {
    json_t *pl = meta_json(jf, "parity.placements", 0, err);
    if (!pl && err->msg[0]) return -1;
    int rc = 0;
    char b[160];
    if (pl && json_type(pl) != JSON_OBJECT)
        rc = FAIL("%s: parity.placements: expected a JSON object of tensor name to placement",
                  jf->path);
    for (size_t i = 0; pl && !rc && i < json_len(pl); i++)
        if (!st_find(jf->f, json_key_at(pl, i)))
            rc = FAIL("%s: parity.placements names tensor '%s', which the file does not hold",
                      jf->path, esc(json_key_at(pl, i), b, sizeof b));
    for (size_t i = 0; !rc && i < st_count(jf->f); i++) {
        const st_tensor_t *t = st_tensor(jf->f, i);
        rc = add_tensor(jf, t, pl ? json_get(pl, t->name) : NULL, err);
    }
    json_free(pl);
    return rc;
}

int judge_file_open(judge_file_t *jf, const char *path, perr_t *err) {
    memset(jf, 0, sizeof *jf);
    jf->max_step = -1;
    if (!(jf->path = strdup(path))) return FAIL("%s: out of memory", path);
    if (!(jf->f = st_open(path, err))) return -1;
    const char *fmt = st_metadata(jf->f, "parity.format");
    const char *names = st_metadata(jf->f, "parity.names");
    const char *prec = st_metadata(jf->f, "parity.precision");
    char b[160];
    if (!fmt) return FAIL("%s: no metadata 'parity.format' (not a rank file: RANKFILES.md)", path);
    if (strcmp(fmt, "1"))
        return FAIL("%s: parity.format '%s': this parity reads format 1", path, esc(fmt, b, sizeof b));
    if (parse_mesh(jf, err) || parse_coords(jf, err)) return -1;
    static const char *const schemes[] = {"megatron-lm", "megatron-core", "hf-gpt2", "nanogpt",
                                          "auto", NULL};
    int known = !names;
    for (int k = 0; names && schemes[k]; k++) known |= !strcmp(names, schemes[k]);
    if (!known)
        return FAIL("%s: parity.names '%s': expected megatron-lm, megatron-core, hf-gpt2, nanogpt "
                    "or auto", path, esc(names, b, sizeof b));
    snprintf(jf->names, sizeof jf->names, "%s", names ? names : "megatron-lm");
    if (prec && strcmp(prec, "fp32") && strcmp(prec, "bf16"))
        return FAIL("%s: parity.precision '%s': expected fp32 or bf16", path, esc(prec, b, sizeof b));
    jf->bf16 = prec && !strcmp(prec, "bf16");
    return parse_tensors(jf, err);
}

void judge_file_close(judge_file_t *jf) {
    for (int i = 0; i < jf->npc; i++)
        free(jf->pc[i].name), free(jf->pc[i].where), free(jf->pc[i].backend);
    free(jf->pc);
    st_close(jf->f);
    free(jf->path);
    memset(jf, 0, sizeof *jf);
}
