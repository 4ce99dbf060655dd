/* attn_kern_avx512.c - attn_kern.h's loops for AVX-512 (compiled with
 * -mavx512f/bw/vl/dq: CMake keys on the file name; only called after
 * v4_attn_kern_get() checked the CPU).  8 double lanes = one zmm; 4 keys in flight in
 * dots8, all 8 heads in one pass of accum8 (the key row is converted once for 8);
 * the conversions and the multiply-adds are intrinsics (one instruction each; an FMA
 * of an exact product is the reference's mul + add).
 * Thread: any. */
#if defined(__x86_64__)
#define V4_AK_SUFFIX avx512
#define V4_AK_VW 8
#define V4_AK_KB 4
#define V4_AK_HP 8
#include <immintrin.h>
#define V4_AK_TO_PD(x) ((v4ak_vd)_mm512_cvtps_pd((__m256)(x)))
#define V4_AK_TO_PS(x) ((v4ak_vf)_mm512_cvtpd_ps((__m512d)(x)))
#define V4_AK_TO_PD8(x) ((v4ak_vd8)_mm512_cvtps_pd((__m256)(x)))
#define V4_AK_TO_PS8(x) ((v4ak_vf8)_mm512_cvtpd_ps((__m512d)(x)))
#define V4_AK_MADD(a, x, y) ((v4ak_vd)_mm512_fmadd_pd((__m512d)(x), _mm512_set1_pd(y), (__m512d)(a)))
#include "attn_kern_body.h"
#else
typedef int v4_attn_kern_avx512_unused; /* ISO C: no empty translation unit */
#endif
