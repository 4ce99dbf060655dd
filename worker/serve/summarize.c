/* summarize.c - one summarize task as a tree of generations (see summarize.h): the
 * state machine v4_summ (begin / next / accept / end) and v4_summarize_run, the serial
 * driver over it.  The continuous-batching executor drives the same state machine and
 * steps each generation it hands out together with other tasks.
 * Ownership: v4_summ owns the level texts, the chunk prompts and the generation task it
 * hands out; the result goes into the caller's v4_run_output.
 * Thread: one thread at a time per runner. */
#include "summarize.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "chat.h"
#include "task_run_internal.h"

#define SLACK 4                     /* tokens kept free for tokenizer merges at the joins */

static const char *const DEFAULT_SYSTEM = "You write concise, faithful summaries.";

/* ------------------------------------------------------------ the summarizer */

typedef enum stage { STAGE_SINGLE, STAGE_CHUNK, STAGE_COMBINE } stage;

typedef struct summ {
    v4_runner *r;
    const v4_task *t;
    v4_run_output *out;
    v4_task_error *e;
    const char *system;
    const char *instructions;       /* NULL: none */
} summ;

/* The user message of one generation (malloc'd).  The task's instructions come first,
 * the same text in every generation of the tree, so that the prompts of a summary's
 * generations start alike (system + instructions) and its chunk, combine and final
 * passes resume from the prefix cache when the instructions fill whole blocks
 * (docs/prefix-cache.md); then the stage's request, then the text. */
static char *user_text(const summ *s, stage st, size_t part, size_t parts, const char *text, size_t len)
{
    static const char INS[] = "Instructions for the final summary:\n";
    char head[256];
    const char *ins = s->instructions;
    if (st == STAGE_CHUNK)
        snprintf(head, sizeof head, "Summarize part %zu of %zu of a longer document; the parts' summaries will be "
                 "combined.", part, parts);
    else if (st == STAGE_COMBINE)
        snprintf(head, sizeof head, "The text below holds summaries of consecutive parts of one document.%s",
                 ins ? "" : " Summarize the whole document from them.");
    else
        snprintf(head, sizeof head, "%s", ins ? "" : "Summarize the following document.");
    const size_t pl = ins ? sizeof INS - 1 : 0, il = ins ? strlen(ins) : 0, hl = strlen(head);
    char *u = malloc(pl + il + 2 + hl + 2 + len + 1);
    if (!u)
        return NULL;
    size_t at = 0;
    if (ins) {
        memcpy(u, INS, pl);
        memcpy(u + pl, ins, il);
        at = pl + il;
        if (hl) {
            memcpy(u + at, "\n\n", 2);
            at += 2;
        }
    }
    memcpy(u + at, head, hl);
    at += hl;
    memcpy(u + at, "\n\n", 2);
    memcpy(u + at + 2, text, len);
    u[at + 2 + len] = 0;
    return u;
}

/* Prompt tokens of a generation whose user message is u (as v4_runner_run counts them). */
static long prompt_tokens(const summ *s, const char *u)
{
    v4_ids ids = {0};
    v4_error err = {0};
    v4_chat_msg m = {V4_CHAT_USER, u};
    long n = v4_chat_encode(s->r->tok, s->system, &m, 1, s->t->thinking, &ids, &err) ? -1 : (long)ids.n;
    v4_ids_free(&ids);
    return n;
}

