/* mktok_train.c - byte-level BPE training for the synthetic tokenizer.
 *
 * Pre-tokens are collected with the target tokenizer's own pre-tokenizer
 * (v4_tok_encoder_pieces) into a table of distinct words with counts.  Training is
 * the usual incremental algorithm: global pair counts in a hash table, for each pair
 * the list of words it occurs in (may hold stale or repeated entries), and a max-heap
 * of (count, pair) with lazy deletion (a popped entry whose count is no longer
 * current is pushed again with the current count).  Merging a pair rewrites only the
 * words on its list, subtracting their pair counts before and adding them after.
 * Ties go to the lower (left, right) token pair, so the result is deterministic.  As
 * in HF's trainer, a merge whose result already exists reuses that token.
 *
 * When the corpus has no pair left and the vocabulary is still short, filler merges
 * join two printable ASCII tokens (in token order) whose concatenation is new, so a
 * vocabulary of any size up to the printable pairs' count can be filled.
 */
#include <stdlib.h>
#include <string.h>

#include "mktok_internal.h"
#include "tok_internal.h"

#define FILLER_MAX_BYTES 24

typedef struct word {
    uint32_t count, off, len, stamp;    /* off, len: current symbols in syms */
    uint32_t boff, blen;                /* the pre-token's bytes in wbytes */
} word;

typedef struct pair_slot {
    uint64_t key;       /* UINT64_MAX = free */
    int64_t count;
    int64_t before;     /* count before the current merge (valid when stamp = merge) */
    int32_t head;       /* word list, -1 none */
    uint32_t last_word; /* last word appended (dedupe) */
    uint32_t stamp;
} pair_slot;

typedef struct node {
    uint32_t word;
    int32_t next;
} node;

typedef struct hentry {
    int64_t count;
    uint64_t key;
} hentry;

typedef struct trainer {
    mktok_vocab *v;
    v4_error *err;
    int oom;
    /* words */
    word *w;
    size_t nw, wcap;
    int32_t *syms;
    size_t nsyms, syms_cap;
    int32_t *wtab;          /* bytes -> word (while collecting); -1 free */
    size_t wmask;
    char *wbytes;
    size_t wbytes_n, wbytes_cap;
    /* token bytes -> token (for merges whose result exists) */
    int32_t *ttab;
    size_t tmask;
    /* pairs */
    pair_slot *p;
    size_t pmask, np;
    node *nodes;
    size_t nn, ncap;
    hentry *heap;
    size_t nh, hcap;
    uint64_t *touched;      /* keys of the pairs the current merge changed */
    size_t nt, tcap;
} trainer;

static void *grow(trainer *T, void *p, size_t *cap, size_t need, size_t elem)
{
    if (need <= *cap)
        return p;
    size_t c = *cap ? *cap : 64;
    while (c < need)
        c *= 2;
    void *q = realloc(p, c * elem);
    if (!q) {
        T->oom = 1;
        return p;
    }
    *cap = c;
    return q;
}

/* ------------------------------------------------------------ vocabulary */

static int32_t ttab_find(const trainer *T, const char *p, size_t n, size_t *slot)
{
    const mktok_vocab *v = T->v;
    for (size_t i = tok_hash_bytes(p, n) & T->tmask;; i = (i + 1) & T->tmask) {
        int32_t t = T->ttab[i];
        if (t < 0 || (v->tok[t].len == n && !memcmp(v->bytes + v->tok[t].off, p, n))) {
            *slot = i;
            return t;
        }
    }
}

/* Token with bytes p[0..n): existing, or a new one. */
static int32_t token_for(trainer *T, const char *p, size_t n)
{
    mktok_vocab *v = T->v;
    size_t slot;
    int32_t t = ttab_find(T, p, n, &slot);
    if (t >= 0)
        return t;
    v->bytes = grow(T, v->bytes, &v->bytes_cap, v->bytes_n + n, 1);
    v->tok = grow(T, v->tok, &v->cap, v->n + 1, sizeof *v->tok);
    if (T->oom)
        return -1;
    memcpy(v->bytes + v->bytes_n, p, n);
    v->tok[v->n] = (mktok_tok){(uint32_t)v->bytes_n, (uint32_t)n};
    v->bytes_n += n;
    T->ttab[slot] = (int32_t)v->n;
    return (int32_t)v->n++;
}

