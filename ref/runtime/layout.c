/* layout.c - rank layouts from Megatron-style order strings (runtime.h).
 *
 * rank = c[0] + s[0] * (c[1] + s[1] * (c[2] + ...)) for the dimensions in
 * the order string, so the first dimension varies fastest: with order
 * "tp-cp-ep-dp-pp" and tp=2, ranks 0 and 1 share everything but tp.
 * That number is the canonical position; with a rank list
 * (layout_init_mapped) the world rank at position c is rank_at[c], and
 * every function below goes through rank_at / pos_of.
 */
#include "parity/runtime.h"

#include <ctype.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>

/* Dimensions the order string may name; extend here for new modes. */
static const char *const known_dims[] = {"tp", "tp2", "tp3", "cp", "ep", "dp", "pp"};
#define NKNOWN ((int)(sizeof known_dims / sizeof known_dims[0]))
#define KNOWN_LIST "tp, tp2, tp3, cp, ep, dp, pp"

static int is_known(const char *name, size_t len) {
    for (int i = 0; i < NKNOWN; i++)
        if (strlen(known_dims[i]) == len && strncmp(known_dims[i], name, len) == 0) return 1;
    return 0;
}

/* Index of a dimension in L, -1 if the order does not name it. */
static int find_dim(const rank_layout_t *L, const char *name, size_t len) {
    for (int i = 0; i < L->ndims; i++)
        if (strlen(L->names[i]) == len && strncmp(L->names[i], name, len) == 0) return i;
    return -1;
}

/* Trims spaces around [*s, *s + *len). */
static void trim(const char **s, size_t *len) {
    while (*len && isspace((unsigned char)**s)) (*s)++, (*len)--;
    while (*len && isspace((unsigned char)(*s)[*len - 1])) (*len)--;
}

int layout_init(rank_layout_t *L, const char *order, const char *sizes, perr_t *e) {
    memset(L, 0, sizeof *L);
    if (!order || !*order) return perr_set(e, "layout order: empty (expected e.g. \"tp-cp-ep-dp-pp\")");
    for (const char *p = order;;) {
        const char *end = strchr(p, '-');
        size_t len = end ? (size_t)(end - p) : strlen(p);
        const char *tok = p;
        trim(&tok, &len);
        if (!is_known(tok, len))
            return perr_set(e, "layout order '%s': unknown dimension '%.*s' (known: %s)", order,
                            (int)len, tok, KNOWN_LIST);
        if (find_dim(L, tok, len) >= 0)
            return perr_set(e, "layout order '%s': dimension '%.*s' appears twice", order, (int)len, tok);
        memcpy(L->names[L->ndims], tok, len);
        L->sizes[L->ndims++] = 1;
        if (!end) break;
        p = end + 1;
    }
    if (sizes) {
        int given[LAYOUT_MAX_DIMS] = {0};
        for (const char *p = sizes; *p;) {
            const char *end = strchr(p, ',');
            size_t len = end ? (size_t)(end - p) : strlen(p);
            const char *item = p;
            trim(&item, &len);
            if (len == 0 && !end) break; /* trailing comma or blank string */
            const char *eq = memchr(item, '=', len);
            if (!eq)
                return perr_set(e, "layout sizes '%s': item '%.*s' is not name=N", sizes, (int)len, item);
            const char *name = item;
            size_t nlen = (size_t)(eq - item);
            trim(&name, &nlen);
            if (!is_known(name, nlen))
                return perr_set(e, "layout sizes '%s': unknown dimension '%.*s' (known: %s)", sizes,
                                (int)nlen, name, KNOWN_LIST);
            int d = find_dim(L, name, nlen);
            const char *val = eq + 1;
            size_t vlen = (size_t)(item + len - val);
            trim(&val, &vlen);
            if (d < 0) { /* left out of the order: size 1, which it may say */
                if (vlen != 1 || *val != '1')
                    return perr_set(e, "layout sizes '%s': dimension '%.*s' is not in the order '%s'",
                                    sizes, (int)nlen, name, order);
                if (!end) break;
                p = end + 1;
                continue;
            }
            if (given[d])
                return perr_set(e, "layout sizes '%s': dimension '%s' is given twice", sizes, L->names[d]);
            char num[32];
            if (vlen == 0 || vlen >= sizeof num)
                return perr_set(e, "layout sizes '%s': %s needs a size >= 1", sizes, L->names[d]);
            memcpy(num, val, vlen);
            num[vlen] = 0;
            char *stop;
            errno = 0;
            long v = strtol(num, &stop, 10);
            if (*stop || errno || v < 1 || v > PARITY_MAX_DEVICES)
                return perr_set(e, "layout sizes '%s': %s=%s, expected an integer from 1 to %d", sizes,
                                L->names[d], num, PARITY_MAX_DEVICES);
            L->sizes[d] = (int)v;
            given[d] = 1;
            if (!end) break;
            p = end + 1;
        }
    }
    long world = 1;
    for (int i = 0; i < L->ndims; i++) {
        world *= L->sizes[i];
        if (world > PARITY_MAX_DEVICES)
            return perr_set(e, "layout sizes '%s': world would exceed %d devices", sizes,
                            PARITY_MAX_DEVICES);
    }
    L->world = (int)world;
    return 0;
}

