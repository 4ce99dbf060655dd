/* cancel_set.c - the bounded, expiring set of cancelled task ids (see cancel_set.h).
 * Thread: the owner's (not locked). */
#include "cancel_set.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

typedef struct entry {
    uint64_t hash;
    double t;                   /* added or last refreshed */
    char *id;                   /* owned, NUL-terminated */
} entry;

struct v4q_cancel_set {
    entry *ring;
    int cap, head, n;           /* the oldest at head, n live entries after it */
    double ttl_s;
};

static uint64_t fnv1a(const char *s, size_t len)
{
    uint64_t h = 1469598103934665603ull;
    for (size_t i = 0; i < len; i++) {
        h ^= (unsigned char)s[i];
        h *= 1099511628211ull;
    }
    return h;
}

v4q_cancel_set *v4q_cancel_set_new(int cap, double ttl_s)
{
    v4q_cancel_set *c = calloc(1, sizeof *c);
    if (!c || cap < 1 || !(c->ring = calloc((size_t)cap, sizeof *c->ring))) {
        free(c);
        return NULL;
    }
    c->cap = cap;
    c->ttl_s = ttl_s;
    return c;
}

void v4q_cancel_set_free(v4q_cancel_set *c)
{
    if (!c)
        return;
    for (int i = 0; i < c->n; i++)
        free(c->ring[(c->head + i) % c->cap].id);
    free(c->ring);
    free(c);
}

static void drop_oldest(v4q_cancel_set *c)
{
    free(c->ring[c->head].id);
    c->ring[c->head].id = NULL;
    c->head = (c->head + 1) % c->cap;
    c->n--;
}

/* Entries are in the order of their time (a refresh moves the entry to the end), so
 * the expired ones are at the head. */
static void expire(v4q_cancel_set *c, double now)
{
    while (c->n && now - c->ring[c->head].t >= c->ttl_s)
        drop_oldest(c);
}

static int find(const v4q_cancel_set *c, const char *id, size_t len, uint64_t h)
{
    for (int i = 0; i < c->n; i++) {
        const entry *e = &c->ring[(c->head + i) % c->cap];
        if (e->hash == h && strlen(e->id) == len && !memcmp(e->id, id, len))
            return i;
    }
    return -1;
}

int v4q_cancel_set_add(v4q_cancel_set *c, const char *id, size_t len, double now)
{
    expire(c, now);
    const uint64_t h = fnv1a(id, len);
    const int at = find(c, id, len, h);
    char *copy = NULL;
    if (at >= 0) {   /* refresh: take it out, keep its copy, append it again below */
        const int slot = (c->head + at) % c->cap;
        copy = c->ring[slot].id;
        for (int i = at; i + 1 < c->n; i++)
            c->ring[(c->head + i) % c->cap] = c->ring[(c->head + i + 1) % c->cap];
        c->n--;
    } else {
        if (!(copy = malloc(len + 1)))
            return -1;
        memcpy(copy, id, len);
        copy[len] = 0;
        if (c->n == c->cap)
            drop_oldest(c);
    }
    c->ring[(c->head + c->n) % c->cap] = (entry){h, now, copy};
    c->n++;
    return at < 0;
}

int v4q_cancel_set_has(v4q_cancel_set *c, const char *id, double now)
{
    expire(c, now);
    const size_t len = strlen(id);
    return find(c, id, len, fnv1a(id, len)) >= 0;
}

int v4q_cancel_set_count(v4q_cancel_set *c, double now)
{
    expire(c, now);
    return c->n;
}
