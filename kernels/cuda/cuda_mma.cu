/* cuda_mma.cu - the fast mode's grouped routed-expert products on the tensor cores
 * (see cuda_mma.h): tile list, activation dequantization, the WMMA kernel and its
 * self-test.
 *
 * k_mma_grouped: one block (4 warps) per (tile of <= 16 pairs, 64 output rows); per
 * 64-column step of K the block stages the tile's 16 activation rows and the expert's
 * 64 weight rows as bf16 in shared memory (the weight dequantized on the way: FP4 one
 * E8M0 scale per 32 columns, FP8 one per 128x128 block, so a 64-column step needs one
 * scale per row), then each warp runs four m16n16k16 MMAs for its 16 outputs.  The
 * accumulators go through shared memory to the masked, bf16-rounded stores.  Only the
 * WMMA API is used (no fragment element access), whose semantics do not depend on the
 * hardware's lane layout: the CPU emulation (simt_emu.h) implements exactly those
 * semantics, so test_cuda_moe_emulated checks the tiling, staging and masking here.
 *
 * Ownership: kernels only read the weights/activations and write their outputs.
 * Thread: the launching thread.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#ifndef V4CU_HOST_EMULATION
#include <cuda_bf16.h>
#include <mma.h>
#endif

#include "cu_launch.h"
#include "cuda_linear.h"
#include "cuda_mma.h"
#include "cuda_num.cuh"
#include "config/rng.h"   /* v4_splitmix64: the self-test's inputs */
#include "kernels/calc_diff.h"

