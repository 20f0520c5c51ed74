/* offload.c - the optimizer state off the device (DeepSpeed's ZeRO-Offload
 * and ZeRO-Infinity; pconfig.h's --offload-optimizer).
 *
 * cpu: the rank's AdamW shards come from a host arena of its own
 * (engine.c's buffer table marks them), so the device arena holds none;
 * the update reads and writes them there, with the same arithmetic.
 *
 * nvme: the shards live in one file per rank, <offload-path>/
 * parity-optim-rank<R>.bin, laid out [m: shard_len][v: shard_len] fp32.
 * The update goes bucket by bucket through two staging slots, each the
 * size of the largest piece of m and v (the device's: bounded, whatever
 * the model): while bucket b's slot is updated, bucket b+1's piece is
 * being read into the other and bucket b-1's written back, with POSIX
 * asynchronous I/O (DeepSpeed's swapper double-buffers the same way).
 * Each transfer is a span in the trace, from its start to its wait. Nothing in the file is
 * a checkpoint: a run killed mid-step leaves it half-updated and resumes
 * from its last --save, which the file never touches. Every I/O error
 * names the file and the errno (a full disk is ENOSPC).
 *
 * The values are the in-memory ones bit for bit (fp32 stored and loaded
 * as bytes), so offloading changes no result: tests/test_offload.sh.
 *
 * Test hook: PARITY_OFFLOAD_KILL_AFTER=N kills the process (SIGKILL) after
 * N piece writes, to prove that a crash mid-step loses nothing. */
#include <aio.h>
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
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

/* One slot's two transfers in flight (m and v), and what they move. */
typedef struct offload_io {
    struct aiocb cb[2][2]; /* [slot][which] */
    int busy[2];           /* 0 idle, 1 reading, 2 writing */
    double t0[2];
} offload_io_t;

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
    size_t piece_max = 0;
    for (int b = 0; b < r->plan->nbuckets; b++)
        if (r->plan->buckets[b].piece > piece_max) piece_max = r->plan->buckets[b].piece;
    r->off_slot = piece_max + 1; /* engine_rank_buffers' staging: two slots of this */
    if (!(r->off_io = calloc(1, sizeof *r->off_io))) {
        engine_fail(r->sh, "dp: out of memory (nvme offload)");
        return -1;
    }
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
    free(r->off_io);
    r->off_io = NULL;
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

/* ---- the update's double-buffered transfers ------------------------------ */

static void piece(const engine_rank_t *r, int b, size_t *o, size_t *n) {
    size_t lo, hi;
    dp_piece(r->plan, b, engine_bucket_rank(r, b), &lo, &hi);
    *o = r->plan->buckets[b].shard_off, *n = hi - lo;
}

static float *slot_of(const engine_rank_t *r, int which, int slot) {
    return (which ? r->off_v : r->off_m) + (size_t)slot * r->off_slot;
}

/* Starts bucket b's read (write: 0) or write of its slot b % 2. */
static void start(engine_rank_t *r, int b, int write) {
    offload_io_t *io = r->off_io;
    const int slot = b % 2;
    size_t o, n;
    piece(r, b, &o, &n);
    for (int which = 0; which < 2; which++) {
        struct aiocb *cb = &io->cb[slot][which];
        memset(cb, 0, sizeof *cb);
        cb->aio_fildes = r->off_fd;
        cb->aio_buf = slot_of(r, which, slot);
        cb->aio_nbytes = n * sizeof(float);
        cb->aio_offset = file_at(r, which, o);
        cb->aio_sigevent.sigev_notify = SIGEV_NONE;
        if ((write ? aio_write(cb) : aio_read(cb)) != 0)
            parity_fatal("device %d: nvme offload: %s %s: %s", r->device,
                         write ? "writing" : "reading", r->off_path, strerror(errno));
    }
    io->busy[slot] = write ? 2 : 1, io->t0[slot] = engine_now();
}

/* Waits for slot's transfers; a short one is finished synchronously (a
 * regular file returns short only at its end or on a full disk). */
static void finish(engine_rank_t *r, int slot) {
    offload_io_t *io = r->off_io;
    if (!io->busy[slot]) return;
    const int write = io->busy[slot] == 2;
    for (int which = 0; which < 2; which++) {
        struct aiocb *cb = &io->cb[slot][which];
        const struct aiocb *list[1] = {cb};
        int e;
        while ((e = aio_error(cb)) == EINPROGRESS) aio_suspend(list, 1, NULL);
        const ssize_t got = aio_return(cb);
        if (e || got < 0)
            parity_fatal("device %d: nvme offload: %s %s: %s", r->device,
                         write ? "writing" : "reading", r->off_path, strerror(e ? e : errno));
        const size_t rest = cb->aio_nbytes - (size_t)got, at = (size_t)got / sizeof(float);
        if (rest) { /* the rest, synchronously: it reports the real error */
            const size_t o = ((size_t)cb->aio_offset / sizeof(float)) - (size_t)which * r->plan->shard_len;
            float *buf = (float *)(uintptr_t)cb->aio_buf;
            if (write) engine_offload_write(r, which, o + at, rest / sizeof(float), buf + at);
            else engine_offload_read(r, which, o + at, rest / sizeof(float), buf + at);
        }
    }
    engine_span(r, write ? "offload write m, v" : "offload read m, v", "offload", io->t0[slot], -1, -1);
    io->busy[slot] = 0;
}

void engine_offload_begin(engine_rank_t *r) {
    if (!nvme(r) || !r->plan->nbuckets) return;
    start(r, 0, 0);
}

void engine_offload_get(engine_rank_t *r, int b, float **m, float **v) {
    if (!nvme(r)) {
        const size_t o = r->plan->buckets[b].shard_off;
        *m = r->shard_m + o, *v = r->shard_v + o;
        return;
    }
    finish(r, b % 2); /* bucket b's read */
    if (b + 1 < r->plan->nbuckets) { /* the next one's, behind this one's update */
        finish(r, (b + 1) % 2);      /* bucket b-1's write, from that slot */
        start(r, b + 1, 0);
    }
    *m = slot_of(r, 0, b % 2), *v = slot_of(r, 1, b % 2);
}

void engine_offload_put(engine_rank_t *r, int b) {
    if (!nvme(r)) return;
    start(r, b, 1);
    const char *kill_after = getenv("PARITY_OFFLOAD_KILL_AFTER"); /* checked at start-up */
    if (kill_after && *kill_after && ++r->off_writes >= atol(kill_after)) raise(SIGKILL);
}

void engine_offload_end(engine_rank_t *r) {
    if (!nvme(r)) return;
    finish(r, 0);
    finish(r, 1);
}
