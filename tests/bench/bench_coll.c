/* bench_coll.c - nccl-tests-style bandwidth table for parity's collectives.
 *
 *   bench_coll [-n 2,4,8] [-s max_bytes] [-c all_reduce,...] [-a direct,ring]
 *              [-t seconds_per_row] [-x 0|1]   (-x 0: skip the exact xacc all-reduce)
 *              [-o 0|1]   (-o 0: skip the open-sum all-reduce, coll_all_reduce_open)
 *
 * For each collective, algorithm, device count and size (4 KiB .. 64 MiB
 * by x4): time per call (the slowest rank's average), algbw = S / time and
 * busbw = algbw * factor (coll.h: 2(n-1)/n for all-reduce, (n-1)/n for
 * reduce-scatter, all-gather and all-to-all, 1 for broadcast), and the
 * number of wrong elements in a final check, as nccl-tests prints them.
 * S is the per-rank buffer for all-reduce and broadcast, and the whole
 * n-block buffer for the others. Inputs are small integers (rank + 1), so
 * fp32 sums are exact in every order and the check is exact. The open
 * all-reduce (all_reduce_open) moves xvec_t sums, 8 bytes an element
 * against fp32's 4: compare its rows with all_reduce's at twice the
 * bytes for the same element count. Its check runs on a first call with
 * rank + 1 in every element; the timed calls then reduce zeros (a
 * repeated in-place sum of anything else grows by n every call).
 * Ends with CSV,coll,algo,ndev,bytes,time_us,algbw_GBps,busbw_GBps lines.
 */
#include "parity/coll.h"

#include <sched.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

enum { AR, RS, AG, BC, A2A, NCOLL };
static const char *const coll_names[NCOLL] = {"all_reduce", "reduce_scatter", "all_gather", "broadcast", "all_to_all"};
static const coll_kind_t coll_kinds[NCOLL] = {COLL_KIND_ALL_REDUCE, COLL_KIND_REDUCE_SCATTER, COLL_KIND_ALL_GATHER,
                                              COLL_KIND_BROADCAST, COLL_KIND_ALL_TO_ALL};

#define MAX_SIZES 16
#define MAX_CSV 2048

typedef struct {
    int coll, type, n; /* type: 0 fp32, 1 xacc, 2 open sums (xvec) */
    coll_algo_t algo;
    size_t sizes[MAX_SIZES];
    int nsizes;
    double row_seconds;
    group_t *g;
    /* results, written by rank 0 */
    double time_us[MAX_SIZES];
    long wrong[MAX_SIZES];
} job_t;

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* One call of the benchmarked collective on buffers sized for S bytes. */
static void one_call(const job_t *j, void *send, void *recv, size_t S) {
    if (j->type == 2) { /* send is the rank's xvec_t */
        coll_all_reduce_open(j->g, send, 0, S / sizeof(double));
        return;
    }
    coll_dtype_t dt = j->type ? COLL_XACC : COLL_F32;
    size_t es = coll_dtype_size(dt), n = (size_t)j->n;
    switch (j->coll) {
    case AR: coll_all_reduce(j->g, send, recv, S / es, dt, COLL_SUM); break;
    case RS: coll_reduce_scatter(j->g, send, recv, S / es / n, dt, COLL_SUM); break;
    case AG: coll_all_gather(j->g, send, recv, S / es / n, dt); break;
    case BC: coll_broadcast(j->g, recv, S / es, dt, 0); break;
    case A2A: coll_all_to_all(j->g, send, recv, S / es / n, dt); break;
    }
}

static void fill_inputs(const job_t *j, int me, float *send, float *recv, size_t S) {
    size_t count = S / 4;
    for (size_t k = 0; k < count; k++) send[k] = (float)(me + 1);
    if (j->coll == BC)
        for (size_t k = 0; k < count; k++) recv[k] = me == 0 ? (float)(k % 1000) : -1.0f;
}

/* Wrong elements after the last call (fp32 jobs; inputs from fill_inputs). */
static long check(const job_t *j, int me, const float *recv, size_t S) {
    size_t n = (size_t)j->n, count = S / 4;
    long bad = 0;
    float total = (float)(n * (n + 1) / 2);
    switch (j->coll) {
    case AR: for (size_t k = 0; k < count; k++) bad += recv[k] != total; break;
    case RS: for (size_t k = 0; k < count / n; k++) bad += recv[k] != total; break;
    case AG:
    case A2A: /* block i came from rank i */
        for (size_t k = 0; k < count / n * n; k++) bad += recv[k] != (float)(k / (count / n) + 1);
        break;
    case BC: for (size_t k = 0; k < count; k++) bad += recv[k] != (float)(k % 1000); break;
    }
    (void)me;
    return bad;
}

