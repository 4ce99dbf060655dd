/* cuda_attn.cu - attention-path kernels (see cuda_attn.h for the contract).  Read each
 * kernel next to the C function it names in kernels/v4 (attention.c, compressor.c,
 * indexer.c, ops.c): the arithmetic is the same expression in the same order.
 * Ownership: kernels touch only their arguments.  Thread: launchers from the caller's
 * thread; kernels are stream-ordered.
 */
#include <math.h>
#include <stdint.h>

#include "cuda_attn.h"
#include "cu_launch.h"
#include "cuda_num.cuh"

namespace {

constexpr int AT = 128;         /* threads per attention / head-RMS block */
constexpr int CHUNK = 64;       /* candidates per softmax chunk (the reference's) */
constexpr int DMAX = 1024 / AT; /* head dims per thread */
constexpr int POOL_MAX = 512;   /* compressor candidates per channel */

/* x . y accumulated in double left to right, rounded to f32 (ops.c v4_dot). */
__device__ float dot_lr(const float *x, const float *y, int n)
{
    double s = 0.0;
    for (int i = 0; i < n; i++)
        s += (double)x[i] * (double)y[i];
    return (float)s;
}

/* v4_head_rms_bf16; one block of AT threads per vector. */
__global__ void k_head_rms_bf16(float *q, int hd, float eps)
{
    __shared__ double red[AT / 32];
    float *v = q + (size_t)blockIdx.x * hd;
    double ss = 0.0;
    for (int i = threadIdx.x; i < hd; i += AT)
        ss += (double)v4d_bf16(v[i] * v[i]);
    for (int o = 16; o > 0; o >>= 1)
        ss += __shfl_xor_sync(0xffffffffu, ss, o);
    if ((threadIdx.x & 31) == 0)
        red[threadIdx.x >> 5] = ss;
    __syncthreads();
    double tot = 0.0;
    for (int w = 0; w < AT / 32; w++)
        tot += red[w];
    const float ms = v4d_bf16((float)tot / (float)hd);
    const float den = v4d_bf16(ms + eps);
    const float g = v4d_bf16(v4d_rsqrt(den));
    for (int i = threadIdx.x; i < hd; i += AT)
        v[i] = v4d_bf16(v[i] * g);
}

/* v4_sparse_attn_head; one block of AT threads per (head, row).  Per chunk, thread
 * t < 64 scores candidate c0 + t; thread 0 compacts the valid ones in order and does
 * the order-sensitive softmax bookkeeping; every thread then accumulates its head
 * dims over the valid candidates in order. */
__global__ void k_sparse_attn(const float *q, const float *const *cand, const int32_t *len, int lmax, int H, int hd,
                              float scale, const float *sink, float *o)
{
    __shared__ float sc_all[CHUNK], s_sc[CHUNK], pb[CHUNK];
    __shared__ int ok_all[CHUNK], s_idx[CHUNK];
    __shared__ float s_m, s_l, s_f;
    __shared__ int s_nv, s_skip;
    const int h = blockIdx.x, b = blockIdx.y, t = threadIdx.x;
    const float *qh = q + ((size_t)b * H + h) * hd;
    const float *const *cb = cand + (size_t)b * lmax;
    const int L = len[b];
    float acc[DMAX];
    for (int k = 0; k < DMAX; k++)
        acc[k] = 0.0f;
    if (t == 0) {
        s_m = -INFINITY;
        s_l = 0.0f;
    }
    __syncthreads();
    for (int c0 = 0; c0 < L; c0 += CHUNK) {
        const int c1 = c0 + CHUNK < L ? c0 + CHUNK : L;
        if (t < c1 - c0) {
            const float *kv = cb[c0 + t];
            ok_all[t] = kv != nullptr;
            sc_all[t] = kv ? dot_lr(qh, kv, hd) * scale : 0.0f;
        }
        __syncthreads();
        if (t == 0) {
            int nv = 0;
            float rowmax = -INFINITY;
            for (int c = 0; c < c1 - c0; c++) {
                if (!ok_all[c])
                    continue;
                s_idx[nv] = c;
                s_sc[nv] = sc_all[c];
                if (sc_all[c] > rowmax)
                    rowmax = sc_all[c];
                nv++;
            }
            const float m = s_m, mnew = rowmax > m ? rowmax : m;
            s_nv = nv;
            s_skip = nv == 0 || mnew == -INFINITY;
            if (!s_skip) {
                const float f = v4d_expf(m - mnew);
                double psum = 0.0;
                for (int c = 0; c < nv; c++) {
                    const float p = v4d_expf(s_sc[c] - mnew);
                    psum += p;
                    pb[c] = v4d_bf16(p);
                }
                s_l = s_l * f + (float)psum;
                s_f = f;
                s_m = mnew;
            }
        }
        __syncthreads();
        if (!s_skip) {
            const float f = s_f;
            const int nv = s_nv;
            for (int k = 0; k < DMAX; k++) {
                const int d = t + k * AT;
                if (d >= hd)
                    break;
                double a = (double)(acc[k] * f);
                for (int c = 0; c < nv; c++)
                    a += (double)pb[c] * (double)cb[c0 + s_idx[c]][d];
                acc[k] = (float)a;
            }
        }
        __syncthreads();
    }
    if (t == 0)
        s_l = s_l + v4d_expf(sink[h] - s_m);
    __syncthreads();
    float *oh = o + ((size_t)b * H + h) * hd;
    for (int k = 0; k < DMAX; k++) {
        const int d = t + k * AT;
        if (d < hd)
            oh[d] = v4d_bf16(acc[k] / s_l);
    }
}

/* v4_comp_pool; one thread per channel. */
__global__ void k_comp_pool(const float *kv, const float *sc, int W, int r, int d, int overlap, float *e)
{
    const int ch = blockIdx.x * blockDim.x + threadIdx.x;
    if (ch >= d)
        return;
    const int nrows = overlap ? 2 * r : r;
    float p[POOL_MAX];
    float mx = -INFINITY;
    for (int i = 0; i < nrows; i++) {
        const int col = (overlap && i >= r) ? d + ch : ch;
        const float g = sc[(size_t)i * W + col];
        if (g > mx)
            mx = g;
    }
    double sum = 0.0;
    for (int i = 0; i < nrows; i++) {
        const int col = (overlap && i >= r) ? d + ch : ch;
        p[i] = v4d_expf(sc[(size_t)i * W + col] - mx);
        sum += p[i];
    }
    const float fs = (float)sum;
    double acc = 0.0;
    for (int i = 0; i < nrows; i++) {
        const int col = (overlap && i >= r) ? d + ch : ch;
        const float pi = p[i] / fs;
        acc += (double)(kv[(size_t)i * W + col] * pi);
    }
    e[ch] = v4d_bf16((float)acc);
}

/* v4_index_head_weights + v4_index_scores; one thread per key. */
__global__ void k_index_scores(const float *q, const float *keys, int n, const float *iw, int ih, int id,
                               float wscale, float *score)
{
    __shared__ float wh[1024];
    for (int h = threadIdx.x; h < ih; h += blockDim.x)
        wh[h] = v4d_bf16(v4d_bf16(iw[h]) * wscale);
    __syncthreads();
    const int j = blockIdx.x * blockDim.x + threadIdx.x;
    if (j >= n)
        return;
    const float *K = keys + (size_t)j * id;
    double acc = 0.0;
    for (int h = 0; h < ih; h++) {
        float dd = v4d_bf16(dot_lr(q + (size_t)h * id, K, id));
        if (dd < 0.0f)
            dd = 0.0f;
        acc += (double)v4d_bf16(dd * wh[h]);
    }
    score[j] = v4d_bf16((float)acc);
}

/* v4_topk by ranks: element j goes to slot #{i: s_i > s_j} + #{i < j: s_i == s_j}. */
__global__ void k_topk_rank(const float *score, int n, int k, int32_t *sel)
{
    const int j = blockIdx.x * blockDim.x + threadIdx.x;
    if (j >= n)
        return;
    const float sj = score[j];
    int rank = 0;
    for (int i = 0; i < n && rank < k; i++) {
        const float si = score[i];
        rank += si > sj || (si == sj && i < j);
    }
    if (rank < k)
        sel[rank] = j;
}

}  // namespace

