/* offload.c - the optimizer state off the device (DeepSpeed's ZeRO-Offload
 * and ZeRO-Infinity; pconfig.h's --offload-optimizer).
 *
 * cpu: the rank's AdamW shards come from a host arena of its own
 * (engine.c's buffer table marks them), so the device arena holds none;
 * the update reads and writes them there, with the same arithmetic.
 *
 * nvme: the shards live in one file per rank, laid out [m: shard_len]
 * [v: shard_len] fp32 (adamw8bit: [m codes: shard_len bytes][v codes]
 * [m absmax: shard_qlen fp32][v absmax], the whole 8-bit state, read and
 * written bucket by bucket as fp32's is), <offload-path>/parity-offload-<pid>-XXXXXX/
 * parity-optim-rank<R>.bin: inside a directory of the run's own, made
 * exclusively (mkdtemp, 0700), each file created O_EXCL | O_NOFOLLOW, so
 * no file of the user's and no link is ever written through; a lock in
 * --offload-path refuses a second run there, naming the holder; all of
 * it is removed when the run ends, however it ends but SIGKILL, whose
 * leftovers the next run in the directory removes (engine_offload_claim).
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
 * as bytes), so offloading changes no result: tests/layouts/test_offload.sh.
 *
 * Test hook: PARITY_OFFLOAD_KILL_AFTER=N kills the process (SIGKILL) after
 * N piece writes, to prove that a crash mid-step loses nothing. */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <stdint.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include "engine_internal.h"
#include "parity/fileio.h"
#include "parity/numparse.h"

int engine_offload_env_check(perr_t *err) {
    const char *v = getenv("PARITY_OFFLOAD_KILL_AFTER");
    long long n;
    if (!v || !*v) return 0;
    return num_parse_int("PARITY_OFFLOAD_KILL_AFTER", v, 1, 1000000000LL, &n, err);
}

/* ---- the run's own place in --offload-path ------------------------------ */

/* The lock is a file in --offload-path, parity-offload.lock, one a
 * process (mpirun refuses offload: layout_cli.c), held with flock: the kernel
 * drops it when its holder dies, however it dies, so a lock is never
 * stale while its holder lives, and never held by a dead one. It holds
 * the holder's record, for the message a second run prints. A record in
 * a file nobody holds was left by a run that could not clean up
 * (SIGKILL): that run's directory is removed and the lock taken over,
 * with a note. A file of that name that holds no record is the user's
 * (or a run's killed as it started): refused, never overwritten. */
#define LOCK_MAGIC "parity offload lock\n"
#define OWN_PREFIX "parity-offload-"

static struct {
    pthread_mutex_t mu; /* a rank's file creation against the release (a fatal exit's atexit) */
    int held, fd, lock_slot, dir_slot, atexit_done;
    char path[256];     /* --offload-path as given */
    char lock[320], dir[320];
} own = {.mu = PTHREAD_MUTEX_INITIALIZER, .fd = -1, .lock_slot = -1, .dir_slot = -1};

typedef struct {
    long pid;
    char host[256], dir[256]; /* dir: a name in --offload-path, OWN_PREFIX... */
} holder_t;

/* The lock file's record: 0 with *h, or -1 when it holds none. */
static int record_read(int fd, holder_t *h) {
    char text[1024];
    const ssize_t n = pread(fd, text, sizeof text - 1, 0);
    text[n > 0 ? n : 0] = 0;
    const size_t m = strlen(LOCK_MAGIC);
    if (strncmp(text, LOCK_MAGIC, m) ||
        sscanf(text + m, "pid %ld host %255s dir %255s", &h->pid, h->host, h->dir) != 3)
        return -1;
    /* the directory a takeover removes: only a run's own, in --offload-path */
    return strncmp(h->dir, OWN_PREFIX, strlen(OWN_PREFIX)) || strchr(h->dir, '/') ? -1 : 0;
}

static int record_write(int fd) {
    char host[256] = "?", text[1024];
    if (gethostname(host, sizeof host - 1) || !host[0]) snprintf(host, sizeof host, "?");
    const char *base = strrchr(own.dir, '/') + 1;
    const int n = snprintf(text, sizeof text, LOCK_MAGIC "pid %ld\nhost %s\ndir %s\n",
                           (long)getpid(), host, base);
    return ftruncate(fd, 0) || pwrite(fd, text, (size_t)n, 0) != n ? -1 : 0;
}

