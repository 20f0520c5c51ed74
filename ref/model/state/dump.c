/* dump.c - collect a training step's tensors into a .safetensors dump
 * and a digest list (dump.h).
 *
 * Batch-shaped tensors arrive one microbatch at a time through the model's
 * observer and are assembled into whole [B, ...] tensors here, so a dump
 * never depends on the microbatch count. */
#include "model/gpt.h"
#include "parity/dump.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "parity/fileio.h"
#include "parity/sha256.h"

typedef struct {
    char *name;
    st_dtype_t dtype;
    int ndim;
    int64_t shape[ST_MAX_DIMS];
    size_t esize, per_seq_bytes;
    unsigned char *data;   /* [B * per_seq_bytes] */
    int32_t *src;          /* [B * per_seq elements]: the device that wrote each, -1: none */
} batch_entry_t;

typedef struct {
    char *name;
    char hex[65];
} digest_t;

struct dump {
    int keep_file, want_digests, keep_sources;
    int n_tensors;
    int B;
    st_writer_t *w;
    digest_t *dig;
    int n_dig, cap_dig;
    /* the step being collected */
    int64_t step;
    batch_entry_t *batch;
    int n_batch, cap_batch;
    float *grads; /* [total] copy of the rounded gradients */
    int writer;                  /* the device whose views arrive now (dump_set_writer) */
    dump_replica_t *diffs;       /* one per batch tensor whose replicas disagreed */
    int n_diffs, cap_diffs;
    int32_t **sources;           /* DUMP_SOURCES: [tensor] the writer of each element, or NULL */
    int cap_sources;
    dump_sources_t next;         /* for the parameter-shaped tensors of dump_end_step */
    int have_grads;
    size_t total;
    dump_sink_fn sink;           /* dump_set_sink: tensors go there, not into w */
    void *sink_ctx;
};

/* Keeps a copy of the writers of tensor number `index` (DUMP_SOURCES). */
static int keep_sources(dump_t *d, int index, const int32_t *who, size_t n, perr_t *err) {
    if (index >= d->cap_sources) {
        int cap = d->cap_sources ? 2 * d->cap_sources : 256;
        while (cap <= index) cap *= 2;
        int32_t **grown = realloc(d->sources, (size_t)cap * sizeof *grown);
        if (!grown) return perr_set(err, "dump: out of memory");
        memset(grown + d->cap_sources, 0, (size_t)(cap - d->cap_sources) * sizeof *grown);
        d->sources = grown, d->cap_sources = cap;
    }
    if (!(d->sources[index] = malloc((n ? n : 1) * sizeof(int32_t))))
        return perr_set(err, "dump: out of memory");
    memcpy(d->sources[index], who, n * sizeof(int32_t));
    return 0;
}

/* Adds a tensor; who: the device that wrote each element (kept with
 * DUMP_SOURCES), or NULL when unknown. */
static int emit(dump_t *d, const char *name, st_dtype_t dt, int ndim, const int64_t *shape,
                const void *data, const int32_t *who, perr_t *err) {
    size_t bytes = st_dtype_size(dt), n = 1;
    for (int i = 0; i < ndim; i++) n *= (size_t)shape[i];
    bytes *= n;
    const int index = d->n_tensors++;
    if (d->sink) {
        st_tensor_t t = {.name = name, .dtype = dt, .ndim = ndim};
        for (int i = 0; i < ndim; i++) t.shape[i] = shape[i];
        return d->sink(d->sink_ctx, &t, data, who, err);
    }
    if (d->keep_file && st_writer_add(d->w, name, dt, ndim, shape, data, err)) return -1;
    if (d->keep_sources && who && keep_sources(d, index, who, n, err)) return -1;
    if (!d->want_digests) return 0; /* hashing is most of a dump's cost */
    if (d->n_dig == d->cap_dig) {
        int cap = d->cap_dig ? 2 * d->cap_dig : 256;
        digest_t *grown = realloc(d->dig, (size_t)cap * sizeof *grown);
        if (!grown) return perr_set(err, "dump: out of memory");
        d->dig = grown;
        d->cap_dig = cap;
    }
    digest_t *g = &d->dig[d->n_dig];
    g->name = strdup(name);
    if (!g->name) return perr_set(err, "dump: out of memory");
    sha256_hex(data, bytes, g->hex);
    d->n_dig++;
    return 0;
}

