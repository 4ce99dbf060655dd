/* batch_output.h - the output side of `v4fleet batch`: OUTPUT.jsonl as a crash-safe,
 * resumable log, and the JSON of each output line.
 *
 * Resume: v4_batch_out_open reads an existing OUTPUT, drops a truncated last line (the
 * file is truncated to its last complete line), and collects the keys of the inputs
 * already answered: "L<line>" for records that carry "line" (error lines written while
 * reading: malformed lines, invalid fields, duplicate ids), else "I<id>" from
 * custom_id (OpenAI lines) or id (task results).  Complete lines that are not JSON
 * objects are kept but counted in `unreadable`.
 * --retry-failed: lines answering with an error are dropped from OUTPUT (atomic rewrite)
 * so their inputs run again.
 * Writing: every line is written with one write() to an O_APPEND descriptor and
 * fsync()ed before the next task starts (a newly created file's directory is fsynced
 * once), so a crash loses at most the task in progress.
 *
 * Line shapes:
 *   task packet, ran    the queue's result record (v4_result_json);
 *   task packet, error  the queue's invalid record (v4_invalid_record_json) + "line";
 *   OpenAI, ran         {"id":"batch_req_<line>", "custom_id", "response": {"status_code":
 *                       200, "request_id", "body": {chat.completion}}, "error": null};
 *   OpenAI, failed      OpenAI's failed request: "response": {"status_code": 400 (invalid
 *                       input), 404 (model), 408 (deadline) or 500, "request_id", "body":
 *                       {"error": {message, type, param (the field at fault), code (our
 *                       error code)}}}, "error": null, + "line"; a line that is not JSON
 *                       keeps its custom_id when it can still be read there.
 *
 * Ownership: the writer owns its descriptor; returned strings are malloc'd (free()).
 * Thread: one thread per writer.
 */
#ifndef V4_BATCH_OUTPUT_H
#define V4_BATCH_OUTPUT_H

#include <stddef.h>

#include "batch_idset.h"
#include "batch_input.h"
#include "worker/serve/result_packet.h"

typedef struct v4_batch_out {
    int fd;
    long lines_before;              /* complete lines found in OUTPUT at open */
    long unreadable;                /* ... of which not JSON objects */
    long long truncated_bytes;      /* cut from a partial last line */
    long failed_before;             /* lines kept in OUTPUT that answer with an error */
    long retried;                   /* failed lines left out to run again (retry_failed) */
    int is_stream;                  /* "-": standard output (no resume, no fsync) */
} v4_batch_out;

/* Open (create) path for appending; fill done with the answered keys.  retry_failed: the
 * lines that answer with an error (failed tasks, invalid lines) are removed from the file
 * (rewritten atomically: a temporary file renamed over it) and their keys left out, so
 * those inputs run again.  path "-": standard output (nothing read, no fsync).  0, or -1
 * with msg (errno-style text) filled. */
int v4_batch_out_open(v4_batch_out *o, const char *path, v4_idset *done, int retry_failed, char *msg, size_t msg_n);
/* Append one line (json + '\n') and fsync.  0 or -1 (errno set). */
int v4_batch_out_write(v4_batch_out *o, const char *json);
void v4_batch_out_close(v4_batch_out *o);

/* The line of a task that ran: ri as for the queue (ri->error set = failed).
 * created: Unix seconds for the OpenAI body.  NULL on out of memory. */
char *v4_batch_result_line(const v4_batch_item *it, const v4_result_info *ri, long long created);
/* The line of an input line that cannot run (it->err, or e when not NULL). */
char *v4_batch_error_line(const v4_batch_item *it, const v4_task_error *e, const char *raw, size_t len,
                          const char *worker);

#endif
