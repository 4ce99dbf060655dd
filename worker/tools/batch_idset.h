/* batch_idset.h - a set of strings with a long value each (task ids, "line N" keys) for `v4fleet batch`:
 * which inputs already have an output line (resume) and which ids were already seen in
 * the input (duplicates).
 *
 * Design: open addressing with linear probing over FNV-1a hashes, grown at 1/2 load.
 * Ownership: the set copies every key it stores; v4_idset_free releases them.
 * Thread: one thread per set.
 */
#ifndef V4_BATCH_IDSET_H
#define V4_BATCH_IDSET_H

#include <stddef.h>

typedef struct v4_idset_slot {
    char *key;                      /* NULL: empty */
    long val;                       /* the caller's value (e.g. the line number) */
} v4_idset_slot;

typedef struct v4_idset {
    v4_idset_slot *slots;
    size_t cap, n;
} v4_idset;

/* Add key with val: 1 added, 0 was already there (val not changed), -1 out of memory. */
int v4_idset_add(v4_idset *s, const char *key, long val);
/* 1 and *val (may be NULL) when key is in the set, else 0. */
int v4_idset_get(const v4_idset *s, const char *key, long *val);
void v4_idset_free(v4_idset *s);

#endif
