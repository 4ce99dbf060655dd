/* attn_kern_body.h - the body of attn_kern.h's loops (dots8 and accum8 through
 * attn_kern_keys.h, once for float and once for bf16 key rows), included once per ISA
 * by attn_kern.c, attn_kern_avx2.c and attn_kern_avx512.c, which define
 *   V4_AK_SUFFIX  the name suffix (portable, avx2, avx512)
 *   V4_AK_VW      doubles per hardware vector (8: zmm, 4: ymm, 2: xmm); the 8 lanes
 *                 of attn_kern.h are 8 / V4_AK_VW such vectors (GCC compiles generic
 *                 vectors wider than the target's registers poorly: spills)
 *   V4_AK_KB      keys in flight in dots8 (independent accumulators of 8 lanes)
 *   V4_AK_HP      heads per pass in accum8 (independent accumulators of 8 lanes)
 * before including it.  Written with GCC vector extensions; every lane is one
 * reference chain and every add happens in the reference's order (attn_kern.h).  The files are compiled
 * with -ffp-contract=off like the rest; mul + add and FMA would give the same bits
 * anyway (the products are exact).  Vectors never cross a function boundary (no ABI
 * dependence), loads and stores go through memcpy (no alignment or aliasing
 * assumptions).  Stack: dots8 keeps a tile of V4_AK_KB x 128 converted keys (4-8 KiB).
 * Thread: any (pure).
 */
#include <stdint.h>
#include <string.h>

#include "../codec.h"
#include "attn_kern.h"

#define V4_AK_CAT2(a, b) a##_##b
#define V4_AK_CAT(a, b) V4_AK_CAT2(a, b)
#define V4_AK_NAME(f) V4_AK_CAT(f, V4_AK_SUFFIX)
#define V4_AK_DT 128 /* d tile of converted keys in dots8 */

#define V4_AK_NV (V4_AK_LANES / V4_AK_VW)

typedef double v4ak_vd __attribute__((vector_size(V4_AK_VW * 8)));
typedef float v4ak_vf __attribute__((vector_size(V4_AK_VW * 4)));
typedef uint16_t v4ak_vh __attribute__((vector_size(V4_AK_VW * 2))); /* bf16 bits */
typedef uint16_t v4ak_vh2 __attribute__((vector_size(V4_AK_VW * 4)));

/* The including file may map these to intrinsics (GCC splits some generic conversions
 * into halves and never emits an FMA with -ffp-contract=off).  V4_AK_MADD(a, x, y) =
 * a + x*y (y a double scalar) with the product exact, so fused or not it is the same
 * value. */
#ifndef V4_AK_TO_PD
#define V4_AK_TO_PD(x) __builtin_convertvector((x), v4ak_vd)
#endif
#ifndef V4_AK_TO_PS
#define V4_AK_TO_PS(x) __builtin_convertvector((x), v4ak_vf)
#endif
#ifndef V4_AK_MADD
#define V4_AK_MADD(a, x, y) ((a) + (x) * (y))
#endif

/* 8-wide types of relu_terms8 (straight-line code: fine at any register width) */
typedef double v4ak_vd8 __attribute__((vector_size(64)));
typedef float v4ak_vf8 __attribute__((vector_size(32)));
typedef uint32_t v4ak_vu8 __attribute__((vector_size(32)));
typedef int32_t v4ak_vi8 __attribute__((vector_size(32)));
#ifndef V4_AK_TO_PS8
#define V4_AK_TO_PS8(x) __builtin_convertvector((x), v4ak_vf8)
#endif
#ifndef V4_AK_TO_PD8
#define V4_AK_TO_PD8(x) __builtin_convertvector((x), v4ak_vd8)
#endif

