/* prefix_cache.h - a worker's cache of prompt prefixes: a prompt that starts with blocks
 * another prompt prefilled resumes from their state instead of prefilling them again
 * (docs/prefix-cache.md).
 *
 * Design: a prompt's token ids (after the chat encoding) are cut into blocks of B
 * positions (B a multiple of every compression ratio, kernels/v4/snapshot.h; default
 * V4PC_BLOCK_DEFAULT).  Block k of a prompt is keyed by the chain hash of blocks 0..k
 * (XXH3-64 of its tokens seeded with the parent's hash) and stored as a node of a tree:
 * its parent (block k-1 of the same prefix), its B token ids (compared on every lookup:
 * a hash collision is a miss, never a wrong answer) and its record (the block's
 * append-only entries and the state at its end).  Prompts that share k blocks share
 * those k nodes, records included.  Lookup walks the chain from the root and returns the
 * longest cached prefix (at most a given limit: the runner keeps the prompt's last
 * position to be forwarded, it needs its logits); restoring copies the chain's records
 * into the task's fresh sequence (v4_snap_restore).  Inserts happen while a prompt is
 * prefilled: at each block end inside the prompt the runner hands the sequence over and
 * the block's record is saved (when its parent chain is cached: blocks are inserted in
 * order, and a chain whose middle was evicted is not extended).
 * Memory: every node's bytes (record, tokens, node) count against a byte budget; an
 * insert that would pass it evicts leaves (nodes without children: a prefix is dropped
 * from its end) by the policy - slru (default: leaves no lookup has restored yet go
 * first, oldest first, then the least recently used of the others: a prompt's unique
 * tail never pushes out a prefix that is being reused), lru (least recently used first:
 * a lookup that used a node, or an insert, touches it) or fifo (oldest insert first) -
 * and is skipped when no leaf can go (the only ones left are the chain it extends).  So
 * the bytes held never pass the budget.  bench/bench_prefix_policy measures the
 * policies (docs/prefix-cache.md).
 * The index also runs without a model (v4pc_new_raw: records of a given size from the
 * caller), for tests and the policy benchmark.
 *
 * Ownership: the cache owns its nodes and records; sequences and id arrays are
 * borrowed for the call.  Thread: every call takes the cache's lock, so the figures
 * (v4pc_figs) may be read from any thread; the sequences passed in belong to the
 * caller's thread.
 */
#ifndef V4_PREFIX_CACHE_H
#define V4_PREFIX_CACHE_H

#include <stddef.h>
#include <stdint.h>

#include "config/error.h"
#include "kernels/v4/model.h"

#define V4PC_BLOCK_DEFAULT 256                  /* positions per block (rounded up to the ratios' lcm) */
#define V4PC_BUDGET_DEFAULT (1024ll << 20)      /* 1 GiB of host memory */

typedef enum v4pc_policy { V4PC_SLRU = 0, V4PC_LRU, V4PC_FIFO } v4pc_policy;

typedef struct v4pc_opts {
    size_t budget_bytes;        /* 0: V4PC_BUDGET_DEFAULT */
    int block;                  /* 0: V4PC_BLOCK_DEFAULT; rounded up to a multiple of every ratio */
    v4pc_policy policy;         /* 0: slru */
} v4pc_opts;

/* Cumulative figures (lookups = hits + misses; a hit restored >= 1 block). */
typedef struct v4pc_figs {
    unsigned long long lookups, hits, misses;
    unsigned long long tokens_saved;    /* positions restored instead of prefilled */
    unsigned long long inserts, evictions;
    unsigned long long insert_skips;    /* inserts not done: no room, or the parent chain gone */
    unsigned long long blocks, bytes, budget;   /* held now, and the budget */
    int block;
} v4pc_figs;

typedef struct v4pc v4pc;

/* A cache for sequences of a model of config cfg (borrowed: must outlive the cache).
 * NULL with err (V4_ERR_NOMEM; V4_ERR_INVALID: a budget below one block's bytes). */
v4pc *v4pc_new(const v4_config *cfg, const v4pc_opts *o, v4_error *err);
/* The index alone: records of rec_bytes bytes given by the caller (v4pc_insert_raw),
 * block as given (>= 1, no rounding). */
v4pc *v4pc_new_raw(int block, size_t rec_bytes, const v4pc_opts *o, v4_error *err);
void v4pc_free(v4pc *pc);
/* The block length in positions. */
int v4pc_block(const v4pc *pc);
/* The bytes one cached block costs (record, tokens, node): budget / this = blocks held. */
size_t v4pc_block_cost(const v4pc *pc);
/* Lookup of ids[0..n): the longest cached prefix of whole blocks of at most limit
 * positions, restored into s (its previous state is dropped; capacity >= the prefix).
 * Returns its length P (a multiple of the block; 0: a miss, s reset to position 0), or
 * -1 with err when the restore failed (s reset; the caller may prefill from 0).
 * Counts a lookup (hit or miss) and P tokens saved. */
int v4pc_restore(v4pc *pc, v4_seq *s, const int32_t *ids, int n, int limit, v4_error *err);
/* s has prefilled ids[0..p) and is at position p, a multiple of the block: cache the
 * block ending at p.  1 inserted, 0 already cached (touched) or skipped (figures say
 * why), -1 with err (V4_ERR_NOMEM, or a save that failed). */
int v4pc_insert(v4pc *pc, const v4_seq *s, const int32_t *ids, int p, v4_error *err);
/* The raw index's lookup and insert: the longest cached prefix's length, no restore;
 * insert with the record rec (rec_bytes, copied).  Same counting. */
int v4pc_lookup_raw(v4pc *pc, const int32_t *ids, int n, int limit);
int v4pc_insert_raw(v4pc *pc, const int32_t *ids, int p, const void *rec, v4_error *err);
void v4pc_figs_get(v4pc *pc, v4pc_figs *f);
/* "lru" | "slru" | "fifo" -> the policy; 0, or -1 when unknown. */
int v4pc_policy_parse(const char *s, v4pc_policy *p);

#endif
