/* pool.c - compute threads inside one device (pool.h).
 *
 * One job at a time: the caller publishes fn, arg and the piece count
 * under the lock and bumps a generation number; helpers wake, take pieces
 * through an atomic counter (so a slow helper takes fewer), and the
 * thread that finishes the last piece wakes the caller. A second caller
 * that finds the pool busy runs its pieces itself, as does a piece that
 * calls pool_run: neither can deadlock, and neither changes a bit. The
 * caller also waits until every helper that joined the job has left it,
 * then closes the job under the lock: a helper that wakes late finds no
 * job to join, where it would otherwise run a piece of the next job with
 * this job's function and (freed) argument. tests/unit/test_runtime.c's
 * test_pool found that race under ASan.
 */
#include "parity/pool.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <string.h>

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t job_cv = PTHREAD_COND_INITIALIZER;  /* helpers wait for a job */
static pthread_cond_t done_cv = PTHREAD_COND_INITIALIZER; /* the caller waits for the end */
static pthread_mutex_t busy = PTHREAD_MUTEX_INITIALIZER;  /* held by the running job's caller */

static pthread_t helpers[POOL_MAX_THREADS];
static int n_helpers;             /* under lock */
static _Atomic int n_threads = 1; /* helpers + 1, read without the lock */
static unsigned long generation;  /* under lock: bumped per job, and to stop */
static int stopping;              /* under lock */

static pool_fn *job_fn; /* the current job, under lock */
static void *job_arg;
static int job_pieces;
static atomic_int next_piece, pieces_done;
static int active; /* under lock: helpers inside the current job */

static _Thread_local int in_piece; /* this thread is running a piece */

/* Takes and runs pieces until none is left; the thread that completes the
 * last one wakes the caller. */
static void take_pieces(pool_fn *fn, void *arg, int pieces, int worker) {
    in_piece = 1;
    for (;;) {
        const int i = atomic_fetch_add(&next_piece, 1);
        if (i >= pieces) break;
        fn(arg, i, worker);
        if (atomic_fetch_add(&pieces_done, 1) + 1 == pieces) {
            pthread_mutex_lock(&lock);
            pthread_cond_signal(&done_cv);
            pthread_mutex_unlock(&lock);
        }
    }
    in_piece = 0;
}

static void *helper_main(void *p) {
    const int worker = (int)(intptr_t)p;
    pthread_mutex_lock(&lock);
    unsigned long seen = generation;
    for (;;) {
        /* a job closed already (job_fn NULL) is not joined: its caller
         * may have returned and freed its argument */
        while ((generation == seen || job_fn == NULL) && !stopping)
            pthread_cond_wait(&job_cv, &lock);
        if (stopping) break;
        seen = generation;
        pool_fn *fn = job_fn;
        void *arg = job_arg;
        const int pieces = job_pieces;
        active++;
        pthread_mutex_unlock(&lock);
        take_pieces(fn, arg, pieces, worker);
        pthread_mutex_lock(&lock);
        if (--active == 0) pthread_cond_signal(&done_cv);
    }
    pthread_mutex_unlock(&lock);
    return NULL;
}

static void stop_helpers(void) {
    pthread_mutex_lock(&lock);
    stopping = 1;
    pthread_cond_broadcast(&job_cv);
    const int n = n_helpers;
    pthread_mutex_unlock(&lock);
    for (int i = 0; i < n; i++) pthread_join(helpers[i], NULL);
    pthread_mutex_lock(&lock);
    n_helpers = 0;
    stopping = 0;
    pthread_mutex_unlock(&lock);
    atomic_store(&n_threads, 1);
}

int pool_set_threads(int n, perr_t *err) {
    if (n < 1 || n > POOL_MAX_THREADS)
        return perr_set(err, "compute threads: %d is not in 1..%d", n, POOL_MAX_THREADS);
    pthread_mutex_lock(&busy);
    stop_helpers();
    int rc = 0;
    pthread_mutex_lock(&lock);
    for (int i = 0; i < n - 1; i++) {
        int e = pthread_create(&helpers[i], NULL, helper_main, (void *)(intptr_t)(i + 1));
        if (e != 0) {
            rc = perr_set(err, "compute threads: pthread_create of helper %d of %d failed: %s",
                          i + 1, n - 1, strerror(e));
            break;
        }
        n_helpers++;
    }
    pthread_mutex_unlock(&lock);
    if (rc != 0) stop_helpers();
    else atomic_store(&n_threads, n);
    pthread_mutex_unlock(&busy);
    return rc;
}

int pool_threads(void) { return atomic_load(&n_threads); }

void pool_run(pool_fn *fn, void *arg, int pieces) {
    if (pieces <= 0) return;
    if (pieces == 1 || in_piece || atomic_load(&n_threads) == 1 ||
        pthread_mutex_trylock(&busy) != 0) {
        for (int i = 0; i < pieces; i++) fn(arg, i, 0);
        return;
    }
    pthread_mutex_lock(&lock);
    job_fn = fn;
    job_arg = arg;
    job_pieces = pieces;
    atomic_store(&next_piece, 0);
    atomic_store(&pieces_done, 0);
    generation++;
    pthread_cond_broadcast(&job_cv);
    pthread_mutex_unlock(&lock);
    take_pieces(fn, arg, pieces, 0);
    pthread_mutex_lock(&lock);
    while (atomic_load(&pieces_done) < pieces || active > 0) pthread_cond_wait(&done_cv, &lock);
    job_fn = NULL; /* closed: a helper that wakes only now must not join it */
    pthread_mutex_unlock(&lock);
    pthread_mutex_unlock(&busy);
}
