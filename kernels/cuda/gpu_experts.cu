/* gpu_experts.cu - the GPU expert cache (gpu_experts.h): the CUDA-runtime side (device
 * pool, copy stream, pinned staging ring, per-slot events) and the provider callbacks.
 * The bookkeeping (which slot, LRU, pins, counters) is slot_pool.c's.
 *
 * Streams and events: copies go on the cache's own non-blocking copy stream; the
 * compute stream is the backend's.  Per slot: `ready` (recorded on the copy stream
 * after the slot's last upload; the backend's linear waits for it) and `used`
 * (recorded on the compute stream at release; an upload into the slot waits for it).
 * Per staging buffer: `staged` (recorded after the copy out of it; the host waits for
 * it before refilling the buffer).  Events that were never recorded are complete, so
 * first uses need no special case.
 *
 * Ownership: the cache (owned by the backend, cuda_internal.h) owns the pool, stream,
 * events, staging buffers, slot pool and scratch; it borrows the weights and the inner
 * provider.  Thread: the backend's driving thread.
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

namespace {

constexpr int NSTAGE = 4;
constexpr size_t ALIGN = 256;
constexpr int NPART = 6;   /* w1, w1 scale, w3, w3 scale, w2, w2 scale */

size_t up(size_t x)
{
    return (x + ALIGN - 1) / ALIGN * ALIGN;
}


} /* namespace */

struct v4cu_tier {
    v4_backend *be;
    int device;
    cudaStream_t compute;       /* borrowed: the backend's */
    cudaStream_t copy;
    v4_slot_pool *pool;
    uint8_t *dpool;             /* slots * slot_bytes */
    size_t slot_bytes, used;    /* slot stride; bytes of an expert within it */
    size_t off[NPART], len[NPART];
    int slots;
    cudaEvent_t *ready, *used_ev;
    void *stage[NSTAGE];
    cudaEvent_t staged[NSTAGE];
    int next_stage;
    const v4_weights *w;
    v4_expert_provider inner;
    int has_inner;
    v4_expert_provider cb;
    v4_wtype type;
    int dim, inter, n_layers, n_experts;
    /* per-acquire scratch [n_experts] */
    int *slot, *miss_ids, *miss_at;
    unsigned char *load;
    v4_expert_w *hx;
    int broken;
    v4_error first;
};

