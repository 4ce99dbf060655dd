/* xslots.h - internal (C++ only): device slots for paged routed experts with
 * asynchronous uploads, the one core shared by the hybrid mode's GPU expert cache
 * (gpu_experts.cu) and the resident step's paged experts (cuda_step.cu).
 *
 * What it holds: ONE device pool of fixed-size slots (slots = floor(budget /
 * slot_bytes), at most one per expert of the model; bookkeeping in slot_pool.h: the
 * eviction policy over unpinned slots, pin counts), a non-blocking copy stream, a ring of 4 pinned host
 * staging buffers, and per slot a `ready` event (recorded on the copy stream after the
 * slot's last upload) and a `used` event (recorded on the compute stream when the
 * slot's experts are released).  A slot holds one expert's six tensors (w1, w1 scale,
 * w3, w3 scale, w2, w2 scale: row-major, as the checkpoint stores them) at 256-byte
 * aligned offsets (v4cu_xslots_off).
 *
 * Use, per layer and step:
 *   begin(layer, ids, n)  pins every id (all or nothing) and finds the misses;
 *   fetch()               gets the host bytes of the misses: from the inner provider
 *                         (the host expert cache: may block while it loads) or, without
 *                         one, the weights' own experts (a mapped model);
 *   upload(k)             k = 0, 1, ... < nmiss, in order: copies miss k into a staging
 *                         buffer (waiting only for that buffer's previous copy), makes the
 *                         copy stream wait for the slot's `used` event (no overwrite under
 *                         a running kernel), enqueues ONE host-to-device copy of the block
 *                         and records the slot's `ready` event; it returns while the copy
 *                         runs;
 *   upload_all()          the same for every miss left, up to 4 at a time, their
 *                         staging buffers filled by 4 host threads at once;
 *   end(ok)               releases the inner provider's experts (their bytes are
 *                         staged); !ok: the misses not uploaded are forgotten (slot_pool);
 *                         after a failed fetch or upload call end(0), then release;
 *   wait(slot)            the compute stream waits for the slot's `ready` event: call it
 *                         before the first kernel that reads the slot;
 *   release(layer, ids,n) records the `used` events on the compute stream and unpins.
 * The bytes are copied unchanged: the kernels read exactly what the host path reads.
 * Events never recorded are complete, so first uses need no special case.
 *
 * Failures: begin fails with the slot pool's V4_ERR_NOMEM message when the slots cannot
 * hold the experts (nothing pinned); fetch passes an inner failure through; a CUDA failure
 * (copy, event) fails with V4_ERR_INTERNAL and is sticky (v4cu_xslots_broken).
 *
 * Ownership: the caller owns the v4cu_xslots (v4cu_xslots_free: waits for the copies);
 * it borrows the weights, the inner provider (callbacks and ud) and the compute stream,
 * which must outlive it.  Thread: one thread at a time (the driver of the compute
 * stream); the staging threads it owns only copy host memory (the inner provider's
 * bytes, held between fetch and end) and make no CUDA call.  In the SIMT emulation (simt_emu.h, V4CU_HOST_EMULATION) this file and
 * xslots.cu are included into the test program and the functions are static there.
 */
#ifndef V4_XSLOTS_H
#define V4_XSLOTS_H

#include <stddef.h>
#include <stdint.h>

#ifndef V4CU_HOST_EMULATION
#include <cuda_runtime_api.h>
#define V4CU_XS_API
#else
#define V4CU_XS_API static inline
#endif

extern "C" {
#include "../../config/error.h"
#include "../../config/model_config.h"
#include "../v4/model.h"
}
#include "slot_pool.h"

struct v4cu_xslots;

/* Slot layout of cfg's routed experts: part offsets off[6] and lengths len[6] (either
 * may be NULL); returns the slot stride (a multiple of 256). */
V4CU_XS_API size_t v4cu_xslots_layout(const v4_config *cfg, size_t *off, size_t *len);
/* Slots a budget gives (0 when it holds none), without allocating anything. */
V4CU_XS_API int v4cu_xslots_count(const v4_config *cfg, size_t budget);

/* A pool of slots for w's routed experts in budget bytes, evicting by policy
 * (slot_pool.h); copies wait for and signal the compute stream `compute`; inner NULL (or without acquire): the misses come from
 * w's own experts.  `where` names the owner in errors; device only for messages.
 * NULL + err (V4_ERR_INVALID: a budget below one slot; a CUDA allocation failure with
 * the slots and bytes asked for). */
V4CU_XS_API v4cu_xslots *v4cu_xslots_create(const v4_weights *w, const v4_expert_provider *inner, size_t budget,
                                            v4_xpolicy_kind policy, cudaStream_t compute, int device,
                                            const char *where, v4_error *err);
V4CU_XS_API void v4cu_xslots_free(v4cu_xslots *x);

V4CU_XS_API int v4cu_xslots_begin(v4cu_xslots *x, int layer, const int *ids, int n, v4_error *err);
V4CU_XS_API int v4cu_xslots_fetch(v4cu_xslots *x, v4_error *err);
/* After begin: the slot of ids[i]; the misses (nmiss of them) are ids[miss_at(k)]. */
V4CU_XS_API int v4cu_xslots_slot_of(const v4cu_xslots *x, int i);
V4CU_XS_API int v4cu_xslots_nmiss(const v4cu_xslots *x);
V4CU_XS_API int v4cu_xslots_miss_at(const v4cu_xslots *x, int k);
V4CU_XS_API int v4cu_xslots_upload(v4cu_xslots *x, int k, v4_error *err);
/* Every miss not uploaded yet, the staging buffers filled by several threads. */
V4CU_XS_API int v4cu_xslots_upload_all(v4cu_xslots *x, v4_error *err);
/* Staging buffers the uploads found still being copied (the host waited for them). */
V4CU_XS_API uint64_t v4cu_xslots_staging_waits(const v4cu_xslots *x);
V4CU_XS_API void v4cu_xslots_end(v4cu_xslots *x, int ok);
V4CU_XS_API int v4cu_xslots_wait(v4cu_xslots *x, int slot, v4_error *err);
V4CU_XS_API void v4cu_xslots_release(v4cu_xslots *x, int layer, const int *ids, int n);

/* Device address of a slot; the slot whose bytes hold [p, p+pb) and [q, q+qb) (q may
 * be NULL when qb is 0), or -1; the slot's ready event. */
V4CU_XS_API uint8_t *v4cu_xslots_at(const v4cu_xslots *x, int slot);
V4CU_XS_API int v4cu_xslots_find(const v4cu_xslots *x, const void *p, size_t pb, const void *q, size_t qb);
V4CU_XS_API cudaEvent_t v4cu_xslots_ready(const v4cu_xslots *x, int slot);
/* The bookkeeping (stats, lookup) and the sticky failure: -1 with *err = the first
 * CUDA failure when broken, else 0. */
V4CU_XS_API v4_slot_pool *v4cu_xslots_pool(const v4cu_xslots *x);
V4CU_XS_API int v4cu_xslots_broken(const v4cu_xslots *x, v4_error *err);

#endif
