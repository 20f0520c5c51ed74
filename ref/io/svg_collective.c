/* svg_collective.c - where the chunks of one collective go, step by step.
 *
 * A picture is a column per rank and, under it, the rank's buffer as a
 * stack of cells (chunks, blocks or one buffer), first as it is before
 * the call, then after each step with arrows for that step's moves. The
 * steps are those of ref/coll, restated here (a picture must not run the
 * collectives to draw them):
 *   ring all-reduce (coll_ring.c): n-1 reduce-scatter steps, at step s
 *     rank r hands its partial sum of chunk (r - s - 1) mod n to r+1,
 *     which adds its own; chunk c ends complete on rank c, summed
 *     ((x[c+1] + x[c+2]) + ...) + x[c]. Then n-1 all-gather steps, at
 *     step t rank r hands finished chunk (r - t) mod n to r+1. Chunk c is
 *     coll_chunk's: elements [c L, (c+1) L), L = ceil(count / n)
 *     rounded up to a 64-byte line;
 *   ring reduce-scatter: the first half, over the n blocks of recv_count;
 *   ring all-gather: at step t (1..n-1) rank r hands block (r - t + 1)
 *     mod n to r+1;
 *   ring broadcast: a chain root -> root+1 -> ... (the buffer moves in
 *     COLL_PIPE_BYTES pieces, pipelined: drawn as one piece, n-1 hops);
 *   direct (coll_direct.c): no hand-offs; every rank reads peers'
 *     buffers. All-reduce: rank i reduces chunk i from every rank in
 *     group order ((x0 + x1) + x2) + ..., then writes the sum into every
 *     rank (drawn as two steps); reduce-scatter: rank i reduces block i;
 *     all-gather: rank i reads block j from rank j; broadcast: every rank
 *     reads the root's buffer;
 *   all-to-all (both algorithms move data the same way): rank i's block
 *     j goes to rank j's block i, in one step;
 *   send-recv (coll_p2p.c, a pipeline's pattern): rank r sends its buffer
 *     to rank r+1.
 * The root is rank 0. n <= 64, so a cell's contributors fit a uint64_t.
 */
#include "parity/svg.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *const kind_names[SVG_NKINDS] = {"all-reduce", "reduce-scatter", "all-gather",
                                                   "broadcast",  "all-to-all",     "send-recv"};

const char *svg_coll_name(svg_coll_t k) { return k < SVG_NKINDS ? kind_names[k] : "?"; }

int svg_coll_parse(const char *s, svg_coll_t *k, perr_t *err) {
    for (int i = 0; i < SVG_NKINDS; i++)
        if (s && !strcmp(s, kind_names[i])) {
            *k = (svg_coll_t)i;
            return 0;
        }
    return perr_set(err, "KIND: expected all-reduce, reduce-scatter, all-gather, broadcast, all-to-all or "
                         "send-recv, got '%s'", s ? s : "(nothing)");
}

int svg_coll_steps(svg_coll_t k, coll_algo_t algo, int n) {
    if (n < 2) return 0;
    const int ring = algo == COLL_ALGO_RING;
    switch (k) {
    case SVG_ALL_REDUCE: return ring ? 2 * (n - 1) : 2;
    case SVG_REDUCE_SCATTER:
    case SVG_ALL_GATHER:
    case SVG_BROADCAST: return ring ? n - 1 : 1;
    default: return 1; /* all-to-all, send-recv */
    }
}

/* One cell: which ranks' data it holds (a sum of them for the reducing
 * kinds), where it is bound (all-to-all), or nothing yet. */
typedef struct {
    uint64_t from; /* 0: empty */
    int to;
} cell_t;

typedef struct { int src, src_slot, dst, dst_slot; } move_t;

typedef struct {
    svg_coll_t k;
    int n, slots, sums; /* ranks, cells a rank, whether moves add (else copy) */
    cell_t cell[SVG_MAX_RANKS][SVG_MAX_RANKS], before[SVG_MAX_RANKS][SVG_MAX_RANKS];
    move_t moves[SVG_MAX_RANKS * SVG_MAX_RANKS];
    int nmoves;
} state_t;

static int mod(int a, int n) { return ((a % n) + n) % n; }

