/* tok_encode.c - the encoder: validate UTF-8, cut the text at added tokens, and run
 * the pre-tokenizer + BPE on the stretches between them.
 *
 * Added tokens are found leftmost-first, then longest, like HF's AddedVocabulary
 * (an Aho-Corasick automaton with MatchKind::LeftmostLongest): at each position whose
 * byte can start an added token the byte trie is walked to its deepest token end.
 * The walk is bounded by the longest added token, so the scan is linear.  lstrip /
 * rstrip extend a match over the whitespace next to it.  v4_tok_encode_parts marks
 * literal bytes (user content) where no added token may match, so a marker written in
 * a message stays text (docs/tokenizer.md "Text stays text").
 *
 * The encoder owns all mutable state (PCRE2 match data and JIT stack, BPE scratch,
 * piece cache), so one tokenizer can serve many threads, each with its own encoder.
 */
#include <stdlib.h>
#include <string.h>

#include "tok_internal.h"

v4_tok_encoder *v4_tok_encoder_new(const v4_tokenizer *t, v4_error *err)
{
    v4_tok_encoder *e = calloc(1, sizeof *e);
    if (!e) {
        v4_err_set(err, V4_ERR_NOMEM, "tokenizer", "out of memory");
        return NULL;
    }
    e->t = t;
    e->md = pcre2_match_data_create(1, NULL);
    e->mctx = pcre2_match_context_create(NULL);
    e->jit_stack = pcre2_jit_stack_create(32 * 1024, 8 * 1024 * 1024, NULL);
    if (!e->md || !e->mctx || !e->jit_stack) {
        v4_tok_encoder_free(e);
        v4_err_set(err, V4_ERR_NOMEM, "tokenizer", "out of memory");
        return NULL;
    }
    pcre2_jit_stack_assign(e->mctx, NULL, e->jit_stack);
    return e;
}

void v4_tok_encoder_free(v4_tok_encoder *e)
{
    if (!e)
        return;
    pcre2_match_data_free(e->md);
    pcre2_match_context_free(e->mctx);
    pcre2_jit_stack_free(e->jit_stack);
    tok_bpe_free(e);
    free(e);
}

/* Length of the whitespace character that ends just before p[i] (lo < i; the text
 * is valid UTF-8), or 0; and of the one that starts at p[i] (i < n). */
static size_t ws_before(const char *p, size_t lo, size_t i)
{
    size_t j = i - 1;
    while (j > lo && i - j < 4 && ((unsigned char)p[j] & 0xC0) == 0x80)
        j--;
    const unsigned char *s = (const unsigned char *)p + j;
    int k = tok_utf8_step(s, i - j);
    return k > 0 && (size_t)k == i - j && tok_is_whitespace(tok_utf8_decode(s, k)) ? (size_t)k : 0;
}

static size_t ws_at(const char *p, size_t i, size_t n)
{
    int k = tok_utf8_step((const unsigned char *)p + i, n - i);
    return k > 0 && tok_is_whitespace(tok_utf8_decode((const unsigned char *)p + i, k)) ? (size_t)k : 0;
}

/* Longest added token starting at p[i]: its index, end in *end; -1 if none. */
static int32_t added_at(const v4_tokenizer *t, const char *p, size_t i, size_t n, size_t *end)
{
    int32_t node = 0, best = -1;
    for (size_t j = i; j < n; j++) {
        uint8_t b = (uint8_t)p[j];
        int32_t c = t->trie[node].child;
        while (c >= 0 && t->trie[c].byte != b)
            c = t->trie[c].sibling;
        if (c < 0)
            break;
        node = c;
        if (t->trie[c].added >= 0) {
            best = t->trie[c].added;
            *end = j + 1;
        }
    }
    return best;
}

/* 1 when a byte of p[i..end) is literal (lit NULL: none is). */
static int any_literal(const uint8_t *lit, size_t i, size_t end)
{
    for (; lit && i < end; i++)
        if (lit[i])
            return 1;
    return 0;
}

/* Cut p at its added tokens; lit (may be NULL): per byte, 1 where no added token may
 * match (a match must lie wholly in bytes with lit 0). */
