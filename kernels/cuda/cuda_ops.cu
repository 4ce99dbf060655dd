/* cuda_ops.cu - element-wise kernels of the decode path (see cuda_ops.h for the
 * contract).  Read each kernel next to the CPU function it names: the per-element
 * arithmetic is the same expression in the same order; only the work is spread over
 * threads (one element, pair, row or quantization block each).
 *
 * Reductions: max (block quantization) is exact in any order; the RMS sums of squares
 * are a double tree (warp shuffles, then one value per warp summed in order).
 * Ownership: kernels touch only their arguments.  Thread: launchers from the caller's
 * thread; kernels are stream-ordered.
 */
#include <math.h>
#include <stdint.h>

#include "cu_launch.h"
#include "cuda_num.cuh"
#include "cuda_ops.h"

namespace {

constexpr int NT = 256;         /* threads per block of the element-wise kernels */
constexpr int HC_MAX = 16;

/* Sum of v over the block (blockDim.x a multiple of 32, <= 1024); every thread gets it. */
__device__ double block_sum_d(double v)
{
    __shared__ double red[32];
    for (int o = 16; o > 0; o >>= 1)
        v += __shfl_xor_sync(0xffffffffu, v, o);
    if ((threadIdx.x & 31) == 0)
        red[threadIdx.x >> 5] = v;
    __syncthreads();
    double s = 0.0;
    for (unsigned w = 0; w < blockDim.x / 32; w++)
        s += red[w];
    __syncthreads();
    return s;
}

/* v4_rms_factor of x[0..n) computed by the whole block. */
__device__ float block_rms_factor(const float *x, int n, float eps)
{
    double ss = 0.0;
    for (int i = threadIdx.x; i < n; i += blockDim.x)
        ss += (double)x[i] * (double)x[i];
    ss = block_sum_d(ss);
    const float ms = (float)ss / (float)n;
    return v4d_rsqrt(ms + eps);
}

__global__ void k_embed(const uint16_t *embed, const int32_t *tokens, int dim, int hc, float *X)
{
    const int b = blockIdx.y, i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= dim)
        return;
    const float v = __uint_as_float((uint32_t)embed[(size_t)tokens[b] * dim + i] << 16);
    for (int j = 0; j < hc; j++)
        X[((size_t)b * hc + j) * dim + i] = v;
}

/* v4_rmsnorm; one block per row. */
__global__ void k_rmsnorm(const float *x, int ldx, const float *w, int dim, float eps, float *y, int ldy)
{
    const float *xr = x + (size_t)blockIdx.x * ldx;
    float *yr = y + (size_t)blockIdx.x * ldy;
    const float r = block_rms_factor(xr, dim, eps);
    for (int i = threadIdx.x; i < dim; i += blockDim.x) {
        const float t = xr[i] * r;
        yr[i] = v4d_bf16(w[i] * t);
    }
}

/* hc_mixes: mixes *= the RMS factor of the row's flattened streams; one block per row. */
__global__ void k_rms_scale(const float *X, int hd, float eps, float *mixes, int mix)
{
    const float r = block_rms_factor(X + (size_t)blockIdx.x * hd, hd, eps);
    for (int m = threadIdx.x; m < mix; m += blockDim.x)
        mixes[(size_t)blockIdx.x * mix + m] = mixes[(size_t)blockIdx.x * mix + m] * r;
}

/* v4_sinkhorn on M [hc][hc] (one thread). */
__device__ void sinkhorn(float *M, int hc, int iters, float eps)
{
    for (int j = 0; j < hc; j++) {
        float *row = M + j * hc, mx = row[0];
        for (int k = 1; k < hc; k++)
            if (row[k] > mx)
                mx = row[k];
        double sum = 0.0;
        for (int k = 0; k < hc; k++) {
            row[k] = v4d_expf(row[k] - mx);
            sum += row[k];
        }
        const float fs = (float)sum;
        for (int k = 0; k < hc; k++)
            row[k] = row[k] / fs + eps;
    }
    for (int it = 0; it < iters; it++) {
        if (it > 0)
            for (int j = 0; j < hc; j++) {
                double sum = 0.0;
                for (int k = 0; k < hc; k++)
                    sum += M[j * hc + k];
                const float den = (float)sum + eps;
                for (int k = 0; k < hc; k++)
                    M[j * hc + k] = M[j * hc + k] / den;
            }
        for (int k = 0; k < hc; k++) {
            double sum = 0.0;
            for (int j = 0; j < hc; j++)
                sum += M[j * hc + k];
            const float den = (float)sum + eps;
            for (int j = 0; j < hc; j++)
                M[j * hc + k] = M[j * hc + k] / den;
        }
    }
}