static int add_merge(trainer *T, int32_t a, int32_t b, int32_t *result)
{
    mktok_vocab *v = T->v;
    char buf[4096], *cat = buf;
    size_t la = v->tok[a].len, n = la + v->tok[b].len;
    if (n > sizeof buf && !(cat = malloc(n)))
        return T->oom = 1, -1;
    memcpy(cat, v->bytes + v->tok[a].off, la);
    memcpy(cat + la, v->bytes + v->tok[b].off, v->tok[b].len);
    *result = token_for(T, cat, n);
    if (cat != buf)
        free(cat);
    v->merges = grow(T, v->merges, &v->merges_cap, v->n_merges + 1, sizeof *v->merges);
    if (T->oom || *result < 0)
        return -1;
    v->merges[v->n_merges][0] = a;
    v->merges[v->n_merges][1] = b;
    v->n_merges++;
    return 0;
}

/* ------------------------------------------------------------------ words */

static int collect(v4_tok_encoder *e, const char *p, size_t n)
{
    trainer *T = e->piece_ctx;
    size_t i = tok_hash_bytes(p, n) & T->wmask;
    for (;; i = (i + 1) & T->wmask) {
        int32_t w = T->wtab[i];
        if (w < 0)
            break;
        if (T->w[w].blen == n && !memcmp(T->wbytes + T->w[w].boff, p, n)) {
            T->w[w].count++;
            return 0;
        }
    }
    if (2 * (T->nw + 1) > T->wmask + 1) {   /* grow the table and re-insert */
        size_t cap = 2 * (T->wmask + 1);
        int32_t *tab = malloc(cap * sizeof *tab);
        if (!tab)
            return v4_err_set(T->err, V4_ERR_NOMEM, "mktokenizer", "out of memory");
        memset(tab, 0xff, cap * sizeof *tab);
        for (size_t w = 0; w < T->nw; w++) {
            size_t j = tok_hash_bytes(T->wbytes + T->w[w].boff, T->w[w].blen) & (cap - 1);
            while (tab[j] >= 0)
                j = (j + 1) & (cap - 1);
            tab[j] = (int32_t)w;
        }
        free(T->wtab);
        T->wtab = tab;
        T->wmask = cap - 1;
        for (i = tok_hash_bytes(p, n) & T->wmask; T->wtab[i] >= 0; i = (i + 1) & T->wmask)
            ;
    }
    T->w = grow(T, T->w, &T->wcap, T->nw + 1, sizeof *T->w);
    T->wbytes = grow(T, T->wbytes, &T->wbytes_cap, T->wbytes_n + n, 1);
    T->syms = grow(T, T->syms, &T->syms_cap, T->nsyms + n, sizeof *T->syms);
    if (T->oom)
        return v4_err_set(T->err, V4_ERR_NOMEM, "mktokenizer", "out of memory");
    memcpy(T->wbytes + T->wbytes_n, p, n);
    for (size_t k = 0; k < n; k++)
        T->syms[T->nsyms + k] = (uint8_t)p[k];
    T->w[T->nw] = (word){1, (uint32_t)T->nsyms, (uint32_t)n, 0, (uint32_t)T->wbytes_n, (uint32_t)n};
    T->wbytes_n += n;
    T->nsyms += n;
    T->wtab[i] = (int32_t)T->nw++;
    return 0;
}

/* ------------------------------------------------------------------ pairs */

static pair_slot *pair_get(trainer *T, uint64_t key)
{
    for (size_t i = tok_merge_hash(key) & T->pmask;; i = (i + 1) & T->pmask) {
        pair_slot *s = &T->p[i];
        if (s->key == key)
            return s;
        if (s->key == UINT64_MAX) {
            if (2 * (T->np + 1) > T->pmask + 1) {
                size_t cap = 2 * (T->pmask + 1);
                pair_slot *np = malloc(cap * sizeof *np);
                if (!np) {
                    T->oom = 1;
                    return NULL;
                }
                for (size_t j = 0; j < cap; j++)
                    np[j].key = UINT64_MAX;
                for (size_t j = 0; j <= T->pmask; j++) {
                    if (T->p[j].key == UINT64_MAX)
                        continue;
                    size_t k = tok_merge_hash(T->p[j].key) & (cap - 1);
                    while (np[k].key != UINT64_MAX)
                        k = (k + 1) & (cap - 1);
                    np[k] = T->p[j];
                }
                free(T->p);
                T->p = np;
                T->pmask = cap - 1;
                return pair_get(T, key);
            }
            *s = (pair_slot){key, 0, 0, -1, UINT32_MAX, 0};
            T->np++;
            return s;
        }
    }
}

