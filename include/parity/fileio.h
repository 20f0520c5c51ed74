/* fileio.h - how parity opens the files a user names.
 *
 * Inputs: a path must name a regular file. It is opened non-blocking and
 * checked with fstat before a byte is read, so a FIFO with no writer, a
 * device or a directory is a message, never a hang.
 *
 * Outputs are written as a whole or not at all: into a temporary file in
 * the target's directory, flushed, fsynced and checked, then renamed over
 * the target. A failure removes only the temporary file it created, so
 * the previous target stays intact and no partial file appears. parity
 * writes only regular files: an existing target that is anything else
 * (a device node, a FIFO, a directory) is refused up front, never
 * replaced. A symbolic link is followed: the file it points to is
 * replaced, the link stays.
 */
#ifndef PARITY_FILEIO_H
#define PARITY_FILEIO_H

#include <stdio.h>

#include "parity/error.h"

/* Opens `path` for reading ("rb") after checking it is a regular file.
 * `what` names the file in messages ("data file", "--model"). On success
 * *size (if not NULL) is its size in bytes. */
FILE *pio_open_input(const char *path, const char *what, long long *size, perr_t *err);

/* A whole input file (pio_open_input's checks) as malloc'd bytes with a
 * NUL after them (*len does not count it); NULL with a message naming
 * `what` and the path. Refuses files over max_bytes. */
char *pio_read_text(const char *path, const char *what, size_t max_bytes, size_t *len, perr_t *err);

/* Checks, without creating anything, that `path` can become an output:
 * an existing target is a regular file (after symbolic links) and its
 * directory exists and is writable. For failing early, before a run. */
int pio_check_output(const char *path, const char *what, perr_t *err);

/* Whether two output paths name the same file (after symbolic links and
 * "." / ".." in the directory part), whether or not it exists yet. */
int pio_same_output(const char *a, const char *b);

typedef struct {
    char *target; /* the file that is replaced on commit (links resolved) */
    char *tmp;    /* the temporary file, NULL once renamed or removed */
    const char *what;
    FILE *f;      /* write here */
} pio_out_t;

/* Creates the temporary file beside the target. */
int  pio_out_open(pio_out_t *o, const char *path, const char *what, perr_t *err);
/* Flush, fsync, close, check, rename over the target. On any failure the
 * temporary file is removed and the target is left as it was. */
int  pio_out_commit(pio_out_t *o, perr_t *err);
/* Gives up: removes the temporary file. Safe after a commit. */
void pio_out_abort(pio_out_t *o);

/* Checks that everything printed to stdout reached it (a full disk, a
 * closed pipe): 0, or -1 with a message. Call before exiting 0. */
int pio_check_stdout(perr_t *err);

#endif
