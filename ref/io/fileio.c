/* fileio.c - regular-file inputs and all-or-nothing outputs (fileio.h). */
#include "parity/fileio.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

static const char *kind_of(mode_t m) {
    if (S_ISDIR(m)) return "a directory";
    if (S_ISFIFO(m)) return "a FIFO";
    if (S_ISCHR(m)) return "a character device";
    if (S_ISBLK(m)) return "a block device";
    if (S_ISSOCK(m)) return "a socket";
    return "not a regular file";
}

FILE *pio_open_input(const char *path, const char *what, long long *size, perr_t *err) {
    /* O_NONBLOCK: opening a FIFO without a writer would otherwise wait
     * forever, before fstat could tell us what it is */
    int fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
    if (fd < 0) {
        perr_set(err, "%s '%s': cannot open: %s", what, path, strerror(errno));
        return NULL;
    }
    struct stat sb;
    if (fstat(fd, &sb)) {
        perr_set(err, "%s '%s': cannot stat: %s", what, path, strerror(errno));
        close(fd);
        return NULL;
    }
    if (!S_ISREG(sb.st_mode)) {
        perr_set(err, "%s '%s': not a regular file (%s)", what, path, kind_of(sb.st_mode));
        close(fd);
        return NULL;
    }
    int fl = fcntl(fd, F_GETFL);
    FILE *f = fl >= 0 && fcntl(fd, F_SETFL, fl & ~O_NONBLOCK) == 0 ? fdopen(fd, "rb") : NULL;
    if (!f) {
        perr_set(err, "%s '%s': cannot open: %s", what, path, strerror(errno));
        close(fd);
        return NULL;
    }
    if (size) *size = (long long)sb.st_size;
    return f;
}

char *pio_read_text(const char *path, const char *what, size_t max_bytes, size_t *len, perr_t *err) {
    FILE *f = pio_open_input(path, what, NULL, err);
    if (!f) return NULL;
    char *text = NULL;
    size_t n = 0, cap = 0;
    for (;;) {
        if (n + 4096 + 1 > cap) {
            cap = cap ? 2 * cap : 8192;
            char *grown = realloc(text, cap);
            if (!grown) {
                free(text);
                fclose(f);
                perr_set(err, "%s '%s': out of memory", what, path);
                return NULL;
            }
            text = grown;
        }
        size_t got = fread(text + n, 1, cap - n - 1, f);
        n += got;
        if (n > max_bytes) {
            free(text);
            fclose(f);
            perr_set(err, "%s '%s': larger than %zu bytes", what, path, max_bytes);
            return NULL;
        }
        if (got == 0) break;
    }
    const int bad = ferror(f);
    fclose(f);
    if (bad) {
        free(text);
        perr_set(err, "%s '%s': read error", what, path);
        return NULL;
    }
    text[n] = 0;
    *len = n;
    return text;
}

/* ---- outputs ------------------------------------------------------------- */

/* The directory part of path ("." when it has none) and the last name. */
static void split_path(const char *path, char *dir, size_t cap, const char **base) {
    const char *slash = strrchr(path, '/');
    if (!slash) {
        snprintf(dir, cap, ".");
        *base = path;
    } else if (slash == path) {
        snprintf(dir, cap, "/");
        *base = slash + 1;
    } else {
        snprintf(dir, cap, "%.*s", (int)(slash - path), path);
        *base = slash + 1;
    }
}

/* The file an output path will replace: symbolic links followed, the
 * target (if it exists) a regular file. Returns a malloc'd path. */
