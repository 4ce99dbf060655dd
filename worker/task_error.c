/* task_error.c - names of the task error codes.  Thread: any. */
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
    }
    return "internal";
}
