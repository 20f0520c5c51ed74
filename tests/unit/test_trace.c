/* test_trace.c - the Chrome trace-event writer (trace.h): what it writes,
 * read back with the strict JSON parser, and that a failed write leaves
 * nothing behind and an old file intact. */
#include <dirent.h>
#include <errno.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

#include "../harness.h"
#include "parity/json.h"
#include "parity/trace.h"

static char tmpdir[] = "/tmp/parity_test_trace.XXXXXX";

static char *slurp(const char *path, size_t *len) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    size_t cap = 1 << 16, n = 0;
    char *buf = malloc(cap);
    size_t got;
    while (buf && (got = fread(buf + n, 1, cap - n, f)) > 0)
        if ((n += got) == cap) buf = realloc(buf, cap *= 2);
    fclose(f);
    *len = n;
    return buf;
}

static void spit(const char *path, const char *text) {
    FILE *f = fopen(path, "wb");
    CHECK(f && fputs(text, f) >= 0 && fclose(f) == 0, "cannot write %s", path);
}

/* Writes, reads back and parses; NULL (after a failed CHECK) if any step fails. */
static json_t *write_and_parse(const char *path, trace_buf_t *bufs, int nbufs) {
    perr_t e = {{0}};
    int rc = trace_write(path, bufs, nbufs, &e);
    CHECK(rc == 0, "trace_write: %s", e.msg);
    if (rc) return NULL;
    size_t len = 0;
    char *text = slurp(path, &len);
    CHECK(text != NULL, "cannot read back %s", path);
    if (!text) return NULL;
    json_t *j = json_parse(text, len, &e);
    CHECK(j != NULL, "not JSON: %s\n%.*s", e.msg, (int)len, text);
    free(text);
    return j;
}

/* The one event with this ph and name on track tid; counts the matches. */
static const json_t *find_event(const json_t *events, const char *ph, const char *name, int tid, int *matches) {
    const json_t *hit = NULL;
    *matches = 0;
    for (size_t i = 0; i < json_len(events); i++) {
        const json_t *ev = json_at(events, i);
        const char *p = json_string(json_get(ev, "ph")), *nm = json_string(json_get(ev, "name"));
        if (p && nm && !strcmp(p, ph) && !strcmp(nm, name) && json_number(json_get(ev, "tid")) == tid) {
            hit = ev;
            ++*matches;
        }
    }
    return hit;
}

/* A dot-file left in the directory would be a temporary file not cleaned up. */
static int dotfiles_in(const char *dir) {
    DIR *d = opendir(dir);
    int n = 0;
    for (struct dirent *de; d && (de = readdir(d));)
        if (de->d_name[0] == '.' && strcmp(de->d_name, ".") && strcmp(de->d_name, "..")) n++;
    if (d) closedir(d);
    return n;
}

/* Checks a complete event: pid 0, cat, ts/dur in microseconds, args. */
static void check_span(const json_t *events, const char *name, int tid, const char *cat, double ts, double dur,
                       int mb, int chunk) {
    int m;
    const json_t *ev = find_event(events, "X", name, tid, &m);
    CHECK(m == 1, "span '%s' on tid %d: %d events", name, tid, m);
    if (!ev) return;
    CHECK(json_string(json_get(ev, "cat")) && !strcmp(json_string(json_get(ev, "cat")), cat), "'%s' cat %s", name,
          json_string(json_get(ev, "cat")));
    CHECK(json_type(json_get(ev, "pid")) == JSON_NUMBER && json_number(json_get(ev, "pid")) == 0, "'%s' pid", name);
    CHECK(fabs(json_number(json_get(ev, "ts")) - ts) < 1e-3, "'%s' ts %.6f want %.6f", name,
          json_number(json_get(ev, "ts")), ts);
    CHECK(fabs(json_number(json_get(ev, "dur")) - dur) < 1e-3, "'%s' dur %.6f want %.6f", name,
          json_number(json_get(ev, "dur")), dur);
    const json_t *args = json_get(ev, "args");
    CHECK(json_type(args) == JSON_OBJECT, "'%s' args is %s", name, json_type_name(json_type(args)));
    CHECK(json_len(args) == (size_t)(mb != -1) + (chunk != -1), "'%s' has %zu args", name, json_len(args));
    int64_t v;
    if (mb == -1) CHECK(json_get(args, "mb") == NULL, "'%s' mb -1 written", name);
    else CHECK(json_int64(json_get(args, "mb"), &v) == 0 && v == mb, "'%s' mb", name);
    if (chunk == -1) CHECK(json_get(args, "chunk") == NULL, "'%s' chunk -1 written", name);
    else CHECK(json_int64(json_get(args, "chunk"), &v) == 0 && v == chunk, "'%s' chunk", name);
}

