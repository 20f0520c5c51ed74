/* test_many_devices.c - thousands of devices on a small host.
 *
 * What a device costs the host beyond its own arena must not grow with
 * the square of the world: a group's collective state is built once, not
 * once per member that finds it missing, and point-to-point channels
 * exist only for pairs that talk. Then the command, data
 * parallelism over 1024 devices of gpt-micro, must train within 4 GB of
 * peak RSS (it was OOM-killed at 24 GB).
 *
 * Sanitizer builds (PARITY_DP_MATRIX=small, see the Makefile) use fewer
 * devices: TSan and ASan multiply every thread's memory and time.
 */
#include "parity/coll.h"

#include <fcntl.h>
#include <spawn.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "../harness.h"

#if defined(__SANITIZE_THREAD__) || defined(__SANITIZE_ADDRESS__)
#define SANITIZED 1
#else
#define SANITIZED 0
#endif

extern char **environ;

static int small_world(void) {
    const char *m = getenv("PARITY_DP_MATRIX");
    return SANITIZED || (m && strcmp(m, "small") == 0);
}

/* Devices of the in-process tests. */
static int world_size(void) { return small_world() ? 256 : 1024; }

static double now_s(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

static size_t host_in_use(void) {
    size_t u;
    coll_host_memory(&u, NULL);
    return u;
}

static group_t *whole_world(int n, const char *name) {
    int *ranks = malloc((size_t)n * sizeof *ranks);
    for (int r = 0; r < n; r++) ranks[r] = r;
    perr_t e;
    group_t *g = group_create(ranks, n, name, &e);
    free(ranks);
    return g;
}

/* ---- the group's state is built once ---- */

#define FIRST_GROUPS 16

typedef struct {
    group_t *g[FIRST_GROUPS];
    int bad[PARITY_MAX_DEVICES];
} first_t;

/* The first collective of every device on each of the groups in turn.
 * All devices enter the first together (the start gate of devices_run),
 * and each later one together as well (the previous call's barrier
 * releases them at once), so every group's state is found missing by
 * many threads at the same moment: sixteen chances to build a copy too
 * many. */
static void first_main(device_t *dev, void *arg) {
    first_t *f = arg;
    for (int k = 0; k < FIRST_GROUPS; k++) {
        int32_t one = 1, sum = 0;
        coll_all_reduce(f->g[k], &one, &sum, 1, COLL_I32, COLL_SUM);
        f->bad[dev->rank] += sum != group_size(f->g[k]);
    }
}

/* The states are kept until group_destroy, so what is in use only grows
 * during the run unless a copy is thrown away: peak == in use means no
 * thread ever built a second one. And a copy is a few hundred bytes per
 * member, not a channel per pair (128 MB at 1024 members). */
static void test_state_built_once(void) {
    const int n = world_size();
    first_t *f = calloc(1, sizeof *f);
    for (int k = 0; k < FIRST_GROUPS; k++) f->g[k] = whole_world(n, "first");
    size_t before = host_in_use();
    coll_host_memory_reset_peak();
    perr_t e;
    CHECK(devices_run(n, 0, first_main, f, &e) == 0, "%s", e.msg);
    size_t in_use, peak;
    coll_host_memory(&in_use, &peak);
    size_t state = (in_use - before) / FIRST_GROUPS, per_member = state / (size_t)n;
    printf("  %d groups of %d members: state %zu bytes each (%zu per member), peak %zu over %zu in use\n",
           FIRST_GROUPS, n, state, per_member, peak - before, in_use - before);
    CHECK(peak == in_use, "peak %zu > in use %zu: %zu bytes were built and thrown away", peak,
          in_use, peak - in_use);
    CHECK(per_member <= 1024, "%zu bytes per member: the state grows faster than the group", per_member);
    for (int r = 0; r < n; r++) CHECK(f->bad[r] == 0, "rank %d: %d wrong sums", r, f->bad[r]);
    for (int k = 0; k < FIRST_GROUPS; k++) group_destroy(f->g[k]);
    CHECK(host_in_use() == before, "group_destroy left %zu bytes", host_in_use() - before);
    free(f);
}

/* ---- point-to-point channels appear as pairs talk ---- */

typedef struct {
    group_t *g;
    int rounds;
    int got[PARITY_MAX_DEVICES];
    size_t after_barrier;
} ring_t;

/* Each rank sends to its right neighbour and receives from its left,
 * posting the receive first on odd ranks and the send first on even
 * ones, so both ends of a pair race to create its channel. */
static void ring_main(device_t *dev, void *arg) {
    ring_t *t = arg;
    const int n = group_size(t->g), me = group_rank(t->g);
    coll_barrier(t->g);
    if (me == 0) t->after_barrier = host_in_use();
    coll_barrier(t->g);
    int ok = 1;
    for (int k = 0; k < t->rounds; k++) {
        int out = me * 1000 + k, in = -1;
        coll_request_t *rq[2];
        if (me & 1) {
            rq[0] = coll_irecv(t->g, &in, 1, COLL_I32, (me + n - 1) % n, k);
            rq[1] = coll_isend(t->g, &out, 1, COLL_I32, (me + 1) % n, k);
        } else {
            rq[0] = coll_isend(t->g, &out, 1, COLL_I32, (me + 1) % n, k);
            rq[1] = coll_irecv(t->g, &in, 1, COLL_I32, (me + n - 1) % n, k);
        }
        coll_wait_all(2, rq);
        ok &= in == ((me + n - 1) % n) * 1000 + k;
    }
    t->got[dev->rank] = ok;
}

static void test_p2p_channels_lazy(void) {
    const int n = world_size();
    ring_t *t = calloc(1, sizeof *t);
    t->g = whole_world(n, "ring");
    t->rounds = 3;
    size_t before = host_in_use();
    perr_t e;
    CHECK(devices_run(n, 0, ring_main, t, &e) == 0, "%s", e.msg);
    for (int r = 0; r < n; r++) CHECK(t->got[r], "rank %d received the wrong values", r);
    size_t state = t->after_barrier - before, p2p = host_in_use() - t->after_barrier;
    printf("  %d members: %zu bytes without p2p; a ring of sends added %zu (%zu per sender)\n", n,
           state, p2p, p2p / (size_t)n);
    CHECK(state <= (size_t)n * 1024, "%zu bytes for a group that has not sent anything", state);
    /* n talking pairs: a row of n pointers per sender and one channel each */
    CHECK(p2p > 0 && p2p <= (size_t)n * ((size_t)n * sizeof(void *) + 256),
          "%zu bytes of channels for %d talking pairs", p2p, n);
    group_destroy(t->g);
    CHECK(host_in_use() == before, "group_destroy left %zu bytes", host_in_use() - before);
    free(t);
}

/* ---- the command: 1024 data-parallel devices of gpt-micro ---- */

/* $PARITY, else the parity program beside this binary's tests/ folder. */
static void parity_path(char *buf, size_t n, const char *argv0) {
    const char *env = getenv("PARITY");
    if (env && *env) {
        snprintf(buf, n, "%s", env);
        return;
    }
    const char *slash = strrchr(argv0, '/');
    int dir = slash ? (int)(slash - argv0) : 0;
    snprintf(buf, n, "%.*s%s../parity", dir, argv0, slash ? "/" : "");
}

static char parity[4096];

/* Runs `parity train` with stdout to out_path; returns the exit status
 * (-1: did not start, 128 + signal when killed) and the peak RSS in KiB. */
static int run_train(int devices, const char *out_path, long *max_rss_kb) {
    char n[16];
    snprintf(n, sizeof n, "%d", devices);
    char *argv[] = {parity, "train", "--model", "gpt-micro", "--data-parallel-size", n,
                    "--global-batch-size", n, "--micro-batch-size", "1", "--steps", "1", NULL};
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_addopen(&fa, 1, out_path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
    pid_t pid;
    int rc = posix_spawn(&pid, parity, &fa, NULL, argv, environ);
    posix_spawn_file_actions_destroy(&fa);
    if (rc != 0) return -1;
    int status;
    struct rusage ru;
    if (wait4(pid, &status, 0, &ru) != pid) return -1;
    *max_rss_kb = ru.ru_maxrss;
    return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

static int file_contains(const char *path, const char *needle) {
    FILE *f = fopen(path, "r");
    if (!f) return 0;
    char line[512];
    int found = 0;
    while (!found && fgets(line, sizeof line, f)) found = strstr(line, needle) != NULL;
    fclose(f);
    return found;
}

static void test_train_many_devices(void) {
    /* under TSan 1024 devices took 17 s and 5.4 GB, 128 take 1 s */
    const int n = small_world() ? 128 : 1024;
    /* the default backend: OpenBLAS with its concurrent callers bounded
     * (tile_gemm.c), which is what crashed here before */
    const long limit_kb = 4L << 20; /* 4 GiB */
    char out[] = "/tmp/parity-many-XXXXXX";
    int fd = mkstemp(out);
    CHECK(fd >= 0, "mkstemp");
    if (fd < 0) return;
    close(fd);
    long rss = 0;
    double t0 = now_s();
    int rc = run_train(n, out, &rss);
    double secs = now_s() - t0;
    printf("  parity train, dp=%d: exit %d, peak RSS %.0f MiB, %.1f s\n", n, rc, rss / 1024.0, secs);
    CHECK(rc == 0, "%s exited with %d", parity, rc);
    CHECK(file_contains(out, "step     0 | loss"), "no step line in the output");
    CHECK(rss <= limit_kb, "peak RSS %ld KiB > %ld KiB", rss, limit_kb);
    unlink(out);
}

int main(int argc, char **argv) {
    (void)argc;
    parity_path(parity, sizeof parity, argv[0]);
    RUN(test_state_built_once);
    RUN(test_p2p_channels_lazy);
    RUN(test_train_many_devices);
    return harness_done();
}