static int heap_less(const hentry *a, const hentry *b)   /* a below b in the max-heap */
{
    return a->count != b->count ? a->count < b->count : a->key > b->key;
}

static void heap_push(trainer *T, int64_t count, uint64_t key)
{
    T->heap = grow(T, T->heap, &T->hcap, T->nh + 1, sizeof *T->heap);
    if (T->oom)
        return;
    hentry e = {count, key};
    size_t i = T->nh++;
    while (i && heap_less(&T->heap[(i - 1) / 2], &e)) {
        T->heap[i] = T->heap[(i - 1) / 2];
        i = (i - 1) / 2;
    }
    T->heap[i] = e;
}

static hentry heap_pop(trainer *T)
{
    hentry top = T->heap[0], last = T->heap[--T->nh];
    size_t i = 0, n = T->nh;
    for (;;) {
        size_t c = 2 * i + 1;
        if (c >= n)
            break;
        if (c + 1 < n && heap_less(&T->heap[c], &T->heap[c + 1]))
            c++;
        if (!heap_less(&last, &T->heap[c]))
            break;
        T->heap[i] = T->heap[c];
        i = c;
    }
    if (n)
        T->heap[i] = last;
    return top;
}

/* Add (sign +1) or remove (-1) the pairs of word w; with stamp, remember touched pairs. */
static void word_pairs(trainer *T, uint32_t w, int sign, uint32_t stamp)
{
    const word *wd = &T->w[w];
    const int32_t *s = T->syms + wd->off;
    for (uint32_t i = 0; i + 1 < wd->len; i++) {
        uint64_t key = ((uint64_t)(uint32_t)s[i] << 32) | (uint32_t)s[i + 1];
        pair_slot *p = pair_get(T, key);
        if (!p)
            return;
        if (stamp && p->stamp != stamp) {
            p->stamp = stamp;
            p->before = p->count;
            T->touched = grow(T, T->touched, &T->tcap, T->nt + 1, sizeof *T->touched);
            if (T->oom)
                return;
            T->touched[T->nt++] = key;
        }
        p->count += sign * (int64_t)wd->count;
        if (sign > 0 && p->last_word != w) {
            T->nodes = grow(T, T->nodes, &T->ncap, T->nn + 1, sizeof *T->nodes);
            if (T->oom)
                return;
            T->nodes[T->nn] = (node){w, p->head};
            p->head = (int32_t)T->nn++;
            p->last_word = w;
        }
    }
}

/* Merge pair (a, b) into token z everywhere. */
static void apply_merge(trainer *T, uint64_t key, int32_t z, uint32_t stamp)
{
    int32_t a = (int32_t)(key >> 32), b = (int32_t)(uint32_t)key;
    pair_slot *p = pair_get(T, key);
    int32_t head = p->head;
    p->head = -1;
    p->last_word = UINT32_MAX;
    T->nt = 0;
    for (int32_t nd = head; nd >= 0 && !T->oom; nd = T->nodes[nd].next) {
        uint32_t w = T->nodes[nd].word;
        if (T->w[w].stamp == stamp)
            continue;
        T->w[w].stamp = stamp;
        word_pairs(T, w, -1, stamp);
        int32_t *s = T->syms + T->w[w].off;
        uint32_t len = T->w[w].len, o = 0;
        for (uint32_t i = 0; i < len;) {
            if (i + 1 < len && s[i] == a && s[i + 1] == b) {
                s[o++] = z;
                i += 2;
            } else {
                s[o++] = s[i++];
            }
        }
        T->w[w].len = o;
        word_pairs(T, w, +1, stamp);
    }
    for (size_t i = 0; i < T->nt; i++) {
        pair_slot *q = pair_get(T, T->touched[i]);
        if (q && q->count > q->before)
            heap_push(T, q->count, q->key);
    }
}

static int printable(const mktok_vocab *v, int32_t t)
{
    for (uint32_t i = 0; i < v->tok[t].len; i++) {
        unsigned char c = (unsigned char)v->bytes[v->tok[t].off + i];
        if (c < 0x20 || c > 0x7E)
            return 0;
    }
    return 1;
}

