/* batch_input.c - read batch lines and map them to tasks (see batch_input.h).
 * Thread: one thread per reader / item. */
#include "batch_input.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "config/strbuf.h"

int v4_batch_reader_open(v4_batch_reader *r, const char *path)
{
    memset(r, 0, sizeof *r);
    r->f = fopen(path, "rb");
    return r->f ? 0 : -1;
}

static int blank(const char *s, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (s[i] != ' ' && s[i] != '\t' && s[i] != '\r' && s[i] != '\n' && s[i] != '\f' && s[i] != '\v')
            return 0;
    return 1;
}

int v4_batch_reader_next(v4_batch_reader *r, const char **line, size_t *len)
{
    for (;;) {
        errno = 0;
        ssize_t n = getline(&r->buf, &r->cap, r->f);
        if (n < 0)
            return ferror(r->f) ? -1 : 0;
        r->line++;
        while (n > 0 && (r->buf[n - 1] == '\n' || r->buf[n - 1] == '\r'))
            n--;
        if (blank(r->buf, (size_t)n))
            continue;
        *line = r->buf;
        *len = (size_t)n;
        return 1;
    }
}

void v4_batch_reader_close(v4_batch_reader *r)
{
    if (r->f)
        fclose(r->f);
    free(r->buf);
    memset(r, 0, sizeof *r);
}

#define FIELD(e, where, ...) v4_task_fail(e, V4_TASK_INVALID_FIELD, where, __VA_ARGS__)

/* Build the task JSON of an OpenAI line; 0 or -1 with e (where = the input's field). */
static int map_openai(v4_batch_item *it, json_t *root, json_t **task_out, v4_task_error *e)
{
    json_t *cid = json_object_get(root, "custom_id"), *method = json_object_get(root, "method");
    json_t *url = json_object_get(root, "url"), *body = json_object_get(root, "body");
    if (json_is_string(cid) && json_string_length(cid) >= 1 && json_string_length(cid) <= V4_TASK_MAX_ID &&
        !memchr(json_string_value(cid), 0, json_string_length(cid)))
        it->id = json_string_value(cid);
    else
        return FIELD(e, "custom_id", "must be a string of 1..%d bytes without NUL", V4_TASK_MAX_ID);
    if (!json_is_string(method) || strcmp(json_string_value(method), "POST"))
        return FIELD(e, "method", "must be \"POST\"");
    if (!json_is_string(url) || strcmp(json_string_value(url), "/v1/chat/completions"))
        return FIELD(e, "url", "unsupported endpoint %s%s%s: only \"/v1/chat/completions\" is served",
                     json_is_string(url) ? "\"" : "", json_is_string(url) ? json_string_value(url) : "(missing)",
                     json_is_string(url) ? "\"" : "");
    if (!json_is_object(body))
        return FIELD(e, "body", "must be an object (the chat completions request)");
    json_t *task = json_pack("{s:O}", "id", cid);
    if (!task)
        return v4_task_fail(e, V4_TASK_INTERNAL, "body", "out of memory");
    const char *k;
    json_t *v;
    json_object_foreach(body, k, v) {
        if (!strcmp(k, "messages")) {
            /* as given: the task parser reads OpenAI's dialect (developer, text parts) */
            json_object_set(task, k, v);
        } else if (!strcmp(k, "model") || !strcmp(k, "temperature") || !strcmp(k, "top_p") || !strcmp(k, "seed") ||
                   !strcmp(k, "stop") || !strcmp(k, "top_k") || !strcmp(k, "ignore_eos") || !strcmp(k, "n")) {
            if (!json_is_null(v))   /* OpenAI clients send null for "unset" */
                json_object_set(task, k, v);
        } else if (!strcmp(k, "max_tokens") || !strcmp(k, "max_completion_tokens")) {
            /* max_completion_tokens (the newer name) wins when both are given */
            if (!json_is_null(v) && (!strcmp(k, "max_completion_tokens") || !json_object_get(body, "max_completion_tokens")))
                json_object_set(task, "max_tokens", v);
        } else if (v4_task_field_kind(k) == V4_FIELD_CONSTRAINT || v4_task_field_kind(k) == V4_FIELD_UNSERVED ||
                   v4_task_field_kind(k) == V4_FIELD_SAMPLING) {
            /* the output constraint, the sampling fields (logit_bias, penalties, min_p,
             * logprobs) and the fields not served (tools, ...): v4_task_parse answers them */
            if (!json_is_null(v))
                json_object_set(task, k, v);
        } else if (v4_task_field_kind(k) == V4_FIELD_NOOP) {
            /* user, store, service_tier, ...: change nothing */
        } else if (!strcmp(k, "metadata")) {
            /* kept with the request by OpenAI, not in its answer: nothing to echo here */
        } else if (it->n_unknown < V4_BATCH_MAX_UNKNOWN) {
            it->unknown[it->n_unknown++] = k;
        }
    }
    if (!json_object_get(task, "messages")) {
        json_decref(task);
        return FIELD(e, "body.messages", "is required");
    }
    *task_out = task;
    return 0;
}

void v4_batch_item_parse(const char *line, size_t len, long lineno, size_t max_len, v4_batch_item *it)
{
    memset(it, 0, sizeof *it);
    it->line = lineno;
    json_t *root = len <= max_len ? json_loadb(line, len, JSON_REJECT_DUPLICATES, NULL) : NULL;
    it->shaped = json_is_object(root);
    if (!json_is_object(root) || !json_object_get(root, "custom_id")) {
        json_decref(root);
        it->kind = V4_BATCH_TASK;
        it->ok = v4_task_parse(line, len, max_len, &it->task, &it->err) == 0;
        it->id = it->task.id;
        for (int i = 0; i < it->task.n_unknown && it->n_unknown < V4_BATCH_MAX_UNKNOWN; i++)
            it->unknown[it->n_unknown++] = it->task.unknown[i];
        return;
    }
    it->kind = V4_BATCH_OPENAI;
    it->line_root = root;
    json_t *task = NULL;
    if (map_openai(it, root, &task, &it->err))
        return;
    char *s = json_dumps(task, JSON_COMPACT);
    json_decref(task);
    if (!s) {
        v4_task_fail(&it->err, V4_TASK_INTERNAL, "body", "out of memory");
        return;
    }
    it->ok = v4_task_parse(s, strlen(s), (size_t)-1, &it->task, &it->err) == 0;
    free(s);
    if (!it->ok && (it->err.code == V4_TASK_INVALID_FIELD || it->err.code == V4_TASK_UNSUPPORTED_FIELD)) {
        /* name the input's field: body.messages[0].role, body.max_tokens ... */
        char where[sizeof it->err.where];
        snprintf(where, sizeof where, "%s", it->err.where);
        snprintf(it->err.where, sizeof it->err.where, "body.%.150s", where);
    }
}

void v4_batch_item_free(v4_batch_item *it)
{
    v4_task_free(&it->task);
    json_decref(it->line_root);
    memset(it, 0, sizeof *it);
}
