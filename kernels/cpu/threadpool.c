/* threadpool.c - see threadpool.h.
 *
 * Protocol.  The caller owns a private generation number g.  One run:
 *   caller: jobs[g & 1] := (fn, ctx, n_tasks); done := 0;
 *           claim := (g << 32) | 0 (seq_cst); if a worker sleeps, broadcast cv_work;
 *           claims tasks itself like a worker; then waits (short spin, then cv_done)
 *           until done == n_tasks.
 *   worker: loads claim = (g, t); if t < jobs[g & 1].n_tasks, reads fn and ctx and
 *           claims t by a compare-and-swap (g, t) -> (g, t + 1); on success runs
 *           task t and adds 1 to done (the last one signals cv_done if the caller
 *           sleeps); else (nothing left in g) waits until claim's generation moves on
 *           (spin, then cv_work).
 * The run ends when its tasks are done, not when every worker has checked in: a
 * worker the OS has not scheduled holds up nothing (the others, the caller included,
 * take its share), and it joins whichever run is current when it gets a core.  That
 * is what keeps a pool of T threads no slower than one thread when the threads do
 * not get their cores (a CPU quota below the visible cores, competing processes).
 * Safety: a claim succeeds only while claim still reads (g, t) with t < n_tasks of g,
 * i.e. task t of g is not done, so the caller is still in run g and jobs[g & 1] holds
 * g's job (the next run writes the other slot; the one after can only start after
 * this task is done).  A stale worker may read fields being rewritten for a later
 * run, but its compare-and-swap then fails and it discards them (the fields are
 * atomics, so such a read is not a data race).  Every task of g is claimed once, and
 * done counts only g's tasks (the caller waited for all of g-1's before resetting it).
 * Lost wake-ups are excluded Dekker-style: a sleeper announces itself (sleepers++ /
 * caller_waits := 1, seq_cst, under the mutex) before re-checking its condition, the
 * waker changes the condition (seq_cst) before reading the announcement.
 * Spinning: a worker spins at most `spin` pause iterations (yielding the CPU every
 * V4_POOL_YIELD_EVERY) before it sleeps; `spin` halves after each run in which the
 * worker claimed nothing (it is surplus: the others ran every task, as when more
 * threads run than get cores) down to V4_POOL_SPIN_MIN, and returns to V4_POOL_SPIN
 * when it claims a task again.  The caller's wait for the last tasks spins the same
 * way, without yielding (a yield hands the core to another process for a whole
 * time slice), before it sleeps.
 * Stalls: a worker that claimed a task and then lost its core (a time slice of
 * another process: milliseconds) holds up the run until it gets a core back.  The
 * caller times each run (its own work, then its wait for the others); when the wait
 * exceeds twice its work plus 100 us, the runs of the next `backoff` (2 ms at first)
 * go on the caller alone (the workers sleep, leaving the cores to whoever has them),
 * then the pool tries again; the backoff doubles (up to 1 s) while stalls persist and
 * resets after a streak of clean runs.  A stall costs about one time slice of the
 * competing work, so probing at most once a second costs well under 1%.  Tasks compute the same bytes on any thread, so this changes
 * timing only.
 * Shutdown: stop := 1 and a generation of no tasks, then a broadcast under the mutex.
 * Generations are 32 bits and wrap (a worker would need to sleep through 2^32 runs to
 * be confused by it).
 */
#include "threadpool.h"

#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <time.h>

/* Spin iterations before sleeping (each is one pause instruction, ~10-60 ns), the
 * floor a surplus worker's spin shrinks to, and how often a spinner yields. */
#define V4_POOL_SPIN 20000
#define V4_POOL_SPIN_MIN 256
#define V4_POOL_YIELD_EVERY 64
/* The caller's wait for the other threads' last tasks: pause iterations before it
 * sleeps (no yields: under competition a yield hands the core to another process for
 * a whole time slice). */
#define V4_POOL_WAIT_SPIN 4000
/* Stall detection (see v4_pool_run): a run stalled when the caller, done with its own
 * claims, waited more than STALL_FACTOR x its own working time + STALL_SLACK_S for
 * the others; a stall sends the pool solo for `backoff` seconds (from BACKOFF_MIN_S,
 * doubling up to BACKOFF_MAX_S while the stalls persist; reset after CLEAN_RESET
 * clean runs). */
