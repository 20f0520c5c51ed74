/* diff.c - `parity diff A.safetensors B.safetensors`: compare two tensor
 * dumps tensor by tensor, bit for bit.
 *
 * parity's promise is equal bits, so "bit-exact" is the verdict that
 * matters; the other columns say how far off a tensor is when it is not:
 *   max_abs  max |a - b|
 *   max_rel  max |a - b| / max(|a|, |b|) (0 when both are 0; symmetric,
 *            so it does not matter which file is the reference)
 *   max_ulp  max distance in units in the last place: bit patterns mapped
 *            to ordered integers (sign-magnitude -> signed), so adjacent
 *            floats are 1 apart across zero and +0 / -0 are 0 apart
 *            (though not bit-exact). Floats only.
 * Elements where either side is NaN (with different bits) are counted
 * as differing but kept out of the three maxima. A NaN with the same
 * bits on both sides is equal.
 *
 * Exit status: 0 iff every tensor is present in both files and
 * bit-exact; 1 if anything differs or is missing; 2 on bad input.
 */
#include <limits.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "commands.h"
#include "parity/numparse.h"
#include "parity/safetensors.h"
#include "parity/tensor_diff.h"

typedef enum { ROW_EXACT, ROW_DIFFER, ROW_DTYPE, ROW_SHAPE, ROW_ONLY_A, ROW_ONLY_B } row_status_t;

typedef struct {
    const st_tensor_t *a, *b; /* either may be NULL (missing) */
    row_status_t status;
    tensor_diff_t d;
    char *name; /* the tensor's name escaped for printing (st_escape) */
} row_t;

static void usage(FILE *f) {
    fputs("usage: parity diff A.safetensors B.safetensors [--quiet] [--max-rows N]\n"
          "  Compares every tensor (union of names) bit for bit and reports, per tensor,\n"
          "  bit-exact or not, max abs / relative difference, max ULP distance and the\n"
          "  first differing element with both values.\n"
          "  --quiet       print only the summary line\n"
          "  --max-rows N  print at most N tensor rows (differing and missing ones first)\n"
          "exit status: 0 all tensors bit-exact and present in both, 1 otherwise, 2 bad input\n",
          f);
}

/* ---- printing ---------------------------------------------------------- */

static void format_shape(const st_tensor_t *t, char *buf, size_t cap) {
    size_t o = (size_t)snprintf(buf, cap, "[");
    for (int d = 0; d < t->ndim && o < cap; d++)
        o += (size_t)snprintf(buf + o, cap - o, "%s%lld", d ? "," : "", (long long)t->shape[d]);
    if (o < cap) snprintf(buf + o, cap - o, "]");
}

enum { CELL = 400 };

static const char *row_name(const row_t *r) { return r->name; }

/* Anything from a file or the command line is printed escaped, so a name
 * holding terminal escapes or newlines cannot hide or forge report lines. */
static char *escaped(const char *s) {
    size_t cap = ST_ESCAPE_CAP(strlen(s));
    char *e = malloc(cap);
    if (!e) parity_fatal("out of memory");
    return st_escape(s, e, cap);
}

/* The dtype, shape and status cells of a row ("F32|F64" when they differ). */
static void row_cells(const row_t *r, char dtype[CELL], char shape[CELL], char status[CELL]) {
    const size_t cap = CELL;
    const st_tensor_t *t = r->a ? r->a : r->b;
    char sa[CELL / 2 - 1], sb[CELL / 2 - 1];
    format_shape(t, sa, sizeof sa);
    if (r->status == ROW_DTYPE) snprintf(dtype, cap, "%s|%s", st_dtype_name(r->a->dtype), st_dtype_name(r->b->dtype));
    else snprintf(dtype, cap, "%s", st_dtype_name(t->dtype));
    if (r->status == ROW_SHAPE || r->status == ROW_DTYPE) {
        format_shape(r->b, sb, sizeof sb);
        if (strcmp(sa, sb)) snprintf(shape, cap, "%s|%s", sa, sb);
        else snprintf(shape, cap, "%s", sa);
    } else {
        snprintf(shape, cap, "%s", sa);
    }
    static const char *names[] = {"bit-exact", "differ", "dtype differs", "shape differs", "only in A", "only in B"};
    snprintf(status, cap, "%s", names[r->status]);
}

