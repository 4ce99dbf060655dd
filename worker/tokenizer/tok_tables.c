/* tok_tables.c - the tokenizer's lookup tables, built while loading: the byte arena
 * and id table, the merge hash table, the vocabulary index (bytes -> id) and the
 * added-token trie.
 *
 * Trade-offs: open addressing with linear probing at load factor <= 1/2 (merges: one
 * 16-byte slot per pair, ~4 MiB for DeepSeek's 127,741 merges); the trie keeps
 * children as sibling lists because the added tokens are few (~1,000) and share long
 * prefixes ("<｜"), so the fan-out per node is small.
 */
#include <stdlib.h>
#include <string.h>

#include "tok_internal.h"

uint64_t tok_hash_bytes(const void *p, size_t n)
{
    const unsigned char *s = p;
    uint64_t h = 0x9e3779b97f4a7c15ull ^ ((uint64_t)n * 0xff51afd7ed558ccdull);
    while (n >= 8) {
        uint64_t w;
        memcpy(&w, s, 8);
        h = (h ^ w) * 0xbf58476d1ce4e5b9ull;
        h ^= h >> 31;
        s += 8;
        n -= 8;
    }
    uint64_t w = 0;
    memcpy(&w, s, n);
    h = (h ^ w) * 0x94d049bb133111ebull;
    h ^= h >> 29;
    h *= 0xbf58476d1ce4e5b9ull;
    return h ^ (h >> 32);
}

int tok_arena_add(v4_tokenizer *t, const void *p, size_t n, uint32_t *off, v4_error *err)
{
    if (t->bytes_len + n > UINT32_MAX)
        return v4_err_set(err, V4_ERR_RANGE, "tokenizer", "token texts exceed 4 GiB");
    if (t->bytes_len + n > t->bytes_cap) {
        size_t cap = t->bytes_cap ? t->bytes_cap : 1 << 16;
        while (cap < t->bytes_len + n)
            cap *= 2;
        char *b = realloc(t->bytes, cap);
        if (!b)
            return v4_err_set(err, V4_ERR_NOMEM, "tokenizer", "out of memory");
        t->bytes = b;
        t->bytes_cap = cap;
    }
    if (n)
        memcpy(t->bytes + t->bytes_len, p, n);
    *off = (uint32_t)t->bytes_len;
    t->bytes_len += n;
    return 0;
}

int tok_set_entry(v4_tokenizer *t, int32_t id, const void *p, size_t n, uint32_t flags,
                  v4_error *err)
{
    if ((size_t)id >= t->tokens_cap) {
        size_t cap = t->tokens_cap ? t->tokens_cap : 1024;
        while (cap <= (size_t)id)
            cap *= 2;
        tok_entry *e = realloc(t->tokens, cap * sizeof *e);
        if (!e)
            return v4_err_set(err, V4_ERR_NOMEM, "tokenizer", "out of memory");
        memset(e + t->tokens_cap, 0, (cap - t->tokens_cap) * sizeof *e);
        t->tokens = e;
        t->tokens_cap = cap;
    }
    if (id >= t->n_ids)
        t->n_ids = id + 1;
    tok_entry *e = &t->tokens[id];
    if (tok_arena_add(t, p, n, &e->off, err))
        return -1;
    e->len = (uint32_t)n;
    e->flags = flags;
    return 0;
}

/* --------------------------------------------------------------- merges */

int tok_merges_init(v4_tokenizer *t, size_t n, v4_error *err)
{
    size_t cap = 16;
    while (cap < 2 * n + 2)
        cap *= 2;
    t->merges = malloc(cap * sizeof *t->merges);
    if (!t->merges)
        return v4_err_set(err, V4_ERR_NOMEM, "tokenizer", "out of memory");
    for (size_t i = 0; i < cap; i++)
        t->merges[i].key = TOK_EMPTY_KEY;
    t->merge_mask = cap - 1;
    t->n_merges = 0;
    return 0;
}

