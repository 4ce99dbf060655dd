/* threadpool.h - a small persistent pthread pool with a blocking parallel-for.
 *
 * Design: v4_pool_create(n) starts n-1 worker threads; the thread that calls
 * v4_pool_run is the n-th worker.  A run publishes (fn, ctx, n_tasks) under a new
 * generation number, every thread claims task indices from a shared atomic counter
 * (tagged with the generation) until they run out, and v4_pool_run returns once every
 * task is done, so the caller may reuse everything it passed.  It does not wait for
 * workers that never got a core: their share is taken by the threads that run (the
 * caller included), so a pool whose threads do not get their cores (a CPU quota,
 * competing processes) degrades towards one thread instead of waiting a time slice per
 * run.  Idle workers spin briefly (cheap hand-off between the back-to-back matmuls of
 * a decode step), less after runs they found nothing to do in, and then sleep on a
 * condition variable.  A pool whose runs keep stalling on descheduled workers runs
 * alone on the caller for a while (threadpool.c: stall detection, v4_pool_get_stats).
 *
 * Ownership: the pool owns its threads; the creator destroys it with
 * v4_pool_destroy (joins all threads).  There is no global state: every backend
 * instance owns its own pool.
 * Thread: v4_pool_run and v4_pool_destroy must be called from one thread at a time
 * (the pool's owner); fn is called concurrently from up to n threads with distinct
 * task indices and must not call back into the pool.
 */
#ifndef V4_THREADPOOL_H
#define V4_THREADPOOL_H

typedef struct v4_pool v4_pool;

/* One task: task in [0, n_tasks); thread in [0, v4_pool_threads()) identifies the
 * executing thread (0 = the caller of v4_pool_run). */
typedef void (*v4_pool_fn)(void *ctx, int task, int thread);

/* n_threads >= 1 (total, including the caller).  Returns NULL if out of memory or
 * threads cannot be created. */
v4_pool *v4_pool_create(int n_threads);
int v4_pool_threads(const v4_pool *p);
/* Runs fn(ctx, t, thread) for every t in [0, n_tasks) and returns when all are done.
 * With one thread or one task everything runs on the caller. */
void v4_pool_run(v4_pool *p, int n_tasks, v4_pool_fn fn, void *ctx);
void v4_pool_destroy(v4_pool *p);

/* Counters since create (the caller's thread): runs with the workers, those that
 * stalled (the caller waited long for a descheduled worker; each starts a back-off),
 * and runs done on the caller alone while backing off. */
typedef struct v4_pool_stats {
    unsigned long long runs, stalls, solo_runs;
} v4_pool_stats;
void v4_pool_get_stats(const v4_pool *p, v4_pool_stats *st);

#endif