namespace {

int cuda_fail(v4cu_tier *t, v4_error *err, const char *what, cudaError_t e)
{
    (void)cudaGetLastError();
    if (!t->first.code)
        v4_err_set(&t->first, V4_ERR_INTERNAL, "GPU expert cache", "%s: %s (%s)", what, cudaGetErrorString(e),
                cudaGetErrorName(e));
    t->broken = 1;
    if (err)
        *err = t->first;
    return -1;
}

/* The expected matrix m of an expert: 0 w1, 1 w3, 2 w2. */
void shape_of(const v4cu_tier *t, int m, int *rows, int *cols)
{
    *rows = m == 2 ? t->dim : t->inter;
    *cols = m == 2 ? t->inter : t->dim;
}

void bind(const v4cu_tier *t, int slot, v4_expert_w *out)
{
    const uint8_t *b = t->dpool + (size_t)slot * t->slot_bytes;
    v4_mat *ms[3] = {&out->w1, &out->w3, &out->w2};
    for (int m = 0; m < 3; m++) {
        int rows, cols;
        shape_of(t, m, &rows, &cols);
        *ms[m] = v4_mat{t->type, rows, cols, b + t->off[2 * m], b + t->off[2 * m + 1],
                        (v4_layout)(V4_LAYOUT_ROWMAJOR | V4_MAT_CUDA)};
    }
}

/* Stage the host expert hx and enqueue its copy into slot. */
int upload(v4cu_tier *t, int layer, int id, int slot, const v4_expert_w *hx, v4_error *err)
{
    const v4_mat *ms[3] = {&hx->w1, &hx->w3, &hx->w2};
    for (int m = 0; m < 3; m++) {
        int rows, cols;
        shape_of(t, m, &rows, &cols);
        const v4_mat *M = ms[m];
        if (M->type != t->type || M->rows != rows || M->cols != cols || M->layout != V4_LAYOUT_ROWMAJOR ||
            !M->w || !M->scale)
            return v4_err_set(err, V4_ERR_SHAPE, "GPU expert cache",
                           "layer %d expert %d: matrix w%d is type %d [%d x %d] layout %d, expected type %d "
                           "[%d x %d] row-major host memory",
                           layer, id, m == 0 ? 1 : m == 1 ? 3 : 2, (int)M->type, M->rows, M->cols, (int)M->layout,
                           (int)t->type, rows, cols);
    }
    const int k = t->next_stage;
    t->next_stage = (k + 1) % NSTAGE;
    cudaError_t e = cudaEventSynchronize(t->staged[k]);     /* its previous copy is done */
    if (e != cudaSuccess)
        return cuda_fail(t, err, "wait for a staging buffer", e);
    uint8_t *st = (uint8_t *)t->stage[k];
    for (int m = 0; m < 3; m++) {
        memcpy(st + t->off[2 * m], ms[m]->w, t->len[2 * m]);
        memcpy(st + t->off[2 * m + 1], ms[m]->scale, t->len[2 * m + 1]);
    }
    e = cudaStreamWaitEvent(t->copy, t->used_ev[slot], 0);  /* no kernel still reads the slot */
    if (e == cudaSuccess)
        e = cudaMemcpyAsync(t->dpool + (size_t)slot * t->slot_bytes, st, t->used, cudaMemcpyHostToDevice, t->copy);
    if (e == cudaSuccess)
        e = cudaEventRecord(t->staged[k], t->copy);
    if (e == cudaSuccess)
        e = cudaEventRecord(t->ready[slot], t->copy);
    if (e != cudaSuccess)
        return cuda_fail(t, err, "expert copy to the device", e);
    v4_slot_pool_add_uploaded(t->pool, t->used);
    return 0;
}

int tier_acquire(void *ud, int layer, const int *ids, int n, v4_expert_w *out, v4_error *err)
{
    v4cu_tier *t = (v4cu_tier *)ud;
    if (t->broken) {
        if (err)
            *err = t->first;
        return -1;
    }
    if (n > t->n_experts)
        return v4_err_set(err, V4_ERR_RANGE, "GPU expert cache", "%d experts asked in layer %d (model has %d)", n,
                       layer, t->n_experts);
    cudaError_t e = cudaSetDevice(t->device);
    if (e != cudaSuccess)
        return cuda_fail(t, err, "cudaSetDevice", e);
    if (v4_slot_pool_acquire(t->pool, layer, ids, n, t->slot, t->load, err))
        return -1;
    int m = 0;
    for (int i = 0; i < n; i++)
        if (t->load[i]) {
            t->miss_ids[m] = ids[i];
            t->miss_at[m++] = i;
        }
    int rc = 0;
    if (m > 0) {
        if (t->has_inner) {
            rc = t->inner.acquire(t->inner.ud, layer, t->miss_ids, m, t->hx, err);
        } else {
            for (int k = 0; k < m; k++)
                t->hx[k] = t->w->layers[layer].experts[t->miss_ids[k]];
        }
        int k = 0;
        for (; rc == 0 && k < m; k++)
            rc = upload(t, layer, t->miss_ids[k], t->slot[t->miss_at[k]], &t->hx[k], err);
        if (rc != 0)    /* the slots not (fully) uploaded hold nothing valid */
            for (int j = k > 0 ? k - 1 : 0; j < m; j++)
                v4_slot_pool_forget(t->pool, t->slot[t->miss_at[j]]);
        if (t->has_inner && (rc == 0 || k > 0))   /* inner acquired: its bytes are staged now */
            t->inner.release(t->inner.ud, layer, t->miss_ids, m);
    }
    if (rc != 0) {
        v4_slot_pool_release(t->pool, layer, ids, n);
        return -1;
    }
    for (int i = 0; i < n; i++)
        bind(t, t->slot[i], &out[i]);
    return 0;
}

void tier_release(void *ud, int layer, const int *ids, int n)
{
    v4cu_tier *t = (v4cu_tier *)ud;
    cudaSetDevice(t->device);
    for (int i = 0; i < n; i++) {
        const int s = v4_slot_pool_lookup(t->pool, layer, ids[i]);
        if (s >= 0 && cudaEventRecord(t->used_ev[s], t->compute) != cudaSuccess)
            cuda_fail(t, NULL, "record an expert's last use", cudaGetLastError());
    }
    v4_slot_pool_release(t->pool, layer, ids, n);
}

void tier_prefetch(void *ud, int layer, const int *ids, int n)
{
    v4cu_tier *t = (v4cu_tier *)ud;
    if (!t->has_inner || !t->inner.prefetch || n > t->n_experts)
        return;
    int m = 0;
    for (int i = 0; i < n; i++)
        if (v4_slot_pool_lookup(t->pool, layer, ids[i]) < 0)
            t->miss_ids[m++] = ids[i];
    if (m)
        t->inner.prefetch(t->inner.ud, layer, t->miss_ids, m);
}

} /* namespace */

