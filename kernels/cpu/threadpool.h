/* threadpool.h - a small persistent pthread pool with a blocking parallel-for.
 *
 * Design: v4_pool_create(n) starts n-1 worker threads; the thread that calls
 * v4_pool_run is the n-th worker.  A run publishes (fn, ctx, n_tasks) under a new
 * generation number, every thread claims task indices from a shared atomic counter
 * until they run out, and v4_pool_run returns only after every worker has checked
 * in for that generation (a barrier), so the caller may reuse everything it passed.
 * Idle workers spin briefly (cheap hand-off between the back-to-back matmuls of a
 * decode step) and then sleep on a condition variable.
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

#endif
