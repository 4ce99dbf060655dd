/* tok_load_model.c - the "model" (BPE vocab + merges) and "added_tokens" parts of
 * tokenizer.json.
 *
 * Vocabulary strings are converted from the GPT-2 byte alphabet to raw bytes here;
 * an entry with a character outside that alphabet (DeepSeek's ids 0-2 mirror the
 * special tokens) keeps its UTF-8 bytes, which is what HF's ByteLevel decoder does.
 * Merges are looked up through jansson's own hash of the vocab object, so loading is
 * linear in the file size.
 */
#include <stdlib.h>
#include <string.h>

#include "tok_load.h"

/* ------------------------------------------------------------------- model */

/* Byte-level string -> raw bytes in L->buf; returns the length, or -1 if some
 * character is outside the byte alphabet (then the caller keeps the UTF-8). */
static long unbyte(loader *L, const char *s, size_t n)
{
    if (tok_scratch(L, n + 1))
        return -2;
    const unsigned char *p = (const unsigned char *)s;
    size_t i = 0, o = 0;
    while (i < n) {
        int k = tok_utf8_step(p + i, n - i);
        if (k <= 0)
            return -1;
        int b = tok_cp_to_byte(tok_utf8_decode(p + i, k));
        if (b < 0)
            return -1;
        L->buf[o++] = (char)b;
        i += (size_t)k;
    }
    return (long)o;
}

static int load_vocab(loader *L, const json_t *vocab)
{
    v4_tokenizer *t = L->t;
    const char *key;
    const json_t *val;
    json_object_foreach((json_t *)vocab, key, val) {
        json_int_t id = json_is_integer(val) ? json_integer_value(val) : -1;
        if (id < 0 || id >= (1 << 24))
            return tok_fail(L, V4_ERR_FORMAT, "model.vocab[\"%.64s\"]: not a token id in [0, 2^24)", key);
        if (id < t->n_ids && (t->tokens[id].flags & TOK_VALID))
            return tok_fail(L, V4_ERR_FORMAT, "model.vocab: id %lld is used twice", (long long)id);
        size_t klen = strlen(key);
        long n = unbyte(L, key, klen);
        if (n < -1)
            return -1;
        int rc = n >= 0 ? tok_set_entry(t, (int32_t)id, L->buf, (size_t)n, TOK_VALID, L->err)
                        : tok_set_entry(t, (int32_t)id, key, klen, TOK_VALID, L->err);
        if (rc)
            return -1;
    }
    for (int b = 0; b < 256; b++) {
        char s[5];
        int k = tok_utf8_encode(tok_byte_to_cp((uint8_t)b), s);
        s[k] = 0;
        const json_t *v = json_object_get(vocab, s);
        if (!json_is_integer(v))
            return tok_fail(L, V4_ERR_FORMAT,
                        "model.vocab has no entry \"%s\" for byte 0x%02x (not a byte-level BPE?)", s, b);
        t->byte_id[b] = (int32_t)json_integer_value(v);
    }
    return 0;
}

/* Split merge i into its two parts (in L->buf: a NUL b NUL a+b NUL). */
static int merge_parts(loader *L, const json_t *m, size_t i, const char **a, const char **b,
                       const char **ab)
{
    const char *sa, *sb;
    size_t na, nb;
    if (json_is_string(m)) {
        const char *s = json_string_value(m);
        const char *sp = strchr(s, ' ');
        if (!sp || strchr(sp + 1, ' '))
            return tok_fail(L, V4_ERR_FORMAT, "model.merges[%zu]: \"%.64s\" is not two tokens separated by one space", i, s);
        sa = s, na = (size_t)(sp - s), sb = sp + 1, nb = strlen(sb);
    } else if (json_is_array(m) && json_array_size(m) == 2 &&
               json_is_string(json_array_get(m, 0)) && json_is_string(json_array_get(m, 1))) {
        sa = json_string_value(json_array_get(m, 0));
        sb = json_string_value(json_array_get(m, 1));
        na = strlen(sa), nb = strlen(sb);
    } else {
        return tok_fail(L, V4_ERR_FORMAT, "model.merges[%zu]: expected \"a b\" or [\"a\", \"b\"]", i);
    }
    if (!na || !nb)
        return tok_fail(L, V4_ERR_FORMAT, "model.merges[%zu]: empty token", i);
    if (tok_scratch(L, 2 * (na + nb) + 3))
        return -1;
    char *p = L->buf;
    memcpy(p, sa, na), p[na] = 0;
    memcpy(p + na + 1, sb, nb), p[na + 1 + nb] = 0;
    char *q = p + na + nb + 2;
    memcpy(q, sa, na), memcpy(q + na, sb, nb), q[na + nb] = 0;
    *a = p, *b = p + na + 1, *ab = q;
    return 0;
}

