/* cuda_backend.cu - the CUDA backend (cuda_backend.h): device selection, the device
 * copy cache of weights, per-call scratch, and the linear op's host side.
 *
 * Design: one stream per instance; a linear call uploads x (cudaMemcpy2DAsync from the
 * caller's strided rows into a compact [n][K] buffer), runs the kernels of
 * cuda_linear.cu, downloads y into the caller's strided rows (only the `rows` floats
 * of each vector are written, never y's padding) and synchronizes the stream.
 *
 * Weight cache: entries {host start, host end, device copy} sorted by host start; a
 * lookup takes the last entry starting at or below the pointer and looks back a few
 * entries for one containing the whole range (so row views reuse their matrix's
 * copy); a miss uploads exactly the range asked for.  Every hit compares a
 * 32-word sampled fingerprint of the entry's host bytes with the one taken at upload
 * and re-uploads the entry when it differs (a reused host buffer).  Uploads go through one pinned
 * staging buffer (16 MiB) chunk by chunk (memcpy into it, cudaMemcpyAsync, wait);
 * without pinned memory they fall back to one pageable cudaMemcpyAsync on the backend's
 * stream and a wait (not cudaMemcpy: that runs on the legacy default stream, which the
 * non-blocking stream does not wait for).  Entries live until
 * evicted, v4_cuda_backend_drop_weights or destroy.  Budget (wbudget, 0 = none): each
 * entry has a use tick and the number of the linear call that used it last; a miss
 * that would pass the budget (or whose cudaMalloc fails) evicts the entry with the
 * smallest tick among those not used by the current call, one at a time, with the
 * bf16 forms decoded from it (a linear scan: entries are matrices, a few thousand).
 *
 * Device matrices (V4_MAT_CUDA) come from the backend's GPU expert cache
 * (gpu_experts.cu, owned through impl->tier): linear waits for the slot's ready event
 * on its stream and reads the slot in place.
 *
 * Errors: see cuda_backend.h (NaN outputs, one stderr line, sticky status).  The
 * library does not link against v4core (it fills v4_error itself).
 *
 * Ownership: the instance owns its stream, device buffers, staging buffer and cache;
 * weights and x/y are borrowed per call.  Thread: one driving thread at a time.
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

#include "cu_debug.h"
#include "cuda_backend.h"
#include "cuda_step.h"
#include "cuda_internal.h"
#include "cuda_linear.h"
#include "cuda_fast.h"
#include "cuda_lt.h"

namespace {

constexpr size_t STAGE_BYTES = (size_t)16 << 20;
constexpr int LOOKBACK = 8;

struct wentry {
    uintptr_t h0, h1;
    void *d;
    uint64_t fp;    /* fingerprint of the host bytes at upload time */
    uint64_t used;  /* use tick (LRU) */
    uint64_t call;  /* the linear call that used it last (never evicted during it) */
};

/* The fast mode's bf16 form of a V4_LIN_BF16 weight (FP8, or BF16 in R8), keyed by the
 * device copy it was decoded from. */
struct bentry {
    const void *src;
    int rows, cols, type, r8;
    uint16_t *wb;
};

struct cuda_impl {
    int device;
    cudaStream_t st;
    char name[400];
    wentry *ents;
    size_t n_ents, cap_ents, wbytes;
    void *stage;
    float *dx, *dxs, *dy;
    double *dxq;
    size_t cap_dx, cap_dxq, cap_dxs, cap_dy;
    size_t reuploads;   /* entries refreshed because their host bytes changed */
    size_t wbudget;     /* bound of wbytes, 0 = none */
    size_t wevictions;
    uint64_t wtick, wcall;
    v4cu_tier *tier;    /* GPU expert cache (gpu_experts.h), NULL = none */
    const v4cu_tier_ops *tier_ops;   /* its calls (set with it) */
    v4_cuda_engine *engine;   /* device-resident step (cuda_step.h) owned for its user, NULL = none */
    v4cu_lt *lt;        /* fast numerics: cuBLASLt products (cuda_lt.h), NULL = exact */
    v4_fast_selftest selftest;  /* the fast mode's start-up verdict (kept when lt is dropped) */
    bentry *bents;      /* fast numerics: bf16 weight forms */
    size_t n_bents, cap_bents, bbytes;
    int sync_debug; /* V4_CUDA_SYNC_DEBUG at create (cu_debug.h): wait after each launch */
    int broken;     /* sticky: the context may be unusable */
    int reported;   /* the first failure was printed */
    v4_error first;
};