/* v4_hc_weights; one thread per row. */
__global__ void k_hc_weights(const float *mixes, const float *scale, const float *base, int hc, int iters,
                             float eps, float *pre, float *post, float *comb, int n)
{
    const int b = blockIdx.x * blockDim.x + threadIdx.x;
    if (b >= n)
        return;
    const float *m = mixes + (size_t)b * (2 + hc) * hc;
    for (int j = 0; j < hc; j++) {
        pre[b * hc + j] = v4d_sigmoid(m[j] * scale[0] + base[j]) + eps;
        post[b * hc + j] = 2.0f * v4d_sigmoid(m[hc + j] * scale[1] + base[hc + j]);
    }
    float M[HC_MAX * HC_MAX];
    for (int e = 0; e < hc * hc; e++)
        M[e] = m[2 * hc + e] * scale[2] + base[2 * hc + e];
    sinkhorn(M, hc, iters, eps);
    for (int e = 0; e < hc * hc; e++)
        comb[(size_t)b * hc * hc + e] = M[e];
}

/* v4_hc_reduce; one thread per (row, column). */
__global__ void k_hc_reduce(const float *X, const float *pre, int hc, int dim, float *u)
{
    const int b = blockIdx.y, i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= dim)
        return;
    const float *Xb = X + (size_t)b * hc * dim;
    double acc = 0.0;
    for (int j = 0; j < hc; j++)
        acc += (double)(pre[b * hc + j] * Xb[(size_t)j * dim + i]);
    u[(size_t)b * dim + i] = v4d_bf16((float)acc);
}

/* v4_hc_post_row; one thread per (row, column) owns that column of every stream. */
__global__ void k_hc_post(float *X, const float *out, const float *post, const float *comb, int hc, int dim)
{
    const int b = blockIdx.y, i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= dim)
        return;
    float *Xb = X + (size_t)b * hc * dim;
    const float *cb = comb + (size_t)b * hc * hc;
    float old[HC_MAX];
    for (int j = 0; j < hc; j++)
        old[j] = Xb[(size_t)j * dim + i];
    for (int k = 0; k < hc; k++) {
        double acc = 0.0;
        for (int j = 0; j < hc; j++)
            acc += (double)(cb[j * hc + k] * old[j]);
        const float t = post[b * hc + k] * out[(size_t)b * dim + i];
        Xb[(size_t)k * dim + i] = v4d_bf16(t + (float)acc);
    }
}

/* v4_rope; one thread per pair. */
__global__ void k_rope(float *v, int nvec, int stride, int npairs, const float *freqs, const int32_t *pos, int vpp,
                       int pos0, int inverse)
{
    const long g = (long)blockIdx.x * blockDim.x + threadIdx.x;
    if (g >= (long)nvec * npairs)
        return;
    const int k = (int)(g / npairs), i = (int)(g % npairs);
    const float fp = (float)(pos ? pos[k / vpp] : pos0);
    const float ang = fp * freqs[i];
    const double c = (float)cos((double)ang);
    double s = (float)sin((double)ang);
    if (inverse)
        s = -s;
    float *p = v + (size_t)k * stride + 2 * i;
    const double a = p[0], bb = p[1];
    const float ra = (float)(a * c - bb * s);
    const float rb = (float)(a * s + bb * c);
    p[0] = v4d_bf16(ra);
    p[1] = v4d_bf16(rb);
}

/* v4_hadamard; one block of n/2 threads per vector, the same butterflies (pairs and
 * operations) as the reference, so every double is the same. */
__global__ void k_hadamard(float *v, int stride, int n, float sc)
{
    __shared__ double d[1024];
    float *p = v + (size_t)blockIdx.x * stride;
    const int t = threadIdx.x;
    d[2 * t] = p[2 * t];
    d[2 * t + 1] = p[2 * t + 1];
    __syncthreads();
    for (int h = 1; h < n; h *= 2) {
        const int i = (t / h) * 2 * h + t % h;
        const double a = d[i], b = d[i + h];
        d[i] = a + b;
        d[i + h] = a - b;
        __syncthreads();
    }
    p[2 * t] = v4d_bf16((float)d[2 * t] * sc);
    p[2 * t + 1] = v4d_bf16((float)d[2 * t + 1] * sc);
}