/* Add one generation's figures (experts, prompt tokens, times) to the task's output. */
static int merge(summ *s, const v4_run_output *o)
{
    v4_run_output *out = s->out;
    out->prompt_tokens += o->prompt_tokens;
    out->cached_tokens += o->cached_tokens;
    out->prefill_ms += o->prefill_ms;
    out->decode_ms += o->decode_ms;
    out->forwarded += o->forwarded;
    out->expert_hits += o->expert_hits;
    out->expert_misses += o->expert_misses;
    out->expert_prefetched += o->expert_prefetched;
    out->expert_bytes_loaded += o->expert_bytes_loaded;
    if (!o->expert_counts)
        return 0;
    size_t n = (size_t)o->expert_layers * (size_t)o->expert_n;
    if (!out->expert_counts) {
        if (!(out->expert_counts = calloc(n, sizeof *out->expert_counts)))
            return v4_task_fail(s->e, V4_TASK_INTERNAL, "summarize", "out of memory");
        out->expert_layers = o->expert_layers;
        out->expert_n = o->expert_n;
        out->expert_k = o->expert_k;
    }
    for (size_t i = 0; i < n; i++)
        out->expert_counts[i] += o->expert_counts[i];
    return 0;
}

/* The user messages of every chunk of text (ids: its tokens) at the given level.
 * 0: *us (k malloc'd strings), -1: e filled. */
static int plan_chunks(summ *s, const char *text, size_t len, const v4_ids *ids, char ***us, size_t *k)
{
    long ctx = v4_runner_context(s->r), msum = s->t->max_summary_tokens;
    v4_error err = {0};
    size_t *offs = NULL;
    if (v4_summ_offsets(s->r->tok, text, len, ids->v, ids->n, &offs, &err))
        return v4_task_fail(s->e, V4_TASK_INTERNAL, err.where, "%s", err.msg);
    char *probe = user_text(s, STAGE_CHUNK, 999999, 999999, "", 0);
    long over = probe ? prompt_tokens(s, probe) : -1;
    free(probe);
    if (over < 0) {
        free(offs);
        return v4_task_fail(s->e, V4_TASK_INTERNAL, "summarize", "cannot encode the summary prompt");
    }
    long budget = ctx - msum - over - SLACK;
    int rc = -1;
    v4_summ_span *sp = NULL;
    size_t n = 0;
    char **u = NULL;
    for (int attempt = 0; attempt < 6; attempt++) {
        if (budget < V4_SUMM_MIN_CHUNK) {
            v4_task_fail(s->e, V4_TASK_CONTEXT_LENGTH_EXCEEDED, "max_summary_tokens",
                         "max_summary_tokens (%ld) and the summary prompt (%ld tokens) leave fewer than %d tokens "
                         "of the context of %ld tokens for each part of the document",
                         msum, over, V4_SUMM_MIN_CHUNK, ctx);
            goto out;
        }
        free(sp);
        if (v4_summ_split(text, offs, ids->n, (size_t)budget, (size_t)budget * V4_SUMM_OVERLAP_PCT / 100, &sp, &n) ||
            !(u = calloc(n, sizeof *u))) {
            v4_task_fail(s->e, V4_TASK_INTERNAL, "summarize", "out of memory");
            goto out;
        }
        long excess = 0;
        for (size_t i = 0; i < n; i++) {
            size_t b = offs[sp[i].begin], en = offs[sp[i].end];
            long pt = -1;
            if (!(u[i] = user_text(s, STAGE_CHUNK, i + 1, n, text + b, en - b)) || (pt = prompt_tokens(s, u[i])) < 0) {
                v4_task_fail(s->e, V4_TASK_INTERNAL, "summarize", "cannot build the prompt of part %zu", i + 1);
                goto out;
            }
            if (pt + msum - ctx > excess)
                excess = pt + msum - ctx;
        }
        if (!excess) {
            *us = u;
            *k = n;
            u = NULL;
            rc = 0;
            goto out;
        }
        for (size_t i = 0; i < n; i++)
            free(u[i]);
        free(u);
        u = NULL;
        budget -= excess + SLACK;
    }
    v4_task_fail(s->e, V4_TASK_INTERNAL, "summarize", "could not split the text into parts that fit the context");
out:
    for (size_t i = 0; u && i < n; i++)
        free(u[i]);
    free(u);
    free(sp);
    free(offs);
    return rc;
}

/* ------------------------------------------------------------ the state machine */