extern "C" cudaError_t v4cu_head_rms_bf16(float *q, int nvec, int hd, float eps, cudaStream_t st)
{
    V4CU_LAUNCH(k_head_rms_bf16, nvec, AT, st, q, hd, eps);
    return cudaGetLastError();
}

extern "C" cudaError_t v4cu_sparse_attn(const float *q, const float *const *cand, const int32_t *len, int lmax, int n,
                                        int H, int hd, float scale, const float *sink, float *o, cudaStream_t st)
{
    if (hd > AT * DMAX)
        return cudaErrorInvalidValue;
    V4CU_LAUNCH(k_sparse_attn, dim3(H, n), AT, st, q, cand, len, lmax, H, hd, scale, sink, o);
    return cudaGetLastError();
}

extern "C" cudaError_t v4cu_comp_pool(const float *kv, const float *sc, int W, int r, int d, int overlap, float *e,
                                      cudaStream_t st)
{
    if ((overlap ? 2 : 1) * r > POOL_MAX)
        return cudaErrorInvalidValue;
    V4CU_LAUNCH(k_comp_pool, v4cu_cdiv(d, 128), 128, st, kv, sc, W, r, d, overlap, e);
    return cudaGetLastError();
}

extern "C" cudaError_t v4cu_index_scores(const float *q, const float *keys, int n, const float *iw, int ih, int id,
                                         float *score, cudaStream_t st)
{
    if (ih > 1024)
        return cudaErrorInvalidValue;
    if (n <= 0)
        return cudaSuccess;
    const float wscale = (float)(pow((double)id, -0.5) * pow((double)ih, -0.5));
    V4CU_LAUNCH(k_index_scores, v4cu_cdiv(n, 128), 128, st, q, keys, n, iw, ih, id, wscale, score);
    return cudaGetLastError();
}

extern "C" cudaError_t v4cu_topk(const float *score, int n, int k, int32_t *sel, cudaStream_t st)
{
    if (n <= 0 || k <= 0)
        return cudaSuccess;
    V4CU_LAUNCH(k_topk_rank, v4cu_cdiv(n, 128), 128, st, score, n, k, sel);
    return cudaGetLastError();
}