/* ops.c block_qdq; one warp per quantization block. */
__global__ void k_block_qdq(float *v, int stride, int nb, int block, int fp4)
{
    const int qb = blockIdx.x, lane = threadIdx.x;
    float *p = v + (size_t)(qb / nb) * stride + (size_t)(qb % nb) * block;
    const float maxv = fp4 ? 6.0f : 448.0f;
    const float inv_max = fp4 ? 1.0f / 6.0f : 1.0f / 448.0f;
    float am = fp4 ? 6.0f * 0x1p-126f : 1e-4f;
    for (int j = lane; j < block; j += 32)
        am = fmaxf(am, fabsf(p[j]));                  /* fmaxf skips NaN like the reference's > */
    for (int o = 16; o > 0; o >>= 1)
        am = fmaxf(am, __shfl_xor_sync(0xffffffffu, am, o));
    const float s = v4d_pow2(v4d_ceil_log2_bits(am * inv_max));
    for (int j = lane; j < block; j += 32) {
        float q = p[j] / s;
        if (q > maxv)
            q = maxv;
        if (q < -maxv)
            q = -maxv;
        p[j] = v4d_bf16((fp4 ? v4d_e2m1_round(q) : v4d_e4m3_round(q)) * s);
    }
}

__device__ float sqrt_softplus(float z)
{
    const float sp = z > 20.0f ? z : (float)log1p(exp((double)z));
    return (float)sqrt((double)sp);
}

/* v4_moe_route; one warp per row: the scores in parallel, then lane 0 selects (the
 * reference's insertion top-k, ties to the lower id) and weighs. */
__global__ void k_route(float *z, int E, int K, const float *bias, const int32_t *tid2eid, const int32_t *tokens,
                        float route_scale, int32_t *sel, float *wt)
{
    const int b = blockIdx.x, lane = threadIdx.x;
    float *zb = z + (size_t)b * E;
    for (int e = lane; e < E; e += 32)
        zb[e] = sqrt_softplus(zb[e]);
    __syncwarp();
    if (lane != 0)
        return;
    int32_t *sb = sel + (size_t)b * K;
    if (tid2eid) {
        for (int k = 0; k < K; k++)
            sb[k] = tid2eid[(size_t)tokens[b] * K + k];
    } else {
        int cnt = 0;
        for (int i = 0; i < E; i++) {
            const float s = zb[i] + bias[i];
            if (cnt == K && !(s > zb[sb[K - 1]] + bias[sb[K - 1]]))
                continue;
            int p = cnt < K ? cnt++ : K - 1;
            while (p > 0 && s > zb[sb[p - 1]] + bias[sb[p - 1]]) {
                sb[p] = sb[p - 1];
                p--;
            }
            sb[p] = i;
        }
    }
    double sum = 0.0;
    for (int k = 0; k < K; k++)
        sum += zb[sb[k]];
    const float fs = (float)sum;
    for (int k = 0; k < K; k++)
        wt[(size_t)b * K + k] = (zb[sb[k]] / fs) * route_scale;
}

/* v4_swiglu; one thread per (row, element). */
__global__ void k_swiglu(const float *g, const float *u, int I, float lim, const float *wt, float *h)
{
    const int b = blockIdx.y, i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= I)
        return;
    const size_t o = (size_t)b * I + i;
    float gi = g[o], ui = u[o];
    if (lim > 0.0f) {
        if (ui > lim)
            ui = lim;
        if (ui < -lim)
            ui = -lim;
        if (gi > lim)
            gi = lim;
    }
    float val = v4d_silu(gi) * ui;
    if (wt)
        val = wt[b] * val;
    h[o] = v4d_bf16(val);
}

/* Glue of the device step (forward.c, attention.c, moe.c, compressor.c). */
__global__ void k_add(const float *a, const float *b, float *y, long n)
{
    const long i = (long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n)
        y[i] = a[i] + b[i];
}

__global__ void k_round_bf16(float *x, long n)
{
    const long i = (long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n)
        x[i] = v4d_bf16(x[i]);
}

__global__ void k_add_bf16(const float *a, const float *b, float *y, long n)
{
    const long i = (long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n)
        y[i] = v4d_bf16(a[i] + b[i]);
}

