/* test_oom_cont.c - a new sequence's out of memory at its first step, in the continuous
 * executor (exec_cont.c forward / drop_faulted, v4_step_fault, v4_ctx_step_fault).
 *
 * A fake step implementation wraps the CPU path: it keeps its own sequences (shadows,
 * keyed by the v4_seq like the CUDA engine's device state, created at position 0 in row
 * order, freed by the release hook) and steps them through a second context without an
 * implementation.  For a chosen sequence (by its capacity) it fails the first `fail`
 * attempts of its first step the way the engine does: the sequences before it in the
 * step have fresh state at position 0, the chosen one a partial shadow, nothing is
 * stepped, and fault = {its first row, retryable}.  Checked: the job waits and
 * completes later, the other job and it give the text and tokens of an unconstrained
 * run (no implementation), the other job starts at step 0, the faulted one exactly after
 * its faults, its partial state was released before it was stepped again, nothing
 * failed, figs.oom_retries counts the faults; the same with the fault at row 0.  Alone,
 * the job fails with context_length_exceeded ("no device memory ... no other sequence
 * active") and the executor then serves another job.  A non-retryable fault fails that
 * job only; a failure without a fault still fails every job of the step.  A stall (the
 * step implementation's memory for a running sequence must wait, v4_step_fault.stall):
 * at the second generated position of either job, twice, while the
 * other job runs: both give the unconstrained outputs, the stalled sequence is never
 * released (its state and position are kept: no reset, positions consistent), the other
 * job is not delayed, figs.mem_stalls counts the stalls; alone, the stalled job fails
 * with device_memory ("could not grow ... no other sequence running") and the executor
 * serves the next job. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "exec_jobs.h"
#include "testutil.h"
#include "worker/serve/executor.h"
#include "worker/serve/task_run_internal.h"

#define MAXK 16

typedef struct fstep {
    const v4_weights *w;
    v4_ctx *cpu;                /* the CPU path (no implementation) */
    const v4_seq *key[MAXK];
    v4_seq *shadow[MAXK];       /* NULL: a partial state (the fault's) */
    int nk;
    int fail_len;               /* capacity of the sequence to fault; 0: none */
    int fail;                   /* attempts of its first step to fault; -1: all */
    int retryable;              /* the fault's retryable */
    int whole;                  /* fail the step without a fault instead */
    int stall_len, stall_pos;   /* capacity of the sequence to stall, and where; 0: none */
    int stall;                  /* attempts to stall; -1: all */
    int stalls, stalls_alone, resets;
    int faults, faults_alone, stepped_unreleased, bad_pos, lens[MAXK], nlens;
    const v4_seq *pending;      /* faulted, not yet released */
} fstep;

static int find(fstep *f, const v4_seq *key)
{
    for (int i = 0; i < f->nk; i++)
        if (f->key[i] == key)
            return i;
    return -1;
}

static void fake_release(void *ud, const v4_seq *key)
{
    fstep *f = ud;
    int i = find(f, key);
    if (f->pending == key)
        f->pending = NULL;
    if (i < 0)
        return;
    v4_seq_free(f->shadow[i]);
    f->nk--;
    f->key[i] = f->key[f->nk];
    f->shadow[i] = f->shadow[f->nk];
}

