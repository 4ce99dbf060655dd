/* summarize.c - one summarize task as a tree of generations (see summarize.h).
 * Thread: one thread at a time per runner; the split helpers are reentrant. */
#include "summarize.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "chat.h"
#include "task_run_internal.h"

#define SLACK 4                     /* tokens kept free for tokenizer merges at the joins */

static const char *const DEFAULT_SYSTEM = "You write concise, faithful summaries.";

/* ------------------------------------------------------------ split helpers */

static int is_ws(char c)
{
    return c == ' ' || c == '\t' || c == '\r' || c == '\n' || c == '\f' || c == '\v';
}

int v4_summ_offsets(const v4_tokenizer *tok, const char *text, size_t len, const int32_t *ids, size_t n,
                    size_t **offs, v4_error *err)
{
    size_t *o = malloc((n + 1) * sizeof *o), at = 0;
    if (!o)
        return v4_err_set(err, V4_ERR_NOMEM, "summarize", "out of memory");
    for (size_t i = 0; i < n; i++) {
        size_t bl = 0;
        const char *b = v4_tok_bytes(tok, ids[i], &bl);
        while (b && at < len && (at + bl > len || memcmp(text + at, b, bl)) && is_ws(text[at]))
            at++;   /* whitespace an added token's lstrip/rstrip took */
        if (!b || at + bl > len || memcmp(text + at, b, bl)) {
            free(o);
            return v4_err_set(err, V4_ERR_FORMAT, "summarize", "token %zu (id %d) does not match the text at byte %zu",
                                i, ids[i], at);
        }
        o[i] = at;
        at += bl;
    }
    o[n] = len;
    *offs = o;
    return 0;
}

int v4_summ_break_kind(const char *text, size_t len, size_t off)
{
    if (off == 0 || off > len)
        return 0;
    size_t p = off, nl = 0;
    while (p > 0 && is_ws(text[p - 1])) {   /* the whitespace run just before the boundary */
        nl += text[p - 1] == '\n';
        p--;
    }
    if (p < off) {
        if (nl)
            return nl >= 2 ? 2 : 1;
        return p > 0 && text[p - 1] && strchr(".!?", text[p - 1]) ? 1 : 0;
    }
    /* right after a non-space byte: punctuation followed by whitespace (or the end) */
    return text[off - 1] && strchr(".!?", text[off - 1]) && (off == len || is_ws(text[off]));
}

static int char_boundary(const char *text, const size_t *offs, size_t n, size_t i)
{
    return i == n || ((unsigned char)text[offs[i]] & 0xC0) != 0x80;
}

int v4_summ_split(const char *text, const size_t *offs, size_t n, size_t budget, size_t overlap,
                  v4_summ_span **spans, size_t *n_spans)
{
    *spans = NULL;
    *n_spans = 0;
    if (budget < 2)
        return -1;
    size_t cap = 0, k = 0, s = 0;
    v4_summ_span *v = NULL;
    while (s < n || k == 0) {
        size_t lim = s + budget, cut = 0;
        if (lim >= n) {
            cut = n;
        } else {
            size_t lo = s + (budget / 2 ? budget / 2 : 1);
            for (int want = 2; want >= 1 && !cut; want--)
                for (size_t i = lim; i >= lo && !cut; i--)
                    if (char_boundary(text, offs, n, i) && v4_summ_break_kind(text, offs[n], offs[i]) >= want)
                        cut = i;
            for (size_t i = lim; i > s && !cut; i--)
                if (char_boundary(text, offs, n, i))
                    cut = i;
            if (!cut)
                cut = lim;
        }
        if (k == cap) {
            cap = cap ? cap * 2 : 8;
            v4_summ_span *nv = realloc(v, cap * sizeof *v);
            if (!nv) {
                free(v);
                return -1;
            }
            v = nv;
        }
        v[k++] = (v4_summ_span){s, cut};
        if (cut >= n)
            break;
        size_t ns = cut > s + overlap ? cut - overlap : s + 1;
        if (ns <= s)
            ns = s + 1;
        while (ns < cut && !char_boundary(text, offs, n, ns))
            ns++;
        s = ns;
    }
    *spans = v;
    *n_spans = k;
    return 0;
}

