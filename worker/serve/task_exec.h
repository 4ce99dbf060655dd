/* task_exec.h - run any task kind: the one entry point the worker and the batch
 * executors call.  Generation tasks go to v4_runner_run (task_run.h), those with n > 1
 * through choices.h (several answers from one prefill); summarize tasks
 * to the summarizer (several generations: chunks, then summaries of summaries).
 *
 * Ownership and thread: as v4_runner_run (out owned by the caller, one thread at a
 * time per runner).
 */
#ifndef V4_TASK_EXEC_H
#define V4_TASK_EXEC_H

#include "task_run.h"

/* Returns 0 (out filled), -1 (e filled: the task failed), -2 (aborted, no result). */
int v4_task_execute(v4_runner *r, const v4_task *t, double deadline_ms, int (*abort_fn)(void *), void *abort_ud,
                    v4_run_output *out, v4_task_error *e);

#endif
