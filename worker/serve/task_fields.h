/* task_fields.h - the request fields beyond the core of a task packet (task_packet.h):
 * the output constraint, and the OpenAI / vLLM fields that are not served
 * (docs/structured-outputs.md, docs/queue-worker.md "Task packet").  The same code serves
 * task packets and OpenAI batch lines (worker/tools/batch_input.c copies these fields of
 * a line's body into the task it builds), so both answer alike.
 *
 * Constraint fields (at most one per task; null = absent):
 *   response_format     {"type": "text"} (free text) | {"type": "json_object"} |
 *                       {"type": "json_schema", "json_schema": {"name", "description",
 *                       "schema", "strict"}} (the schema is enforced whatever strict says)
 *   guided_json         a JSON Schema: an object (or boolean), or a string holding one
 *   guided_regex        a regex (ECMA-262) the whole answer must match
 *   guided_choice       a non-empty array of strings: the answer is one of them
 *   guided_grammar      a GBNF grammar (llama.cpp's notation, from rule root); a Lark
 *                       grammar is invalid_field (only GBNF is read)
 *   structured_outputs  {"json" | "regex" | "choice" | "grammar" (GBNF, as guided_grammar) |
 *                       "json_object": true} (vLLM's), plus
 *                       "disable_any_whitespace" (bool: JSON without whitespace) and
 *                       "disable_fallback" (bool, nothing to do here)
 *   structured_outputs.structural_tag / .whitespace_pattern, guided_whitespace_pattern:
 *   unsupported_field.
 * A malformed value is invalid_field naming the field ("response_format.json_schema.schema").
 *
 * Fields that would change the answer and are not served fail the task with
 * unsupported_field naming the field, unless their value asks for nothing (the value
 * in brackets): tools ([]), tool_choice ("none"), functions ([]), function_call ("none"),
 * parallel_tool_calls (any boolean: it only qualifies tools), stream (false), audio,
 * modalities (["text"]), prediction.  The sampling fields logit_bias, the penalties,
 * min_p, logprobs and top_logprobs are served: task_sampling.h reads them
 * (V4_FIELD_SAMPLING); n (1..V4_MAX_N answers) is task_packet.c's.  Fields that change
 * nothing are accepted: user, store,
 * service_tier, guided_decoding_backend (and metadata, echoed by task packets).
 *
 * Ownership: a v4_task_constraint owns its text (v4_task_constraint_free).
 * Thread: any.
 */
#ifndef V4_TASK_FIELDS_H
#define V4_TASK_FIELDS_H

#include <jansson.h>
#include <stddef.h>

#include "task_error.h"
#include "worker/grammar/grammar.h"

typedef struct v4_task_constraint {
    int on;                         /* 0: free text */
    v4g_kind kind;
    char *text;                     /* canonical text (malloc'd, NUL-terminated): a schema or the
                                     * choices written compactly with jansson (JSON_COMPACT, key
                                     * order kept), the regex or grammar as given, "" for
                                     * json_object */
    size_t len;
    int compact;                    /* 1: no whitespace between JSON tokens */
    char field[32];                 /* the request field it came from (errors name it) */
} v4_task_constraint;

typedef enum v4_field_kind {
    V4_FIELD_OTHER = 0,             /* not one of this file's */
    V4_FIELD_CONSTRAINT,            /* read by v4_task_constraint_parse */
    V4_FIELD_UNSERVED,              /* changes the answer, not served (v4_task_field_check) */
    V4_FIELD_SAMPLING,              /* served sampling fields: logit_bias, the penalties, min_p,
                                     * logprobs, top_logprobs (task_sampling.h) */
    V4_FIELD_NOOP                   /* changes nothing: accepted */
} v4_field_kind;

v4_field_kind v4_task_field_kind(const char *k);
/* A V4_FIELD_UNSERVED* field k with value v: 0 when the value asks for nothing (or is
 * null), else -1 with e (unsupported_field, where = k). */
int v4_task_field_check(const char *k, json_t *v, v4_task_error *e);
/* The constraint of a task object (every constraint field of root).  0 (c->on tells
 * whether there is one), or -1 with e (invalid_field / unsupported_field). */
int v4_task_constraint_parse(json_t *root, v4_task_constraint *c, v4_task_error *e);
void v4_task_constraint_free(v4_task_constraint *c);
/* "a JSON Schema", "any JSON object", "a regex", "a choice" */
const char *v4_task_constraint_what(const v4_task_constraint *c);

#endif
