/* test_threadpool.c - the CPU backend's thread pool: every task runs exactly once per
 * run, thread ids are in range, back-to-back runs (spinning workers) and runs after
 * the workers fell asleep both work, create/destroy without any run (workers that
 * start after the shutdown request) does not hang, and a run stalled by a slow worker
 * sends the pool solo for a while (threadpool.h stats). */
#include <stdatomic.h>
#include <string.h>
#include <time.h>

#include "kernels/cpu/threadpool.h"
#include "testutil.h"

typedef struct job {
    atomic_int *hits;
    int n_threads;
    atomic_int bad_thread;
} job;

static void task(void *ctx, int t, int thread)
{
    job *j = ctx;
    atomic_fetch_add(&j->hits[t], 1);
    if (thread < 0 || thread >= j->n_threads)
        atomic_store(&j->bad_thread, 1);
}

/* Runs n_tasks (<= 4096) of fn (task or slow_task) and checks each ran once on a
 * valid thread. */
static int run_fn(v4_pool *p, int n_tasks, v4_pool_fn fn)
{
    static atomic_int hits[4096];
    for (int i = 0; i < n_tasks; i++)
        atomic_store(&hits[i], 0);
    job j = {hits, v4_pool_threads(p), 0};
    v4_pool_run(p, n_tasks, fn, &j);
    int ok = !atomic_load(&j.bad_thread);
    for (int i = 0; i < n_tasks; i++)
        ok &= atomic_load(&hits[i]) == 1;
    return ok;
}

static int run_and_check(v4_pool *p, int n_tasks) { return run_fn(p, n_tasks, task); }

/* Tasks of 0.2 ms on the caller (so that a worker wakes up in time to claim one) and
 * of 5 ms on a worker (thread != 0). */
static void slow_task(void *ctx, int t, int thread)
{
    task(ctx, t, thread);
    struct timespec ts = {0, (thread ? 5000 : 200) * 1000L};
    nanosleep(&ts, NULL);
}


int main(void)
{
    /* create/destroy storms, no runs: late-starting workers must see the shutdown */
    for (int k = 0; k < 200; k++) {
        v4_pool *p = v4_pool_create(1 + k % 6);
        CHECK(p != NULL, "create");
        v4_pool_destroy(p);
    }
    for (int nt = 1; nt <= 6; nt++) {
        v4_pool *p = v4_pool_create(nt);
        CHECK(p && v4_pool_threads(p) == nt, "threads %d", nt);
        int ok = 1;
        for (int it = 0; it < 3000; it++)             /* back to back */
            ok &= run_and_check(p, 1 + (it * 7) % 300);
        CHECK(ok, "back-to-back runs, %d threads", nt);
        ok = run_and_check(p, 4096);
        CHECK(ok, "4096 tasks, %d threads", nt);
        for (int it = 0; it < 3; it++) {              /* after the workers slept */
            struct timespec ts = {0, 30 * 1000 * 1000};
            nanosleep(&ts, NULL);
            ok &= run_and_check(p, 17);
        }
        CHECK(ok, "runs after sleep, %d threads", nt);
        v4_pool_run(p, 0, task, NULL);                /* no tasks: no call */
        v4_pool_destroy(p);
    }
    /* a worker that holds a task for 5 ms while the caller's are quick: the caller's
     * wait is a stall (the pool's counters say so) and the run right after it goes on
     * the caller alone (solo_runs), every task still run exactly once */
    {
        v4_pool *p = v4_pool_create(2);
        v4_pool_stats st = {0};
        int ok = 1, tries = 0;
        for (; tries < 200 && st.solo_runs == 0; tries++) {
            ok &= run_fn(p, 3, slow_task);
            ok &= run_and_check(p, 8);
            v4_pool_get_stats(p, &st);
        }
        CHECK(ok && st.stalls >= 1 && st.solo_runs >= 1,
              "a stalled run backs off to solo runs (%d tries: runs %llu, stalls %llu, solo %llu)", tries, st.runs,
              st.stalls, st.solo_runs);
        v4_pool_destroy(p);
    }
    /* first run immediately after create */
    for (int k = 0; k < 100; k++) {
        v4_pool *p = v4_pool_create(3);
        CHECK(run_and_check(p, 5), "first run");
        v4_pool_destroy(p);
    }
    TEST_DONE();
}
