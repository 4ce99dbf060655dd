/* task_exec.c - dispatch a task by kind (see task_exec.h).
 * Thread: one thread at a time per runner. */
#include "task_exec.h"

#include "choices.h"
#include "summarize.h"

int v4_task_execute(v4_runner *r, const v4_task *t, double deadline_ms, int (*abort_fn)(void *), void *abort_ud,
                    v4_run_output *out, v4_task_error *e)
{
    if (t->kind == V4_TASK_KIND_SUMMARIZE)
        return v4_summarize_run(r, t, deadline_ms, abort_fn, abort_ud, out, e);
    return v4_choices_run(r, t, deadline_ms, abort_fn, abort_ud, out, e);   /* n = 1: v4_runner_run */
}