/* Deterministic filler merges until the vocabulary has n_tokens tokens. */
static void fill(trainer *T, size_t n_tokens)
{
    mktok_vocab *v = T->v;
    size_t base = v->n;
    for (size_t x = 0; x < base && v->n < n_tokens && !T->oom; x++) {
        if (!printable(v, (int32_t)x))
            continue;
        for (size_t y = 0; y < base && v->n < n_tokens && !T->oom; y++) {
            size_t lx = v->tok[x].len, ly = v->tok[y].len;
            if (!printable(v, (int32_t)y) || lx + ly > FILLER_MAX_BYTES)
                continue;
            char cat[FILLER_MAX_BYTES];
            memcpy(cat, v->bytes + v->tok[x].off, lx);
            memcpy(cat + lx, v->bytes + v->tok[y].off, ly);
            size_t slot;
            if (ttab_find(T, cat, lx + ly, &slot) >= 0)
                continue;
            int32_t z;
            add_merge(T, (int32_t)x, (int32_t)y, &z);
        }
    }
}

static void trainer_free(trainer *T)
{
    free(T->w);
    free(T->syms);
    free(T->wtab);
    free(T->wbytes);
    free(T->ttab);
    free(T->p);
    free(T->nodes);
    free(T->heap);
    free(T->touched);
}

int mktok_train(const v4_tokenizer *pretok, const char *text, size_t len, size_t n_tokens,
                mktok_vocab *v, v4_error *err)
{
    memset(v, 0, sizeof *v);
    trainer T = {.v = v, .err = err};
    size_t tcap = 16;
    while (tcap < 2 * n_tokens + 512)
        tcap *= 2;
    T.ttab = malloc(tcap * sizeof *T.ttab);
    T.tmask = tcap - 1;
    T.wtab = malloc(4096 * sizeof *T.wtab);
    T.wmask = 4095;
    T.p = malloc(4096 * sizeof *T.p);
    T.pmask = 4095;
    int rc = -1;
    if (!T.ttab || !T.wtab || !T.p) {
        v4_err_set(err, V4_ERR_NOMEM, "mktokenizer", "out of memory");
        goto out;
    }
    memset(T.ttab, 0xff, tcap * sizeof *T.ttab);
    memset(T.wtab, 0xff, 4096 * sizeof *T.wtab);
    for (size_t i = 0; i <= T.pmask; i++)
        T.p[i].key = UINT64_MAX;
    for (int b = 0; b < 256; b++) {
        char c = (char)b;
        token_for(&T, &c, 1);
    }
    /* distinct pre-tokens with counts */
    v4_tok_encoder *e = v4_tok_encoder_new(pretok, err);
    if (!e)
        goto out;
    rc = v4_tok_encoder_pieces(e, text, len, collect, &T, NULL, err);
    v4_tok_encoder_free(e);
    if (rc)
        goto out;
    rc = -1;
    for (uint32_t w = 0; w < T.nw; w++)
        word_pairs(&T, w, +1, 0);
    for (size_t i = 0; i <= T.pmask; i++)
        if (T.p[i].key != UINT64_MAX && T.p[i].count > 0)
            heap_push(&T, T.p[i].count, T.p[i].key);
    /* merges, most frequent first */
    uint32_t stamp = 0;
    while (v->n < n_tokens && T.nh && !T.oom) {
        hentry top = heap_pop(&T);
        pair_slot *p = pair_get(&T, top.key);
        if (!p || p->count <= 0)
            continue;
        if (p->count != top.count) {
            heap_push(&T, p->count, top.key);
            continue;
        }
        int32_t z;
        if (add_merge(&T, (int32_t)(top.key >> 32), (int32_t)(uint32_t)top.key, &z))
            break;
        apply_merge(&T, top.key, z, ++stamp);
    }
    if (v->n < n_tokens)
        fill(&T, n_tokens);
    if (T.oom)
        v4_err_set(err, V4_ERR_NOMEM, "mktokenizer", "out of memory");
    else if (v->n < n_tokens)
        v4_err_set(err, V4_ERR_RANGE, "mktokenizer", "cannot build %zu tokens (got %zu)", n_tokens, v->n);
    else
        rc = 0;
out:
    trainer_free(&T);
    if (rc)
        mktok_vocab_free(v);
    return rc;
}

void mktok_vocab_free(mktok_vocab *v)
{
    free(v->bytes);
    free(v->tok);
    free(v->merges);
    memset(v, 0, sizeof *v);
}
