/* worker_ctx.h - the queue worker's context, shared by its files:
 *   worker_main.c     the command: settings, signals, HTTP callbacks, the main loop;
 *   worker_task.c    one task: parse -> submit to the executor -> result / error record;
 *   worker_reload.c  open + warm up a runner, the Redis counter thread, reloads.
 * Not for other folders.
 *
 * Tasks run through a batch executor (executor.h) of V4_CONCURRENCY slots: the main
 * loop admits deliveries while a slot is free, advances the executor one step, and
 * finishes the jobs it hands back.  A reload waits until no job is in flight.
 *
 * Ownership: the worker owns everything it points to except the HTTP thread's view
 * (health, under its mutex).  Thread: the main (inference) thread, except health.
 */
#ifndef V4_WORKER_CTX_H
#define V4_WORKER_CTX_H

#include <pthread.h>

#include "config/worker_config.h"
#include "log.h"
#include "queue/service.h"
#include "telemetry/util_redis.h"
#include "worker/serve/executor.h"
#include "worker/serve/task_run.h"
#include "worker_metrics.h"

enum { PHASE_LOADING, PHASE_WARMING, PHASE_SERVING, PHASE_RELOADING, PHASE_DRAINING };

/* What the HTTP thread may read; everything under mu. */
typedef struct v4w_health {
    pthread_mutex_t mu;
    int phase;
    v4q_service *svc;           /* NULL until started and once being freed */
    v4_util *util;
} v4w_health;

/* One task in flight: the executor's job first (the executor hands back &job). */
typedef struct v4w_job {
    v4_job job;
    v4q_delivery *d;            /* owned */
    v4q_service *svc;           /* the service that delivered it (its connection generation) */
    double t0, queue_ms;        /* taken (CLOCK_MONOTONIC ms); AMQP timestamp -> taken */
    uint64_t cancel_seen;       /* v4q_cancelled's counter for this job */
    int cancelled;              /* 1: a cancel message named it while it ran; 2: before it started */
} v4w_job;

typedef struct worker {
    v4_worker_config cfg;
    v4_log log;
    v4_wmetrics m;
    v4w_health h;
    v4q_service *svc;
    v4_runner *runner;
    v4_exec *x;           /* over runner; recreated on reload */
    v4_exec_figs x_seen;        /* x's memory-wait figures already counted in the metrics */
    int in_flight;              /* jobs submitted and not yet handed back */
    int (*abort_fn)(void *);    /* the executor's abort poll (shutdown grace over) */
    v4_util *util;              /* Redis expert counters; NULL when V4_REDIS_URL=off */
    char model_real[4096];      /* realpath of V4_MODEL_DIR when loaded (V4_MODEL_WATCH_S) */
    double next_watch_ms;
    char reload_why[4200];      /* a reload is due (no new task is admitted); "" = none */
    long done, failed, invalid, requeued, unconfirmed, unroutable, abandoned, cancelled;
    int stopping;               /* the consumer was cancelled after a signal */
    double stop_at_ms;          /* when the signal was first seen */
} worker;

void v4w_log(worker *w, int level, const char *task, const char *fmt, ...) __attribute__((format(printf, 4, 5)));
void v4w_set_phase(worker *w, int phase, v4q_service *svc, v4_util *util);

/* A delivery taken from the service: invalid -> error record (d freed); valid -> a job
 * submitted to the executor (in_flight + 1; d owned by the job). */
void v4w_take(worker *w, v4q_delivery *d);
/* A job the executor handed back: result (or requeue when aborted; nothing when the
 * connection that delivered it was lost: abandoned), metrics, log; frees the job
 * (in_flight - 1). */
void v4w_complete(worker *w, v4w_job *j);

/* Open a runner with c's settings and warm it up.  0 = *out ready, -1 = logged. */
int v4w_open_runner(worker *w, const v4_worker_config *c, int phase, v4_runner **out);
/* The executor over w->runner (V4_CONCURRENCY slots).  0, or -1 logged. */
int v4w_make_exec(worker *w);
int v4w_start_util(worker *w, const v4_worker_config *c, v4_runner *r);
/* Between steps: note a due reload (hup: SIGHUP seen; V4_MODEL_WATCH_S), and run it
 * once nothing is in flight. */
void v4w_reload_poll(worker *w, int hup);

#endif