int tok_merge_put(v4_tokenizer *t, int32_t left, int32_t right, uint32_t rank, int32_t result)
{
    uint64_t key = ((uint64_t)(uint32_t)left << 32) | (uint32_t)right;
    for (size_t i = tok_merge_hash(key) & t->merge_mask;; i = (i + 1) & t->merge_mask) {
        tok_merge *m = &t->merges[i];
        if (m->key == key) {
            m->rank = rank;
            m->result = result;
            return 1;
        }
        if (m->key == TOK_EMPTY_KEY) {
            m->key = key;
            m->rank = rank;
            m->result = result;
            t->n_merges++;
            return 0;
        }
    }
}

/* --------------------------------------------------------- vocabulary index */

int tok_vocab_index_build(v4_tokenizer *t, v4_error *err)
{
    size_t cap = 16;
    while (cap < 2 * (size_t)t->n_ids + 2)
        cap *= 2;
    t->vocab_index = malloc(cap * sizeof *t->vocab_index);
    if (!t->vocab_index)
        return v4_err_set(err, V4_ERR_NOMEM, "tokenizer", "out of memory");
    memset(t->vocab_index, 0xff, cap * sizeof *t->vocab_index);
    t->vocab_mask = cap - 1;
    for (int32_t id = 0; id < t->n_ids; id++) {
        const tok_entry *e = &t->tokens[id];
        if (!(e->flags & TOK_VALID) || (e->flags & TOK_ADDED))
            continue;
        size_t i = tok_hash_bytes(t->bytes + e->off, e->len) & t->vocab_mask;
        while (t->vocab_index[i] >= 0)
            i = (i + 1) & t->vocab_mask;
        t->vocab_index[i] = id;
    }
    return 0;
}

int32_t tok_vocab_lookup(const v4_tokenizer *t, const void *p, size_t n)
{
    if (!t->vocab_index)
        return -1;
    for (size_t i = tok_hash_bytes(p, n) & t->vocab_mask;; i = (i + 1) & t->vocab_mask) {
        int32_t id = t->vocab_index[i];
        if (id < 0)
            return -1;
        const tok_entry *e = &t->tokens[id];
        if (e->len == n && !memcmp(t->bytes + e->off, p, n) && !(e->flags & TOK_ADDED))
            return id;
    }
}

/* ------------------------------------------------------------ added tokens */

static int32_t trie_node(v4_tokenizer *t, uint8_t byte, v4_error *err)
{
    if (t->n_trie == t->trie_cap) {
        size_t cap = t->trie_cap ? 2 * t->trie_cap : 256;
        tok_trie_node *n = realloc(t->trie, cap * sizeof *n);
        if (!n)
            return v4_err_set(err, V4_ERR_NOMEM, "tokenizer", "out of memory");
        t->trie = n;
        t->trie_cap = cap;
    }
    t->trie[t->n_trie] = (tok_trie_node){-1, -1, -1, byte};
    return (int32_t)t->n_trie++;
}

int tok_added_add(v4_tokenizer *t, int32_t id, const char *content, size_t len, int lstrip,
                  int rstrip, v4_error *err)
{
    if (!t->n_trie && trie_node(t, 0, err) < 0)
        return -1;
    tok_added *a = realloc(t->added, (t->n_added + 1) * sizeof *a);
    if (!a)
        return v4_err_set(err, V4_ERR_NOMEM, "tokenizer", "out of memory");
    t->added = a;
    a = &t->added[t->n_added];
    a->id = id;
    a->lstrip = (uint8_t)lstrip;
    a->rstrip = (uint8_t)rstrip;
    a->len = (uint32_t)len;
    if (tok_arena_add(t, content, len, &a->off, err))
        return -1;
    int32_t node = 0;
    for (size_t i = 0; i < len; i++) {
        uint8_t b = (uint8_t)content[i];
        int32_t c = t->trie[node].child;
        while (c >= 0 && t->trie[c].byte != b)
            c = t->trie[c].sibling;
        if (c < 0) {
            c = trie_node(t, b, err);
            if (c < 0)
                return -1;
            t->trie[c].sibling = t->trie[node].child;
            t->trie[node].child = c;
        }
        node = c;
    }
    t->trie[node].added = (int32_t)t->n_added;   /* a later duplicate replaces it */
    t->added_first[(uint8_t)content[0]] = 1;
    t->n_added++;
    return 0;
}