static char *resolve_output(const char *path, const char *what, perr_t *err) {
    if (!path || !*path) {
        perr_set(err, "%s: empty file name", what);
        return NULL;
    }
    char dir[PATH_MAX];
    const char *base;
    split_path(path, dir, sizeof dir, &base);
    if (!*base || !strcmp(base, ".") || !strcmp(base, "..")) {
        perr_set(err, "%s '%s': names a directory, expected a file name", what, path);
        return NULL;
    }
    struct stat sb;
    if (lstat(path, &sb) == 0) {
        if (S_ISLNK(sb.st_mode)) {
            char *real = realpath(path, NULL);
            if (!real) {
                perr_set(err, "%s '%s': a symbolic link that cannot be followed: %s", what, path,
                         strerror(errno));
                return NULL;
            }
            if (stat(real, &sb) || !S_ISREG(sb.st_mode)) {
                perr_set(err, "%s '%s': links to '%s', which is %s; parity writes only regular "
                              "files and never replaces anything else",
                         what, path, real, kind_of(sb.st_mode));
                free(real);
                return NULL;
            }
            return real;
        }
        if (!S_ISREG(sb.st_mode)) {
            perr_set(err, "%s '%s': exists and is %s; parity writes only regular files and never "
                          "replaces anything else",
                     what, path, kind_of(sb.st_mode));
            return NULL;
        }
    } else if (errno != ENOENT) {
        perr_set(err, "%s '%s': %s", what, path, strerror(errno));
        return NULL;
    }
    struct stat db;
    if (stat(dir, &db) || !S_ISDIR(db.st_mode)) {
        perr_set(err, "%s '%s': directory '%s' does not exist", what, path, dir);
        return NULL;
    }
    if (access(dir, W_OK | X_OK)) {
        perr_set(err, "%s '%s': cannot create a file in directory '%s': %s", what, path, dir,
                 strerror(errno));
        return NULL;
    }
    char *copy = strdup(path);
    if (!copy) perr_set(err, "%s '%s': out of memory", what, path);
    return copy;
}

/* ---- inputs are never outputs ---------------------------------------------- */

/* The command's inputs, noted as they are parsed (the main thread) and
 * only appended to. A command reads a handful of files, a checkpoint
 * directory's among them; one more than fits makes every output check
 * fail rather than be forgotten. */
#define PIO_MAX_INPUTS 256
static struct {
    char *path;
    const char *flag, *may_replace;
} inputs[PIO_MAX_INPUTS];
static int n_inputs, inputs_lost;

static void note_input(const char *path, const char *flag, const char *may_replace) {
    char *copy = n_inputs < PIO_MAX_INPUTS ? strdup(path) : NULL;
    if (!copy) {
        inputs_lost = 1;
        return;
    }
    inputs[n_inputs].path = copy;
    inputs[n_inputs].flag = flag;
    inputs[n_inputs++].may_replace = may_replace;
}

void pio_note_input(const char *path, const char *flag) {
    if (path && *path) note_input(path, flag, NULL);
}

void pio_note_input_dir(const char *dir, const char *flag, const char *may_replace) {
    DIR *d = dir && *dir ? opendir(dir) : NULL;
    if (!d) return; /* nothing in it to replace; reading it reports why */
    for (struct dirent *e; (e = readdir(d));) {
        size_t n = strlen(dir) + strlen(e->d_name) + 2;
        char *file = malloc(n);
        struct stat sb;
        if (!file) {
            inputs_lost = 1;
            break;
        }
        snprintf(file, n, "%s%s%s", dir, dir[strlen(dir) - 1] == '/' ? "" : "/", e->d_name);
        if (stat(file, &sb) == 0 && S_ISREG(sb.st_mode)) note_input(file, flag, may_replace);
        free(file);
    }
    closedir(d);
}

/* An output `path` (`what`: its flag) that names a noted input: -1 with
 * a message naming both. `what` equal to an input's may_replace passes,
 * and so does any input with a may_replace when `early` is 0: at
 * pio_out_open, whose `what` is a writer's ("safetensors file"), the
 * check before the run has already decided those. */
