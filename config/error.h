/* error.h - the one error record every fallible v4fleet function fills in.
 *
 * Design: functions return 0 on success and a negative value on failure; when they
 * fail they write a machine-readable code, a human message and a "where" (file,
 * tensor, key, or function) into a caller-provided v4_error.  Nothing outside
 * worker/main.c calls exit().
 *
 * Ownership: v4_error is a plain value owned by the caller (usually on the stack).
 * Thread: any; a v4_error must not be shared between threads while being written.
 */
#ifndef V4_ERROR_H
#define V4_ERROR_H

#include <stdarg.h>

typedef enum v4_errcode {
    V4_OK = 0,
    V4_ERR_IO,          /* open/read/mmap failed                      */
    V4_ERR_FORMAT,      /* malformed file (safetensors header, JSON)  */
    V4_ERR_CONFIG,      /* missing or inconsistent config value       */
    V4_ERR_MISSING,     /* required tensor or key absent              */
    V4_ERR_DTYPE,       /* tensor has the wrong dtype                 */
    V4_ERR_SHAPE,       /* tensor has the wrong shape                 */
    V4_ERR_RANGE,       /* value out of range (token id, position...) */
    V4_ERR_NOMEM,       /* allocation failed                          */
    V4_ERR_INVALID,     /* invalid argument                           */
    V4_ERR_INTERNAL,
    V4_ERR_CORRUPT      /* stored data fails its checksum (expert pack) */
} v4_errcode;

typedef struct v4_error {
    v4_errcode code;
    char msg[512];
    char where[256];
} v4_error;

/* Fill err (if non-NULL) and return -1.  where may be NULL. */
int v4_err_set(v4_error *err, v4_errcode code, const char *where, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
void v4_err_clear(v4_error *err);
const char *v4_errcode_name(v4_errcode code);

#endif