namespace {

constexpr int MB = V4CU_MMA_ROWS;   /* pairs per tile */
constexpr int NBK = 64;             /* output rows per block (4 warps x 16) */
constexpr int KC = 64;              /* columns staged per step */
constexpr int LDS = KC + 8;         /* staged row stride in bf16 (a multiple of 8, rows 16-byte aligned) */
constexpr int LDC = NBK + 4;        /* accumulator stage stride in floats (a multiple of 4) */
constexpr int MMA_NT = 128;

/* e2m1 code -> float (exact): 0, 0.5, 1, 1.5, 2, 3, 4, 6 and their negatives. */
__device__ __forceinline__ float e2m1_f32(uint32_t c)
{
    const uint32_t e = (c >> 1) & 3u, m = c & 1u;
    const float v = e == 0u ? (m ? 0.5f : 0.0f) : __uint_as_float(((e + 126u) << 23) | (m << 22));
    return (c & 8u) ? -v : v;
}

/* 16 weight bytes: one 16-byte load where aligned (vec), else byte by byte. */
__device__ __forceinline__ void mma_load16(const uint8_t *p, bool vec, uint8_t out[16])
{
    if (vec) {
        const uint4 v = __ldg(reinterpret_cast<const uint4 *>(p));
        memcpy(out, &v, 16);
    } else {
        for (int i = 0; i < 16; i++)
            out[i] = p[i];
    }
}

__global__ void k_mma_act(const double *xq, const float *xs, int K, uint16_t *xb)
{
    const int p = blockIdx.y, k = blockIdx.x * blockDim.x + threadIdx.x;
    if (k >= K)
        return;
    const size_t i = (size_t)p * K + k;
    xb[i] = v4d_bf16_bits(__fmul_rn((float)xq[i], xs[(size_t)p * (K / 128) + k / 128]));
}

template <int FP4>
__global__ void __launch_bounds__(MMA_NT)
k_mma_grouped(const uint8_t *const *__restrict__ wtab, const uint8_t *const *__restrict__ stab,
              const int32_t *__restrict__ eid, const int32_t *__restrict__ tile, const int32_t *__restrict__ tl,
              int rows, int K, const uint16_t *__restrict__ xb, float *__restrict__ y)
{
    using namespace nvcuda;
    __shared__ __align__(32) __nv_bfloat16 sa[MB * LDS];
    __shared__ __align__(32) __nv_bfloat16 sb[NBK * LDS];
    __shared__ __align__(32) float sc[MB * LDC];
    const int s = tl[blockIdx.y];
    if (s < 0)
        return;   /* the whole block: past the last tile */
    const int m = tile[s], x = eid[s], n0 = blockIdx.x * NBK, t = threadIdx.x, warp = t >> 5;
    const uint8_t *w = wtab[x], *scale = stab[x];
    const int scols = (K + 127) / 128;
    const bool vec = ((uintptr_t)w % 16u) == 0;   /* row and column offsets below are multiples of 16 */
    wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc;
    wmma::fragment<wmma::matrix_a, 16, 16, 16, __nv_bfloat16, wmma::row_major> fa;
    wmma::fragment<wmma::matrix_b, 16, 16, 16, __nv_bfloat16, wmma::col_major> fb;
    wmma::fill_fragment(acc, 0.0f);
    for (int k0 = 0; k0 < K; k0 += KC) {
        {   /* activations: 16 rows x 64 columns, 8 per thread */
            const int r = t >> 3, c = (t & 7) * 8;
            const uint16_t *src = xb + (size_t)(s + r) * K + k0 + c;
            for (int i = 0; i < 8; i++)
                sa[r * LDS + c + i] = __ushort_as_bfloat16(r < m ? src[i] : (uint16_t)0);
        }
        {   /* weights: 64 rows x 64 columns, 32 per thread (half a row), dequantized */
            const int r = t >> 1, c = (t & 1) * 32, row = n0 + r;
            __nv_bfloat16 *dst = sb + r * LDS + c;
            if (row >= rows) {
                for (int i = 0; i < 32; i++)
                    dst[i] = __ushort_as_bfloat16((uint16_t)0);
            } else if (FP4) {
                uint8_t b[16];
                mma_load16(w + (size_t)row * (K / 2) + (k0 + c) / 2, vec, b);
                const float sw = v4d_e8m0(scale[(size_t)row * (K / 32) + (k0 + c) / 32]);
                for (int i = 0; i < 32; i++)
                    dst[i] = __ushort_as_bfloat16(
                        v4d_bf16_bits(__fmul_rn(e2m1_f32((b[i >> 1] >> (4 * (i & 1))) & 15u), sw)));
            } else {
                uint8_t b[32];
                mma_load16(w + (size_t)row * K + k0 + c, vec, b);
                mma_load16(w + (size_t)row * K + k0 + c + 16, vec, b + 16);
                const float sw = v4d_e8m0(scale[(size_t)(row / 128) * scols + (k0 + c) / 128]);
                for (int i = 0; i < 32; i++)
                    dst[i] = __ushort_as_bfloat16(v4d_bf16_bits(__fmul_rn(v4d_e4m3(b[i]), sw)));
            }
        }
        __syncthreads();
        for (int kk = 0; kk < KC; kk += 16) {
            wmma::load_matrix_sync(fa, sa + kk, LDS);
            wmma::load_matrix_sync(fb, sb + warp * 16 * LDS + kk, LDS);
            wmma::mma_sync(acc, fa, fb, acc);
        }
        __syncthreads();
    }
    wmma::store_matrix_sync(sc + warp * 16, acc, LDC, wmma::mem_row_major);
    __syncthreads();
    for (int i = t; i < MB * NBK; i += MMA_NT) {
        const int r = i / NBK, j = i % NBK;
        if (r < m && n0 + j < rows)
            y[(size_t)(s + r) * rows + n0 + j] = v4d_bf16(sc[r * LDC + j]);
    }
}

/* ---------------------------------------------------------------- self-test */

struct st_bufs {
    void *p[4] = {nullptr, nullptr, nullptr, nullptr};
    ~st_bufs()
    {
        for (void *q : p)
            cudaFree(q);
    }
};

} /* namespace */

extern "C" cudaError_t v4cu_mma_act(const double *xq, const float *xs, int P, int K, uint16_t *xb, cudaStream_t st)
{
    if (P < 1 || K % 128)
        return cudaErrorInvalidValue;
    V4CU_LAUNCH(k_mma_act, dim3(v4cu_cdiv(K, MMA_NT), (unsigned)P), MMA_NT, st, xq, xs, K, xb);
    return cudaGetLastError();
}

