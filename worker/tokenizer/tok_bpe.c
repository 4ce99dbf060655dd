/* tok_bpe.c - byte-level BPE of one pre-token piece, plus the piece cache.
 *
 * Algorithm (same result as HF tokenizers' Word::merge_all): the piece starts as one
 * symbol per byte in a doubly linked list; every adjacent pair that has a merge is
 * pushed on a binary min-heap keyed (rank, position of the left symbol).  Popping
 * the smallest key, the entry is checked against the current list (left symbol still
 * alive, its right neighbour exists, and that pair still has this rank: a symbol only
 * ever grows, so a changed pair never shows the same rank); then the two symbols are
 * merged and the new pairs with the left and right neighbours are pushed.  Each merge
 * removes a symbol, so there are < n merges, <= 3n pushes and O(n log n) work for a
 * piece of n bytes: a 1 MB single "word" costs the same per byte as a short one.
 *
 * Cache: pieces of up to CACHE_MAX_KEY bytes map to their ids in an open-addressing
 * table owned by the encoder (so the shared tokenizer stays read-only).  It grows to
 * CACHE_MAX_SLOTS and is then emptied when half full; the results never depend on it.
 */
#include <stdlib.h>
#include <string.h>

#include "tok_internal.h"

#define CACHE_MAX_KEY 48
#define CACHE_MIN_SLOTS 1024u
#define CACHE_MAX_SLOTS (1u << 16)

static int grow(void **p, size_t *cap, size_t need, size_t elem, v4_error *err)
{
    if (need <= *cap)
        return 0;
    size_t c = *cap ? *cap : 64;
    while (c < need)
        c *= 2;
    void *q = realloc(*p, c * elem);
    if (!q)
        return v4_err_set(err, V4_ERR_NOMEM, "tokenizer", "out of memory");
    *p = q;
    *cap = c;
    return 0;
}

static int push_ids(v4_tok_encoder *e, const int32_t *ids, size_t n)
{
    v4_ids *o = e->out;
    if (grow((void **)&o->v, &o->cap, o->n + n, sizeof *o->v, e->err))
        return -1;
    memcpy(o->v + o->n, ids, n * sizeof *ids);
    o->n += n;
    return 0;
}

/* ------------------------------------------------------------------ cache */

static void cache_clear(v4_tok_encoder *e)
{
    if (e->cache)
        memset(e->cache, 0, (e->cache_mask + 1) * sizeof *e->cache);
    e->cache_n = e->cache_bytes_n = e->cache_ids_n = 0;
}

static tok_cache_slot *cache_find(v4_tok_encoder *e, uint64_t h, const char *p, size_t n)
{
    for (size_t i = h & e->cache_mask;; i = (i + 1) & e->cache_mask) {
        tok_cache_slot *s = &e->cache[i];
        if (!s->key_len ||
            (s->hash == h && s->key_len == n && !memcmp(e->cache_bytes + s->key_off, p, n)))
            return s;
    }
}

/* Make room for one more entry: allocate, double, or empty the table. */
static int cache_reserve(v4_tok_encoder *e)
{
    size_t slots = e->cache ? e->cache_mask + 1 : 0;
    if (e->cache && e->cache_n + 1 <= slots / 2)
        return 0;
    if (slots >= CACHE_MAX_SLOTS) {
        cache_clear(e);
        return 0;
    }
    size_t ns = slots ? 2 * slots : CACHE_MIN_SLOTS;
    tok_cache_slot *c = calloc(ns, sizeof *c);
    if (!c)
        return v4_err_set(e->err, V4_ERR_NOMEM, "tokenizer", "out of memory");
    tok_cache_slot *old = e->cache;
    e->cache = c;
    e->cache_mask = ns - 1;
    for (size_t i = 0; i < slots; i++)
        if (old[i].key_len)
            *cache_find(e, old[i].hash, e->cache_bytes + old[i].key_off, old[i].key_len) = old[i];
    free(old);
    return 0;
}

static int cache_put(v4_tok_encoder *e, uint64_t h, const char *p, size_t n, const int32_t *ids,
                     size_t k)
{
    if (cache_reserve(e) ||
        grow((void **)&e->cache_bytes, &e->cache_bytes_cap, e->cache_bytes_n + n, 1, e->err) ||
        grow((void **)&e->cache_ids, &e->cache_ids_cap, e->cache_ids_n + k, sizeof *ids, e->err))
        return -1;
    tok_cache_slot *s = cache_find(e, h, p, n);
    memcpy(e->cache_bytes + e->cache_bytes_n, p, n);
    memcpy(e->cache_ids + e->cache_ids_n, ids, k * sizeof *ids);
    *s = (tok_cache_slot){h, (uint32_t)e->cache_bytes_n, (uint32_t)n, (uint32_t)e->cache_ids_n,
                          (uint32_t)k};
    e->cache_bytes_n += n;
    e->cache_ids_n += k;
    e->cache_n++;
    return 0;
}

