/* log.h - the worker's one logger: JSON lines (default when stderr is not a terminal)
 * or human text, for the inference thread and, through callbacks, the AMQP and Redis
 * threads.
 *
 * JSON format: one object per line, keys in this order:
 *   {"time":"2026-11-29T14:13:54.123Z","level":"info","worker":"<id>","component":"worker",
 *    "task":"<id>" (when the line is about a task),"msg":"...", <fields>...}
 * level: "error" | "info" | "debug"; component: "worker" | "amqp" | "redis"; fields: extra
 * keys the caller passes (numbers, strings).  Strings are escaped by jansson (control
 * characters, quotes, invalid UTF-8 never produce a broken line).
 * Text format (unchanged from earlier releases, greppable): "HH:MM:SS.mmm v4fleet worker
 * LEVEL: msg" - fields are not printed (the message carries the figures).
 * The message text is the same in both formats.  Callers never pass credentials (URLs
 * are masked with v4_mask_url before they reach a message).
 *
 * Ownership: v4_log is a caller-owned struct (init/destroy); fields passed to
 * v4_log_emit are consumed (json_decref'd).  Thread: every function but init/destroy may
 * be called from any thread; a line is written with one fwrite under a mutex, so lines
 * of different threads never interleave.
 */
#ifndef V4_LOG_H
#define V4_LOG_H

#include <jansson.h>
#include <pthread.h>
#include <stdio.h>

#include "config/error.h"

enum { V4_LOG_ERROR = 0, V4_LOG_INFO = 1, V4_LOG_DEBUG = 2 };

typedef struct v4_log {
    int json;                   /* 1 JSON lines, 0 text */
    int level;                  /* lines above it are dropped */
    char worker_id[128];
    FILE *out;
    pthread_mutex_t mu;
} v4_log;

/* format: "json", "text", or "auto"/""/NULL (JSON unless out is a terminal).  Returns -1
 * (err: V4_ERR_CONFIG naming V4_LOG_FORMAT) for anything else. */
int v4_log_init(v4_log *l, const char *format, int level, const char *worker_id, FILE *out, v4_error *err);
void v4_log_destroy(v4_log *l);

/* One line.  component NULL = "worker"; task_id may be NULL; fields may be NULL (an
 * object; consumed). */
void v4_log_emit(v4_log *l, int level, const char *component, const char *task_id, json_t *fields,
                 const char *msg);
void v4_logf(v4_log *l, int level, const char *task_id, const char *fmt, ...) __attribute__((format(printf, 4, 5)));

/* Callbacks for queue/service.h (component "amqp") and telemetry/util_redis.h ("redis");
 * ud = the v4_log. */
void v4_log_amqp_cb(void *ud, int level, const char *line);
void v4_log_redis_cb(void *ud, int level, const char *line);

#endif