extern "C" cudaError_t v4cu_mma_grouped(int fp4, const uint8_t *const *wtab, const uint8_t *const *stab,
                                        const int32_t *eid, const int32_t *tile, const int32_t *tl, int ntl, int rows,
                                        int K, const uint16_t *xb, float *y, cudaStream_t st)
{
    if (ntl < 1 || rows < 1 || K < 128 || K % 128 || ntl > 65535)
        return cudaErrorInvalidValue;
    const dim3 grid(v4cu_cdiv(rows, NBK), (unsigned)ntl);
    if (fp4)
        V4CU_LAUNCH(k_mma_grouped<1>, grid, MMA_NT, st, wtab, stab, eid, tile, tl, rows, K, xb, y);
    else
        V4CU_LAUNCH(k_mma_grouped<0>, grid, MMA_NT, st, wtab, stab, eid, tile, tl, rows, K, xb, y);
    return cudaGetLastError();
}

/* Two experts of rows x K; pairs 0..m0-1 use expert 0, m0..P-1 expert 1 (tiles of 16
 * from each expert's first pair); the exact reference runs each expert's rows through
 * v4cu_quant_fp4/fp8. */
extern "C" int v4cu_mma_selftest(cudaStream_t st, char *why, size_t nwhy)
{
    const int rows = 160, K = 256, P = 37, m0 = 21, E = 2, ntl = v4cu_mma_tile_bound(P, E);
    const size_t nw8 = (size_t)rows * K, ns8 = (size_t)((rows + 127) / 128) * (K / 128);
    const size_t nw4 = (size_t)rows * K / 2, ns4 = (size_t)rows * K / 32;
    const size_t wbytes = 2 * (nw8 + ns8 + nw4 + ns4);
    uint64_t seed = 0x5eedf00d12345678ull;
    uint8_t *hw = (uint8_t *)malloc(wbytes);
    float *hx = (float *)malloc(sizeof(float) * P * K), *hy = (float *)malloc(sizeof(float) * 2 * P * rows);
    int32_t hi[3 * 64];   /* eid, tile, tile list */
    if (!hw || !hx || !hy) {
        free(hw), free(hx), free(hy);
        snprintf(why, nwhy, "self-test: host memory");
        return -1;
    }
    /* per expert: w8, s8, w4, s4 */
    for (size_t i = 0; i < wbytes; i++)
        hw[i] = (uint8_t)v4_splitmix64(&seed);
    for (int x = 0; x < E; x++) {
        uint8_t *b = hw + x * (nw8 + ns8 + nw4 + ns4);
        for (size_t i = 0; i < nw8; i++)   /* no NaN codes: a NaN weight would blank most rows */
            if ((b[i] & 0x7f) == 0x7f)
                b[i] = 0x31;
        for (size_t i = 0; i < ns8; i++)
            b[nw8 + i] = (uint8_t)(120 + v4_splitmix64(&seed) % 6);
        for (size_t i = 0; i < ns4; i++)
            b[nw8 + ns8 + nw4 + i] = (uint8_t)(118 + v4_splitmix64(&seed) % 8);
    }
    for (int i = 0; i < P * K; i++)
        hx[i] = (float)((int)(v4_splitmix64(&seed) % 20001) - 10000) / (float)(1 + v4_splitmix64(&seed) % 3000);
    hx[5 * K + 77] = NAN;   /* a NaN activation: its row's outputs are NaN on both paths */
    /* eid [64], tile [64], (device pointer table after them) */
    for (int s = 0; s < 64; s++) {
        hi[s] = s < m0 ? 0 : 1;
        const int r = s < m0 ? s : s - m0, mx = s < m0 ? m0 : P - m0;
        hi[64 + s] = s < P && r % MB == 0 ? (mx - r < MB ? mx - r : MB) : 0;
    }
    for (int s = 0, nt = 0; s < 64; s++) {
        if (s < P && hi[64 + s] > 0)
            hi[128 + nt++] = s;
        if (s == 63)
            for (; nt < 64; nt++)
                hi[128 + nt] = -1;
    }
    st_bufs B;
    const size_t bytes[4] = {wbytes, sizeof(float) * (size_t)P * K + sizeof(float) * 2 * (size_t)P * rows,
                             sizeof(double) * (size_t)P * K + sizeof(float) * ((size_t)P * (K / 128) + 1),
                             sizeof(int32_t) * (128 + 64) + sizeof(uint16_t) * (size_t)P * K + 8 * sizeof(void *)};
    cudaError_t e = cudaSuccess;
    for (int i = 0; i < 4 && e == cudaSuccess; i++)
        e = cudaMalloc(&B.p[i], bytes[i]);
    uint8_t *dw = (uint8_t *)B.p[0];
    float *dx = (float *)B.p[1], *dy = dx + (size_t)P * K;
    double *dxq = (double *)B.p[2];
    float *dxs = (float *)(dxq + (size_t)P * K);
    int32_t *deid = (int32_t *)B.p[3], *dtile = deid + 64, *dtl = deid + 128;
    const uint8_t **dtab = (const uint8_t **)(deid + 192);   /* 8-byte aligned: 768 bytes in */
    uint16_t *dxb = (uint16_t *)(dtab + 8);
    const uint8_t *htab[8];
    for (int x = 0; x < E; x++) {
        const uint8_t *b = dw + x * (nw8 + ns8 + nw4 + ns4);
        htab[0 + x] = b, htab[2 + x] = b + nw8;                  /* FP8: w, scale */
        htab[4 + x] = b + nw8 + ns8, htab[6 + x] = b + nw8 + ns8 + nw4;   /* FP4: w, scale */
    }
    if (e == cudaSuccess)
        e = cudaMemcpyAsync(dw, hw, wbytes, cudaMemcpyHostToDevice, st);
    if (e == cudaSuccess)
        e = cudaMemcpyAsync(dx, hx, sizeof(float) * (size_t)P * K, cudaMemcpyHostToDevice, st);
    if (e == cudaSuccess)
        e = cudaMemcpyAsync(deid, hi, sizeof hi, cudaMemcpyHostToDevice, st);
    if (e == cudaSuccess)
        e = cudaMemcpyAsync((void *)dtab, htab, sizeof htab, cudaMemcpyHostToDevice, st);
    if (e == cudaSuccess)
        e = v4cu_act_quant(dx, P, K, dxq, dxs, st);
    if (e == cudaSuccess)
        e = v4cu_mma_act(dxq, dxs, P, K, dxb, st);
    int rc = 1;
    for (int fp4 = 0; fp4 < 2 && e == cudaSuccess && rc == 1; fp4++) {
        for (int x = 0; x < E && e == cudaSuccess; x++) {
            const int s0 = x ? m0 : 0, m = x ? P - m0 : m0;
            e = (fp4 ? v4cu_quant_fp4 : v4cu_quant_fp8)(htab[4 * fp4 + x], htab[4 * fp4 + 2 + x], rows, K, m,
                                                        dxq + (size_t)s0 * K, dxs + (size_t)s0 * (K / 128),
                                                        dy + (size_t)s0 * rows, st);
        }
        if (e == cudaSuccess)
            e = v4cu_mma_grouped(fp4, dtab + 4 * fp4, dtab + 4 * fp4 + 2, deid, dtile, dtl, ntl, rows, K, dxb,
                                 dy + (size_t)P * rows, st);
        if (e == cudaSuccess)
            e = cudaMemcpyAsync(hy, dy, sizeof(float) * 2 * (size_t)P * rows, cudaMemcpyDeviceToHost, st);
        if (e == cudaSuccess)
            e = cudaStreamSynchronize(st);
        if (e == cudaSuccess) {
            long bad = 0;
            const double cd = v4_calc_diff(hy, hy + (size_t)P * rows, (size_t)P * rows, &bad);
            int nan_row = 1;   /* the NaN activation's row must be NaN on both (not left out by both) */
            for (int j = 0; j < rows; j++)
                nan_row &= isnan(hy[(size_t)P * rows + 5 * rows + j]) != 0;
            if (bad || !nan_row || !(cd <= 1e-5)) {
                snprintf(why, nwhy,
                         "self-test: grouped %s product calc_diff %.3g against the exact kernel (bound 1e-5), %ld "
                         "non-finite mismatches%s",
                         fp4 ? "FP4" : "FP8", cd, bad, nan_row ? "" : ", the NaN row not NaN");
                rc = 0;
            }
        }
    }
    if (e != cudaSuccess) {
        snprintf(why, nwhy, "self-test: %s", cudaGetErrorString(e));
        rc = -1;
    }
    (void)cudaStreamSynchronize(st);    /* an early failure may leave copies from hw/hx queued on st */
    free(hw), free(hx), free(hy);
    return rc;
}