/* A failure of a call: why (a CUDA error string, or cuBLASLt's message) recorded as
 * the first error, one stderr line, sticky when asked. */
void fail_why(cuda_impl *c, int sticky, const char *what, const char *why, const char *name)
{
    if (!c->first.code)
        v4_err_set(&c->first, V4_ERR_INTERNAL, "cuda backend", "%s: %s%s%s%s", what, why, name ? " (" : "",
                   name ? name : "", name ? ")" : "");
    if (!c->reported) {
        fprintf(stderr, "v4fleet: cuda backend (device %d): %s: %s; this and %s calls return NaN\n", c->device,
                what, why, sticky ? "all later" : "failing");
        c->reported = 1;
    }
    if (sticky)
        c->broken = 1;
}

void fail(cuda_impl *c, int sticky, const char *what, cudaError_t e)
{
    fail_why(c, sticky, what, cudaGetErrorString(e), cudaGetErrorName(e));
}

/* A launcher's result; in the sync debug mode (cu_debug.h) after a wait for the stream,
 * so a kernel's fault is reported under its own name (the caller's `what`). */
cudaError_t launched(const cuda_impl *c, cudaError_t e) { return c->sync_debug ? v4cu_sync_after(c->st, e) : e; }

void fill_nan(int n, int rows, float *y, int ldy)
{
    const uint32_t qnan = 0x7fc00000u;
    float v;
    memcpy(&v, &qnan, 4);
    for (int b = 0; b < n; b++)
        for (int r = 0; r < rows; r++)
            y[(size_t)b * ldy + r] = v;
}

size_t elems_of(const v4_mat *W)
{
    const size_t rows = v4_mat_layout(W) == V4_LAYOUT_R8 ? (size_t)(W->rows + 7) / 8 * 8 : (size_t)W->rows;
    return rows * (size_t)W->cols;
}

size_t wbytes_of(const v4_mat *W)
{
    switch (W->type) {
    case V4_W_FP8: return elems_of(W);
    case V4_W_FP4: return (size_t)W->rows * (size_t)(W->cols / 2);
    case V4_W_BF16: return elems_of(W) * 2;
    case V4_W_F32: return elems_of(W) * 4;
    }
    return 0;
}

size_t sbytes_of(const v4_mat *W)
{
    if (W->type == V4_W_FP8)
        return (size_t)((W->rows + 127) / 128) * (size_t)((W->cols + 127) / 128);
    if (W->type == V4_W_FP4)
        return (size_t)W->rows * (size_t)(W->cols / 32);
    return 0;
}

void drop_bf16(cuda_impl *c)
{
    for (size_t i = 0; i < c->n_bents; i++)
        cudaFree(c->bents[i].wb);
    c->n_bents = 0;
    c->bbytes = 0;
}

void drop_all(cuda_impl *c)
{
    for (size_t i = 0; i < c->n_ents; i++)
        cudaFree(c->ents[i].d);
    c->n_ents = 0;
    c->wbytes = 0;
    drop_bf16(c);       /* decoded from the copies just freed */
}

/* Evict the least recently used entry not used by the current call, with the bf16 forms
 * decoded from it.  0, or -1 when every entry belongs to the current call. */
