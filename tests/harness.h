/* harness.h - the tiny test harness every test_*.c under tests/ uses.
 *
 * A test is a void function; RUN(fn) runs it and counts it passed when no
 * CHECK inside failed. Each test binary ends with `return harness_done();`,
 * which prints "RESULT <binary>: N passed, M failed" for tests/run.sh to
 * add up, and exits non-zero when something failed.
 *
 *   static void test_add(void) { CHECK(1 + 1 == 2, "got %d", 1 + 1); }
 *   int main(void) { RUN(test_add); return harness_done(); }
 */
#ifndef PARITY_TEST_HARNESS_H
#define PARITY_TEST_HARNESS_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int harness_passed, harness_failed, harness_cur_failed;
static const char *harness_cur_name = "";

#define CHECK(cond, ...)                                                        \
    do {                                                                        \
        if (!(cond)) {                                                          \
            harness_cur_failed++;                                               \
            if (harness_cur_failed <= 5) {                                      \
                fprintf(stderr, "  FAIL %s (%s:%d): %s: ", harness_cur_name,   \
                        __FILE__, __LINE__, #cond);                             \
                fprintf(stderr, __VA_ARGS__);                                   \
                fputc('\n', stderr);                                            \
            }                                                                   \
        }                                                                       \
    } while (0)

#define RUN(fn)                                                                 \
    do {                                                                        \
        harness_cur_name = #fn;                                                 \
        harness_cur_failed = 0;                                                 \
        fn();                                                                   \
        if (harness_cur_failed) {                                               \
            harness_failed++;                                                   \
            printf("not ok  %s\n", #fn);                                        \
        } else {                                                                \
            harness_passed++;                                                   \
            printf("ok      %s\n", #fn);                                        \
        }                                                                       \
        fflush(stdout);                                                         \
    } while (0)

/* A test's scratch directory: made from tmpl (mkdtemp's XXXXXX) before
 * the tests run, removed with everything in it after. */
static inline int harness_mkdtemp(char *tmpl) {
    if (mkdtemp(tmpl)) return 0;
    perror("mkdtemp");
    return -1;
}

static inline void harness_rmtree(const char *dir) {
    char cmd[600];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    if (system(cmd)) fprintf(stderr, "could not remove %s\n", dir);
}

static inline int harness_done_named(const char *argv0) {
    const char *base = strrchr(argv0, '/');
    printf("RESULT %s: %d passed, %d failed\n", base ? base + 1 : argv0,
           harness_passed, harness_failed);
    fflush(stdout);
    return harness_failed ? 1 : 0;
}
#define harness_done() harness_done_named(__FILE__)

#endif