#define V4_POOL_STALL_FACTOR 2.0
#define V4_POOL_STALL_SLACK_S 100e-6
#define V4_POOL_BACKOFF_MIN_S 2e-3
#define V4_POOL_BACKOFF_MAX_S 1.0
#define V4_POOL_CLEAN_RESET 256

typedef struct pool_job {
    _Atomic(v4_pool_fn) fn;
    _Atomic(void *) ctx;
    atomic_int n_tasks;
} pool_job;

struct v4_pool {
    int n;                          /* threads in total, including the caller */
    pthread_t *th;
    int n_started;
    pthread_mutex_t mu;
    pthread_cond_t cv_work, cv_done;
    pool_job jobs[2];               /* the job of generation g is jobs[g & 1] */
    atomic_uint_least64_t claim;    /* (generation << 32) | next task index */
    atomic_int done;                /* tasks of the current generation finished */
    uint32_t gen;                   /* the caller's current generation */
    atomic_int stop;
    atomic_int sleepers;            /* workers blocked (or about to block) on cv_work */
    atomic_int caller_waits;        /* the caller blocked (or about to) on cv_done */
    /* the caller's stall detection (caller thread only) */
    double solo_until;              /* runs go on the caller alone until then (0: not) */
    double backoff_s;
    int clean;
    v4_pool_stats st;
};

typedef struct worker_arg {
    v4_pool *p;
    int id;
} worker_arg;

static inline void cpu_pause(void)
{
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#endif
}

static inline void cpu_relax(int i)
{
    if (i % V4_POOL_YIELD_EVERY == V4_POOL_YIELD_EVERY - 1)
        sched_yield();
    else
        cpu_pause();
}

static inline uint32_t gen_of(uint64_t c) { return (uint32_t)(c >> 32); }

/* Claims and runs tasks of the current generation until none is left; returns how
 * many this thread ran; *g_out = the generation it last saw. */
static int run_tasks(v4_pool *p, int thread, uint32_t *g_out)
{
    int ran = 0;
    for (;;) {
        uint64_t c = atomic_load_explicit(&p->claim, memory_order_acquire);
        const uint32_t g = gen_of(c), t = (uint32_t)c;
        *g_out = g;
        pool_job *J = &p->jobs[g & 1];
        const int n = atomic_load_explicit(&J->n_tasks, memory_order_relaxed);
        if ((int64_t)t >= (int64_t)n)
            return ran;
        v4_pool_fn fn = atomic_load_explicit(&J->fn, memory_order_relaxed);
        void *ctx = atomic_load_explicit(&J->ctx, memory_order_relaxed);
        if (!atomic_compare_exchange_weak_explicit(&p->claim, &c, c + 1, memory_order_acq_rel,
                                                   memory_order_relaxed))
            continue;
        fn(ctx, (int)t, thread);
        ran++;
        /* seq_cst, with the caller_waits load: the Dekker pair of the caller's wait */
        if (atomic_fetch_add(&p->done, 1) + 1 == n && atomic_load(&p->caller_waits)) {
            pthread_mutex_lock(&p->mu);
            pthread_cond_signal(&p->cv_done);
            pthread_mutex_unlock(&p->mu);
        }
    }
}

