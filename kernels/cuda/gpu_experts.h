/* gpu_experts.h - the GPU expert cache: the second cache level for routed experts, in
 * device memory of a CUDA backend (C11 API).
 *
 * What it is: a v4_expert_provider (kernels/v4/model.h) that serves the decode path
 * with experts whose matrices point at device memory (V4_MAT_CUDA, backend.h), on top
 * of an inner provider: the host-tier cache (cache/expert_provider.h) or, with inner
 * NULL, the weights' own experts (a model mapped whole).  Give the provider it returns
 * to v4_ctx_set_expert_provider of a context driven by the same CUDA backend.
 *
 * Design: ONE device pool of `slots` fixed-size slots, slots = floor(budget /
 * slot_bytes) (the budget is never exceeded; the bookkeeping is kernels/cuda/slot_pool.h:
 * the eviction policy over unpinned slots, pin counts).  A slot holds one expert's six tensors (w1, w1
 * scale, w3, w3 scale, w2, w2 scale) at 256-byte aligned offsets.  acquire(layer, ids)
 * pins all ids (all or nothing), asks the inner provider only for the misses, copies
 * each miss into a pinned host staging buffer (a ring of 4, each reused once the event
 * of its previous copy completed) and enqueues the host-to-device copy on the cache's
 * own copy stream, recording a per-slot "ready" event; it then returns the device
 * matrices at once and releases the inner experts (their bytes are staged).  The
 * backend's linear makes its compute stream wait for the ready event of the slot it is
 * about to read, so hits compute while misses are still loading.  release records a
 * per-slot "used" event on the compute stream; a later upload into that slot first
 * makes the copy stream wait for it (no overwrite under a running kernel).  The bytes
 * are copied unchanged, and the kernels are those of the host path: results are
 * bit-identical to the CPU reference.  prefetch forwards to the inner provider the ids
 * that are not resident on the GPU.
 *
 * Failures: when the slots cannot hold a layer's experts for one step (everything else
 * pinned), acquire fails with the slot pool's V4_ERR_NOMEM message (slots needed, free,
 * budget, the V4_GPU_EXPERT_MEM to set); an inner failure is passed through; a CUDA
 * failure (copy, event) fails the acquire with V4_ERR_INTERNAL and is sticky.  A failed
 * acquire leaves nothing pinned.
 *
 * Ownership: the backend owns the cache (one per backend): v4_gpu_experts_detach or the
 * backend's destroy frees it.  It borrows w, cfg and the inner provider (callbacks and
 * ud), which must outlive their use by the cache; the provider pointer returned by
 * attach is valid until detach/destroy.
 * Thread: the backend's driving thread only (attach, the callbacks, stats, detach).
 */
#ifndef V4_GPU_EXPERTS_H
#define V4_GPU_EXPERTS_H

#include <stddef.h>
#include <stdint.h>

#include "../../config/error.h"
#include "../../config/model_config.h"
#include "../backend.h"
#include "../xpolicy.h"
#include "../v4/model.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct v4_gpu_experts_stats {
    uint64_t hits, misses, evictions;   /* per acquired expert */
    uint64_t bytes_uploaded;            /* host-to-device bytes of expert copies */
    uint64_t failed_acquires;           /* refused: the budget cannot hold one step */
    size_t budget_bytes;                /* as asked */
    size_t pool_bytes;                  /* slots * slot_bytes <= budget_bytes (allocated once) */
    size_t slot_bytes;
    int slots, resident;
    int pinned, high_water_pinned;      /* slots pinned now (0 between steps) / at most */
} v4_gpu_experts_stats;

/* Bytes of one routed expert of cfg's model as stored (six tensors, no padding); the
 * model's routed-expert bytes are n_layers * n_routed_experts times that (the base of
 * a percentage V4_GPU_EXPERT_MEM). */
static inline uint64_t v4_gpu_expert_bytes(const v4_config *cfg)
{
    const uint64_t d = (uint64_t)cfg->dim, I = (uint64_t)cfg->moe_inter;
    if (cfg->expert_fp4)    /* e2m1 pairs + one E8M0 per 32 inputs */
        return 2 * (I * d / 2 + I * (d / 32)) + (d * I / 2 + d * (I / 32));
    return 2 * (I * d + ((I + 127) / 128) * ((d + 127) / 128)) + (d * I + ((d + 127) / 128) * ((I + 127) / 128));
}

/* Attach a GPU expert cache of budget_bytes to the CUDA backend be for the model of w
 * (inner NULL: the weights' own experts), evicting by policy (slot_pool.h).  *out = the provider to set on the context.
 * Fails (V4_ERR_INVALID) when be is not a CUDA backend or already has a cache, when the
 * budget holds no slot (the message gives the slot size), or on a CUDA failure
 * (allocation of the pool, of the staging buffers, stream or events). */
int v4_gpu_experts_attach(v4_backend *be, const v4_weights *w, const v4_expert_provider *inner,
                          size_t budget_bytes, v4_xpolicy_kind policy, const v4_expert_provider **out,
                          v4_error *err);
/* Counters; -1 (st zeroed) when be has no GPU expert cache. */
int v4_gpu_experts_stats_get(const v4_backend *be, v4_gpu_experts_stats *st);
/* Free the cache (waits for its copies); no step may be running, and the context must
 * not use its provider afterwards.  No-op without a cache. */
void v4_gpu_experts_detach(v4_backend *be);

#ifdef __cplusplus
}
#endif

#endif