static void move(state_t *S, int src, int src_slot, int dst, int dst_slot) {
    S->moves[S->nmoves++] = (move_t){src, src_slot, dst, dst_slot};
}

/* Direct: rank i owns chunk i; it reads it from every other rank
 * (in = 1) or writes it into every other rank (in = 0). */
static void chunk_owners(state_t *S, int in) {
    for (int i = 0; i < S->n; i++)
        for (int j = 0; j < S->n; j++)
            if (j != i) move(S, in ? j : i, i, in ? i : j, i);
}

/* The moves of step `step` (0-based) into S->moves, and its caption. */
static void step_moves(state_t *S, coll_algo_t algo, int step, char *cap, size_t ncap) {
    const int n = S->n, ring = algo == COLL_ALGO_RING;
    S->nmoves = 0;
    S->sums = (S->k == SVG_ALL_REDUCE || S->k == SVG_REDUCE_SCATTER) && (!ring || step < n - 1) &&
              !(S->k == SVG_ALL_REDUCE && !ring && step == 1);
    switch (S->k) {
    case SVG_ALL_REDUCE:
    case SVG_REDUCE_SCATTER:
        if (ring && step < n - 1) {
            for (int r = 0; r < n; r++) move(S, r, mod(r - step - 1, n), mod(r + 1, n), mod(r - step - 1, n));
            snprintf(cap, ncap, "step %d: reduce-scatter %d of %d, rank r hands its partial sum of chunk "
                                "(r-%d) mod %d to rank r+1, which adds its own", step + 1, step + 1, n - 1,
                     step + 1, n);
        } else if (ring) {
            const int t = step - (n - 1);
            for (int r = 0; r < n; r++) move(S, r, mod(r - t, n), mod(r + 1, n), mod(r - t, n));
            snprintf(cap, ncap, "step %d: all-gather %d of %d, rank r hands finished chunk (r-%d) mod %d "
                                "to rank r+1", step + 1, t + 1, n - 1, t, n);
        } else if (step == 0) {
            chunk_owners(S, 1);
            snprintf(cap, ncap, "step 1: rank i reads %s i from every rank and sums ((x0 + x1) + x2) + ...",
                     S->k == SVG_ALL_REDUCE ? "chunk" : "block");
        } else {
            chunk_owners(S, 0);
            snprintf(cap, ncap, "step 2: rank i writes the sum of chunk i into every rank");
        }
        break;
    case SVG_ALL_GATHER:
        if (ring) {
            for (int r = 0; r < n; r++) move(S, r, mod(r - step, n), mod(r + 1, n), mod(r - step, n));
            snprintf(cap, ncap, "step %d of %d: rank r hands block (r-%d) mod %d to rank r+1", step + 1, n - 1,
                     step, n);
        } else {
            for (int i = 0; i < n; i++)
                for (int j = 0; j < n; j++)
                    if (j != i) move(S, j, j, i, j);
            snprintf(cap, ncap, "step 1: rank i reads block j from rank j");
        }
        break;
    case SVG_BROADCAST:
        if (ring) {
            move(S, step, 0, step + 1, 0);
            snprintf(cap, ncap, "step %d of %d: rank %d hands the buffer on to rank %d", step + 1, n - 1, step,
                     step + 1);
        } else {
            for (int j = 1; j < n; j++) move(S, 0, 0, j, 0);
            snprintf(cap, ncap, "step 1: every rank reads the root's buffer");
        }
        break;
    case SVG_ALL_TO_ALL:
        for (int i = 0; i < n; i++)
            for (int j = 0; j < n; j++)
                if (j != i) move(S, i, j, j, i);
        snprintf(cap, ncap, "step 1: rank i's block j goes to rank j's block i");
        break;
    default: /* send-recv */
        for (int r = 0; r + 1 < n; r++) move(S, r, 0, r + 1, 1);
        snprintf(cap, ncap, "step 1: rank r sends its buffer to rank r+1");
        break;
    }
}

/* Every move reads the state before the step (an all-to-all swaps). */
static void apply(state_t *S) {
    memcpy(S->before, S->cell, sizeof S->before);
    for (int i = 0; i < S->nmoves; i++) {
        const move_t *m = &S->moves[i];
        const cell_t *src = &S->before[m->src][m->src_slot];
        cell_t *dst = &S->cell[m->dst][m->dst_slot];
        if (S->sums) dst->from |= src->from;
        else *dst = *src;
    }
}