/* y[rows[r]] += o[r] for r < m, row by row in r order (the reference's expert order). */
__global__ void k_scatter_add(float *y, int dim, const float *o, const int32_t *rows, int m)
{
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= dim)
        return;
    for (int r = 0; r < m; r++) {
        float *yr = y + (size_t)rows[r] * dim;
        yr[i] = yr[i] + o[(size_t)r * dim + i];
    }
}

/* hc_head's pre weights: pre[b][j] = sigmoid(m[b][j] * scale0 + base[j]) + eps. */
__global__ void k_hc_head_pre(const float *mixes, int mix, const float *scale, const float *base, int hc, float eps,
                              float *pre, int n)
{
    const int t = blockIdx.x * blockDim.x + threadIdx.x;
    if (t >= n * hc)
        return;
    const int b = t / hc, j = t % hc;
    pre[t] = v4d_sigmoid(mixes[(size_t)b * mix + j] * scale[0] + base[j]) + eps;
}

/* cand[i] = entry sel[i] of the paged cache (pages of 1 << shift entries of stride
 * elements) for i < k: the indexer's picks as key pointers. */
__global__ void k_cand_from_sel(const uint16_t **cand, const uint16_t *const *pages, int shift, int stride,
                                const int32_t *sel, int k)
{
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < k) {
        const int j = sel[i];
        cand[i] = pages[j >> shift] + (size_t)(j & ((1 << shift) - 1)) * stride;
    }
}

__global__ void k_bf16_bits(const float *x, uint16_t *y, long n)
{
    const long i = (long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n)
        y[i] = v4d_bf16_bits(x[i]);
}

}  // namespace

extern "C" cudaError_t v4cu_embed(const uint16_t *embed, const int32_t *tokens, int n, int dim, int hc, float *X,
                                  cudaStream_t st)
{
    V4CU_LAUNCH(k_embed, dim3(v4cu_cdiv(dim, NT), n), NT, st, embed, tokens, dim, hc, X);
    return cudaGetLastError();
}

extern "C" cudaError_t v4cu_rmsnorm(const float *x, int ldx, const float *w, int dim, float eps, float *y, int ldy,
                                    int n, cudaStream_t st)
{
    V4CU_LAUNCH(k_rmsnorm, n, NT, st, x, ldx, w, dim, eps, y, ldy);
    return cudaGetLastError();
}

extern "C" cudaError_t v4cu_rms_scale(const float *X, int hd, float eps, float *mixes, int mix, int n,
                                      cudaStream_t st)
{
    V4CU_LAUNCH(k_rms_scale, n, NT, st, X, hd, eps, mixes, mix);
    return cudaGetLastError();
}

extern "C" cudaError_t v4cu_hc_weights(const float *mixes, const float *scale, const float *base, int hc, int iters,
                                       float eps, float *pre, float *post, float *comb, int n, cudaStream_t st)
{
    if (hc > HC_MAX)
        return cudaErrorInvalidValue;
    V4CU_LAUNCH(k_hc_weights, v4cu_cdiv(n, 32), 32, st, mixes, scale, base, hc, iters, eps, pre, post, comb, n);
    return cudaGetLastError();
}

extern "C" cudaError_t v4cu_hc_reduce(const float *X, const float *pre, int hc, int dim, float *u, int n,
                                      cudaStream_t st)
{
    V4CU_LAUNCH(k_hc_reduce, dim3(v4cu_cdiv(dim, NT), n), NT, st, X, pre, hc, dim, u);
    return cudaGetLastError();
}

extern "C" cudaError_t v4cu_hc_post(float *X, const float *out, const float *post, const float *comb, int hc,
                                    int dim, int n, cudaStream_t st)
{
    if (hc > HC_MAX)
        return cudaErrorInvalidValue;
    V4CU_LAUNCH(k_hc_post, dim3(v4cu_cdiv(dim, NT), n), NT, st, X, out, post, comb, hc, dim);
    return cudaGetLastError();
}

extern "C" cudaError_t v4cu_rope(float *v, int nvec, int stride, int npairs, const float *freqs, const int32_t *pos,
                                 int vpp, int inverse, cudaStream_t st)
{
    V4CU_LAUNCH(k_rope, v4cu_cdiv((long)nvec * npairs, NT), NT, st, v, nvec, stride, npairs, freqs, pos, vpp, 0,
                inverse);
    return cudaGetLastError();
}