struct v4_summ {
    summ c;
    int level;                      /* the level being worked on (1 = the document) */
    const char *text;               /* its text: the document or owned */
    size_t len, prev_tokens;
    char *owned;
    char **us;                      /* the chunk prompts of this level ... */
    size_t k, i;                    /* ... k of them, the next one to hand out */
    char *acc;                      /* the chunk summaries so far */
    size_t acc_len;
    char *final_u;                  /* non-NULL: the final pass's prompt */
    v4_task g;                      /* the generation handed out by v4_summ_next */
    int done, rc;
};

static void finish(v4_summ *s, int rc)
{
    s->done = 1;
    s->rc = rc;
}

static void free_level(v4_summ *s)
{
    for (size_t i = 0; s->us && i < s->k; i++)
        free(s->us[i]);
    free(s->us);
    s->us = NULL;
    s->k = s->i = 0;
}

/* Work out the next level: sets final_u (it fits: one last pass) or us/k (chunks to
 * summarize).  -1 = the task failed (finished). */
static int advance(v4_summ *s)
{
    const long ctx = v4_runner_context(s->c.r), msum = s->c.t->max_summary_tokens;
    v4_task_error *e = s->c.e;
    v4_error err = {0};
    v4_ids ids = {0};
    s->level++;
    if (v4_tok_encode(s->c.r->tok, s->text, s->len, &ids, &err)) {
        finish(s, v4_task_fail(e, s->level == 1 ? V4_TASK_INVALID_FIELD : V4_TASK_INTERNAL,
                               s->level == 1 ? "document" : "summarize", "%s", err.msg));
        return -1;
    }
    /* one pass if it fits (a text longer than the context cannot: skip encoding the prompt) */
    long pt = ctx + 1;
    char *u = NULL;
    if ((long)ids.n <= ctx + SLACK) {
        u = user_text(&s->c, s->level == 1 ? STAGE_SINGLE : STAGE_COMBINE, 0, 0, s->text, s->len);
        pt = u ? prompt_tokens(&s->c, u) : -1;
    }
    int rc = -1;
    if (pt < 0) {
        finish(s, v4_task_fail(e, V4_TASK_INTERNAL, "summarize", "cannot build the summary prompt"));
    } else if (pt + msum <= ctx) {
        s->final_u = u;
        u = NULL;
        rc = 0;
    } else if (s->level > 1 && ids.n >= s->prev_tokens) {
        finish(s, v4_task_fail(e, V4_TASK_CONTEXT_LENGTH_EXCEEDED, "max_summary_tokens",
                               "level %d: the summaries of the parts (%zu tokens) are not shorter than their text "
                               "(%zu tokens); lower max_summary_tokens (%ld) or raise the context (%ld tokens)",
                               s->level - 1, ids.n, s->prev_tokens, msum, ctx));
    } else if (s->level == V4_SUMM_MAX_LEVELS) {
        finish(s, v4_task_fail(e, V4_TASK_CONTEXT_LENGTH_EXCEEDED, "document",
                               "the summary still needs %zu tokens after %d levels; lower max_summary_tokens (%ld) "
                               "or raise the context (%ld tokens)", ids.n, s->level - 1, msum, ctx));
    } else {
        s->prev_tokens = ids.n;
        if (plan_chunks(&s->c, s->text, s->len, &ids, &s->us, &s->k))
            finish(s, -1);
        else
            rc = 0;
    }
    free(u);
    v4_ids_free(&ids);
    return rc;
}

