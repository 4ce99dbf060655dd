/* tok_decode.c - ids -> text: whole-sequence decode and the streaming decoder.
 *
 * A token decodes to its bytes (vocabulary entries were stored as raw bytes at load
 * time; added tokens to their content, as transformers' ByteLevel decode_chain does).
 * The concatenation is turned into valid UTF-8 with the maximal-subpart rule
 * (tok_utf8_step): invalid bytes become U+FFFD.  That rule decides every byte once
 * enough bytes follow it, so the streaming decoder only holds back the <= 3 bytes of
 * a character that may still complete, and its chunks concatenate to exactly the
 * whole-sequence result.
 */
#include <stdlib.h>
#include <string.h>

#include "tok_internal.h"

struct v4_tok_stream {
    const v4_tokenizer *t;
    int flags;
    unsigned char pend[4];      /* bytes of an incomplete character */
    size_t npend;
    size_t unknown;             /* ids fed that have no token (decoded to nothing) */
    char *buf;                  /* pend + new bytes, then the returned text */
    size_t cap;
};

static const char REPLACEMENT[3] = {(char)0xEF, (char)0xBF, (char)0xBD};

/* Write the lossy UTF-8 of s[0..n) to out (room for 3n bytes); returns the length
 * written.  Unless final, an incomplete character at the end is not consumed: its
 * length goes to *rest. */
static size_t lossy(const unsigned char *s, size_t n, int final, char *out, size_t *rest)
{
    size_t i = 0, o = 0;
    *rest = 0;
    while (i < n) {
        int k = tok_utf8_step(s + i, n - i);
        if (k > 0) {
            memmove(out + o, s + i, (size_t)k);
            o += (size_t)k;
            i += (size_t)k;
        } else if (k == 0 && !final) {
            *rest = n - i;
            break;
        } else {
            memcpy(out + o, REPLACEMENT, 3);
            o += 3;
            i += k < 0 ? (size_t)-k : n - i;
        }
    }
    return o;
}

/* Whether id (>= 0) names a token. */
static int has_token(const v4_tokenizer *t, int32_t id)
{
    return id < t->n_ids && (t->tokens[id].flags & TOK_VALID);
}

/* The bytes of id: -1 (err) for a negative id; an id >= 0 with no token (past the
 * vocabulary, e.g. a model's padding rows, or a hole in it) gives no bytes, as Hugging
 * Face tokenizers drops it, and *unknown is set. */
static int token_bytes(const v4_tokenizer *t, int32_t id, int flags, const char **p, size_t *n, int *unknown,
                       v4_error *err)
{
    *p = "";
    *n = 0;
    *unknown = 0;
    if (id < 0)
        return v4_err_set(err, V4_ERR_RANGE, "tokenizer", "token id %d is negative", (int)id);
    if (!has_token(t, id)) {
        *unknown = 1;
        return 0;
    }
    const tok_entry *e = &t->tokens[id];
    int skip = (flags & V4_TOK_SKIP_SPECIAL) && (e->flags & TOK_SPECIAL);
    *p = t->bytes + e->off;
    *n = skip ? 0 : e->len;
    return 0;
}

int v4_tok_decode(const v4_tokenizer *t, const int32_t *ids, size_t n, int flags, char **text,
                  size_t *len, v4_error *err)
{
    *text = NULL;
    *len = 0;
    size_t total = 0;
    for (size_t i = 0; i < n; i++) {
        const char *p;
        size_t k;
        int unk;
        if (token_bytes(t, ids[i], flags, &p, &k, &unk, err))
            return -1;
        total += k;
    }
    /* raw bytes at the end of the buffer, the lossy text written from its start
     * (the output never overtakes the input: each byte becomes at most 3) */
    char *buf = malloc(4 * total + 1);
    if (!buf)
        return v4_err_set(err, V4_ERR_NOMEM, "tokenizer", "out of memory");
    unsigned char *raw = (unsigned char *)buf + 3 * total;
    size_t at = 0;
    for (size_t i = 0; i < n; i++) {
        const char *p;
        size_t k;
        int unk;
        token_bytes(t, ids[i], flags, &p, &k, &unk, err);
        memcpy(raw + at, p, k);
        at += k;
    }
    size_t rest;
    size_t o = lossy(raw, total, 1, buf, &rest);
    buf[o] = 0;
    *text = buf;
    *len = o;
    return 0;
}

/* ---------------------------------------------------------------- stream */

v4_tok_stream *v4_tok_stream_new(const v4_tokenizer *t, int flags, v4_error *err)
{
    v4_tok_stream *s = calloc(1, sizeof *s);
    if (!s) {
        v4_err_set(err, V4_ERR_NOMEM, "tokenizer", "out of memory");
        return NULL;
    }
    s->t = t;
    s->flags = flags;
    return s;
}

void v4_tok_stream_free(v4_tok_stream *s)
{
    if (s) {
        free(s->buf);
        free(s);
    }
}

void v4_tok_stream_reset(v4_tok_stream *s)
{
    s->npend = 0;
    s->unknown = 0;
}

size_t v4_tok_stream_unknown(const v4_tok_stream *s) { return s->unknown; }

size_t v4_tok_count_unknown(const v4_tokenizer *t, const int32_t *ids, size_t n)
{
    size_t c = 0;
    for (size_t i = 0; i < n; i++)
        c += ids[i] >= 0 && !has_token(t, ids[i]);
    return c;
}

int v4_tok_stream_feed(v4_tok_stream *s, int32_t id, const char **text, size_t *len, v4_error *err)
{
    const char *p;
    size_t k;
    int unk;
    *text = "";
    *len = 0;
    if (token_bytes(s->t, id, s->flags, &p, &k, &unk, err))
        return -1;
    s->unknown += (size_t)unk;
    size_t n = s->npend + k, need = 4 * n + 1;
    if (need > s->cap) {
        char *b = realloc(s->buf, need);
        if (!b)
            return v4_err_set(err, V4_ERR_NOMEM, "tokenizer", "out of memory");
        s->buf = b;
        s->cap = need;
    }
    unsigned char *raw = (unsigned char *)s->buf + 3 * n;
    memcpy(raw, s->pend, s->npend);
    memcpy(raw + s->npend, p, k);
    size_t rest;
    size_t o = lossy(raw, n, 0, s->buf, &rest);
    memcpy(s->pend, raw + n - rest, rest);  /* rest <= 3, never overwritten: o <= 3(n - rest) */
    s->npend = rest;
    s->buf[o] = 0;
    *text = s->buf;
    *len = o;
    return 0;
}

void v4_tok_stream_flush(v4_tok_stream *s, const char **text, size_t *len)
{
    static const char empty[1] = "";
    *text = empty;
    *len = 0;
    if (!s->npend)
        return;
    /* an incomplete character is one maximal subpart: one U+FFFD */
    memcpy(s->buf, REPLACEMENT, 3);
    s->buf[3] = 0;
    s->npend = 0;
    *text = s->buf;
    *len = 3;
}
