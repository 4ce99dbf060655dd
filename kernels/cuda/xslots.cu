/* xslots.cu - device slots for paged routed experts with uploads on a copy stream
 * (xslots.h): the CUDA-runtime side (pool, copy stream, pinned staging ring, per-slot
 * events) around slot_pool.c's bookkeeping.
 *
 * Events: per slot `ready` (copy stream, after the slot's last upload) and `used`
 * (compute stream, at release); per staging buffer `staged` (copy stream, after the
 * copy out of it: the host waits for it before refilling the buffer).
 *
 * Ownership: the v4cu_xslots owns the pool, stream, events, staging buffers, slot pool
 * and scratch; it borrows the weights, the inner provider and the compute stream.
 * Thread: one at a time.
 */
#ifndef V4CU_HOST_EMULATION
#include <cuda_runtime.h>
#endif
#include <stdlib.h>
#include <string.h>

#include "xslots.h"

namespace {

constexpr int XS_NSTAGE = 4;
constexpr int XS_NPART = 6;   /* w1, w1 scale, w3, w3 scale, w2, w2 scale */

size_t xs_up(size_t v) { return (v + 255) / 256 * 256; }

} /* namespace */

struct v4cu_xslots {
    const v4_weights *w;
    v4_expert_provider inner;
    int has_inner;
    cudaStream_t compute, copy;
    const char *where;
    v4_slot_pool *pool;
    uint8_t *dpool;
    size_t slot_bytes, used;        /* slot stride; bytes of an expert within it */
    size_t off[XS_NPART], len[XS_NPART];
    int slots, n_experts;
    v4_wtype type;
    int dim, inter;
    cudaEvent_t *ready, *used_ev;
    void *stage[XS_NSTAGE];
    cudaEvent_t staged[XS_NSTAGE];
    int next_stage;
    /* the current begin..end [n_experts each] */
    int layer, n, nmiss, uploaded, inner_held;
    int *slot, *miss_at, *miss_ids;
    unsigned char *load;
    v4_expert_w *hx;
    int broken;
    v4_error first;
};

namespace {

int xs_cuda_fail(v4cu_xslots *x, v4_error *err, const char *what, cudaError_t e)
{
    (void)cudaGetLastError();
    if (!x->first.code)
        v4_err_set(&x->first, V4_ERR_INTERNAL, x->where, "%s: %s (%s)", what, cudaGetErrorString(e),
                   cudaGetErrorName(e));
    x->broken = 1;
    if (err)
        *err = x->first;
    return -1;
}

/* Matrix m of an expert (0 w1, 1 w3, 2 w2): its rows and columns. */
void xs_shape(const v4_config *cfg, int m, int *rows, int *cols)
{
    *rows = m == 2 ? cfg->dim : cfg->moe_inter;
    *cols = m == 2 ? cfg->moe_inter : cfg->dim;
}

} /* namespace */

V4CU_XS_API size_t v4cu_xslots_layout(const v4_config *cfg, size_t *off, size_t *len)
{
    size_t at = 0;
    for (int m = 0; m < 3; m++) {
        int r, c;
        xs_shape(cfg, m, &r, &c);
        const size_t n = (size_t)r * (size_t)c;
        const size_t wb = cfg->expert_fp4 ? n / 2 : n;
        const size_t sb = cfg->expert_fp4 ? (size_t)r * (size_t)(c / 32)
                                          : (size_t)((r + 127) / 128) * (size_t)((c + 127) / 128);
        const size_t part[2] = {wb, sb};
        for (int k = 0; k < 2; k++) {
            if (off)
                off[2 * m + k] = at;
            if (len)
                len[2 * m + k] = part[k];
            at = xs_up(at + part[k]);
        }
    }
    return at;
}

V4CU_XS_API int v4cu_xslots_count(const v4_config *cfg, size_t budget)
{
    const size_t s = budget / v4cu_xslots_layout(cfg, NULL, NULL), all = (size_t)cfg->n_layers * cfg->n_routed_experts;
    return (int)(s < all ? s : all);
}

