/* float_order.c - the calling thread's float order (float_order.h) and
 * the fp32 sums in it (float_order_sum.h).
 *
 * The state is thread-local and zero by default, which is EXACT: a thread
 * that never sets an order (a device thread, a pool helper, a second
 * golden run beside the perturbed one) sums exactly whatever another
 * thread does. A contraction spread over pool helpers takes its caller's
 * order with it (contract.c), so the helpers need none of their own. */
#include "float_order_sum.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bits.h"
#include "parity/error.h"
#include "parity/numparse.h"

static _Thread_local float_order_t current; /* zero: FLOAT_ORDER_EXACT, no bf16 */

static const char *const kind_names[FLOAT_ORDER_COUNT] = {
    "exact", "sequential", "reversed", "pairwise", "grouped", "random"};

float_order_t float_order_set(const float_order_t *o) {
    const float_order_t before = current;
    if (!o) {
        memset(&current, 0, sizeof current);
        return before;
    }
    if ((int)o->kind < 0 || o->kind >= FLOAT_ORDER_COUNT)
        parity_fatal("float_order_set: kind %d is not a float_order_kind_t (0 to %d)", (int)o->kind,
                     FLOAT_ORDER_COUNT - 1);
    if (o->kind == FLOAT_ORDER_GROUPED && o->groups < 2)
        parity_fatal("float_order_set: grouped needs groups >= 2, got %d", o->groups);
    current = *o;
    current.bf16 = o->bf16 != 0;
    if (current.kind != FLOAT_ORDER_GROUPED) current.groups = 0;
    if (current.kind != FLOAT_ORDER_RANDOM) current.seed = 0;
    return before;
}

const float_order_t *float_order_get(void) { return &current; }

int float_order_is_exact(void) { return current.kind == FLOAT_ORDER_EXACT && !current.bf16; }

const float_order_t *forder_sums(void) {
    return current.kind == FLOAT_ORDER_EXACT ? NULL : &current;
}

const char *float_order_name(const float_order_t *o, char *buf, size_t cap) {
    static const float_order_t exact = {0};
    if (!o) o = &exact;
    const char *kind = (int)o->kind >= 0 && o->kind < FLOAT_ORDER_COUNT ? kind_names[o->kind] : "?";
    const char *bf = o->bf16 ? "+bf16" : "";
    if (o->kind == FLOAT_ORDER_GROUPED)
        snprintf(buf, cap, "%s(%d)%s", kind, o->groups, bf);
    else if (o->kind == FLOAT_ORDER_RANDOM)
        snprintf(buf, cap, "%s(%llu)%s", kind, (unsigned long long)o->seed, bf);
    else
        snprintf(buf, cap, "%s%s", kind, bf);
    return buf;
}

int float_order_parse(const char *text, float_order_t *o, perr_t *err) {
    memset(o, 0, sizeof *o);
    char s[64];
    if (!text || snprintf(s, sizeof s, "%s", text) >= (int)sizeof s)
        return perr_set(err, "float order '%s': expected exact, sequential, reversed, pairwise, "
                             "grouped(N) or random(SEED), optionally +bf16",
                        text ? text : "(null)");
    char *plus = strchr(s, '+');
    if (plus) {
        if (strcmp(plus, "+bf16"))
            return perr_set(err, "float order '%s': the only suffix is +bf16, got '%s'", text, plus);
        o->bf16 = 1;
        *plus = '\0';
    }
    char *paren = strchr(s, '('), *arg = NULL;
    if (paren) {
        const size_t len = strlen(paren);
        if (len < 3 || paren[len - 1] != ')')
            return perr_set(err, "float order '%s': expected NAME(NUMBER)", text);
        paren[len - 1] = '\0';
        arg = paren + 1;
        *paren = '\0';
    }
    int kind = -1;
    for (int k = 0; k < FLOAT_ORDER_COUNT; k++)
        if (!strcmp(s, kind_names[k])) kind = k;
    if (kind < 0)
        return perr_set(err, "float order '%s': unknown kind '%s' (exact, sequential, reversed, "
                             "pairwise, grouped(N), random(SEED))", text, s);
    o->kind = (float_order_kind_t)kind;
    const int wants = kind == FLOAT_ORDER_GROUPED || kind == FLOAT_ORDER_RANDOM;
    if (wants != (arg != NULL))
        return perr_set(err, "float order '%s': %s %s", text, s,
                        wants ? "needs its number in parentheses" : "takes no number");
    long long v;
    if (kind == FLOAT_ORDER_GROUPED) {
        if (num_parse_int("float order grouped(N)", arg, 2, 1 << 30, &v, err)) return -1;
        o->groups = (int)v;
    } else if (kind == FLOAT_ORDER_RANDOM) {
        if (num_parse_int("float order random(SEED)", arg, 0, INT64_MAX, &v, err)) return -1;
        o->seed = (uint64_t)v;
    }
    return 0;
}

/* ---- the sums ------------------------------------------------------------- */

static uint64_t splitmix(uint64_t x) {
    x += 0x9e3779b97f4a7c15ULL;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
    return x ^ (x >> 31);
}

uint64_t forder_key(const float_order_t *o, uint64_t a, uint64_t b) {
    return splitmix(o->seed ^ splitmix(a ^ splitmix(b)));
}

/* The tree of a chunked sum: chunk c is terms [bound(c), bound(c + 1)). */
typedef struct {
    size_t n, chunks;
    size_t cut[FORDER_MAX_CHUNKS + 1]; /* RANDOM's bounds */
    int grouped;
} chunking_t;

static size_t bound(const chunking_t *ch, size_t c) {
    return ch->grouped ? (size_t)((uint64_t)c * ch->n / ch->chunks) : ch->cut[c];
}