_Static_assert(PARITY_MAX_DEVICES <= 32767, "rank lists are unsigned short, entries short");

int layout_check_ranks(const unsigned short *ranks, int n, int world, perr_t *e) {
    if (n != world)
        return perr_set(e, "%d rank%s for a world of %d devices (expected a permutation of 0..%d)", n,
                        n == 1 ? "" : "s", world, world - 1);
    short at[PARITY_MAX_DEVICES]; /* the entry naming each rank, -1 for none yet */
    for (int r = 0; r < n; r++) at[r] = -1;
    for (int c = 0; c < n; c++) {
        if (ranks[c] >= n)
            return perr_set(e, "entry %d is rank %d, beyond the %d devices (expected a permutation "
                               "of 0..%d)", c, ranks[c], world, world - 1);
        if (at[ranks[c]] >= 0)
            return perr_set(e, "entries %d and %d both name rank %d (expected a permutation of "
                               "0..%d)", at[ranks[c]], c, ranks[c], world - 1);
        at[ranks[c]] = (short)c;
    }
    return 0;
}

int layout_init_mapped(rank_layout_t *L, const char *order, const char *sizes,
                       const unsigned short *ranks, int n, perr_t *e) {
    if (layout_init(L, order, sizes, e)) return -1;
    perr_t why;
    if (!n) return 0;
    if (!ranks || layout_check_ranks(ranks, n, L->world, &why))
        return perr_set(e, "rank list: %s", ranks ? why.msg : "missing");
    for (int c = 0; c < n; c++) {
        L->rank_at[c] = ranks[c];
        L->pos_of[ranks[c]] = (unsigned short)c;
    }
    L->mapped = 1;
    return 0;
}

/* Parses "dp-cp" into a mask over L's dimensions; -1 for an unknown name. */
static int dims_mask(const rank_layout_t *L, const char *dims, int *mask) {
    *mask = 0;
    if (!dims || !*dims) return -1;
    for (const char *p = dims;;) {
        const char *end = strchr(p, '-');
        size_t len = end ? (size_t)(end - p) : strlen(p);
        const char *tok = p;
        trim(&tok, &len);
        if (!is_known(tok, len)) return -1;
        int d = find_dim(L, tok, len);
        if (d >= 0) *mask |= 1 << d; /* absent dims have size 1: nothing to add */
        if (!end) return 0;
        p = end + 1;
    }
}

static void coords_of(const rank_layout_t *L, int rank, int *c) {
    if (L->mapped) rank = L->pos_of[rank];
    for (int i = 0; i < L->ndims; i++) {
        c[i] = rank % L->sizes[i];
        rank /= L->sizes[i];
    }
}

int layout_rank_of(const rank_layout_t *L, const int *coords) {
    int r = 0;
    for (int i = L->ndims - 1; i >= 0; i--) {
        if (coords[i] < 0 || coords[i] >= L->sizes[i]) return -1;
        r = r * L->sizes[i] + coords[i];
    }
    return L->mapped ? L->rank_at[r] : r;
}

