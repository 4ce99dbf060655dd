/* summarize_split.c - the split helpers of the summarize task type (summarize.h):
 * token byte offsets, break kinds, and the chunking of a token range at paragraph /
 * sentence breaks with overlap.
 * Ownership: arrays returned are malloc'd for the caller.  Thread: pure, reentrant. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "summarize.h"

static int is_ws(char c)
{
    return c == ' ' || c == '\t' || c == '\r' || c == '\n' || c == '\f' || c == '\v';
}

int v4_summ_offsets(const v4_tokenizer *tok, const char *text, size_t len, const int32_t *ids, size_t n,
                    size_t **offs, v4_error *err)
{
    size_t *o = malloc((n + 1) * sizeof *o), at = 0;
    if (!o)
        return v4_err_set(err, V4_ERR_NOMEM, "summarize", "out of memory");
    for (size_t i = 0; i < n; i++) {
        size_t bl = 0;
        const char *b = v4_tok_bytes(tok, ids[i], &bl);
        while (b && at < len && (at + bl > len || memcmp(text + at, b, bl)) && is_ws(text[at]))
            at++;   /* whitespace an added token's lstrip/rstrip took */
        if (!b || at + bl > len || memcmp(text + at, b, bl)) {
            free(o);
            return v4_err_set(err, V4_ERR_FORMAT, "summarize", "token %zu (id %d) does not match the text at byte %zu",
                                i, ids[i], at);
        }
        o[i] = at;
        at += bl;
    }
    o[n] = len;
    *offs = o;
    return 0;
}

int v4_summ_break_kind(const char *text, size_t len, size_t off)
{
    if (off == 0 || off > len)
        return 0;
    size_t p = off, nl = 0;
    while (p > 0 && is_ws(text[p - 1])) {   /* the whitespace run just before the boundary */
        nl += text[p - 1] == '\n';
        p--;
    }
    if (p < off) {
        if (nl)
            return nl >= 2 ? 2 : 1;
        return p > 0 && text[p - 1] && strchr(".!?", text[p - 1]) ? 1 : 0;
    }
    /* right after a non-space byte: punctuation followed by whitespace (or the end) */
    return text[off - 1] && strchr(".!?", text[off - 1]) && (off == len || is_ws(text[off]));
}

static int char_boundary(const char *text, const size_t *offs, size_t n, size_t i)
{
    return i == n || ((unsigned char)text[offs[i]] & 0xC0) != 0x80;
}

int v4_summ_split(const char *text, const size_t *offs, size_t n, size_t budget, size_t overlap,
                  v4_summ_span **spans, size_t *n_spans)
{
    *spans = NULL;
    *n_spans = 0;
    if (budget < 2)
        return -1;
    size_t cap = 0, k = 0, s = 0;
    v4_summ_span *v = NULL;
    while (s < n || k == 0) {
        size_t lim = s + budget, cut = 0;
        if (lim >= n) {
            cut = n;
        } else {
            size_t lo = s + (budget / 2 ? budget / 2 : 1);
            for (int want = 2; want >= 1 && !cut; want--)
                for (size_t i = lim; i >= lo && !cut; i--)
                    if (char_boundary(text, offs, n, i) && v4_summ_break_kind(text, offs[n], offs[i]) >= want)
                        cut = i;
            for (size_t i = lim; i > s && !cut; i--)
                if (char_boundary(text, offs, n, i))
                    cut = i;
            if (!cut)
                cut = lim;
        }
        if (k == cap) {
            cap = cap ? cap * 2 : 8;
            v4_summ_span *nv = realloc(v, cap * sizeof *v);
            if (!nv) {
                free(v);
                return -1;
            }
            v = nv;
        }
        v[k++] = (v4_summ_span){s, cut};
        if (cut >= n)
            break;
        size_t ns = cut > s + overlap ? cut - overlap : s + 1;
        if (ns <= s)
            ns = s + 1;
        while (ns < cut && !char_boundary(text, offs, n, ns))
            ns++;
        s = ns;
    }
    *spans = v;
    *n_spans = k;
    return 0;
}