/* A dead holder's leftovers: its directory (its files) removed, a note. */
static void stale_clear(const holder_t *h) {
    char stale[PATH_MAX + 256];
    snprintf(stale, sizeof stale, "%s/%s", own.path, h->dir);
    struct stat sb;
    const int there = lstat(stale, &sb) == 0;
    if (there && S_ISDIR(sb.st_mode) && sb.st_uid == geteuid()) pio_scratch_dir_remove(stale);
    const int left = lstat(stale, &sb) == 0;
    fprintf(stderr, "parity: note: --offload-path '%s': taking over the lock %s left by pid %ld "
                    "on host %s, which ended without removing it (killed?); %s%s%s\n",
            own.path, own.lock, h->pid, h->host,
            !there ? "its directory is gone: " : left ? "could not remove its directory " :
                                                        "removed its directory ",
            stale, left ? " (remove it by hand)" : "");
}

/* Takes the lock (own.fd) and writes this run's record: 0, or -1 naming
 * the holder, or the file that is in the way. A file without a record
 * is, for a moment, a run's that is starting (created, then locked, then
 * written): tried again for a second before it is called in the way. */
static int lock_take(perr_t *err) {
    for (int tries = 0; tries < 100; tries++) {
        if (tries) usleep(10000);
        int created = 1;
        int fd = open(own.lock, O_RDWR | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644);
        if (fd < 0 && errno == EEXIST) {
            created = 0; /* O_NONBLOCK: a FIFO of that name is refused below, not waited on */
            fd = open(own.lock, O_RDWR | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
            if (fd < 0 && errno == ENOENT) continue; /* its holder just removed it */
        }
        if (fd < 0)
            return perr_set(err, "--offload-path '%s': %s: %s", own.path, own.lock,
                            errno == ELOOP ? "a symbolic link; parity follows no link in "
                                             "--offload-path (remove it)"
                                           : strerror(errno));
        struct stat fs, ls;
        holder_t h;
        if (fstat(fd, &fs) || !S_ISREG(fs.st_mode)) {
            close(fd);
            return perr_set(err, "--offload-path '%s': %s exists and is not a regular file; "
                                 "parity replaces nothing in --offload-path (remove it)",
                            own.path, own.lock);
        }
        /* a file this run created is held by others only for the moment
         * they look at it (it has no record yet): wait for them, so that
         * two runs starting together cannot both give up on it */
        if (flock(fd, created ? LOCK_EX : LOCK_EX | LOCK_NB)) {
            const int e = errno, known = record_read(fd, &h) == 0;
            if (created) unlink(own.lock); /* never left behind without a record */
            close(fd);
            if (e != EWOULDBLOCK)
                return perr_set(err, "--offload-path '%s': cannot lock %s: %s", own.path,
                                own.lock, strerror(e));
            if (!known) continue; /* its holder is writing its record */
            return perr_set(err, "--offload-path '%s': in use by another parity run, pid %ld "
                                 "on host %s (it holds %s; its files are in %s/%s): two runs "
                                 "there would share the directory, so this one does not start; "
                                 "give another --offload-path or wait for it to end",
                            own.path, h.pid, h.host, own.lock, own.path, h.dir);
        }
        if (lstat(own.lock, &ls) || ls.st_dev != fs.st_dev || ls.st_ino != fs.st_ino) {
            close(fd); /* its last holder removed it as we opened it: a fresh one */
            continue;
        }
        if (!created && record_read(fd, &h)) {
            close(fd); /* a run's that is starting, or not a lock at all */
            continue;
        }
        if (!created) stale_clear(&h);
        if (record_write(fd)) {
            const int e = errno;
            if (created) unlink(own.lock);
            close(fd);
            return perr_set(err, "--offload-path '%s': cannot write the lock %s: %s", own.path,
                            own.lock, strerror(e));
        }
        own.fd = fd;
        return 0;
    }
    return perr_set(err, "--offload-path '%s': %s exists and holds no record of a parity run "
                         "(a file of yours, or left by a run killed as it started): parity "
                         "overwrites nothing it did not create; remove it or give another "
                         "--offload-path", own.path, own.lock);
}

int engine_offload_claimed(void) { return own.held; }

int engine_offload_claim(const char *dir, perr_t *err) {
    if (own.held)
        return strcmp(own.path, dir) ? perr_set(err, "--offload-path '%s': this process holds "
                                                     "'%s' already", dir, own.path)
                                     : 0;
    if (pio_check_dir(dir, "--offload-path", err)) return -1;
    if (strlen(dir) >= sizeof own.path)
        return perr_set(err, "--offload-path: longer than %zu bytes", sizeof own.path - 1);
    /* no signal while the registry and the files disagree: one that comes
     * meanwhile is handled after, with everything made registered */
    sigset_t old;
    pio_block_cleanup_signals(&old);
    int rc = -1;
    snprintf(own.path, sizeof own.path, "%s", dir);
    snprintf(own.lock, sizeof own.lock, "%s/parity-offload.lock", dir);
    snprintf(own.dir, sizeof own.dir, "%s/" OWN_PREFIX "%ld-XXXXXX", dir, (long)getpid());
    if (!mkdtemp(own.dir)) {
        perr_set(err, "--offload-path '%s': cannot create a directory in it: %s", dir,
                 strerror(errno));
        goto done;
    }
    own.dir_slot = pio_scratch_dir_claim(own.dir);
    if (lock_take(err)) {
        pio_scratch_dir_remove(own.dir);
        pio_scratch_dir_release(own.dir_slot);
        own.dir_slot = -1;
        goto done;
    }
    own.lock_slot = pio_scratch_file_claim(own.lock);
    own.held = 1;
    if (!own.atexit_done && atexit(engine_offload_release) == 0) own.atexit_done = 1;
    rc = 0;
done:
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    return rc;
}

void engine_offload_release(void) {
    pthread_mutex_lock(&own.mu);
    if (own.held) { /* the directory first: the lock, gone, lets the next run in */
        pio_scratch_dir_remove(own.dir);
        pio_scratch_dir_release(own.dir_slot);
        unlink(own.lock);
        pio_scratch_file_release(own.lock_slot);
        close(own.fd);
        own.held = 0, own.fd = own.dir_slot = own.lock_slot = -1;
    }
    pthread_mutex_unlock(&own.mu);
}

/* Creates device's file in the run's directory, exclusively: the fd, or
 * -1 with errno (no directory claimed, or released by an exit under way:
 * ENOENT). */
static int own_file_open(int device, char *path, size_t cap) {
    int fd = -1;
    pthread_mutex_lock(&own.mu);
    if (own.held) {
        snprintf(path, cap, "%s/parity-optim-rank%d.bin", own.dir, device);
        fd = open(path, O_RDWR | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
    } else {
        snprintf(path, cap, "%s/parity-optim-rank%d.bin", own.path, device);
        errno = ENOENT;
    }
    pthread_mutex_unlock(&own.mu);
    return fd;
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
    int bucket[2];
    double t0[2];
} offload_io_t;

static int io_start(engine_rank_t *r);
static void xfer(engine_rank_t *r, int write, off_t from, size_t bytes, void *buf);

static int nvme(const engine_rank_t *r) { return r->sh->run->pc.offload == PC_OFFLOAD_NVME; }

/* A slot holds bucket b's piece of m (or v): fp32 values, or adamw8bit's
 * codes (a byte an element, rounded up to floats) then its absmax entries. */
static size_t codes_floats(const dp_plan_t *p) {
    size_t piece_max = 0;
    for (int b = 0; b < p->nbuckets; b++)
        if (p->buckets[b].piece > piece_max) piece_max = p->buckets[b].piece;
    return p->qblock ? piece_max / sizeof(float) + 1 : piece_max + 1;
}

size_t engine_offload_slot_floats(const dp_plan_t *p) {
    size_t q_max = 0;
    for (int b = 0; p->qblock && b < p->nbuckets; b++)
        if (p->buckets[b].qpiece > q_max) q_max = p->buckets[b].qpiece;
    return codes_floats(p) + q_max;
}

/* The file's bytes: fp32 m and v, or the 8-bit codes and absmax. */
static size_t file_bytes(const dp_plan_t *p) {
    return p->qblock ? 2 * p->shard_len + 2 * p->shard_qlen * sizeof(float)
                     : 2 * p->shard_len * sizeof(float);
}

int engine_offload_open(engine_rank_t *r) {
    r->off.fd = -1;
    r->off.path[0] = 0;
    if (!nvme(r)) return 0;
    const size_t S = file_bytes(r->plan);
    char msg[1024];
    /* engine_rank_buffers' staging: two slots of this */
    r->off.slot = engine_offload_slot_floats(r->plan), r->off.qoff = codes_floats(r->plan);
    if (!(r->off.io = calloc(1, sizeof *r->off.io))) {
        engine_fail(r->sh, "dp: out of memory (nvme offload)");
        return -1;
    }
    r->off.fd = own_file_open(r->device, r->off.path, sizeof r->off.path);
    if (r->off.fd < 0) {
        snprintf(msg, sizeof msg, "--offload-path: cannot create %s: %s", r->off.path,
                 strerror(errno));
        r->off.path[0] = 0;
        engine_fail(r->sh, msg);
        return -1;
    }
    /* the initial state, zeros, written for real: a disk that cannot hold
     * the state fails here, naming the file, before the first step */
    const size_t chunk = 1 << 18;
    char *zeros = calloc(chunk, 1);
    if (!zeros) {
        engine_fail(r->sh, "dp: out of memory (nvme offload)");
        return -1;
    }
    /* (zero codes and absmax are adamw8bit's initial state too) */
    const double t0 = engine_now();
    for (size_t o = 0; o < S; o += chunk) xfer(r, 1, (off_t)o, S - o < chunk ? S - o : chunk, zeros);
    engine_span(r, "offload write m, v", "offload", t0, -1, -1);
    free(zeros);
    if (io_start(r)) {
        engine_fail(r->sh, "dp: cannot start the nvme offload's I/O thread");
        return -1;
    }
    return 0;
}

void engine_offload_close(engine_rank_t *r) {
    offload_io_t *io = r->off.io;
    if (io && io->started) { /* every job is done: engine_offload_end waited */
        pthread_mutex_lock(&io->lock);
        io->stop = 1;
        pthread_cond_broadcast(&io->cond);
        pthread_mutex_unlock(&io->lock);
        pthread_join(io->thread, NULL);
        pthread_mutex_destroy(&io->lock);
        pthread_cond_destroy(&io->cond);
    }
    if (r->off.path[0] && r->off.fd >= 0) { /* scratch: gone with the run */
        close(r->off.fd);
        unlink(r->off.path);
    }
    free(r->off.io);
    r->off.io = NULL;
    r->off.path[0] = 0;
    r->off.fd = -1;
    arena_destroy(r->off.host_arena);
    r->off.host_arena = NULL;
}

/* The file's byte offset of fp32 state `which`'s element o. */
static off_t file_at(const engine_rank_t *r, int which, size_t o) {
    return (off_t)(((size_t)which * r->plan->shard_len + o) * sizeof(float));
}
/* adamw8bit: state `which`'s code of element o, its absmax entry q. */
static off_t code_at(const engine_rank_t *r, int which, size_t o) {
    return (off_t)((size_t)which * r->plan->shard_len + o);
}
static off_t absmax_at(const engine_rank_t *r, int which, size_t q) {
    const dp_plan_t *p = r->plan;
    return (off_t)(2 * p->shard_len + ((size_t)which * p->shard_qlen + q) * sizeof(float));
}

/* bytes at file offset `from` between the file and buf, synchronously;
 * any failure names the file (ENOSPC: a full disk; the last checkpoint is
 * another file, intact). */
static void xfer(engine_rank_t *r, int write, off_t from, size_t bytes, void *buf) {
    size_t done = 0;
    while (done < bytes) {
        const off_t at = from + (off_t)done;
        const ssize_t k = write ? pwrite(r->off.fd, (const char *)buf + done, bytes - done, at)
                                : pread(r->off.fd, (char *)buf + done, bytes - done, at);
        if (k <= 0)
            parity_fatal("device %d: nvme offload: %s %s: %s", r->device,
                         write ? "writing" : "reading", r->off.path,
                         k < 0 ? strerror(errno) : write ? "nothing written" : "unexpected end of file");
        done += (size_t)k;
    }
}

/* n values of fp32 state `which` at shard offset o. */
static void transfer(engine_rank_t *r, int write, int which, size_t o, size_t n, float *buf) {
    xfer(r, write, file_at(r, which, o), n * sizeof(float), buf);
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
    return (which ? r->off.v : r->off.m) + (size_t)slot * r->off.slot;
}

static engine_adam8_piece_t slot_piece8(const engine_rank_t *r, int slot) {
    float *m = slot_of(r, 0, slot), *v = slot_of(r, 1, slot);
    return (engine_adam8_piece_t){(uint8_t *)m, (uint8_t *)v, m + r->off.qoff, v + r->off.qoff};
}

/* Bucket b's piece of m and v between the file and a slot: fp32 values,
 * or adamw8bit's codes and the piece's absmax entries. */
static void slot_io(engine_rank_t *r, int write, int slot, int b) {
    const dp_plan_t *p = r->plan;
    const dp_bucket_t *bk = &p->buckets[b];
    size_t lo, hi;
    dp_piece(p, b, engine_bucket_rank(r, b), &lo, &hi);
    for (int which = 0; which < 2; which++) {
        float *s = slot_of(r, which, slot);
        if (!p->qblock) {
            transfer(r, write, which, bk->shard_off, hi - lo, s);
            continue;
        }
        xfer(r, write, code_at(r, which, bk->shard_off), hi - lo, s);
        xfer(r, write, absmax_at(r, which, bk->qshard_off), bk->qpiece * sizeof(float),
             s + r->off.qoff);
    }
}

/* The I/O thread: each queued slot's m and v, in the order queued. */
static void *io_main(void *arg) {
    engine_rank_t *r = arg;
    offload_io_t *io = r->off.io;
    pthread_mutex_lock(&io->lock);
    for (;;) {
        while (!io->stop && !io->next) pthread_cond_wait(&io->cond, &io->lock);
        if (!io->next) break;
        const int slot = io->order[0];
        const int write = io->write[slot], b = io->bucket[slot];
        pthread_mutex_unlock(&io->lock);
        slot_io(r, write, slot, b);
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
    offload_io_t *io = r->off.io;
    const int slot = b % 2;
    pthread_mutex_lock(&io->lock);
    io->bucket[slot] = b;
    io->write[slot] = write, io->t0[slot] = engine_now();
    io->state[slot] = SLOT_QUEUED;
    io->order[io->next++] = slot;
    pthread_cond_broadcast(&io->cond);
    pthread_mutex_unlock(&io->lock);
}

/* Waits for slot's job, if one was queued. */
static void finish(engine_rank_t *r, int slot) {
    offload_io_t *io = r->off.io;
    pthread_mutex_lock(&io->lock);
    const int queued = io->state[slot] != SLOT_IDLE, write = io->write[slot];
    while (io->state[slot] == SLOT_QUEUED) pthread_cond_wait(&io->cond, &io->lock);
    io->state[slot] = SLOT_IDLE;
    const double t0 = io->t0[slot];
    pthread_mutex_unlock(&io->lock);
    if (queued) engine_span(r, write ? "offload write m, v" : "offload read m, v", "offload", t0, -1, -1);
}

static int io_start(engine_rank_t *r) {
    offload_io_t *io = r->off.io;
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

/* nvme: bucket b's read done, the next one's started behind it. */
static void slot_ready(engine_rank_t *r, int b) {
    finish(r, b % 2); /* bucket b's read */
    if (b + 1 < r->plan->nbuckets) { /* the next one's, behind this one's update */
        finish(r, (b + 1) % 2);      /* bucket b-1's write, from that slot */
        start(r, b + 1, 0);
    }
}

void engine_offload_get(engine_rank_t *r, int b, float **m, float **v) {
    if (!nvme(r)) {
        const size_t o = r->plan->buckets[b].shard_off;
        *m = r->shard_m + o, *v = r->shard_v + o;
        return;
    }
    slot_ready(r, b);
    *m = slot_of(r, 0, b % 2), *v = slot_of(r, 1, b % 2);
}

static engine_adam8_piece_t shard_piece8(const engine_rank_t *r, int b) {
    const size_t o = r->plan->buckets[b].shard_off, q = r->plan->buckets[b].qshard_off;
    return (engine_adam8_piece_t){r->shard_mq + o, r->shard_vq + o, r->shard_ma + q, r->shard_va + q};
}

engine_adam8_piece_t engine_offload_get8(engine_rank_t *r, int b) {
    if (!nvme(r)) return shard_piece8(r, b);
    slot_ready(r, b);
    return slot_piece8(r, b % 2);
}

engine_adam8_piece_t engine_offload_load8(engine_rank_t *r, int b) {
    if (!nvme(r)) return shard_piece8(r, b);
    const double t0 = engine_now();
    slot_io(r, 0, 0, b);
    engine_span(r, "offload read m, v (8-bit)", "offload", t0, -1, -1);
    return slot_piece8(r, 0);
}

void engine_offload_store8(engine_rank_t *r, int b) {
    if (!nvme(r)) return;
    const double t0 = engine_now();
    slot_io(r, 1, 0, b);
    engine_span(r, "offload write m, v (8-bit)", "offload", t0, -1, -1);
}

void engine_offload_put(engine_rank_t *r, int b) {
    if (!nvme(r)) return;
    start(r, b, 1);
    const char *kill_after = getenv("PARITY_OFFLOAD_KILL_AFTER"); /* checked at start-up */
    if (kill_after && *kill_after && ++r->off.writes >= atol(kill_after)) raise(SIGKILL);
}

void engine_offload_end(engine_rank_t *r) {
    if (!nvme(r)) return;
    finish(r, 0);
    finish(r, 1);
}
