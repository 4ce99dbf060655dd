/* fast_x86.h - AVX-512 helpers shared by the fast mode's FP8 kernels
 * (linear_fast_avx512.c, linear_fast_bf16.c): the e4m3 decode, the NaN-code test, the
 * scale factor, the lane fold, the per-tile check that routes rows to the reference,
 * and the activation-scale check.  Include only from translation units compiled with
 * -mavx512{f,bw,vl,dq}.  Static inline, pure; thread: any.
 */
#ifndef V4_FAST_X86_H
#define V4_FAST_X86_H

#include <immintrin.h>
#include <stddef.h>
#include <stdint.h>

#include "../backend.h"

#ifndef V4_INLINE
#define V4_INLINE static inline __attribute__((always_inline))
#endif

/* 16 e4m3 bytes -> floats w * 2^-120 (NaN codes are not looked at here: nan_codes). */
V4_INLINE __m512 e4m3x16(__m128i bytes)
{
    const __m512i b = _mm512_cvtepi8_epi32(bytes);
    return _mm512_castsi512_ps(_mm512_and_si512(_mm512_slli_epi32(b, 20), _mm512_set1_epi32((int)0x87f00000u)));
}

/* Whether 128 e4m3 bytes hold a NaN code (0x7f or 0xff). */
V4_INLINE int nan_codes128(const uint8_t *p)
{
    const __m512i m = _mm512_set1_epi8(0x7f);
    return (_mm512_cmpeq_epi8_mask(_mm512_and_si512(_mm512_loadu_si512(p), m), m) |
            _mm512_cmpeq_epi8_mask(_mm512_and_si512(_mm512_loadu_si512(p + 64), m), m)) != 0;
}

/* s_w * 2^120 as a float, or 0 when the e8m0 byte is >= 135 (not a normal float then). */
V4_INLINE float scale_up(uint8_t e)
{
    if (e >= 135)
        return 0.0f;
    union { uint32_t u; float f; } v = {(uint32_t)(e + 120) << 23};
    return v.f;
}

/* The reference's fold of 16 lanes: a[l] += a[l + h], h = 8, 4, 2, 1. */
V4_INLINE float fold16(__m512 a)
{
    __m256 s8 = _mm256_add_ps(_mm512_castps512_ps256(a), _mm512_extractf32x8_ps(a, 1));
    __m128 s4 = _mm_add_ps(_mm256_castps256_ps128(s8), _mm256_extractf128_ps(s8, 1));
    __m128 s2 = _mm_add_ps(s4, _mm_movehl_ps(s4, s4));
    __m128 s1 = _mm_add_ss(s2, _mm_shuffle_ps(s2, s2, 1));
    return _mm_cvtss_f32(s1);
}

/* -------------------------------------------------------------------- FP8 -- */

/* Whether the decode takes rows [r, r + rt) of the FP8 matrix: no NaN code, every scale
 * byte in [10, 135) (so that every nonzero w * s_w is a normal float).  Checked once per
 * tile, before its passes over the vectors. */
static inline int fp8_rows_ok(const v4_mat *W, int r, int rt)
{
    const int K = W->cols, nkb = K / 128, scols = (K + 127) / 128;
    for (int i = r; i < r + rt; i++)
        for (int kb = 0; kb < nkb; kb++) {
            const uint8_t e = W->scale[(size_t)(i / 128) * scols + kb];
            if (e >= 135 || e < 10 || nan_codes128((const uint8_t *)W->w + (size_t)i * K + (size_t)kb * 128))
                return 0;
        }
    return 1;
}

/* Whether every activation scale of the call is finite (else the reference runs). */
static inline int scales_finite(const float *xs, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (!(xs[i] - xs[i] == 0.0f))
            return 0;
    return 1;
}

#endif
