/* xpolicy.h - eviction policies of the expert cache over dense integer keys
 * (key = layer * n_experts + expert), with a fixed capacity in slots.
 *
 * The policy also hands out the slots: every resident key owns one slot index in
 * [0, capacity), which the cache uses to find the key's block in its arena.
 *
 * Policies (the exact rules; tests/test_xpolicy.c checks them on hand traces):
 *  - LRU: one recency list.  A touch (hit) or insert makes the key most recent.
 *    Victim = the least recent unpinned key.
 *  - SLRU: two segments, probation and protected (protected capacity: capacity -
 *    max(1, capacity / 5), or the value given in the params; 0 = never promote).  An
 *    insert enters probation as its most recent key.  A touch of a probation key
 *    promotes it to the most recent place of protected; if protected then holds more
 *    than its capacity, its least recent unpinned key is demoted to the most recent
 *    place of probation.  A touch of a protected key makes it most recent there.
 *    Victim = the least recent unpinned probation key; if probation has none, the
 *    least recent unpinned protected key.
 *  - LFRU (frequency-weighted LRU): every key (resident or not) has an access count;
 *    a touch or an insert adds 1 (saturating).  Every `lfru_age_period` accesses
 *    (default: 16 x n_keys, so the aging costs O(1) amortized; 16 was the best of
 *    1/4/16/64 on tiny-model traces with `v4fleet cachesim --lfru-age`) all counts
 *    are halved (integer division), so old popularity fades.  Victim = the unpinned resident key
 *    with the lowest count; ties go to the least recent (smallest touch/unpin time).
 *    A min-heap over (count, time) of the unpinned resident keys: O(log n) per op.
 *  - NEXT (predicted next use; the default of the host cache and of the GPU slot
 *    pool): made for the engine's access order, the layers of a model visited in a
 *    cycle (0, 1, ..., L-1, 0, ...), one group of a layer's experts per step.  Keys
 *    are layer-major (n_layers from the params; key / (n_keys / n_layers) = layer).
 *    Counts as in LFRU (+1 per touch or insert, halved every lfru_age_period
 *    accesses), plus a visit count per layer (+1 when an
 *    access's layer differs from the previous access's layer; halved with the counts).
 *    The current layer is the layer of the latest access.  A resident key k of layer l
 *    with count c is expected to be needed again after
 *        E(k) = d(l) + L * (V(l) / c - 1)        (+infinity for c = 0)
 *    layer visits, d(l) = (l - current + L) mod L, or L for the current layer itself
 *    (its unpinned keys were not in the current step), V(l) = l's visit count, i.e.
 *    the next visit of its layer plus the expected further cycles if the key is used at
 *    a visit with probability c / V(l) (E at least d(l)).  Victim = the unpinned
 *    resident key with the largest E; ties go to the larger d, then the lower count, then
 *    the least recent.  Per layer a min-heap over (count, time) of its unpinned resident
 *    keys: only the layers' roots are candidates (within a layer, d and V are common),
 *    so a victim costs O(L + log n).  With many rows per step (every expert of a layer
 *    used at most visits) it evicts from the layer that is needed last, as Belady's
 *    MIN does on a cyclic scan, where LRU evicts exactly the next ones needed; with one
 *    row per step it is LFU with the layers' counts made comparable.
 * Pinning: pin/unpin nest (a count per key).  A pinned key is never a victim: it
 * leaves the recency structure while pinned, and when its last pin is dropped it
 * re-enters it as the most recent key of its segment (LRU/SLRU), resp. with the
 * unpin time as its time (LFRU): a key's use lasts until it is released.  Insert
 * when every resident key is pinned and no slot is free = error V4_ERR_RANGE.
 * Remove drops a key (quarantine, invalidation) and frees its slot; its LFRU count
 * is kept.  Removing a pinned key is refused.
 * Costs: O(1) per op for LRU/SLRU, O(log capacity) for LFRU; every array is
 * allocated at create (capacity and n_keys sized), nothing is allocated per op.
 *
 * Users: the host expert cache (cache/expert_cache.c), the GPU slot pool
 * (kernels/cuda/slot_pool.c) and `v4fleet cachesim` (worker/tools/cachesim_replay.c).
 * Ownership: the creator frees with v4_xpolicy_free.
 * Thread: none - a pure single-threaded data structure; callers (the cache) lock.
 */
#ifndef V4_XPOLICY_H
#define V4_XPOLICY_H

#include <stdint.h>

#include "../config/error.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum v4_xpolicy_kind {
    V4_XPOL_LRU = 0,
    V4_XPOL_SLRU,
    V4_XPOL_LFRU,
    V4_XPOL_NEXT,
    V4_XPOL_COUNT
} v4_xpolicy_kind;

typedef struct v4_xpolicy_params {
    int slru_protected;         /* SLRU protected capacity; -1 = default (see above) */
    int64_t lfru_age_period;    /* LFRU/NEXT halving period in accesses; 0 = 16 x n_keys */
    int n_layers;               /* NEXT: layers (n_keys a multiple of it); 0 = 1 layer */
} v4_xpolicy_params;

typedef struct v4_xpolicy v4_xpolicy;

/* capacity >= 1 slots, keys in [0, n_keys).  params may be NULL (defaults). */
v4_xpolicy *v4_xpolicy_create(v4_xpolicy_kind kind, int capacity, int n_keys,
                              const v4_xpolicy_params *params, v4_error *err);
void v4_xpolicy_free(v4_xpolicy *p);

/* "lru" | "slru" | "lfru" | "next"; parse returns 0 or -1 (unknown name). */
const char *v4_xpolicy_name(v4_xpolicy_kind kind);
int v4_xpolicy_parse(const char *name, v4_xpolicy_kind *kind);

/* Slot of key if resident, else -1; no side effect. */
int v4_xpolicy_lookup(const v4_xpolicy *p, int key);
/* A hit: update recency/frequency; returns the slot, or -1 if key is not resident. */
int v4_xpolicy_touch(v4_xpolicy *p, int key);
/* A miss: make key resident (unpinned, most recent).  Returns its slot; *victim = the
 * evicted key or -1 (a free slot was used).  Fails (-1, err V4_ERR_RANGE) when every
 * slot is held by a pinned key, (-1, V4_ERR_INVALID) when key is already resident or
 * out of range. */
int v4_xpolicy_insert(v4_xpolicy *p, int key, int *victim, v4_error *err);
/* Pin a resident key (nests).  Returns the new pin count, -1 if not resident. */
int v4_xpolicy_pin(v4_xpolicy *p, int key);
/* Drop one pin.  Returns the remaining pin count, -1 if not resident or not pinned. */
int v4_xpolicy_unpin(v4_xpolicy *p, int key);
/* Pins held on a resident key (0 if unpinned), -1 if not resident. */
int v4_xpolicy_pins(const v4_xpolicy *p, int key);
/* Drop a resident, unpinned key.  Returns its freed slot, -1 if absent or pinned. */
int v4_xpolicy_remove(v4_xpolicy *p, int key);

int v4_xpolicy_size(const v4_xpolicy *p);       /* resident keys */
int v4_xpolicy_pinned(const v4_xpolicy *p);     /* resident keys with pins > 0 */
int v4_xpolicy_capacity(const v4_xpolicy *p);
int v4_xpolicy_key_of(const v4_xpolicy *p, int slot);   /* -1 if the slot is free */
/* The victim insert would choose now (-1 if a slot is free or none is evictable);
 * no side effect (tests, cachesim diagnostics). */
int v4_xpolicy_peek_victim(const v4_xpolicy *p);

#ifdef __cplusplus
}
#endif

#endif
