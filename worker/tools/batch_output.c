/* batch_output.c - resumable OUTPUT.jsonl and its line shapes (see batch_output.h).
 * Thread: one thread per writer. */
#include "batch_output.h"

#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* The key of one complete output line (see the header), or "" when it has none;
 * *failed: the line answers with an error (a failed task, an invalid line). */
static void key_of(const char *line, size_t len, char *key, size_t n, int *readable, int *failed)
{
    key[0] = 0;
    json_t *o = json_loadb(line, len, JSON_ALLOW_NUL, NULL);   /* an answer may hold \\u0000 */
    *readable = json_is_object(o);
    json_t *ln = json_object_get(o, "line"), *cid = json_object_get(o, "custom_id"), *id = json_object_get(o, "id");
    if (json_is_integer(ln))
        snprintf(key, n, "L%lld", (long long)json_integer_value(ln));
    else if (json_is_string(cid))
        snprintf(key, n, "I%s", json_string_value(cid));
    else if (json_is_string(id))
        snprintf(key, n, "I%s", json_string_value(id));
    json_t *err = json_object_get(o, "error"), *st = json_object_get(o, "status");
    json_t *code = json_object_get(json_object_get(o, "response"), "status_code");
    *failed = *readable && ((err && !json_is_null(err)) || (json_is_string(st) && strcmp(json_string_value(st), "succeeded")) ||
                            (json_is_integer(code) && json_integer_value(code) >= 400));
    json_decref(o);
}

/* Read OUTPUT: count its lines, collect the answered keys (with retry_failed, not those
 * of failed lines, which are then left out of the file: rewritten through a temporary
 * file and an atomic rename), cut a partial last line. */
static int scan(v4_batch_out *o, const char *path, v4_idset *done, int retry_failed, char *msg, size_t msg_n)
{
    FILE *f = fopen(path, "rb");
    if (!f) {
        if (errno == ENOENT)
            return 0;
        snprintf(msg, msg_n, "%s: %s", path, strerror(errno));
        return -1;
    }
    char *buf = NULL, key[V4_TASK_MAX_ID + 32], tmp[4200] = "";
    FILE *keep = NULL;
    if (retry_failed) {
        snprintf(tmp, sizeof tmp, "%s.retry.tmp", path);
        if (!(keep = fopen(tmp, "wb"))) {
            snprintf(msg, msg_n, "%s: %s", tmp, strerror(errno));
            fclose(f);
            return -1;
        }
    }
    size_t cap = 0;
    ssize_t n;
    long long good = 0;   /* bytes up to the end of the last complete line */
    while ((n = getline(&buf, &cap, f)) > 0) {
        if (buf[n - 1] != '\n')
            break;        /* a partial last line (crash mid-write) */
        good += n;
        o->lines_before++;
        int readable, failed;
        key_of(buf, (size_t)n - 1, key, sizeof key, &readable, &failed);
        o->unreadable += !readable;
        o->failed_before += failed;
        if (failed && retry_failed) {
            o->retried++;
            continue;
        }
        if (keep && fwrite(buf, 1, (size_t)n, keep) != (size_t)n) {
            snprintf(msg, msg_n, "%s: %s", tmp, strerror(errno));
            break;
        }
        if (key[0] && v4_idset_add(done, key, o->lines_before) < 0) {
            snprintf(msg, msg_n, "out of memory");
            break;
        }
    }
    int err = ferror(f);
    free(buf);
    struct stat st;
    int rc = fstat(fileno(f), &st);
    fclose(f);
    if (err || rc) {
        snprintf(msg, msg_n, "%s: %s", path, strerror(errno));
        if (keep)
            fclose(keep), unlink(tmp);
        return -1;
    }
    if (keep) {   /* the kept lines replace OUTPUT (a partial last line is dropped too) */
        int bad = msg[0] || fflush(keep) || fsync(fileno(keep));
        bad |= fclose(keep) != 0;
        if (bad || rename(tmp, path)) {
            if (!msg[0])
                snprintf(msg, msg_n, "%s: cannot rewrite without the failed lines: %s", path, strerror(errno));
            unlink(tmp);
            return -1;
        }
        o->failed_before -= o->retried;
        o->truncated_bytes = st.st_size - good;
        return 0;
    }
    if (msg[0])
        return -1;
    if (st.st_size > good) {
        if (truncate(path, (off_t)good)) {
            snprintf(msg, msg_n, "%s: cannot cut the partial last line: %s", path, strerror(errno));
            return -1;
        }
        o->truncated_bytes = st.st_size - good;
    }
    return 0;
}