V4CU_XS_API void v4cu_xslots_free(v4cu_xslots *x)
{
    if (!x)
        return;
    if (x->copy)
        cudaStreamSynchronize(x->copy);
    if (x->compute)
        cudaStreamSynchronize(x->compute);
    for (int i = 0; i < x->slots; i++) {
        if (x->ready && x->ready[i])
            cudaEventDestroy(x->ready[i]);
        if (x->used_ev && x->used_ev[i])
            cudaEventDestroy(x->used_ev[i]);
    }
    for (int k = 0; k < XS_NSTAGE; k++) {
        if (x->staged[k])
            cudaEventDestroy(x->staged[k]);
        if (x->stage[k])
            cudaFreeHost(x->stage[k]);
    }
    if (x->copy)
        cudaStreamDestroy(x->copy);
    cudaFree(x->dpool);
    v4_slot_pool_free(x->pool);
    free(x->ready);
    free(x->used_ev);
    free(x->slot);
    free(x->miss_at);
    free(x->miss_ids);
    free(x->load);
    free(x->hx);
    free(x);
}

V4CU_XS_API v4cu_xslots *v4cu_xslots_create(const v4_weights *w, const v4_expert_provider *inner, size_t budget,
                                            v4_xpolicy_kind policy, cudaStream_t compute, int device,
                                            const char *where, v4_error *err)
{
    const v4_config *cfg = &w->cfg;
    if (cfg->n_layers <= 0 || cfg->n_routed_experts <= 0 || cfg->dim <= 0 || cfg->moe_inter <= 0) {
        v4_err_set(err, V4_ERR_INVALID, where, "the model has no routed experts");
        return NULL;
    }
    if (!(inner && inner->acquire) && !w->layers) {
        v4_err_set(err, V4_ERR_INVALID, where, "no inner provider and no bound weights");
        return NULL;
    }
    v4cu_xslots *x = (v4cu_xslots *)calloc(1, sizeof *x);
    if (!x) {
        v4_err_set(err, V4_ERR_NOMEM, where, "out of memory");
        return NULL;
    }
    x->w = w;
    if (inner && inner->acquire) {
        x->inner = *inner;
        x->has_inner = 1;
    }
    x->compute = compute;
    x->where = where;
    x->type = cfg->expert_fp4 ? V4_W_FP4 : V4_W_FP8;
    x->dim = cfg->dim;
    x->inter = cfg->moe_inter;
    x->n_experts = cfg->n_routed_experts;
    x->slot_bytes = v4cu_xslots_layout(cfg, x->off, x->len);
    x->used = x->off[XS_NPART - 1] + x->len[XS_NPART - 1];
    if (!(x->pool = v4_slot_pool_create(cfg->n_layers, x->n_experts, x->slot_bytes, budget, policy, err))) {
        v4cu_xslots_free(x);
        return NULL;
    }
    x->slots = v4_slot_pool_slots(x->pool);
    const size_t E = (size_t)x->n_experts;
    x->ready = (cudaEvent_t *)calloc((size_t)x->slots, sizeof(cudaEvent_t));
    x->used_ev = (cudaEvent_t *)calloc((size_t)x->slots, sizeof(cudaEvent_t));
    x->slot = (int *)calloc(E, sizeof(int));
    x->miss_at = (int *)calloc(E, sizeof(int));
    x->miss_ids = (int *)calloc(E, sizeof(int));
    x->load = (unsigned char *)calloc(E, 1);
    x->hx = (v4_expert_w *)calloc(E, sizeof(v4_expert_w));
    if (!x->ready || !x->used_ev || !x->slot || !x->miss_at || !x->miss_ids || !x->load || !x->hx) {
        v4cu_xslots_free(x);
        v4_err_set(err, V4_ERR_NOMEM, where, "out of memory");
        return NULL;
    }
    const char *what = "the slot pool (cudaMalloc)";
    cudaError_t e = cudaMalloc((void **)&x->dpool, (size_t)x->slots * x->slot_bytes);
    if (e == cudaSuccess) {
        what = "the copy stream";
        e = cudaStreamCreateWithFlags(&x->copy, cudaStreamNonBlocking);
    }
    for (int i = 0; e == cudaSuccess && i < x->slots; i++) {
        what = "the slot events";
        e = cudaEventCreateWithFlags(&x->ready[i], cudaEventDisableTiming);
        if (e == cudaSuccess)
            e = cudaEventCreateWithFlags(&x->used_ev[i], cudaEventDisableTiming);
    }
    for (int k = 0; e == cudaSuccess && k < XS_NSTAGE; k++) {
        what = "the pinned staging buffers (cudaHostAlloc)";
        e = cudaHostAlloc(&x->stage[k], x->slot_bytes, cudaHostAllocDefault);
        if (e == cudaSuccess) {
            what = "the staging events";
            e = cudaEventCreateWithFlags(&x->staged[k], cudaEventDisableTiming);
        }
    }
    if (e != cudaSuccess) {
        (void)cudaGetLastError();
        v4_err_set(err, V4_ERR_INVALID, where, "device %d: %s of %d slots x %zu bytes: %s (%s)", device, what,
                   x->slots, x->slot_bytes, cudaGetErrorString(e), cudaGetErrorName(e));
        v4cu_xslots_free(x);
        return NULL;
    }
    return x;
}