dump_t *dump_new(const gpt_t *g, unsigned what) {
    dump_t *d = calloc(1, sizeof *d);
    if (!d) return NULL;
    const int keep_file = (what & DUMP_TENSORS) != 0;
    d->keep_file = keep_file;
    d->want_digests = (what & DUMP_DIGESTS) != 0;
    d->keep_sources = keep_file && (what & DUMP_SOURCES) != 0;
    d->B = g->cfg.global_batch;
    d->total = g->table.total;
    d->grads = malloc((d->total ? d->total : 1) * sizeof(float));
    if (keep_file) d->w = st_writer_new();
    if (!d->grads || (keep_file && !d->w)) {
        dump_free(d);
        return NULL;
    }
    char *cfg = model_config_json(&g->cfg);
    if (!cfg) {
        dump_free(d);
        return NULL;
    }
    int bad = keep_file && (st_writer_set_metadata(d->w, "config", cfg, NULL) ||
                            st_writer_set_metadata(d->w, "format", "parity-dump-1", NULL));
    free(cfg);
    if (bad) {
        dump_free(d);
        return NULL;
    }
    return d;
}

static void clear_batch(dump_t *d) {
    for (int i = 0; i < d->n_batch; i++) {
        free(d->batch[i].name);
        free(d->batch[i].data);
        free(d->batch[i].src);
    }
    d->n_batch = 0;
}

void dump_free(dump_t *d) {
    if (!d) return;
    clear_batch(d);
    free(d->batch);
    for (int i = 0; i < d->n_dig; i++) free(d->dig[i].name);
    free(d->dig);
    free(d->grads);
    for (int i = 0; i < d->cap_sources; i++) free(d->sources[i]);
    free(d->sources);
    for (int i = 0; i < d->n_diffs; i++) free((char *)d->diffs[i].name);
    free(d->diffs);
    if (d->w) st_writer_free(d->w);
    free(d);
}

int dump_count(const dump_t *d) { return d->n_tensors; }

const st_writer_t *dump_writer(const dump_t *d) { return d->w; }

int dump_set_metadata(dump_t *d, const char *key, const char *value, perr_t *err) {
    return d->keep_file ? st_writer_set_metadata(d->w, key, value, err) : 0;
}

static int emit_params(dump_t *d, const gpt_t *g, const char *prefix, const float *base,
                       const int32_t *who, perr_t *err) {
    char name[160];
    for (int i = 0; i < g->table.count; i++) {
        const param_info_t *p = &g->table.info[i];
        snprintf(name, sizeof name, "%s%s", prefix, p->name);
        if (emit(d, name, ST_F32, p->ndim, p->shape, base + p->offset, who ? who + p->offset : NULL,
                 err))
            return -1;
    }
    return 0;
}

int dump_add_init(dump_t *d, const gpt_t *g, perr_t *err) {
    return emit_params(d, g, "init.", g->params, NULL, err);
}

static batch_entry_t *batch_entry(dump_t *d, const gpt_view_t *v) {
    for (int i = 0; i < d->n_batch; i++)
        if (!strcmp(d->batch[i].name, v->name)) return &d->batch[i];
    if (d->n_batch == d->cap_batch) {
        int cap = d->cap_batch ? 2 * d->cap_batch : 64;
        batch_entry_t *grown = realloc(d->batch, (size_t)cap * sizeof *grown);
        if (!grown) parity_fatal("dump: out of memory");
        d->batch = grown;
        d->cap_batch = cap;
    }
    batch_entry_t *e = &d->batch[d->n_batch++];
    memset(e, 0, sizeof *e);
    e->name = strdup(v->name);
    e->dtype = v->dtype;
    e->ndim = v->ndim + 1;
    e->shape[0] = d->B;
    e->esize = st_dtype_size(v->dtype);
    size_t per_seq = 1;
    for (int i = 0; i < v->ndim; i++) {
        e->shape[i + 1] = v->shape[i];
        per_seq *= (size_t)v->shape[i];
    }
    e->per_seq_bytes = per_seq * e->esize;
    e->data = calloc((size_t)d->B, e->per_seq_bytes);
    e->src = malloc((size_t)d->B * per_seq * sizeof(int32_t));
    if (!e->name || !e->data || !e->src) parity_fatal("dump: out of memory");
    memset(e->src, 0xff, (size_t)d->B * per_seq * sizeof(int32_t)); /* -1: nobody yet */
    return e;
}