static int fake_step(void *ud, const v4_seq_view *views, const int32_t *tokens, int n, float *logits, const int *want,
                     v4_trace *const *traces, v4_step_fault *fault, v4_error *err)
{
    fstep *f = ud;
    v4_seq *rows[64];
    int distinct = 0;
    if (n > 64)
        return v4_err_set(err, V4_ERR_INVALID, "fake step", "%d rows", n);
    for (int b = 0; b < n; b++) {
        int first = 1;
        for (int j = 0; j < b && first; j++)
            first = views[j].key != views[b].key;
        distinct += first;
    }
    for (int b = 0; b < n; b++) {
        int prev = -1;
        for (int j = 0; j < b && prev < 0; j++)
            if (views[j].key == views[b].key)
                prev = j;
        if (prev >= 0) {
            rows[b] = rows[prev];
            continue;
        }
        const v4_seq_view *v = &views[b];
        int i = find(f, v->key);
        if (v->pos == 0) {
            int seen = 0;
            for (int k = 0; k < f->nlens; k++)
                seen |= f->lens[k] == v->max_len;
            if (!seen && f->nlens < MAXK)
                f->lens[f->nlens++] = v->max_len;
            if (f->pending == v->key)
                f->stepped_unreleased++;
            if (f->whole && v->max_len == f->fail_len)
                return v4_err_set(err, V4_ERR_INTERNAL, "fake step", "a failure of the whole step");
            if (v->max_len == f->fail_len && f->fail != 0) {
                if (f->fail > 0)
                    f->fail--;
                f->faults++;
                f->faults_alone += distinct == 1;
                if (i < 0 && f->nk < MAXK) {   /* a partial state, freed by the release only */
                    f->key[f->nk] = v->key;
                    f->shadow[f->nk++] = NULL;
                }
                f->pending = v->key;
                fault->row = b;
                fault->retryable = f->retryable;
                return v4_err_set(err, V4_ERR_NOMEM, "fake step",
                                  "no memory for a sequence of %d positions - not an engine failure", v->max_len);
            }
            if (i >= 0 && f->shadow[i] && v4_seq_capacity(f->shadow[i]) == v->max_len) {
                f->resets += f->stall_len == v->max_len;
                v4_seq_reset(f->shadow[i]);
            } else {
                if (i < 0) {
                    if (f->nk == MAXK)
                        return v4_err_set(err, V4_ERR_INVALID, "fake step", "too many sequences");
                    i = f->nk++;
                    f->key[i] = v->key;
                } else {
                    v4_seq_free(f->shadow[i]);
                }
                if (!(f->shadow[i] = v4_seq_create(f->w, v->max_len, err)))
                    return -1;
            }
        } else if (i < 0 || !f->shadow[i] || v4_seq_pos(f->shadow[i]) != v->pos) {
            f->bad_pos++;
            return v4_err_set(err, V4_ERR_INVALID, "fake step", "row %d at position %d: no state there", b, v->pos);
        }
        rows[b] = f->shadow[i];
    }
    for (int b = 0; b < n && f->stall_len; b++) {   /* a stall: its rows cover stall_pos */
        int k = 0, first = 1;
        for (int j = 0; j < n; j++) {
            k += views[j].key == views[b].key;
            first &= !(j < b && views[j].key == views[b].key);
        }
        if (!first || views[b].max_len != f->stall_len || f->stall == 0 || views[b].pos > f->stall_pos ||
            views[b].pos + k <= f->stall_pos)
            continue;
        if (f->stall > 0)
            f->stall--;
        f->stalls++;
        f->stalls_alone += distinct == 1;
        *fault = (v4_step_fault){.row = b, .retryable = 1, .stall = 1};
        return v4_err_set(err, V4_ERR_NOMEM, "fake step", "the sequence of row %d waits for memory", b);
    }
    return v4_step_rows(f->cpu, rows, tokens, n, logits, want, traces, err);
}

/* A fresh executor of capacity 2; submit the n jobs at once, step until all are back;
 * *fg: its figures. */
static void run(v4_runner *r, const char *const *lines, int n, out *o, v4_exec_figs *fg)
{
    char err[256];
    v4_exec *x = v4_exec_continuous(r, 2, NULL, NULL, err, sizeof err);
    CHECK(x != NULL, "executor: %s", err);
    if (!x)
        return;
    memset(o, 0, sizeof *o * (size_t)n);
    const int rc = run_jobs(x, lines, n, o);
    CHECK(rc == 0, "%s", rc == -1 ? "a submit was refused" : "jobs still in flight after 10000 steps");
    x->ops->figs(x, fg);
    x->ops->destroy(x);
}

static int same(const out *a, const out *b)
{
    return a->rc == 0 && b->rc == 0 && !strcmp(a->text, b->text) && a->n_tokens == b->n_tokens &&
           !memcmp(a->tokens, b->tokens, sizeof(int32_t) * (size_t)a->n_tokens);
}