V4CU_XS_API int v4cu_xslots_broken(const v4cu_xslots *x, v4_error *err)
{
    if (!x->broken)
        return 0;
    if (err)
        *err = x->first;
    return -1;
}

V4CU_XS_API int v4cu_xslots_begin(v4cu_xslots *x, int layer, const int *ids, int n, v4_error *err)
{
    if (v4cu_xslots_broken(x, err))
        return -1;
    if (n > x->n_experts)
        return v4_err_set(err, V4_ERR_RANGE, x->where, "%d experts asked in layer %d (model has %d)", n, layer,
                          x->n_experts);
    if (v4_slot_pool_acquire(x->pool, layer, ids, n, x->slot, x->load, err))
        return -1;
    x->layer = layer;
    x->n = n;
    x->nmiss = x->uploaded = x->inner_held = 0;
    for (int i = 0; i < n; i++)
        if (x->load[i]) {
            x->miss_ids[x->nmiss] = ids[i];
            x->miss_at[x->nmiss++] = i;
        }
    return 0;
}

V4CU_XS_API int v4cu_xslots_fetch(v4cu_xslots *x, v4_error *err)
{
    if (!x->nmiss)
        return 0;
    if (!x->has_inner) {
        for (int k = 0; k < x->nmiss; k++)
            x->hx[k] = x->w->layers[x->layer].experts[x->miss_ids[k]];
        return 0;
    }
    if (x->inner.acquire(x->inner.ud, x->layer, x->miss_ids, x->nmiss, x->hx, err))
        return -1;
    x->inner_held = 1;
    return 0;
}

V4CU_XS_API int v4cu_xslots_slot_of(const v4cu_xslots *x, int i) { return x->slot[i]; }
V4CU_XS_API int v4cu_xslots_nmiss(const v4cu_xslots *x) { return x->nmiss; }
V4CU_XS_API int v4cu_xslots_miss_at(const v4cu_xslots *x, int k) { return x->miss_at[k]; }

