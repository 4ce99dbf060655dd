/* result_packet.h - build the JSON result record of one task and the error record
 * of an invalid packet (docs/queue-worker.md "Result"; config/result.schema.json).
 *
 * Result: {id, status: succeeded|failed, model, output {text, token_ids,
 * finish_reason[, logprobs][, choices [{index, text, token_ids, finish_reason,
 * completion_tokens[, logprobs]}] when the task asked for n > 1 answers: text... are
 * choice 0's]}, usage {prompt_tokens, completion_tokens, total_tokens,
 * prompt_tokens_details {cached_tokens}}, timing
 * {queue_ms, prefill_ms, decode_ms, total_ms}, experts {hits, misses, bytes_loaded},
 * summary {chunks, levels} (succeeded summarize tasks; summarize.h), worker, metadata,
 * error {code, message,
 * where[, line, column, position]}} - output/usage only on success, error only on
 * failure, metadata only when the task had one.  The invalid-packet record is the
 * same shape with status "failed", id null when the packet had no usable id, plus
 * "body" (the first 4 KiB of the original body, as a string if it is valid UTF-8).
 *
 * Ownership: returned strings are malloc'd (free()).  Thread: any.
 */
#ifndef V4_RESULT_PACKET_H
#define V4_RESULT_PACKET_H

#include <jansson.h>
#include <stddef.h>
#include <stdint.h>

#include "task_error.h"

/* One answer of a task with n > 1 (worker/serve/choices.h): the result's choices[i].
 * Owned by the v4_run_output that holds it (v4_run_output_free), borrowed here. */
typedef struct v4_result_choice {
    char *text;
    size_t text_len;
    int32_t *tokens;
    int n_tokens;
    const char *finish_reason;
    json_t *logprobs;               /* logprobs: true: this choice's content array; NULL otherwise */
    char *reasoning;                /* thinking tasks: the reasoning (text is the answer); else NULL */
    size_t reasoning_len;
} v4_result_choice;

typedef struct v4_result_info {
    const char *id;                 /* may be NULL (invalid packet) */
    const char *model;
    const char *worker;
    json_t *metadata;               /* borrowed, may be NULL */
    /* success */
    const char *text;
    size_t text_len;
    const int32_t *token_ids;
    int n_tokens;
    const char *finish_reason;
    int prompt_tokens;
    int cached_tokens;              /* of those, restored from the prefix cache (usage.prompt_tokens_details) */
    /* thinking tasks: the reasoning before </think> (output.reasoning_content; text is the
     * answer); NULL: left out */
    const char *reasoning;
    size_t reasoning_len;
    /* n > 1: every answer (choice 0 = the fields above); NULL / 0: one answer.  With
     * choices, usage.completion_tokens is their sum and output.choices lists them. */
    const v4_result_choice *choices;
    int n_choices;
    /* timing, milliseconds */
    double queue_ms, prefill_ms, decode_ms, total_ms;
    /* the run's experts figures (v4_run_output, task_run.h): activations = hits + misses
     * + prefetched, bytes loaded */
    long long expert_hits, expert_misses, expert_prefetched, expert_bytes_loaded;
    /* summarize tasks (v4_run_output chunks, levels): the summary object when levels > 0 */
    int chunks, levels;
    /* failure (code != V4_TASK_OK) */
    const v4_task_error *error;
    /* the numerics mode that produced it ("exact" | "fast"; timing.numerics), NULL: left out */
    const char *numerics;
    /* success with logprobs: true: the chat logprobs content array (v4_run_output.logprobs,
     * token_logprobs.h), borrowed; output.logprobs.  NULL: left out. */
    json_t *logprobs;
} v4_result_info;

/* NULL on allocation failure. */
char *v4_result_json(const v4_result_info *r);
/* The completion tokens of r: the sum over its choices, else n_tokens. */
int v4_result_completion_tokens(const v4_result_info *r);
/* Error record for tasks.invalid; body/len is the original packet. */
char *v4_invalid_record_json(const v4_task_error *e, const char *id, const char *worker, const char *body,
                             size_t len);
/* The same records as jansson objects (the caller owns the reference; NULL on
 * allocation failure), for callers that add fields before dumping (batch files). */
json_t *v4_result_object(const v4_result_info *r);
json_t *v4_invalid_record_object(const v4_task_error *e, const char *id, const char *worker, const char *body,
                                 size_t len);

#endif