int v4_summ_begin(v4_runner *r, const v4_task *t, v4_run_output *out, v4_task_error *e, v4_summ **sp)
{
    *sp = NULL;
    memset(out, 0, sizeof *out);
    if (!t->document || !t->document_len)   /* the parser refuses these; guard direct callers */
        return v4_task_fail(e, V4_TASK_INVALID_FIELD, "document", "a summarize task needs a non-empty document");
    if (t->max_summary_tokens < 1)
        return v4_task_fail(e, V4_TASK_INVALID_FIELD, "max_summary_tokens", "must be at least 1");
    v4_summ *s = calloc(1, sizeof *s);
    if (!s)
        return v4_task_fail(e, V4_TASK_INTERNAL, "summarize", "out of memory");
    s->c = (summ){r, t, out, e, DEFAULT_SYSTEM, t->instructions && *t->instructions ? t->instructions : NULL};
    s->text = t->document;
    s->len = t->document_len;
    *sp = s;
    return 0;
}

int v4_summ_next(v4_summ *s, const v4_task **g)
{
    if (s->done)
        return 0;
    if (!s->final_u && s->i >= s->k && advance(s))
        return 0;
    const v4_task *t = s->c.t;
    s->g = *t;
    s->g.kind = V4_TASK_KIND_GENERATE;
    s->g.messages[0] = (v4_task_msg){"system", s->c.system};
    s->g.messages[1] = (v4_task_msg){"user", s->final_u ? s->final_u : s->us[s->i]};
    s->g.n_messages = 2;
    s->g.has_messages = 1;
    s->g.has_prompt = s->g.has_input_ids = 0;
    s->g.prompt = NULL;
    s->g.input_ids = NULL;
    s->g.n_input_ids = 0;
    s->g.max_tokens = t->max_summary_tokens;
    *g = &s->g;
    return 1;
}

void v4_summ_accept(v4_summ *s, int rc, v4_run_output *o)
{
    v4_run_output *out = s->c.out;
    if (merge(&s->c, o) && !rc)
        rc = -1;
    if (rc) {
        finish(s, rc);
    } else if (s->final_u) {
        out->text = o->text;
        out->text_len = o->text_len;
        out->tokens = o->tokens;
        out->n_tokens = o->n_tokens;
        out->finish_reason = o->finish_reason;
        o->text = NULL;
        o->tokens = NULL;
        out->levels = s->level;
        if (s->level == 1)
            out->chunks = 1;
        finish(s, 0);
    } else {
        char *p = realloc(s->acc, s->acc_len + o->text_len + 3);
        if (!p) {
            finish(s, v4_task_fail(s->c.e, V4_TASK_INTERNAL, "summarize", "out of memory"));
        } else {
            s->acc = p;
            for (size_t i = 0; i < o->text_len; i++)
                if (o->text[i])
                    p[s->acc_len++] = o->text[i];
            memcpy(p + s->acc_len, "\n\n", 3);
            s->acc_len += 2;
            if (++s->i == s->k) {   /* the level is complete: its summaries are the next text */
                if (s->level == 1)
                    out->chunks = (int)s->k;
                free_level(s);
                free(s->owned);
                s->owned = s->acc;
                s->text = s->owned;
                s->len = s->acc_len;
                s->acc = NULL;
                s->acc_len = 0;
            }
        }
    }
    v4_run_output_free(o);
}

int v4_summ_end(v4_summ *s)
{
    if (!s)
        return -1;
    int rc = s->rc;
    if (!s->done)
        rc = v4_task_fail(s->c.e, V4_TASK_INTERNAL, "summarize", "the summary was stopped before it finished");
    free_level(s);
    free(s->acc);
    free(s->owned);
    free(s->final_u);
    free(s);
    return rc;
}

int v4_summarize_run(v4_runner *r, const v4_task *t, double deadline_ms, int (*abort_fn)(void *), void *abort_ud,
                     v4_run_output *out, v4_task_error *e)
{
    v4_summ *s = NULL;
    if (v4_summ_begin(r, t, out, e, &s))
        return -1;
    const v4_task *g;
    while (v4_summ_next(s, &g)) {
        v4_run_output o;
        int rc = v4_runner_run(r, g, deadline_ms, abort_fn, abort_ud, &o, e);
        v4_summ_accept(s, rc, &o);
    }
    return v4_summ_end(s);
}