static int load_merges(loader *L, const json_t *vocab, const json_t *merges)
{
    v4_tokenizer *t = L->t;
    size_t n = json_array_size(merges);
    if (tok_merges_init(t, n, L->err))
        return -1;
    for (size_t i = 0; i < n; i++) {
        const char *a = NULL, *b = NULL, *ab = NULL;
        if (merge_parts(L, json_array_get(merges, i), i, &a, &b, &ab))
            return -1;
        const json_t *ia = json_object_get(vocab, a), *ib = json_object_get(vocab, b),
                     *ir = json_object_get(vocab, ab);
        if (!ia || !ib)
            return tok_fail(L, V4_ERR_FORMAT, "model.merges[%zu]: \"%.60s\" is not in the vocab", i, ia ? b : a);
        if (!ir)
            return tok_fail(L, V4_ERR_FORMAT, "model.merges[%zu]: the merged token \"%.120s\" is not in the vocab", i, ab);
        /* a repeated pair keeps the later rank, as HF's HashMap collect does */
        tok_merge_put(t, (int32_t)json_integer_value(ia), (int32_t)json_integer_value(ib),
                      (uint32_t)i, (int32_t)json_integer_value(ir));
    }
    return 0;
}

int tok_load_model(loader *L, const json_t *model)
{
    if (!json_is_object(model))
        return tok_fail(L, V4_ERR_MISSING, "\"model\" is missing or not an object");
    const char *type = tok_get_type(model);
    if (type && strcmp(type, "BPE"))
        return tok_fail(L, V4_ERR_FORMAT, "model.type '%s' is not supported (only BPE)", type);
    const json_t *v = json_object_get(model, "dropout");
    if (v && !json_is_null(v) && !(json_is_number(v) && json_number_value(v) == 0))
        return tok_fail(L, V4_ERR_FORMAT, "model.dropout is not supported");
    if (tok_get_bool(model, "byte_fallback", 0))
        return tok_fail(L, V4_ERR_FORMAT, "model.byte_fallback is not supported");
    static const char *const affixes[2] = {"continuing_subword_prefix", "end_of_word_suffix"};
    for (int k = 0; k < 2; k++) {
        v = json_object_get(model, affixes[k]);
        if (v && !json_is_null(v) && !(json_is_string(v) && !*json_string_value(v)))
            return tok_fail(L, V4_ERR_FORMAT, "model.%s is not supported", affixes[k]);
    }
    int im = tok_get_bool(model, "ignore_merges", 0);
    if (im < 0)
        return tok_fail(L, V4_ERR_FORMAT, "model.ignore_merges: expected a boolean");
    L->t->ignore_merges = im;
    const json_t *vocab = json_object_get(model, "vocab"), *merges = json_object_get(model, "merges");
    if (!json_is_object(vocab))
        return tok_fail(L, V4_ERR_MISSING, "model.vocab is missing or not an object");
    if (!json_is_array(merges))
        return tok_fail(L, V4_ERR_MISSING, "model.merges is missing or not an array");
    return load_vocab(L, vocab) || load_merges(L, vocab, merges) ? -1 : 0;
}

/* ------------------------------------------------------------ added tokens */

int tok_load_added(loader *L, const json_t *added)
{
    if (!added || json_is_null(added))
        return 0;
    if (!json_is_array(added))
        return tok_fail(L, V4_ERR_FORMAT, "added_tokens: expected an array");
    for (size_t i = 0; i < json_array_size(added); i++) {
        const json_t *a = json_array_get(added, i);
        const json_t *id = json_object_get(a, "id"), *content = json_object_get(a, "content");
        json_int_t x = json_is_integer(id) ? json_integer_value(id) : -1;
        if (x < 0 || x >= (1 << 24))
            return tok_fail(L, V4_ERR_FORMAT, "added_tokens[%zu].id: not a token id in [0, 2^24)", i);
        if (!json_is_string(content) || !json_string_length(content))
            return tok_fail(L, V4_ERR_FORMAT, "added_tokens[%zu].content: expected a non-empty string", i);
        int special = tok_get_bool(a, "special", 0), lstrip = tok_get_bool(a, "lstrip", 0),
            rstrip = tok_get_bool(a, "rstrip", 0), single = tok_get_bool(a, "single_word", 0);
        if (special < 0 || lstrip < 0 || rstrip < 0 || single < 0)
            return tok_fail(L, V4_ERR_FORMAT, "added_tokens[%zu]: flags must be booleans", i);
        if (single)
            return tok_fail(L, V4_ERR_FORMAT, "added_tokens[%zu]: single_word is not supported", i);
        const char *s = json_string_value(content);
        size_t n = json_string_length(content);
        if (tok_set_entry(L->t, (int32_t)x, s, n, TOK_VALID | TOK_ADDED | (special ? TOK_SPECIAL : 0),
                          L->err) ||
            tok_added_add(L->t, (int32_t)x, s, n, lstrip, rstrip, L->err))
            return -1;
    }
    return 0;
}
