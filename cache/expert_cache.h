/* expert_cache.h - the host tier of the expert cache: a byte-budgeted set of fixed-size
 * expert slots, filled from a v4_xsource (expert_source.h) by a pool of I/O threads.
 *
 * This is the generic cache API: a slot's memory is an aligned host buffer here; the
 * GPU tier implements the same calls over device memory as a second level (no GPU
 * code in this file).
 *
 * Memory: slots = floor(budget_bytes / slot_bytes), slot_bytes = block_bytes rounded up
 * to V4_XBLOCK_ALIGN.  All slots are ONE arena allocated at create (aligned to
 * V4_XBLOCK_ALIGN); loads read straight into their slot (no staging buffer), nothing
 * is allocated per load, so the bytes of blocks held or being loaded never exceed the
 * budget.  The high-water mark of slot bytes in use (resident + loading) is tracked.
 *
 * Acquire / release: acquire pins the n experts of one layer and returns pointers to
 * their blocks; they stay valid and unchanged until the matching release.  Misses are
 * queued to the I/O threads at once (several loads in flight); acquire then waits for
 * all n (hits need no I/O).  Two callers missing the same expert share one load.  An
 * expert that is loading holds a pin of its own, so it is never evicted mid-read.
 * Pinned blocks are never evicted.  When a miss finds every slot pinned and some of
 * those pins belong to loads in flight (e.g. prefetches of later layers), acquire waits
 * for the loads - they finish without any caller's help and become evictable - and
 * retries.  When every slot is pinned by callers (the concurrent working sets exceed
 * the budget) acquire fails at once with V4_ERR_RANGE and a message naming the budget
 * and the slots; it never waits for other callers (no deadlock).  n larger than the
 * slot count fails the same way.
 *
 * Errors of the source: acquire fails with the source's error (V4_ERR_CORRUPT and its
 * message pass through); the slot goes back to the free list and the expert is
 * quarantined: later acquires of it fail at once with the same error, without I/O.
 * Other experts are unaffected.  A failed acquire holds no pins.
 *
 * Prefetch: starts the loads of experts that are not resident, without waiting (best
 * effort: dropped when no slot can be evicted).  Prefetch does not count as a use for
 * the policy.  A prefetched block stays pinned by its prefetch until its first acquire,
 * or until it expires: at the next prefetch of the same layer (the caller prefetches a
 * step's experts at the step's start), or when a miss finds no slot to evict (the
 * expiry waits for the block's read; a prefetch that finds none is dropped).  So whether a slot may be evicted never
 * depends on when a read finished: with one caller, the cache's decisions and figures
 * follow from the sequence of calls alone, identical between runs.
 *
 * Stats: hits (no I/O issued by the acquire: resident, or already loading), misses
 * (the acquire issued the load), prefetch_hits (the first acquire of a block that a
 * prefetch brought in; also counted in hits), prefetch_expired (prefetched blocks never
 * acquired), evictions, bytes read, load latency percentiles from a fixed log
 * histogram, and the slot figures.  v4_xcache_stats_reset zeroes the counters (the
 * high-water mark restarts at the current use); per-task figures are deltas of
 * snapshots taken by the caller, or per-acquire outcomes (v4_xcache_acquire_ex).
 *
 * Ownership: the cache does not own the source (the caller closes it after
 * v4_xcache_destroy).  Block pointers belong to the cache.
 * Thread: acquire, release, prefetch, stats and stats_reset from any thread; the
 * source's read is called from the I/O threads.  create/destroy from one thread, with
 * no other call in progress.
 */
#ifndef V4_EXPERT_CACHE_H
#define V4_EXPERT_CACHE_H

#include <stddef.h>
#include <stdint.h>

#include "../config/error.h"
#include "expert_source.h"
#include "../kernels/xpolicy.h"

#define V4_XCACHE_DEFAULT_IO_THREADS 4

typedef struct v4_xcache_opts {
    size_t budget_bytes;            /* host memory for expert slots */
    int io_threads;                 /* 0 = V4_XCACHE_DEFAULT_IO_THREADS */
    v4_xpolicy_kind policy;
    v4_xpolicy_params policy_params;    /* zeroed = defaults (slru_protected 0 means default too) */
} v4_xcache_opts;

typedef struct v4_xcache_stats {
    uint64_t hits, misses, prefetch_hits;
    uint64_t inflight_waits;        /* hits that waited for a load in flight */
    uint64_t prefetch_issued, prefetch_dropped, prefetch_expired;
    uint64_t evictions, loads, load_errors, bytes_read;
    uint64_t lat_p50_us, lat_p90_us, lat_p99_us, lat_max_us;   /* load latency */
    int slots, slots_in_use, slots_pinned, quarantined;
    size_t slot_bytes, budget_bytes, in_use_bytes, high_water_bytes;
} v4_xcache_stats;

typedef struct v4_xcache v4_xcache;

v4_xcache *v4_xcache_create(v4_xsource *src, const v4_xcache_opts *opts, v4_error *err);
void v4_xcache_destroy(v4_xcache *c);

/* Pin experts ids[0..n) of layer and set blocks_out[i] to their blocks.  Returns 0, or
 * -1 with err (nothing pinned then). */
int v4_xcache_acquire(v4_xcache *c, int layer, const int *ids, int n, const void **blocks_out,
                      v4_error *err);
/* What an acquire did for each of its experts (v4_xcache_acquire_ex). */
enum { V4_XOUT_HIT = 1,            /* in the cache already (or being read for another caller) */
       V4_XOUT_MISS = 2,           /* this acquire issued the read */
       V4_XOUT_PREFETCHED = 3 };   /* the first acquire of a block a prefetch read */
/* v4_xcache_acquire, and outcome[i] (may be NULL) = V4_XOUT_* for ids[i] (set only on
 * success). */
int v4_xcache_acquire_ex(v4_xcache *c, int layer, const int *ids, int n, const void **blocks_out,
                         unsigned char *outcome, v4_error *err);
/* Drop the pins of a successful acquire (same layer, ids, n). */
void v4_xcache_release(v4_xcache *c, int layer, const int *ids, int n);
/* Start loading the experts of layer that are not resident; never blocks on I/O. */
void v4_xcache_prefetch(v4_xcache *c, int layer, const int *ids, int n);

void v4_xcache_stats_get(v4_xcache *c, v4_xcache_stats *st);
void v4_xcache_stats_reset(v4_xcache *c);

#endif