int evict_one(cuda_impl *c)
{
    size_t v = c->n_ents;
    for (size_t i = 0; i < c->n_ents; i++)
        if (c->ents[i].call != c->wcall && (v == c->n_ents || c->ents[i].used < c->ents[v].used))
            v = i;
    if (v == c->n_ents)
        return -1;
    const wentry e = c->ents[v];
    const uintptr_t d0 = (uintptr_t)e.d, d1 = d0 + (e.h1 - e.h0);
    size_t k = 0;
    for (size_t i = 0; i < c->n_bents; i++) {
        const uintptr_t s = (uintptr_t)c->bents[i].src;
        if (s >= d0 && s < d1) {
            cudaFree(c->bents[i].wb);
            c->bbytes -= sizeof(uint16_t) * (size_t)c->bents[i].rows * (size_t)c->bents[i].cols;
        } else {
            c->bents[k++] = c->bents[i];
        }
    }
    c->n_bents = k;
    cudaFree(e.d);
    memmove(&c->ents[v], &c->ents[v + 1], (c->n_ents - v - 1) * sizeof c->ents[0]);
    c->n_ents--;
    c->wbytes -= e.h1 - e.h0;
    c->wevictions++;
    return 0;
}

/* first index with h0 > p */
size_t upper(const cuda_impl *c, uintptr_t p)
{
    size_t lo = 0, hi = c->n_ents;
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        if (c->ents[mid].h0 <= p)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

cudaError_t upload(cuda_impl *c, void *d, const void *h, size_t bytes)
{
    if (!c->stage) {    /* pageable: still on c->st (non-blocking, it would not wait for the legacy stream) */
        cudaError_t e = cudaMemcpyAsync(d, h, bytes, cudaMemcpyHostToDevice, c->st);
        return e == cudaSuccess ? cudaStreamSynchronize(c->st) : e;
    }
    for (size_t off = 0; off < bytes; off += STAGE_BYTES) {
        const size_t len = bytes - off < STAGE_BYTES ? bytes - off : STAGE_BYTES;
        memcpy(c->stage, (const uint8_t *)h + off, len);
        cudaError_t e = cudaMemcpyAsync((uint8_t *)d + off, c->stage, len, cudaMemcpyHostToDevice, c->st);
        if (e == cudaSuccess)
            e = cudaStreamSynchronize(c->st);
        if (e != cudaSuccess)
            return e;
    }
    return cudaSuccess;
}

/* A cheap fingerprint of host bytes: 32 words sampled evenly (first and last
 * included).  It catches a host buffer reused for other weights (e.g. a paged-expert
 * slot refilled with another expert) without reading the whole range; it is a
 * heuristic, not a guarantee (see cuda_backend.h). */
uint64_t fingerprint(const void *h, size_t bytes)
{
    const uint8_t *b = (const uint8_t *)h;
    uint64_t f = 0x9e3779b97f4a7c15ull ^ bytes;
    if (bytes < 8) {
        for (size_t i = 0; i < bytes; i++)
            f = (f ^ b[i]) * 0x100000001b3ull;
        return f;
    }
    for (size_t i = 0; i < 32; i++) {
        uint64_t v;
        memcpy(&v, b + (bytes - 8) * i / 31, 8);
        f = (f ^ v) * 0x100000001b3ull;
        f ^= f >> 29;
    }
    return f;
}

/* Device address of the host range [h, h+bytes); uploads on a miss, re-uploads an
 * entry whose host bytes changed.  NULL on failure (recorded in c). */
const void *dev_of(cuda_impl *c, const void *h, size_t bytes)
{
    const uintptr_t p = (uintptr_t)h, q = p + bytes;
    size_t i = upper(c, p);
    for (int k = 0; k < LOOKBACK && i > 0; k++, i--) {
        wentry *e = &c->ents[i - 1];
        if (e->h0 <= p && q <= e->h1) {
            const uint64_t fp = fingerprint((const void *)e->h0, e->h1 - e->h0);
            if (fp != e->fp) {
                cudaError_t err = upload(c, e->d, (const void *)e->h0, e->h1 - e->h0);
                if (err != cudaSuccess) {
                    fail(c, 1, "weight re-upload: copy", err);
                    return NULL;
                }
                e->fp = fp;
                c->reuploads++;
                drop_bf16(c);   /* a form decoded from the old bytes may exist */
            }
            e->used = ++c->wtick;
            e->call = c->wcall;
            return (const uint8_t *)e->d + (p - e->h0);
        }
    }
    if (c->wbudget) {
        while (c->wbytes + bytes > c->wbudget && evict_one(c) == 0) {
        }
        if (c->wbytes + bytes > c->wbudget) {
            char why[200];
            snprintf(why, sizeof why, "the budget of %zu bytes (V4_GPU_WEIGHT_MEM) cannot hold one product's weights "
                     "(%zu bytes held by this call, %zu more needed)", c->wbudget, c->wbytes, bytes);
            fail_why(c, 0, "weight upload", why, NULL);
            return NULL;
        }
    }
    void *d = NULL;
    cudaError_t e = cudaMalloc(&d, bytes ? bytes : 1);
    while (e != cudaSuccess) {      /* make room: the least recently used copies go first */
        (void)cudaGetLastError();
        if (evict_one(c))
            break;
        e = cudaMalloc(&d, bytes ? bytes : 1);
    }
    if (e != cudaSuccess) {
        (void)cudaGetLastError();
        fail(c, 0, "weight upload: cudaMalloc", e);
        return NULL;
    }
    e = upload(c, d, h, bytes);
    if (e != cudaSuccess) {
        cudaFree(d);
        fail(c, 1, "weight upload: copy", e);
        return NULL;
    }
    if (c->n_ents == c->cap_ents) {
        size_t nc = c->cap_ents ? c->cap_ents * 2 : 256;
        wentry *ne = (wentry *)realloc(c->ents, nc * sizeof *ne);
        if (!ne) {
            cudaFree(d);
            fail(c, 0, "weight cache index", cudaErrorMemoryAllocation);
            return NULL;
        }
        c->ents = ne;
        c->cap_ents = nc;
    }
    const size_t at = upper(c, p);
    memmove(&c->ents[at + 1], &c->ents[at], (c->n_ents - at) * sizeof c->ents[0]);
    c->ents[at] = wentry{p, q, d, fingerprint(h, bytes), ++c->wtick, c->wcall};
    c->n_ents++;
    c->wbytes += bytes;
    return d;
}

template <typename T>
int ensure(cuda_impl *c, T **buf, size_t *cap, size_t n)
{
    if (n <= *cap)
        return 0;
    cudaFree(*buf);
    *buf = NULL;
    *cap = 0;
    cudaError_t e = cudaMalloc((void **)buf, n * sizeof(T));
    if (e != cudaSuccess) {
        (void)cudaGetLastError();
        *buf = NULL;
        fail(c, 0, "scratch cudaMalloc", e);
        return -1;
    }
    *cap = n;
    return 0;
}

/* The bf16 row-major form of a V4_LIN_BF16 weight whose device copy is dw: dw itself
 * for a row-major BF16 weight, else a decoded copy (cached; NULL: none, or it could
 * not be made, and the exact kernel runs). */
const uint16_t *bf16_form(cuda_impl *c, const v4_mat *W, const void *dw, const uint8_t *ds)
{
    const int r8 = v4_mat_layout(W) == V4_LAYOUT_R8;
    if (W->type == V4_W_BF16 && !r8)
        return (const uint16_t *)dw;
    if (W->type != V4_W_BF16 && W->type != V4_W_FP8)
        return NULL;
    for (size_t i = 0; i < c->n_bents; i++) {
        const bentry *b = &c->bents[i];
        if (b->src == dw && b->rows == W->rows && b->cols == W->cols && b->type == (int)W->type && b->r8 == r8)
            return b->wb;
    }
    if (c->n_bents == c->cap_bents) {
        const size_t nc = c->cap_bents ? 2 * c->cap_bents : 64;
        bentry *nb = (bentry *)realloc(c->bents, nc * sizeof *nb);
        if (!nb)
            return NULL;
        c->bents = nb;
        c->cap_bents = nc;
    }
    const size_t bytes = sizeof(uint16_t) * (size_t)W->rows * (size_t)W->cols;
    uint16_t *wb = NULL;
    if (cudaMalloc((void **)&wb, bytes) != cudaSuccess) {
        (void)cudaGetLastError();
        return NULL;        /* no room: the exact kernel needs none */
    }
    cudaError_t e = launched(c, v4cu_fast_weight_bf16((int)W->type, r8, dw, ds, W->rows, W->cols, wb, c->st));
    if (e != cudaSuccess) {
        cudaFree(wb);
        fail(c, 1, "fast mode: bf16 weight decode (kernel v4cu_fast_weight_bf16)", e);
        return NULL;
    }
    c->bents[c->n_bents++] = bentry{dw, W->rows, W->cols, (int)W->type, r8, wb};
    c->bbytes += bytes;
    return wb;
}

/* The fast mode's tensor-core product into c->dy from c->dx: 0 done, 1 not taken (run
 * the exact kernel), -1 failed (recorded). */
int fast_product(cuda_impl *c, const v4_mat *W, v4_lin_mode mode, int quant_ok, const void *dw, const uint8_t *ds,
                 int n)
{
    if (!c->lt)
        return 1;
    int r = 1;
    if (quant_ok)
        r = v4cu_lt_quant(c->lt, (int)W->type, (const uint8_t *)dw, ds, W->rows, W->cols, n, c->dx, W->cols, c->dy,
                          c->st);
    else if (mode == V4_LIN_BF16 && !v4_mat_is_device(W)) {
        const uint16_t *wb = bf16_form(c, W, dw, ds);
        if (c->broken)
            return -1;
        if (wb)
            r = v4cu_lt_bf16(c->lt, wb, W->rows, W->cols, n, c->dx, W->cols, c->dy, c->st);
    }
    if (r < 0)
        fail_why(c, 1, "fast mode", v4cu_lt_error(c->lt), NULL);
    return r;
}

void cuda_linear(v4_backend *be, const v4_mat *W, v4_lin_mode mode, int n, const float *x, int ldx, float *y,
                 int ldy)
{
    cuda_impl *c = (cuda_impl *)be->impl;
    if (n <= 0 || W->rows <= 0)
        return;
    const int rows = W->rows, K = W->cols;
    const v4_layout lay = v4_mat_layout(W);
    const int quant_ok = mode == V4_LIN_QUANT && lay == V4_LAYOUT_ROWMAJOR &&
                         (W->type == V4_W_FP8 || W->type == V4_W_FP4);
    const int exact_ok = (mode == V4_LIN_EXACT || mode == V4_LIN_BF16) && (lay == V4_LAYOUT_ROWMAJOR || lay == V4_LAYOUT_R8) &&
                         (W->type == V4_W_FP8 || W->type == V4_W_BF16 || W->type == V4_W_F32);
    if (c->broken || !(quant_ok || exact_ok) || K < 0) {
        fill_nan(n, rows, y, ldy);
        return;
    }
    cudaError_t e = cudaSetDevice(c->device);
    if (e != cudaSuccess) {
        fail(c, 1, "cudaSetDevice", e);
        fill_nan(n, rows, y, ldy);
        return;
    }
    c->wcall++;     /* this call's weight copies are not evicted while it runs */
    const void *dw;
    const size_t sb = sbytes_of(W);
    const uint8_t *ds;
    if (v4_mat_is_device(W)) {
        /* a slot of the GPU expert cache: wait for its copy, then read it in place */
        cudaEvent_t ready = NULL;
        if (!c->tier || c->tier_ops->ready(c->tier, W, &ready)) {
            fail(c, 0, "a device matrix that is not in this backend's GPU expert cache", cudaErrorInvalidValue);
            fill_nan(n, rows, y, ldy);
            return;
        }
        e = cudaStreamWaitEvent(c->st, ready, 0);
        if (e != cudaSuccess) {
            fail(c, 1, "wait for an expert's copy", e);
            fill_nan(n, rows, y, ldy);
            return;
        }
        dw = W->w;
        ds = W->scale;
    } else {
        dw = dev_of(c, W->w, wbytes_of(W));
        ds = sb ? (const uint8_t *)dev_of(c, W->scale, sb) : NULL;
    }
    const size_t nk = (size_t)n * (size_t)K;
    if (!dw || (sb && !ds) || ensure(c, &c->dx, &c->cap_dx, nk + 1) ||
        ensure(c, &c->dy, &c->cap_dy, (size_t)n * (size_t)rows)) {
        fill_nan(n, rows, y, ldy);
        return;
    }
    const char *what = "copy x to the device";
    if (K > 0)
        e = cudaMemcpy2DAsync(c->dx, sizeof(float) * (size_t)K, x, sizeof(float) * (size_t)ldx,
                              sizeof(float) * (size_t)K, (size_t)n, cudaMemcpyHostToDevice, c->st);
    int fr = 1;
    if (e == cudaSuccess) {
        fr = fast_product(c, W, mode, quant_ok, dw, ds, n);
        if (fr < 0) {
            fill_nan(n, rows, y, ldy);
            return;
        }
    }
    if (fr == 0) {
        what = "fast-mode product";
        e = launched(c, cudaSuccess);   /* the sync debug mode: cuda_lt.cu names its kernels first */
    } else if (e == cudaSuccess && quant_ok) {
        const size_t nkb = (size_t)(K / 128);
        if (ensure(c, &c->dxq, &c->cap_dxq, nk + 1) || ensure(c, &c->dxs, &c->cap_dxs, (size_t)n * nkb + 1)) {
            fill_nan(n, rows, y, ldy);
            return;
        }
        what = "activation quantization kernel (v4cu_act_quant)";
        e = launched(c, v4cu_act_quant(c->dx, n, K, c->dxq, c->dxs, c->st));
        if (e == cudaSuccess) {
            what = W->type == V4_W_FP8 ? "fp8 linear kernel (v4cu_quant_fp8)" : "fp4 linear kernel (v4cu_quant_fp4)";
            e = launched(c, (W->type == V4_W_FP8 ? v4cu_quant_fp8 : v4cu_quant_fp4)(
                                (const uint8_t *)dw, ds, rows, K, n, c->dxq, c->dxs, c->dy, c->st));
        }
    } else if (e == cudaSuccess) {
        what = "exact linear kernel (v4cu_exact)";
        e = launched(c, v4cu_exact((int)W->type, lay == V4_LAYOUT_R8, dw, ds, rows, K, n, c->dx, c->dy, c->st));
    }
    if (e == cudaSuccess) {
        what = "copy y to the host";
        e = cudaMemcpy2DAsync(y, sizeof(float) * (size_t)ldy, c->dy, sizeof(float) * (size_t)rows,
                              sizeof(float) * (size_t)rows, (size_t)n, cudaMemcpyDeviceToHost, c->st);
    }
    if (e == cudaSuccess) {
        what = "stream synchronize (a kernel failed)";
        e = cudaStreamSynchronize(c->st);
    }
    if (e != cudaSuccess) {
        fail(c, 1, what, e);
        fill_nan(n, rows, y, ldy);
    }
}

void cuda_destroy(v4_backend *be)
{
    if (!be)
        return;
    cuda_impl *c = (cuda_impl *)be->impl;
    if (c) {
        cudaSetDevice(c->device);
        if (c->st)
            cudaStreamSynchronize(c->st);
        v4_cuda_engine_free(c->engine);
        v4cu_lt_free(c->lt);
        if (c->tier)
            c->tier_ops->free(c->tier);
        drop_all(c);
        free(c->ents);
        free(c->bents);
        cudaFree(c->dx);
        cudaFree(c->dxq);
        cudaFree(c->dxs);
        cudaFree(c->dy);
        if (c->stage)
            cudaFreeHost(c->stage);
        if (c->st)
            cudaStreamDestroy(c->st);
        free(c);
    }
    free(be);
}

const v4_backend_ops cuda_ops = {"cuda", cuda_linear, cuda_destroy, NULL};

} /* namespace */

