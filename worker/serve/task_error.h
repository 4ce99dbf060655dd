/* task_error.h - the error codes of task/result packets (docs/queue-worker.md "Task packet", "Result").
 *
 * A task that fails gets one result record (status "failed") or, when the packet
 * itself is unusable, one record in the invalid queue, with error {code, message,
 * where} (+ line, column, position for invalid_json).
 * Ownership: plain values.  Thread: any.
 */
#ifndef V4_TASK_ERROR_H
#define V4_TASK_ERROR_H

typedef enum v4_task_errcode {
    V4_TASK_OK = 0,
    V4_TASK_INVALID_JSON,           /* not a JSON object (syntax, duplicates, size...) */
    V4_TASK_INVALID_FIELD,          /* a field has the wrong type/range, or is missing */
    V4_TASK_MODEL_NOT_AVAILABLE,    /* names a model this worker does not serve */
    V4_TASK_CONTEXT_LENGTH_EXCEEDED,
    V4_TASK_DEADLINE_EXCEEDED,
    V4_TASK_INTERNAL,
    V4_TASK_EXPERT_CORRUPT,         /* an expert block failed its checksum (layer, expert, file, offset) */
    V4_TASK_UNSUPPORTED_FIELD,      /* a field that would change the answer and is not served
                                     * (tools, stream, ...; task_fields.h); where = the field */
    V4_TASK_CANCELLED               /* a cancel message named the task (the queue worker) */
} v4_task_errcode;
#define V4_TASK_ERRCODE_LAST V4_TASK_CANCELLED

typedef struct v4_task_error {
    v4_task_errcode code;
    char message[512];
    char where[160];                /* field name or component */
    int line, column;               /* invalid_json only (1-based; 0 unknown) */
    long position;                  /* invalid_json only: byte offset */
} v4_task_error;

const char *v4_task_errcode_name(v4_task_errcode c);
/* Fill e (code, where, formatted message) and return -1. */
int v4_task_fail(v4_task_error *e, v4_task_errcode code, const char *where, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

#endif