static int refuse_input(const char *path, const char *what, int early, perr_t *err) {
    if (inputs_lost)
        return perr_set(err, "%s '%s': more inputs than parity can compare its outputs with "
                             "(%d)", what, path, PIO_MAX_INPUTS);
    /* pio_same_output's buffers are static, and any thread may open an output */
    static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
    int rc = 0;
    pthread_mutex_lock(&lock);
    for (int k = 0; k < n_inputs && !rc; k++) {
        if (inputs[k].may_replace && (!early || !strcmp(inputs[k].may_replace, what))) continue;
        if (pio_same_output(path, inputs[k].path))
            rc = perr_set(err, "%s '%s' names the %s file '%s', which this command reads; an "
                               "output never replaces an input: name another file",
                          what, path, inputs[k].flag, inputs[k].path);
    }
    pthread_mutex_unlock(&lock);
    return rc;
}

int pio_check_output(const char *path, const char *what, perr_t *err) {
    char *t = resolve_output(path, what, err);
    free(t);
    return t ? refuse_input(path, what, 1, err) : -1;
}

int pio_check_dir(const char *path, const char *what, perr_t *err) {
    struct stat sb;
    if (!path || !*path) return perr_set(err, "%s: empty directory name", what);
    if (stat(path, &sb)) return perr_set(err, "%s '%s': %s", what, path, strerror(errno));
    if (!S_ISDIR(sb.st_mode))
        return perr_set(err, "%s '%s': not a directory (%s)", what, path,
                        S_ISREG(sb.st_mode) ? "a regular file" : kind_of(sb.st_mode));
    if (access(path, W_OK | X_OK))
        return perr_set(err, "%s '%s': not writable: %s", what, path, strerror(errno));
    return 0;
}

/* A canonical spelling of an output path, existing or not. */
static void canonical(const char *path, char *out, size_t cap) {
    char *real = realpath(path, NULL);
    if (real) {
        snprintf(out, cap, "%s", real);
        free(real);
        return;
    }
    char dir[PATH_MAX];
    const char *base;
    split_path(path, dir, sizeof dir, &base);
    real = realpath(dir, NULL);
    snprintf(out, cap, "%s/%s", real ? real : dir, base);
    free(real);
}

int pio_same_output(const char *a, const char *b) {
    static char ca[2 * PATH_MAX], cb[2 * PATH_MAX];
    struct stat sa, sb;
    if (stat(a, &sa) == 0 && stat(b, &sb) == 0 && sa.st_dev == sb.st_dev && sa.st_ino == sb.st_ino)
        return 1;
    canonical(a, ca, sizeof ca);
    canonical(b, cb, sizeof cb);
    return strcmp(ca, cb) == 0;
}

int pio_output_inside(const char *path, const char *dir) {
    static char cp[2 * PATH_MAX], cd[2 * PATH_MAX];
    canonical(path, cp, sizeof cp);
    canonical(dir, cd, sizeof cd);
    size_t n = strlen(cd);
    while (n > 1 && cd[n - 1] == '/') cd[--n] = 0; /* "d/" is d */
    return !strncmp(cp, cd, n) && (cp[n] == 0 || cp[n] == '/' || n == 1);
}

/* ---- the registry of temporaries, for signal handlers -------------------- */

/* A slot's path is written before its kind is set, and the file or
 * directory is created only after that, so a handler that runs at any
 * moment sees either nothing or a complete path; it may then unlink a
 * name whose file was not created yet (ENOENT), never leave one behind.
 * Slots are claimed under a lock (any thread may write an output); the
 * handler takes no lock. */
enum { REG_FREE, REG_FILE, REG_DIR, REG_SCRATCH };
#define PIO_MAX_TEMPS 16
static char reg_path[PIO_MAX_TEMPS][PATH_MAX + 96];
/* lock-free atomics: safe to read in a signal handler (C11 7.14.1.1), and
 * a store releases the path written before it */
static atomic_int reg_kind[PIO_MAX_TEMPS];
static pthread_mutex_t reg_lock = PTHREAD_MUTEX_INITIALIZER;

