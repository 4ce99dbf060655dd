/* task_packet.h - parse and validate one task packet (JSON, docs/queue-worker.md "Task packet").
 *
 * Design: the body is checked against a byte limit, then parsed with jansson
 * json_loadb(JSON_REJECT_DUPLICATES) (bodies are not NUL-terminated; jansson's default
 * keeps the last duplicate key silently).  Types are strict: integers must be JSON
 * integers, numbers may be integers or reals, strings must not contain NUL.  Fields:
 *   id (string, 1..128 bytes, required), type ("generate", the default, or
 *   "summarize"), model (string).
 *   generate:  exactly one of messages [{role: system|developer|user|assistant, content:
 *              string or [{type: "text", text}] parts, joined; other part types are
 *              unsupported_field}] (OpenAI's dialect; developer = system)
 *              | prompt (string) | input_ids [int >= 0], max_tokens (1..1048576;
 *              absent: has_max_tokens 0 and max_tokens 0, the runner decides once the
 *              prompt is built: the rest of the context, bounded by the worker's
 *              V4_DEFAULT_MAX_TOKENS - task_run.h v4_runner_max_tokens).
 *   summarize: document (non-empty string, required), instructions (string, optional),
 *              max_summary_tokens (1..1048576, default 256; also stored in max_tokens,
 *              the length of every generation of the summary - summarize.h).
 *   A field of the other type (messages/prompt/input_ids/max_tokens on a summarize
 *   task, document/instructions/max_summary_tokens on a generate task) is
 *   invalid_field.  Both types: temperature (>= 0,
 *   default 1), top_p ((0,1], default 1), top_k (>= 0), seed (>= 0), n (answers from one
 *   prompt, 1..V4_TASK_MAX_N, default 1; generate tasks only: worker/serve/choices.h), stop (string or
 *   array of <= 16 strings), thinking (bool), ignore_eos (bool: run to max_tokens, the
 *   deadline or a stop string even past the end-of-sequence token), deadline_ms (1..86400000), metadata (any
 *   JSON value, echoed back).  The output constraint (response_format, guided_json,
 *   guided_regex, guided_choice, structured_outputs: generate tasks only, not with
 *   ignore_eos), the sampling fields logit_bias, presence_penalty, frequency_penalty,
 *   repetition_penalty, min_p (every generation of a summary too), logprobs and
 *   top_logprobs (generate tasks only: task_sampling.h), the fields that are not served
 *   (unsupported_field: tools, stream, n > 1, ...)
 *   and those accepted for nothing (user, store, ...) are task_fields.h's.  Unknown
 *   fields are ignored and listed in unknown[].
 * On failure the error says invalid_json (with line, column and byte position) or
 * invalid_field or unsupported_field (with the field in where); e->id is still filled when the packet had
 * a usable id, so the error record can carry it.
 *
 * Ownership: v4_task owns its JSON root; every string points into it (the constraint's
 * canonical text and the logit_bias entries are its own copies); free with v4_task_free.  Thread: any; a task is used by one thread at a time.
 */
#ifndef V4_TASK_PACKET_H
#define V4_TASK_PACKET_H

#include <jansson.h>
#include <stddef.h>
#include <stdint.h>

#include "task_error.h"
#include "task_fields.h"
#include "task_sampling.h"

#define V4_TASK_MAX_ID 128
#define V4_TASK_MAX_STOPS 16
#define V4_TASK_MAX_MESSAGES 256
#define V4_TASK_MAX_UNKNOWN 16
#define V4_TASK_MAX_N 16                /* most answers (n) one task may ask for */
#define V4_TASK_DEFAULT_SUMMARY_TOKENS 256

typedef struct v4_task_msg {
    const char *role;               /* "system" | "user" | "assistant" */
    const char *content;
} v4_task_msg;

/* What a task asks for: a generation (messages | prompt | input_ids) or a summary of a
 * document (summarize.h). */
enum { V4_TASK_KIND_GENERATE = 0, V4_TASK_KIND_SUMMARIZE = 1 };

typedef struct v4_task {
    json_t *root;
    int kind;                       /* V4_TASK_KIND_* */
    const char *id;                 /* NULL if the packet had no usable id */
    const char *model;              /* NULL: any */
    v4_task_msg messages[V4_TASK_MAX_MESSAGES];
    int n_messages;
    const char *prompt;
    int32_t *input_ids;             /* malloc'd */
    int n_input_ids;
    int has_messages, has_prompt, has_input_ids;
    long max_tokens;                /* 0: absent (the runner's default); summarize: = max_summary_tokens */
    /* summarize (kind V4_TASK_KIND_SUMMARIZE) */
    const char *document;           /* NUL-terminated, document_len bytes */
    size_t document_len;
    const char *instructions;       /* NULL: none */
    long max_summary_tokens;
    int has_type, has_max_tokens, has_max_summary_tokens;
    double temperature, top_p;
    long top_k;
    uint64_t seed;
    int n;                          /* answers from one prefill (1..V4_TASK_MAX_N, default 1; choices.h) */
    const char *stops[V4_TASK_MAX_STOPS];
    int n_stops;
    int thinking;
    int ignore_eos;
    long deadline_ms;               /* 0: the worker default */
    json_t *metadata;               /* borrowed from root, NULL if absent */
    v4_task_constraint constraint;  /* the output constraint (constraint.on = 0: free text) */
    v4_task_sampling sampling;      /* logit_bias, penalties, min_p, logprobs (task_sampling.h) */
    const char *unknown[V4_TASK_MAX_UNKNOWN];
    int n_unknown;
} v4_task;

int v4_task_parse(const char *body, size_t len, size_t max_len, v4_task *t, v4_task_error *e);
void v4_task_free(v4_task *t);

#endif