int v4_batch_out_open(v4_batch_out *o, const char *path, v4_idset *done, int retry_failed, char *msg, size_t msg_n)
{
    memset(o, 0, sizeof *o);
    o->fd = -1;
    msg[0] = 0;
    if (!strcmp(path, "-")) {   /* standard output: nothing to resume, nothing to fsync */
        o->fd = dup(STDOUT_FILENO);
        o->is_stream = 1;
        if (o->fd < 0)
            snprintf(msg, msg_n, "standard output: %s", strerror(errno));
        return o->fd < 0 ? -1 : 0;
    }
    if (scan(o, path, done, retry_failed, msg, msg_n))
        return -1;
    struct stat st;
    int created = stat(path, &st) != 0;
    if ((o->fd = open(path, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0644)) < 0) {
        snprintf(msg, msg_n, "%s: %s", path, strerror(errno));
        return -1;
    }
    if (created) {   /* make the new file's directory entry durable too */
        char dir[4096];
        snprintf(dir, sizeof dir, "%s", path);
        char *slash = strrchr(dir, '/');
        if (slash)
            slash == dir ? (void)(slash[1] = 0) : (void)(*slash = 0);
        int dfd = open(slash ? dir : ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        if (dfd >= 0) {
            fsync(dfd);
            close(dfd);
        }
    }
    return 0;
}

int v4_batch_out_write(v4_batch_out *o, const char *json)
{
    size_t n = strlen(json);
    char *line = malloc(n + 1);
    if (!line) {
        errno = ENOMEM;
        return -1;
    }
    memcpy(line, json, n);
    line[n] = '\n';
    size_t at = 0;
    while (at < n + 1) {
        ssize_t w = write(o->fd, line + at, n + 1 - at);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0) {
            free(line);
            return -1;
        }
        at += (size_t)w;
    }
    free(line);
    while (!o->is_stream && fsync(o->fd) && errno == EINTR)
        ;
    return 0;
}

void v4_batch_out_close(v4_batch_out *o)
{
    if (o->fd >= 0)
        close(o->fd);
    o->fd = -1;
}

static char *dump(json_t *o)
{
    char *s = o ? json_dumps(o, JSON_COMPACT) : NULL;
    json_decref(o);
    return s;
}

/* The HTTP status an OpenAI endpoint would have answered the failed request with. */
static int http_status(int code)
{
    switch (code) {
    case V4_TASK_MODEL_NOT_AVAILABLE:
        return 404;
    case V4_TASK_DEADLINE_EXCEEDED:
        return 408;
    case V4_TASK_INTERNAL:
    case V4_TASK_EXPERT_CORRUPT:
        return 500;
    default:   /* invalid_json, invalid_field, unsupported_field, context_length_exceeded */
        return 400;
    }
}

/* OpenAI's answer to a failed request: {status_code, request_id, body: {error: {message,
 * type, param, code}}} (param: the field at fault, our `where`; code: our error code). */
static json_t *openai_failed(const v4_batch_item *it, const v4_task_error *e)
{
    char rid[48];
    snprintf(rid, sizeof rid, "req_%ld", it->line);
    const int st = http_status(e->code);
    return json_pack("{s:i, s:s, s:{s:{s:s, s:s, s:o, s:s}}}", "status_code", st, "request_id", rid, "body", "error",
                     "message", e->message, "type", st >= 500 ? "server_error" : "invalid_request_error", "param",
                     e->where[0] ? json_string(e->where) : json_null(), "code", v4_task_errcode_name(e->code));
}

/* The custom_id of a line that is not valid JSON, when it can still be read there (a
 * string value after the first "custom_id" key, no escapes): malloc'd, or NULL. */
static char *salvage_custom_id(const char *raw, size_t len)
{
    static const char KEY[] = "\"custom_id\"";
    const size_t kl = sizeof KEY - 1;
    for (size_t i = 0; raw && i + kl <= len; i++) {
        if (memcmp(raw + i, KEY, kl))
            continue;
        size_t j = i + kl;
        while (j < len && (raw[j] == ' ' || raw[j] == '\t'))
            j++;
        if (j >= len || raw[j++] != ':')
            return NULL;
        while (j < len && (raw[j] == ' ' || raw[j] == '\t'))
            j++;
        if (j >= len || raw[j++] != '"')
            return NULL;
        size_t k = j;
        while (k < len && raw[k] != '"' && raw[k] != '\\' && (unsigned char)raw[k] >= 0x20 && k - j <= V4_TASK_MAX_ID)
            k++;
        if (k >= len || raw[k] != '"' || k == j || k - j > V4_TASK_MAX_ID)
            return NULL;
        return strndup(raw + j, k - j);
    }
    return NULL;
}

static json_t *openai_record(const v4_batch_item *it)
{
    char id[48];
    snprintf(id, sizeof id, "batch_req_%ld", it->line);
    return json_pack("{s:s, s:o}", "id", id, "custom_id", it->id ? json_string(it->id) : json_null());
}

