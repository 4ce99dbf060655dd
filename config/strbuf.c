/* strbuf.c - see strbuf.h.  Capacity doubles from 256 bytes. */
#include <stdlib.h>
#include <string.h>

#include "strbuf.h"

void v4_sb_putn(v4_strbuf *b, const char *s, size_t n)
{
    if (b->oom)
        return;
    if (b->n + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 256;
        while (cap < b->n + n + 1)
            cap *= 2;
        char *q = realloc(b->p, cap);
        if (!q) {
            b->oom = 1;
            return;
        }
        b->p = q;
        b->cap = cap;
    }
    memcpy(b->p + b->n, s, n);
    b->n += n;
    b->p[b->n] = 0;
}

void v4_sb_put(v4_strbuf *b, const char *s)
{
    v4_sb_putn(b, s, strlen(s));
}
