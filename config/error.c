/* error.c - see error.h. */
#include "error.h"

#include <stdio.h>
#include <string.h>

int v4_err_set(v4_error *err, v4_errcode code, const char *where, const char *fmt, ...)
{
    if (!err)
        return -1;
    err->code = code;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err->msg, sizeof err->msg, fmt, ap);
    va_end(ap);
    snprintf(err->where, sizeof err->where, "%s", where ? where : "");
    return -1;
}

void v4_err_clear(v4_error *err)
{
    if (err)
        memset(err, 0, sizeof *err);
}

const char *v4_errcode_name(v4_errcode code)
{
    switch (code) {
    case V4_OK: return "ok";
    case V4_ERR_IO: return "io";
    case V4_ERR_FORMAT: return "format";
    case V4_ERR_CONFIG: return "config";
    case V4_ERR_MISSING: return "missing";
    case V4_ERR_DTYPE: return "dtype";
    case V4_ERR_SHAPE: return "shape";
    case V4_ERR_RANGE: return "range";
    case V4_ERR_NOMEM: return "nomem";
    case V4_ERR_INVALID: return "invalid";
    case V4_ERR_INTERNAL: return "internal";
    case V4_ERR_CORRUPT: return "corrupt";
    }
    return "unknown";
}