static void init_state(state_t *S, svg_coll_t k, int n) {
    memset(S, 0, sizeof *S);
    S->k = k;
    S->n = n;
    S->slots = k == SVG_BROADCAST ? 1 : k == SVG_SEND_RECV ? 2 : n;
    for (int r = 0; r < n; r++)
        for (int s = 0; s < S->slots; s++) {
            const int holds = k == SVG_ALL_GATHER ? s == r : k == SVG_BROADCAST ? r == 0 : k == SVG_SEND_RECV ? s == 0 : 1;
            S->cell[r][s] = (cell_t){holds ? (uint64_t)1 << r : 0, s};
        }
}

static int popcount(uint64_t x) {
    int c = 0;
    for (; x; x &= x - 1) c++;
    return c;
}

static int lowest(uint64_t x) {
    int i = 0;
    while (!(x >> i & 1)) i++;
    return i;
}

/* "x2", "x1+x2", "Σ3..1" (ring order, wrapping), "Σ all". */
static void label(const state_t *S, const cell_t *c, char *buf, size_t cap) {
    const int n = S->n, k = popcount(c->from);
    if (S->k == SVG_ALL_TO_ALL) snprintf(buf, cap, "%d\u2192%d", lowest(c->from), c->to);
    else if (k == 1) snprintf(buf, cap, "x%d", lowest(c->from));
    else if (k == n) snprintf(buf, cap, "\u03a3 all");
    else {
        int a = 0; /* the run's first rank: in the set, its predecessor not */
        while (!(c->from >> a & 1) || (c->from >> mod(a - 1, n) & 1)) a++;
        if (k == 2) snprintf(buf, cap, "x%d+x%d", a, mod(a + 1, n));
        else snprintf(buf, cap, "\u03a3%d..%d", a, mod(a + k - 1, n));
    }
}

enum { CW = 50, PITCH = 72, CH = 18, LEFT = 20, HEAD = 30, ARROW_ROOM = 14 };

static double col_x(int r) { return LEFT + r * PITCH; }

static int panel_h(const state_t *S) { return HEAD + S->slots * CH + ARROW_ROOM; }

static void draw_cells(FILE *f, const state_t *S, int y0) {
    char buf[32];
    for (int r = 0; r < S->n; r++)
        for (int s = 0; s < S->slots; s++) {
            const cell_t *c = &S->cell[r][s];
            const double x = col_x(r), y = y0 + HEAD + s * CH;
            if (!c->from) {
                fprintf(f, "<rect class=\"cell empty\" x=\"%.1f\" y=\"%.1f\" width=\"%d\" height=\"%d\" "
                           "fill=\"none\" stroke=\"#bbb\" stroke-dasharray=\"3,2\"/>\n", x, y, CW, CH);
                continue;
            }
            const int sums = S->k == SVG_ALL_REDUCE || S->k == SVG_REDUCE_SCATTER;
            const int colour = sums ? s : lowest(c->from);
            /* a sum's opacity grows with its terms: complete is solid */
            const int pct = sums ? 25 + 75 * popcount(c->from) / S->n : 80;
            fprintf(f, "<rect class=\"cell\" x=\"%g\" y=\"%g\" width=\"%d\" height=\"%d\" fill=\"%s\" "
                       "fill-opacity=\"%d%%\"/>\n", x, y, CW, CH, svg_colour(colour), pct);
            label(S, c, buf, sizeof buf);
            svg_text(f, x + CW / 2.0, y + CH - 5, "class=\"l\"", buf);
        }
}

