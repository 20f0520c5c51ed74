/* fileio.c - regular-file inputs and all-or-nothing outputs (fileio.h). */
#include "parity/fileio.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
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

int pio_check_output(const char *path, const char *what, perr_t *err) {
    char *t = resolve_output(path, what, err);
    free(t);
    return t ? 0 : -1;
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
    canonical(a, ca, sizeof ca);
    canonical(b, cb, sizeof cb);
    return strcmp(ca, cb) == 0;
}

int pio_out_open(pio_out_t *o, const char *path, const char *what, perr_t *err) {
    memset(o, 0, sizeof *o);
    o->what = what;
    if (!(o->target = resolve_output(path, what, err))) return -1;
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
     * lets the umask decide, as for any new file */
    int fd = -1;
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    for (unsigned k = 0; fd < 0 && k < 100; k++) {
        snprintf(o->tmp, cap, "%s/.%s.tmp-%ld-%lx", dir, base, (long)getpid(),
                 (unsigned long)ts.tv_nsec + k);
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
    if (ok && rename(o->tmp, o->target)) ok = 0, e = errno;
    if (!ok) {
        perr_set(err, "%s '%s': write failed: %s (the previous file, if any, is unchanged)",
                 o->what, o->target, e ? strerror(e) : "I/O error");
        pio_out_abort(o);
        return -1;
    }
    free(o->tmp);
    o->tmp = NULL;
    /* make the rename itself durable */
    char dir[PATH_MAX];
    const char *base;
    split_path(o->target, dir, sizeof dir, &base);
    int dfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dfd >= 0) {
        (void)fsync(dfd);
        close(dfd);
    }
    pio_out_abort(o);
    return 0;
}

void pio_out_abort(pio_out_t *o) {
    if (o->f) fclose(o->f);
    if (o->tmp) unlink(o->tmp);
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
