/* gpu_experts.cu - the GPU expert cache (gpu_experts.h): the provider callbacks of the
 * hybrid mode around the shared paged-expert core (xslots.h: device pool, copy stream,
 * pinned staging ring, per-slot ready/used events; the bookkeeping is slot_pool.c's).
 *
 * acquire uploads every miss of the layer (each copy on the core's copy stream, the
 * call returns while they run) and returns matrices pointing into the slots; the
 * backend's linear asks the cache (v4cu_tier_ops.ready) for the slot's ready event and makes its
 * compute stream wait for it; release records the used events.
 *
 * Ownership: the cache (owned by the backend, cuda_internal.h) owns its xslots and
 * scratch; it borrows the weights and the inner provider.  Thread: the backend's
 * driving thread.
 */
extern "C" {
#include "../../config/error.h"   /* v4_err_set (v4core) */
}
#include <cuda_runtime.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cuda_internal.h"
#include "gpu_experts.h"
#include "slot_pool.h"
#include "xslots.h"

struct v4cu_tier {
    int device;
    cudaStream_t compute;       /* borrowed: the backend's */
    v4cu_xslots *xs;            /* pool, copy stream, staging, events */
    const v4_config *cfg;
    size_t off[6];              /* slot layout (xslots.h) */
    int *prefetch_ids;          /* [n_routed_experts] */
    v4_expert_provider inner;
    int has_inner;
    v4_expert_provider cb;
};

namespace {

void bind(const v4cu_tier *t, int slot, v4_expert_w *out)
{
    const uint8_t *b = v4cu_xslots_at(t->xs, slot);
    const v4_wtype type = t->cfg->expert_fp4 ? V4_W_FP4 : V4_W_FP8;
    const int I = t->cfg->moe_inter, d = t->cfg->dim;
    v4_mat *ms[3] = {&out->w1, &out->w3, &out->w2};
    for (int m = 0; m < 3; m++)
        *ms[m] = v4_mat{type, m == 2 ? d : I, m == 2 ? I : d, b + t->off[2 * m], b + t->off[2 * m + 1],
                        (v4_layout)(V4_LAYOUT_ROWMAJOR | V4_MAT_CUDA)};
}

int tier_acquire(void *ud, int layer, const int *ids, int n, v4_expert_w *out, v4_error *err)
{
    v4cu_tier *t = (v4cu_tier *)ud;
    if (v4cu_xslots_broken(t->xs, err))
        return -1;
    const cudaError_t e = cudaSetDevice(t->device);
    if (e != cudaSuccess)
        return v4_err_set(err, V4_ERR_INTERNAL, "GPU expert cache", "cudaSetDevice: %s", cudaGetErrorString(e));
    if (v4cu_xslots_begin(t->xs, layer, ids, n, err))
        return -1;
    int rc = v4cu_xslots_fetch(t->xs, err);
    if (rc == 0)
        rc = v4cu_xslots_upload_all(t->xs, err);
    v4cu_xslots_end(t->xs, rc == 0);
    if (rc != 0) {
        v4cu_xslots_release(t->xs, layer, ids, n);
        return -1;
    }
    for (int i = 0; i < n; i++)   /* the backend's linear waits for each slot's ready event */
        bind(t, v4cu_xslots_slot_of(t->xs, i), &out[i]);
    return 0;
}

void tier_release(void *ud, int layer, const int *ids, int n)
{
    v4cu_tier *t = (v4cu_tier *)ud;
    cudaSetDevice(t->device);
    v4cu_xslots_release(t->xs, layer, ids, n);
}

void tier_prefetch(void *ud, int layer, const int *ids, int n)
{
    v4cu_tier *t = (v4cu_tier *)ud;
    if (!t->has_inner || !t->inner.prefetch || n > t->cfg->n_routed_experts)
        return;
    int m = 0;
    for (int i = 0; i < n; i++)
        if (v4_slot_pool_lookup(v4cu_xslots_pool(t->xs), layer, ids[i]) < 0)
            t->prefetch_ids[m++] = ids[i];
    if (m)
        t->inner.prefetch(t->inner.ud, layer, t->prefetch_ids, m);
}

int v4cu_tier_ready(const v4cu_tier *t, const v4_mat *W, cudaEvent_t *ev)
{
    const int s = v4cu_xslots_find(t->xs, W->w, v4cu_wbytes(W), W->scale, v4cu_sbytes(W));
    if (s < 0)
        return -1;
    *ev = v4cu_xslots_ready(t->xs, s);
    return 0;
}

void v4cu_tier_free(v4cu_tier *t)
{
    if (!t)
        return;
    cudaSetDevice(t->device);
    v4cu_xslots_free(t->xs);
    free(t->prefetch_ids);
    free(t);
}

const v4cu_tier_ops tier_ops = {v4cu_tier_ready, v4cu_tier_free};

} /* namespace */

