/* cuda_moe.cu - the routed experts of a MoE layer on the device without a host round
 * trip (see cuda_moe.h): the list builder, the gather, the launch sequence of the
 * grouped products (cuda_linear.cu) and the ordered combination.
 *
 * The list builder is one block: counts per expert (a thread per expert), an
 * exclusive scan by thread 0 (E is a few hundred), then a thread per pair computes its
 * slot start[x] + (pairs before it with the same expert) - no atomics, so the order is
 * the host loop's by construction - and a thread per row sorts its K slots.  Shared
 * memory: V4CU_MOE_MAX_PAIRS and V4CU_MOE_MAX_EXPERTS int32 arrays (40 KiB).
 *
 * Ownership: kernels read/write only the buffers passed.  Thread: the launching one.
 */
#include <stdint.h>

#include "cu_launch.h"
#include "cuda_linear.h"
#include "cuda_mma.h"
#include "cuda_moe.h"
#include "cuda_num.cuh"
#include "cuda_ops.h"

namespace {

constexpr int MOE_NT = 128;     /* threads per block of the element-wise kernels */
constexpr int LIST_NT = 256;    /* threads of the list builder's block */

__global__ void __launch_bounds__(LIST_NT)
k_moe_lists(const int32_t *ids, const float *w, int n, int K, int E, int nbt, int32_t *rows, float *wt,
            int32_t *eid, int32_t *tile, int32_t *comb, int32_t *start, int32_t *active, int32_t *nact, int32_t *tl,
            int ntl)
{
    __shared__ int32_t s_ids[V4CU_MOE_MAX_PAIRS], s_pos[V4CU_MOE_MAX_PAIRS];
    __shared__ int32_t s_cnt[V4CU_MOE_MAX_EXPERTS], s_start[V4CU_MOE_MAX_EXPERTS + 1];
    const int t = threadIdx.x, T = blockDim.x, P = n * K;
    for (int p = t; p < P; p += T) {
        const int32_t x = ids[p];
        s_ids[p] = x >= 0 && x < E ? x : -1;
    }
    __syncthreads();
    for (int x = t; x < E; x += T) {
        int c = 0;
        for (int p = 0; p < P; p++)
            c += s_ids[p] == x;
        s_cnt[x] = c;
    }
    __syncthreads();
    if (t == 0) {
        int off = 0, na = 0;
        for (int x = 0; x < E; x++) {
            s_start[x] = start[x] = off;
            if (s_cnt[x])
                active[na++] = x;
            off += s_cnt[x];
        }
        s_start[E] = start[E] = off;
        *nact = na;
        if (tl) {   /* the tiles' first slots, ascending (the tensor-core path's list) */
            int nt = 0;
            for (int x = 0; x < E; x++)
                for (int r = 0; r < s_cnt[x] && nt < ntl; r += nbt)
                    tl[nt++] = s_start[x] + r;
            for (; nt < ntl; nt++)
                tl[nt] = -1;
        }
    }
    __syncthreads();
    /* pair p = b*K + k: its rank among its expert's pairs is the count of earlier p
     * with the same expert, i.e. rows ascending then k (the host loop's order) */
    for (int p = t; p < P; p += T) {
        const int x = s_ids[p];
        if (x < 0) {
            s_pos[p] = -1;
            continue;
        }
        int r = 0;
        for (int q = 0; q < p; q++)
            r += s_ids[q] == x;
        const int s = s_start[x] + r, left = s_cnt[x] - r;
        s_pos[p] = s;
        rows[s] = p / K;
        wt[s] = w[p];
        eid[s] = x;
        tile[s] = r % nbt == 0 ? (left < nbt ? left : nbt) : 0;
    }
    for (int s = s_start[E] + t; s < P; s += T) {   /* only with dropped ids */
        rows[s] = -1;
        wt[s] = 0.0f;
        eid[s] = 0;
        tile[s] = 0;
    }
    __syncthreads();
    /* row b's slots ascending: expert id, then k (the order of the scatter-adds) */
    for (int b = t; b < n; b += T) {
        int32_t *cb = comb + (size_t)b * K;
        int m = 0;
        for (int k = 0; k < K; k++) {
            const int s = s_pos[b * K + k];
            if (s < 0)
                continue;
            int j = m++;
            for (; j > 0 && cb[j - 1] > s; j--)
                cb[j] = cb[j - 1];
            cb[j] = s;
        }
        for (; m < K; m++)
            cb[m] = -1;
    }
}

/* gx[s] = x[rows[s]] (zeros for an unused slot). */
__global__ void k_moe_gather(const float *x, int d, const int32_t *rows, float *gx)
{
    const int s = blockIdx.y, i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= d)
        return;
    const int b = rows[s];
    gx[(size_t)s * d + i] = b >= 0 ? x[(size_t)b * d + i] : 0.0f;
}

/* The sum over row b's experts in ascending id from +0 (k_scatter_add's steps), then
 * bf16(y + shared) (k_add_bf16's). */
__global__ void k_moe_combine(const float *go, int d, const int32_t *comb, int K, const float *shared, float *out)
{
    const int b = blockIdx.y, i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= d)
        return;
    float y = 0.0f;
    for (int j = 0; j < K; j++) {
        const int s = comb[(size_t)b * K + j];
        if (s < 0)
            break;
        y = __fadd_rn(y, go[(size_t)s * d + i]);
    }
    const size_t o = (size_t)b * d + i;
    out[o] = v4d_bf16(__fadd_rn(y, shared[o]));
}

} /* namespace */