int v4cu_tier_ready(const v4cu_tier *t, const v4_mat *W, cudaEvent_t *ev)
{
    const uintptr_t base = (uintptr_t)t->dpool, end = base + (size_t)t->slots * t->slot_bytes;
    const uintptr_t p = (uintptr_t)W->w, q = (uintptr_t)W->scale;
    if (p < base || p >= end)
        return -1;
    const size_t s = (p - base) / t->slot_bytes;
    const uintptr_t s0 = base + s * t->slot_bytes, s1 = s0 + t->slot_bytes;
    if (p + v4cu_wbytes(W) > s1 || (v4cu_sbytes(W) && (q < s0 || q + v4cu_sbytes(W) > s1)))
        return -1;
    *ev = t->ready[s];
    return 0;
}

void v4cu_tier_free(v4cu_tier *t)
{
    if (!t)
        return;
    cudaSetDevice(t->device);
    if (t->copy)
        cudaStreamSynchronize(t->copy);
    if (t->compute)
        cudaStreamSynchronize(t->compute);
    for (int i = 0; i < t->slots; i++) {
        if (t->ready && t->ready[i])
            cudaEventDestroy(t->ready[i]);
        if (t->used_ev && t->used_ev[i])
            cudaEventDestroy(t->used_ev[i]);
    }
    for (int k = 0; k < NSTAGE; k++) {
        if (t->staged[k])
            cudaEventDestroy(t->staged[k]);
        if (t->stage[k])
            cudaFreeHost(t->stage[k]);
    }
    if (t->copy)
        cudaStreamDestroy(t->copy);
    cudaFree(t->dpool);
    v4_slot_pool_free(t->pool);
    free(t->ready);
    free(t->used_ev);
    free(t->slot);
    free(t->miss_ids);
    free(t->miss_at);
    free(t->load);
    free(t->hx);
    free(t);
}

