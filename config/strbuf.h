/* strbuf.h - a growable NUL-terminated byte string for building text (prompts,
 * regex sources, corpora).  Appends never fail loudly: on out of memory the buffer
 * sets `oom` and ignores further appends, so a builder checks once at the end.
 * Ownership: the caller owns p (free it); zero-initialize to start.
 * Thread: one thread per buffer. */
#ifndef V4_STRBUF_H
#define V4_STRBUF_H

#include <stddef.h>

typedef struct v4_strbuf {
    char *p;        /* NUL-terminated once anything was appended */
    size_t n, cap;
    int oom;
} v4_strbuf;

void v4_sb_putn(v4_strbuf *b, const char *s, size_t n);
void v4_sb_put(v4_strbuf *b, const char *s);

#endif