static void print_row(const row_t *r, int wname, int wdtype, int wshape) {
    char dtype[CELL], shape[CELL], status[CELL];
    row_cells(r, dtype, shape, status);
    printf("%-*s  %-*s  %-*s  ", wname, row_name(r), wdtype, dtype, wshape, shape);
    if (r->status != ROW_EXACT && r->status != ROW_DIFFER) {
        puts(status); /* no numbers to show: missing, or not comparable */
        return;
    }
    char cnt[48], ulp[24];
    snprintf(cnt, sizeof cnt, "%llu/%llu", (unsigned long long)r->d.ndiff, (unsigned long long)r->d.numel);
    if (st_dtype_is_float(r->a->dtype)) snprintf(ulp, sizeof ulp, "%llu", (unsigned long long)r->d.max_ulp);
    else snprintf(ulp, sizeof ulp, "-"); /* integers: max_abs already counts units */
    printf("%-13s  %15s  %10.3g  %10.3g  %10s\n", status, cnt, r->d.max_abs, r->d.max_rel, ulp);
    if (r->status == ROW_DIFFER) {
        char coords[400], va[64], vb[64];
        tensor_format_coords(r->a->ndim, r->a->shape, r->d.first, coords, sizeof coords);
        tensor_format_value(r->a->dtype, r->d.first_a, va, sizeof va);
        tensor_format_value(r->a->dtype, r->d.first_b, vb, sizeof vb);
        printf("    first diff at flat index %llu %s: A = %s, B = %s", (unsigned long long)r->d.first, coords, va, vb);
        if (st_dtype_is_float(r->a->dtype) && !r->d.first_nan) printf(", %llu ulp", (unsigned long long)r->d.first_ulp);
        putchar('\n');
        if (r->d.nnan)
            printf("    %llu differing element(s) involve NaN (not in max_abs/max_rel/max_ulp)\n",
                   (unsigned long long)r->d.nnan);
    }
}

static int column_width(const char *s, int w, int cap) {
    int n = (int)strlen(s);
    return n > w ? (n < cap ? n : cap) : w;
}

static void print_table(const row_t *rows, size_t n, long max_rows) {
    /* With a row limit, problem rows get the budget first; the chosen
     * rows still print in document order. */
    char *show = calloc(n ? n : 1, 1);
    if (!show) parity_fatal("out of memory");
    size_t budget = max_rows < 0 ? n : (size_t)max_rows, shown = 0;
    for (int pass = 0; pass < 2; pass++)
        for (size_t i = 0; i < n && shown < budget; i++)
            if (!show[i] && ((rows[i].status != ROW_EXACT) == (pass == 0))) show[i] = 1, shown++;
    int wname = 6, wdtype = 5, wshape = 5;
    for (size_t i = 0; i < n; i++) {
        if (!show[i]) continue;
        char dtype[CELL], shape[CELL], status[CELL];
        row_cells(&rows[i], dtype, shape, status);
        wname = column_width(row_name(&rows[i]), wname, 60);
        wdtype = column_width(dtype, wdtype, 20);
        wshape = column_width(shape, wshape, 40);
    }
    printf("%-*s  %-*s  %-*s  %-13s  %15s  %10s  %10s  %10s\n", wname, "tensor", wdtype, "dtype", wshape, "shape",
           "status", "differing", "max_abs", "max_rel", "max_ulp");
    for (size_t i = 0; i < n; i++)
        if (show[i]) print_row(&rows[i], wname, wdtype, wshape);
    if (shown < n) printf("... %zu more tensor row(s) not shown (--max-rows %ld)\n", n - shown, max_rows);
    free(show);
}

/* ---- the command ------------------------------------------------------- */

static int same_shape(const st_tensor_t *a, const st_tensor_t *b) {
    if (a->ndim != b->ndim) return 0;
    for (int d = 0; d < a->ndim; d++)
        if (a->shape[d] != b->shape[d]) return 0;
    return 1;
}

static int parse_max_rows(const char *s, long *out) {
    long long v = -1;
    perr_t err;
    if (num_parse_int("--max-rows", s, 0, LONG_MAX, &v, &err)) {
        char *e = escaped(s);
        fprintf(stderr, "parity diff: --max-rows: expected a non-negative integer, got '%s'\n", e);
        free(e);
        return -1;
    }
    *out = (long)v;
    return 0;
}

/* The command line: the two files, --quiet and --max-rows (*max_rows
 * stays -1 when not given). -1 to go on, else the exit status. */
