/* exec_serial.c - the serial executor: one task at a time (see executor.h), run whole by
 * v4_task_execute -> v4_runner_run (task_run.c; an output constraint's mask is applied in
 * its generation state after each forward step, before sampling: constrain.h).
 * Thread: the driver's thread. */
#include "executor.h"

#include <stdlib.h>
#include <string.h>

typedef struct serial_exec {
    v4_exec base;
    v4_runner *runner;
    int (*abort_fn)(void *);
    void *abort_ud;
    v4_job *job;              /* in flight, NULL when idle */
} serial_exec;

static int serial_capacity(v4_exec *x)
{
    (void)x;
    return 1;
}

static int serial_submit(v4_exec *x, v4_job *job)
{
    serial_exec *s = (serial_exec *)x;
    if (s->job)
        return -1;
    s->job = job;
    return 0;
}

static int serial_step(v4_exec *x, v4_job **done, int max)
{
    serial_exec *s = (serial_exec *)x;
    v4_job *j = s->job;
    if (!j || max < 1)
        return 0;
    s->job = NULL;
    j->start_ms = v4_now_ms();
    if (!j->deadline_ms) {
        long ms = j->task.deadline_ms ? j->task.deadline_ms : j->deadline_default_ms;
        j->deadline_ms = ms ? j->start_ms + (double)ms : 1e300;
    }
    memset(&j->err, 0, sizeof j->err);
    j->x_abort = s->abort_fn;
    j->x_abort_ud = s->abort_ud;
    j->rc = v4_task_execute(s->runner, &j->task, j->deadline_ms, v4_job_abort_poll, j, &j->out, &j->err);
    j->end_ms = v4_now_ms();
    done[0] = j;
    return 1;
}

static int serial_in_flight(v4_exec *x)
{
    return ((serial_exec *)x)->job != NULL;
}

static void serial_destroy(v4_exec *x)
{
    serial_exec *s = (serial_exec *)x;
    if (s && s->job) {
        v4_job_release(s->job);
    }
    free(s);
}

static const v4_exec_ops serial_ops = {serial_capacity, serial_submit, serial_step, serial_in_flight,
                                          serial_destroy, NULL};

v4_exec *v4_exec_serial(v4_runner *r, int (*abort_fn)(void *), void *abort_ud)
{
    serial_exec *s = calloc(1, sizeof *s);
    if (!s)
        return NULL;
    s->base.ops = &serial_ops;
    s->runner = r;
    s->abort_fn = abort_fn;
    s->abort_ud = abort_ud;
    return &s->base;
}

void v4_exec_figs_get(v4_exec *x, v4_exec_figs *f)
{
    memset(f, 0, sizeof *f);
    if (x->ops->figs)
        x->ops->figs(x, f);
}

long v4_exec_steps(v4_exec *x)
{
    v4_exec_figs f;
    v4_exec_figs_get(x, &f);
    return f.steps;
}

int v4_job_abort_poll(void *job)
{
    const v4_job *j = job;
    return (j->x_abort && j->x_abort(j->x_abort_ud)) || (j->abort_job && j->abort_job(j));
}

void v4_job_free(v4_job *j)
{
    v4_run_output_free(&j->out);
    v4_task_free(&j->task);
}

void v4_job_release(v4_job *j)
{
    if (j->release) {
        j->release(j);
    } else {
        v4_job_free(j);
        free(j);
    }
}
