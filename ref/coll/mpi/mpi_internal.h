/* mpi_internal.h - what the MPI transport's files share (ref/coll/mpi/).
 *
 * Three communicators duplicated from MPI_COMM_WORLD keep the traffic
 * classes apart: collectives (tag: the group's number, so calls of
 * different groups never match each other's messages), point-to-point
 * (tag: the group's number and the caller's tag) and the engine's host
 * merges. Within one tag, messages between two processes arrive in the
 * order they were sent (MPI's non-overtaking rule): a member's calls on
 * a group are sequential, so the receives of call k always meet call k's
 * sends.
 */
#ifndef PARITY_COLL_MPI_INTERNAL_H
#define PARITY_COLL_MPI_INTERNAL_H

#include <mpi.h>

#include "net.h"

extern MPI_Comm net_coll_comm, net_p2p_comm, net_host_comm;

/* Point-to-point tags: the group's number above the caller's tag. */
enum { NET_TAG_BITS = 17, NET_MAX_GROUPS = 1 << 13 };

/* What a wait is for, for the watchdog's report. */
typedef struct {
    const group_t *g;
    const char *what;     /* "all_reduce", "send", ... */
    uint64_t seq;         /* the call's number on g (0 for point-to-point) */
    const int *peers;     /* [n] the group rank each request talks to */
} net_wait_t;

/* Waits for every request (each becomes MPI_REQUEST_NULL), advancing
 * pending point-to-point receives meanwhile; past the watchdog's timeout
 * it names the members whose requests are still open and stops every
 * process. */
void net_wait_all(int n, MPI_Request *reqs, const net_wait_t *w);
/* Polls until a message from world rank src with tag arrives on comm
 * and matches it (its size is the data's), with the watchdog of
 * net_wait_all (w->peers: the one member it waits for). */
void net_probe(int src, int tag, MPI_Comm comm, MPI_Message *m, MPI_Status *st, const net_wait_t *w);
/* Polls (net_progress) until *state == want, with the same watchdog. */
void net_wait_state(_Atomic int *state, int want, const net_wait_t *w);
/* One round of polling: pending point-to-point receives that can move
 * do (mpi_p2p.c). Safe from any thread. */
void net_progress(void);
/* Gives the CPU away after `spins` fruitless polls: devices outnumber
 * cores in make check. */
void net_backoff(unsigned spins);
/* Fails (coll_die) when bytes do not fit an MPI count. */
int  net_count(size_t bytes, const char *what);

/* Open-sum ranges on the wire (coll.h): the fp64 sums (a slow element's
 * as 0), the number of slow elements, then (index, xacc_t) for each. */
size_t net_xvec_packed_bytes(const xvec_t *v, size_t off, size_t len, size_t *nslow);
void   net_xvec_pack(const xvec_t *v, size_t off, size_t len, unsigned char *out);
/* Into tmp, a fresh xvec of len elements (0, or -1 when the bytes are
 * not a packed range of len elements); *nslow: its slow elements. */
/* dst[off + i] += the packed range's element i, exactly, i < len (0, or
 * -1 when the bytes are not a packed range of len elements). */
int    net_xvec_merge_packed(xvec_t *dst, size_t off, const unsigned char *in, size_t bytes, size_t len,
                             size_t *nslow);
int    net_xvec_unpack(const unsigned char *in, size_t bytes, size_t len, xvec_t *tmp, size_t *nslow);

#endif
