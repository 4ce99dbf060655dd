/* simd_x86.h - AVX2-level helpers shared by linear_avx2.c and the AVX-512 kernels
 * (linear_avx512.c, linear_exact_avx512.c).
 *
 * Include only from translation units compiled with -mavx2 -mfma (the *_avx2.c and
 * *_avx512.c files); everything here is static inline and bit-exact with the scalar
 * helpers in codec.h:
 *   v4x_bf16_ps      = v4_bf16 (round to nearest even, NaN -> quiet NaN, as bits)
 *   v4x_e8m0_ps      = v4_e8m0_to_f32 (0 -> 2^-127 subnormal, 0xff -> NaN)
 *   v4x_e4m3_round_ps = v4_e4m3_round for |x| <= 448 or NaN (the act-quant domain)
 *   v4x_fp8_dequant8 = v4_bf16(v4_e4m3_to_f32(q) * sw) for 8 bytes (the EXACT-mode
 *                      FP8 weight, NaN codes included)
 * plus an 8x8 float transpose, the scalar e8m0 decoder used by the tile loops, the
 * input check behind the kernels' scalar fallback for NaN/inf activations, and the
 * fast-path test of the R8 EXACT FP8 kernels (v4x_fp8_exact_scale).
 * Pure functions; thread: any.
 */
#ifndef V4_SIMD_X86_H
#define V4_SIMD_X86_H

#include <immintrin.h>
#include <stdint.h>
#include <string.h>

#include "../codec.h"

#define V4_INLINE static inline __attribute__((always_inline))

/* v4_e8m0_to_f32 without libm: 2^(b-127), 2^-127 is the subnormal 0x00400000. */
V4_INLINE float v4x_e8m0(uint8_t b)
{
    uint32_t u = b == 0xff ? 0x7fc00000u : b == 0 ? 0x00400000u : (uint32_t)b << 23;
    return v4_f32_from_bits(u);
}

/* bytes (one per 32-bit lane, 0..255) -> 2^(b-127) */
V4_INLINE __m256 v4x_e8m0_ps(__m256i b)
{
    __m256i u = _mm256_slli_epi32(b, 23);
    __m256i z = _mm256_cmpeq_epi32(b, _mm256_setzero_si256());
    __m256i n = _mm256_cmpeq_epi32(b, _mm256_set1_epi32(0xff));
    u = _mm256_blendv_epi8(u, _mm256_set1_epi32(0x00400000), z);
    u = _mm256_blendv_epi8(u, _mm256_set1_epi32(0x7fc00000), n);
    return _mm256_castsi256_ps(u);
}

/* bf16 rounding of 8 floats, returned as floats (low 16 bits zero). */
V4_INLINE __m256 v4x_bf16_ps(__m256 f)
{
    __m256i u = _mm256_castps_si256(f);
    __m256i a = _mm256_and_si256(u, _mm256_set1_epi32(0x7fffffff));
    __m256i nan = _mm256_cmpgt_epi32(a, _mm256_set1_epi32(0x7f800000));
    __m256i lsb = _mm256_and_si256(_mm256_srli_epi32(u, 16), _mm256_set1_epi32(1));
    __m256i r = _mm256_add_epi32(_mm256_add_epi32(u, _mm256_set1_epi32(0x7fff)), lsb);
    __m256i q = _mm256_or_si256(u, _mm256_set1_epi32(0x00400000));
    r = _mm256_blendv_epi8(r, q, nan);
    return _mm256_castsi256_ps(_mm256_and_si256(r, _mm256_set1_epi32((int)0xffff0000u)));
}

/* Nearest-even e4m3 value of v (|v| <= 448 or NaN, as after the act-quant clamp).
 * Normal e4m3 range (|v| >= 2^-6): round the float mantissa to 3 bits on the bits.
 * Below: the subnormal grid 2^-9, rounded by adding and removing 1.5*2^14 (whose ulp
 * is 2^-9; the float addition rounds to nearest even).  NaN passes through. */
