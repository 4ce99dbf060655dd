/* task_packet.c - strict task packet parser (see task_packet.h; the constraint and the
 * fields not served: task_fields.c).  Thread: any. */
#include "config/strbuf.h"
#include "task_packet.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>


#define FIELD(e, where, ...) v4_task_fail(e, V4_TASK_INVALID_FIELD, where, __VA_ARGS__)

static int get_string(json_t *v, const char *name, const char **out, size_t max, v4_task_error *e)
{
    if (!json_is_string(v))
        return FIELD(e, name, "must be a string");
    size_t n = json_string_length(v);
    const char *s = json_string_value(v);
    if (memchr(s, 0, n))
        return FIELD(e, name, "must not contain NUL characters");
    if (max && n > max)
        return FIELD(e, name, "longer than %zu bytes", max);
    *out = s;
    return 0;
}

static int get_int(json_t *v, const char *name, long long lo, long long hi, long long *out, v4_task_error *e)
{
    if (!json_is_integer(v))
        return FIELD(e, name, "must be an integer");
    long long x = json_integer_value(v);
    if (x < lo || x > hi)
        return FIELD(e, name, "must be in [%lld, %lld], got %lld", lo, hi, x);
    *out = x;
    return 0;
}

static int get_num(json_t *v, const char *name, double *out, v4_task_error *e)
{
    if (!json_is_number(v))
        return FIELD(e, name, "must be a number");
    *out = json_number_value(v);
    return 0;
}

/* content: a string, or an array of {"type": "text", "text": STRING} parts (OpenAI's
 * form), joined into one string that replaces the array in m (the task owns root). */
static int parse_content(json_t *m, json_t *content, size_t i, const char **out, v4_task_error *e)
{
    char where[64];
    snprintf(where, sizeof where, "messages[%zu].content", i);
    if (!json_is_array(content))
        return get_string(content, where, out, 0, e);
    v4_strbuf sb = {0};
    for (size_t k = 0; k < json_array_size(content); k++) {
        json_t *p = json_array_get(content, k), *type = json_object_get(p, "type"), *text = json_object_get(p, "text");
        snprintf(where, sizeof where, "messages[%zu].content[%zu]", i, k);
        if (!json_is_object(p) || !json_is_string(type)) {
            free(sb.p);
            return FIELD(e, where, "must be a part {\"type\": \"text\", \"text\": STRING}");
        }
        if (strcmp(json_string_value(type), "text")) {
            free(sb.p);
            return v4_task_fail(e, V4_TASK_UNSUPPORTED_FIELD, where, "\"%s\" parts are not served (only \"text\")",
                                json_string_value(type));
        }
        if (!json_is_string(text) || memchr(json_string_value(text), 0, json_string_length(text))) {
            free(sb.p);
            snprintf(where, sizeof where, "messages[%zu].content[%zu].text", i, k);
            return FIELD(e, where, "must be a string without NUL");
        }
        v4_sb_putn(&sb, json_string_value(text), json_string_length(text));
    }
    json_t *joined = sb.oom ? NULL : json_stringn(sb.p ? sb.p : "", sb.n);
    free(sb.p);
    if (!joined || json_object_set_new(m, "content", joined))
        return v4_task_fail(e, V4_TASK_INTERNAL, where, "out of memory");
    *out = json_string_value(json_object_get(m, "content"));
    return 0;
}

