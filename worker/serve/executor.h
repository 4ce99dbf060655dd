/* executor.h - how the serving core hands tasks to the engine: an executor interface,
 * a job record, and two implementations: one task at a time on a v4_runner
 * (exec_serial.c), and continuous batching (exec_cont.c: up to N generation tasks
 * advanced together, one v4_step per step).  Its drivers are the queue worker
 * (worker/fleet/worker_main.c) and `v4fleet batch` (worker/tools/cmd_batch.c).
 *
 * Design: the driver keeps up to capacity() jobs in flight: it submits jobs, then calls
 * step() which advances the jobs in flight and hands back the ones that finished, in
 * completion order (the driver answers each at once: a result line, a published
 * result).  The driver submits while in_flight() < capacity(), then calls step() until
 * a slot frees, so a job waits at most one step for a free slot.  The serial executor
 * has capacity 1 and step() runs the one job to the end.  The continuous executor has
 * capacity N and step() is one batched forward step over every admitted job (see
 * v4_exec_continuous).  An executor that expands a job into several (summarization of
 * long documents) plugs in behind the same calls.
 *
 * A job (v4_job) is the task and what running it produced; where the task came from
 * (a batch-file line, a queue delivery) stays with the driver, which may embed the job
 * in a record of its own (ud, release).
 *
 * Ownership: submit() lends the job to the executor until step() returns it; the
 * driver frees it (destroy() releases the jobs still in flight).  The executor does
 * not own the runner.  Thread: the driver's thread.
 */
#ifndef V4_SERVE_EXECUTOR_H
#define V4_SERVE_EXECUTOR_H

#include "task_exec.h"
#include "task_packet.h"
#include "task_run.h"

typedef struct v4_job {
    v4_task task;                   /* the validated task; the job owns it (v4_job_free) */
    void *ud;                       /* the submitter's (the executor never touches it) */
    /* Frees a job the executor still holds when it is destroyed (destroy()); NULL:
     * v4_job_free(j) then free(j).  A submitter that embeds the job in a record of
     * its own sets it to free that record. */
    void (*release)(struct v4_job *j);
    /* Optional (the submitter's; NULL: none): polled with the job before every forward
     * step that carries it, next to the executor's abort_fn; non-zero stops this job
     * alone without a result (rc -2; out.text keeps the text so far).  The queue worker
     * stops a task so when the connection that delivered it is lost (the broker has
     * requeued it), or when a cancel message names it (then it answers `cancelled`). */
    int (*abort_job)(const struct v4_job *j);
    int (*x_abort)(void *);         /* the executor's abort_fn and its ud (set at submit) */
    void *x_abort_ud;
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
} v4_job;

typedef struct v4_exec v4_exec;

/* What a continuous executor's forward steps did (cumulative): steps, rows (sequence
 * positions carried: rows / steps = mean batch), and the weight bytes they read: per
 * step the trunk (attention, shared experts, head, ...) plus the distinct routed
 * experts its rows used, per layer (the union the provider loads once); and the
 * multiply-adds of their weight products (every row: the trunk and its routed experts). */
typedef struct v4_exec_figs {
    long steps, rows;
    double weight_bytes, macs;
    /* the routed experts' share of those (the rest is the trunk's) */
    double expert_bytes, expert_macs;
    /* steps at which a job's admission had to wait for device memory (continuous) */
    long admit_waits;
    /* first steps of a job retried later: the step implementation found no memory for
     * its new sequence while other jobs ran (v4_step_fault; continuous) */
    long oom_retries;
    /* steps a running job sat out because its sequence's memory had to wait (the step
     * implementation's stall, v4_step_fault; continuous) */
    long mem_stalls;
} v4_exec_figs;

typedef struct v4_exec_ops {
    int (*capacity)(v4_exec *x);
    /* 0, or -1 when no slot is free. */
    int (*submit)(v4_exec *x, v4_job *job);
    /* Advance the jobs in flight; store up to max finished jobs in done[]; return how
     * many (0 when none is in flight; the continuous executor may also return 0 while
     * jobs are still in flight: check in_flight). */
    int (*step)(v4_exec *x, v4_job **done, int max);
    /* Jobs submitted and not yet handed back by step(). */
    int (*in_flight)(v4_exec *x);
    /* Releases the jobs still in flight (v4_job_release; their results are lost). */
    void (*destroy)(v4_exec *x);
    void (*figs)(v4_exec *x, struct v4_exec_figs *f);   /* NULL: not counted */
} v4_exec_ops;

struct v4_exec {
    const v4_exec_ops *ops;
};

/* The one-at-a-time executor.  abort_fn (may be NULL) is polled before every forward
 * step: non-zero stops the running task without a result (rc -2); so does the job's
 * own abort_job. */
v4_exec *v4_exec_serial(v4_runner *r, int (*abort_fn)(void *), void *abort_ud);

/* Continuous batching: capacity n (<= the runner's max_batch; NULL + message in err
 * otherwise, or out of memory).  submit() admits a job at once (prompt built, sequence
 * created; a job that fails there is handed back by the next step()).  step() = one
 * v4_step over every admitted generation job: each feeds one token, a prompt token
 * (chunked prefill, chunk 1 position per step: a long prompt never stalls the others)
 * or its last sampled token, so prefill and decode positions mix in one pass over the
 * weights; then finished jobs (stop, length, error, deadline, abort) are retired and
 * handed back, freeing their slots before the next step.  Sampling, stop strings and
 * detokenization are per job (generate.h), so outputs equal the serial executor's,
 * greedy or seeded.  A task with n > 1 answers holds one slot for all its choices, run
 * one after another from one prefill (choices.h).  A summarize task holds one slot for its whole tree: its chunk and
 * summary generations are stepped with the other jobs (exec_cont.c).  A step the step
 * implementation fails for one new sequence only (v4_ctx_step_fault: out of device
 * memory despite admission) takes that job out and runs again without it: the job waits
 * while others are active (figs.oom_retries) or fails alone.  Limitations: a step whose
 * expert provider fails fails every job it carried (their sequences are broken), with
 * the provider's error.  Paged experts: the step acquires the union of
 * its jobs' experts once; each block the step loaded (a miss or a prefetch) is charged
 * to the first row, in row order, whose activations used it, so a job's experts figures
 * (task_run.h) add up to its activations and the jobs' figures to the step's loads, and
 * are the same in every run of the same jobs. */
v4_exec *v4_exec_continuous(v4_runner *r, int n, int (*abort_fn)(void *), void *abort_ud, char *err,
                                        size_t err_cap);
/* Forward steps the continuous executor has run (0 for others). */
long v4_exec_steps(v4_exec *x);
/* Its figures (all 0 for other executors). */
void v4_exec_figs_get(v4_exec *x, v4_exec_figs *f);

/* The abort poll an executor hands the runner for job (a v4_job *): the executor's
 * abort_fn (job->x_abort), then the job's own (job->abort_job). */
int v4_job_abort_poll(void *job);
/* Frees what the job owns (its task and output), not the job itself. */
void v4_job_free(v4_job *j);
/* What destroy() does with a job still in flight: j->release(j), or v4_job_free(j) and
 * free(j) when release is NULL. */
void v4_job_release(v4_job *j);

#endif