static int cmp_size(const void *a, const void *b) {
    const size_t x = *(const size_t *)a, y = *(const size_t *)b;
    return x < y ? -1 : x > y;
}

/* n >= 1 terms, a chunked kind. GROUPED: min(groups, n) chunks of
 * near-equal length (none empty). RANDOM: a count drawn from 1 ..
 * min(n, FORDER_MAX_CHUNKS), then that many minus one cuts drawn from
 * 1 .. n-1 (a repeated cut leaves one chunk fewer). */
static void chunking(const float_order_t *o, uint64_t key, size_t n, chunking_t *ch) {
    ch->n = n;
    ch->grouped = o->kind == FLOAT_ORDER_GROUPED;
    if (ch->grouped) {
        ch->chunks = (size_t)o->groups < n ? (size_t)o->groups : n;
        return;
    }
    ch->chunks = 1;
    ch->cut[0] = 0;
    if (o->kind == FLOAT_ORDER_RANDOM && n > 1) {
        uint64_t r = splitmix(key);
        const size_t most = n < FORDER_MAX_CHUNKS ? n : FORDER_MAX_CHUNKS;
        const size_t want = 1 + (size_t)(r % most);
        size_t k = 1;
        for (size_t i = 1; i < want; i++) {
            r = splitmix(r);
            ch->cut[k++] = 1 + (size_t)(r % (n - 1));
        }
        qsort(ch->cut + 1, k - 1, sizeof(size_t), cmp_size);
        size_t u = 1;
        for (size_t i = 1; i < k; i++)
            if (ch->cut[i] != ch->cut[u - 1]) ch->cut[u++] = ch->cut[i];
        ch->chunks = u;
    }
    ch->cut[ch->chunks] = n;
}

static float pairwise(const float *x, size_t n, size_t stride) {
    if (n == 1) return x[0];
    const size_t m = n / 2;
    return pairwise(x, m, stride) + pairwise(x + m * stride, n - m, stride);
}

float forder_sum(const float_order_t *o, const float *x, size_t n, size_t stride) {
    if (n == 0) return 0.0f;
    if (o->kind == FLOAT_ORDER_PAIRWISE) return pairwise(x, n, stride);
    if (o->kind == FLOAT_ORDER_REVERSED) {
        float s = x[(n - 1) * stride];
        for (size_t k = n - 1; k-- > 0;) s = s + x[k * stride];
        return s;
    }
    chunking_t ch;
    uint64_t key = 0;
    if (o->kind == FLOAT_ORDER_RANDOM)
        key = forder_key(o, n, (uint64_t)f32_bits(x[0]) | (uint64_t)f32_bits(x[(n - 1) * stride]) << 32);
    chunking(o, key, n, &ch);
    float total = 0.0f;
    for (size_t c = 0; c < ch.chunks; c++) {
        const size_t lo = bound(&ch, c), hi = bound(&ch, c + 1);
        float s = x[lo * stride];
        for (size_t k = lo + 1; k < hi; k++) s = s + x[k * stride];
        total = c == 0 ? s : total + s;
    }
    return total;
}

/* ---- the row form ---------------------------------------------------------- */

static int ceil_log2(int n) {
    int d = 0;
    while ((1L << d) < n) d++;
    return d;
}

int forder_rows_buffers(const float_order_t *o, int nk) {
    return o->kind == FLOAT_ORDER_PAIRWISE ? ceil_log2(nk) + 1 : 3;
}

static void add_row(float *restrict a, const float *restrict b, size_t w) {
    for (size_t e = 0; e < w; e++) a[e] = a[e] + b[e];
}

typedef struct {
    forder_leaf_fn *leaf;
    void *ctx;
    float *bufs;
    size_t w;
} rows_t;

/* Terms [lo, hi) into row d; the second half's sum goes through row d + 1,
 * so at most ceil(log2 nk) + 1 rows are in use. */
static void pairwise_rows(const rows_t *r, int lo, int hi, int d) {
    float *here = r->bufs + (size_t)d * r->w;
    if (hi - lo == 1) {
        r->leaf(r->ctx, lo, here);
        return;
    }
    const int m = lo + (hi - lo) / 2;
    pairwise_rows(r, lo, m, d);
    pairwise_rows(r, m, hi, d + 1);
    add_row(here, here + r->w, r->w);
}

float *forder_sum_rows(const float_order_t *o, uint64_t key, int nk, size_t w,
                       forder_leaf_fn *leaf, void *ctx, float *bufs) {
    const rows_t r = {leaf, ctx, bufs, w};
    float *total = bufs, *chunk = bufs + w, *term = bufs + 2 * w;
    if (nk <= 0) { /* an empty sum is +0 (and the halving below would never end) */
        for (size_t e = 0; e < w; e++) total[e] = 0.0f;
        return total;
    }
    if (o->kind == FLOAT_ORDER_PAIRWISE) {
        pairwise_rows(&r, 0, nk, 0);
        return total;
    }
    if (o->kind == FLOAT_ORDER_REVERSED) {
        leaf(ctx, nk - 1, total);
        for (int k = nk - 2; k >= 0; k--) {
            leaf(ctx, k, term);
            add_row(total, term, w);
        }
        return total;
    }
    chunking_t ch;
    chunking(o, key, (size_t)nk, &ch);
    for (size_t c = 0; c < ch.chunks; c++) {
        const int lo = (int)bound(&ch, c), hi = (int)bound(&ch, c + 1);
        float *s = c == 0 ? total : chunk;
        leaf(ctx, lo, s);
        for (int k = lo + 1; k < hi; k++) {
            leaf(ctx, k, term);
            add_row(s, term, w);
        }
        if (c > 0) add_row(total, chunk, w);
    }
    return total;
}