/* Neighbours on one row: a straight arrow; any other move bends above. */
static void draw_moves(FILE *f, const state_t *S, int y0) {
    for (int i = 0; i < S->nmoves; i++) {
        const move_t *m = &S->moves[i];
        const int right = m->dst > m->src, d = right ? m->dst - m->src : m->src - m->dst;
        const double x1 = col_x(m->src) + (right ? CW : 0), x2 = col_x(m->dst) + (right ? 0 : CW);
        const double y1 = y0 + HEAD + m->src_slot * CH + CH / 2.0, y2 = y0 + HEAD + m->dst_slot * CH + CH / 2.0;
        fprintf(f, "<path class=\"move\" data-from=\"%d\" data-to=\"%d\" ", m->src, m->dst);
        if (d == 1 && y1 == y2) fprintf(f, "d=\"M%.1f,%.1f L%.1f,%.1f\"", x1, y1, x2, y2);
        else {
            const double lift = 6 + 4 * (d < 8 ? d : 8), top = (y1 < y2 ? y1 : y2) - lift;
            fprintf(f, "d=\"M%.1f,%.1f Q%.1f,%.1f %.1f,%.1f\"", x1, y1, (x1 + x2) / 2, top, x2, y2);
        }
        fputs("/>\n", f);
    }
}

int svg_collective(FILE *f, svg_coll_t k, coll_algo_t algo, int n, perr_t *err) {
    if (k >= SVG_NKINDS) return perr_set(err, "unknown collective %d", (int)k);
    if (n < 1 || n > SVG_MAX_RANKS)
        return perr_set(err, "--ranks: expected 1..%d ranks, got %d", SVG_MAX_RANKS, n);
    if (k == SVG_SEND_RECV && n < 2) return perr_set(err, "--ranks: send-recv needs 2 or more ranks, got %d", n);
    state_t *S = malloc(sizeof *S); /* ~200 KB: not on a thread's stack */
    if (!S) return perr_set(err, "out of memory");
    init_state(S, k, n);
    const int steps = svg_coll_steps(k, algo, n), ph = panel_h(S);
    const int same = k == SVG_ALL_TO_ALL || k == SVG_SEND_RECV;
    char title[96], cap[200];
    snprintf(title, sizeof title, "%s of %d ranks, %s algorithm", svg_coll_name(k), n, coll_algo_name(algo));
    const int w = LEFT + n * PITCH + 420, h = 70 + (steps + 1) * (ph + 10);
    svg_begin(f, w, h, title);
    /* what every cell, label and arrow shares, once */
    fputs("<style>.cell{stroke:white} .l{text-anchor:middle;font-size:10px} "
          ".move{fill:none;stroke:#333;stroke-opacity:0.7;marker-end:url(#arrow)}</style>\n", f);
    svg_text(f, 10, 20, "font-size=\"14\" font-weight=\"bold\"", title);
    const char *note =
        k == SVG_ALL_REDUCE   ? "chunk c = coll_chunk(c): elements [c L, (c+1) L), L = ceil(count/n) to a 64-byte line"
        : k == SVG_REDUCE_SCATTER ? "block c = the c-th recv_count elements; rank c keeps block c's sum"
        : k == SVG_BROADCAST  ? "root: rank 0; the ring moves the buffer in pipelined pieces"
        : same                ? "direct and ring move data the same way"
                              : "block j = rank j's send buffer";
    svg_text(f, 10, 36, "fill=\"#555\"", note);
    for (int r = 0; r < n; r++) {
        snprintf(cap, sizeof cap, "rank %d", r);
        svg_text(f, col_x(r) + CW / 2.0, 56, "class=\"rank\" text-anchor=\"middle\" font-weight=\"bold\"", cap);
    }
    int y0 = 60;
    fprintf(f, "<g class=\"state\">\n");
    svg_text(f, 10, y0 + 18, "font-weight=\"bold\"", n == 1 ? "before (one rank: nothing moves)" : "before");
    draw_cells(f, S, y0);
    fputs("</g>\n", f);
    for (int s = 0; s < steps; s++) {
        y0 += ph + 10;
        step_moves(S, algo, s, cap, sizeof cap);
        apply(S);
        fprintf(f, "<g class=\"step\" data-step=\"%d\">\n", s + 1);
        fprintf(f, "<line x1=\"10\" y1=\"%d\" x2=\"%d\" y2=\"%d\" stroke=\"#ddd\"/>\n", y0 - 5, w - 10, y0 - 5);
        svg_text(f, 10, y0 + 12, "", cap);
        draw_cells(f, S, y0);
        draw_moves(f, S, y0);
        fputs("</g>\n", f);
    }
    svg_end(f);
    free(S);
    return 0;
}