int v4cu_is_cuda(const v4_backend *be)
{
    return be && be->ops == &cuda_ops;
}

int v4cu_device(const v4_backend *be)
{
    return ((const cuda_impl *)be->impl)->device;
}

cudaStream_t v4cu_stream(const v4_backend *be)
{
    return ((const cuda_impl *)be->impl)->st;
}

v4cu_tier **v4cu_tier_of(v4_backend *be)
{
    return &((cuda_impl *)be->impl)->tier;
}

void v4cu_tier_ops_set(v4_backend *be, const v4cu_tier_ops *ops)
{
    ((cuda_impl *)be->impl)->tier_ops = ops;
}

const v4cu_tier *v4cu_tier_of_const(const v4_backend *be)
{
    return ((const cuda_impl *)be->impl)->tier;
}

size_t v4cu_wbytes(const v4_mat *W)
{
    return wbytes_of(W);
}

size_t v4cu_sbytes(const v4_mat *W)
{
    return sbytes_of(W);
}

extern "C" int v4_cuda_device_count(char *why, size_t n)
{
    int count = 0;
    cudaError_t e = cudaGetDeviceCount(&count);
    if (e != cudaSuccess) {
        (void)cudaGetLastError();
        if (why && n)
            snprintf(why, n, "no usable CUDA device: %s (%s)", cudaGetErrorString(e), cudaGetErrorName(e));
        return 0;
    }
    if (count == 0 && why && n)
        snprintf(why, n, "no CUDA device present");
    return count;
}

