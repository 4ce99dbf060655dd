/* batch_exec.h - how `v4fleet batch` hands tasks to the engine: an executor interface
 * and its first implementation, one task at a time on a v4_runner.
 *
 * Design: the driver (cmd_batch.c) keeps up to capacity() jobs in flight: it submits
 * jobs, then calls step() which advances the jobs in flight and hands back the ones that
 * finished, in completion order (the driver writes each result line at once, so OUTPUT
 * is in completion order; every line carries its id / custom_id and error lines their
 * input "line").  The serial executor has capacity 1 and step() runs the one job to the
 * end.  A continuous-batching executor (several sequences advanced by one batched
 * forward step, admitting and retiring between steps) or one that expands a job into
 * several (summarization of long documents: chunks, then a summary of summaries)
 * plugs in behind the same three calls without touching the driver.
 *
 * Ownership: submit() lends the job to the executor until step() returns it; the
 * driver frees it.  The executor does not own the runner.  Thread: the driver's thread.
 */
#ifndef V4_BATCH_EXEC_H
#define V4_BATCH_EXEC_H

#include "batch_input.h"
#include "task_exec.h"
#include "task_run.h"

typedef struct v4_batch_job {
    v4_batch_item item;             /* the validated task (item.ok) */
    double deadline_ms;             /* absolute CLOCK_MONOTONIC ms (set at submit when 0) */
    long deadline_default_ms;       /* used when the task has no deadline_ms; 0 = none */
    double start_ms, end_ms;
    /* filled when done */
    int rc;                         /* 0 succeeded, -1 failed (err), -2 aborted: no result */
    v4_run_output out;
    v4_task_error err;
} v4_batch_job;

typedef struct v4_batch_exec v4_batch_exec;

typedef struct v4_batch_exec_ops {
    int (*capacity)(v4_batch_exec *x);
    /* 0, or -1 when no slot is free. */
    int (*submit)(v4_batch_exec *x, v4_batch_job *job);
    /* Advance the jobs in flight; store up to max finished jobs in done[]; return how
     * many (0 when none is in flight). */
    int (*step)(v4_batch_exec *x, v4_batch_job **done, int max);
    void (*destroy)(v4_batch_exec *x);
} v4_batch_exec_ops;

struct v4_batch_exec {
    const v4_batch_exec_ops *ops;
};

/* The one-at-a-time executor.  abort_fn (may be NULL) is polled before every forward
 * step: non-zero stops the running task without a result (rc -2). */
v4_batch_exec *v4_batch_exec_serial(v4_runner *r, int (*abort_fn)(void *), void *abort_ud);

void v4_batch_job_free(v4_batch_job *j);

#endif
