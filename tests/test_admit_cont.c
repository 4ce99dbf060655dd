/* test_admit_cont.c - admission by device memory in the continuous executor
 * (exec_cont.c, admit.h) on the CPU: a fake admit / release hook (v4_step_impl with
 * step NULL: the CPU path) reports need = capacity x 1000 bytes and avail = a budget
 * less the sequences already stepped and not released.  With a budget for one sequence
 * at a time, job B waits (queued, not failed) while A runs, is carried by the step
 * after A retires, and both give the same text and tokens as an unconstrained run; a
 * job that cannot fit even alone fails with context_length_exceeded naming the bytes,
 * and the executor then serves another job. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "exec_jobs.h"
#include "testutil.h"
#include "worker/serve/executor.h"
#include "worker/serve/task_run_internal.h"

#define UNIT 1000
#define MAXK 16

typedef struct fake {
    size_t budget;
    const v4_seq *key[MAXK];
    size_t bytes[MAXK];
    int n, admits, waits_seen, releases;
    size_t need_min, need_max;   /* over the admit calls */
} fake;

static int fake_admit(void *ud, const v4_seq *key, int max_len, size_t *need, size_t *avail)
{
    fake *f = ud;
    size_t held = 0;
    int have = 0;
    for (int i = 0; i < f->n; i++) {
        have |= f->key[i] == key;
        if (v4_seq_pos(f->key[i]) > 0)   /* allocated at its first step, like the engine */
            held += f->bytes[i];
    }
    if (!have && f->n < MAXK) {
        f->key[f->n] = key;
        f->bytes[f->n++] = (size_t)max_len * UNIT;
    }
    *need = (size_t)max_len * UNIT;
    if (!f->need_min || *need < f->need_min)
        f->need_min = *need;
    if (*need > f->need_max)
        f->need_max = *need;
    *avail = held < f->budget ? f->budget - held : 0;
    f->admits++;
    f->waits_seen += *need > *avail;
    return 0;
}

static void fake_release(void *ud, const v4_seq *key)
{
    fake *f = ud;
    for (int i = 0; i < f->n; i++)
        if (f->key[i] == key) {
            f->key[i] = f->key[--f->n];
            f->bytes[i] = f->bytes[f->n];
            f->releases++;
            return;
        }
}

/* Submit the n jobs at once (n <= capacity), step until all are back. */
static void run(v4_exec *x, const char *const *lines, int n, out *o)
{
    const int rc = run_jobs(x, lines, n, o);
    CHECK(rc == 0, "%s", rc == -1 ? "a submit was refused" : "jobs still in flight after 10000 steps");
}

int main(void)
{
    char dir[4200], err[256];
    if (t_mkmodel_tiny("admit_cont_model", 11, dir, sizeof dir))
        return 1;
    v4_task_error e = {0};
    v4_runner_opts ro = {.threads = 2, .max_batch = 4};
    v4_runner *r = v4_runner_open(dir, "tiny", &ro, &e);
    CHECK(r != NULL, "runner: %s: %s", e.where, e.message);
    if (!r)
        TEST_DONE();
    const char *ab[2] = {"{\"id\":\"a\",\"prompt\":\"Tell me about queues.\",\"max_tokens\":20,\"temperature\":0}",
                         "{\"id\":\"b\",\"input_ids\":[5,9,11],\"max_tokens\":12,\"temperature\":0,\"ignore_eos\":true}"};
    out ref[2], got[2];
    memset(ref, 0, sizeof ref);
    memset(got, 0, sizeof got);

    v4_exec *x = v4_exec_continuous(r, 2, NULL, NULL, err, sizeof err);
    CHECK(x != NULL, "executor: %s", err);
    if (!x)
        TEST_DONE();
    run(x, ab, 2, ref);   /* unconstrained: no admission hook */
    CHECK(ref[0].rc == 0 && ref[1].rc == 0, "unconstrained run: rc %d %d (%s %s)", ref[0].rc, ref[1].rc, ref[0].msg,
          ref[1].msg);
    CHECK(ref[1].first_step == ref[0].first_step, "unconstrained: both start at the same step (%ld, %ld)",
          ref[0].first_step, ref[1].first_step);
    x->ops->destroy(x);

    /* a budget for the larger of the two alone (capacities are prompt + max_tokens) */
    fake f = {.budget = 0};
    v4_step_impl hook = {.admit = fake_admit, .release = fake_release, .ud = &f};
    v4_ctx_set_step_impl(r->ctx, &hook);
    f.budget = (size_t)v4_runner_context(r) * UNIT;   /* probe: measured below */
    x = v4_exec_continuous(r, 2, NULL, NULL, err, sizeof err);
    /* first: learn the two capacities with a huge budget */
    run(x, ab, 2, got);
    const size_t lo = f.need_min, hi = f.need_max;
    x->ops->destroy(x);
    CHECK(f.n == 0 && f.releases == 2, "every sequence released at retirement (%d left, %d releases)", f.n,
          f.releases);

    /* budget: either job alone fits, not both (one position short) */
    CHECK(lo > UNIT && hi >= lo, "probe: needs %zu..%zu", lo, hi);
    f = (fake){.budget = hi + lo - UNIT};
    memset(got, 0, sizeof got);
    x = v4_exec_continuous(r, 2, NULL, NULL, err, sizeof err);
    run(x, ab, 2, got);
    v4_exec_figs fg;
    x->ops->figs(x, &fg);
    for (int i = 0; i < 2; i++) {
        CHECK(got[i].rc == 0, "constrained job %d: rc %d (%s)", i, got[i].rc, got[i].msg);
        CHECK(!strcmp(got[i].text, ref[i].text) && got[i].n_tokens == ref[i].n_tokens &&
                  !memcmp(got[i].tokens, ref[i].tokens, sizeof(int32_t) * (size_t)ref[i].n_tokens),
              "job %d: same output as unconstrained ('%s' vs '%s')", i, got[i].text, ref[i].text);
    }
    CHECK(fg.admit_waits > 0 && f.waits_seen > 0, "job b waited for memory (%ld waits)", fg.admit_waits);
    CHECK(got[1].first_step >= got[0].done_at - 1,
          "b is first stepped after a retired (b first step %ld, a back after %ld steps)", got[1].first_step,
          got[0].done_at);
    CHECK(got[1].first_step == got[0].done_at, "b is carried by the very next step after a retires (%ld vs %ld)",
          got[1].first_step, got[0].done_at);

    /* a job that cannot fit even alone fails precisely; the executor keeps serving */
    f.budget = 10 * UNIT;
    const char *big[1] = {"{\"id\":\"big\",\"prompt\":\"Tell me about queues.\",\"max_tokens\":20,\"temperature\":0}"};
    out ob[1];
    memset(ob, 0, sizeof ob);
    run(x, big, 1, ob);
    CHECK(ob[0].rc != 0 && ob[0].code == V4_TASK_CONTEXT_LENGTH_EXCEEDED && strstr(ob[0].msg, "bytes of device memory") &&
              strstr(ob[0].msg, "10000 available"),
          "too big alone: rc %d code %d: %s", ob[0].rc, ob[0].code, ob[0].msg);
    f.budget = hi;
    memset(got, 0, sizeof got);
    run(x, ab, 1, got);
    CHECK(got[0].rc == 0 && !strcmp(got[0].text, ref[0].text), "the executor serves the next job: rc %d", got[0].rc);
    x->ops->destroy(x);
    v4_ctx_set_step_impl(r->ctx, NULL);
    v4_runner_free(r);
    TEST_DONE();
}