static int reg_claim(const char *path, int kind) {
    if (strlen(path) >= sizeof reg_path[0]) return -1;
    pthread_mutex_lock(&reg_lock);
    int slot = -1;
    for (int k = 0; k < PIO_MAX_TEMPS && slot < 0; k++)
        if (atomic_load(&reg_kind[k]) == REG_FREE) slot = k;
    if (slot >= 0) {
        memcpy(reg_path[slot], path, strlen(path) + 1);
        atomic_store(&reg_kind[slot], kind);
    }
    pthread_mutex_unlock(&reg_lock);
    return slot;
}

static void reg_release(int slot) {
    if (slot < 0) return;
    pthread_mutex_lock(&reg_lock);
    atomic_store(&reg_kind[slot], REG_FREE);
    pthread_mutex_unlock(&reg_lock);
}

/* While pio_txn_commit renames, a signal that reaches another thread
 * (the calling one blocks them) waits for the last rename. */
static volatile sig_atomic_t committing, pending_sig;

/* Empties and removes a scratch directory with nothing but system calls
 * (readdir may allocate, which a signal handler must not). The buffer is
 * on the stack: a handler on one thread may run this while another
 * thread empties the same directory at exit. */
void pio_scratch_dir_remove(const char *dir) {
    char buf[4096] __attribute__((aligned(8)));
    const int fd = open(dir, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC); /* a link: nothing */
    if (fd < 0) return;
    for (;;) {
        const long n = syscall(SYS_getdents64, fd, buf, sizeof buf);
        if (n <= 0) break;
        for (long at = 0; at < n;) {
            /* struct linux_dirent64: ino 8, off 8, reclen 2, type 1, name */
            unsigned short reclen;
            memcpy(&reclen, buf + at + 16, sizeof reclen);
            if (reclen < 20 || at + reclen > n) break; /* never past what the kernel gave */
            const char *name = buf + at + 19;
            if (strcmp(name, ".") && strcmp(name, "..")) unlinkat(fd, name, 0);
            at += reclen;
        }
    }
    close(fd);
    rmdir(dir);
}

static void on_signal(int sig) {
    if (committing) {
        pending_sig = sig; /* SA_RESETHAND: raised again, to the default action, after the renames */
        return;
    }
    const int saved = errno;
    for (int k = 0; k < PIO_MAX_TEMPS; k++)
        if (atomic_load(&reg_kind[k]) == REG_FILE) unlink(reg_path[k]);
        else if (atomic_load(&reg_kind[k]) == REG_SCRATCH) pio_scratch_dir_remove(reg_path[k]);
    for (int k = PIO_MAX_TEMPS - 1; k >= 0; k--) /* after the files they hold */
        if (atomic_load(&reg_kind[k]) == REG_DIR) rmdir(reg_path[k]);
    errno = saved;
    raise(sig); /* SA_RESETHAND: the default action, once this handler returns */
}

int pio_scratch_dir_claim(const char *dir) { return reg_claim(dir, REG_SCRATCH); }

void pio_scratch_dir_release(int slot) { reg_release(slot); }

int pio_scratch_file_claim(const char *path) { return reg_claim(path, REG_FILE); }

void pio_scratch_file_release(int slot) { reg_release(slot); }

void pio_cleanup_on_signals(void) {
    const int sigs[] = {SIGINT, SIGTERM, SIGHUP};
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_signal;
    sa.sa_flags = SA_RESETHAND;
    sigemptyset(&sa.sa_mask);
    for (size_t i = 0; i < sizeof sigs / sizeof sigs[0]; i++) sigaddset(&sa.sa_mask, sigs[i]);
    for (size_t i = 0; i < sizeof sigs / sizeof sigs[0]; i++) {
        struct sigaction old;
        /* a signal ignored by whoever started us (nohup) stays ignored */
        if (sigaction(sigs[i], NULL, &old) == 0 && old.sa_handler == SIG_IGN) continue;
        sigaction(sigs[i], &sa, NULL);
    }
}

