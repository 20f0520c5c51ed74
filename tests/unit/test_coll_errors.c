/* test_coll_errors.c - misuse must end with a clear message and a
 * non-zero exit, never a hang or a crash.
 *
 * Each case runs in a child process (fork, then the child starts its own
 * devices); the parent reads the child's stderr through a pipe, kills it
 * if it outlives a deadline, and CHECKs that the message names both ranks
 * and both calls (or, for a hang, what every device was doing).
 */
#include "parity/coll.h"

#include <poll.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "../harness.h"

#ifdef __SANITIZE_THREAD__
/* TSan sleeps a second at exit while other threads run (they do here: a
 * fatal error exits with peers blocked); every child would pay it. */
const char *__tsan_default_options(void);
const char *__tsan_default_options(void) { return "atexit_sleep_ms=0"; }
#endif

typedef void (*case_fn)(device_t *dev, void *arg);

typedef struct {
    int exited, status, hung, signaled;
    char err[8192];
} outcome_t;

static int case_world;
static const int *case_ranks;
static int case_n;
static group_t *case_group;

/* In the child: build the group, run the devices; exit 0 if nothing died. */
static void child_main(case_fn fn, const char *env_name, const char *env_value) {
    if (env_name) setenv(env_name, env_value, 1);
    perr_t e;
    if (case_n) {
        case_group = group_create(case_ranks, case_n, "g", &e);
        if (!case_group) {
            fprintf(stderr, "%s\n", e.msg);
            _exit(1);
        }
    }
    if (case_world == 0) { /* run fn on this (non-device) thread */
        fn(NULL, NULL);
        _exit(0);
    }
    if (devices_run(case_world, 0, fn, NULL, &e) != 0) {
        fprintf(stderr, "%s\n", e.msg);
        _exit(1);
    }
    _exit(0);
}

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static outcome_t run_case(int world, const int *ranks, int n, case_fn fn, const char *env_name,
                          const char *env_value) {
    outcome_t o;
    memset(&o, 0, sizeof o);
    int p[2];
    if (pipe(p) != 0) return o;
    case_world = world, case_ranks = ranks, case_n = n;
    fflush(stdout);
    fflush(stderr);
    pid_t pid = fork();
    if (pid == 0) {
        close(p[0]);
        dup2(p[1], 2);
        close(p[1]);
        child_main(fn, env_name, env_value);
    }
    close(p[1]);
    size_t len = 0;
    double deadline = now_s() + 60.0; /* generous: sanitized children are slow */
    for (;;) {
        struct pollfd pf = {.fd = p[0], .events = POLLIN};
        int left_ms = (int)((deadline - now_s()) * 1000);
        if (left_ms <= 0) {
            o.hung = 1;
            kill(pid, SIGKILL);
            break;
        }
        if (poll(&pf, 1, left_ms) <= 0) continue;
        char chunk[1024];
        ssize_t k = read(p[0], chunk, sizeof chunk);
        if (k <= 0) break; /* EOF: the child is gone (or closed stderr) */
        if (len + (size_t)k >= sizeof o.err) len = 0; /* keep the tail */
        memcpy(o.err + len, chunk, (size_t)k);
        len += (size_t)k;
    }
    o.err[len] = 0;
    close(p[0]);
    int st;
    waitpid(pid, &st, 0);
    o.exited = WIFEXITED(st);
    o.status = o.exited ? WEXITSTATUS(st) : -1;
    o.signaled = WIFSIGNALED(st);
    return o;
}

static int has(const outcome_t *o, const char *s) { return strstr(o->err, s) != NULL; }

/* A clean failure: exited by itself (no signal, no hang) with non-zero status. */
#define CHECK_CLEAN_FAILURE(o)                                                                       \
    CHECK(!(o).hung && (o).exited && (o).status != 0, "hung=%d exited=%d status=%d signaled=%d\n%s", \
          (o).hung, (o).exited, (o).status, (o).signaled, (o).err)

/* ---- mismatched collectives ---- */

