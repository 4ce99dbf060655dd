/* gr_cache.c - compiled constraints kept by their text in a byte-bounded LRU, so ten
 * thousand tasks under one schema compile it once and share its lexer and mask caches.
 * A constraint's size grows as its caches fill; it is measured again on every hit and the
 * least recently used entries leave until the total is under the budget (an entry in use
 * stays alive through its references).  One mutex; compiles happen outside it.
 */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "worker/grammar/grammar.h"

typedef struct entry {
    struct entry *prev, *next;   /* LRU list: head = most recent */
    v4g_constraint *c;
    char *key;
    size_t klen, bytes;
} entry;

struct v4g_cache {
    pthread_mutex_t mu;
    entry *head, *tail;
    size_t max_bytes, bytes, n;
    uint64_t hits, misses;
};

v4g_cache *v4g_cache_new(size_t max_bytes)
{
    v4g_cache *c = calloc(1, sizeof *c);
    if (!c)
        return NULL;
    pthread_mutex_init(&c->mu, NULL);
    c->max_bytes = max_bytes;
    return c;
}

static void unlink_e(v4g_cache *c, entry *e)
{
    if (e->prev)
        e->prev->next = e->next;
    else
        c->head = e->next;
    if (e->next)
        e->next->prev = e->prev;
    else
        c->tail = e->prev;
    e->prev = e->next = NULL;
}

static void push_front(v4g_cache *c, entry *e)
{
    e->next = c->head;
    e->prev = NULL;
    if (c->head)
        c->head->prev = e;
    c->head = e;
    if (!c->tail)
        c->tail = e;
}

static void drop(v4g_cache *c, entry *e)
{
    unlink_e(c, e);
    c->bytes -= e->bytes;
    c->n--;
    v4g_constraint_unref(e->c);
    free(e->key);
    free(e);
}

void v4g_cache_free(v4g_cache *c)
{
    if (!c)
        return;
    while (c->head)
        drop(c, c->head);
    pthread_mutex_destroy(&c->mu);
    free(c);
}

static char *make_key(v4g_kind kind, const char *text, size_t len, const v4g_opts *o, size_t *klen)
{
    char *k = malloc(len + 16);
    if (!k)
        return NULL;
    k[0] = (char)('0' + (int)kind);
    k[1] = o && o->compact ? 'c' : 'f';
    k[2] = (char)('0' + (o && o->ws_max > 0 ? o->ws_max : 8) % 64);
    memcpy(k + 3, text, len);
    *klen = len + 3;
    return k;
}

static void trim(v4g_cache *c)
{
    while (c->bytes > c->max_bytes && c->tail && c->tail != c->head)
        drop(c, c->tail);
}

v4g_constraint *v4g_cache_get(v4g_cache *c, v4g_kind kind, const char *text, size_t len, const v4g_opts *o, int *hit,
                              v4_error *err)
{
    size_t klen;
    char *key = make_key(kind, text ? text : "", text ? len : 0, o, &klen);
    if (hit)
        *hit = 0;
    if (!key) {
        v4_err_set(err, V4_ERR_NOMEM, "grammar", "out of memory");
        return NULL;
    }
    pthread_mutex_lock(&c->mu);
    for (entry *e = c->head; e; e = e->next) {
        if (e->klen == klen && !memcmp(e->key, key, klen)) {
            unlink_e(c, e);
            push_front(c, e);
            size_t b = v4g_constraint_bytes(e->c);   /* its caches may have grown */
            c->bytes += b - e->bytes;
            e->bytes = b;
            c->hits++;
            v4g_constraint *r = v4g_constraint_ref(e->c);
            trim(c);
            pthread_mutex_unlock(&c->mu);
            free(key);
            if (hit)
                *hit = 1;
            return r;
        }
    }
    c->misses++;
    pthread_mutex_unlock(&c->mu);
    v4g_constraint *k = v4g_compile(kind, text ? text : "", text ? len : 0, o, err);
    if (!k) {
        free(key);
        return NULL;
    }
    entry *e = calloc(1, sizeof *e);
    if (!e) {   /* not kept: still usable */
        free(key);
        return k;
    }
    e->c = v4g_constraint_ref(k);
    e->key = key;
    e->klen = klen;
    e->bytes = v4g_constraint_bytes(k) + klen + sizeof *e;
    pthread_mutex_lock(&c->mu);
    push_front(c, e);
    c->bytes += e->bytes;
    c->n++;
    trim(c);
    pthread_mutex_unlock(&c->mu);
    return k;
}

void v4g_cache_stats(v4g_cache *c, v4g_cache_figs *f)
{
    pthread_mutex_lock(&c->mu);
    f->bytes = c->bytes;
    f->entries = c->n;
    f->hits = c->hits;
    f->misses = c->misses;
    pthread_mutex_unlock(&c->mu);
}
