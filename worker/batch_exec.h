/* batch_exec.h - how `v4fleet batch` hands tasks to the engine: an executor interface
 * and two implementations: one task at a time on a v4_runner (serial), and continuous
 * batching (up to N generation tasks advanced together, one v4_step per step).
 *
 * Design: the driver (cmd_batch.c) keeps up to capacity() jobs in flight: it submits
 * jobs, then calls step() which advances the jobs in flight and hands back the ones that
 * finished, in completion order (the driver writes each result line at once, so OUTPUT
 * is in completion order; every line carries its id / custom_id and error lines their
 * input "line").  The driver submits while in_flight() < capacity(), then calls step()
 * until a slot frees, so a job waits at most one step for a free slot.  The serial
 * executor has capacity 1 and step() runs the one job to the end.  The continuous
 * executor (batch_exec_cont.c) has capacity N and step() is one batched forward step
 * over every admitted job (see v4_batch_exec_continuous).  An executor that expands a
 * job into several (summarization of long documents) plugs in behind the same calls.
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
    /* continuous executor: its step counter when the job was submitted and the index
     * of the first forward step that carried it (-1: none; serial executor: 0, 0) */
    long submit_step, first_step;
    /* filled when done */
    int rc;                         /* 0 succeeded, -1 failed (err), -2 aborted: no result */
    v4_run_output out;
    v4_task_error err;
} v4_batch_job;

typedef struct v4_batch_exec v4_batch_exec;

/* What a continuous executor's forward steps did (cumulative): steps, rows (sequence
 * positions carried: rows / steps = mean batch), and the weight bytes they read: per
 * step the trunk (attention, shared experts, head, ...) plus the distinct routed
 * experts its rows used, per layer (the union the provider loads once); and the
 * multiply-adds of their weight products (every row: the trunk and its routed experts). */
typedef struct v4_batch_exec_figs {
    long steps, rows;
    double weight_bytes, macs;
    /* the routed experts' share of those (the rest is the trunk's) */
    double expert_bytes, expert_macs;
} v4_batch_exec_figs;

typedef struct v4_batch_exec_ops {
    int (*capacity)(v4_batch_exec *x);
    /* 0, or -1 when no slot is free. */
    int (*submit)(v4_batch_exec *x, v4_batch_job *job);
    /* Advance the jobs in flight; store up to max finished jobs in done[]; return how
     * many (0 when none is in flight; the continuous executor may also return 0 while
     * jobs are still in flight: check in_flight). */
    int (*step)(v4_batch_exec *x, v4_batch_job **done, int max);
    /* Jobs submitted and not yet handed back by step(). */
    int (*in_flight)(v4_batch_exec *x);
    /* Frees the jobs still in flight (their results are lost). */
    void (*destroy)(v4_batch_exec *x);
    void (*figs)(v4_batch_exec *x, struct v4_batch_exec_figs *f);   /* NULL: not counted */
} v4_batch_exec_ops;

struct v4_batch_exec {
    const v4_batch_exec_ops *ops;
};

/* The one-at-a-time executor.  abort_fn (may be NULL) is polled before every forward
 * step: non-zero stops the running task without a result (rc -2). */
v4_batch_exec *v4_batch_exec_serial(v4_runner *r, int (*abort_fn)(void *), void *abort_ud);

/* Continuous batching: capacity n (<= the runner's max_batch; NULL + message in err
 * otherwise, or out of memory).  submit() admits a job at once (prompt built, sequence
 * created; a job that fails there is handed back by the next step()).  step() = one
 * v4_step over every admitted generation job: each feeds one token, a prompt token
 * (chunked prefill, chunk 1 position per step: a long prompt never stalls the others)
 * or its last sampled token, so prefill and decode positions mix in one pass over the
 * weights; then finished jobs (stop, length, error, deadline, abort) are retired and
 * handed back, freeing their slots before the next step.  Sampling, stop strings and
 * detokenization are per job (generate.h), so outputs equal the serial executor's,
 * greedy or seeded.  Limitations: tasks of another kind (summarize) run synchronously
 * inside step() through v4_task_execute, stalling the others for their duration; a
 * step whose expert provider fails fails every job it carried (their sequences are
 * broken), with the provider's error.  Paged experts: the step acquires the union of
 * its jobs' experts once; each job's experts figures get an equal share of the step's
 * cache misses and bytes (hits = its activations - its misses). */
v4_batch_exec *v4_batch_exec_continuous(v4_runner *r, int n, int (*abort_fn)(void *), void *abort_ud, char *err,
                                        size_t err_cap);
/* Forward steps the continuous executor has run (0 for others). */
long v4_batch_exec_steps(v4_batch_exec *x);
/* Its figures (all 0 for other executors). */
void v4_batch_exec_figs_get(v4_batch_exec *x, v4_batch_exec_figs *f);

void v4_batch_job_free(v4_batch_job *j);

#endif
