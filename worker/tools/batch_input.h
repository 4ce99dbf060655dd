/* batch_input.h - the input side of `v4fleet batch`: read INPUT.jsonl line by line and
 * turn each line into a batch item (a validated v4_task, or the error that line earns).
 *
 * Two line forms:
 *   task packet   the queue's schema, validated by v4_task_parse (same strictness, same
 *                 error codes and `where`s);
 *   OpenAI line   an object with "custom_id": {custom_id, method: "POST", url:
 *                 "/v1/chat/completions", body {model, messages, max_tokens |
 *                 max_completion_tokens, temperature, top_p, top_k, seed, stop,
 *                 ignore_eos, response_format, ...}}.  It is
 *                 mapped to a task JSON (id = custom_id; message content given as an array
 *                 of text parts is joined; role "developer" -> "system") and that JSON
 *                 goes through v4_task_parse too, so both forms share one validator.
 *                 Errors name the input's fields ("custom_id", "url", "body.messages[0]").
 *                 The output constraint (response_format, guided_*, structured_outputs),
 *                 the sampling fields (logit_bias, the penalties, min_p, logprobs,
 *                 top_logprobs: worker/serve/task_sampling.h) and the fields that would
 *                 change the answer and are not served (tools, stream, n > 1, ...:
 *                 unsupported_field) go into the task too, so v4_task_parse answers them
 *                 as for a packet (worker/serve/task_fields.h); user, store,
 *                 service_tier, metadata change nothing and are accepted.  Other body
 *                 fields (unknown ones) are ignored and reported in unknown[] (other
 *                 top-level fields of the line are ignored silently).
 * Blank (whitespace-only) lines are skipped by the reader but still counted, so line
 * numbers are the file's.
 *
 * Ownership: an item owns its task and parsed JSON (v4_batch_item_free); id and
 * unknown[] point into them.  The reader owns its line buffer: a line is valid until
 * the next call.  Thread: one thread per reader / item.
 */
#ifndef V4_BATCH_INPUT_H
#define V4_BATCH_INPUT_H

#include <jansson.h>
#include <stdio.h>

#include "worker/serve/task_packet.h"

typedef struct v4_batch_reader {
    FILE *f;
    char *buf;
    size_t cap;
    long line;                      /* number of the line last returned (1-based) */
} v4_batch_reader;

/* 0 (path opened) or -1 (errno set). */
int v4_batch_reader_open(v4_batch_reader *r, const char *path);
/* Next non-blank line without its line terminator: 1, 0 at the end, -1 on a read
 * error (errno set). */
int v4_batch_reader_next(v4_batch_reader *r, const char **line, size_t *len);
void v4_batch_reader_close(v4_batch_reader *r);

typedef enum v4_batch_kind {
    V4_BATCH_TASK = 0,              /* a task packet */
    V4_BATCH_OPENAI                 /* an OpenAI batch line */
} v4_batch_kind;

#define V4_BATCH_MAX_UNKNOWN 24

typedef struct v4_batch_item {
    long line;                      /* 1-based line number in the input */
    v4_batch_kind kind;
    int shaped;                     /* the line is a JSON object: its shape gave kind (else
                                     * kind is V4_BATCH_TASK; `batch` then gives it the
                                     * file's kind, cmd_batch.c pass 1) */
    int ok;                         /* 1: task is valid; 0: err says why */
    v4_task task;                   /* parsed task (its id is set when usable, even if !ok) */
    v4_task_error err;
    const char *id;                 /* id / custom_id, NULL when the line had none usable */
    json_t *line_root;              /* OpenAI lines: the parsed line (owns custom_id) */
    const char *unknown[V4_BATCH_MAX_UNKNOWN];  /* ignored fields: the packet's, or an OpenAI line's body's */
    int n_unknown;
} v4_batch_item;

/* Classify and validate one line (never fails as a whole: problems land in it->err).
 * max_len: the largest line accepted. */
void v4_batch_item_parse(const char *line, size_t len, long lineno, size_t max_len, v4_batch_item *it);
void v4_batch_item_free(v4_batch_item *it);

#endif