void pio_block_cleanup_signals(sigset_t *old) {
    sigset_t block;
    sigemptyset(&block);
    sigaddset(&block, SIGINT);
    sigaddset(&block, SIGTERM);
    sigaddset(&block, SIGHUP);
    pthread_sigmask(SIG_BLOCK, &block, old);
}

/* ---- the transaction --------------------------------------------------------- */

typedef struct {
    char *target, *tmp; /* tmp NULL: a directory (target) to remove on abort */
    const char *what;
    int slot;
} txn_entry_t;

static int txn_on;
static txn_entry_t txn[PIO_MAX_TEMPS];
static int txn_n;

void pio_txn_begin(void) { txn_on = 1; }

void pio_txn_made_dir(const char *dir) {
    if (!txn_on || txn_n == PIO_MAX_TEMPS) return;
    char *copy = strdup(dir);
    if (!copy) return;
    txn[txn_n++] = (txn_entry_t){copy, NULL, NULL, reg_claim(dir, REG_DIR)};
}

static void fsync_dir_of(const char *path) {
    char dir[PATH_MAX];
    const char *base;
    split_path(path, dir, sizeof dir, &base);
    int dfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dfd >= 0) {
        (void)fsync(dfd);
        close(dfd);
    }
}

static void txn_drop(txn_entry_t *t, int remove) {
    if (remove && t->tmp) unlink(t->tmp);
    else if (remove && t->target) rmdir(t->target); /* only if still empty */
    reg_release(t->slot);
    free(t->tmp);
    free(t->target);
    t->tmp = t->target = NULL;
    t->slot = -1;
}

void pio_txn_abort(void) {
    for (int i = 0; i < txn_n; i++)
        if (txn[i].tmp) txn_drop(&txn[i], 1);
    for (int i = txn_n - 1; i >= 0; i--) /* directories after the files they hold */
        if (txn[i].target) txn_drop(&txn[i], 1);
    txn_n = 0;
    txn_on = 0;
}

int pio_txn_commit(perr_t *err) {
    /* PARITY_STOP_BEFORE_COMMIT, a test hook: every output is finished in
     * its temporary file and not renamed yet; the process stops itself so
     * that a test can send a signal at exactly this moment (polling for a
     * temporary file races with a fast last write). */
    const char *stop = getenv("PARITY_STOP_BEFORE_COMMIT");
    if (stop && *stop && strcmp(stop, "0")) raise(SIGSTOP);
    /* no signal between the first rename and the last */
    sigset_t old;
    pio_block_cleanup_signals(&old);
    committing = 1;
    int rc = 0;
    for (int i = 0; i < txn_n && rc == 0; i++) {
        txn_entry_t *t = &txn[i];
        if (!t->tmp) continue; /* a directory: it stays */
        if (rename(t->tmp, t->target)) {
            rc = perr_set(err, "%s '%s': cannot rename the finished temporary file over it: %s",
                          t->what, t->target, strerror(errno));
            break;
        }
        fsync_dir_of(t->target); /* make the rename itself durable */
        free(t->tmp);
        t->tmp = NULL;
        txn_drop(t, 0);
    }
    /* after a failed rename: the files not renamed yet are removed */
    for (int i = 0; i < txn_n; i++)
        if (txn[i].tmp || (txn[i].target && !rc)) txn_drop(&txn[i], rc != 0);
    for (int i = txn_n - 1; rc && i >= 0; i--)
        if (txn[i].target && !txn[i].tmp) txn_drop(&txn[i], 1);
    txn_n = 0;
    txn_on = 0;
    committing = 0;
    if (pending_sig) raise(pending_sig);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    return rc;
}

/* ---- one output ---------------------------------------------------------------- */