static void mismatch_count(device_t *dev, void *arg) {
    (void)arg;
    float x[1024] = {0}, y[1024];
    /* group "g" = world {2, 0}: group rank 0 is world 2 */
    if (dev->rank == 1) return;
    coll_all_reduce(case_group, x, y, dev->rank == 2 ? 1024 : 512, COLL_F32, COLL_SUM);
}

static void test_mismatch_count(void) {
    int ranks[] = {2, 0};
    outcome_t o = run_case(3, ranks, 2, mismatch_count, NULL, NULL);
    CHECK_CLEAN_FAILURE(o);
    CHECK(has(&o, "collective mismatch in group 'g' call #1: rank 0 (world 2) called "
                  "all_reduce(f32, sum, count=1024) but rank 1 (world 0) called all_reduce(f32, sum, count=512)"),
          "message:\n%s", o.err);
}

static void mismatch_op_at_7(device_t *dev, void *arg) {
    (void)arg;
    int32_t x[16] = {0}, y[16];
    for (int i = 0; i < 6; i++) coll_all_reduce(case_group, x, y, 16, COLL_I32, COLL_SUM);
    coll_all_reduce(case_group, x, y, 16, COLL_I32, dev->rank == 3 ? COLL_MAX : COLL_SUM);
}

static void test_mismatch_op(void) {
    int ranks[] = {0, 1, 2, 3};
    outcome_t o = run_case(4, ranks, 4, mismatch_op_at_7, NULL, NULL);
    CHECK_CLEAN_FAILURE(o);
    CHECK(has(&o, "call #7: rank 0 (world 0) called all_reduce(i32, sum, count=16) but rank 3 (world 3) "
                  "called all_reduce(i32, max, count=16)"),
          "message:\n%s", o.err);
}

static void mismatch_dtype(device_t *dev, void *arg) {
    (void)arg;
    int64_t x[8] = {0}, y[8];
    coll_all_reduce(case_group, x, y, 2, dev->rank == 1 ? COLL_I64 : COLL_F32, COLL_SUM);
}

static void test_mismatch_dtype(void) {
    int ranks[] = {0, 1};
    outcome_t o = run_case(2, ranks, 2, mismatch_dtype, NULL, NULL);
    CHECK_CLEAN_FAILURE(o);
    CHECK(has(&o, "rank 0 (world 0) called all_reduce(f32, sum, count=2) but rank 1 (world 1) called "
                  "all_reduce(i64, sum, count=2)"),
          "message:\n%s", o.err);
}

static void mismatch_kind_root(device_t *dev, void *arg) {
    (void)arg;
    float x[8] = {0};
    if (dev->rank == 0) coll_broadcast(case_group, x, 8, COLL_F32, 0);
    else if (dev->rank == 1) coll_broadcast(case_group, x, 8, COLL_F32, 1);
    else coll_barrier(case_group);
}

static void test_mismatch_kind_and_root(void) {
    int ranks[] = {0, 1, 2};
    outcome_t o = run_case(3, ranks, 3, mismatch_kind_root, NULL, NULL);
    CHECK_CLEAN_FAILURE(o);
    CHECK(has(&o, "rank 0 (world 0) called broadcast(f32, count=8, root=0) but rank 1 (world 1) called "
                  "broadcast(f32, count=8, root=1)"),
          "message:\n%s", o.err);
}

static void mismatch_algo(device_t *dev, void *arg) {
    (void)arg;
    float x[8] = {0}, y[8];
    coll_set_algo(dev->rank == 1 ? COLL_ALGO_RING : COLL_ALGO_DIRECT);
    coll_all_gather(case_group, x, y, 4, COLL_F32);
}

static void test_mismatch_algo(void) {
    int ranks[] = {0, 1};
    outcome_t o = run_case(2, ranks, 2, mismatch_algo, NULL, NULL);
    CHECK_CLEAN_FAILURE(o);
    CHECK(has(&o, "called all_gather(f32, send_count=4, algo=direct) but rank 1 (world 1) called "
                  "all_gather(f32, send_count=4, algo=ring)"),
          "message:\n%s", o.err);
}

