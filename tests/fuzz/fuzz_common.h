/* fuzz_common.h - shared by the libFuzzer targets (tests/fuzz.mk).
 *
 * The readers under test open paths, as `parity` does, so an input is
 * handed over as an anonymous in-memory file (memfd) named by its
 * /proc/self/fd path: a regular file with no disk traffic. */
#ifndef PARITY_FUZZ_COMMON_H
#define PARITY_FUZZ_COMMON_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <unistd.h>

/* Writes data to a fresh memfd; its path goes to path[64]. Returns the
 * fd (close it when done) or aborts: the harness itself failing is not a
 * finding about the code under test. */
static inline int fuzz_memfile(const uint8_t *data, size_t size, char path[64]) {
    int fd = memfd_create("parity-fuzz", 0);
    if (fd < 0) abort();
    for (size_t done = 0; done < size;) {
        ssize_t n = write(fd, data + done, size - done);
        if (n <= 0) abort();
        done += (size_t)n;
    }
    snprintf(path, 64, "/proc/self/fd/%d", fd);
    return fd;
}

/* A property of an accepted input failed: a real finding. */
#define FUZZ_REQUIRE(cond)                                                              \
    do {                                                                                \
        if (!(cond)) {                                                                  \
            fprintf(stderr, "%s:%d: property failed: %s\n", __FILE__, __LINE__, #cond); \
            abort();                                                                    \
        }                                                                               \
    } while (0)

#endif