extern "C" cudaError_t v4cu_moe_lists(const int32_t *ids, const float *w, int n, int K, int E, int nbt,
                                      const v4cu_moe_bufs *B, cudaStream_t st)
{
    if (n < 1 || K < 1 || (long)n * K > V4CU_MOE_MAX_PAIRS || E < 1 || E > V4CU_MOE_MAX_EXPERTS ||
        (nbt != 1 && nbt != 4 && nbt != V4CU_MMA_ROWS))
        return cudaErrorInvalidValue;
    int32_t *tl = nbt == V4CU_MMA_ROWS ? B->tl : NULL;
    V4CU_LAUNCH(k_moe_lists, 1, LIST_NT, st, ids, w, n, K, E, nbt, B->rows, B->wt, B->eid, B->tile, B->comb,
                B->start, B->active, B->nact, tl, tl ? v4cu_mma_tile_bound(n * K, E) : 0);
    return cudaGetLastError();
}

/* The routed experts' sequence (lists, gather, quantize, w1, w3, SwiGLU, quantize, w2)
 * with the exact grouped products, or with the tensor-core ones (mma: tiles of
 * V4CU_MMA_ROWS and the tile list, activations also as bf16). */
static cudaError_t routed(const v4cu_moe_bufs *B, const uint8_t *const *tab, int fp4, int E, int d, int I, float lim,
                          const int32_t *ids, const float *w, const float *x, int n, int K, int mma, cudaStream_t st)
{
    /* exact: one row per tile when no expert can have two */
    const int P = n * K, nbt = mma ? V4CU_MMA_ROWS : n == 1 ? 1 : 4, ntl = v4cu_mma_tile_bound(P, E);
    /* in [P][cols] -> xq/xs (and xb for the tensor cores) */
    auto quant = [&](const float *in, int cols) {
        cudaError_t r = v4cu_act_quant(in, P, cols, B->xq, B->xs, st);
        return r == cudaSuccess && mma ? v4cu_mma_act(B->xq, B->xs, P, cols, B->xb, st) : r;
    };
    /* matrix k (0 w1, 1 w3, 2 w2: rows x cols) on the quantized activations into y */
    auto prod = [&](int k, int rows, int cols, float *y) {
        const uint8_t *const *wt = tab + (size_t)(2 * k) * E, *const *sc = tab + (size_t)(2 * k + 1) * E;
        return mma ? v4cu_mma_grouped(fp4, wt, sc, B->eid, B->tile, B->tl, ntl, rows, cols, B->xb, y, st)
                   : v4cu_quant_grouped(fp4, nbt, wt, sc, B->eid, B->tile, rows, cols, P, B->xq, B->xs, y, st);
    };
    cudaError_t rc = v4cu_moe_lists(ids, w, n, K, E, nbt, B, st);   /* (mma: also the tile list) */
    if (rc != cudaSuccess)
        return rc;
    V4CU_LAUNCH(k_moe_gather, dim3(v4cu_cdiv(d, MOE_NT), (unsigned)P), MOE_NT, st, x, d, B->rows, B->gx);
    if ((rc = cudaGetLastError()) != cudaSuccess || (rc = quant(B->gx, d)) != cudaSuccess ||
        (rc = prod(0, I, d, B->gg)) != cudaSuccess || (rc = prod(1, I, d, B->gu)) != cudaSuccess ||
        (rc = v4cu_swiglu(B->gg, B->gu, I, lim, B->wt, B->gh, P, st)) != cudaSuccess ||
        (rc = quant(B->gh, I)) != cudaSuccess)
        return rc;
    return prod(2, d, I, B->go);
}

extern "C" cudaError_t v4cu_moe_routed(const v4cu_moe_bufs *B, const uint8_t *const *tab, int fp4, int E, int d,
                                       int I, float lim, const int32_t *ids, const float *w, const float *x, int n,
                                       int K, cudaStream_t st)
{
    return routed(B, tab, fp4, E, d, I, lim, ids, w, x, n, K, 0, st);
}

extern "C" cudaError_t v4cu_moe_routed_mma(const v4cu_moe_bufs *B, const uint8_t *const *tab, int fp4, int E,
                                           int d, int I, float lim, const int32_t *ids, const float *w,
                                           const float *x, int n, int K, cudaStream_t st)
{
    return routed(B, tab, fp4, E, d, I, lim, ids, w, x, n, K, 1, st);
}

extern "C" cudaError_t v4cu_gather_rows(const float *x, int d, const int32_t *rows, int m, float *out,
                                        cudaStream_t st)
{
    if (m < 1)
        return cudaSuccess;
    V4CU_LAUNCH(k_moe_gather, dim3(v4cu_cdiv(d, MOE_NT), (unsigned)m), MOE_NT, st, x, d, rows, out);
    return cudaGetLastError();
}

extern "C" cudaError_t v4cu_moe_combine(const float *go, int d, const int32_t *comb, int n, int K,
                                        const float *shared, float *out, cudaStream_t st)
{
    V4CU_LAUNCH(k_moe_combine, dim3(v4cu_cdiv(d, MOE_NT), (unsigned)n), MOE_NT, st, go, d, comb, K, shared, out);
    return cudaGetLastError();
}