static void test_round_trip(void) {
    trace_buf_t b[2];
    trace_buf_init(&b[0], 100.0);
    trace_buf_init(&b[1], 99.5); /* each buffer's own origin */
    const char *odd = "q\"u\\o\nte\x01";
    int rc = trace_add(&b[0], 0, "F mb0 c0", "forward", 100.25, 100.2500015, 0, 0);
    rc |= trace_add(&b[0], 0, "send fwd", "send", 100.5, 100.5, 0, -1);
    rc |= trace_add(&b[0], 0, odd, "exact-sum", 101.0, 101.125, -1, 2);
    rc |= trace_add(&b[1], 3, "all-reduce", "collective", 99.75, 100.0, -1, -1);
    rc |= trace_add(&b[1], 3, "B mb1 c1", "backward", 100.0, 100.001, 1, 1);
    CHECK(rc == 0, "trace_add failed");
    char path[256];
    snprintf(path, sizeof path, "%s/run.json", tmpdir);
    json_t *j = write_and_parse(path, b, 2);
    if (j) {
        CHECK(json_type(j) == JSON_OBJECT && json_len(j) == 2, "root has %zu members", json_len(j));
        const char *unit = json_string(json_get(j, "displayTimeUnit"));
        CHECK(unit && !strcmp(unit, "ms"), "displayTimeUnit %s", unit);
        const json_t *ev = json_get(j, "traceEvents");
        CHECK(json_type(ev) == JSON_ARRAY && json_len(ev) == 5 + 2, "%zu events, want 5 spans + 2 tracks",
              json_len(ev));
        check_span(ev, "F mb0 c0", 0, "forward", 250000.0, 1.5, 0, 0);
        check_span(ev, "send fwd", 0, "send", 500000.0, 0.0, 0, -1);
        check_span(ev, odd, 0, "exact-sum", 1000000.0, 125000.0, -1, 2);
        check_span(ev, "all-reduce", 3, "collective", 250000.0, 250000.0, -1, -1);
        check_span(ev, "B mb1 c1", 3, "backward", 500000.0, 1000.0, 1, 1);
        const int tids[] = {0, 3};
        for (int k = 0; k < 2; k++) {
            int m;
            const json_t *md = find_event(ev, "M", "thread_name", tids[k], &m);
            CHECK(m == 1, "thread_name for tid %d: %d events", tids[k], m);
            char want[32];
            snprintf(want, sizeof want, "device %d", tids[k]);
            const char *got = json_string(json_get(json_get(md, "args"), "name"));
            CHECK(got && !strcmp(got, want), "tid %d named %s", tids[k], got);
            CHECK(md && json_type(json_get(md, "pid")) == JSON_NUMBER && json_number(json_get(md, "pid")) == 0,
                  "metadata pid");
        }
        json_free(j);
    }
    /* a second write replaces the file */
    trace_buf_free(&b[1]);
    CHECK(b[1].n == 0 && b[1].spans == NULL, "trace_buf_free leaves an empty buffer");
    j = write_and_parse(path, b, 2);
    CHECK(j && json_len(json_get(j, "traceEvents")) == 3 + 1, "rewrite has %zu events",
          json_len(json_get(j, "traceEvents")));
    json_free(j);
    trace_buf_free(&b[0]);
    /* no buffers: a valid, empty trace */
    j = write_and_parse(path, NULL, 0);
    CHECK(j && json_type(json_get(j, "traceEvents")) == JSON_ARRAY && json_len(json_get(j, "traceEvents")) == 0,
          "empty trace");
    json_free(j);
    CHECK(dotfiles_in(tmpdir) == 0, "temporary files left in %s", tmpdir);
}

/* Many spans: the buffer grows, and every one comes back in order. */
static void test_growth(void) {
    trace_buf_t b;
    trace_buf_init(&b, 0.0);
    int rc = 0;
    for (int i = 0; i < 1000; i++) rc |= trace_add(&b, 1, "F", "forward", i * 1e-3, i * 1e-3 + 5e-4, i, -1);
    CHECK(rc == 0 && b.n == 1000 && b.cap >= 1000, "n %zu cap %zu", b.n, b.cap);
    char path[256];
    snprintf(path, sizeof path, "%s/many.json", tmpdir);
    json_t *j = write_and_parse(path, &b, 1);
    const json_t *ev = json_get(j, "traceEvents");
    CHECK(json_len(ev) == 1001, "%zu events", json_len(ev));
    int bad = 0;
    for (size_t i = 1; i < json_len(ev); i++) {
        int64_t mb = -1;
        json_int64(json_get(json_get(json_at(ev, i), "args"), "mb"), &mb);
        if (mb != (int64_t)i - 1 || fabs(json_number(json_get(json_at(ev, i), "ts")) - (i - 1) * 1e3) > 1e-3) bad++;
    }
    CHECK(j && bad == 0, "%d spans out of order or wrong", bad);
    json_free(j);
    trace_buf_free(&b);
}

