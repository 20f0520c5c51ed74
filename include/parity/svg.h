/* svg.h - pictures of a run, drawn by parity itself (`parity svg`).
 *
 * Three pictures, each a pure function from data to an SVG document
 * written to a FILE (the caller owns the file: parity's atomic outputs,
 * fileio.h):
 *   schedule    the pipeline schedule of a Chrome trace (trace.h): one
 *               row per device, one bar per span, coloured by category;
 *               or, logically, forward = 1 slot and backward = 2 slots,
 *               each pass placed after its row's previous pass and after
 *               the pass it waits for on the neighbouring virtual stage;
 *   grid        the rank grid (grid.h): one box per device with its world
 *               rank and coordinates, one panel per pipeline stage;
 *   collective  where each chunk of a collective goes, step by step, for
 *               the direct and ring algorithms (coll.h).
 * What is drawn from integers only (logical schedules, grids,
 * collectives) is byte-identical from run to run: committed pictures are
 * regenerated and compared by tests/cli/test_svg.sh.
 *
 * Every document is <?xml ...?> + <svg xmlns=...> with a <title>; text
 * is in <text> elements with & < > " escaped. Machine-readable classes
 * and data-* attributes name what each element stands for, so a test
 * can count bars, boxes and steps without reading pixels.
 */
#ifndef PARITY_SVG_H
#define PARITY_SVG_H

#include <stddef.h>
#include <stdio.h>

#include "parity/coll.h"
#include "parity/error.h"
#include "parity/grid.h"
#include "parity/trace.h"

/* ---- the writer (svg.c) ---- */

/* The XML declaration, <svg> of w x h user units on a white background,
 * and <title>. */
void svg_begin(FILE *f, int w, int h, const char *title);
void svg_end(FILE *f);
/* s with & < > " as entities. */
void svg_escape(FILE *f, const char *s);
/* <text x y attrs>escaped text</text>; attrs is raw (may be ""). */
void svg_text(FILE *f, double x, double y, const char *attrs, const char *text);
/* A fill colour of a small palette, picked by index (mod its size). */
const char *svg_colour(int i);

/* ---- schedule (svg_schedule.c) ---- */

/* The complete events ("ph":"X") of a trace file, times in microseconds
 * as written (t0 = ts, t1 = ts + dur), each device's spans in file
 * order, which is the order that device recorded them. */
typedef struct {
    trace_span_t *spans;
    size_t n;
} svg_trace_t;

/* The latest time a trace may hold, ts + dur in microseconds: 1e12, about
 * 11.6 days of run. A later one (ts 1e300) is no run parity traced, and
 * would shrink every other span of the picture to nothing. */
#define SVG_TRACE_MAX_US 1e12

/* Reads a trace written by trace_write. Errors name the file and the
 * event and field ("event 12: \"dur\": expected a number from 0 to
 * 1e+12"); a trace with no complete events is an error. */
int  svg_trace_read(const char *path, svg_trace_t *t, perr_t *err);
void svg_trace_free(svg_trace_t *t);
/* logical = 0: wall-clock bars of every span, a time axis in ms.
 * logical = 1: forward and backward passes only, in slots; the pipeline
 * stage of each device is read off the trace (svg_schedule.c says how).
 * -1 with a message when the trace's passes cannot be placed. */
int  svg_schedule(FILE *f, const svg_trace_t *t, int logical, const char *title, perr_t *err);

/* ---- rank grid (svg_grid.c) ---- */

/* stage_note[r] (may be NULL) is printed under stage r's heading, e.g.
 * "layers 0-1 + embedding". */
void svg_grid(FILE *f, const grid_t *G, const char *const *stage_note, const char *title);

/* ---- collectives (svg_collective.c) ---- */

typedef enum {
    SVG_ALL_REDUCE, SVG_REDUCE_SCATTER, SVG_ALL_GATHER, SVG_BROADCAST, SVG_ALL_TO_ALL, SVG_SEND_RECV,
    SVG_NKINDS
} svg_coll_t;

enum { SVG_MAX_RANKS = 64 };
/* "all-reduce" ... "send-recv"; svg_coll_parse: 0, or -1 naming the kinds. */
const char *svg_coll_name(svg_coll_t k);
int  svg_coll_parse(const char *s, svg_coll_t *k, perr_t *err);
/* The number of step panels the picture has (after the "before" panel). */
int  svg_coll_steps(svg_coll_t k, coll_algo_t algo, int n);
/* n in 1..SVG_MAX_RANKS (send-recv: 2..); -1 with a message otherwise. */
int  svg_collective(FILE *f, svg_coll_t k, coll_algo_t algo, int n, perr_t *err);

#endif