static void bench_main(device_t *dev, void *arg) {
    job_t *j = arg;
    int me = group_rank(j->g);
    coll_set_algo(j->algo);
    size_t maxS = j->sizes[j->nsizes - 1];
    void *send = arena_alloc_or_die(dev->arena, maxS, MEM_COMM, "bench send");
    void *recv = arena_alloc_or_die(dev->arena, maxS, MEM_COMM, "bench recv");
    xvec_t open;
    for (int si = 0; si < j->nsizes; si++) {
        size_t S = j->sizes[si];
        int64_t bad = 0, total_bad;
        if (j->type == 2) { /* checked once on rank + 1, then timed on zeros */
            size_t count = S / sizeof(double);
            float *ones = recv;
            for (size_t k = 0; k < count; k++) ones[k] = (float)(me + 1);
            xvec_init_with(&open, count, send);
            xvec_claim_zero(&open);
            xvec_store(&open, 0, ones, count);
            one_call(j, &open, recv, S);
            xvec_round(&open, ones);
            for (size_t k = 0; k < count; k++) bad += ones[k] != (float)(j->n * (j->n + 1) / 2);
            xvec_zero(&open);
        } else if (j->type) { /* xacc inputs: one fp32 term each */
            xacc_t *x = send;
            for (size_t k = 0; k < S / sizeof(xacc_t); k++) xacc_init(&x[k]), xacc_add_f32(&x[k], (float)(me + 1));
        } else {
            fill_inputs(j, me, send, recv, S);
        }
        /* warm-up, then rank 0 picks an iteration count for the time budget */
        void *in = j->type == 2 ? (void *)&open : send;
        double t0 = now_s();
        one_call(j, in, recv, S);
        one_call(j, in, recv, S);
        int64_t iters = (int64_t)(j->row_seconds / ((now_s() - t0) / 2 + 1e-7));
        if (iters < 3) iters = 3;
        if (iters > 2000) iters = 2000;
        coll_broadcast(j->g, &iters, 1, COLL_I64, 0);
        coll_barrier(j->g);
        t0 = now_s();
        for (int64_t i = 0; i < iters; i++) one_call(j, in, recv, S);
        int64_t ns = (int64_t)((now_s() - t0) * 1e9), slowest;
        coll_all_reduce(j->g, &ns, &slowest, 1, COLL_I64, COLL_MAX);
        if (j->type == 0) bad = check(j, me, recv, S);
        if (j->type == 1 && j->coll == AR) {
            const xacc_t *x = recv;
            float want = (float)(j->n * (j->n + 1) / 2);
            for (size_t k = 0; k < S / sizeof(xacc_t); k++) bad += xacc_round_f32(&x[k]) != want;
        }
        coll_all_reduce(j->g, &bad, &total_bad, 1, COLL_I64, COLL_SUM);
        if (me == 0) {
            j->time_us[si] = (double)slowest / 1e3 / (double)iters;
            j->wrong[si] = (long)total_bad;
        }
        if (j->type == 2) xvec_free(&open); /* its accumulators; the sums are `send` */
    }
    arena_free(dev->arena, recv);
    arena_free(dev->arena, send);
}

static int usable_cpus(void) {
    cpu_set_t set;
    return sched_getaffinity(0, sizeof set, &set) == 0 ? CPU_COUNT(&set) : (int)sysconf(_SC_NPROCESSORS_ONLN);
}

static int parse_list(const char *s, const char *const *names, int nnames, int *out) {
    int n = 0;
    char buf[256];
    snprintf(buf, sizeof buf, "%s", s);
    for (char *tok = strtok(buf, ","); tok; tok = strtok(NULL, ",")) {
        int found = -1;
        for (int i = 0; i < nnames; i++)
            if (!strcmp(tok, names[i])) found = i;
        if (found < 0) {
            fprintf(stderr, "bench_coll: unknown name '%s'\n", tok);
            exit(2);
        }
        out[n++] = found;
    }
    return n;
}