/* ------------------------------------------------------------ the summarizer */

typedef enum stage { STAGE_SINGLE, STAGE_CHUNK, STAGE_COMBINE } stage;

typedef struct summ {
    v4_runner *r;
    const v4_task *t;
    double deadline_ms;
    int (*abort_fn)(void *);
    void *abort_ud;
    v4_run_output *out;
    v4_task_error *e;
    const char *system;
    const char *instructions;       /* NULL: none */
} summ;

/* The user message of one generation (malloc'd). */
static char *user_text(const summ *s, stage st, size_t part, size_t parts, const char *text, size_t len)
{
    char head[256];
    const char *ins = s->instructions;
    if (st == STAGE_CHUNK)
        snprintf(head, sizeof head, "Summarize part %zu of %zu of a longer document; the parts' summaries will be "
                 "combined.%s", part, parts, ins ? " Instructions for the final summary:\n" : "");
    else if (st == STAGE_COMBINE)
        snprintf(head, sizeof head, "The text below holds summaries of consecutive parts of one document.%s",
                 ins ? "\n" : " Summarize the whole document from them.");
    else
        snprintf(head, sizeof head, "%s", ins ? "" : "Summarize the following document.");
    size_t hl = strlen(head), il = ins ? strlen(ins) : 0;
    char *u = malloc(hl + il + len + 3);
    if (!u)
        return NULL;
    memcpy(u, head, hl);
    if (il)
        memcpy(u + hl, ins, il);
    memcpy(u + hl + il, "\n\n", 2);
    memcpy(u + hl + il + 2, text, len);
    u[hl + il + 2 + len] = 0;
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
    out->prefill_ms += o->prefill_ms;
    out->decode_ms += o->decode_ms;
    out->forwarded += o->forwarded;
    out->expert_hits += o->expert_hits;
    out->expert_misses += o->expert_misses;
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

/* One generation with user message u.  final: its text and tokens become the result;
 * else the text is appended to acc (NUL bytes dropped) followed by a blank line. */
static int generate(summ *s, const char *u, int final, char **acc, size_t *acc_len)
{
    v4_task g = *s->t;
    g.kind = V4_TASK_KIND_GENERATE;
    g.messages[0] = (v4_task_msg){"system", s->system};
    g.messages[1] = (v4_task_msg){"user", u};
    g.n_messages = 2;
    g.has_messages = 1;
    g.has_prompt = g.has_input_ids = 0;
    g.prompt = NULL;
    g.input_ids = NULL;
    g.n_input_ids = 0;
    g.max_tokens = s->t->max_summary_tokens;
    v4_run_output o;
    int rc = v4_runner_run(s->r, &g, s->deadline_ms, s->abort_fn, s->abort_ud, &o, s->e);
    if (merge(s, &o) && !rc)
        rc = -1;
    if (rc) {
        v4_run_output_free(&o);
        return rc;
    }
    if (final) {
        s->out->text = o.text;
        s->out->text_len = o.text_len;
        s->out->tokens = o.tokens;
        s->out->n_tokens = o.n_tokens;
        s->out->finish_reason = o.finish_reason;
        o.text = NULL;
        o.tokens = NULL;
    } else {
        char *p = realloc(*acc, *acc_len + o.text_len + 3);
        if (!p) {
            v4_run_output_free(&o);
            return v4_task_fail(s->e, V4_TASK_INTERNAL, "summarize", "out of memory");
        }
        *acc = p;
        for (size_t i = 0; i < o.text_len; i++)
            if (o.text[i])
                p[(*acc_len)++] = o.text[i];
        memcpy(p + *acc_len, "\n\n", 3);
        *acc_len += 2;
    }
    v4_run_output_free(&o);
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

int v4_summarize_run(v4_runner *r, const v4_task *t, double deadline_ms, int (*abort_fn)(void *), void *abort_ud,
                     v4_run_output *out, v4_task_error *e)
{
    memset(out, 0, sizeof *out);
    if (!t->document || !t->document_len)   /* the parser refuses these; guard direct callers */
        return v4_task_fail(e, V4_TASK_INVALID_FIELD, "document", "a summarize task needs a non-empty document");
    if (t->max_summary_tokens < 1)
        return v4_task_fail(e, V4_TASK_INVALID_FIELD, "max_summary_tokens", "must be at least 1");
    summ s = {r, t, deadline_ms, abort_fn, abort_ud, out, e, DEFAULT_SYSTEM,
              t->instructions && *t->instructions ? t->instructions : NULL};
    long ctx = v4_runner_context(r), msum = t->max_summary_tokens;
    const char *text = t->document;
    size_t len = t->document_len, prev_tokens = 0;
    char *owned = NULL;     /* the current level's text when it is not the document */
    v4_error err = {0};
    v4_ids ids = {0};
    int rc = -1;
    for (int level = 1;; level++) {
        v4_ids_free(&ids);
        if (v4_tok_encode(r->tok, text, len, &ids, &err)) {
            rc = v4_task_fail(e, level == 1 ? V4_TASK_INVALID_FIELD : V4_TASK_INTERNAL, level == 1 ? "document" : "summarize",
                              "%s", err.msg);
            break;
        }
        /* one pass if it fits (a text longer than the context cannot: skip encoding the prompt) */
        char *u = NULL;
        long pt = ctx + 1;
        if ((long)ids.n <= ctx + SLACK) {
            u = user_text(&s, level == 1 ? STAGE_SINGLE : STAGE_COMBINE, 0, 0, text, len);
            pt = u ? prompt_tokens(&s, u) : -1;
        }
        if (pt < 0) {
            free(u);
            rc = v4_task_fail(e, V4_TASK_INTERNAL, "summarize", "cannot build the summary prompt");
            break;
        }
        if (pt + msum <= ctx) {     /* fits: the final pass */
            rc = generate(&s, u, 1, NULL, NULL);
            free(u);
            if (level == 1)
                out->chunks = 1;
            out->levels = level;
            break;
        }
        free(u);
        if (level > 1 && ids.n >= prev_tokens) {
            rc = v4_task_fail(e, V4_TASK_CONTEXT_LENGTH_EXCEEDED, "max_summary_tokens",
                              "level %d: the summaries of the parts (%zu tokens) are not shorter than their text "
                              "(%zu tokens); lower max_summary_tokens (%ld) or raise the context (%ld tokens)",
                              level - 1, ids.n, prev_tokens, msum, ctx);
            break;
        }
        if (level == V4_SUMM_MAX_LEVELS) {
            rc = v4_task_fail(e, V4_TASK_CONTEXT_LENGTH_EXCEEDED, "document",
                              "the summary still needs %zu tokens after %d levels; lower max_summary_tokens (%ld) or "
                              "raise the context (%ld tokens)", ids.n, level - 1, msum, ctx);
            break;
        }
        prev_tokens = ids.n;
        char **us = NULL;
        size_t k = 0;
        if (plan_chunks(&s, text, len, &ids, &us, &k))
            break;
        char *acc = NULL;
        size_t acc_len = 0;
        rc = 0;
        for (size_t i = 0; i < k; i++) {
            if (!rc)
                rc = generate(&s, us[i], 0, &acc, &acc_len);
            free(us[i]);
        }
        free(us);
        if (rc) {
            free(acc);
            break;
        }
        if (level == 1)
            out->chunks = (int)k;
        free(owned);
        owned = acc ? acc : calloc(1, 1);
        if (!owned) {
            rc = v4_task_fail(e, V4_TASK_INTERNAL, "summarize", "out of memory");
            break;
        }
        text = owned;
        len = acc_len;
        rc = -1;
    }
    v4_ids_free(&ids);
    free(owned);
    return rc;
}