/* An element's value for a report: fp32 bits as they are, bytes and
 * integers as numbers. */
static float as_float(st_dtype_t dt, const unsigned char *x) {
    float f;
    int32_t i;
    if (dt == ST_F32) {
        memcpy(&f, x, sizeof f);
        return f;
    }
    if (dt == ST_I32) {
        memcpy(&i, x, sizeof i);
        return (float)i;
    }
    return (float)x[0];
}

/* Keeps one record per tensor: its lowest differing element (the lowest
 * device on a tie). */
static void record_diff(dump_t *d, const batch_entry_t *e, int64_t flat, int device, int taken,
                        float got, float want) {
    char name[200];
    snprintf(name, sizeof name, "step%lld.%s", (long long)d->step, e->name);
    dump_replica_t *r = NULL;
    for (int i = 0; i < d->n_diffs && !r; i++)
        if (!strcmp(d->diffs[i].name, name)) r = &d->diffs[i];
    if (r) {
        if (flat < r->flat || (flat == r->flat && device < r->device))
            *r = (dump_replica_t){r->name, flat, device, taken, got, want};
        return;
    }
    if (d->n_diffs == d->cap_diffs) {
        int cap = d->cap_diffs ? 2 * d->cap_diffs : 16;
        dump_replica_t *grown = realloc(d->diffs, (size_t)cap * sizeof *grown);
        if (!grown) parity_fatal("dump: out of memory");
        d->diffs = grown, d->cap_diffs = cap;
    }
    char *copy = strdup(name);
    if (!copy) parity_fatal("dump: out of memory");
    d->diffs[d->n_diffs++] = (dump_replica_t){copy, flat, device, taken, got, want};
}

/* Copies one run of a replica's block into the global tensor, noting the
 * writer of each element; an element another replica wrote already is
 * compared instead (disagreements are kept for the checker), and the
 * lowest device's copy is the one kept, whatever order devices report in. */
static void place_run(dump_t *d, batch_entry_t *e, size_t at, const unsigned char *src, size_t n) {
    int32_t *who = e->src + at;
    size_t k = 0;
    while (k < n && who[k] < 0) k++;
    if (k == n) { /* the first copy of the whole run */
        memcpy(e->data + at * e->esize, src, n * e->esize);
        for (k = 0; k < n; k++) who[k] = d->writer;
        return;
    }
    for (k = 0; k < n; k++) {
        unsigned char *dst = e->data + (at + k) * e->esize;
        const unsigned char *from = src + k * e->esize;
        if (who[k] < 0) {
            memcpy(dst, from, e->esize);
            who[k] = d->writer;
        } else if (d->writer > who[k]) {
            if (memcmp(dst, from, e->esize))
                record_diff(d, e, (int64_t)(at + k), d->writer, who[k], as_float(e->dtype, from),
                            as_float(e->dtype, dst));
        } else if (d->writer < who[k]) { /* the lowest device's copy is the one taken, and
                                            named, equal or not: reports do not depend on
                                            the order devices report in */
            if (memcmp(dst, from, e->esize))
                record_diff(d, e, (int64_t)(at + k), who[k], d->writer, as_float(e->dtype, dst),
                            as_float(e->dtype, from));
            memcpy(dst, from, e->esize);
            who[k] = d->writer;
        }
    }
}

static void on_batch_tensor(void *ctx, const gpt_view_t *v) {
    dump_t *d = ctx;
    batch_entry_t *e = batch_entry(d, v);
    /* runs along the last axis of each sequence's block, up to 3 axes */
    int64_t shape[3] = {1, 1, 1}, lo[3] = {0, 0, 0}, ext[3] = {1, 1, 1};
    for (int i = 0; i < v->ndim; i++) {
        shape[3 - v->ndim + i] = v->shape[i];
        lo[3 - v->ndim + i] = v->lo[i];
        ext[3 - v->ndim + i] = v->ext[i];
    }
    const size_t per_seq = (size_t)(shape[0] * shape[1] * shape[2]);
    const size_t block = (size_t)(ext[0] * ext[1] * ext[2]);
    const unsigned char *src = v->data;
    for (int s = 0; s < v->n_seq; s++)
        for (int64_t a = 0; a < ext[0]; a++)
            for (int64_t b = 0; b < ext[1]; b++) {
                size_t at = (size_t)(v->first_seq + s) * per_seq +
                            (size_t)(((lo[0] + a) * shape[1] + lo[1] + b) * shape[2] + lo[2]);
                size_t from = (size_t)s * block + (size_t)((a * ext[1] + b) * ext[2]);
                place_run(d, e, at, src + from * e->esize, (size_t)ext[2]);
            }
}