V4_INLINE __m256 v4x_e4m3_round_ps(__m256 v)
{
    __m256i u = _mm256_castps_si256(v);
    __m256i sign = _mm256_and_si256(u, _mm256_set1_epi32((int)0x80000000u));
    __m256i a = _mm256_and_si256(u, _mm256_set1_epi32(0x7fffffff));
    __m256i lsb = _mm256_and_si256(_mm256_srli_epi32(a, 20), _mm256_set1_epi32(1));
    __m256i rn = _mm256_add_epi32(_mm256_add_epi32(a, _mm256_set1_epi32(0x7ffff)), lsb);
    rn = _mm256_and_si256(rn, _mm256_set1_epi32((int)0xfff00000u));
    const __m256 magic = _mm256_set1_ps(24576.0f);
    __m256 sub = _mm256_sub_ps(_mm256_add_ps(_mm256_castsi256_ps(a), magic), magic);
    __m256i is_norm = _mm256_cmpgt_epi32(a, _mm256_set1_epi32(0x3c800000 - 1));
    __m256i r = _mm256_blendv_epi8(_mm256_castps_si256(sub), rn, is_norm);
    r = _mm256_or_si256(r, sign);
    __m256i nan = _mm256_cmpgt_epi32(a, _mm256_set1_epi32(0x7f800000));
    return _mm256_castsi256_ps(_mm256_blendv_epi8(r, u, nan));
}

/* In-place transpose of an 8x8 float matrix held as 8 rows. */
V4_INLINE void v4x_transpose8_ps(__m256 r[8])
{
    __m256 t0 = _mm256_unpacklo_ps(r[0], r[1]), t1 = _mm256_unpackhi_ps(r[0], r[1]);
    __m256 t2 = _mm256_unpacklo_ps(r[2], r[3]), t3 = _mm256_unpackhi_ps(r[2], r[3]);
    __m256 t4 = _mm256_unpacklo_ps(r[4], r[5]), t5 = _mm256_unpackhi_ps(r[4], r[5]);
    __m256 t6 = _mm256_unpacklo_ps(r[6], r[7]), t7 = _mm256_unpackhi_ps(r[6], r[7]);
    __m256 u0 = _mm256_shuffle_ps(t0, t2, _MM_SHUFFLE(1, 0, 1, 0));
    __m256 u1 = _mm256_shuffle_ps(t0, t2, _MM_SHUFFLE(3, 2, 3, 2));
    __m256 u2 = _mm256_shuffle_ps(t1, t3, _MM_SHUFFLE(1, 0, 1, 0));
    __m256 u3 = _mm256_shuffle_ps(t1, t3, _MM_SHUFFLE(3, 2, 3, 2));
    __m256 u4 = _mm256_shuffle_ps(t4, t6, _MM_SHUFFLE(1, 0, 1, 0));
    __m256 u5 = _mm256_shuffle_ps(t4, t6, _MM_SHUFFLE(3, 2, 3, 2));
    __m256 u6 = _mm256_shuffle_ps(t5, t7, _MM_SHUFFLE(1, 0, 1, 0));
    __m256 u7 = _mm256_shuffle_ps(t5, t7, _MM_SHUFFLE(3, 2, 3, 2));
    r[0] = _mm256_permute2f128_ps(u0, u4, 0x20);
    r[1] = _mm256_permute2f128_ps(u1, u5, 0x20);
    r[2] = _mm256_permute2f128_ps(u2, u6, 0x20);
    r[3] = _mm256_permute2f128_ps(u3, u7, 0x20);
    r[4] = _mm256_permute2f128_ps(u0, u4, 0x31);
    r[5] = _mm256_permute2f128_ps(u1, u5, 0x31);
    r[6] = _mm256_permute2f128_ps(u2, u6, 0x31);
    r[7] = _mm256_permute2f128_ps(u3, u7, 0x31);
}

/* 1 if none of x[b*ld + j] (b < n, j < cols) is NaN (nonfinite = 0) or NaN/inf
 * (nonfinite = 1).  The SIMD kernels defer to the scalar ones on such inputs: their
 * summation orders (and the FP4 integer trick) do not propagate NaNs like the scalar
 * loops do, and no real model state contains them. */
static inline int v4x_inputs_ok(const float *x, int n, int cols, size_t ld, int nonfinite)
{
    const __m256i absm = _mm256_set1_epi32(0x7fffffff);
    const __m256i lim = _mm256_set1_epi32(nonfinite ? 0x7f7fffff : 0x7f800000);
    for (int b = 0; b < n; b++) {
        const float *p = x + (size_t)b * ld;
        __m256i bad = _mm256_setzero_si256();
        int j = 0;
        for (; j + 8 <= cols; j += 8) {
            __m256i a = _mm256_and_si256(_mm256_loadu_si256((const __m256i *)(p + j)), absm);
            bad = _mm256_or_si256(bad, _mm256_cmpgt_epi32(a, lim));
        }
        if (!_mm256_testz_si256(bad, bad))
            return 0;
        for (; j < cols; j++) {
            uint32_t a = v4_f32_bits(p[j]) & 0x7fffffffu;
            if (a > (nonfinite ? 0x7f7fffffu : 0x7f800000u))
                return 0;
        }
    }
    return 1;
}