/* One OpenAI choice: {index, message {role, content}, finish_reason} (NULL: not JSON,
 * e.g. text that is not valid UTF-8); OpenAI's logprobs: {content: [...]} when asked (lp), else null; a thinking
 * task's reasoning as message.reasoning_content (DeepSeek's API). */
static json_t *openai_choice(int index, const char *text, size_t len, const char *finish, json_t *lp,
                             const char *reasoning, size_t reasoning_len)
{
    json_t *c = json_pack("{s:i, s:{s:s, s:s%}, s:s, s:o}", "index", index, "message", "role", "assistant", "content",
                          text ? text : "", text ? len : 0, "finish_reason", finish ? finish : "stop", "logprobs",
                          lp ? json_pack("{s:O}", "content", lp) : json_null());
    json_t *r = c && reasoning ? json_stringn(reasoning, reasoning_len) : NULL;
    if (c && reasoning && (!r || json_object_set_new(json_object_get(c, "message"), "reasoning_content", r))) {
        json_decref(c);   /* not valid UTF-8 (random weights): the line fails as for content */
        return NULL;
    }
    return c;
}

/* body.choices: the one answer, or every choice of a task with n > 1 (NULL: one could
 * not be encoded; json_pack's "o" then fails the body). */
static json_t *openai_choices(const v4_result_info *ri)
{
    json_t *a = json_array();
    if (!ri->choices || ri->n_choices < 1) {
        json_t *c = openai_choice(0, ri->text, ri->text_len, ri->finish_reason, ri->logprobs, ri->reasoning,
                                  ri->reasoning_len);
        if (!a || !c || json_array_append_new(a, c)) {
            json_decref(a);
            return NULL;
        }
        return a;
    }
    for (int i = 0; a && i < ri->n_choices; i++) {
        const v4_result_choice *rc = &ri->choices[i];
        json_t *c = openai_choice(i, rc->text, rc->text_len, rc->finish_reason, rc->logprobs, rc->reasoning,
                                  rc->reasoning_len);
        if (!c || json_array_append_new(a, c)) {
            json_decref(a);
            return NULL;
        }
    }
    return a;
}

char *v4_batch_result_line(const v4_batch_item *it, const v4_result_info *ri, long long created)
{
    const int failed = ri->error && ri->error->code != V4_TASK_OK;
    if (it->kind == V4_BATCH_TASK) {
        json_t *r = v4_result_object(ri);
        if (r && failed)   /* an error line says its input line */
            json_object_set_new(r, "line", json_integer(it->line));
        return dump(r);
    }
    json_t *o = openai_record(it);
    if (!o)
        return NULL;
    if (failed) {   /* OpenAI's shape: an HTTP error answer, error null (that is for lost requests) */
        json_object_set_new(o, "response", openai_failed(it, ri->error));
        json_object_set_new(o, "error", json_null());
        json_object_set_new(o, "line", json_integer(it->line));
        return dump(o);
    }
    char cid[48], rid[48];
    snprintf(cid, sizeof cid, "chatcmpl-%ld", it->line);
    snprintf(rid, sizeof rid, "req_%ld", it->line);
    const int completion = v4_result_completion_tokens(ri);
    json_t *body = json_pack("{s:s, s:s, s:I, s:s, s:o, s:{s:i, s:i, s:i, s:{s:i}}}", "id", cid, "object",
                             "chat.completion", "created", (json_int_t)created, "model", ri->model ? ri->model : "",
                             "choices", openai_choices(ri), "usage", "prompt_tokens", ri->prompt_tokens,
                             "completion_tokens", completion, "total_tokens", ri->prompt_tokens + completion,
                             "prompt_tokens_details", "cached_tokens", ri->cached_tokens);
    if (!body) {   /* e.g. text that is not valid UTF-8 (random weights can cut a character) */
        json_decref(o);
        return NULL;
    }
    json_object_set_new(o, "response", json_pack("{s:i, s:s, s:o}", "status_code", 200, "request_id", rid, "body", body));
    json_object_set_new(o, "error", json_null());
    return dump(o);
}

char *v4_batch_error_line(const v4_batch_item *it, const v4_task_error *e, const char *raw, size_t len,
                          const char *worker)
{
    if (!e)
        e = &it->err;
    json_t *o;
    if (it->kind == V4_BATCH_TASK) {
        o = v4_invalid_record_object(e, it->id, worker, raw, len);
    } else {
        o = openai_record(it);
        char *cid = it->id ? NULL : salvage_custom_id(raw, len);
        if (o && cid)   /* the line is not JSON, but its custom_id can be read */
            json_object_set_new(o, "custom_id", json_string(cid));
        free(cid);
        if (o) {
            json_object_set_new(o, "response", openai_failed(it, e));
            json_object_set_new(o, "error", json_null());
        }
    }
    if (o)
        json_object_set_new(o, "line", json_integer(it->line));
    return dump(o);
}