void dump_set_writer(dump_t *d, int device) { d->writer = device; }

const dump_replica_t *dump_replica_diffs(const dump_t *d, int *n) {
    *n = d->n_diffs;
    return d->diffs;
}

void dump_set_sink(dump_t *d, dump_sink_fn sink, void *ctx) {
    d->sink = sink;
    d->sink_ctx = ctx;
}

void dump_set_sources(dump_t *d, const dump_sources_t *src) {
    d->next = src ? *src : (dump_sources_t){0};
}

const int32_t *dump_sources_at(const dump_t *d, size_t index) {
    return (int)index < d->cap_sources ? d->sources[index] : NULL;
}

static void on_grads(void *ctx, const gpt_t *g) {
    dump_t *d = ctx;
    memcpy(d->grads, g->grads, d->total * sizeof(float));
    d->have_grads = 1;
}

void dump_begin_step(dump_t *d, int64_t step, gpt_observer_t *obs) {
    clear_batch(d);
    d->step = step;
    d->have_grads = 0;
    obs->ctx = d;
    obs->batch_tensor = on_batch_tensor;
    obs->grads_ready = on_grads;
}

/* The batch tensors whose names start with prefix (in arrival order). */
static int emit_batch(dump_t *d, const char *prefix, perr_t *err) {
    char name[256];
    size_t plen = strlen(prefix);
    for (int i = 0; i < d->n_batch; i++) {
        batch_entry_t *e = &d->batch[i];
        if (strncmp(e->name, prefix, plen)) continue;
        snprintf(name, sizeof name, "step%lld.%s", (long long)d->step, e->name);
        if (emit(d, name, e->dtype, e->ndim, e->shape, e->data, e->src, err)) return -1;
    }
    return 0;
}

/* MoE models: the step's routing statistics, per MoE layer and expert
 * ([L, E], dense layers' rows 0): tokens routed and dropped (int64), and
 * the auxiliary losses' values (fp64, from their exact sums). A layout's
 * are summed over its devices (engine_moe_stats), so the checker
 * memcmps them against the golden run's like any tensor. */
static int emit_moe_stats(dump_t *d, const gpt_t *g, perr_t *err) {
    const model_config_t *c = &g->cfg;
    if (c->moe_experts <= 0 || !g->moe.routed) return 0;
    const int64_t shape[2] = {c->layers, c->moe_experts}, one = 1;
    const size_t cells = (size_t)c->layers * (size_t)c->moe_experts;
    int32_t *who = calloc(cells, sizeof *who); /* device 0's copy */
    if (!who) return perr_set(err, "dump: out of memory");
    double loss[2];
    moe_loss_values(c, &g->moe, &loss[0], &loss[1]);
    const struct { const char *n; const void *v; int scalar; } t[] = {
        {"moe.routed", g->moe.routed, 0}, {"moe.dropped", g->moe.dropped, 0},
        {"moe.aux_loss", &loss[0], 1}, {"moe.z_loss", &loss[1], 1}};
    int rc = 0;
    for (int k = 0; k < 4 && !rc; k++) {
        char name[64];
        snprintf(name, sizeof name, "step%lld.%s", (long long)d->step, t[k].n);
        rc = t[k].scalar ? emit(d, name, ST_F64, 1, &one, t[k].v, who, err)
                         : emit(d, name, ST_I64, 2, shape, t[k].v, who, err);
    }
    free(who);
    return rc;
}