static void *worker_main(void *arg)
{
    worker_arg *wa = arg;
    v4_pool *p = wa->p;
    const int id = wa->id;
    free(wa);
    int spin = V4_POOL_SPIN;
    for (;;) {
        if (atomic_load_explicit(&p->stop, memory_order_acquire))
            return NULL;
        uint32_t g;
        const int ran = run_tasks(p, id, &g);
        spin = ran ? V4_POOL_SPIN : spin / 2 > V4_POOL_SPIN_MIN ? spin / 2 : V4_POOL_SPIN_MIN;
        /* wait for the next generation */
        int moved = 0;
        for (int i = 0; i < spin && !moved; i++) {
            moved = gen_of(atomic_load_explicit(&p->claim, memory_order_acquire)) != g;
            if (!moved)
                cpu_relax(i);
        }
        if (!moved) {
            pthread_mutex_lock(&p->mu);
            atomic_fetch_add(&p->sleepers, 1);
            while (gen_of(atomic_load(&p->claim)) == g && !atomic_load(&p->stop))
                pthread_cond_wait(&p->cv_work, &p->mu);
            atomic_fetch_sub(&p->sleepers, 1);
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
    p->backoff_s = V4_POOL_BACKOFF_MIN_S;
    pthread_mutex_init(&p->mu, NULL);
    pthread_cond_init(&p->cv_work, NULL);
    pthread_cond_init(&p->cv_done, NULL);
    for (int i = 0; i < 2; i++) {
        atomic_init(&p->jobs[i].fn, NULL);
        atomic_init(&p->jobs[i].ctx, NULL);
        atomic_init(&p->jobs[i].n_tasks, 0);
    }
    atomic_init(&p->claim, 0);   /* generation 0: no tasks */
    atomic_init(&p->done, 0);
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

/* Publishes generation p->gen + 1 with job (fn, ctx, n_tasks) and wakes sleepers. */
static void publish(v4_pool *p, v4_pool_fn fn, void *ctx, int n_tasks)
{
    const uint32_t g = ++p->gen;
    pool_job *J = &p->jobs[g & 1];
    atomic_store_explicit(&J->fn, fn, memory_order_relaxed);
    atomic_store_explicit(&J->ctx, ctx, memory_order_relaxed);
    atomic_store_explicit(&J->n_tasks, n_tasks, memory_order_relaxed);
    atomic_store_explicit(&p->done, 0, memory_order_relaxed);
    atomic_store(&p->claim, (uint64_t)g << 32);   /* seq_cst: releases the job, orders the sleepers load */
    if (atomic_load(&p->sleepers) > 0) {
        pthread_mutex_lock(&p->mu);
        pthread_cond_broadcast(&p->cv_work);
        pthread_mutex_unlock(&p->mu);
    }
}

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* After a run: work = the caller's time from publishing to its last claim, wait = its
 * time waiting for the other threads' last tasks. */
static void account(v4_pool *p, double work, double wait, double now)
{
    p->st.runs++;
    if (wait > V4_POOL_STALL_FACTOR * work + V4_POOL_STALL_SLACK_S) {
        p->st.stalls++;
        p->clean = 0;
        p->solo_until = now + p->backoff_s;
        p->backoff_s = p->backoff_s * 2 < V4_POOL_BACKOFF_MAX_S ? p->backoff_s * 2 : V4_POOL_BACKOFF_MAX_S;
    } else if (++p->clean >= V4_POOL_CLEAN_RESET) {
        p->clean = 0;
        p->backoff_s = V4_POOL_BACKOFF_MIN_S;
    }
}

void v4_pool_run(v4_pool *p, int n_tasks, v4_pool_fn fn, void *ctx)
{
    if (n_tasks <= 0)
        return;
    int solo = !p || p->n <= 1 || p->n_started == 0 || n_tasks == 1;
    double t0 = 0;
    if (!solo && p->solo_until > 0) {   /* backing off after a stall */
        t0 = now_s();
        if (t0 < p->solo_until) {
            solo = 1;
            p->st.solo_runs++;
        } else {
            p->solo_until = 0;
        }
    }
    if (solo) {
        for (int t = 0; t < n_tasks; t++)
            fn(ctx, t, 0);
        return;
    }
    if (t0 == 0)
        t0 = now_s();
    publish(p, fn, ctx, n_tasks);
    uint32_t g;
    run_tasks(p, 0, &g);
    const double t1 = now_s();
    /* the last tasks run on other threads: wait for them */
    int done = 0;
    for (int i = 0; i < V4_POOL_WAIT_SPIN && !done; i++) {
        done = atomic_load_explicit(&p->done, memory_order_acquire) == n_tasks;
        if (!done)
            cpu_pause();
    }
    if (!done) {
        pthread_mutex_lock(&p->mu);
        atomic_store(&p->caller_waits, 1);
        while (atomic_load(&p->done) != n_tasks)
            pthread_cond_wait(&p->cv_done, &p->mu);
        atomic_store(&p->caller_waits, 0);
        pthread_mutex_unlock(&p->mu);
    }
    const double t2 = now_s();
    account(p, t1 - t0, t2 - t1, t2);
}

void v4_pool_get_stats(const v4_pool *p, v4_pool_stats *st)
{
    if (p)
        *st = p->st;
    else
        *st = (v4_pool_stats){0};
}

void v4_pool_destroy(v4_pool *p)
{
    if (!p)
        return;
    if (p->n_started > 0) {
        pthread_mutex_lock(&p->mu);
        atomic_store_explicit(&p->stop, 1, memory_order_release);
        pthread_mutex_unlock(&p->mu);
        publish(p, NULL, NULL, 0);   /* a generation with no tasks wakes every waiter */
        pthread_mutex_lock(&p->mu);
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
