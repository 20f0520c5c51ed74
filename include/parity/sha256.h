/* sha256.h - SHA-256 (FIPS 180-4), for digests of golden tensors.
 *
 * golden/ stores digests of portable runs (DESIGN.md I5): any machine can
 * hash its own dump and compare, without shipping the full tensors.
 *
 *   sha256_ctx_t c; sha256_init(&c);
 *   sha256_update(&c, part1, n1); sha256_update(&c, part2, n2);
 *   uint8_t d[32]; sha256_final(&c, d);   // == sha256(part1 || part2)
 */
#ifndef PARITY_SHA256_H
#define PARITY_SHA256_H

#include <stddef.h>
#include <stdint.h>

typedef struct {
    uint32_t h[8];     /* chaining state */
    uint64_t nbytes;   /* message length so far */
    uint8_t block[64]; /* pending partial block */
    size_t fill;       /* bytes in block */
} sha256_ctx_t;

void sha256_init(sha256_ctx_t *c);
void sha256_update(sha256_ctx_t *c, const void *data, size_t n);
/* Writes the digest; the context must be re-initialised before reuse. */
void sha256_final(sha256_ctx_t *c, uint8_t out[32]);

void sha256(const void *data, size_t n, uint8_t out[32]);
/* Lower-case hex, NUL-terminated (64 digits + NUL). */
void sha256_hex(const void *data, size_t n, char out[65]);
void sha256_to_hex(const uint8_t digest[32], char out[65]);

#endif