static void a2av_mismatch(device_t *dev, void *arg) {
    (void)arg;
    float x[16] = {0}, y[16];
    /* everyone sends 2 to rank 0 and 3 to rank 1; rank 1 expects 4 from itself */
    size_t sc[2] = {2, 3}, d[2] = {0, 8};
    size_t rc[2] = {dev->rank == 0 ? 2u : 3u, dev->rank == 0 ? 2u : 4u};
    coll_all_to_all_v(case_group, x, sc, d, y, rc, d, COLL_F32);
}

static void test_a2av_counts_mismatch(void) {
    int ranks[] = {0, 1};
    outcome_t o = run_case(2, ranks, 2, a2av_mismatch, NULL, NULL);
    CHECK_CLEAN_FAILURE(o);
    CHECK(has(&o, "rank 1 (world 1) sends 3 elements to rank 1 but rank 1 (world 1) expects 4 from rank 1"),
          "message:\n%s", o.err);
}

/* ---- hangs: the watchdog reports every device ---- */

static void missing_rank(device_t *dev, void *arg) {
    (void)arg;
    coll_set_timeout(0.5);
    float x[4] = {0}, y[4];
    if (dev->rank == 2) return; /* never calls */
    if (dev->rank == 3) {       /* busy in its own code for a while */
        struct timespec ts = {2, 0};
        nanosleep(&ts, NULL);
        return;
    }
    coll_all_reduce(case_group, x, y, 4, COLL_F32, COLL_SUM);
}

static void test_watchdog_missing_rank(void) {
    int ranks[] = {0, 1, 2};
    double t0 = now_s();
    outcome_t o = run_case(4, ranks, 3, missing_rank, NULL, NULL);
    double took = now_s() - t0;
    CHECK_CLEAN_FAILURE(o);
    CHECK(has(&o, "collective watchdog"), "message:\n%s", o.err);
    CHECK(has(&o, "device 0: waiting in all_reduce call #1 of group 'g' (rank 0 of 3)"), "message:\n%s", o.err);
    CHECK(has(&o, "device 1: waiting in all_reduce call #1 of group 'g' (rank 1 of 3)"), "message:\n%s", o.err);
    CHECK(has(&o, "device 2: finished"), "message:\n%s", o.err);
    CHECK(has(&o, "device 3: running (not in a collective)"), "message:\n%s", o.err);
    CHECK(has(&o, "all_reduce call #1 of group 'g' has no rank 2 (world 2), which is finished"), "message:\n%s", o.err);
    CHECK(took < 30, "the watchdog fired after %.1f s (timeout 0.5 s)", took);
}

static void p2p_deadlock(device_t *dev, void *arg) {
    (void)arg;
    coll_set_timeout(0.5);
    int32_t v = 0;
    coll_recv(case_group, &v, 1, COLL_I32, 1 - group_rank(case_group), 5); /* both receive first */
    (void)dev;
}

static void test_watchdog_p2p_deadlock(void) {
    int ranks[] = {1, 0};
    outcome_t o = run_case(2, ranks, 2, p2p_deadlock, NULL, NULL);
    CHECK_CLEAN_FAILURE(o);
    CHECK(has(&o, "device 0: waiting in recv from rank 0 (world 1) tag 5, group 'g' (rank 1 of 2)"),
          "message:\n%s", o.err);
    CHECK(has(&o, "device 1: waiting in recv from rank 1 (world 0) tag 5"), "message:\n%s", o.err);
}

static void env_timeout_hang(device_t *dev, void *arg) {
    (void)arg;
    if (dev->rank == 0) coll_barrier(case_group);
}

static void test_watchdog_env_timeout(void) {
    int ranks[] = {0, 1};
    outcome_t o = run_case(2, ranks, 2, env_timeout_hang, "PARITY_COLL_TIMEOUT", "0.3");
    CHECK_CLEAN_FAILURE(o);
    CHECK(has(&o, "timeout 0.3 s") && has(&o, "device 0: waiting in barrier call #1") && has(&o, "device 1: finished"),
          "message:\n%s", o.err);
}