static int split_added(v4_tok_encoder *e, const char *p, size_t n, const uint8_t *lit)
{
    const v4_tokenizer *t = e->t;
    size_t seg = 0, i = 0;
    while (i < n) {
        if (!t->added_first[(uint8_t)p[i]] || (lit && lit[i])) {
            i++;
            continue;
        }
        size_t me = 0;
        int32_t a = added_at(t, p, i, n, &me);
        if (a >= 0 && any_literal(lit, i, me)) {   /* the longest match reaches into text: */
            a = -1;                                /* a shorter one that does not? */
            for (size_t k = i + 1; k < me && !lit[k]; k++) {
                size_t e2 = 0;
                int32_t b = added_at(t, p, i, k + 1, &e2);
                if (b >= 0 && e2 == k + 1)
                    a = b, me = e2;
            }
        }
        if (a < 0) {
            i++;
            continue;
        }
        size_t ms = i, w;
        if (t->added[a].lstrip)
            while (ms > seg && (w = ws_before(p, seg, ms)))
                ms -= w;
        if (t->added[a].rstrip)
            while (me < n && (w = ws_at(p, me, n)))
                me += w;
        if (tok_pretokenize(e, p + seg, ms - seg))
            return -1;
        if (e->out && v4_ids_push(e->out, t->added[a].id, e->err))
            return -1;
        seg = i = me;
    }
    return tok_pretokenize(e, p + seg, n - seg);
}

int v4_tok_encoder_pieces(v4_tok_encoder *e, const char *text, size_t len, tok_piece_fn fn,
                          void *ctx, v4_ids *out, v4_error *err)
{
    size_t bad = tok_utf8_check(text, len);
    if (bad < len)
        return v4_err_set(err, V4_ERR_INVALID, "tokenizer", "input is not valid UTF-8 (byte %zu)", bad);
    size_t n0 = out ? out->n : 0;
    e->out = out;
    e->err = err;
    e->piece_fn = fn;
    e->piece_ctx = ctx;
    int rc = e->t->n_added ? split_added(e, text, len, NULL) : tok_pretokenize(e, text, len);
    if (rc && out)
        out->n = n0;    /* no partial result */
    e->out = NULL;
    e->err = NULL;
    return rc;
}

int v4_tok_encode_parts(const v4_tokenizer *t, const v4_tok_part *parts, size_t n, v4_ids *out, v4_error *err)
{
    size_t len = 0;
    for (size_t k = 0; k < n; k++)
        len += parts[k].len;
    char *p = malloc(len + 1);
    uint8_t *lit = malloc(len + 1);
    v4_tok_encoder *e = p && lit ? v4_tok_encoder_new(t, err) : NULL;
    if (!e) {
        free(p);
        free(lit);
        return p && lit ? -1 : v4_err_set(err, V4_ERR_NOMEM, "tokenizer", "out of memory");
    }
    size_t at = 0;
    for (size_t k = 0; k < n; k++) {
        memcpy(p + at, parts[k].text, parts[k].len);
        memset(lit + at, parts[k].literal ? 1 : 0, parts[k].len);
        at += parts[k].len;
    }
    int rc;
    size_t bad = tok_utf8_check(p, len);
    if (bad < len) {
        rc = v4_err_set(err, V4_ERR_INVALID, "tokenizer", "input is not valid UTF-8 (byte %zu)", bad);
    } else {
        size_t n0 = out->n;
        e->out = out;
        e->err = err;
        e->piece_fn = tok_bpe_piece;
        e->piece_ctx = NULL;
        rc = t->n_added ? split_added(e, p, len, lit) : tok_pretokenize(e, p, len);
        if (rc)
            out->n = n0;
        e->out = NULL;
        e->err = NULL;
    }
    v4_tok_encoder_free(e);
    free(p);
    free(lit);
    return rc;
}

int v4_tok_encoder_run(v4_tok_encoder *e, const char *text, size_t len, v4_ids *out,
                       v4_error *err)
{
    return v4_tok_encoder_pieces(e, text, len, tok_bpe_piece, NULL, out, err);
}

int v4_tok_encode(const v4_tokenizer *t, const char *text, size_t len, v4_ids *out,
                  v4_error *err)
{
    v4_tok_encoder *e = v4_tok_encoder_new(t, err);
    if (!e)
        return -1;
    int rc = v4_tok_encoder_run(e, text, len, out, err);
    v4_tok_encoder_free(e);
    return rc;
}