/* Long names are cut to fit, never inside a UTF-8 character. */
static void test_truncation(void) {
    char utf[64] = "";
    for (int i = 0; i < 30; i++) strcat(utf, "\xC3\xA9"); /* 60 bytes; byte 39 continues a character */
    trace_buf_t b;
    trace_buf_init(&b, 0.0);
    trace_add(&b, 0, utf, "a-category-longer-than-16", 0.0, 1.0, -1, -1);
    CHECK(b.n == 1 && strlen(b.spans[0].name) == 38, "name cut to %zu bytes, want 38", strlen(b.spans[0].name));
    CHECK(b.n == 1 && !strcmp(b.spans[0].cat, "a-category-long"), "cat cut to '%s'", b.spans[0].cat);
    trace_add(&b, 0, NULL, NULL, 0.0, 1.0, -1, -1);
    CHECK(b.n == 2 && !b.spans[1].name[0] && !b.spans[1].cat[0], "NULL name/cat not read as empty");
    char path[256];
    snprintf(path, sizeof path, "%s/utf.json", tmpdir);
    json_t *j = write_and_parse(path, &b, 1); /* strict parser: invalid UTF-8 fails here */
    json_free(j);
    trace_buf_free(&b);
}

static void expect_failure(const char *path, trace_buf_t *b, int nb, const char *want) {
    perr_t e = {{0}};
    CHECK(trace_write(path, b, nb, &e) == -1, "writing %s succeeded", path);
    CHECK(strstr(e.msg, path) != NULL, "message \"%s\" lacks the path %s", e.msg, path);
    CHECK(strstr(e.msg, want) != NULL, "message \"%s\" lacks \"%s\"", e.msg, want);
}

static void test_failures_leave_nothing(void) {
    trace_buf_t b;
    trace_buf_init(&b, 0.0);
    trace_add(&b, 0, "F mb0 c0", "forward", 0.0, 1.0, 0, 0);
    char path[512], dir[256];
    /* a directory that does not exist: an error, and nothing created */
    snprintf(dir, sizeof dir, "%s/no-such-dir", tmpdir);
    snprintf(path, sizeof path, "%s/trace.json", dir);
    expect_failure(path, &b, 1, "does not exist");
    struct stat sb;
    CHECK(stat(dir, &sb) == -1 && errno == ENOENT, "%s was created", dir);
    /* the target is a directory: refused, the directory and its contents kept */
    snprintf(dir, sizeof dir, "%s/adir", tmpdir);
    snprintf(path, sizeof path, "%s/inside", dir);
    CHECK(mkdir(dir, 0777) == 0, "mkdir %s", dir);
    spit(path, "keep me");
    expect_failure(dir, &b, 1, "directory");
    size_t len = 0;
    char *text = slurp(path, &len);
    CHECK(stat(dir, &sb) == 0 && S_ISDIR(sb.st_mode) && text && len == 7 && !memcmp(text, "keep me", 7),
          "directory target disturbed");
    free(text);
    /* an existing file, and a span that fails mid-write: the old file stays */
    snprintf(path, sizeof path, "%s/keep.json", tmpdir);
    spit(path, "OLD");
    trace_add(&b, 0, "backwards", "forward", 2.0, 1.5, -1, -1);
    expect_failure(path, &b, 1, "t1 >= t0");
    b.spans[1].t1 = NAN;
    expect_failure(path, &b, 1, "t1 >= t0");
    text = slurp(path, &len);
    CHECK(text && len == 3 && !memcmp(text, "OLD", 3), "old file changed: %.*s", (int)len, text ? text : "");
    free(text);
    CHECK(dotfiles_in(tmpdir) == 0, "temporary files left in %s", tmpdir);
    trace_buf_free(&b);
}

/* A buffer that lost a span to out-of-memory (marked as trace.h says)
 * drops later spans too and is refused, not written with a hole. */
static void test_dropped_span_refused(void) {
    trace_buf_t b[2];
    trace_buf_init(&b[0], 0.0);
    trace_buf_init(&b[1], 0.0);
    trace_add(&b[0], 0, "F", "forward", 0.0, 1.0, 0, 0);
    b[1].cap = SIZE_MAX;
    CHECK(trace_add(&b[1], 1, "F", "forward", 0.0, 1.0, 0, 0) == -1 && b[1].n == 0, "span added to a marked buffer");
    char path[256];
    snprintf(path, sizeof path, "%s/dropped.json", tmpdir);
    expect_failure(path, b, 2, "dropped");
    struct stat sb;
    CHECK(stat(path, &sb) == -1, "%s was created", path);
    CHECK(dotfiles_in(tmpdir) == 0, "temporary files left in %s", tmpdir);
    trace_buf_free(&b[0]);
    trace_buf_free(&b[1]);
}

int main(void) {
    if (harness_mkdtemp(tmpdir)) return 1;
    RUN(test_round_trip);
    RUN(test_growth);
    RUN(test_truncation);
    RUN(test_failures_leave_nothing);
    RUN(test_dropped_span_refused);
    harness_rmtree(tmpdir);
    return harness_done();
}
