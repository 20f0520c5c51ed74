/* net.h - the MPI transport's entry points inside the collectives layer
 * (not public API; coll.h describes the transport).
 *
 * A run that spans processes (runtime_run_distributed) sends every
 * collective and point-to-point transfer as MPI messages between the
 * processes, one device each, world rank = MPI rank. Everything above
 * (coll.c's argument checks, counters, activity table) is the same code
 * as with shared memory; only the call itself goes here.
 *
 * Built with MPI (PARITY_HAVE_MPI, when the Makefile finds mpicc) or
 * without: then net_active() is always 0 and coll_mpi_init refuses a
 * launch under mpirun.
 */
#ifndef PARITY_COLL_NET_H
#define PARITY_COLL_NET_H

#include "../coll_impl.h"

/* Whether the current run's collectives cross processes. */
int  net_active(void);
/* The call c (bound, validated) as messages: the agreement check, then
 * the data, with the summation order of d->algo for fp32. */
void net_run(coll_ctx_t *c, coll_call_t *d);
/* Posts a filled request (req->net is set here) and returns it. */
coll_request_t *net_p2p_post(coll_request_t *req);
/* Waits for a posted request and frees it. */
void net_p2p_wait(coll_request_t *req);
/* coll_host_merge / coll_host_gather between processes (coll_host.c). */
void net_host_merge(void *buf, size_t bytes, coll_merge_t how);
void net_host_gather(const void *mine, size_t len, coll_host_take_fn take, void *ctx);

#endif