extern "C" v4_backend *v4_cuda_backend_create(int device, v4_error *err)
{
    return v4_cuda_backend_create_ex(device, 0, err);
}

extern "C" v4_backend *v4_cuda_backend_create_ex(int device, int fast, v4_error *err)
{
    char why[256];
    const int count = v4_cuda_device_count(why, sizeof why);
    if (count <= 0) {
        v4_err_set(err, V4_ERR_INVALID, "cuda backend", "%s", why);
        return NULL;
    }
    if (device < 0 || device >= count) {
        v4_err_set(err, V4_ERR_INVALID, "cuda backend", "device %d does not exist (%d CUDA device%s)", device, count,
                   count == 1 ? "" : "s");
        return NULL;
    }
    cudaDeviceProp prop;
    cudaError_t e = cudaSetDevice(device);
    if (e == cudaSuccess)
        e = cudaGetDeviceProperties(&prop, device);
    if (e != cudaSuccess) {
        v4_err_set(err, V4_ERR_INVALID, "cuda backend", "device %d: %s", device, cudaGetErrorString(e));
        return NULL;
    }
    if (prop.major < 7) {
        v4_err_set(err, V4_ERR_INVALID, "cuda backend", "device %d (%s) has compute capability %d.%d; 7.0+ needed",
                   device, prop.name, prop.major, prop.minor);
        return NULL;
    }
    v4_backend *be = (v4_backend *)calloc(1, sizeof *be);
    cuda_impl *c = (cuda_impl *)calloc(1, sizeof *c);
    if (!be || !c) {
        free(be);
        free(c);
        v4_err_set(err, V4_ERR_NOMEM, "cuda backend", "out of memory");
        return NULL;
    }
    c->device = device;
    c->sync_debug = v4cu_sync_debug_env();
    if (c->sync_debug)
        fprintf(stderr, "v4fleet: cuda backend (device %d): V4_CUDA_SYNC_DEBUG: a stream wait after every kernel\n",
                device);
    snprintf(c->name, sizeof c->name, "%.255s (sm_%d%d, %.1f GiB)", prop.name, prop.major, prop.minor,
             (double)prop.totalGlobalMem / (double)(1ull << 30));
    e = cudaStreamCreateWithFlags(&c->st, cudaStreamNonBlocking);
    if (e != cudaSuccess) {
        v4_err_set(err, V4_ERR_INVALID, "cuda backend", "device %d: cudaStreamCreate: %s", device,
                   cudaGetErrorString(e));
        free(c);
        free(be);
        return NULL;
    }
    if (cudaHostAlloc(&c->stage, STAGE_BYTES, cudaHostAllocDefault) != cudaSuccess) {
        (void)cudaGetLastError();
        c->stage = NULL;    /* pageable uploads instead */
    }
    if (fast) {
        c->lt = v4cu_lt_create(c->st, &c->selftest);
        if (!c->lt)
            fprintf(stderr, "v4fleet: cuda backend (device %d): fast numerics unavailable (status %s: %s); exact "
                            "products\n", device, c->selftest.status, c->selftest.detail);
        else if (!v4cu_lt_ok(c->lt)) {
            v4cu_lt_free(c->lt);        /* the self-test said why on stderr */
            c->lt = NULL;
        }
    }
    be->ops = &cuda_ops;
    be->impl = c;
    return be;
}

