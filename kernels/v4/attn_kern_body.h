/* attn_kern_body.h - the body of attn_kern.h's dots8 and accum8, included once per ISA
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

#include "attn_kern.h"

#define V4_AK_CAT2(a, b) a##_##b
#define V4_AK_CAT(a, b) V4_AK_CAT2(a, b)
#define V4_AK_NAME(f) V4_AK_CAT(f, V4_AK_SUFFIX)
#define V4_AK_DT 128 /* d tile of converted keys in dots8 */

#define V4_AK_NV (V4_AK_LANES / V4_AK_VW)

typedef double v4ak_vd __attribute__((vector_size(V4_AK_VW * 8)));
typedef float v4ak_vf __attribute__((vector_size(V4_AK_VW * 4)));

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

void V4_AK_NAME(v4_ak_dots8)(const float *qT, int hd, const float *const *keys, int nk, double *out)
{
    for (int c0 = 0; c0 < nk; c0 += V4_AK_KB) {
        const float *kp[V4_AK_KB];
        v4ak_vd a[V4_AK_KB][V4_AK_NV];
#pragma GCC unroll 16
        for (int i = 0; i < V4_AK_KB; i++) {
            kp[i] = keys[c0 + i < nk ? c0 + i : nk - 1]; /* short block: repeat the last key */
#pragma GCC unroll 8
            for (int v = 0; v < V4_AK_NV; v++)
                a[i][v] = (v4ak_vd){0};
        }
        for (int d0 = 0; d0 < hd; d0 += V4_AK_DT) {
            const int dn = hd - d0 < V4_AK_DT ? hd - d0 : V4_AK_DT;
            double kd[V4_AK_KB][V4_AK_DT];
            for (int i = 0; i < V4_AK_KB; i++) {
                int t = 0;
                for (; t + V4_AK_VW <= dn; t += V4_AK_VW) {
                    v4ak_vf x;
                    memcpy(&x, kp[i] + d0 + t, sizeof x);
                    const v4ak_vd y = V4_AK_TO_PD(x);
                    memcpy(&kd[i][t], &y, sizeof y);
                }
                for (; t < dn; t++)
                    kd[i][t] = (double)kp[i][d0 + t];
            }
            const float *qp = qT + (size_t)d0 * V4_AK_LANES;
            for (int t = 0; t < dn; t++) {
                v4ak_vd qd[V4_AK_NV];
#pragma GCC unroll 8
                for (int v = 0; v < V4_AK_NV; v++) {
                    v4ak_vf qf;
                    memcpy(&qf, qp + (size_t)t * V4_AK_LANES + v * V4_AK_VW, sizeof qf);
                    qd[v] = V4_AK_TO_PD(qf);
                }
#pragma GCC unroll 16
                for (int i = 0; i < V4_AK_KB; i++)
#pragma GCC unroll 8
                    for (int v = 0; v < V4_AK_NV; v++)
                        a[i][v] = V4_AK_MADD(a[i][v], qd[v], kd[i][t]);
            }
        }
#pragma GCC unroll 16
        for (int i = 0; i < V4_AK_KB; i++)
            if (c0 + i < nk)
#pragma GCC unroll 8
                for (int v = 0; v < V4_AK_NV; v++)
                    memcpy(out + (size_t)(c0 + i) * V4_AK_LANES + v * V4_AK_VW, &a[i][v], sizeof a[i][v]);
    }
}

void V4_AK_NAME(v4_ak_accum8)(float *const *acc, const float *f, const double *pbd, const float *const *kv,
                              int nv, int hd, unsigned active)
{
    int d = 0;
    for (; d + V4_AK_LANES <= hd; d += V4_AK_LANES) {
        for (int h0 = 0; h0 < V4_AK_LANES; h0 += V4_AK_HP) {
            const unsigned act = (active >> h0) & ((1u << V4_AK_HP) - 1u);
            if (!act)
                continue;
            v4ak_vd a[V4_AK_HP][V4_AK_NV];
#pragma GCC unroll 16
            for (int i = 0; i < V4_AK_HP; i++)
#pragma GCC unroll 8
                for (int v = 0; v < V4_AK_NV; v++) {
                    a[i][v] = (v4ak_vd){0};
                    if (act >> i & 1u) {
                        v4ak_vf av;
                        memcpy(&av, acc[h0 + i] + d + v * V4_AK_VW, sizeof av);
                        av = av * f[h0 + i]; /* f32(acc[d] * f) */
                        a[i][v] = V4_AK_TO_PD(av);
                    }
                }
            for (int c = 0; c < nv; c++) {
                v4ak_vd k[V4_AK_NV];
#pragma GCC unroll 8
                for (int v = 0; v < V4_AK_NV; v++) {
                    v4ak_vf kf;
                    memcpy(&kf, kv[c] + d + v * V4_AK_VW, sizeof kf);
                    k[v] = V4_AK_TO_PD(kf);
                }
#pragma GCC unroll 16
                for (int i = 0; i < V4_AK_HP; i++)
#pragma GCC unroll 8
                    for (int v = 0; v < V4_AK_NV; v++)
                        a[i][v] = V4_AK_MADD(a[i][v], k[v], pbd[(size_t)(h0 + i) * V4_AK_CHUNK + c]);
            }
#pragma GCC unroll 16
            for (int i = 0; i < V4_AK_HP; i++)
                if (act >> i & 1u)
#pragma GCC unroll 8
                    for (int v = 0; v < V4_AK_NV; v++) {
                        const v4ak_vf r = V4_AK_TO_PS(a[i][v]);
                        memcpy(acc[h0 + i] + d + v * V4_AK_VW, &r, sizeof r);
                    }
        }
    }
    for (; d < hd; d++) /* hd % 8 tail: the reference loop per head */
        for (int i = 0; i < V4_AK_LANES; i++) {
            if (!(active >> i & 1u))
                continue;
            double a = (double)(acc[i][d] * f[i]);
            for (int c = 0; c < nv; c++)
                a += pbd[(size_t)i * V4_AK_CHUNK + c] * (double)kv[c][d];
            acc[i][d] = (float)a;
        }
}

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
