/* cuda_num.cuh - device versions of the scalar numerics of kernels/codec.h and
 * kernels/v4/ops.h (bf16 / e4m3 / e2m1 rounding, powers of two), for the CUDA
 * kernels of the decode path (cuda_ops.cu).  Header-only, device functions only.
 *
 * Rounding: the build passes --fmad=false and no fast-math, so a*b+c is two IEEE
 * round-to-nearest operations as in the C reference (-ffp-contract=off); the CPU
 * emulation (simt_emu.h) compiles these same lines as host C++.
 * Thread: any (pure functions).
 */
#ifndef V4_CUDA_NUM_CUH
#define V4_CUDA_NUM_CUH

#include <math.h>
#include <stdint.h>

/* 2^e as a float for any int e: normal, subnormal (2^-149 .. 2^-127), 0 below, inf above. */
__device__ __forceinline__ float v4d_pow2(int e)
{
    if (e >= 128)
        return __uint_as_float(0x7f800000u);
    if (e >= -126)
        return __uint_as_float((uint32_t)(e + 127) << 23);
    if (e >= -149)
        return __uint_as_float(1u << (e + 149));
    return 0.0f;
}

/* E8M0 byte -> 2^(b-127) (2^-127 as a subnormal; 0xff NaN), codec.h v4_e8m0_to_f32. */
__device__ __forceinline__ float v4d_e8m0(uint8_t b)
{
    if (b == 0xff)
        return __int_as_float(0x7fc00000);
    if (b == 0)
        return __int_as_float(0x00400000);
    return __int_as_float((int)b << 23);
}

/* e4m3fn byte -> float (exact; the NaN code 0x7f/0xff -> NaN), codec.h v4_e4m3_to_f32. */
__device__ __forceinline__ float v4d_e4m3(uint32_t b)
{
    const uint32_t e = (b >> 3) & 15u, m = b & 7u;
    float v;
    if (e == 15u && m == 7u)
        v = __int_as_float(0x7fc00000);
    else if (e == 0u)
        v = __fmul_rn((float)m, 0x1p-9f);
    else
        v = __uint_as_float(((e + 120u) << 23) | (m << 20));
    return (b & 0x80u) ? -v : v;
}

/* floor(log2(t)) + (t not a power of two), from the bits (codec.h v4_ceil_log2_bits). */
__device__ __forceinline__ int v4d_ceil_log2_bits(float t)
{
    const uint32_t u = __float_as_uint(t);
    int e = (int)((u >> 23) & 0xffu) - 127;
    if (u & 0x7fffffu)
        e += 1;
    return e;
}

/* f rounded to the nearest bf16 (even on ties; a NaN stays a quiet NaN). */
__device__ __forceinline__ float v4d_bf16(float f)
{
    uint32_t u = __float_as_uint(f);
    if ((u & 0x7fffffffu) > 0x7f800000u)
        return __uint_as_float(((u >> 16) | 0x40u) << 16);
    u += 0x7fffu + ((u >> 16) & 1u);
    return __uint_as_float((u >> 16) << 16);
}

/* bf16 bits -> float (exact: the bits are the float's high half). */
__device__ __forceinline__ float v4d_bf16_load(uint16_t b) { return __uint_as_float((uint32_t)b << 16); }

/* f rounded to the nearest bf16 (v4d_bf16) as bits, codec.h v4_bf16_bits. */
__device__ __forceinline__ uint16_t v4d_bf16_bits(float f) { return (uint16_t)(__float_as_uint(v4d_bf16(f)) >> 16); }

/* codec.c round_grid: nearest-even value on the grid of a format with min_exp and
 * mant_bits, saturating at maxv; ax >= 0 or NaN. */
__device__ __forceinline__ float v4d_round_grid(float ax, int min_exp, int mant_bits, float maxv)
{
    if (!(ax == ax))
        return ax;
    if (ax >= maxv)
        return maxv;
    int lg = (int)((__float_as_uint(ax) >> 23) & 0xffu) - 127;  /* subnormals: -127, below any min_exp */
    if (lg < min_exp)
        lg = min_exp;
    const int step = lg - mant_bits;
    const float r = rintf(ax * v4d_pow2(-step)) * v4d_pow2(step);
    return r > maxv ? maxv : r;
}

__device__ __forceinline__ float v4d_e4m3_round(float x)
{
    return copysignf(v4d_round_grid(fabsf(x), -6, 3, 448.0f), x);
}

__device__ __forceinline__ float v4d_e2m1_round(float x)
{
    return copysignf(v4d_round_grid(fabsf(x), 0, 1, 6.0f), x);
}

/* The model's activation quantization of one 128-column block (kernels/codec.c,
 * linear_scalar.c v4_act_quant) by a block of 128 threads, thread t holding the block's
 * element v: amax = max(|x|, 1e-4) (fmaxf skips NaN like the reference's >), scale
 * s = 2^ceil(log2(amax / 448)) into *s, returns thread t's e4m3 value of clamp(v / s).
 * red: __shared__ float[4].  Has a __syncthreads: every thread of the block calls it. */
__device__ __forceinline__ float v4d_act_quant128(float v, float *red, float *s)
{
    const int t = threadIdx.x;
    float m = fabsf(v);
    for (int o = 16; o > 0; o >>= 1)
        m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, o));
    if ((t & 31) == 0)
        red[t >> 5] = m;
    __syncthreads();
    const float amax = fmaxf(1e-4f, fmaxf(fmaxf(red[0], red[1]), fmaxf(red[2], red[3])));
    const int e = v4d_ceil_log2_bits(__fmul_rn(amax, 1.0f / 448.0f));
    *s = e >= 128 ? __int_as_float(0x7f800000) : v4d_pow2(e);
    float q = __fdiv_rn(v, *s);
    if (q > 448.0f)
        q = 448.0f;
    if (q < -448.0f)
        q = -448.0f;
    return v4d_e4m3_round(q);
}

/* ops.h: transcendental functions in double from the float input, rounded once. */
__device__ __forceinline__ float v4d_sigmoid(float x) { return (float)(1.0 / (1.0 + exp(-(double)x))); }
__device__ __forceinline__ float v4d_silu(float x) { return (float)((double)x / (1.0 + exp(-(double)x))); }
__device__ __forceinline__ float v4d_expf(float x) { return (float)exp((double)x); }
__device__ __forceinline__ float v4d_rsqrt(float x) { return (float)(1.0 / sqrt((double)x)); }

#endif
