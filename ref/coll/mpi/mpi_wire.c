/* mpi_wire.c - an open-sum range as bytes (mpi_internal.h):
 *   [len doubles: each element's exact fp64 sum, 0 for a slow one]
 *   [uint64 nslow] [nslow x (uint64 index in the range, xacc_t)]
 * A slow element's accumulator is its whole value, so the receiver
 * rebuilds exactly what the sender held. */
#ifdef PARITY_HAVE_MPI
#include "mpi_internal.h"

#include <string.h>

typedef struct {
    uint64_t index;
    xacc_t acc;
} slow_entry_t;

static size_t count_slow(const xvec_t *v, size_t off, size_t len) {
    size_t k = 0;
    for (size_t i = 0; v->n_slow && i < len; i++) k += (size_t)xvec_is_slow(v, off + i);
    return k;
}

size_t net_xvec_packed_bytes(const xvec_t *v, size_t off, size_t len, size_t *nslow) {
    *nslow = count_slow(v, off, len);
    return len * sizeof(double) + sizeof(uint64_t) + *nslow * sizeof(slow_entry_t);
}

void net_xvec_pack(const xvec_t *v, size_t off, size_t len, unsigned char *out) {
    double *sums = (double *)out;
    uint64_t nslow = 0;
    unsigned char *tail = out + len * sizeof(double) + sizeof nslow;
    for (size_t i = 0; i < len; i++) {
        if (v->zero_pending) {
            sums[i] = 0.0;
        } else if (v->n_slow && xvec_is_slow(v, off + i)) {
            slow_entry_t e = {i, {{0}, 0, 0, 0, 0, 0}};
            xvec_get(v, off + i, &e.acc);
            memcpy(tail + nslow++ * sizeof e, &e, sizeof e);
            sums[i] = 0.0;
        } else {
            sums[i] = v->sum[off + i];
        }
    }
    memcpy(out + len * sizeof(double), &nslow, sizeof nslow);
}

int net_xvec_merge_packed(xvec_t *dst, size_t off, const unsigned char *in, size_t bytes, size_t len,
                          size_t *nslow) {
    uint64_t k;
    if (bytes < len * sizeof(double) + sizeof k) return -1;
    memcpy(&k, in + len * sizeof(double), sizeof k);
    if (bytes != len * sizeof(double) + sizeof k + k * sizeof(slow_entry_t)) return -1;
    double chunk[256];
    for (size_t i = 0; i < len; i += 256) { /* a slow element's 0 adds nothing */
        size_t m = len - i < 256 ? len - i : 256;
        memcpy(chunk, in + i * sizeof(double), m * sizeof(double));
        xvec_add_f64_exact(dst, off + i, chunk, m);
    }
    const unsigned char *tail = in + len * sizeof(double) + sizeof k;
    for (uint64_t s = 0; s < k; s++) {
        slow_entry_t e;
        memcpy(&e, tail + s * sizeof e, sizeof e);
        if (e.index >= len) return -1;
        xvec_add_xacc(dst, off + (size_t)e.index, &e.acc);
    }
    *nslow = (size_t)k;
    return 0;
}

int net_xvec_unpack(const unsigned char *in, size_t bytes, size_t len, xvec_t *tmp, size_t *nslow) {
    uint64_t k;
    if (bytes < len * sizeof(double) + sizeof k) return -1;
    memcpy(&k, in + len * sizeof(double), sizeof k);
    if (bytes != len * sizeof(double) + sizeof k + k * sizeof(slow_entry_t)) return -1;
    if (xvec_init(tmp, len ? len : 1)) parity_fatal("collectives: out of host memory");
    xvec_claim_zero(tmp);
    double chunk[256];
    for (size_t i = 0; i < len; i += 256) { /* the sums may be unaligned in the message */
        size_t m = len - i < 256 ? len - i : 256;
        memcpy(chunk, in + i * sizeof(double), m * sizeof(double));
        xvec_store_f64_exact(tmp, i, chunk, m);
    }
    if (!len) xvec_store_f64_exact(tmp, 0, (const double[1]){0.0}, 1);
    const unsigned char *tail = in + len * sizeof(double) + sizeof k;
    for (uint64_t s = 0; s < k; s++) {
        slow_entry_t e;
        memcpy(&e, tail + s * sizeof e, sizeof e);
        if (e.index >= len) return xvec_free(tmp), -1;
        xvec_add_xacc(tmp, (size_t)e.index, &e.acc); /* onto its 0 */
    }
    *nslow = (size_t)k;
    return 0;
}
#endif
