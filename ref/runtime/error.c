/* error.c - see include/parity/error.h */
#include "parity/error.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>

int perr_set(perr_t *e, const char *fmt, ...) {
    if (e) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(e->msg, sizeof e->msg, fmt, ap);
        va_end(ap);
    }
    return -1;
}

_Noreturn void parity_fatal(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    fputs("parity: fatal: ", stderr);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
    fflush(stderr);
    exit(3);
}
