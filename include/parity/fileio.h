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

#include <signal.h>
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
 * an existing target is a regular file (after symbolic links), not one
 * of the command's inputs (pio_note_input), and its directory exists and
 * is writable. For failing early, before a run; `what` names the output
 * in messages (its flag). */
int pio_check_output(const char *path, const char *what, perr_t *err);

/* Checks that `path` names an existing directory (a symbolic link to one
 * is resolved) in which this process may create files: 0, or -1 with a
 * message naming `what` and the path (--offload-path's check, shared by
 * every command that takes the flag). */
int pio_check_dir(const char *path, const char *what, perr_t *err);

/* Whether two output paths name the same file (after symbolic links and
 * "." / ".." in the directory part, or one file by device and inode: a
 * hard link), whether or not it exists yet. */
int pio_same_output(const char *a, const char *b);
/* Whether an output path is the directory `dir` or lies inside it (at
 * any depth), spelled either way; `dir` need not exist yet. */
int pio_output_inside(const char *path, const char *dir);

/* Inputs are never outputs. A command notes each file it will read as it
 * parses the flag that names it (`flag`: "--data", a string that lives
 * as long as the process); pio_check_output then refuses an output that
 * names a noted input, by device and inode (the input, a symbolic link
 * or a hard link to it) or by its path with links and "." / ".." resolved
 * (one that does not exist yet), with both flags and paths in the
 * message. So every output is compared with every input, before anything
 * runs: note the inputs first, then check the outputs. */
void pio_note_input(const char *path, const char *flag);
/* Every regular file in directory `dir` (--load's checkpoint) as an
 * input of `flag`. `may_replace`: the one output (by its pio_check_output
 * `what`) allowed to replace them, NULL for none: --save into the
 * directory --load reads, which is safe because the checkpoint is read
 * whole before the run and replaced only when the run succeeds (ckpt.h). */
void pio_note_input_dir(const char *dir, const char *flag, const char *may_replace);

typedef struct {
    char *target; /* the file that is replaced on commit (links resolved) */
    char *tmp;    /* the temporary file, NULL once renamed or removed */
    const char *what;
    FILE *f;      /* write here */
    int slot;     /* its entry in the signal handler's registry, -1 none */
} pio_out_t;

/* Creates the temporary file beside the target. */
int  pio_out_open(pio_out_t *o, const char *path, const char *what, perr_t *err);
/* Flush, fsync, close, check, rename over the target. On any failure the
 * temporary file is removed and the target is left as it was. Inside a
 * transaction (pio_txn_begin) the checked temporary file is kept and
 * renamed by pio_txn_commit instead. */
int  pio_out_commit(pio_out_t *o, perr_t *err);
/* Gives up: removes the temporary file. Safe after a commit. */
void pio_out_abort(pio_out_t *o);

/* Outputs as one transaction: after pio_txn_begin, pio_out_commit only
 * finishes its temporary file (flushed, fsynced, closed, checked) and
 * queues it; pio_txn_commit renames every queued file over its target
 * (with SIGINT, SIGTERM and SIGHUP blocked, so a signal cannot stop it
 * half way), pio_txn_abort removes them and every directory noted with
 * pio_txn_made_dir, leaving all targets as they were. main() begins one
 * per command and commits only when the whole run, stdout included,
 * has succeeded. With PARITY_STOP_BEFORE_COMMIT set (a test hook,
 * tests/cli/test_signals.sh) pio_txn_commit first stops the process with
 * SIGSTOP, every temporary file finished, for a signal to arrive then. */
void pio_txn_begin(void);
int  pio_txn_commit(perr_t *err);
void pio_txn_abort(void);
/* A directory an output of this transaction created (--save's): removed
 * (if empty) by pio_txn_abort and by a signal. Nothing outside a
 * transaction. */
void pio_txn_made_dir(const char *dir);

/* A scratch directory of files (parity check's spilled golden run): a
 * signal empties and removes it (pio_cleanup_on_signals). Claim it once
 * it exists; release the slot (-1: the registry was full, nothing to
 * release) after removing it. */
int pio_scratch_dir_claim(const char *dir);
void pio_scratch_dir_release(int slot);
/* A file of the run's own outside any transaction (nvme offload's lock
 * file): a signal unlinks it. Claim it once it is the run's; release
 * the slot after removing it. */
int pio_scratch_file_claim(const char *path);
void pio_scratch_file_release(int slot);
/* Empties a scratch directory (its entries, one level: unlinked, links
 * not followed) and removes it, with system calls only: what the signal
 * handler does, for a caller outside one. */
void pio_scratch_dir_remove(const char *dir);

/* Installs handlers for SIGINT, SIGTERM and SIGHUP that remove every
 * temporary file (and noted directory) parity has open, then re-raise
 * the signal with its default action (exit status 128 + N). The
 * registry is a fixed static array written before a temporary file is
 * created, so the handler only calls unlink, rmdir and raise. */
void pio_cleanup_on_signals(void);

/* Blocks SIGINT, SIGTERM and SIGHUP in the calling thread (*old: the
 * mask to restore with pthread_sigmask(SIG_SETMASK, old, NULL)): while
 * files are made and their names registered, a signal waits until both
 * agree. */
void pio_block_cleanup_signals(sigset_t *old);

/* Checks that everything printed to stdout reached it (a full disk, a
 * closed pipe): 0, or -1 with a message. Call before exiting 0. */
int pio_check_stdout(perr_t *err);

#endif