/* ---- step-through: a deadlock is reported at once, without a timeout ---- */

static void test_step_through_deadlock(void) {
    int ranks[] = {0, 1};
    double t0 = now_s();
    outcome_t o = run_case(2, ranks, 2, env_timeout_hang, "PARITY_STEP_THROUGH", "1");
    CHECK_CLEAN_FAILURE(o);
    CHECK(has(&o, "step-through: no device can run") && !has(&o, "collective watchdog"),
          "message:\n%s", o.err);
    CHECK(has(&o, "device 0: waiting in barrier call #1 of group 'g'") && has(&o, "device 1: finished"),
          "message:\n%s", o.err);
    CHECK(now_s() - t0 < 30, "took %.1f s: found by a timeout, not at once", now_s() - t0);
    /* both receive first: with a timeout set, still the deadlock, not the watchdog */
    int ranks2[] = {1, 0};
    o = run_case(2, ranks2, 2, p2p_deadlock, "PARITY_STEP_THROUGH_DEVICE", "1");
    CHECK_CLEAN_FAILURE(o);
    CHECK(has(&o, "step-through: no device can run") &&
              has(&o, "device 1: waiting in recv from rank 1 (world 0) tag 5"),
          "message:\n%s", o.err);
}

/* ---- bad arguments and bad configuration ---- */

static void p2p_count_mismatch(device_t *dev, void *arg) {
    (void)arg;
    float b[8] = {0};
    if (group_rank(case_group) == 0) coll_send(case_group, b, 8, COLL_F32, 1, 3);
    else coll_recv(case_group, b, 4, COLL_F32, 0, 3);
    (void)dev;
}

static void test_p2p_mismatch(void) {
    int ranks[] = {0, 1};
    outcome_t o = run_case(2, ranks, 2, p2p_count_mismatch, NULL, NULL);
    CHECK_CLEAN_FAILURE(o);
    CHECK(has(&o, "p2p mismatch in group 'g' (tag 3): rank 0 (world 0) sends 8 f32 to rank 1 but rank 1 (world 1) "
                  "receives 4 f32 from rank 0"),
          "message:\n%s", o.err);
}

static void not_member(device_t *dev, void *arg) {
    (void)arg;
    float x = 0, y;
    if (dev->rank == 2) coll_all_reduce(case_group, &x, &y, 1, COLL_F32, COLL_SUM);
}

static void test_not_a_member(void) {
    int ranks[] = {0, 1};
    outcome_t o = run_case(3, ranks, 2, not_member, NULL, NULL);
    CHECK_CLEAN_FAILURE(o);
    CHECK(has(&o, "coll_all_reduce on group 'g': world rank 2 is not a member of the group (members: 0,1)"),
          "message:\n%s", o.err);
}

static void outside_device(device_t *dev, void *arg) {
    (void)dev, (void)arg;
    coll_barrier(case_group);
}

static void test_outside_device(void) {
    int ranks[] = {0};
    outcome_t o = run_case(0, ranks, 1, outside_device, NULL, NULL);
    CHECK_CLEAN_FAILURE(o);
    CHECK(has(&o, "called outside a device thread"), "message:\n%s", o.err);
}

static void xacc_max(device_t *dev, void *arg) {
    (void)dev, (void)arg;
    xacc_t a, b;
    xacc_init(&a);
    coll_all_reduce(case_group, &a, &b, 1, COLL_XACC, COLL_MAX);
}

static void test_xacc_max(void) {
    int ranks[] = {0, 1};
    outcome_t o = run_case(2, ranks, 2, xacc_max, NULL, NULL);
    CHECK_CLEAN_FAILURE(o);
    CHECK(has(&o, "max is not defined on xacc"), "message:\n%s", o.err);
}