extern "C" cudaError_t v4cu_hadamard(float *v, int nvec, int stride, int n, cudaStream_t st)
{
    if (n < 2 || n > 1024 || (n & (n - 1)))
        return cudaErrorInvalidValue;
    V4CU_LAUNCH(k_hadamard, nvec, n / 2, st, v, stride, n, (float)pow((double)n, -0.5));
    return cudaGetLastError();
}

extern "C" cudaError_t v4cu_block_qdq(float *v, int nvec, int stride, int n, int block, int fp4, cudaStream_t st)
{
    if (block < 1 || n % block)
        return cudaErrorInvalidValue;
    V4CU_LAUNCH(k_block_qdq, nvec * (n / block), 32, st, v, stride, n / block, block, fp4);
    return cudaGetLastError();
}

extern "C" cudaError_t v4cu_route(float *z, int E, int K, const float *bias, const int32_t *tid2eid,
                                  const int32_t *tokens, float route_scale, int32_t *sel, float *wt, int n,
                                  cudaStream_t st)
{
    V4CU_LAUNCH(k_route, n, 32, st, z, E, K, bias, tid2eid, tokens, route_scale, sel, wt);
    return cudaGetLastError();
}

extern "C" cudaError_t v4cu_swiglu(const float *g, const float *u, int I, float lim, const float *wt, float *h, int n,
                                   cudaStream_t st)
{
    V4CU_LAUNCH(k_swiglu, dim3(v4cu_cdiv(I, NT), n), NT, st, g, u, I, lim, wt, h);
    return cudaGetLastError();
}

extern "C" cudaError_t v4cu_rope_at(float *v, int nvec, int stride, int npairs, const float *freqs, int pos,
                                    int inverse, cudaStream_t st)
{
    V4CU_LAUNCH(k_rope, v4cu_cdiv((long)nvec * npairs, NT), NT, st, v, nvec, stride, npairs, freqs, nullptr, 1, pos,
                inverse);
    return cudaGetLastError();
}

extern "C" cudaError_t v4cu_add(const float *a, const float *b, float *y, long n, cudaStream_t st)
{
    V4CU_LAUNCH(k_add, v4cu_cdiv(n, NT), NT, st, a, b, y, n);
    return cudaGetLastError();
}

extern "C" cudaError_t v4cu_round_bf16(float *x, long n, cudaStream_t st)
{
    V4CU_LAUNCH(k_round_bf16, v4cu_cdiv(n, NT), NT, st, x, n);
    return cudaGetLastError();
}

extern "C" cudaError_t v4cu_add_bf16(const float *a, const float *b, float *y, long n, cudaStream_t st)
{
    V4CU_LAUNCH(k_add_bf16, v4cu_cdiv(n, NT), NT, st, a, b, y, n);
    return cudaGetLastError();
}

extern "C" cudaError_t v4cu_scatter_add(float *y, int dim, const float *o, const int32_t *rows, int m, cudaStream_t st)
{
    V4CU_LAUNCH(k_scatter_add, v4cu_cdiv(dim, NT), NT, st, y, dim, o, rows, m);
    return cudaGetLastError();
}

extern "C" cudaError_t v4cu_hc_head_pre(const float *mixes, int mix, const float *scale, const float *base, int hc,
                                        float eps, float *pre, int n, cudaStream_t st)
{
    V4CU_LAUNCH(k_hc_head_pre, v4cu_cdiv((long)n * hc, 32), 32, st, mixes, mix, scale, base, hc, eps, pre, n);
    return cudaGetLastError();
}

extern "C" cudaError_t v4cu_cand_from_sel(const uint16_t **cand, const uint16_t *const *pages, int shift, int stride,
                                          const int32_t *sel, int k, cudaStream_t st)
{
    if (shift < 0 || shift > 30)
        return cudaErrorInvalidValue;
    if (k <= 0)
        return cudaSuccess;
    V4CU_LAUNCH(k_cand_from_sel, v4cu_cdiv(k, 128), 128, st, cand, pages, shift, stride, sel, k);
    return cudaGetLastError();
}

extern "C" cudaError_t v4cu_bf16_bits(const float *x, uint16_t *y, long n, cudaStream_t st)
{
    if (n <= 0)
        return cudaSuccess;
    V4CU_LAUNCH(k_bf16_bits, v4cu_cdiv(n, NT), NT, st, x, y, n);
    return cudaGetLastError();
}