/* ------------------------------------------------------------------- heap */

static void heap_push(v4_tok_encoder *e, uint64_t key)
{
    uint64_t *h = e->heap;
    size_t i = e->heap_n++;
    while (i) {
        size_t parent = (i - 1) / 2;
        if (h[parent] <= key)
            break;
        h[i] = h[parent];
        i = parent;
    }
    h[i] = key;
}

static uint64_t heap_pop(v4_tok_encoder *e)
{
    uint64_t *h = e->heap, top = h[0], last = h[--e->heap_n];
    size_t n = e->heap_n, i = 0;
    for (;;) {
        size_t c = 2 * i + 1;
        if (c >= n)
            break;
        if (c + 1 < n && h[c + 1] < h[c])
            c++;
        if (h[c] >= last)
            break;
        h[i] = h[c];
        i = c;
    }
    if (n)
        h[i] = last;
    return top;
}

static void push_pair(v4_tok_encoder *e, int32_t i, int32_t j)
{
    const tok_merge *m = tok_merge_get(e->t, e->sym[i], e->sym[j]);
    if (m)
        heap_push(e, ((uint64_t)m->rank << 32) | (uint32_t)i);
}

/* ------------------------------------------------------------------- BPE */

/* Merge the bytes of p[0..n) into e->sym / e->next; returns the first symbol. */
static int bpe_merge(v4_tok_encoder *e, const char *p, size_t n)
{
    if (n > INT32_MAX - 1)
        return v4_err_set(e->err, V4_ERR_RANGE, "tokenizer", "piece of %zu bytes is too long", n);
    if (n > e->sym_cap) {
        size_t c = e->sym_cap ? e->sym_cap : 64;
        while (c < n)
            c *= 2;
        int32_t **arrays[3] = {&e->sym, &e->next, &e->prev};
        for (int k = 0; k < 3; k++) {
            int32_t *a = realloc(*arrays[k], c * sizeof *a);
            if (!a)
                return v4_err_set(e->err, V4_ERR_NOMEM, "tokenizer", "out of memory");
            *arrays[k] = a;
        }
        e->sym_cap = c;
    }
    if (grow((void **)&e->heap, &e->heap_cap, 3 * n, sizeof *e->heap, e->err))
        return -1;
    const v4_tokenizer *t = e->t;
    int32_t *sym = e->sym, *next = e->next, *prev = e->prev;
    int32_t len = (int32_t)n;
    for (int32_t i = 0; i < len; i++) {
        sym[i] = t->byte_id[(uint8_t)p[i]];
        prev[i] = i - 1;
        next[i] = i + 1 < len ? i + 1 : -1;
    }
    e->heap_n = 0;
    for (int32_t i = 0; i + 1 < len; i++)
        push_pair(e, i, i + 1);
    while (e->heap_n) {
        uint64_t key = heap_pop(e);
        int32_t i = (int32_t)(uint32_t)key, j;
        if (sym[i] < 0 || (j = next[i]) < 0)
            continue;
        const tok_merge *m = tok_merge_get(t, sym[i], sym[j]);
        if (!m || m->rank != (uint32_t)(key >> 32))
            continue;
        sym[i] = m->result;
        sym[j] = -1;
        next[i] = next[j];
        if (next[j] >= 0)
            prev[next[j]] = i;
        if (prev[i] >= 0)
            push_pair(e, prev[i], i);
        if (next[i] >= 0)
            push_pair(e, i, next[i]);
    }
    return 0;
}

int tok_bpe_piece(v4_tok_encoder *e, const char *p, size_t n)
{
    const v4_tokenizer *t = e->t;
    if (n == 1)
        return push_ids(e, &t->byte_id[(uint8_t)p[0]], 1);
    uint64_t h = 0;
    if (n <= CACHE_MAX_KEY && e->cache) {
        h = tok_hash_bytes(p, n);
        const tok_cache_slot *s = cache_find(e, h, p, n);
        if (s->key_len)
            return push_ids(e, e->cache_ids + s->ids_off, s->ids_n);
    }
    if (t->ignore_merges) {
        int32_t id = tok_vocab_lookup(t, p, n);
        if (id >= 0)
            return push_ids(e, &id, 1);
    }
    if (bpe_merge(e, p, n))
        return -1;
    size_t start = e->out->n;
    for (int32_t i = 0; i >= 0; i = e->next[i])
        if (push_ids(e, &e->sym[i], 1))
            return -1;
    if (n > CACHE_MAX_KEY)
        return 0;
    if (!e->cache)
        h = tok_hash_bytes(p, n);
    return cache_put(e, h, p, n, e->out->v + start, e->out->n - start);
}

void tok_bpe_free(v4_tok_encoder *e)
{
    free(e->sym);
    free(e->next);
    free(e->prev);
    free(e->heap);
    free(e->cache);
    free(e->cache_bytes);
    free(e->cache_ids);
}