extern "C" int v4_cuda_backend_status(const v4_backend *be, v4_error *err)
{
    const cuda_impl *c = (const cuda_impl *)be->impl;
    if (!c->first.code)
        return 0;
    if (err)
        *err = c->first;
    return -1;
}

extern "C" const char *v4_cuda_backend_device_name(const v4_backend *be)
{
    return ((const cuda_impl *)be->impl)->name;
}

extern "C" size_t v4_cuda_backend_weight_bytes(const v4_backend *be)
{
    return ((const cuda_impl *)be->impl)->wbytes;
}

extern "C" int v4_cuda_backend_fast(const v4_backend *be)
{
    return ((const cuda_impl *)be->impl)->lt != NULL;
}

extern "C" void v4_cuda_backend_selftest(const v4_backend *be, v4_fast_selftest *out)
{
    *out = ((const cuda_impl *)be->impl)->selftest;
}

extern "C" void *v4_cuda_backend_lt(const v4_backend *be)
{
    return ((const cuda_impl *)be->impl)->lt;
}

extern "C" size_t v4_cuda_backend_reuploads(const v4_backend *be)
{
    return ((const cuda_impl *)be->impl)->reuploads;
}

extern "C" void v4_cuda_backend_own_engine(v4_backend *be, v4_cuda_engine *e)
{
    cuda_impl *c = (cuda_impl *)be->impl;
    v4_cuda_engine_free(c->engine);
    c->engine = e;
}