/* bf16(f32(e4m3 * sw)) of 8 bytes (low 8 of b8), as 8 floats.  e4m3 bits << 20 are
 * the float bits of the value * 2^-120 (subnormals too); NaN codes become quiet NaNs
 * with their sign, like v4_e4m3_to_f32. */
V4_INLINE __m256 v4x_fp8_dequant8(__m128i b8, __m256 sw)
{
    __m256i b = _mm256_cvtepi8_epi32(b8);
    __m256i bits = _mm256_and_si256(_mm256_slli_epi32(b, 20), _mm256_set1_epi32((int)0x87f00000u));
    __m256 v = _mm256_mul_ps(_mm256_castsi256_ps(bits), _mm256_set1_ps(0x1p120f));
    __m256i nan = _mm256_cmpeq_epi32(_mm256_and_si256(b, _mm256_set1_epi32(0x7f)), _mm256_set1_epi32(0x7f));
    __m256i nanbits = _mm256_or_si256(_mm256_and_si256(b, _mm256_set1_epi32((int)0x80000000u)),
                                      _mm256_set1_epi32(0x7fc00000));
    v = _mm256_blendv_ps(v, _mm256_castsi256_ps(nanbits), _mm256_castsi256_ps(nan));
    return v4x_bf16_ps(_mm256_mul_ps(v, sw));
}

/* R8 EXACT FP8 fast paths.  Every e4m3 value q is a multiple of 2^-9 with at most 4
 * significant bits and |q| <= 448.  For an E8M0 byte s in [3, 246] (sw = 2^k, k in
 * [-124, 119]) the scalar weight bf16(f32(q * sw)) is exactly q * 2^k: the float
 * product cannot overflow (448 * 2^119 < 2^128) and is a multiple of 2^-133, the bf16
 * grid below 2^-126, while above it 4 bits always fit.  So the product with x is
 * exactly x * q * 2^k, which two integer decodes of q reproduce:
 *   MUL:  the sign-extended byte << 49, masked to sign + 7 bits (0x80FE000000000000),
 *         is the double q * 2^-1016 (e4m3 subnormals become double subnormals, still
 *         exact); times the double 2^(888+k) (a normal power of two) it is exactly
 *         q * 2^(k-128), and the activations carry 2^128 (exact: |x| < 2^128 gives
 *         < 2^256).
 *   BIAS: for blocks without exponent-0 codes (zeros, subnormals) the same bits OR
 *         0x3F00000000000000 (exponent field 1008 + e) are the double q * 2^-8, and
 *         the activations carry 2^(k+8) (exact, normal: |x| 2^(k+8) in [2^-265,
 *         2^255]).  One integer op fewer, no multiply, no subnormal operands.
 * v4x_fp8_exact_scale returns the MUL scale 2^(888+k), or 0 when s is outside [3, 246]
 * (the block then takes the exact-dequantization path); v4x_fp8_bias_xscale the BIAS
 * activation scale 2^(k+8) (s in [3, 246]). */
#define V4X_E4M3_PD_MASK ((long long)0x80FE000000000000ull)
#define V4X_E4M3_PD_BIAS ((long long)0x3F00000000000000ull)

V4_INLINE double v4x_fp8_exact_scale(uint8_t s)
{
    if (s < 3 || s > 246)
        return 0.0;
    uint64_t u = (uint64_t)(1784 + s) << 52;     /* 1023 + 888 + (s - 127) */
    double d;
    memcpy(&d, &u, 8);
    return d;
}

V4_INLINE double v4x_fp8_bias_xscale(uint8_t s)
{
    uint64_t u = (uint64_t)(904 + s) << 52;      /* 1023 + (s - 127) + 8 */
    double d;
    memcpy(&d, &u, 8);
    return d;
}

/* Scale of the activation quantization for one 128-block, from the block's amax
 * (exactly the scalar expression in v4_act_quant). */
V4_INLINE float v4x_act_scale(float amax)
{
    const float inv448 = 1.0f / 448.0f;
    int e = v4_ceil_log2_bits(amax * inv448);
    /* ldexpf(1, e) for e in [-22, 128] (amax >= 1e-4): a normal power of two or inf */
    return e >= 128 ? v4_f32_from_bits(0x7f800000u) : v4_f32_from_bits((uint32_t)(e + 127) << 23);
}

#endif
