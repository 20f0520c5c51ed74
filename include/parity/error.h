/* error.h - how parity reports bad input: a message, never a crash.
 *
 * Functions that can fail on user input return 0 on success and -1 on
 * failure, filling a caller-provided perr_t with one line that names the
 * field (or rank) and what was expected. Callers either pass the message
 * up or print it and exit non-zero. Internal invariant violations (a
 * collective mismatch, a hang) abort through parity_fatal instead,
 * because no caller could recover from them.
 */
#ifndef PARITY_ERROR_H
#define PARITY_ERROR_H

#include <stddef.h>

typedef struct {
    char msg[1024];
} perr_t;

/* Formats into e->msg (if e is not NULL) and returns -1, so that
 * `return perr_set(e, "...")` reads naturally. */
int perr_set(perr_t *e, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Prints "parity: fatal: ..." to stderr and exits with status 3. */
_Noreturn void parity_fatal(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

#endif
