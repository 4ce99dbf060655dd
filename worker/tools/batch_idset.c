/* batch_idset.c - string set for the batch command (see batch_idset.h).
 * Thread: one thread per set. */
#include "batch_idset.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

static uint64_t hash(const char *s)
{
    uint64_t h = 1469598103934665603ull;
    for (; *s; s++)
        h = (h ^ (unsigned char)*s) * 1099511628211ull;
    return h;
}

static size_t find(const v4_idset_slot *slots, size_t cap, const char *key)
{
    size_t i = (size_t)hash(key) & (cap - 1);
    while (slots[i].key && strcmp(slots[i].key, key))
        i = (i + 1) & (cap - 1);
    return i;
}

static int grow(v4_idset *s)
{
    size_t cap = s->cap ? s->cap * 2 : 64;
    v4_idset_slot *slots = calloc(cap, sizeof *slots);
    if (!slots)
        return -1;
    for (size_t i = 0; i < s->cap; i++)
        if (s->slots[i].key)
            slots[find(slots, cap, s->slots[i].key)] = s->slots[i];
    free(s->slots);
    s->slots = slots;
    s->cap = cap;
    return 0;
}

int v4_idset_add(v4_idset *s, const char *key, long val)
{
    if ((s->n + 1) * 2 > s->cap && grow(s))
        return -1;
    size_t i = find(s->slots, s->cap, key);
    if (s->slots[i].key)
        return 0;
    if (!(s->slots[i].key = strdup(key)))
        return -1;
    s->slots[i].val = val;
    s->n++;
    return 1;
}

int v4_idset_get(const v4_idset *s, const char *key, long *val)
{
    if (!s->cap)
        return 0;
    const v4_idset_slot *sl = &s->slots[find(s->slots, s->cap, key)];
    if (!sl->key)
        return 0;
    if (val)
        *val = sl->val;
    return 1;
}

void v4_idset_free(v4_idset *s)
{
    for (size_t i = 0; i < s->cap; i++)
        free(s->slots[i].key);
    free(s->slots);
    memset(s, 0, sizeof *s);
}