extern "C" int v4_gpu_experts_attach(v4_backend *be, const v4_weights *w, const v4_expert_provider *inner,
                                     size_t budget_bytes, v4_xpolicy_kind policy, const v4_expert_provider **out,
                                     v4_error *err)
{
    const char *where = "GPU expert cache";
    if (!v4cu_is_cuda(be))
        return v4_err_set(err, V4_ERR_INVALID, where, "needs the CUDA backend (--device cuda), not '%s'",
                          be && be->ops ? be->ops->name : "(none)");
    v4cu_tier **slotp = v4cu_tier_of(be);
    if (*slotp)
        return v4_err_set(err, V4_ERR_INVALID, where, "this CUDA backend already has a GPU expert cache");
    v4cu_tier *t = (v4cu_tier *)calloc(1, sizeof *t);
    if (!t)
        return v4_err_set(err, V4_ERR_NOMEM, where, "out of memory");
    t->device = v4cu_device(be);
    t->compute = v4cu_stream(be);
    t->cfg = &w->cfg;
    if (inner && inner->acquire) {
        t->inner = *inner;
        t->has_inner = 1;
    }
    v4cu_xslots_layout(t->cfg, t->off, NULL);
    const cudaError_t e = cudaSetDevice(t->device);
    if (e != cudaSuccess) {
        v4cu_tier_free(t);
        return v4_err_set(err, V4_ERR_INVALID, where, "device %d: cudaSetDevice: %s (%s)", v4cu_device(be),
                          cudaGetErrorString(e), cudaGetErrorName(e));
    }
    if (!(t->xs = v4cu_xslots_create(w, inner, budget_bytes, policy, t->compute, t->device, where, err))) {
        v4cu_tier_free(t);
        return -1;
    }
    if (!(t->prefetch_ids = (int *)calloc((size_t)w->cfg.n_routed_experts, sizeof(int)))) {
        v4cu_tier_free(t);
        return v4_err_set(err, V4_ERR_NOMEM, where, "out of memory");
    }
    t->cb = v4_expert_provider{tier_acquire, tier_release, tier_prefetch, t};
    *slotp = t;
    v4cu_tier_ops_set(be, &tier_ops);
    *out = &t->cb;
    return 0;
}

extern "C" int v4_gpu_experts_stats_get(const v4_backend *be, v4_gpu_experts_stats *st)
{
    memset(st, 0, sizeof *st);
    if (!v4cu_is_cuda(be) || !v4cu_tier_of_const(be))
        return -1;
    v4_slot_pool_stats ps;
    v4_slot_pool_stats_get(v4cu_xslots_pool(v4cu_tier_of_const(be)->xs), &ps);
    st->hits = ps.hits;
    st->misses = ps.misses;
    st->evictions = ps.evictions;
    st->bytes_uploaded = ps.bytes_uploaded;
    st->failed_acquires = ps.failed_acquires;
    st->budget_bytes = ps.budget_bytes;
    st->pool_bytes = ps.pool_bytes;
    st->slot_bytes = ps.slot_bytes;
    st->slots = ps.slots;
    st->resident = ps.resident;
    st->pinned = ps.pinned;
    st->high_water_pinned = ps.high_water_pinned;
    return 0;
}

extern "C" void v4_gpu_experts_detach(v4_backend *be)
{
    if (!v4cu_is_cuda(be))
        return;
    v4cu_tier **tp = v4cu_tier_of(be);
    v4cu_tier_free(*tp);
    *tp = NULL;
}
