/* attn_kern_avx2.c - attn_kern.h's loops for AVX2 (compiled with -mavx2 -mfma -mf16c:
 * CMake keys on the file name; only called after v4_attn_kern_get() checked the CPU).
 * 8 double lanes = two ymm; 4 keys / 4 heads in flight = 8 ymm accumulators; the
 * multiply-adds are FMA intrinsics (an FMA of an exact product is the reference's
 * mul + add).
 * Thread: any. */
#if defined(__x86_64__)
#define V4_AK_SUFFIX avx2
#define V4_AK_VW 4
#define V4_AK_KB 4
#define V4_AK_HP 4
#include <immintrin.h>
#define V4_AK_MADD(a, x, y) ((v4ak_vd)_mm256_fmadd_pd((__m256d)(x), _mm256_set1_pd(y), (__m256d)(a)))
#include "attn_kern_body.h"
#else
typedef int v4_attn_kern_avx2_unused; /* ISO C: no empty translation unit */
#endif
