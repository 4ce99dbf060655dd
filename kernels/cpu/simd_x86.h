/* simd_x86.h - AVX2-level helpers shared by linear_avx2.c and linear_avx512.c.
 *
 * Include only from translation units compiled with -mavx2 -mfma (the *_avx2.c and
 * *_avx512.c files); everything here is static inline and bit-exact with the scalar
 * helpers in codec.h:
 *   v4x_bf16_ps      = v4_bf16 (round to nearest even, NaN -> quiet NaN, as bits)
 *   v4x_e8m0_ps      = v4_e8m0_to_f32 (0 -> 2^-127 subnormal, 0xff -> NaN)
 *   v4x_e4m3_round_ps = v4_e4m3_round for |x| <= 448 or NaN (the act-quant domain)
 * plus an 8x8 float transpose, the scalar e8m0 decoder used by the tile loops, and the
 * input check behind the kernels' scalar fallback for NaN/inf activations.
 * Pure functions; thread: any.
 */
#ifndef V4_SIMD_X86_H
#define V4_SIMD_X86_H

#include <immintrin.h>
#include <stdint.h>

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