int dump_end_step(dump_t *d, const gpt_t *g, const gpt_step_stats_t *st, perr_t *err) {
    char name[160];
    const int64_t one = 1;
    if (!d->have_grads) return perr_set(err, "dump: step %lld finished without gradients",
                                        (long long)d->step);
    /* inputs, labels, logits first (in arrival order), then the scalars,
     * then activations and masks, gradients and updated parameters */
    static const char *const first[] = {"input_ids", "labels", "logits"};
    for (int k = 0; k < 3; k++)
        for (int i = 0; i < d->n_batch; i++)
            if (!strcmp(d->batch[i].name, first[k])) {
                batch_entry_t *e = &d->batch[i];
                snprintf(name, sizeof name, "step%lld.%s", (long long)d->step, e->name);
                if (emit(d, name, e->dtype, e->ndim, e->shape, e->data, e->src, err)) return -1;
            }
    /* scalars: every device's copy is compared with the one taken, device 0's */
    static const int32_t device0 = 0;
    /* fp16: the scale this step's backward used and whether it was skipped
     * (fp32 and bf16 dumps stay as they were) */
    struct { const char *n; float v; } scalars[] = {
        {"loss", st->loss}, {"lr", st->lr}, {"grad_norm", st->grad_norm},
        {"loss_scale", st->loss_scale}, {"skipped", (float)st->skipped}};
    for (int k = 0; k < (g->cfg.precision == MODEL_FP16 ? 5 : 3); k++) {
        snprintf(name, sizeof name, "step%lld.%s", (long long)d->step, scalars[k].n);
        if (emit(d, name, ST_F32, 1, &one, &scalars[k].v, &device0, err)) return -1;
    }
    if (emit_moe_stats(d, g, err)) return -1;
    if (emit_batch(d, "act.", err) || emit_batch(d, "mask.", err) ||
        emit_batch(d, "grad_input.", err))
        return -1;
    const dump_sources_t *src = &d->next;
    snprintf(name, sizeof name, "step%lld.grad.", (long long)d->step);
    if (emit_params(d, g, name, d->grads, src->grad, err)) return -1;
    snprintf(name, sizeof name, "step%lld.param.", (long long)d->step);
    if (emit_params(d, g, name, g->params, src->param, err)) return -1;
    /* AdamW's state after the update (the one-device run keeps it whole;
     * adamw8bit's dequantized: its values are the whole state, model.h) */
    const char *const state[2] = {"exp_avg", "exp_avg_sq"};
    for (int k = 0; k < 2 && (g->adam_m || g->adam8_m); k++) {
        float *buf;
        const float *x = gpt_adam_values(g, k, &buf);
        if (!x) return perr_set(err, "dump: out of memory for AdamW's state");
        snprintf(name, sizeof name, "step%lld.%s.", (long long)d->step, state[k]);
        const int rc = emit_params(d, g, name, x, k ? src->exp_avg_sq : src->exp_avg, err);
        free(buf);
        if (rc) return -1;
    }
    const int32_t adam_t = g->adam_t;
    snprintf(name, sizeof name, "step%lld.adam_t", (long long)d->step);
    if (emit(d, name, ST_I32, 1, &one, &adam_t, &device0, err)) return -1;
    d->next = (dump_sources_t){0};
    clear_batch(d);
    return 0;
}

int dump_save(const dump_t *d, const char *path, perr_t *err) {
    if (!d->keep_file) return perr_set(err, "dump: created without a file to save");
    return st_writer_save(d->w, path, err);
}

static int by_name(const void *a, const void *b) {
    return strcmp(((const digest_t *)a)->name, ((const digest_t *)b)->name);
}

int dump_write_digests(const dump_t *d, const char *path, perr_t *err) {
    if (!d->want_digests) return perr_set(err, "dump: created without DUMP_DIGESTS");
    digest_t *sorted = malloc(((size_t)d->n_dig + 1) * sizeof *sorted);
    if (!sorted) return perr_set(err, "dump: out of memory");
    memcpy(sorted, d->dig, (size_t)d->n_dig * sizeof *sorted);
    qsort(sorted, (size_t)d->n_dig, sizeof *sorted, by_name);
    pio_out_t out; /* all or nothing (fileio.h) */
    if (pio_out_open(&out, path, "digest file", err)) {
        free(sorted);
        return -1;
    }
    for (int i = 0; i < d->n_dig; i++) fprintf(out.f, "%s  %s\n", sorted[i].hex, sorted[i].name);
    free(sorted);
    return pio_out_commit(&out, err);
}

/* ---- batch tensors between processes ----
 * An export: uint32 n, then per tensor: uint32 name length, the name,
 * int32 dtype, int32 ndim, int64 shape[ndim], the data, the writers. */

typedef struct {
    unsigned char *p;
    size_t len, cap;
} bytes_t;

static int put(bytes_t *b, const void *x, size_t n) {
    if (b->len + n > b->cap) {
        size_t cap = b->cap ? 2 * b->cap : 4096;
        while (cap < b->len + n) cap *= 2;
        unsigned char *grown = realloc(b->p, cap);
        if (!grown) return -1;
        b->p = grown, b->cap = cap;
    }
    memcpy(b->p + b->len, x, n);
    b->len += n;
    return 0;
}

