/* offload.c - the optimizer state off the device (DeepSpeed's ZeRO-Offload
 * and ZeRO-Infinity; pconfig.h's --offload-optimizer).
 *
 * cpu: the rank's AdamW shards come from a host arena of its own
 * (engine.c's buffer table marks them), so the device arena holds none;
 * the update reads and writes them there, with the same arithmetic.
 *
 * nvme: the shards live in one file per rank, <offload-path>/
 * parity-optim-rank<R>.bin, laid out [m: shard_len][v: shard_len] fp32.
 * The update reads a bucket's piece of m and v into two staging buffers
 * the size of the largest piece (the device's: bounded, whatever the
 * model), runs AdamW on them and writes them back before the next bucket:
 * real pread/pwrite, each one a span in the trace. Nothing in the file is
 * a checkpoint: a run killed mid-step leaves it half-updated and resumes
 * from its last --save, which the file never touches. Every I/O error
 * names the file and the errno (a full disk is ENOSPC).
 *
 * The values are the in-memory ones bit for bit (fp32 stored and loaded
 * as bytes), so offloading changes no result: tests/test_offload.sh.
 *
 * Test hook: PARITY_OFFLOAD_KILL_AFTER=N kills the process (SIGKILL) after
 * N piece writes, to prove that a crash mid-step loses nothing. */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "engine_internal.h"
#include "parity/numparse.h"

int engine_offload_env_check(perr_t *err) {
    const char *v = getenv("PARITY_OFFLOAD_KILL_AFTER");
    long long n;
    if (!v || !*v) return 0;
    return num_parse_int("PARITY_OFFLOAD_KILL_AFTER", v, 1, 1000000000LL, &n, err);
}

static int nvme(const engine_rank_t *r) { return r->sh->run->pc.offload == PC_OFFLOAD_NVME; }

int engine_offload_open(engine_rank_t *r) {
    r->off_fd = -1;
    r->off_path[0] = 0;
    if (!nvme(r)) return 0;
    const pconfig_t *pc = &r->sh->run->pc;
    snprintf(r->off_path, sizeof r->off_path, "%s/parity-optim-rank%d.bin", pc->offload_path,
             r->device);
    const size_t S = r->plan->shard_len;
    char msg[512];
    r->off_fd = open(r->off_path, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (r->off_fd < 0) {
        snprintf(msg, sizeof msg, "--offload-path: cannot create %s: %s", r->off_path,
                 strerror(errno));
        r->off_path[0] = 0;
        engine_fail(r->sh, msg);
        return -1;
    }
    /* the initial state, zeros, written for real: a disk that cannot hold
     * the state fails here, naming the file, before the first step */
    const size_t chunk = 1 << 16;
    float *zeros = calloc(chunk, sizeof(float));
    if (!zeros) {
        engine_fail(r->sh, "dp: out of memory (nvme offload)");
        return -1;
    }
    for (int which = 0; which < 2; which++)
        for (size_t o = 0; o < S; o += chunk)
            engine_offload_write(r, which, o, S - o < chunk ? S - o : chunk, zeros);
    free(zeros);
    return 0;
}

void engine_offload_close(engine_rank_t *r) {
    if (r->off_path[0] && r->off_fd >= 0) close(r->off_fd);
    r->off_path[0] = 0;
    r->off_fd = -1;
    arena_destroy(r->host_arena);
    r->host_arena = NULL;
}

/* The file's byte offset of state `which`'s element o. */
static off_t file_at(const engine_rank_t *r, int which, size_t o) {
    return (off_t)(((size_t)which * r->plan->shard_len + o) * sizeof(float));
}

void engine_offload_read(engine_rank_t *r, int which, size_t o, size_t n, float *buf) {
    const double t0 = engine_now();
    size_t done = 0;
    const size_t bytes = n * sizeof(float);
    while (done < bytes) {
        const ssize_t k = pread(r->off_fd, (char *)buf + done, bytes - done,
                                file_at(r, which, o) + (off_t)done);
        if (k <= 0)
            parity_fatal("device %d: nvme offload: reading %s: %s", r->device, r->off_path,
                         k < 0 ? strerror(errno) : "unexpected end of file");
        done += (size_t)k;
    }
    engine_span(r, which ? "offload read v" : "offload read m", "offload", t0, -1, -1);
}

void engine_offload_write(engine_rank_t *r, int which, size_t o, size_t n, const float *buf) {
    const double t0 = engine_now();
    size_t done = 0;
    const size_t bytes = n * sizeof(float);
    while (done < bytes) {
        const ssize_t k = pwrite(r->off_fd, (const char *)buf + done, bytes - done,
                                 file_at(r, which, o) + (off_t)done);
        if (k <= 0) /* ENOSPC: a full disk; the last checkpoint is another file, intact */
            parity_fatal("device %d: nvme offload: writing %s: %s", r->device, r->off_path,
                         k < 0 ? strerror(errno) : "nothing written");
        done += (size_t)k;
    }
    engine_span(r, which ? "offload write v" : "offload write m", "offload", t0, -1, -1);
}

void engine_offload_get(engine_rank_t *r, size_t o, size_t n, float **m, float **v) {
    if (!nvme(r)) {
        *m = r->shard_m + o, *v = r->shard_v + o;
        return;
    }
    engine_offload_read(r, 0, o, n, r->off_m);
    engine_offload_read(r, 1, o, n, r->off_v);
    *m = r->off_m, *v = r->off_v;
}

void engine_offload_put(engine_rank_t *r, size_t o, size_t n) {
    if (!nvme(r)) return;
    engine_offload_write(r, 0, o, n, r->off_m);
    engine_offload_write(r, 1, o, n, r->off_v);
    const char *kill_after = getenv("PARITY_OFFLOAD_KILL_AFTER"); /* checked at start-up */
    if (kill_after && *kill_after && ++r->off_writes >= atol(kill_after)) raise(SIGKILL);
}
