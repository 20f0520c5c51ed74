/* pool.h - compute threads inside one device (intra-op threads, as
 * torch.set_num_threads gives PyTorch eager).
 *
 * A one-device run (the golden run) may hand independent pieces of a
 * contraction to helper threads: every piece is whole canonical tiles
 * whose sums are exact, so which thread computes which piece changes no
 * bit (DESIGN.md I1, I2). Layouts already put one device thread on each
 * core and do not use it: a pool_run from a second thread while one is in
 * progress, or from inside a piece, simply runs its pieces itself.
 *
 *   pool_set_threads(2, &err);            // at start-up, before any kernel
 *   pool_run(piece_fn, &job, n_pieces);   // piece_fn(&job, i, worker), i < n
 *
 * worker is 0 for the calling thread and 1 .. threads-1 for the helpers,
 * so each can keep its own scratch. pool_run returns when every piece is
 * done. */
#ifndef PARITY_POOL_H
#define PARITY_POOL_H

#include "parity/error.h"

/* The most threads a pool may have (the caller included). */
#define POOL_MAX_THREADS 64

typedef void pool_fn(void *arg, int piece, int worker);

/* Starts (or stops) helpers so that pool_run uses n threads in all,
 * 1 <= n <= POOL_MAX_THREADS; -1 with a message naming the range or the
 * failed pthread_create. Not while a pool_run is in progress. */
int pool_set_threads(int n, perr_t *err);

/* Threads pool_run uses now (1 until pool_set_threads says otherwise). */
int pool_threads(void);

/* fn(arg, i, worker) for every i < pieces, spread over the pool's threads
 * (the caller takes pieces too); returns when all are done. */
void pool_run(pool_fn *fn, void *arg, int pieces);

#endif