extern "C" int v4_gpu_experts_attach(v4_backend *be, const v4_weights *w, const v4_expert_provider *inner,
                                     size_t budget_bytes, const v4_expert_provider **out, v4_error *err)
{
    const char *where = "GPU expert cache";
    if (!v4cu_is_cuda(be))
        return v4_err_set(err, V4_ERR_INVALID, where, "needs the CUDA backend (--device cuda), not '%s'",
                       be && be->ops ? be->ops->name : "(none)");
    v4cu_tier **slotp = v4cu_tier_of(be);
    if (*slotp)
        return v4_err_set(err, V4_ERR_INVALID, where, "this CUDA backend already has a GPU expert cache");
    const v4_config *cfg = &w->cfg;
    if (cfg->n_layers <= 0 || cfg->n_routed_experts <= 0 || cfg->dim <= 0 || cfg->moe_inter <= 0)
        return v4_err_set(err, V4_ERR_INVALID, where, "the model has no routed experts");
    if (!inner && !w->layers)
        return v4_err_set(err, V4_ERR_INVALID, where, "no inner provider and no bound weights");
    v4cu_tier *t = (v4cu_tier *)calloc(1, sizeof *t);
    if (!t)
        return v4_err_set(err, V4_ERR_NOMEM, where, "out of memory");
    t->be = be;
    t->device = v4cu_device(be);
    t->compute = v4cu_stream(be);
    t->w = w;
    if (inner && inner->acquire) {
        t->inner = *inner;
        t->has_inner = 1;
    }
    t->type = cfg->expert_fp4 ? V4_W_FP4 : V4_W_FP8;
    t->dim = cfg->dim;
    t->inter = cfg->moe_inter;
    t->n_layers = cfg->n_layers;
    t->n_experts = cfg->n_routed_experts;
    size_t at = 0;
    for (int m = 0; m < 3; m++) {
        int rows, cols;
        shape_of(t, m, &rows, &cols);
        v4_mat M = {t->type, rows, cols, NULL, NULL, V4_LAYOUT_ROWMAJOR};
        t->len[2 * m] = v4cu_wbytes(&M);
        t->len[2 * m + 1] = v4cu_sbytes(&M);
        for (int k = 0; k < 2; k++) {
            t->off[2 * m + k] = at;
            at = up(at + t->len[2 * m + k]);
        }
    }
    t->used = t->off[NPART - 1] + t->len[NPART - 1];
    t->slot_bytes = up(t->used);
    const size_t E = (size_t)t->n_experts;
    if (!(t->pool = v4_slot_pool_create(t->n_layers, t->n_experts, t->slot_bytes, budget_bytes, err))) {
        v4cu_tier_free(t);
        return -1;
    }
    t->slots = v4_slot_pool_slots(t->pool);
    t->ready = (cudaEvent_t *)calloc((size_t)t->slots, sizeof(cudaEvent_t));
    t->used_ev = (cudaEvent_t *)calloc((size_t)t->slots, sizeof(cudaEvent_t));
    t->slot = (int *)calloc(E, sizeof(int));
    t->miss_ids = (int *)calloc(E, sizeof(int));
    t->miss_at = (int *)calloc(E, sizeof(int));
    t->load = (unsigned char *)calloc(E, 1);
    t->hx = (v4_expert_w *)calloc(E, sizeof(v4_expert_w));
    if (!t->ready || !t->used_ev || !t->slot || !t->miss_ids || !t->miss_at || !t->load || !t->hx) {
        v4cu_tier_free(t);
        return v4_err_set(err, V4_ERR_NOMEM, where, "out of memory");
    }
    const char *what = "cudaSetDevice";
    cudaError_t e = cudaSetDevice(t->device);
    if (e == cudaSuccess) {
        what = "the slot pool (cudaMalloc)";
        e = cudaMalloc((void **)&t->dpool, (size_t)t->slots * t->slot_bytes);
    }
    if (e == cudaSuccess) {
        what = "the copy stream";
        e = cudaStreamCreateWithFlags(&t->copy, cudaStreamNonBlocking);
    }
    for (int i = 0; e == cudaSuccess && i < t->slots; i++) {
        what = "the slot events";
        e = cudaEventCreateWithFlags(&t->ready[i], cudaEventDisableTiming);
        if (e == cudaSuccess)
            e = cudaEventCreateWithFlags(&t->used_ev[i], cudaEventDisableTiming);
    }
    for (int k = 0; e == cudaSuccess && k < NSTAGE; k++) {
        what = "the pinned staging buffers (cudaHostAlloc)";
        e = cudaHostAlloc(&t->stage[k], t->slot_bytes, cudaHostAllocDefault);
        if (e == cudaSuccess) {
            what = "the staging events";
            e = cudaEventCreateWithFlags(&t->staged[k], cudaEventDisableTiming);
        }
    }
    if (e != cudaSuccess) {
        (void)cudaGetLastError();
        v4_err_set(err, V4_ERR_INVALID, where, "device %d: %s of %d slots x %zu bytes: %s (%s)", t->device, what,
                t->slots, t->slot_bytes, cudaGetErrorString(e), cudaGetErrorName(e));
        v4cu_tier_free(t);
        return -1;
    }
    t->cb = v4_expert_provider{tier_acquire, tier_release, tier_prefetch, t};
    *slotp = t;
    *out = &t->cb;
    return 0;
}

extern "C" int v4_gpu_experts_stats_get(const v4_backend *be, v4_gpu_experts_stats *st)
{
    memset(st, 0, sizeof *st);
    if (!v4cu_is_cuda(be) || !v4cu_tier_of_const(be))
        return -1;
    v4_slot_pool_stats ps;
    v4_slot_pool_stats_get(v4cu_tier_of_const(be)->pool, &ps);
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