extern "C" size_t v4_cuda_backend_engine_bytes(const v4_backend *be)
{
    return v4_cuda_engine_bytes(((const cuda_impl *)be->impl)->engine);
}

extern "C" const v4_cuda_engine *v4_cuda_backend_engine(const v4_backend *be)
{
    return ((const cuda_impl *)be->impl)->engine;
}

extern "C" int v4_cuda_backend_mem_info(const v4_backend *be, size_t *free_b, size_t *total_b)
{
    const cuda_impl *c = (const cuda_impl *)be->impl;
    return cudaSetDevice(c->device) == cudaSuccess && cudaMemGetInfo(free_b, total_b) == cudaSuccess ? 0 : -1;
}

extern "C" void v4_cuda_backend_set_weight_budget(v4_backend *be, size_t bytes)
{
    ((cuda_impl *)be->impl)->wbudget = bytes;
}

extern "C" size_t v4_cuda_backend_weight_evictions(const v4_backend *be)
{
    return ((const cuda_impl *)be->impl)->wevictions;
}

extern "C" void v4_cuda_backend_drop_weights(v4_backend *be)
{
    cuda_impl *c = (cuda_impl *)be->impl;
    cudaSetDevice(c->device);
    cudaStreamSynchronize(c->st);
    drop_all(c);
}
