/* trace.c - spans of a run as a Chrome trace-event file (trace.h). */
#include "parity/trace.h"

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "parity/fileio.h"
#include "parity/json.h"

/* cap == SIZE_MAX marks a buffer that lost a span (trace.h) */
#define DROPPED SIZE_MAX

void trace_buf_init(trace_buf_t *b, double origin) {
    b->spans = NULL;
    b->n = b->cap = 0;
    b->origin = origin;
}

void trace_buf_free(trace_buf_t *b) {
    free(b->spans);
    b->spans = NULL;
    b->n = b->cap = 0;
}

/* Copies s into a field of `cap` bytes. A cut that would split a UTF-8
 * character backs off to its first byte, so the JSON stays valid UTF-8
 * (the strict parser, and Perfetto, would reject the file otherwise). */
static void copy_field(char *dst, size_t cap, const char *s) {
    size_t n = s ? strlen(s) : 0;
    if (n >= cap) {
        n = cap - 1;
        while (n > 0 && ((unsigned char)s[n] & 0xC0) == 0x80) n--;
    }
    memcpy(dst, s ? s : "", n);
    dst[n] = '\0';
}

int trace_add(trace_buf_t *b, int device, const char *name, const char *cat, double t0, double t1, int mb,
              int chunk) {
    if (b->cap == DROPPED) return -1;
    if (b->n == b->cap) {
        /* doubling keeps appends amortised O(1) on a hot path */
        size_t cap = b->cap ? 2 * b->cap : 256;
        trace_span_t *p = cap < SIZE_MAX / 2 / sizeof *p ? realloc(b->spans, cap * sizeof *p) : NULL;
        if (!p) {
            /* free what we have: it could not be written anyway, and the
             * memory may let the run itself go on */
            trace_buf_free(b);
            b->cap = DROPPED;
            return -1;
        }
        b->spans = p;
        b->cap = cap;
    }
    trace_span_t *s = &b->spans[b->n++];
    s->device = device;
    copy_field(s->name, sizeof s->name, name);
    copy_field(s->cat, sizeof s->cat, cat);
    s->t0 = t0;
    s->t1 = t1;
    s->mb = mb;
    s->chunk = chunk;
    return 0;
}

static int by_int(const void *a, const void *b) {
    int x = *(const int *)a, y = *(const int *)b;
    return (x > y) - (x < y);
}

/* The distinct devices that have a span, sorted; *n of them. A buffer
 * is meant to hold one device, but nothing depends on it. */
static int *devices_of(const trace_buf_t *bufs, int nbufs, size_t *n) {
    size_t total = 0;
    for (int i = 0; i < nbufs; i++) total += bufs[i].n;
    int *d = malloc((total ? total : 1) * sizeof *d);
    if (!d) return NULL;
    size_t k = 0;
    for (int i = 0; i < nbufs; i++)
        for (size_t j = 0; j < bufs[i].n; j++) d[k++] = bufs[i].spans[j].device;
    qsort(d, total, sizeof *d, by_int);
    *n = 0;
    for (size_t j = 0; j < total; j++)
        if (*n == 0 || d[*n - 1] != d[j]) d[(*n)++] = d[j];
    return d;
}

int trace_write(const char *path, trace_buf_t *bufs, int nbufs, perr_t *err) {
    if (nbufs < 0 || (nbufs > 0 && !bufs)) return perr_set(err, "trace file '%s': no buffers", path);
    for (int i = 0; i < nbufs; i++)
        if (bufs[i].cap == DROPPED)
            return perr_set(err, "trace file '%s': buffer %d dropped spans (out of memory while "
                                 "recording); not writing an incomplete trace", path, i);
    size_t ndev;
    int *dev = devices_of(bufs, nbufs, &ndev);
    if (!dev) return perr_set(err, "trace file '%s': out of memory", path);
    pio_out_t out; /* all or nothing (fileio.h) */
    if (pio_out_open(&out, path, "trace file", err)) {
        free(dev);
        return -1;
    }
    FILE *f = out.f;
    fputs("{\"traceEvents\":[\n", f);
    const char *sep = "";
    for (size_t k = 0; k < ndev; k++, sep = ",\n")
        fprintf(f, "%s{\"name\":\"thread_name\",\"ph\":\"M\",\"pid\":0,\"tid\":%d,"
                   "\"args\":{\"name\":\"device %d\"}}", sep, dev[k], dev[k]);
    free(dev);
    for (int i = 0; i < nbufs; i++) {
        for (size_t j = 0; j < bufs[i].n; j++, sep = ",\n") {
            const trace_span_t *s = &bufs[i].spans[j];
            double ts = (s->t0 - bufs[i].origin) * 1e6, dur = (s->t1 - s->t0) * 1e6;
            /* checked as written, in one pass: "%f" of inf or NaN is not
             * JSON, and abandoning here takes the same all-or-nothing path
             * as a full disk */
            if (!isfinite(ts) || !isfinite(dur) || dur < 0) {
                perr_set(err, "trace file '%s': span '%s' on device %d has times %g..%g (origin %g); "
                              "expected finite times with t1 >= t0", path, s->name, s->device, s->t0,
                         s->t1, bufs[i].origin);
                pio_out_abort(&out);
                return -1;
            }
            fprintf(f, "%s{\"name\":", sep);
            json_write_string(f, s->name);
            fputs(",\"cat\":", f);
            json_write_string(f, s->cat);
            /* chrome://tracing's reserved colours: a pipeline's F, B and W
             * passes told apart at a glance (Perfetto colours by name) */
            const char *cname = !strcmp(s->cat, "forward")    ? "thread_state_running"
                                : !strcmp(s->cat, "backward") ? "good"
                                : !strcmp(s->cat, "weight")   ? "yellow"
                                                              : NULL;
            if (cname) fprintf(f, ",\"cname\":\"%s\"", cname);
            fprintf(f, ",\"ph\":\"X\",\"ts\":%.3f,\"dur\":%.3f,\"pid\":0,\"tid\":%d,\"args\":{", ts, dur,
                    s->device);
            /* -1 means "not applicable": leave the key out rather than
             * show a misleading value in the viewer */
            if (s->mb != -1) fprintf(f, "\"mb\":%d", s->mb);
            if (s->chunk != -1) fprintf(f, "%s\"chunk\":%d", s->mb != -1 ? "," : "", s->chunk);
            fputs("}}", f);
        }
    }
    fputs("\n],\"displayTimeUnit\":\"ms\"}\n", f);
    return pio_out_commit(&out, err); /* sees the stream's error flag */
}