static void bad_root(device_t *dev, void *arg) {
    (void)dev, (void)arg;
    float x[2] = {0};
    coll_broadcast(case_group, x, 2, COLL_F32, 2);
}

static void test_bad_root(void) {
    int ranks[] = {0, 1};
    outcome_t o = run_case(2, ranks, 2, bad_root, NULL, NULL);
    CHECK_CLEAN_FAILURE(o);
    CHECK(has(&o, "root 2 is out of range (group size 2)"), "message:\n%s", o.err);
}

static void bad_overlap(device_t *dev, void *arg) {
    (void)dev, (void)arg;
    float x[16] = {0};
    coll_all_reduce(case_group, x, x + 4, 8, COLL_F32, COLL_SUM);
}

static void test_bad_overlap(void) {
    int ranks[] = {0, 1};
    outcome_t o = run_case(2, ranks, 2, bad_overlap, NULL, NULL);
    CHECK_CLEAN_FAILURE(o);
    CHECK(has(&o, "send and recv overlap"), "message:\n%s", o.err);
}

static void null_buffer(device_t *dev, void *arg) {
    (void)dev, (void)arg;
    float y[4];
    coll_all_reduce(case_group, NULL, y, 4, COLL_F32, COLL_SUM);
}

static void test_null_buffer(void) {
    int ranks[] = {0, 1};
    outcome_t o = run_case(2, ranks, 2, null_buffer, NULL, NULL);
    CHECK_CLEAN_FAILURE(o);
    CHECK(has(&o, "send is NULL but 16 bytes are needed"), "message:\n%s", o.err);
}

static void bad_peer(device_t *dev, void *arg) {
    (void)dev, (void)arg;
    float x = 0;
    coll_send(case_group, &x, 1, COLL_F32, 5, 0);
}

static void test_bad_peer(void) {
    int ranks[] = {0, 1};
    outcome_t o = run_case(2, ranks, 2, bad_peer, NULL, NULL);
    CHECK_CLEAN_FAILURE(o);
    CHECK(has(&o, "peer 5 is out of range (group size 2)"), "message:\n%s", o.err);
}

static void one_barrier(device_t *dev, void *arg) {
    (void)dev, (void)arg;
    coll_barrier(case_group);
}

static void test_bad_env(void) {
    int ranks[] = {0, 1};
    outcome_t o = run_case(2, ranks, 2, one_barrier, "PARITY_COLL_ALGO", "tree");
    CHECK_CLEAN_FAILURE(o);
    CHECK(has(&o, "PARITY_COLL_ALGO='tree' is not a collective algorithm (expected direct or ring)"), "message:\n%s",
          o.err);
    o = run_case(2, ranks, 2, env_timeout_hang, "PARITY_COLL_TIMEOUT", "soon");
    CHECK_CLEAN_FAILURE(o);
    CHECK(has(&o, "PARITY_COLL_TIMEOUT='soon' is not a timeout"), "message:\n%s", o.err);
    /* and a good value runs cleanly: the harness itself can tell success */
    o = run_case(2, ranks, 2, one_barrier, "PARITY_COLL_ALGO", "ring");
    CHECK(!o.hung && o.exited && o.status == 0, "status %d:\n%s", o.status, o.err);
}

int main(void) {
    RUN(test_mismatch_count);
    RUN(test_mismatch_op);
    RUN(test_mismatch_dtype);
    RUN(test_mismatch_kind_and_root);
    RUN(test_mismatch_algo);
    RUN(test_a2av_counts_mismatch);
    RUN(test_watchdog_missing_rank);
    RUN(test_watchdog_p2p_deadlock);
    RUN(test_watchdog_env_timeout);
    RUN(test_step_through_deadlock);
    RUN(test_p2p_mismatch);
    RUN(test_not_a_member);
    RUN(test_outside_device);
    RUN(test_xacc_max);
    RUN(test_bad_root);
    RUN(test_bad_overlap);
    RUN(test_null_buffer);
    RUN(test_bad_peer);
    RUN(test_bad_env);
    return harness_done();
}