/* dots8 / accum8 for float key rows, then for bf16 key rows (the sequence caches) */
static inline v4ak_vf V4_AK_NAME(v4ak_ldf)(const float *p)
{
    v4ak_vf x;
    memcpy(&x, p, sizeof x);
    return x;
}
static inline v4ak_vf V4_AK_NAME(v4ak_ldh)(const uint16_t *p)
{
    /* f32 bits = bf16 bits << 16: interleave zero halfwords below them (one unpack
     * instruction; a widening conversion + shift costs more, without SSE4.1 much more) */
#if V4_AK_VW == 2
    /* two lanes: two scalar shifts beat a 4-byte vector's shuffles */
    const uint32_t u[2] = {(uint32_t)p[0] << 16, (uint32_t)p[1] << 16};
#else
    v4ak_vh h;
    memcpy(&h, p, sizeof h);
    const v4ak_vh z = {0};
#if V4_AK_VW == 4
    const v4ak_vh2 u = __builtin_shufflevector(z, h, 0, 4, 0, 5, 0, 6, 0, 7);
#else
    const v4ak_vh2 u = __builtin_shufflevector(z, h, 0, 8, 0, 9, 0, 10, 0, 11, 0, 12, 0, 13, 0, 14, 0, 15);
#endif
#endif
    v4ak_vf x;
    memcpy(&x, &u, sizeof x);
    return x;
}
#define V4_AK_KT float
#define V4_AK_KNAME(f) V4_AK_NAME(f)
#define V4_AK_LDK(p) V4_AK_NAME(v4ak_ldf)(p)
#define V4_AK_LDK1(x) (x)
#include "attn_kern_keys.h"
#define V4_AK_KT uint16_t
#define V4_AK_KNAME(f) V4_AK_NAME(V4_AK_CAT2(f, bf16))
#define V4_AK_LDK(p) V4_AK_NAME(v4ak_ldh)(p)
#define V4_AK_LDK1(x) v4_bf16_from_bits(x)
#include "attn_kern_keys.h"

/* codec.h's v4_bf16 on 8 lanes: round to nearest even, NaN -> quiet NaN of the top half. */
#define V4_AK_BF16_8(u)                                                                            \
    do {                                                                                           \
        const v4ak_vu8 nan_ = (v4ak_vu8)((v4ak_vi8)((u) & 0x7fffffffu) > (int32_t)0x7f800000);     \
        const v4ak_vu8 rne_ = ((u) + 0x7fffu + (((u) >> 16) & 1u)) >> 16;                          \
        (u) = (((rne_ & ~nan_) | ((((u) >> 16) | 0x40u) & nan_)) << 16);                           \
    } while (0)

void V4_AK_NAME(v4_ak_relu_terms8)(const double *D, int rows, const float *w8, double *T)
{
    v4ak_vf8 w;
    memcpy(&w, w8, sizeof w);
    for (int j = 0; j < rows; j++) {
        v4ak_vd8 x;
        memcpy(&x, D + (size_t)j * 8, sizeof x);
        v4ak_vf8 f = V4_AK_TO_PS8(x);
        v4ak_vu8 u;
        memcpy(&u, &f, sizeof u);
        V4_AK_BF16_8(u);
        /* d < 0 ? 0 : d: negative, non-zero and not NaN -> +0 (-0 and NaN stay) */
        const v4ak_vu8 a = u & 0x7fffffffu;
        const v4ak_vu8 neg = (v4ak_vu8)((v4ak_vi8)u < 0) & (v4ak_vu8)(a != 0u) &
                             (v4ak_vu8)((v4ak_vi8)a <= (int32_t)0x7f800000);
        u &= ~neg;
        memcpy(&f, &u, sizeof f);
        f = f * w;
        memcpy(&u, &f, sizeof u);
        V4_AK_BF16_8(u);
        memcpy(&f, &u, sizeof f);
        const v4ak_vd8 y = V4_AK_TO_PD8(f);
        memcpy(T + (size_t)j * 8, &y, sizeof y);
    }
}

void V4_AK_NAME(v4_ak_div_bf16)(float *x, int n, float l)
{
    int i = 0;
    for (; i + 8 <= n; i += 8) {
        v4ak_vf8 f;
        memcpy(&f, x + i, sizeof f);
        f = f / l;                 /* IEEE division per lane: the scalar's bits */
        v4ak_vu8 u;
        memcpy(&u, &f, sizeof u);
        V4_AK_BF16_8(u);
        memcpy(x + i, &u, sizeof u);
    }
    for (; i < n; i++) {
        float f = x[i] / l;
        v4ak_vu8 u = {0};
        memcpy(&u, &f, sizeof f);
        V4_AK_BF16_8(u);
        memcpy(x + i, &u, sizeof f);
    }
}
