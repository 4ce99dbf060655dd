/* choices.c - several answers from one prefill (see choices.h; docs/queue-worker.md
 * "Several answers (n)").
 * Thread: the runner's thread. */
#include "choices.h"

#include <stdlib.h>
#include <string.h>

struct v4_choices {
    v4_runner *r;
    const v4_task *t;
    int n, next;                /* answers asked for; the next choice to prepare */
    v4_seq *snap;               /* the sequence at the prompt's end (NULL: not captured) */
    float *logits;              /* [vocab] the prompt's last position's */
    v4_result_choice *ans;      /* [n] */
};

v4_choices *v4_choices_new(v4_runner *r, const v4_task *t, v4_task_error *e)
{
    v4_choices *c = calloc(1, sizeof *c);
    if (c) {
        c->r = r;
        c->t = t;
        c->n = t->n < 1 ? 1 : t->n;
        c->next = 1;
        c->ans = calloc((size_t)c->n, sizeof *c->ans);
    }
    if (!c || !c->ans) {
        free(c);
        v4_task_fail(e, V4_TASK_INTERNAL, "n", "out of memory");
        return NULL;
    }
    return c;
}

int v4_choices_current(const v4_choices *c) { return c->next - 1; }

int v4_choices_wants(const v4_choices *c, const v4_run_job *j)
{
    return c && !c->snap && c->next < c->n && j->gen && v4_gen_forwarded(j->gen) == j->req.n_prompt - 1 &&
           v4_ctx_seq_forkable(c->r->ctx) && !c->r->prefill_each;
}

void v4_choices_capture(v4_choices *c, const v4_run_job *j, const float *logits)
{
    if (!c || c->snap || c->next >= c->n || !logits || !v4_ctx_seq_forkable(c->r->ctx) || c->r->prefill_each ||
        v4_seq_pos(j->seq) != j->req.n_prompt)
        return;
    const size_t V = (size_t)c->r->m.cfg.vocab_size;
    v4_error err = {0};
    if (!c->logits && !(c->logits = malloc(sizeof(float) * V)))
        return;   /* no snapshot: the later choices prefill again (same answers) */
    if (!(c->snap = v4_seq_fork(j->seq, &err)))
        return;
    memcpy(c->logits, logits, sizeof(float) * V);
}

int v4_choices_next(v4_choices *c, double deadline_ms, int (*abort_fn)(void *), void *abort_ud, v4_run_job *j,
                    v4_run_output *sub, v4_task_error *e)
{
    if (c->next >= c->n)
        return 0;
    const int i = c->next++;
    return v4_runner_prepare_choice(c->r, c->t, i, c->snap, c->snap ? c->logits : NULL, deadline_ms, abort_fn,
                                    abort_ud, j, sub, e)
               ? -1
               : 1;
}

/* Add the figures of a later choice's run to the task's. */
static void add_figures(v4_run_output *out, const v4_run_output *o)
{
    out->prefill_ms += o->prefill_ms;
    out->decode_ms += o->decode_ms;
    for (size_t i = 0, n = (size_t)out->expert_layers * (size_t)out->expert_n;
         out->expert_counts && o->expert_counts && o->expert_layers == out->expert_layers &&
         o->expert_n == out->expert_n && i < n;
         i++)
        out->expert_counts[i] += o->expert_counts[i];
    out->forwarded += o->forwarded;
    out->expert_hits += o->expert_hits;
    out->expert_misses += o->expert_misses;
    out->expert_prefetched += o->expert_prefetched;
    out->expert_bytes_loaded += o->expert_bytes_loaded;
}

int v4_choices_accept(v4_choices *c, int rc, v4_run_output *o, v4_run_output *out, v4_task_error *e)
{
    const int k = c->next - 1;   /* the choice that ran */
    v4_result_choice *a = &c->ans[k];
    if (o != out) {
        add_figures(out, o);
        if (rc == 0) {   /* take its answer */
            a->text = o->text;
            a->text_len = o->text_len;
            a->tokens = o->tokens;
            a->n_tokens = o->n_tokens;
            a->finish_reason = o->finish_reason;
            a->logprobs = o->logprobs;
            a->reasoning = o->reasoning;
            a->reasoning_len = o->reasoning_len;
            o->reasoning = NULL;
            o->text = NULL;
            o->tokens = NULL;
            o->logprobs = NULL;
        }
        v4_run_output_free(o);
        return rc;
    }
    if (rc)
        return rc;
    /* choice 0: a copy (the task's own fields keep it) */
    a->text = malloc(out->text_len + 1);
    a->tokens = malloc(sizeof(int32_t) * ((size_t)out->n_tokens + 1));
    if (!a->text || !a->tokens)
        return v4_task_fail(e, V4_TASK_INTERNAL, "output", "out of memory");
    memcpy(a->text, out->text, out->text_len);
    a->text[out->text_len] = 0;
    a->text_len = out->text_len;
    if (out->n_tokens)
        memcpy(a->tokens, out->tokens, sizeof(int32_t) * (size_t)out->n_tokens);
    a->n_tokens = out->n_tokens;
    a->finish_reason = out->finish_reason;
    a->logprobs = out->logprobs ? json_incref(out->logprobs) : NULL;
    if (out->reasoning) {
        if (!(a->reasoning = malloc(out->reasoning_len + 1)))
            return v4_task_fail(e, V4_TASK_INTERNAL, "output", "out of memory");
        memcpy(a->reasoning, out->reasoning, out->reasoning_len + 1);
        a->reasoning_len = out->reasoning_len;
    }
    return 0;
}

int v4_choices_end(v4_choices *c, int rc, v4_run_output *out)
{
    if (!c)
        return -1;
    if (rc == 0 && c->next >= c->n) {
        out->choices = c->ans;
        out->n_choices = c->n;
        c->ans = NULL;
    }
    for (int i = 0; c->ans && i < c->n; i++) {
        free(c->ans[i].text);
        free(c->ans[i].tokens);
        json_decref(c->ans[i].logprobs);
        free(c->ans[i].reasoning);
    }
    free(c->ans);
    v4_seq_free(c->snap);
    free(c->logits);
    free(c);
    return rc;
}

static void capture_cb(void *ud, const v4_run_job *j, const float *logits)
{
    v4_choices_capture(ud, j, logits);
}

int v4_choices_run(v4_runner *r, const v4_task *t, double deadline_ms, int (*abort_fn)(void *), void *abort_ud,
                   v4_run_output *out, v4_task_error *e)
{
    if (t->n <= 1)
        return v4_runner_run(r, t, deadline_ms, abort_fn, abort_ud, out, e);
    v4_choices *ch = v4_choices_new(r, t, e);
    v4_run_job j;
    if (!ch)
        return -1;
    if (v4_runner_prepare(r, t, deadline_ms, abort_fn, abort_ud, &j, out, e))
        return v4_choices_end(ch, -1, out);
    int rc = v4_choices_accept(ch, v4_runner_run_job(r, &j, capture_cb, ch, out, e), out, out, e), k = 0;
    v4_run_output sub;
    while (!rc && (k = v4_choices_next(ch, deadline_ms, abort_fn, abort_ud, &j, &sub, e)) == 1)
        rc = v4_choices_accept(ch, v4_runner_run_job(r, &j, capture_cb, ch, &sub, e), &sub, out, e);
    if (k < 0)
        v4_run_output_free(&sub);   /* what the failed prepare left */
    return v4_choices_end(ch, k < 0 ? -1 : rc, out);
}
