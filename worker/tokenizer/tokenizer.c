/* tokenizer.c - the small public accessors of tokenizer.h and the id vector.
 * Loading is in tok_load.c, encoding in tok_encode.c / tok_pretok.c / tok_bpe.c,
 * decoding in tok_decode.c. */
#include <stdlib.h>
#include <string.h>

#include "tok_internal.h"

int v4_ids_push(v4_ids *ids, int32_t id, v4_error *err)
{
    if (ids->n == ids->cap) {
        size_t cap = ids->cap ? 2 * ids->cap : 64;
        int32_t *v = realloc(ids->v, cap * sizeof *v);
        if (!v)
            return v4_err_set(err, V4_ERR_NOMEM, "tokenizer", "out of memory");
        ids->v = v;
        ids->cap = cap;
    }
    ids->v[ids->n++] = id;
    return 0;
}

void v4_ids_free(v4_ids *ids)
{
    free(ids->v);
    ids->v = NULL;
    ids->n = ids->cap = 0;
}

void v4_tok_free(v4_tokenizer *t)
{
    if (!t)
        return;
    for (size_t i = 0; i < t->n_splits; i++)
        pcre2_code_free(t->splits[i].re);
    free(t->splits);
    free(t->tokens);
    free(t->bytes);
    free(t->merges);
    free(t->vocab_index);
    free(t->added);
    free(t->trie);
    free(t->bos_text);
    free(t->eos_text);
    free(t);
}

int32_t v4_tok_n_ids(const v4_tokenizer *t) { return t->n_ids; }
int32_t v4_tok_bos(const v4_tokenizer *t) { return t->bos_id; }
int32_t v4_tok_eos(const v4_tokenizer *t) { return t->eos_id; }
const char *v4_tok_bos_text(const v4_tokenizer *t) { return t->bos_text; }
const char *v4_tok_eos_text(const v4_tokenizer *t) { return t->eos_text; }

int32_t v4_tok_find(const v4_tokenizer *t, const char *s)
{
    size_t n = strlen(s);
    if (t->n_trie && n) {
        int32_t node = 0;
        for (size_t i = 0; i < n && node >= 0; i++) {
            int32_t c = t->trie[node].child;
            while (c >= 0 && t->trie[c].byte != (uint8_t)s[i])
                c = t->trie[c].sibling;
            node = c;
        }
        if (node >= 0 && t->trie[node].added >= 0)
            return t->added[t->trie[node].added].id;
    }
    return tok_vocab_lookup(t, s, n);
}

int v4_tok_is_special(const v4_tokenizer *t, int32_t id)
{
    return id >= 0 && id < t->n_ids && (t->tokens[id].flags & TOK_SPECIAL) ? 1 : 0;
}

const char *v4_tok_bytes(const v4_tokenizer *t, int32_t id, size_t *len)
{
    if (id < 0 || id >= t->n_ids || !(t->tokens[id].flags & TOK_VALID)) {
        *len = 0;
        return NULL;
    }
    *len = t->tokens[id].len;
    return t->bytes + t->tokens[id].off;
}