static int parse_messages(json_t *v, v4_task *t, v4_task_error *e)
{
    if (!json_is_array(v))
        return FIELD(e, "messages", "must be an array");
    size_t n = json_array_size(v);
    if (n == 0 || n > V4_TASK_MAX_MESSAGES)
        return FIELD(e, "messages", "must hold 1..%d messages", V4_TASK_MAX_MESSAGES);
    for (size_t i = 0; i < n; i++) {
        json_t *m = json_array_get(v, i);
        char where[64];
        snprintf(where, sizeof where, "messages[%zu]", i);
        if (!json_is_object(m))
            return FIELD(e, where, "must be an object {role, content}");
        json_t *role = json_object_get(m, "role"), *content = json_object_get(m, "content");
        snprintf(where, sizeof where, "messages[%zu].role", i);
        if (!role)
            return FIELD(e, where, "is required");
        if (get_string(role, where, &t->messages[i].role, 0, e))
            return -1;
        if (!strcmp(t->messages[i].role, "developer"))   /* OpenAI's newer name of the system role */
            t->messages[i].role = "system";
        if (strcmp(t->messages[i].role, "system") && strcmp(t->messages[i].role, "user") &&
            strcmp(t->messages[i].role, "assistant"))
            return FIELD(e, where, "must be \"system\", \"developer\", \"user\" or \"assistant\"");
        snprintf(where, sizeof where, "messages[%zu].content", i);
        if (!content)
            return FIELD(e, where, "is required");
        if (parse_content(m, content, i, &t->messages[i].content, e))
            return -1;
    }
    t->n_messages = (int)n;
    t->has_messages = 1;
    return 0;
}

static int parse_ids(json_t *v, v4_task *t, v4_task_error *e)
{
    if (!json_is_array(v))
        return FIELD(e, "input_ids", "must be an array of integers");
    size_t n = json_array_size(v);
    if (n == 0 || n > (1u << 20))
        return FIELD(e, "input_ids", "must hold 1..%u ids", 1u << 20);
    if (!(t->input_ids = malloc(n * sizeof *t->input_ids)))
        return v4_task_fail(e, V4_TASK_INTERNAL, "input_ids", "out of memory");
    for (size_t i = 0; i < n; i++) {
        char where[48];
        long long x = 0;
        snprintf(where, sizeof where, "input_ids[%zu]", i);
        if (get_int(json_array_get(v, i), where, 0, INT32_MAX, &x, e))
            return -1;
        t->input_ids[i] = (int32_t)x;
    }
    t->n_input_ids = (int)n;
    t->has_input_ids = 1;
    return 0;
}

static int parse_stop(json_t *v, v4_task *t, v4_task_error *e)
{
    if (json_is_string(v)) {
        t->n_stops = 1;
        if (get_string(v, "stop", &t->stops[0], 256, e))
            return -1;
        return *t->stops[0] ? 0 : FIELD(e, "stop", "must not be empty (an empty stop string would end every answer "
                                                     "at once)");
    }
    if (!json_is_array(v) || json_array_size(v) > V4_TASK_MAX_STOPS)
        return FIELD(e, "stop", "must be a string or an array of at most %d strings", V4_TASK_MAX_STOPS);
    for (size_t i = 0; i < json_array_size(v); i++) {
        char where[32];
        snprintf(where, sizeof where, "stop[%zu]", i);
        if (get_string(json_array_get(v, i), where, &t->stops[i], 256, e))
            return -1;
        if (!*t->stops[i])
            return FIELD(e, where, "must not be empty");
    }
    t->n_stops = (int)json_array_size(v);
    return 0;
}

