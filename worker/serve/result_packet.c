/* result_packet.c - result and error records as compact JSON (see result_packet.h).
 * Thread: any. */
#include "result_packet.h"

#include <string.h>

static json_t *error_obj(const v4_task_error *e)
{
    json_t *o = json_pack("{s:s, s:s, s:s}", "code", v4_task_errcode_name(e->code), "message", e->message,
                          "where", e->where);
    if (o && e->code == V4_TASK_INVALID_JSON && (e->line || e->position)) {
        json_object_set_new(o, "line", json_integer(e->line));
        json_object_set_new(o, "column", json_integer(e->column));
        json_object_set_new(o, "position", json_integer(e->position));
    }
    return o;
}

static char *dump(json_t *o)
{
    char *s = o ? json_dumps(o, JSON_COMPACT) : NULL;
    json_decref(o);
    return s;
}

int v4_result_completion_tokens(const v4_result_info *r)
{
    if (!r->choices || r->n_choices < 1)
        return r->n_tokens;
    int n = 0;
    for (int i = 0; i < r->n_choices; i++)
        n += r->choices[i].n_tokens;
    return n;
}

/* output.choices of a task with n > 1 (NULL: one answer). */
static json_t *choices_array(const v4_result_info *r)
{
    if (!r->choices || r->n_choices < 1)
        return NULL;
    json_t *a = json_array();
    for (int i = 0; a && i < r->n_choices; i++) {
        const v4_result_choice *c = &r->choices[i];
        json_t *ids = json_array();
        for (int k = 0; ids && k < c->n_tokens; k++)
            json_array_append_new(ids, json_integer(c->tokens[k]));
        json_t *one = json_pack("{s:i, s:s%, s:o, s:s, s:i}", "index", i, "text", c->text ? c->text : "",
                                c->text ? c->text_len : 0, "token_ids", ids, "finish_reason",
                                c->finish_reason ? c->finish_reason : "stop", "completion_tokens", c->n_tokens);
        if (one && c->logprobs)
            json_object_set(one, "logprobs", c->logprobs);
        if (one && c->reasoning)
            json_object_set_new(one, "reasoning_content", json_stringn(c->reasoning, c->reasoning_len));
        json_array_append_new(a, one);
    }
    return a;
}

json_t *v4_result_object(const v4_result_info *r)
{
    int ok = !r->error || r->error->code == V4_TASK_OK;
    json_t *o = json_object();
    if (!o)
        return NULL;
    json_object_set_new(o, "id", r->id ? json_string(r->id) : json_null());
    json_object_set_new(o, "status", json_string(ok ? "succeeded" : "failed"));
    json_object_set_new(o, "model", r->model ? json_string(r->model) : json_null());
    if (ok) {
        json_t *ids = json_array();
        for (int i = 0; i < r->n_tokens; i++)
            json_array_append_new(ids, json_integer(r->token_ids[i]));
        json_t *output = json_pack("{s:s%, s:o, s:s}", "text", r->text ? r->text : "", r->text ? r->text_len : 0,
                                   "token_ids", ids, "finish_reason", r->finish_reason ? r->finish_reason : "stop");
        json_t *ch = choices_array(r);
        if (output && ch)
            json_object_set_new(output, "choices", ch);
        else
            json_decref(ch);
        if (output && r->logprobs)
            json_object_set(output, "logprobs", r->logprobs);
        if (output && r->reasoning)
            json_object_set_new(output, "reasoning_content", json_stringn(r->reasoning, r->reasoning_len));
        json_object_set_new(o, "output", output);
        const int completion = v4_result_completion_tokens(r);
        json_object_set_new(o, "usage", json_pack("{s:i, s:i, s:i, s:{s:i}}", "prompt_tokens", r->prompt_tokens,
                                                  "completion_tokens", completion, "total_tokens",
                                                  r->prompt_tokens + completion, "prompt_tokens_details",
                                                  "cached_tokens", r->cached_tokens));
        if (r->levels > 0)
            json_object_set_new(o, "summary", json_pack("{s:i, s:i}", "chunks", r->chunks, "levels", r->levels));
    } else {
        json_object_set_new(o, "error", error_obj(r->error));
    }
    json_t *timing = json_pack("{s:f, s:f, s:f, s:f}", "queue_ms", r->queue_ms, "prefill_ms", r->prefill_ms,
                               "decode_ms", r->decode_ms, "total_ms", r->total_ms);
    if (timing && r->numerics)
        json_object_set_new(timing, "numerics", json_string(r->numerics));
    json_object_set_new(o, "timing", timing);
    json_object_set_new(o, "experts",
                        json_pack("{s:I, s:I, s:I, s:I, s:I}", "activations",
                                  (json_int_t)(r->expert_hits + r->expert_misses + r->expert_prefetched), "hits",
                                  (json_int_t)r->expert_hits, "misses", (json_int_t)r->expert_misses, "prefetched",
                                  (json_int_t)r->expert_prefetched, "bytes_loaded",
                                  (json_int_t)r->expert_bytes_loaded));
    json_object_set_new(o, "worker", json_string(r->worker ? r->worker : ""));
    if (r->metadata)
        json_object_set(o, "metadata", r->metadata);
    return o;
}

char *v4_result_json(const v4_result_info *r) { return dump(v4_result_object(r)); }

json_t *v4_invalid_record_object(const v4_task_error *e, const char *id, const char *worker, const char *body,
                                 size_t len)
{
    json_t *o = json_object();
    if (!o)
        return NULL;
    json_object_set_new(o, "id", id ? json_string(id) : json_null());
    json_object_set_new(o, "status", json_string("failed"));
    json_object_set_new(o, "error", error_obj(e));
    json_object_set_new(o, "worker", json_string(worker ? worker : ""));
    size_t n = len < 4096 ? len : 4096;
    json_t *b = json_stringn(body, n);   /* NULL when not valid UTF-8 (or contains a cut char) */
    json_object_set_new(o, "body", b ? b : json_null());
    json_object_set_new(o, "body_bytes", json_integer((json_int_t)len));
    return o;
}

char *v4_invalid_record_json(const v4_task_error *e, const char *id, const char *worker, const char *body,
                             size_t len)
{
    return dump(v4_invalid_record_object(e, id, worker, body, len));
}
