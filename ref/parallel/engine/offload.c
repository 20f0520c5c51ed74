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
 * being read into the other and bucket b-1's written back by the rank's
 * I/O thread (DeepSpeed's swapper double-buffers the same way; a thread of
 * our own rather than POSIX AIO, whose glibc helper threads ThreadSanitizer
 * cannot follow). Each transfer is a span in the trace, from its start to
 * its wait. Nothing in the file is
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
#include <pthread.h>
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

/* The rank's I/O thread and its two slots' jobs: a slot is queued (its
 * bucket's piece to read into it or write from it), then done. Jobs run in
 * the order queued; at most one a slot. */
enum { SLOT_IDLE, SLOT_QUEUED, SLOT_DONE };
typedef struct offload_io {
    pthread_t thread;
    pthread_mutex_t lock;
    pthread_cond_t cond;
    int started, stop;
    int state[2], write[2], order[2], next; /* order: the queue's slots, next: its length */
    size_t o[2], n[2];
    double t0[2];
} offload_io_t;

static int io_start(engine_rank_t *r);

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
    if (io_start(r)) {
        engine_fail(r->sh, "dp: cannot start the nvme offload's I/O thread");
        return -1;
    }
    return 0;
}

void engine_offload_close(engine_rank_t *r) {
    offload_io_t *io = r->off_io;
    if (io && io->started) { /* every job is done: engine_offload_end waited */
        pthread_mutex_lock(&io->lock);
        io->stop = 1;
        pthread_cond_broadcast(&io->cond);
        pthread_mutex_unlock(&io->lock);
        pthread_join(io->thread, NULL);
        pthread_mutex_destroy(&io->lock);
        pthread_cond_destroy(&io->cond);
    }
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

/* n values of state `which` at shard offset o between the file and buf,
 * synchronously; any failure names the file (ENOSPC: a full disk; the last
 * checkpoint is another file, intact). */
static void transfer(engine_rank_t *r, int write, int which, size_t o, size_t n, float *buf) {
    size_t done = 0;
    const size_t bytes = n * sizeof(float);
    while (done < bytes) {
        const off_t at = file_at(r, which, o) + (off_t)done;
        const ssize_t k = write ? pwrite(r->off_fd, (const char *)buf + done, bytes - done, at)
                                : pread(r->off_fd, (char *)buf + done, bytes - done, at);
        if (k <= 0)
            parity_fatal("device %d: nvme offload: %s %s: %s", r->device,
                         write ? "writing" : "reading", r->off_path,
                         k < 0 ? strerror(errno) : write ? "nothing written" : "unexpected end of file");
        done += (size_t)k;
    }
}

void engine_offload_read(engine_rank_t *r, int which, size_t o, size_t n, float *buf) {
    const double t0 = engine_now();
    transfer(r, 0, which, o, n, buf);
    engine_span(r, which ? "offload read v" : "offload read m", "offload", t0, -1, -1);
}

void engine_offload_write(engine_rank_t *r, int which, size_t o, size_t n, const float *buf) {
    const double t0 = engine_now();
    transfer(r, 1, which, o, n, (float *)(uintptr_t)buf);
    engine_span(r, which ? "offload write v" : "offload write m", "offload", t0, -1, -1);
}

/* ---- the update's double-buffered transfers ------------------------------ */

static float *slot_of(const engine_rank_t *r, int which, int slot) {
    return (which ? r->off_v : r->off_m) + (size_t)slot * r->off_slot;
}

/* The I/O thread: each queued slot's m and v, in the order queued. */
static void *io_main(void *arg) {
    engine_rank_t *r = arg;
    offload_io_t *io = r->off_io;
    pthread_mutex_lock(&io->lock);
    for (;;) {
        while (!io->stop && !io->next) pthread_cond_wait(&io->cond, &io->lock);
        if (!io->next) break;
        const int slot = io->order[0];
        const int write = io->write[slot];
        const size_t o = io->o[slot], n = io->n[slot];
        pthread_mutex_unlock(&io->lock);
        for (int which = 0; which < 2; which++) transfer(r, write, which, o, n, slot_of(r, which, slot));
        pthread_mutex_lock(&io->lock);
        io->order[0] = io->order[1], io->next--;
        io->state[slot] = SLOT_DONE;
        pthread_cond_broadcast(&io->cond);
    }
    pthread_mutex_unlock(&io->lock);
    return NULL;
}

/* Queues bucket b's read (write: 0) or write of its slot b % 2. */
static void start(engine_rank_t *r, int b, int write) {
    offload_io_t *io = r->off_io;
    const int slot = b % 2;
    size_t lo, hi;
    dp_piece(r->plan, b, engine_bucket_rank(r, b), &lo, &hi);
    pthread_mutex_lock(&io->lock);
    io->o[slot] = r->plan->buckets[b].shard_off, io->n[slot] = hi - lo;
    io->write[slot] = write, io->t0[slot] = engine_now();
    io->state[slot] = SLOT_QUEUED;
    io->order[io->next++] = slot;
    pthread_cond_broadcast(&io->cond);
    pthread_mutex_unlock(&io->lock);
}

/* Waits for slot's job, if one was queued. */
static void finish(engine_rank_t *r, int slot) {
    offload_io_t *io = r->off_io;
    pthread_mutex_lock(&io->lock);
    const int queued = io->state[slot] != SLOT_IDLE, write = io->write[slot];
    while (io->state[slot] == SLOT_QUEUED) pthread_cond_wait(&io->cond, &io->lock);
    io->state[slot] = SLOT_IDLE;
    const double t0 = io->t0[slot];
    pthread_mutex_unlock(&io->lock);
    if (queued) engine_span(r, write ? "offload write m, v" : "offload read m, v", "offload", t0, -1, -1);
}

static int io_start(engine_rank_t *r) {
    offload_io_t *io = r->off_io;
    pthread_mutex_init(&io->lock, NULL);
    pthread_cond_init(&io->cond, NULL);
    if (pthread_create(&io->thread, NULL, io_main, r)) return -1;
    io->started = 1;
    return 0;
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