static int parse_field(const char *k, json_t *v, v4_task *t, v4_task_error *e)
{
    long long x = 0;
    if (!strcmp(k, "id"))
        return 0;   /* done first */
    if (!strcmp(k, "model"))
        return get_string(v, k, &t->model, 256, e);
    if (!strcmp(k, "type"))
        return 0;   /* done first */
    if (!strcmp(k, "document")) {
        if (get_string(v, k, &t->document, 0, e))
            return -1;
        t->document_len = json_string_length(v);
        return t->document_len ? 0 : FIELD(e, k, "must not be empty");
    }
    if (!strcmp(k, "instructions"))
        return get_string(v, k, &t->instructions, 0, e);
    if (!strcmp(k, "max_summary_tokens")) {
        if (get_int(v, k, 1, 1 << 20, &x, e))
            return -1;
        t->max_summary_tokens = (long)x;
        t->has_max_summary_tokens = 1;
        return 0;
    }
    if (!strcmp(k, "messages"))
        return parse_messages(v, t, e);
    if (!strcmp(k, "prompt")) {
        t->has_prompt = 1;
        return get_string(v, k, &t->prompt, 0, e);
    }
    if (!strcmp(k, "input_ids"))
        return parse_ids(v, t, e);
    if (!strcmp(k, "max_tokens")) {
        if (get_int(v, k, 1, 1 << 20, &x, e))
            return -1;
        t->max_tokens = (long)x;
        t->has_max_tokens = 1;
        return 0;
    }
    if (!strcmp(k, "temperature")) {
        if (get_num(v, k, &t->temperature, e))
            return -1;
        return t->temperature >= 0 && t->temperature <= 1e6 ? 0 : FIELD(e, k, "must be in [0, 1e6]");
    }
    if (!strcmp(k, "top_p")) {
        if (get_num(v, k, &t->top_p, e))
            return -1;
        return t->top_p > 0 && t->top_p <= 1 ? 0 : FIELD(e, k, "must be in (0, 1]");
    }
    if (!strcmp(k, "top_k")) {
        if (get_int(v, k, 0, 1 << 24, &x, e))
            return -1;
        t->top_k = (long)x;
        return 0;
    }
    if (!strcmp(k, "seed")) {
        if (get_int(v, k, 0, INT64_MAX, &x, e))
            return -1;
        t->seed = (uint64_t)x;
        return 0;
    }
    if (!strcmp(k, "n")) {
        if (get_int(v, k, 1, V4_TASK_MAX_N, &x, e))
            return -1;
        t->n = (int)x;
        return 0;
    }
    if (!strcmp(k, "stop"))
        return parse_stop(v, t, e);
    if (!strcmp(k, "thinking")) {
        if (!json_is_boolean(v))
            return FIELD(e, k, "must be true or false");
        t->thinking = json_is_true(v);
        return 0;
    }
    if (!strcmp(k, "ignore_eos")) {
        if (!json_is_boolean(v))
            return FIELD(e, k, "must be true or false");
        t->ignore_eos = json_is_true(v);
        return 0;
    }
    if (!strcmp(k, "deadline_ms")) {
        if (get_int(v, k, 1, 86400000, &x, e))
            return -1;
        t->deadline_ms = (long)x;
        return 0;
    }
    if (!strcmp(k, "metadata")) {
        t->metadata = v;
        return 0;
    }
    switch (v4_task_field_kind(k)) {
    case V4_FIELD_CONSTRAINT:   /* v4_task_constraint_parse, after the loop */
    case V4_FIELD_NOOP:
        return 0;
    case V4_FIELD_UNSERVED:
        return v4_task_field_check(k, v, e);
    case V4_FIELD_SAMPLING:
        return v4_task_sampling_parse(k, v, &t->sampling, e);
    case V4_FIELD_OTHER:
        break;
    }
    if (t->n_unknown < V4_TASK_MAX_UNKNOWN)
        t->unknown[t->n_unknown++] = k;
    return 0;
}

/* A summarize task: a document, none of the generation inputs. */
static int check_summarize(v4_task *t, v4_task_error *e)
{
    if (t->has_messages || t->has_prompt || t->has_input_ids)
        return FIELD(e, t->has_messages ? "messages" : t->has_prompt ? "prompt" : "input_ids",
                     "is not allowed in a \"summarize\" task (the text goes in \"document\")");
    if (t->has_max_tokens)
        return FIELD(e, "max_tokens", "is not allowed in a \"summarize\" task (use \"max_summary_tokens\")");
    if (!t->document)
        return FIELD(e, "document", "is required for \"type\": \"summarize\"");
    if (!t->has_max_summary_tokens)
        t->max_summary_tokens = V4_TASK_DEFAULT_SUMMARY_TOKENS;
    t->max_tokens = t->max_summary_tokens;
    return 0;
}

