/* cuda_fast.cu - the element-wise kernels of the fast numerics mode (cuda_fast.h):
 * activation quantization into e4m3 bytes with cuBLASLt's VEC128 scale layout, weight
 * scale grids as floats (BLK128x128), FP4 -> FP8 (W4A8) weight conversion, the bf16
 * hi/lo split of activations, the exact mode's bf16 weight decode, and the finishing
 * step of a product.  The quantization follows the model op for op (the same amax,
 * scale and e4m3 rounding as k_act_quant of cuda_linear.cu and kernels/codec.c), so the
 * tensor cores see exactly the activations the exact mode sums in double.
 *
 * The CPU emulation (simt_emu.h, tests/cuda/emulate_fast.cpp) runs these kernels and
 * their launchers against C references; the cuBLASLt products they feed cannot run
 * there (cuda_lt.h says what is checked how).
 * Ownership: kernels read their inputs and write their outputs; nothing is allocated.
 * Thread: launchers from the caller's thread.
 */
#include <math.h>
#include <stdint.h>

#include "cu_launch.h"
#include "cuda_fast.h"
#include "cuda_num.cuh"

namespace v4fast {

/* The byte of an e4m3 value r (a result of v4d_e4m3_round, or NaN). */
__device__ __forceinline__ uint8_t e4m3_byte(float r)
{
    const uint32_t sgn = (__float_as_uint(r) >> 24) & 0x80u;
    const float a = fabsf(r);
    if (!(a == a))
        return (uint8_t)(sgn | 0x7fu);
    if (a < 0x1p-6f)
        return (uint8_t)(sgn | (uint32_t)__fmul_rn(a, 512.0f));     /* subnormal: a = m * 2^-9 */
    const uint32_t u = __float_as_uint(a);
    const uint32_t e = ((u >> 23) & 0xffu) - 120u;                    /* exponent + 7 */
    return (uint8_t)(sgn | (e << 3) | ((u >> 20) & 7u));
}

__device__ __forceinline__ float e2m1(uint32_t c)
{
    const float m[8] = {0.0f, 0.5f, 1.0f, 1.5f, 2.0f, 3.0f, 4.0f, 6.0f};
    const float v = m[c & 7u];
    return (c & 8u) ? -v : v;
}

__device__ __forceinline__ uint16_t bf16_bits(float f) { return (uint16_t)(__float_as_uint(v4d_bf16(f)) >> 16); }

/* One block (128 threads) per (128-column block, padded row). */
__global__ void k_act_quant8(const float *x, int ldx, int n, int npad, int K, uint8_t *q, float *qs)
{
    __shared__ float red[4];
    const int kb = blockIdx.x, b = blockIdx.y, t = threadIdx.x;
    const size_t j = (size_t)b * K + (size_t)kb * 128 + t;
    if (b >= n) {                       /* padding row: zeros, scale 1 (uniform per block) */
        q[j] = 0;
        if (t == 0)
            qs[(size_t)kb * npad + b] = 1.0f;
        return;
    }
    float s;
    q[j] = e4m3_byte(v4d_act_quant128(x[(size_t)b * ldx + (size_t)kb * 128 + t], red, &s));
    if (t == 0)
        qs[(size_t)kb * npad + b] = s;
}

__global__ void k_wscale(const uint8_t *e8, int rb, int L, int L4, float *out)
{
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= rb * L4)
        return;
    const int p = i / L4, b = i % L4;
    out[i] = b < L ? v4d_e8m0(e8[(size_t)p * L + b]) : 1.0f;
}

/* One thread per (row, 128-column block). */
__global__ void k_fp4_to_fp8(const uint8_t *w4, const uint8_t *s4, int rows, int K, uint8_t *w8, float *s8)
{
    const int L = K / 128;
    const long i = (long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= (long)rows * L)
        return;
    const int r = (int)(i / L), b = (int)(i % L);
    const uint8_t *sp = s4 + (size_t)r * (K / 32) + (size_t)b * 4;
    int E[4], emax = -1000, nan = 0;
    for (int k = 0; k < 4; k++) {
        nan |= sp[k] == 0xff;
        E[k] = (int)sp[k] - 127;
        emax = E[k] > emax ? E[k] : emax;
    }
    s8[(size_t)b * rows + r] = nan ? __int_as_float(0x7fc00000) : v4d_pow2(emax - 6);
    const uint8_t *src = w4 + (size_t)r * (K / 2) + (size_t)b * 64;
    uint8_t *dst = w8 + (size_t)r * K + (size_t)b * 128;
    for (int k = 0; k < 4; k++) {
        const float f = v4d_pow2(6 - (emax - E[k]));
        for (int c = 0; c < 32; c += 2) {
            const uint32_t byte = src[k * 16 + c / 2];
            dst[k * 32 + c] = e4m3_byte(v4d_e4m3_round(__fmul_rn(e2m1(byte & 15u), f)));
            dst[k * 32 + c + 1] = e4m3_byte(v4d_e4m3_round(__fmul_rn(e2m1(byte >> 4), f)));
        }
    }
}

