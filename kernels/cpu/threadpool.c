/* threadpool.c - see threadpool.h.
 *
 * Protocol for one run (generation g):
 *   caller: job fields := (fn, ctx, n_tasks); next := 0; pending := n-1; gen := g;
 *           if any worker sleeps, broadcast cv_work under the mutex;
 *           claims tasks itself; then waits (spin, then cv_done) until pending == 0.
 *   worker: waits until gen != last seen gen (spin, then cv_work under the mutex);
 *           claims tasks with fetch_add(next) until >= n_tasks; then
 *           fetch_sub(pending) and, if it was the last and the caller sleeps, signals
 *           cv_done under the mutex.
 * The job fields are written before the store of gen and read after the load of gen,
 * so workers always see the current job; the caller returns only after pending
 * reached 0, so no worker still touches the previous job when the next run
 * overwrites it.  Lost wake-ups are excluded Dekker-style: a sleeper announces itself
 * (sleepers++ / caller_waits := 1, seq_cst, under the mutex) before re-checking the
 * condition, the waker changes the condition (seq_cst) before reading the
 * announcement, so at least one of them sees the other.  Spinning yields the CPU now
 * and then so that more threads than cores still make progress.
 * Shutdown: stop := 1 and a generation bump, then a broadcast under the mutex.
 */
#include "threadpool.h"

#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdlib.h>

/* Spin iterations before sleeping (each is one pause instruction, ~10-60 ns), and
 * how often a spinning thread calls sched_yield. */
#define V4_POOL_SPIN 20000
#define V4_POOL_YIELD_EVERY 64

struct v4_pool {
    int n;                          /* threads in total, including the caller */
    pthread_t *th;
    int n_started;
    pthread_mutex_t mu;
    pthread_cond_t cv_work, cv_done;
    /* current job (valid for the generation in gen) */
    v4_pool_fn fn;
    void *ctx;
    int n_tasks;
    atomic_int next;
    atomic_int pending;
    atomic_uint gen;
    atomic_int stop;
    atomic_int sleepers;        /* workers blocked (or about to block) on cv_work */
    atomic_int caller_waits;    /* the caller blocked (or about to) on cv_done */
};

typedef struct worker_arg {
    v4_pool *p;
    int id;
} worker_arg;

static inline void cpu_relax(int i)
{
    if (i % V4_POOL_YIELD_EVERY == V4_POOL_YIELD_EVERY - 1) {
        sched_yield();
        return;
    }
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#endif
}

static void run_tasks(v4_pool *p, int thread)
{
    for (;;) {
        int t = atomic_fetch_add_explicit(&p->next, 1, memory_order_relaxed);
        if (t >= p->n_tasks)
            break;
        p->fn(p->ctx, t, thread);
    }
}

static void *worker_main(void *arg)
{
    worker_arg *wa = arg;
    v4_pool *p = wa->p;
    int id = wa->id;
    free(wa);
    /* Generation 0 is the one at creation: a thread that starts late must still see
     * the first run (or the shutdown) as new, so never start from the current value. */
    unsigned seen = 0;
    for (;;) {
        unsigned g = seen;
        for (int i = 0; i < V4_POOL_SPIN; i++) {
            g = atomic_load_explicit(&p->gen, memory_order_acquire);
            if (g != seen)
                break;
            cpu_relax(i);
        }
        if (g == seen) {
            pthread_mutex_lock(&p->mu);
            atomic_fetch_add(&p->sleepers, 1);
            while ((g = atomic_load(&p->gen)) == seen)
                pthread_cond_wait(&p->cv_work, &p->mu);
            atomic_fetch_sub(&p->sleepers, 1);
            pthread_mutex_unlock(&p->mu);
        }
        seen = g;
        if (atomic_load_explicit(&p->stop, memory_order_acquire))
            return NULL;
        run_tasks(p, id);
        if (atomic_fetch_sub(&p->pending, 1) == 1 && atomic_load(&p->caller_waits)) {
            pthread_mutex_lock(&p->mu);
            pthread_cond_signal(&p->cv_done);
            pthread_mutex_unlock(&p->mu);
        }
    }
}

v4_pool *v4_pool_create(int n_threads)
{
    if (n_threads < 1)
        n_threads = 1;
    v4_pool *p = calloc(1, sizeof *p);
    if (!p)
        return NULL;
    p->n = n_threads;
    pthread_mutex_init(&p->mu, NULL);
    pthread_cond_init(&p->cv_work, NULL);
    pthread_cond_init(&p->cv_done, NULL);
    atomic_init(&p->next, 0);
    atomic_init(&p->pending, 0);
    atomic_init(&p->gen, 0);
    atomic_init(&p->stop, 0);
    atomic_init(&p->sleepers, 0);
    atomic_init(&p->caller_waits, 0);
    if (n_threads > 1) {
        p->th = calloc((size_t)n_threads - 1, sizeof *p->th);
        if (!p->th) {
            v4_pool_destroy(p);
            return NULL;
        }
        for (int i = 1; i < n_threads; i++) {
            worker_arg *wa = malloc(sizeof *wa);
            if (!wa) {
                v4_pool_destroy(p);
                return NULL;
            }
            wa->p = p;
            wa->id = i;
            if (pthread_create(&p->th[i - 1], NULL, worker_main, wa) != 0) {
                free(wa);
                v4_pool_destroy(p);
                return NULL;
            }
            p->n_started++;
        }
    }
    return p;
}

int v4_pool_threads(const v4_pool *p) { return p ? p->n : 1; }

void v4_pool_run(v4_pool *p, int n_tasks, v4_pool_fn fn, void *ctx)
{
    if (n_tasks <= 0)
        return;
    if (!p || p->n <= 1 || n_tasks == 1) {
        for (int t = 0; t < n_tasks; t++)
            fn(ctx, t, 0);
        return;
    }
    p->fn = fn;
    p->ctx = ctx;
    p->n_tasks = n_tasks;
    atomic_store_explicit(&p->next, 0, memory_order_relaxed);
    atomic_store_explicit(&p->pending, p->n_started, memory_order_relaxed);
    atomic_fetch_add(&p->gen, 1);
    if (atomic_load(&p->sleepers) > 0) {
        pthread_mutex_lock(&p->mu);
        pthread_cond_broadcast(&p->cv_work);
        pthread_mutex_unlock(&p->mu);
    }

    run_tasks(p, 0);

    for (int i = 0; i < V4_POOL_SPIN; i++) {
        if (atomic_load_explicit(&p->pending, memory_order_acquire) == 0)
            return;
        cpu_relax(i);
    }
    pthread_mutex_lock(&p->mu);
    atomic_store(&p->caller_waits, 1);
    while (atomic_load(&p->pending) != 0)
        pthread_cond_wait(&p->cv_done, &p->mu);
    atomic_store(&p->caller_waits, 0);
    pthread_mutex_unlock(&p->mu);
}

void v4_pool_destroy(v4_pool *p)
{
    if (!p)
        return;
    if (p->n_started > 0) {
        pthread_mutex_lock(&p->mu);
        atomic_store_explicit(&p->stop, 1, memory_order_release);
        atomic_fetch_add_explicit(&p->gen, 1, memory_order_release);
        pthread_cond_broadcast(&p->cv_work);
        pthread_mutex_unlock(&p->mu);
        for (int i = 0; i < p->n_started; i++)
            pthread_join(p->th[i], NULL);
    }
    free(p->th);
    pthread_cond_destroy(&p->cv_work);
    pthread_cond_destroy(&p->cv_done);
    pthread_mutex_destroy(&p->mu);
    free(p);
}