int v4_task_parse(const char *body, size_t len, size_t max_len, v4_task *t, v4_task_error *e)
{
    memset(t, 0, sizeof *t);
    memset(e, 0, sizeof *e);
    t->max_tokens = 0;   /* absent: the runner's default (task_run.h v4_runner_max_tokens) */
    t->temperature = 1.0;
    t->top_p = 1.0;
    t->n = 1;
    if (len > max_len)
        return v4_task_fail(e, V4_TASK_INVALID_JSON, "body", "body of %zu bytes exceeds the limit of %zu bytes", len, max_len);
    json_error_t je;
    t->root = json_loadb(body, len, JSON_REJECT_DUPLICATES, &je);
    if (!t->root) {
        v4_task_fail(e, V4_TASK_INVALID_JSON, "body", "%s", je.text);
        e->line = je.line;
        e->column = je.column;
        e->position = (long)je.position;
        return -1;
    }
    if (!json_is_object(t->root))
        return v4_task_fail(e, V4_TASK_INVALID_JSON, "body", "the task must be a JSON object");
    json_t *id = json_object_get(t->root, "id");
    if (!id)
        return FIELD(e, "id", "is required");
    if (get_string(id, "id", &t->id, V4_TASK_MAX_ID, e))
        return -1;
    if (!*t->id) {
        t->id = NULL;
        return FIELD(e, "id", "must not be empty");
    }
    json_t *type = json_object_get(t->root, "type");
    if (type) {
        const char *ty;
        if (get_string(type, "type", &ty, 32, e))
            return -1;
        if (!strcmp(ty, "summarize"))
            t->kind = V4_TASK_KIND_SUMMARIZE;
        else if (strcmp(ty, "generate"))
            return FIELD(e, "type", "must be \"generate\" or \"summarize\"");
        t->has_type = 1;
    }
    const char *k;
    json_t *v;
    json_object_foreach(t->root, k, v) {
        if (parse_field(k, v, t, e))
            return -1;
    }
    if (v4_task_constraint_parse(t->root, &t->constraint, e) || v4_task_sampling_check(&t->sampling, e))
        return -1;
    if (t->sampling.logprobs && t->kind == V4_TASK_KIND_SUMMARIZE)
        return v4_task_fail(e, V4_TASK_UNSUPPORTED_FIELD, "logprobs",
                            "log probabilities are not served on \"summarize\" tasks (only on generations)");
    if (t->constraint.on && t->kind == V4_TASK_KIND_SUMMARIZE)
        return v4_task_fail(e, V4_TASK_UNSUPPORTED_FIELD, t->constraint.field,
                            "constraints are not served on \"summarize\" tasks (only on generations)");
    if (t->constraint.on && t->ignore_eos)
        return FIELD(e, "ignore_eos", "cannot be combined with a constraint (%s): a constrained answer ends at its "
                     "end token", t->constraint.field);
    if (t->n > 1 && t->kind == V4_TASK_KIND_SUMMARIZE)
        return v4_task_fail(e, V4_TASK_UNSUPPORTED_FIELD, "n", "several answers are served on generations only, "
                            "not on \"summarize\" tasks (only 1 is accepted)");
    if (t->kind == V4_TASK_KIND_SUMMARIZE)
        return check_summarize(t, e);
    if (t->document)
        return FIELD(e, "document", "is only for \"type\": \"summarize\" tasks");
    if (t->instructions)
        return FIELD(e, "instructions", "is only for \"type\": \"summarize\" tasks");
    if (t->has_max_summary_tokens)
        return FIELD(e, "max_summary_tokens", "is only for \"type\": \"summarize\" tasks");
    int forms = t->has_messages + t->has_prompt + t->has_input_ids;
    if (forms != 1)
        return FIELD(e, "messages", "exactly one of messages, prompt and input_ids is required (got %d)", forms);
    if (t->has_messages && strcmp(t->messages[t->n_messages - 1].role, "user"))
        return FIELD(e, "messages", "the last message must have role \"user\"");
    return 0;
}

void v4_task_free(v4_task *t)
{
    free(t->input_ids);
    v4_task_constraint_free(&t->constraint);
    v4_task_sampling_free(&t->sampling);
    json_decref(t->root);
    memset(t, 0, sizeof *t);
}