__global__ void k_split_bf16(const float *x, int ldx, int n, int npad, int K, uint16_t *xb)
{
    const long i = (long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= (long)npad * K)
        return;
    const int b = (int)(i / K), j = (int)(i % K);
    float hi = 0.0f, lo = 0.0f;
    if (b < n) {
        const float v = x[(size_t)b * ldx + j];
        hi = v4d_bf16(v);
        lo = isfinite(hi) ? v4d_bf16(__fsub_rn(v, hi)) : 0.0f;
    }
    xb[(size_t)b * K + j] = bf16_bits(hi);
    xb[((size_t)npad + b) * K + j] = bf16_bits(lo);
}

__global__ void k_weight_bf16(int type, int r8, const void *w, const uint8_t *scale, int rows, int K, uint16_t *out)
{
    const long i = (long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= (long)rows * K)
        return;
    const int r = (int)(i / K), j = (int)(i % K);
    const size_t at = r8 ? ((size_t)(r >> 3) * K + j) * 8 + (r & 7) : (size_t)i;
    if (type == 3) {
        out[i] = ((const uint16_t *)w)[at];
        return;
    }
    const float sw = v4d_e8m0(scale[(size_t)(r / 128) * ((K + 127) / 128) + j / 128]);
    out[i] = bf16_bits(__fmul_rn(v4d_e4m3(((const uint8_t *)w)[at]), sw));
}

__global__ void k_finish(const float *d, int rows, int n, int npad, int mode, float *y, int ldy)
{
    const long i = (long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= (long)n * rows)
        return;
    const int b = (int)(i / rows), r = (int)(i % rows);
    const float v = d[(size_t)b * rows + r];
    y[(size_t)b * ldy + r] = mode == 0 ? v4d_bf16(v) : __fadd_rn(v, d[((size_t)npad + b) * rows + r]);
}

}  // namespace v4fast

extern "C" {

cudaError_t v4cu_fast_act_quant(const float *x, int ldx, int n, int npad, int K, uint8_t *q, float *qs,
                                cudaStream_t st)
{
    if (n <= 0 || K <= 0 || K % 128 || npad < n || npad % 4)
        return cudaErrorInvalidValue;
    V4CU_LAUNCH(v4fast::k_act_quant8, dim3(K / 128, npad), 128, st, x, ldx, n, npad, K, q, qs);
    return cudaGetLastError();
}

cudaError_t v4cu_fast_wscale(const uint8_t *e8, int rows, int K, float *out, cudaStream_t st)
{
    if (rows <= 0 || K <= 0 || K % 128)
        return cudaErrorInvalidValue;
    const int rb = (rows + 127) / 128, L = K / 128, L4 = v4cu_l4(K);
    V4CU_LAUNCH(v4fast::k_wscale, v4cu_cdiv((long)rb * L4, 256), 256, st, e8, rb, L, L4, out);
    return cudaGetLastError();
}

cudaError_t v4cu_fast_fp4_to_fp8(const uint8_t *w4, const uint8_t *s4, int rows, int K, uint8_t *w8, float *s8,
                                 cudaStream_t st)
{
    if (rows <= 0 || K <= 0 || K % 128)
        return cudaErrorInvalidValue;
    V4CU_LAUNCH(v4fast::k_fp4_to_fp8, v4cu_cdiv((long)rows * (K / 128), 128), 128, st, w4, s4, rows, K, w8, s8);
    return cudaGetLastError();
}

cudaError_t v4cu_fast_split_bf16(const float *x, int ldx, int n, int npad, int K, uint16_t *xb, cudaStream_t st)
{
    if (n <= 0 || K <= 0 || npad < n)
        return cudaErrorInvalidValue;
    V4CU_LAUNCH(v4fast::k_split_bf16, v4cu_cdiv((long)npad * K, 256), 256, st, x, ldx, n, npad, K, xb);
    return cudaGetLastError();
}

cudaError_t v4cu_fast_weight_bf16(int type, int r8, const void *w, const uint8_t *scale, int rows, int K,
                                  uint16_t *out, cudaStream_t st)
{
    if (rows <= 0 || K <= 0 || (type != 1 && type != 3) || (type == 1 && !scale))
        return cudaErrorInvalidValue;
    V4CU_LAUNCH(v4fast::k_weight_bf16, v4cu_cdiv((long)rows * K, 256), 256, st, type, r8, w, scale, rows, K, out);
    return cudaGetLastError();
}

cudaError_t v4cu_fast_finish(const float *d, int rows, int n, int npad, int mode, float *y, int ldy,
                             cudaStream_t st)
{
    if (n <= 0 || rows <= 0 || ldy < rows)
        return cudaErrorInvalidValue;
    V4CU_LAUNCH(v4fast::k_finish, v4cu_cdiv((long)n * rows, 256), 256, st, d, rows, n, npad, mode, y, ldy);
    return cudaGetLastError();
}

}  /* extern "C" */
