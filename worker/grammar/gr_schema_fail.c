/* gr_schema_fail.c - the JSON Schema compiler's error helpers: a message that names the
 * keyword at fault and its JSON pointer (where = "/properties/age/maximum").  A file of
 * its own so that gr_schema.c and gr_schema_types.c both use it without using each other
 * both ways (scripts/check_layers.py: no circle between object files).
 * docs/structured-outputs.md "What fails to compile".  Thread: the compiling thread.
 */
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "worker/grammar/gr_schema_internal.h"

/* where = ptr/kw (a JSON pointer; empty at the root) */
static void place(char *out, size_t n, const char *ptr, const char *kw)
{
    snprintf(out, n, "%.200s%s%.50s", ptr, kw ? "/" : "", kw ? kw : "");
}

int gr_sc_fail(gr_sc *c, const char *ptr, const char *kw, const char *fmt, ...)
{
    char msg[400], at[256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    place(at, sizeof at, ptr, kw);
    v4_err_set(c->err, V4_ERR_INVALID, NULL, "%.300s (at %.200s)", msg, *at ? at : "the schema's root");
    if (c->err)
        memcpy(c->err->where, at, sizeof at);
    return -1;
}

int gr_sc_where(gr_sc *c, const char *ptr, const char *kw)
{
    if (c->err) {   /* the callee's message, the schema's place */
        place(c->err->where, sizeof c->err->where, ptr, kw);
        char m[sizeof c->err->msg];
        snprintf(m, sizeof m, "%.240s (at %.250s)", c->err->msg, *c->err->where ? c->err->where : "the schema's root");
        memcpy(c->err->msg, m, sizeof m);
    }
    return -1;
}
