/* tok_json.c - the small helpers the tokenizer loader's files share (tok_load.h): the
 * error record, the scratch buffer, typed reads of JSON members.  A leaf: tok_load.c,
 * tok_load_model.c and tok_load_pipeline.c call it, it calls none of them.
 * Thread: a loader is used by one thread, while loading.
 */
#include <jansson.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>

#include "tok_load.h"

int tok_fail(loader *L, v4_errcode code, const char *fmt, ...)
{
    char msg[sizeof L->err->msg];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    return v4_err_set(L->err, code, L->where, "%s", msg);
}

int tok_scratch(loader *L, size_t n)
{
    if (n <= L->buf_cap)
        return 0;
    size_t cap = L->buf_cap ? L->buf_cap : 256;
    while (cap < n)
        cap *= 2;
    char *b = realloc(L->buf, cap);
    if (!b)
        return tok_fail(L, V4_ERR_NOMEM, "out of memory");
    L->buf = b;
    L->buf_cap = cap;
    return 0;
}

int tok_get_bool(const json_t *o, const char *key, int dflt)
{
    const json_t *v = json_object_get(o, key);
    if (!v || json_is_null(v))
        return dflt;
    return json_is_boolean(v) ? json_is_true(v) : -1;
}

const char *tok_get_type(const json_t *o)
{
    const json_t *v = json_object_get(o, "type");
    return json_is_string(v) ? json_string_value(v) : NULL;
}