int layout_coord(const rank_layout_t *L, int rank, const char *dim) {
    if (rank < 0 || rank >= L->world || !dim || !is_known(dim, strlen(dim))) return -1;
    int d = find_dim(L, dim, strlen(dim));
    if (d < 0) return 0;
    int c[LAYOUT_MAX_DIMS];
    coords_of(L, rank, c);
    return c[d];
}

int layout_size(const rank_layout_t *L, const char *dim) {
    if (!dim || !is_known(dim, strlen(dim))) return -1;
    int d = find_dim(L, dim, strlen(dim));
    return d < 0 ? 1 : L->sizes[d];
}

/* Combined index of coords over the dimensions in (or, with invert, not
 * in) mask, the layout's first dimension varying fastest. */
static int combined_index(const rank_layout_t *L, const int *c, int mask, int invert) {
    int idx = 0;
    for (int i = L->ndims - 1; i >= 0; i--) {
        int in = (mask >> i) & 1;
        if (in != invert) idx = idx * L->sizes[i] + c[i];
    }
    return idx;
}

int layout_group_ranks(const rank_layout_t *L, int rank, const char *dims, int *ranks_out) {
    int mask;
    if (rank < 0 || rank >= L->world || dims_mask(L, dims, &mask) != 0) return -1;
    int c[LAYOUT_MAX_DIMS];
    coords_of(L, rank, c);
    int n = 1;
    for (int i = 0; i < L->ndims; i++)
        if (mask >> i & 1) n *= L->sizes[i];
    for (int k = 0; k < n; k++) {
        int rest = k; /* decompose k over the masked dims, first fastest */
        for (int i = 0; i < L->ndims; i++) {
            if (!(mask >> i & 1)) continue;
            c[i] = rest % L->sizes[i];
            rest /= L->sizes[i];
        }
        ranks_out[k] = layout_rank_of(L, c);
    }
    return n;
}

int layout_num_groups(const rank_layout_t *L, const char *dims) {
    int mask;
    if (dims_mask(L, dims, &mask) != 0) return -1;
    int n = 1;
    for (int i = 0; i < L->ndims; i++)
        if (!(mask >> i & 1)) n *= L->sizes[i];
    return n;
}

int layout_group_id(const rank_layout_t *L, int rank, const char *dims) {
    int mask;
    if (rank < 0 || rank >= L->world || dims_mask(L, dims, &mask) != 0) return -1;
    int c[LAYOUT_MAX_DIMS];
    coords_of(L, rank, c);
    return combined_index(L, c, mask, 1);
}

void layout_print_map(const rank_layout_t *L, FILE *f) {
    fprintf(f, "layout:");
    for (int i = 0; i < L->ndims; i++) fprintf(f, "%s%s=%d", i ? " x " : " ", L->names[i], L->sizes[i]);
    fprintf(f, " = %d devices (first dimension varies fastest%s)\n", L->world,
            L->mapped ? "; world ranks from a rank list" : "");
    int *ranks = malloc((size_t)L->world * sizeof *ranks);
    if (!ranks) return;
    for (int i = 0; i < L->ndims; i++) {
        fprintf(f, "  %s groups:", L->names[i]);
        int ng = layout_num_groups(L, L->names[i]);
        for (int g = 0; g < ng; g++) {
            int r = 0; /* the lowest rank of group g */
            while (layout_group_id(L, r, L->names[i]) != g) r++;
            int n = layout_group_ranks(L, r, L->names[i], ranks);
            fputs(" [", f);
            for (int k = 0; k < n; k++) fprintf(f, "%s%d", k ? "," : "", ranks[k]);
            fputc(']', f);
        }
        fputc('\n', f);
    }
    free(ranks);
    fprintf(f, "  %6s", "rank");
    for (int i = 0; i < L->ndims; i++) fprintf(f, " %4s", L->names[i]);
    fputc('\n', f);
    for (int r = 0; r < L->world; r++) {
        int c[LAYOUT_MAX_DIMS];
        coords_of(L, r, c);
        fprintf(f, "  %6d", r);
        for (int i = 0; i < L->ndims; i++) fprintf(f, " %4d", c[i]);
        fputc('\n', f);
    }
}
