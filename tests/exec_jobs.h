/* exec_jobs.h - test helpers for the executor tests (test_admit_cont, test_oom_cont):
 * a job from a task line (job_of: parsed, invalid lines reported and left for the
 * executor to fail), and take(): a returned job's outcome (rc, error code and message,
 * text, tokens, first step, the executor's step count when it came back) copied into an
 * `out`, then the job freed; run_jobs(): submit a set of task lines and step the
 * executor until all are back.
 * Ownership: job_of's job is the caller's until submitted; take frees the job it is
 * given.  Thread: the test's. */
#ifndef V4_TESTS_EXEC_JOBS_H
#define V4_TESTS_EXEC_JOBS_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "worker/serve/executor.h"
#include "worker/serve/task_run_internal.h"

typedef struct out {
    int rc, code, n_tokens;
    char text[2048], msg[512];
    int32_t tokens[64];
    long first_step, done_at;
} out;

static inline v4_job *job_of(const char *line)
{
    v4_job *j = calloc(1, sizeof *j);
    v4_task_error e = {0};
    if (v4_task_parse(line, strlen(line), 1 << 20, &j->task, &e))
        fprintf(stderr, "task invalid: %s\n", e.message);
    return j;
}

static inline void take(v4_exec *x, v4_job *j, out *o)
{
    o->rc = j->rc;
    o->code = j->rc ? (int)j->err.code : 0;
    snprintf(o->msg, sizeof o->msg, "%s", j->rc ? j->err.message : "");
    snprintf(o->text, sizeof o->text, "%.*s", (int)j->out.text_len, j->out.text ? j->out.text : "");
    o->n_tokens = j->out.n_tokens < 64 ? j->out.n_tokens : 64;
    if (j->out.tokens)
        memcpy(o->tokens, j->out.tokens, sizeof(int32_t) * (size_t)o->n_tokens);
    o->first_step = j->first_step;
    o->done_at = v4_exec_steps(x);
    v4_job_free(j);
    free(j);
}

/* Submit the n (<= 8) jobs of lines at once to x, their outcomes into o[0..n), and step
 * until every one is back (bounded: 10000 steps).  0, or -1 when a submit failed, -2
 * when jobs were still in flight at the bound (the caller's CHECK says which). */
static inline int run_jobs(v4_exec *x, const char *const *lines, int n, out *o)
{
    v4_job *fin[8];
    int rc = 0;
    for (int i = 0; i < n; i++) {
        v4_job *j = job_of(lines[i]);
        j->ud = &o[i];
        if (x->ops->submit(x, j)) {
            fprintf(stderr, "submit %d refused\n", i);
            rc = -1;
        }
    }
    for (int guard = 0; x->ops->in_flight(x) > 0 && guard < 10000; guard++)
        for (int k = x->ops->step(x, fin, 8), q = 0; q < k; q++)
            take(x, fin[q], (out *)fin[q]->ud);
    return rc ? rc : x->ops->in_flight(x) == 0 ? 0 : -2;
}

#endif
