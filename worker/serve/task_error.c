/* task_error.c - names of the task error codes and the one error-filling helper.  Thread: any. */
#include <stdarg.h>
#include <stdio.h>

#include "task_error.h"

const char *v4_task_errcode_name(v4_task_errcode c)
{
    switch (c) {
    case V4_TASK_OK: return "ok";
    case V4_TASK_INVALID_JSON: return "invalid_json";
    case V4_TASK_INVALID_FIELD: return "invalid_field";
    case V4_TASK_MODEL_NOT_AVAILABLE: return "model_not_available";
    case V4_TASK_CONTEXT_LENGTH_EXCEEDED: return "context_length_exceeded";
    case V4_TASK_DEADLINE_EXCEEDED: return "deadline_exceeded";
    case V4_TASK_INTERNAL: return "internal";
    case V4_TASK_EXPERT_CORRUPT: return "expert_corrupt";
    case V4_TASK_UNSUPPORTED_FIELD: return "unsupported_field";
    case V4_TASK_CANCELLED: return "cancelled";
    }
    return "internal";
}

int v4_task_fail(v4_task_error *e, v4_task_errcode code, const char *where, const char *fmt, ...)
{
    e->code = code;
    snprintf(e->where, sizeof e->where, "%s", where);
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(e->message, sizeof e->message, fmt, ap);
    va_end(ap);
    return -1;
}