static int parse_args(int argc, char **argv, const char *path[2], int *quiet_out,
                      long *max_rows_out) {
    int npath = 0, quiet = 0;
    long max_rows = -1;
    for (int i = 1; i < argc; i++) {
        const char *arg = argv[i];
        if (!strcmp(arg, "-h") || !strcmp(arg, "--help")) {
            usage(stdout);
            return 0;
        } else if (!strcmp(arg, "--quiet") || !strcmp(arg, "-q")) {
            if (quiet) { /* one rule for every command: a flag is given once */
                fprintf(stderr, "parity diff: %s: --quiet (-q) given twice\n", arg);
                return 2;
            }
            quiet = 1;
        } else if (max_rows >= 0 && !strncmp(arg, "--max-rows", 10)) {
            fputs("parity diff: --max-rows given twice\n", stderr);
            return 2;
        } else if (!strcmp(arg, "--max-rows")) {
            if (i + 1 >= argc) {
                fputs("parity diff: --max-rows: missing value\n", stderr);
                return 2;
            }
            if (parse_max_rows(argv[++i], &max_rows)) return 2;
        } else if (!strncmp(arg, "--max-rows=", 11)) {
            if (parse_max_rows(arg + 11, &max_rows)) return 2;
        } else if (arg[0] == '-' && arg[1]) {
            char *e = escaped(arg);
            fprintf(stderr, "parity diff: unknown option '%s'\n", e);
            free(e);
            usage(stderr);
            return 2;
        } else if (npath < 2) {
            path[npath++] = arg;
        } else {
            char *e = escaped(arg);
            fprintf(stderr, "parity diff: expected two files, got a third: '%s'\n", e);
            free(e);
            return 2;
        }
    }
    if (npath != 2) {
        fprintf(stderr, "parity diff: expected two .safetensors files, got %d\n", npath);
        usage(stderr);
        return 2;
    }
    *quiet_out = quiet, *max_rows_out = max_rows;
    return -1;
}

/* The rows: A's tensors in header order, then those only in B, each
 * with its status, counted into *exact, *differ and *missing; returns
 * how many. */
static size_t diff_rows(st_file_t *const f[2], size_t na, size_t nb, row_t *rows, size_t *exact,
                        size_t *differ, size_t *missing) {
    size_t n = 0;
    for (size_t i = 0; i < na + nb; i++) {
        row_t *r = &rows[n];
        if (i < na) {
            r->a = st_tensor(f[0], i);
            r->b = st_find(f[1], r->a->name);
        } else {
            r->b = st_tensor(f[1], i - na);
            if (st_find(f[0], r->b->name)) continue;
        }
        n++;
        r->name = escaped(r->a ? r->a->name : r->b->name);
        if (!r->b) r->status = ROW_ONLY_A;
        else if (!r->a) r->status = ROW_ONLY_B;
        else if (r->a->dtype != r->b->dtype) r->status = ROW_DTYPE;
        else if (!same_shape(r->a, r->b)) r->status = ROW_SHAPE;
        else
            r->status = tensor_diff(r->a->dtype, st_numel(r->a), st_data(f[0], r->a),
                                    st_data(f[1], r->b), &r->d)
                            ? ROW_EXACT
                            : ROW_DIFFER;
        if (r->status == ROW_EXACT) (*exact)++;
        else if (r->status == ROW_ONLY_A || r->status == ROW_ONLY_B) (*missing)++;
        else (*differ)++;
    }
    return n;
}

int cmd_diff(int argc, char **argv) {
    const char *path[2] = {NULL, NULL};
    int quiet;
    long max_rows;
    int rc = parse_args(argc, argv, path, &quiet, &max_rows);
    if (rc >= 0) return rc;

    st_file_t *f[2] = {NULL, NULL};
    for (int k = 0; k < 2; k++) {
        perr_t err;
        f[k] = st_open(path[k], &err);
        if (!f[k]) {
            char *e = escaped(err.msg);
            fprintf(stderr, "parity diff: %s\n", e);
            free(e);
            st_close(f[0]);
            return 2;
        }
    }

    size_t na = st_count(f[0]), nb = st_count(f[1]);
    row_t *rows = calloc(na + nb ? na + nb : 1, sizeof *rows);
    if (!rows) parity_fatal("out of memory");
    size_t exact = 0, differ = 0, missing = 0;
    const size_t n = diff_rows(f, na, nb, rows, &exact, &differ, &missing);

    if (!quiet) {
        char *pa = escaped(path[0]), *pb = escaped(path[1]);
        printf("A: %s (%zu tensors)\nB: %s (%zu tensors)\n\n", pa, na, pb, nb);
        free(pa);
        free(pb);
        print_table(rows, n, max_rows);
        putchar('\n');
    }
    printf("%zu tensors, %zu bit-exact, %zu differ, %zu missing\n", n, exact, differ, missing);
    for (size_t i = 0; i < n; i++) free(rows[i].name);
    free(rows);
    st_close(f[0]);
    st_close(f[1]);
    return exact == n ? 0 : 1;
}
