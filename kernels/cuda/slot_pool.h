/* slot_pool.h - the bookkeeping of the GPU expert cache (gpu_experts.h), in plain C:
 * no CUDA here, so that it builds and is unit-tested on every machine
 * (tests/test_gpu_slot_pool.c).
 *
 * The cache holds routed experts in fixed-size slots cut from ONE preallocated device
 * pool: slots = floor(budget / slot_bytes) (at most one per expert of the model), so
 * the pool (slots * slot_bytes) never exceeds the byte budget.  A slot holds one
 * (layer, expert) or nothing.  acquire pins the experts a layer needs for a step (pin
 * counts), reusing resident ones (hits) and assigning slots to the others (misses):
 * free slots first, then the unpinned resident slot the eviction policy chooses.  The
 * policy is the host expert cache's (kernels/xpolicy.h, the same code): lru | slru |
 * lfru | next (the default, V4_GPU_CACHE_POLICY; the pool's keys are layer-major with
 * n_layers given, so NEXT knows each key's layer: on the engine's cyclic visit of the
 * layers it evicts from the layer needed last, where LRU evicts the next ones needed).
 * A hit counts as a use for the policy (touch), a miss as an insert.
 * Pinned slots are never evicted.  acquire is all or nothing: when the misses do not
 * fit in the free + unpinned slots, nothing changes and err says by how much the
 * budget falls short.  release unpins; a slot whose pin count drops to 0 re-enters the
 * policy's order (LRU: as the most recently used).  A slot whose upload failed is
 * forgotten (v4_slot_pool_forget): it returns to the free list at its release, and an acquire meanwhile treats it as a
 * miss.  The caller moves the bytes (device copies) and reports them
 * (v4_slot_pool_add_uploaded) so that one stats record has every counter.
 *
 * Also here: v4_slot_pool_budget_parse, the V4_GPU_EXPERT_MEM syntax (bytes with an
 * optional K/M/G/T suffix, or a percentage of the model's routed-expert bytes).
 *
 * Ownership: the pool owns its tables; errors are written to the caller's v4_error.
 * Thread: none inside; one thread at a time (the CUDA backend's driving thread).
 */
#ifndef V4_SLOT_POOL_H
#define V4_SLOT_POOL_H

#include <stddef.h>
#include <stdint.h>

#include "../../config/error.h"
#include "../xpolicy.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct v4_slot_pool v4_slot_pool;

typedef struct v4_slot_pool_stats {
    uint64_t hits;              /* acquired experts already resident */
    uint64_t misses;            /* acquired experts given a slot (to be uploaded) */
    uint64_t evictions;         /* misses that took a slot from another expert */
    uint64_t bytes_uploaded;    /* as reported by v4_slot_pool_add_uploaded */
    uint64_t failed_acquires;   /* acquires refused for lack of slots */
    size_t budget_bytes;        /* as given to create */
    size_t slot_bytes;
    size_t pool_bytes;          /* slots * slot_bytes <= budget_bytes */
    int slots;
    int resident;               /* slots holding an expert */
    int pinned;                 /* slots with a pin count > 0 */
    int high_water_pinned;      /* most slots pinned at once */
} v4_slot_pool_stats;

/* A pool for n_layers x n_experts experts with slot_bytes per slot in budget_bytes,
 * evicting by policy (V4_XPOL_NEXT is the default of the settings).  Fails
 * (V4_ERR_INVALID) when the budget holds no slot, the sizes are not positive or the
 * policy is unknown. */
v4_slot_pool *v4_slot_pool_create(int n_layers, int n_experts, size_t slot_bytes, size_t budget_bytes,
                                  v4_xpolicy_kind policy, v4_error *err);
void v4_slot_pool_free(v4_slot_pool *p);
int v4_slot_pool_slots(const v4_slot_pool *p);
v4_xpolicy_kind v4_slot_pool_policy(const v4_slot_pool *p);

/* Pin experts ids[0..n) of layer (distinct ids expected; a repeated id is pinned twice
 * and shares its slot).  slot[i] = the slot of ids[i]; load[i] = 1 when its bytes must
 * be uploaded into the slot before use (a miss, or a forgotten slot), 0 on a hit.  All
 * or nothing: -1 with err (V4_ERR_RANGE for a bad id, V4_ERR_NOMEM when the slots
 * cannot hold them: the message gives the slots needed, free, pinned and the budget). */
int v4_slot_pool_acquire(v4_slot_pool *p, int layer, const int *ids, int n, int *slot, unsigned char *load,
                         v4_error *err);
/* Unpin experts ids[0..n) of layer (ids not pinned are ignored). */
void v4_slot_pool_release(v4_slot_pool *p, int layer, const int *ids, int n);
/* The contents of slot (pinned by an acquire) are not valid (its upload failed). */
void v4_slot_pool_forget(v4_slot_pool *p, int slot);
/* The slot holding (layer, id), or -1; touches neither the policy's order nor the counters. */
int v4_slot_pool_lookup(const v4_slot_pool *p, int layer, int id);
/* Pin count of a slot (tests). */
int v4_slot_pool_pins(const v4_slot_pool *p, int slot);
void v4_slot_pool_add_uploaded(v4_slot_pool *p, uint64_t bytes);
void v4_slot_pool_stats_get(const v4_slot_pool *p, v4_slot_pool_stats *st);

/* V4_GPU_EXPERT_MEM: "12G", "512M", "1.5G", "1073741824" (K/M/G/T = 2^10.., an optional
 * trailing B) or "85%" (of total_bytes, 0 < pct <= 100; the result rounds down).
 * 0 and *out, or -1 with err (V4_ERR_CONFIG naming `what`) on a bad value or a budget of
 * 0 bytes. */
int v4_slot_pool_budget_parse(const char *s, uint64_t total_bytes, const char *what, size_t *out, v4_error *err);

#ifdef __cplusplus
}
#endif

#endif