V4CU_XS_API int v4cu_xslots_upload(v4cu_xslots *x, int k, v4_error *err)
{
    if (v4cu_xslots_broken(x, err))
        return -1;
    const v4_expert_w *hx = &x->hx[k];
    const int id = x->miss_ids[k], slot = x->slot[x->miss_at[k]];
    const v4_mat *ms[3] = {&hx->w1, &hx->w3, &hx->w2};
    for (int m = 0; m < 3; m++) {
        int rows, cols;
        xs_shape(&x->w->cfg, m, &rows, &cols);
        const v4_mat *M = ms[m];
        if (M->type != x->type || M->rows != rows || M->cols != cols || M->layout != V4_LAYOUT_ROWMAJOR || !M->w ||
            !M->scale)
            return v4_err_set(err, V4_ERR_SHAPE, x->where,
                              "layer %d expert %d: matrix w%d is type %d [%d x %d] layout %d, expected type %d "
                              "[%d x %d] row-major host memory",
                              x->layer, id, m == 0 ? 1 : m == 1 ? 3 : 2, (int)M->type, M->rows, M->cols,
                              (int)M->layout, (int)x->type, rows, cols);
    }
    const int b = x->next_stage;
    x->next_stage = (b + 1) % XS_NSTAGE;
    cudaError_t e = cudaEventSynchronize(x->staged[b]);     /* its previous copy is done */
    if (e != cudaSuccess)
        return xs_cuda_fail(x, err, "wait for a staging buffer", e);
    uint8_t *st = (uint8_t *)x->stage[b];
    for (int m = 0; m < 3; m++) {
        memcpy(st + x->off[2 * m], ms[m]->w, x->len[2 * m]);
        memcpy(st + x->off[2 * m + 1], ms[m]->scale, x->len[2 * m + 1]);
    }
    e = cudaStreamWaitEvent(x->copy, x->used_ev[slot], 0);  /* no kernel still reads the slot */
    if (e == cudaSuccess)
        e = cudaMemcpyAsync(x->dpool + (size_t)slot * x->slot_bytes, st, x->used, cudaMemcpyHostToDevice, x->copy);
    if (e == cudaSuccess)
        e = cudaEventRecord(x->staged[b], x->copy);
    if (e == cudaSuccess)
        e = cudaEventRecord(x->ready[slot], x->copy);
    if (e != cudaSuccess)
        return xs_cuda_fail(x, err, "expert copy to the device", e);
    v4_slot_pool_add_uploaded(x->pool, x->used);
    x->uploaded = k + 1;
    return 0;
}

V4CU_XS_API void v4cu_xslots_end(v4cu_xslots *x, int ok)
{
    if (!ok)   /* the misses not (fully) uploaded hold nothing valid */
        for (int k = x->uploaded; k < x->nmiss; k++)
            v4_slot_pool_forget(x->pool, x->slot[x->miss_at[k]]);
    if (x->inner_held)  /* its bytes are staged now */
        x->inner.release(x->inner.ud, x->layer, x->miss_ids, x->nmiss);
    x->inner_held = 0;
}

V4CU_XS_API int v4cu_xslots_wait(v4cu_xslots *x, int slot, v4_error *err)
{
    const cudaError_t e = cudaStreamWaitEvent(x->compute, x->ready[slot], 0);
    return e == cudaSuccess ? 0 : xs_cuda_fail(x, err, "wait for an expert's copy", e);
}

V4CU_XS_API void v4cu_xslots_release(v4cu_xslots *x, int layer, const int *ids, int n)
{
    for (int i = 0; i < n; i++) {
        const int s = v4_slot_pool_lookup(x->pool, layer, ids[i]);
        cudaError_t e;
        if (s >= 0 && (e = cudaEventRecord(x->used_ev[s], x->compute)) != cudaSuccess)
            xs_cuda_fail(x, NULL, "record an expert's last use", e);
    }
    v4_slot_pool_release(x->pool, layer, ids, n);
}

V4CU_XS_API uint8_t *v4cu_xslots_at(const v4cu_xslots *x, int slot) { return x->dpool + (size_t)slot * x->slot_bytes; }

V4CU_XS_API int v4cu_xslots_find(const v4cu_xslots *x, const void *p, size_t pb, const void *q, size_t qb)
{
    const uintptr_t base = (uintptr_t)x->dpool, end = base + (size_t)x->slots * x->slot_bytes;
    const uintptr_t a = (uintptr_t)p, c = (uintptr_t)q;
    if (a < base || a >= end)
        return -1;
    const size_t s = (a - base) / x->slot_bytes;
    const uintptr_t s0 = base + s * x->slot_bytes, s1 = s0 + x->slot_bytes;
    if (a + pb > s1 || (qb && (c < s0 || c + qb > s1)))
        return -1;
    return (int)s;
}

V4CU_XS_API cudaEvent_t v4cu_xslots_ready(const v4cu_xslots *x, int slot) { return x->ready[slot]; }
V4CU_XS_API v4_slot_pool *v4cu_xslots_pool(const v4cu_xslots *x) { return x->pool; }
