/* token_logprobs.c - log probabilities as OpenAI's chat logprobs content (see
 * token_logprobs.h).  Thread: any. */
#include "token_logprobs.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>

/* Length of the valid UTF-8 sequence at s[0..n), 0 if none starts there. */
static size_t utf8_seq(const unsigned char *s, size_t n)
{
    const unsigned c = s[0];
    size_t k;
    unsigned lo = 0x80, hi = 0xBF;
    if (c < 0x80)
        return 1;
    if (c >= 0xC2 && c <= 0xDF)
        k = 2;
    else if (c >= 0xE0 && c <= 0xEF)
        k = 3, lo = c == 0xE0 ? 0xA0 : 0x80, hi = c == 0xED ? 0x9F : 0xBF;
    else if (c >= 0xF0 && c <= 0xF4)
        k = 4, lo = c == 0xF0 ? 0x90 : 0x80, hi = c == 0xF4 ? 0x8F : 0xBF;
    else
        return 0;
    if (n < k || s[1] < lo || s[1] > hi)
        return 0;
    for (size_t i = 2; i < k; i++)
        if (s[i] < 0x80 || s[i] > 0xBF)
            return 0;
    return k;
}

char *v4_token_text(const char *bytes, size_t len, size_t *out_len)
{
    char *t = malloc(len * 4 + 1);
    if (!t)
        return NULL;
    size_t o = 0;
    const unsigned char *s = (const unsigned char *)bytes;
    for (size_t i = 0; i < len;) {
        size_t k = utf8_seq(s + i, len - i);
        if (k) {
            for (size_t j = 0; j < k; j++)
                t[o++] = (char)s[i + j];
            i += k;
        } else {
            o += (size_t)snprintf(t + o, 5, "\\x%02x", s[i]);
            i++;
        }
    }
    t[o] = 0;
    *out_len = o;
    return t;
}

static double finite_lp(double x)
{
    return isfinite(x) ? x : V4_LOGPROB_FLOOR;
}

/* {token, logprob, bytes} for id. */
static json_t *entry(const v4_tokenizer *tok, int32_t id, double lp)
{
    size_t n = 0, tn = 0;
    const char *b = tok ? v4_tok_bytes(tok, id, &n) : NULL;
    if (!b)
        n = 0;
    char *text = v4_token_text(b ? b : "", n, &tn);
    json_t *bytes = json_array(), *o = json_object();
    json_t *str = text ? json_stringn(text, tn) : NULL;
    free(text);
    if (!bytes || !o || !str) {
        json_decref(bytes);
        json_decref(o);
        json_decref(str);
        return NULL;
    }
    for (size_t i = 0; i < n; i++)
        json_array_append_new(bytes, json_integer((unsigned char)b[i]));
    json_object_set_new(o, "token", str);
    json_object_set_new(o, "logprob", json_real(finite_lp(lp)));
    json_object_set_new(o, "bytes", bytes);
    return o;
}

json_t *v4_token_logprobs_json(const v4_tokenizer *tok, const int32_t *tokens, int n, const v4_gen_logprobs *lp)
{
    json_t *arr = json_array();
    if (!arr)
        return NULL;
    for (int i = 0; i < n && i < lp->n; i++) {
        json_t *e = entry(tok, tokens[i], lp->logprob[i]), *top = json_array();
        if (!e || !top || json_object_set_new(e, "top_logprobs", top)) {   /* set_new takes top, even on failure */
            if (!e)
                json_decref(top);
            json_decref(e);
            json_decref(arr);
            return NULL;
        }
        const size_t at = (size_t)i * (size_t)lp->stride;
        for (int k = 0; k < lp->top_n[i]; k++) {
            json_t *t = entry(tok, lp->top_id[at + (size_t)k], lp->top_lp[at + (size_t)k]);
            if (!t || json_array_append_new(top, t)) {
                json_decref(e);
                json_decref(arr);
                return NULL;
            }
        }
        if (json_array_append_new(arr, e)) {
            json_decref(arr);
            return NULL;
        }
    }
    return arr;
}
