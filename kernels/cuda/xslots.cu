/* xslots.cu - device slots for paged routed experts with uploads on a copy stream
 * (xslots.h): the CUDA-runtime side (pool, copy stream, pinned staging ring, per-slot
 * events, staging threads) around slot_pool.c's bookkeeping.
 *
 * Staging: misses go in rounds of up to XS_NSTAGE (one pinned buffer each); a round's
 * buffers are filled at once by XS_NTHREADS threads (a v4_pool owned here: memcpy
 * pieces of 1 MiB, no CUDA call off the driving thread), then each miss is ONE
 * cudaMemcpyAsync of its whole block on the copy stream.  The host waits (an
 * cudaEventSynchronize) only for a buffer whose previous copy is still running
 * (counted: v4cu_xslots_staging_waits).
 *
 * Events: per slot `ready` (copy stream, after the slot's last upload) and `used`
 * (compute stream, at release); per staging buffer `staged` (copy stream, after the
 * copy out of it: the host waits for it before refilling the buffer).
 *
 * Ownership: the v4cu_xslots owns the pool, stream, events, staging buffers, staging
 * threads, slot pool and scratch; it borrows the weights, the inner provider and the compute stream.
 * Thread: one at a time.
 */
#ifndef V4CU_HOST_EMULATION
#include <cuda_runtime.h>
#endif
#include <stdlib.h>
#include <string.h>

#include "xslots.h"

extern "C" {
#include "../cpu/threadpool.h"
}

namespace {

constexpr int XS_NSTAGE = 4;
constexpr int XS_NPART = 6;   /* w1, w1 scale, w3, w3 scale, w2, w2 scale */
constexpr int XS_NTHREADS = 4;                /* staging threads, the caller included */
constexpr size_t XS_CHUNK = (size_t)1 << 20;  /* bytes per staging task */


size_t xs_up(size_t v) { return (v + 255) / 256 * 256; }

} /* namespace */

/* One staging task: a piece of one part of one miss, host cache -> pinned buffer. */
struct v4cu_xs_piece {
    uint8_t *dst;
    const uint8_t *src;
    size_t len;
};

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
    v4_pool *threads;               /* the staging memcpys (no CUDA call in them) */
    v4cu_xs_piece *pieces;               /* [XS_NSTAGE * pieces per expert] */
    uint64_t staging_waits;         /* staging buffers found still being copied */
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

