/* stop.c - see stop.h.  The held tail is at most (longest stop string - 1) bytes, so
 * each feed costs O(chunk + held) per stop string. */
#include <stdlib.h>
#include <string.h>

#include "stop.h"

struct v4_stop {
    char **stops;
    size_t *lens;
    int n;
    size_t maxlen;
    char *buf;          /* held text + the new chunk */
    size_t len, cap;
    int stopped;
};

v4_stop *v4_stop_create(const char *const *stops, int n, v4_error *err)
{
    v4_stop *s = calloc(1, sizeof *s);
    if (!s)
        goto oom;
    s->stops = calloc((size_t)n + 1, sizeof *s->stops);
    s->lens = calloc((size_t)n + 1, sizeof *s->lens);
    if (!s->stops || !s->lens)
        goto oom;
    for (int i = 0; i < n; i++) {
        size_t l = strlen(stops[i]);
        if (l == 0) {
            v4_stop_free(s);
            v4_err_set(err, V4_ERR_INVALID, "stop", "stop strings must not be empty (entry %d)", i);
            return NULL;
        }
        if (!(s->stops[i] = malloc(l + 1)))
            goto oom;
        memcpy(s->stops[i], stops[i], l + 1);
        s->lens[i] = l;
        s->n = i + 1;
        if (l > s->maxlen)
            s->maxlen = l;
    }
    return s;
oom:
    v4_stop_free(s);
    v4_err_set(err, V4_ERR_NOMEM, "stop", "out of memory");
    return NULL;
}

void v4_stop_free(v4_stop *s)
{
    if (!s)
        return;
    for (int i = 0; i < s->n; i++)
        free(s->stops[i]);
    free(s->stops);
    free(s->lens);
    free(s->buf);
    free(s);
}

/* Length of the longest suffix of buf that is a proper prefix of a stop string. */
static size_t held_tail(const v4_stop *s)
{
    size_t best = 0;
    for (int i = 0; i < s->n; i++) {
        size_t l = s->lens[i] - 1 < s->len ? s->lens[i] - 1 : s->len;
        for (; l > best; l--)
            if (!memcmp(s->buf + s->len - l, s->stops[i], l)) {
                best = l;
                break;
            }
    }
    return best;
}

int v4_stop_feed(v4_stop *s, const char *text, size_t len, v4_emit_fn emit, void *ud)
{
    if (s->stopped)
        return 1;
    if (s->n == 0) {
        if (len)
            emit(ud, text, len);
        return 0;
    }
    if (s->len + len > s->cap) {
        size_t cap = (s->len + len) * 2 + 64;
        char *b = realloc(s->buf, cap);
        if (!b)
            return -1;
        s->buf = b;
        s->cap = cap;
    }
    memcpy(s->buf + s->len, text, len);
    s->len += len;
    /* earliest complete stop string */
    size_t at = s->len;
    for (int i = 0; i < s->n; i++) {
        if (s->lens[i] > s->len)
            continue;
        for (size_t p = 0; p + s->lens[i] <= s->len && p < at; p++)
            if (s->buf[p] == s->stops[i][0] && !memcmp(s->buf + p, s->stops[i], s->lens[i])) {
                at = p;
                break;
            }
    }
    if (at < s->len) {
        if (at)
            emit(ud, s->buf, at);
        s->len = 0;
        s->stopped = 1;
        return 1;
    }
    size_t keep = held_tail(s);
    if (s->len > keep) {
        emit(ud, s->buf, s->len - keep);
        memmove(s->buf, s->buf + s->len - keep, keep);
        s->len = keep;
    }
    return 0;
}

void v4_stop_flush(v4_stop *s, v4_emit_fn emit, void *ud)
{
    if (!s->stopped && s->len)
        emit(ud, s->buf, s->len);
    s->len = 0;
}