int dump_batch_export(const dump_t *d, unsigned char **out, size_t *len, perr_t *err) {
    bytes_t b = {0};
    uint32_t n = (uint32_t)d->n_batch;
    int bad = put(&b, &n, sizeof n);
    for (int i = 0; i < d->n_batch && !bad; i++) {
        const batch_entry_t *e = &d->batch[i];
        uint32_t nl = (uint32_t)strlen(e->name);
        int32_t dt = (int32_t)e->dtype, nd = e->ndim;
        const size_t elems = (size_t)d->B * (e->per_seq_bytes / e->esize);
        bad = put(&b, &nl, sizeof nl) || put(&b, e->name, nl) || put(&b, &dt, sizeof dt) ||
              put(&b, &nd, sizeof nd) || put(&b, e->shape, (size_t)nd * sizeof(int64_t)) ||
              put(&b, e->data, (size_t)d->B * e->per_seq_bytes) ||
              put(&b, e->src, elems * sizeof(int32_t));
    }
    if (bad) {
        free(b.p);
        return perr_set(err, "dump: out of memory exporting the batch tensors");
    }
    *out = b.p, *len = b.len;
    return 0;
}

static int take(const unsigned char **p, const unsigned char *end, void *x, size_t n) {
    if ((size_t)(end - *p) < n) return -1;
    memcpy(x, *p, n);
    *p += n;
    return 0;
}

int dump_batch_import(dump_t *d, const unsigned char *in, size_t len, perr_t *err) {
    const unsigned char *p = in, *end = in + len;
    uint32_t n;
    if (take(&p, end, &n, sizeof n)) return perr_set(err, "dump: a batch export of %zu bytes is cut short", len);
    const int keep = d->writer;
    for (uint32_t i = 0; i < n; i++) {
        uint32_t nl;
        int32_t dt, nd;
        char name[256];
        int64_t shape[ST_MAX_DIMS];
        if (take(&p, end, &nl, sizeof nl) || nl >= sizeof name || take(&p, end, name, nl) ||
            take(&p, end, &dt, sizeof dt) || take(&p, end, &nd, sizeof nd) || nd < 1 ||
            nd > 4 || nd > ST_MAX_DIMS || take(&p, end, shape, (size_t)nd * sizeof(int64_t)))
            return perr_set(err, "dump: batch export tensor %u is malformed", i);
        name[nl] = 0;
        gpt_view_t v = {.name = name, .dtype = (st_dtype_t)dt, .ndim = nd - 1};
        for (int k = 1; k < nd; k++) v.shape[k - 1] = shape[k];
        if (shape[0] != d->B || st_dtype_size(v.dtype) == 0)
            return perr_set(err, "dump: batch export tensor '%s' is not of this dump (batch %lld, "
                                 "expected %d)", name, (long long)shape[0], d->B);
        batch_entry_t *e = batch_entry(d, &v);
        const size_t elems = (size_t)d->B * (e->per_seq_bytes / e->esize);
        const unsigned char *data = p, *who = p + elems * e->esize;
        if ((size_t)(end - p) < elems * (e->esize + sizeof(int32_t)))
            return perr_set(err, "dump: batch export tensor '%s' is cut short", name);
        p += elems * (e->esize + sizeof(int32_t));
        for (size_t k = 0; k < elems;) { /* runs of one writer */
            int32_t w;
            memcpy(&w, who + k * sizeof w, sizeof w);
            size_t m = k + 1;
            for (int32_t w2; m < elems && (memcpy(&w2, who + m * sizeof w2, sizeof w2), w2 == w);) m++;
            if (w >= 0) {
                d->writer = w;
                place_run(d, e, k, data + k * e->esize, m - k);
            }
            k = m;
        }
    }
    d->writer = keep;
    return 0;
}

int dump_golden_step(gpt_t *g, const struct corpus *data, int64_t step, dump_t *d,
                     gpt_step_stats_t *st, perr_t *err) {
    gpt_observer_t obs = {0};
    if (d) dump_begin_step(d, step, &obs);
    gpt_train_step(g, data, step, d ? &obs : NULL, st);
    return d ? dump_end_step(d, g, st, err) : 0;
}