void xs_copy_piece(void *ctx, int task, int thread)
{
    (void)thread;
    const v4cu_xs_piece *p = (const v4cu_xs_piece *)ctx + task;
    memcpy(p->dst, p->src, p->len);
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
    if (x->threads)
        v4_pool_destroy(x->threads);
    free(x->pieces);
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
    size_t per_expert = 0;
    for (int p = 0; p < XS_NPART; p++)
        per_expert += (x->len[p] + XS_CHUNK - 1) / XS_CHUNK;
    x->pieces = (v4cu_xs_piece *)calloc((size_t)XS_NSTAGE * per_expert + 1, sizeof(v4cu_xs_piece));
    x->threads = v4_pool_create(XS_NTHREADS);
    if (!x->ready || !x->used_ev || !x->slot || !x->miss_at || !x->miss_ids || !x->load || !x->hx || !x->pieces ||
        !x->threads) {
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

namespace {

/* The bytes of miss k as the slot layout wants them, or V4_ERR_SHAPE. */
int xs_check(v4cu_xslots *x, int k, const v4_mat *const *ms, v4_error *err)
{
    for (int m = 0; m < 3; m++) {
        int rows, cols;
        xs_shape(&x->w->cfg, m, &rows, &cols);
        const v4_mat *M = ms[m];
        if (M->type != x->type || M->rows != rows || M->cols != cols || M->layout != V4_LAYOUT_ROWMAJOR || !M->w ||
            !M->scale)
            return v4_err_set(err, V4_ERR_SHAPE, x->where,
                              "layer %d expert %d: matrix w%d is type %d [%d x %d] layout %d, expected type %d "
                              "[%d x %d] row-major host memory",
                              x->layer, x->miss_ids[k], m == 0 ? 1 : m == 1 ? 3 : 2, (int)M->type, M->rows, M->cols,
                              (int)M->layout, (int)x->type, rows, cols);
    }
    return 0;
}

/* Misses k0 .. k0+nk-1 (nk <= XS_NSTAGE, k0 = the next one not uploaded): each gets
 * the next staging buffer of the ring (the host waits for that buffer's previous copy
 * only), the buffers are filled by the staging threads at once (pieces of up to
 * XS_CHUNK bytes), then per miss, in order: the copy stream waits for the slot's
 * `used` event, ONE host-to-device copy of the expert's block, the buffer's `staged`
 * and the slot's `ready` events recorded. */
int xs_stage_round(v4cu_xslots *x, int k0, int nk, v4_error *err)
{
    int np = 0;
    for (int j = 0; j < nk; j++) {
        const v4_expert_w *hx = &x->hx[k0 + j];
        const v4_mat *ms[3] = {&hx->w1, &hx->w3, &hx->w2};
        if (xs_check(x, k0 + j, ms, err))
            return -1;
        const int b = (x->next_stage + j) % XS_NSTAGE;
        if (cudaEventQuery(x->staged[b]) == cudaErrorNotReady)
            x->staging_waits++;
        (void)cudaGetLastError();
        const cudaError_t e = cudaEventSynchronize(x->staged[b]);     /* its previous copy is done */
        if (e != cudaSuccess)
            return xs_cuda_fail(x, err, "wait for a staging buffer", e);
        uint8_t *st = (uint8_t *)x->stage[b];
        for (int p = 0; p < XS_NPART; p++) {
            const uint8_t *src = p % 2 ? ms[p / 2]->scale : (const uint8_t *)ms[p / 2]->w;
            for (size_t o = 0; o < x->len[p]; o += XS_CHUNK)
                x->pieces[np++] = v4cu_xs_piece{st + x->off[p] + o, src + o,
                                           x->len[p] - o < XS_CHUNK ? x->len[p] - o : XS_CHUNK};
        }
    }
    v4_pool_run(x->threads, np, xs_copy_piece, x->pieces);
    for (int j = 0; j < nk; j++) {
        const int k = k0 + j, b = x->next_stage, slot = x->slot[x->miss_at[k]];
        x->next_stage = (b + 1) % XS_NSTAGE;
        cudaError_t e = cudaStreamWaitEvent(x->copy, x->used_ev[slot], 0);  /* no kernel still reads the slot */
        if (e == cudaSuccess)
            e = cudaMemcpyAsync(x->dpool + (size_t)slot * x->slot_bytes, x->stage[b], x->used,
                                cudaMemcpyHostToDevice, x->copy);
        if (e == cudaSuccess)
            e = cudaEventRecord(x->staged[b], x->copy);
        if (e == cudaSuccess)
            e = cudaEventRecord(x->ready[slot], x->copy);
        if (e != cudaSuccess)
            return xs_cuda_fail(x, err, "expert copy to the device", e);
        v4_slot_pool_add_uploaded(x->pool, x->used);
        x->uploaded = k + 1;
    }
    return 0;
}

} /* namespace */

V4CU_XS_API int v4cu_xslots_upload(v4cu_xslots *x, int k, v4_error *err)
{
    if (v4cu_xslots_broken(x, err))
        return -1;
    if (k != x->uploaded || k >= x->nmiss)
        return v4_err_set(err, V4_ERR_INVALID, x->where, "upload of miss %d of %d (next: %d)", k, x->nmiss,
                          x->uploaded);
    return xs_stage_round(x, k, 1, err);
}

V4CU_XS_API int v4cu_xslots_upload_all(v4cu_xslots *x, v4_error *err)
{
    if (v4cu_xslots_broken(x, err))
        return -1;
    for (int k = x->uploaded; k < x->nmiss; k += XS_NSTAGE)
        if (xs_stage_round(x, k, x->nmiss - k < XS_NSTAGE ? x->nmiss - k : XS_NSTAGE, err))
            return -1;
    return 0;
}

V4CU_XS_API uint64_t v4cu_xslots_staging_waits(const v4cu_xslots *x) { return x->staging_waits; }

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
