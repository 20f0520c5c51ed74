/* trace.h - spans of a run as a Chrome trace-event file (Perfetto, chrome://tracing).
 *
 * Each device thread records into its own buffer, so recording takes no
 * lock; the buffers are written together once the threads have joined.
 * Every span becomes a complete event ("ph":"X") on the track of its
 * device (pid 0, tid = device), named by one "thread_name" metadata
 * event ("device 3"). Times are taken on a monotonic clock in seconds
 * and written in microseconds from the buffer's origin.
 *
 * A span that cannot be stored (out of memory) is not silently lost: the
 * buffer is marked (cap == SIZE_MAX, its spans freed, later spans
 * dropped too) and trace_write refuses it with a message, because a trace
 * with holes would mislead whoever reads the timeline.
 */
#ifndef PARITY_TRACE_H
#define PARITY_TRACE_H

#include <stddef.h>

#include "parity/error.h"

typedef struct {
    int device;          /* track: one per simulated device (tid); pid is always 0 */
    char name[40];       /* e.g. "F mb3 c1", "B mb0 c0", "send fwd", "all-reduce" */
    char cat[16];        /* "forward", "backward", "send", "recv", "collective", "exact-sum", "optimizer" */
    double t0, t1;       /* seconds on a monotonic clock; t1 >= t0 */
    int mb, chunk;       /* microbatch and model chunk, -1 when not applicable */
} trace_span_t;

typedef struct { trace_span_t *spans; size_t n, cap; double origin; } trace_buf_t; /* one per device, filled by that device's thread only */
void trace_buf_init(trace_buf_t *b, double origin);  /* origin: t=0 of the file */
void trace_buf_free(trace_buf_t *b);
/* Appends a span; returns 0, or -1 when out of memory (the span is
 * dropped, and the buffer remembers it: trace_write fails with a
 * message). A name or category longer than its field is cut at a UTF-8
 * character boundary; NULL reads as "". */
int  trace_add(trace_buf_t *b, int device, const char *name, const char *cat, double t0, double t1, int mb, int chunk);
/* Writes every buffer's spans as {"traceEvents":[...], "displayTimeUnit":"ms"}:
 * complete events with ts/dur in microseconds ("%.3f") relative to each
 * buffer's origin, "args":{"mb":..,"chunk":..} without a key whose value
 * is -1, and one thread_name event per device that has a span. All or
 * nothing (pio_out_open / pio_out_commit, fileio.h): on failure no
 * partial file appears and an existing one is left intact. A span whose
 * times are not finite or run backwards (t1 < t0) is an error, since it
 * would print as invalid JSON or a nonsense bar. Returns 0, or -1 with
 * err naming the path. */
int  trace_write(const char *path, trace_buf_t *bufs, int nbufs, perr_t *err);

#endif
