/* mask_ahead.c - see mask_ahead.h. */
#include <time.h>

#include "mask_ahead.h"

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static void *run(void *arg)
{
    v4_mask_ahead *m = arg;
    const double t0 = now_s();
    for (int i = 0; i < m->n; i++)
        v4_constrain_prepare(m->states[i]);
    m->busy_s = now_s() - t0;
    return NULL;
}

void v4_mask_ahead_start(v4_mask_ahead *m, v4_constrain **states, int n)
{
    m->running = 0;
    m->busy_s = 0;
    if (n <= 0)
        return;
    m->states = states;
    m->n = n;
    m->running = pthread_create(&m->th, NULL, run, m) == 0;
}

void v4_mask_ahead_join(v4_mask_ahead *m)
{
    if (m->running)
        pthread_join(m->th, NULL);
    m->running = 0;
}