int main(void)
{
    char dir[4200];
    if (t_mkmodel_tiny("oom_cont_model", 11, dir, sizeof dir))
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
    v4_exec_figs fg;
    run(r, ab, 2, ref, &fg);   /* unconstrained: the CPU path, no implementation */
    CHECK(ref[0].rc == 0 && ref[1].rc == 0 && ref[0].first_step == 0 && ref[1].first_step == 0,
          "unconstrained run: rc %d %d (%s %s), first steps %ld %ld", ref[0].rc, ref[1].rc, ref[0].msg, ref[1].msg,
          ref[0].first_step, ref[1].first_step);

    v4_error ve = {0};
    fstep f = {.w = &r->m.w, .retryable = 1};
    f.cpu = v4_ctx_create(&r->m.w, r->be, v4_ctx_max_rows(r->ctx), &ve);
    CHECK(f.cpu != NULL, "inner context: %s", ve.msg);
    if (!f.cpu)
        TEST_DONE();
    v4_step_impl impl = {.step = fake_step, .ud = &f, .rows_per_seq = v4_ctx_max_rows(r->ctx),
                         .release = fake_release};
    v4_ctx_set_step_impl(r->ctx, &impl);

    run(r, ab, 2, got, &fg);   /* the fake without faults: learns the two capacities */
    CHECK(same(&got[0], &ref[0]) && same(&got[1], &ref[1]), "the fake step gives the CPU path's outputs ('%s', '%s')",
          got[0].text, got[1].text);
    CHECK(f.nlens == 2 && f.lens[0] != f.lens[1], "two distinct capacities (%d: %d %d)", f.nlens, f.lens[0], f.lens[1]);
    CHECK(f.nk == 0, "every sequence released (%d left)", f.nk);
    const int len[2] = {f.lens[0], f.lens[1]};

    /* the fault on job t's first step, twice, while the other job runs */
    for (int t = 0; t < 2; t++) {
        f.fail_len = len[t];
        f.fail = 2;
        f.faults = f.faults_alone = f.stepped_unreleased = f.bad_pos = 0;
        run(r, ab, 2, got, &fg);
        for (int i = 0; i < 2; i++)
            CHECK(same(&got[i], &ref[i]), "fault on %c: job %c gives the unconstrained output (rc %d %s; '%s' vs '%s')",
                  'a' + t, 'a' + i, got[i].rc, got[i].msg, got[i].text, ref[i].text);
        CHECK(f.faults == 2 && f.faults_alone == 0 && fg.oom_retries == 2,
              "fault on %c: 2 faults with another sequence in the step (%d, %d alone), counted (%ld)", 'a' + t,
              f.faults, f.faults_alone, fg.oom_retries);
        CHECK(got[1 - t].first_step == 0, "fault on %c: the other job is not delayed (first step %ld)", 'a' + t,
              got[1 - t].first_step);
        CHECK(got[t].first_step == 2, "fault on %c: it first runs at the step after its faults (%ld)", 'a' + t,
              got[t].first_step);
        CHECK(f.stepped_unreleased == 0 && f.bad_pos == 0 && f.nk == 0,
              "fault on %c: its partial state released before its next try (%d), positions consistent (%d), every "
              "sequence released (%d left)", 'a' + t, f.stepped_unreleased, f.bad_pos, f.nk);
        CHECK(fg.admit_waits == 0, "no admission waits (no admit hook): %ld", fg.admit_waits);
    }

    /* alone: it fails precisely, the executor serves the next job */
    f.fail_len = len[0];
    f.fail = -1;
    f.faults = f.faults_alone = 0;
    run(r, ab, 1, got, &fg);
    CHECK(got[0].rc != 0 && got[0].code == V4_TASK_CONTEXT_LENGTH_EXCEEDED &&
              strstr(got[0].msg, "got no device memory with no other sequence active") &&
              strstr(got[0].msg, "not an engine failure"),
          "alone: rc %d code %d: %s", got[0].rc, got[0].code, got[0].msg);
    CHECK(f.faults == 1 && f.faults_alone == 1 && fg.oom_retries == 0 && got[0].first_step < 0,
          "alone: one fault (%d), no retry (%ld), never stepped (%ld)", f.faults, fg.oom_retries, got[0].first_step);
    f.fail_len = 0;
    run(r, ab, 1, got, &fg);
    CHECK(same(&got[0], &ref[0]) && f.nk == 0, "then the next job is served: rc %d %s", got[0].rc, got[0].msg);

    /* a fault that cannot be retried fails that job only */
    f.fail_len = len[1];
    f.fail = -1;
    f.retryable = 0;
    run(r, ab, 2, got, &fg);
    CHECK(same(&got[0], &ref[0]), "non-retryable fault on b: a completes (rc %d %s)", got[0].rc, got[0].msg);
    CHECK(got[1].rc != 0 && got[1].code == V4_TASK_INTERNAL && strstr(got[1].msg, "no memory for a sequence") &&
              fg.oom_retries == 0,
          "non-retryable fault on b: b fails with the step's error (rc %d code %d: %s)", got[1].rc, got[1].code,
          got[1].msg);

    /* a stall of a running sequence, twice, while the other job runs, at its second
     * generated position (prompt = capacity - max_tokens) */
    const int max_tok[2] = {20, 12};
    f.retryable = 1;
    f.fail_len = 0;
    for (int t = 0; t < 2; t++) {
        CHECK(ref[t].n_tokens >= 3, "job %c generates 3 tokens or more (%d)", 'a' + t, ref[t].n_tokens);
        f.stall_len = len[t];
        f.stall_pos = len[t] - max_tok[t] + 1;
        f.stall = 2;
        f.stalls = f.stalls_alone = f.resets = f.bad_pos = 0;
        run(r, ab, 2, got, &fg);
        for (int i = 0; i < 2; i++)
            CHECK(same(&got[i], &ref[i]), "stall of %c: job %c gives the unconstrained output (rc %d %s; '%s' vs '%s')",
                  'a' + t, 'a' + i, got[i].rc, got[i].msg, got[i].text, ref[i].text);
        CHECK(f.stalls == 2 && f.stalls_alone == 0 && fg.mem_stalls == 2 && fg.oom_retries == 0,
              "stall of %c: 2 stalls with another sequence in the step (%d, %d alone), counted (%ld; oom retries %ld)",
              'a' + t, f.stalls, f.stalls_alone, fg.mem_stalls, fg.oom_retries);
        CHECK(f.resets == 0 && f.bad_pos == 0 && f.nk == 0,
              "stall of %c: its state kept (%d resets), positions consistent (%d), every sequence released (%d left)",
              'a' + t, f.resets, f.bad_pos, f.nk);
        CHECK(got[0].first_step == 0 && got[1].first_step == 0, "stall of %c: both start at once (%ld %ld)", 'a' + t,
              got[0].first_step, got[1].first_step);
    }
    /* alone: nothing else can free memory, it fails; the next job is served */
    f.stall_len = len[0];
    f.stall = -1;
    f.stalls = 0;
    run(r, ab, 1, got, &fg);
    CHECK(got[0].rc != 0 && got[0].code == V4_TASK_CONTEXT_LENGTH_EXCEEDED &&
              strstr(got[0].msg, "could not grow at position") && strstr(got[0].msg, "no other sequence running"),
          "stall alone: rc %d code %d: %s", got[0].rc, got[0].code, got[0].msg);
    CHECK(f.stalls == 1 && fg.mem_stalls == 0 && f.nk == 0, "stall alone: one stall (%d), not counted as sat out (%ld), "
          "released (%d left)", f.stalls, fg.mem_stalls, f.nk);
    f.stall_len = 0;
    run(r, ab, 1, got, &fg);
    CHECK(same(&got[0], &ref[0]), "after the stall alone the next job is served: rc %d %s", got[0].rc, got[0].msg);
    f.fail_len = len[1];

    /* a failure without a fault: every job of the step fails, as before */
    f.retryable = 1;
    f.whole = 1;
    run(r, ab, 2, got, &fg);
    CHECK(got[0].rc != 0 && got[1].rc != 0 && strstr(got[0].msg, "whole step") && strstr(got[1].msg, "whole step"),
          "whole-step failure: both fail (rc %d %d: %s / %s)", got[0].rc, got[1].rc, got[0].msg, got[1].msg);

    v4_ctx_set_step_impl(r->ctx, NULL);
    for (int i = 0; i < f.nk; i++)
        v4_seq_free(f.shadow[i]);
    v4_ctx_free(f.cpu);
    v4_runner_free(r);
    TEST_DONE();
}