int pio_out_open(pio_out_t *o, const char *path, const char *what, perr_t *err) {
    memset(o, 0, sizeof *o);
    o->what = what;
    o->slot = -1;
    if (!(o->target = resolve_output(path, what, err))) return -1;
    if (refuse_input(path, what, 0, err)) { /* the check before the run missed it */
        pio_out_abort(o);
        return -1;
    }
    if (txn_on && txn_n == PIO_MAX_TEMPS) {
        pio_out_abort(o);
        return perr_set(err, "%s '%s': more than %d outputs in one run", what, path,
                        PIO_MAX_TEMPS);
    }
    char dir[PATH_MAX];
    const char *base;
    split_path(o->target, dir, sizeof dir, &base);
    size_t cap = strlen(o->target) + 64;
    if (!(o->tmp = malloc(cap))) {
        pio_out_abort(o);
        return perr_set(err, "%s '%s': out of memory", what, path);
    }
    /* O_EXCL with a fresh name: the file is ours, so removing it on a
     * failure can never remove something we did not create; mode 0666
     * lets the umask decide, as for any new file. The name is in the
     * signal handler's registry before the file exists. */
    int fd = -1;
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    for (unsigned k = 0; fd < 0 && k < 100; k++) {
        snprintf(o->tmp, cap, "%s/.%s.tmp-%ld-%lx", dir, base, (long)getpid(),
                 (unsigned long)ts.tv_nsec + k);
        reg_release(o->slot);
        if ((o->slot = reg_claim(o->tmp, REG_FILE)) < 0) {
            errno = ENFILE;
            break;
        }
        fd = open(o->tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
        if (fd < 0 && errno != EEXIST) break;
    }
    if (fd < 0) {
        int e = errno;
        free(o->tmp);
        o->tmp = NULL;
        pio_out_abort(o);
        return perr_set(err, "%s '%s': cannot create a temporary file in '%s': %s", what, path, dir,
                        strerror(e));
    }
    struct stat sb; /* a replaced file keeps its permissions */
    if (stat(o->target, &sb) == 0) (void)fchmod(fd, sb.st_mode & 07777);
    if (!(o->f = fdopen(fd, "wb"))) {
        close(fd);
        pio_out_abort(o);
        return perr_set(err, "%s '%s': out of memory", what, path);
    }
    return 0;
}

int pio_out_commit(pio_out_t *o, perr_t *err) {
    int ok = !ferror(o->f) && fflush(o->f) == 0 && fsync(fileno(o->f)) == 0;
    int e = errno;
    if (fclose(o->f) && ok) ok = 0, e = errno;
    o->f = NULL;
    if (ok && txn_on && txn_n == PIO_MAX_TEMPS) ok = 0, e = ENFILE;
    if (ok && txn_on) { /* renamed with the others, once the run has succeeded */
        txn[txn_n++] = (txn_entry_t){o->target, o->tmp, o->what, o->slot};
        o->target = o->tmp = NULL;
        o->slot = -1;
        return 0;
    }
    if (ok && rename(o->tmp, o->target)) ok = 0, e = errno;
    if (!ok) {
        perr_set(err, "%s '%s': write failed: %s (the previous file, if any, is unchanged)",
                 o->what, o->target, e ? strerror(e) : "I/O error");
        pio_out_abort(o);
        return -1;
    }
    free(o->tmp);
    o->tmp = NULL;
    fsync_dir_of(o->target); /* make the rename itself durable */
    pio_out_abort(o);
    return 0;
}

void pio_out_abort(pio_out_t *o) {
    if (o->f) fclose(o->f);
    if (o->tmp) unlink(o->tmp);
    reg_release(o->slot);
    o->slot = -1;
    free(o->tmp);
    free(o->target);
    o->f = NULL;
    o->tmp = o->target = NULL;
}

int pio_check_stdout(perr_t *err) {
    errno = 0;
    if (fflush(stdout) == 0 && !ferror(stdout)) return 0;
    return perr_set(err, "error writing standard output: %s",
                    errno ? strerror(errno) : "I/O error");
}