int main(int argc, char **argv) {
    int ndevs[8] = {2, 4, 8}, nndev = 3, colls[NCOLL], ncolls = NCOLL, algos[2] = {0, 1}, nalgos = 2, xacc = 1, open = 1;
    for (int i = 0; i < NCOLL; i++) colls[i] = i;
    size_t max_bytes = (size_t)64 << 20;
    double row_seconds = 0.1;
    static const char *const algo_names[] = {"direct", "ring"};
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!v) { fprintf(stderr, "usage: see the comment at the top of bench_coll.c\n"); return 2; }
        i++;
        if (!strcmp(a, "-n")) {
            nndev = 0;
            char buf[64];
            snprintf(buf, sizeof buf, "%s", v);
            for (char *t = strtok(buf, ","); t && nndev < 8; t = strtok(NULL, ",")) ndevs[nndev++] = atoi(t);
        } else if (!strcmp(a, "-s")) max_bytes = (size_t)strtoull(v, NULL, 0);
        else if (!strcmp(a, "-c")) ncolls = parse_list(v, coll_names, NCOLL, colls);
        else if (!strcmp(a, "-a")) nalgos = parse_list(v, algo_names, 2, algos);
        else if (!strcmp(a, "-t")) row_seconds = atof(v);
        else if (!strcmp(a, "-x")) xacc = atoi(v) != 0;
        else if (!strcmp(a, "-o")) open = atoi(v) != 0;
        else { fprintf(stderr, "bench_coll: unknown option %s\n", a); return 2; }
    }
    static char csv[MAX_CSV][128];
    int ncsv = 0;
    printf("# parity collectives, fp32 sum (and the exact xacc and open-sum all-reduces); %d CPUs; time = slowest "
           "rank's average per call\n", usable_cpus());
    printf("# %-16s %-6s %4s %10s %11s %11s %11s %6s\n", "coll", "algo", "ndev", "bytes", "time_us", "algbw_GB/s",
           "busbw_GB/s", "#wrong");
    for (int pass = 0; pass < 3; pass++) { /* the type: fp32, xacc, open sums */
        if ((pass == 1 && !xacc) || (pass == 2 && !open)) continue;
        for (int ci = 0; ci < (pass ? 1 : ncolls); ci++) {
            int coll = pass ? AR : colls[ci];
            for (int ai = 0; ai < nalgos; ai++) {
                for (int ni = 0; ni < nndev; ni++) {
                    job_t *j = calloc(1, sizeof *j);
                    j->coll = coll, j->type = pass, j->n = ndevs[ni], j->algo = (coll_algo_t)algos[ai];
                    j->row_seconds = row_seconds;
                    /* xacc: up to 1 MiB; open sums: up to 16 MiB */
                    size_t cap = pass == 1 ? ((size_t)1 << 20) : pass == 2 && max_bytes > ((size_t)16 << 20)
                                                                     ? ((size_t)16 << 20) : max_bytes;
                    for (size_t S = 4096; S <= cap && j->nsizes < MAX_SIZES; S *= 4) {
                        /* whole elements, a multiple of n blocks */
                        size_t es = pass == 1 ? sizeof(xacc_t) : pass == 2 ? sizeof(double) : 4;
                        size_t unit = es * (size_t)j->n;
                        j->sizes[j->nsizes++] = S / unit * unit;
                    }
                    int ranks[64];
                    for (int r = 0; r < j->n; r++) ranks[r] = r;
                    perr_t e;
                    j->g = group_create(ranks, j->n, "bench", &e);
                    if (!j->g || devices_run(j->n, 0, bench_main, j, &e) != 0) {
                        fprintf(stderr, "bench_coll: %s\n", e.msg);
                        return 1;
                    }
                    group_destroy(j->g);
                    const char *name = pass == 1 ? "all_reduce_xacc" : pass == 2 ? "all_reduce_open" : coll_names[coll];
                    double factor = coll_busbw_factor(coll_kinds[coll], j->n);
                    for (int si = 0; si < j->nsizes; si++) {
                        double S = (double)j->sizes[si], t = j->time_us[si];
                        double algbw = S / (t * 1e-6) / 1e9, busbw = algbw * factor;
                        printf("  %-16s %-6s %4d %10zu %11.2f %11.3f %11.3f %6ld\n", name, algo_names[algos[ai]], j->n,
                               j->sizes[si], t, algbw, busbw, j->wrong[si]);
                        if (ncsv < MAX_CSV)
                            snprintf(csv[ncsv++], sizeof csv[0], "CSV,%s,%s,%d,%zu,%.2f,%.3f,%.3f", name,
                                     algo_names[algos[ai]], j->n, j->sizes[si], t, algbw, busbw);
                    }
                    fflush(stdout);
                    free(j);
                }
            }
        }
    }
    for (int i = 0; i < ncsv; i++) puts(csv[i]);
    return 0;
}
