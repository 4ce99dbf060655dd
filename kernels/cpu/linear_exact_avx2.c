/* linear_exact_avx2.c - AVX2+FMA EXACT row kernels (BF16, F32 and dequantized FP8
 * weights, double accumulation), bit-identical to linear_scalar.c; the QUANT kernels
 * are in linear_avx2.c.
 *
 * Compiled with -mavx2 -mfma (CMake keys on the file name); only called after the
 * backend checked the CPU at run time.  The algorithms and the exactness arguments are
 * those of linear_exact_avx512.c (read its header comment), at 256-bit width:
 *   lanes = rows (4 per ymm), each lane repeating the scalar double sequence in
 *         column order.  Row-major weights: 4-row x 16-column tiles transposed into an
 *         L1 buffer, 8 subtiles (32 rows) as independent FMA chains, software
 *         prefetch.  R8 weights: no transpose, a group's column is two ymm of doubles;
 *         FP8 through the same BIAS / MUL / exact decodes as AVX-512.
 * NaN/inf inputs go to the scalar kernels.
 * Threading/ownership: reentrant, disjoint row ranges per thread, no global state.
 */
#include "cpu_kernels.h"

#if V4_CPU_X86
#include <immintrin.h>
#include <string.h>

#include "simd_x86.h"

#define VGROUP 16       /* EXACT: batch vectors per pass over a tile */

static inline int imin(int a, int b) { return a < b ? a : b; }

/* ------------------------------------------------------------------ EXACT -- */

#define XSUB 8                  /* 4-row subtiles per tile (independent chains) */
#define XROWS (XSUB * 4)        /* 32 rows */
#define XCOLS 16                /* columns transposed per step */
#define XPF (8 * XCOLS)         /* prefetch distance in elements (8 steps ahead) */

/* buf[(j * XSUB + s) * 4 + lane] = w[row s*4+lane][j0 + j] as double */

/* 4 rows of 16 bf16 words -> 16 columns of 4 doubles */
V4_INLINE void tr16_to_buf(const __m256i *r, double *buf, int s)
{
    __m256i a0 = _mm256_unpacklo_epi16(r[0], r[1]), a1 = _mm256_unpackhi_epi16(r[0], r[1]);
    __m256i a2 = _mm256_unpacklo_epi16(r[2], r[3]), a3 = _mm256_unpackhi_epi16(r[2], r[3]);
    __m256i b[4];
    b[0] = _mm256_unpacklo_epi32(a0, a2);   /* lane L: cols 8L+0, 8L+1 (rows 0..3 each) */
    b[1] = _mm256_unpackhi_epi32(a0, a2);   /* 8L+2, 8L+3 */
    b[2] = _mm256_unpacklo_epi32(a1, a3);   /* 8L+4, 8L+5 */
    b[3] = _mm256_unpackhi_epi32(a1, a3);   /* 8L+6, 8L+7 */
    const __m256i zero = _mm256_setzero_si256();
#pragma GCC unroll 4
    for (int k = 0; k < 4; k++) {
        __m256 lo = _mm256_castsi256_ps(_mm256_unpacklo_epi16(zero, b[k]));  /* col 8L+2k */
        __m256 hi = _mm256_castsi256_ps(_mm256_unpackhi_epi16(zero, b[k]));  /* col 8L+2k+1 */
        _mm256_store_pd(buf + ((size_t)(2 * k) * XSUB + s) * 4, _mm256_cvtps_pd(_mm256_castps256_ps128(lo)));
        _mm256_store_pd(buf + ((size_t)(2 * k + 1) * XSUB + s) * 4, _mm256_cvtps_pd(_mm256_castps256_ps128(hi)));
        _mm256_store_pd(buf + ((size_t)(8 + 2 * k) * XSUB + s) * 4, _mm256_cvtps_pd(_mm256_extractf128_ps(lo, 1)));
        _mm256_store_pd(buf + ((size_t)(9 + 2 * k) * XSUB + s) * 4, _mm256_cvtps_pd(_mm256_extractf128_ps(hi, 1)));
    }
}

static void exact_transpose(const v4_mat *W, const int *rows, int j0, int cw, double *buf, int s)
{
    const int K = W->cols;
    if (W->type == V4_W_F32) {
        const float *w = W->w;
        for (int g = 0; g < XCOLS; g += 4) {
            __m128 m[4];
            const int c = imin(4, cw - g);
            for (int i = 0; i < 4; i++) {
                const float *p = w + (size_t)rows[s * 4 + i] * K + j0 + g;
                if (c == 4) {
                    m[i] = _mm_loadu_ps(p);
                    if (g == 0)
                        _mm_prefetch((const char *)(p + XPF), _MM_HINT_T0);
                } else {
                    float t[4] = {0};
                    if (c > 0)
                        memcpy(t, p, sizeof(float) * (size_t)c);
                    m[i] = _mm_loadu_ps(t);
                }
            }
            _MM_TRANSPOSE4_PS(m[0], m[1], m[2], m[3]);
            for (int j = 0; j < 4; j++)
                _mm256_store_pd(buf + ((size_t)(g + j) * XSUB + s) * 4, _mm256_cvtps_pd(m[j]));
        }
        return;
    }
    __m256i r[4];
    for (int i = 0; i < 4; i++) {
        const int row = rows[s * 4 + i];
        if (W->type == V4_W_BF16) {
            const uint16_t *p = (const uint16_t *)W->w + (size_t)row * K + j0;
            if (cw == XCOLS) {
                r[i] = _mm256_loadu_si256((const __m256i *)p);
                if ((j0 / XCOLS) % 2 == 0)
                    _mm_prefetch((const char *)(p + XPF), _MM_HINT_T0);
            } else {
                uint16_t t[XCOLS] = {0};
                memcpy(t, p, sizeof(uint16_t) * (size_t)cw);
                r[i] = _mm256_loadu_si256((const __m256i *)t);
            }
        } else {    /* V4_W_FP8, dequantized */
            const int scols = (K + 127) / 128;
            const uint8_t *p = (const uint8_t *)W->w + (size_t)row * K + j0;
            __m128i bytes;
            if (cw == XCOLS) {
                bytes = _mm_loadu_si128((const __m128i *)p);
                if ((j0 / XCOLS) % 4 == 0)
                    _mm_prefetch((const char *)(p + XPF), _MM_HINT_T0);
            } else {
                uint8_t t[XCOLS] = {0};
                memcpy(t, p, (size_t)cw);
                bytes = _mm_loadu_si128((const __m128i *)t);
            }
            const __m256 sw = _mm256_set1_ps(v4x_e8m0(W->scale[(size_t)(row / 128) * scols + j0 / 128]));
            __m256i lo = _mm256_srli_epi32(_mm256_castps_si256(v4x_fp8_dequant8(bytes, sw)), 16);
            __m256i hi = _mm256_srli_epi32(_mm256_castps_si256(v4x_fp8_dequant8(_mm_srli_si128(bytes, 8), sw)), 16);
            r[i] = _mm256_permute4x64_epi64(_mm256_packus_epi32(lo, hi), 0xd8);
        }
    }
    tr16_to_buf(r, buf, s);
}

/* acc[s] (4 rows each) += sum over j < cw, in column order, of buf[j][s] * xd[j]:
 * each lane is one row's scalar double sequence. */
V4_INLINE void exact_fma(const double *buf, const double *xd, int cw, double *acc, const int NS)
{
    __m256d a[XSUB];
#pragma GCC unroll 8
    for (int s = 0; s < NS; s++)
        a[s] = _mm256_load_pd(acc + (size_t)s * 4);
    for (int j = 0; j < cw; j++) {
        const __m256d xb = _mm256_set1_pd(xd[j]);
#pragma GCC unroll 8
        for (int s = 0; s < NS; s++)
            a[s] = _mm256_fmadd_pd(_mm256_load_pd(buf + ((size_t)j * XSUB + s) * 4), xb, a[s]);
    }
#pragma GCC unroll 8
    for (int s = 0; s < NS; s++)
        _mm256_store_pd(acc + (size_t)s * 4, a[s]);
}

/* dispatch on the number of subtiles (compile-time constants for the unrolling) */
V4_INLINE void exact_fma_ns(const double *buf, const double *xd, int cw, double *acc, int ns)
{
    switch (ns) {
    case 8: exact_fma(buf, xd, cw, acc, 8); break;
    case 7: exact_fma(buf, xd, cw, acc, 7); break;
    case 6: exact_fma(buf, xd, cw, acc, 6); break;
    case 5: exact_fma(buf, xd, cw, acc, 5); break;
    case 4: exact_fma(buf, xd, cw, acc, 4); break;
    case 3: exact_fma(buf, xd, cw, acc, 3); break;
    case 2: exact_fma(buf, xd, cw, acc, 2); break;
    default: exact_fma(buf, xd, cw, acc, 1); break;
    }
}

static void exact_tile(const v4_mat *W, int n, const float *x, int ldx, float *y, int ldy,
                       int rt, int nr)
{
    const int K = W->cols;
    const int ns = (nr + 3) / 4;
    int rows[XROWS];
    for (int i = 0; i < XROWS; i++)
        rows[i] = rt + imin(i, nr - 1);
    double buf[XCOLS * XSUB * 4] __attribute__((aligned(32)));
    double acc[VGROUP * XSUB * 4] __attribute__((aligned(32)));
    double xd[XCOLS];
    for (int v0 = 0; v0 < n; v0 += VGROUP) {
        const int nv = imin(VGROUP, n - v0);
        memset(acc, 0, sizeof(double) * (size_t)nv * XSUB * 4);
        for (int j0 = 0; j0 < K; j0 += XCOLS) {
            const int cw = imin(XCOLS, K - j0);
            for (int s = 0; s < ns; s++)
                exact_transpose(W, rows, j0, cw, buf, s);
            for (int v = 0; v < nv; v++) {
                const float *xv = x + (size_t)(v0 + v) * ldx + j0;
                for (int j = 0; j < cw; j++)
                    xd[j] = (double)xv[j];
                exact_fma_ns(buf, xd, cw, acc + (size_t)v * XSUB * 4, ns);
            }
        }
        for (int v = 0; v < nv; v++)
            for (int s = 0; s < ns; s++) {
                float t[4];
                _mm_storeu_ps(t, _mm256_cvtpd_ps(_mm256_load_pd(acc + ((size_t)v * XSUB + s) * 4)));
                memcpy(y + (size_t)(v0 + v) * ldy + rt + s * 4, t, sizeof(float) * (size_t)imin(4, nr - s * 4));
            }
    }
}

/* ------------------------------------------------------------- EXACT, R8 -- */

/* The R8 kernels of linear_exact_avx512.c (read its comment) at 256-bit width: a group of
 * 8 rows is two ymm of doubles (rows 0-3, 4-7); micro-kernels of G groups x V vectors
 * with 2*G*V <= 8 accumulators (16 ymm registers); the same FP8 block scan and
 * BIAS / MUL / exact-dequantization decodes (simd_x86.h). */
#define R8G 8                   /* groups of 8 rows per tile */
#define R8CK 256                /* columns per chunk (BF16/F32) */
#define R8V 4                   /* vectors per pass */
#define R8PF 1024               /* prefetch distance, bytes ahead in a group's stream */
#define R8PF_FP8 2048           /* FP8: the scan's prefetch distance (2 column blocks) */

enum { R8_F32, R8_BF16, R8_FP8_BIAS, R8_FP8_MUL, R8_FP8_SLOW };

/* 4 e4m3 bytes (low 4 of b) -> (sign + 7 bits) << 49 in 64-bit lanes */
V4_INLINE __m256i r8_e4m3_bits(__m128i b)
{
    return _mm256_and_si256(_mm256_slli_epi64(_mm256_cvtepi8_epi64(b), 49), _mm256_set1_epi64x(V4X_E4M3_PD_MASK));
}

/* 8 weights (one column of one group) as doubles: lo = rows 0-3, hi = rows 4-7 (x
 * carries the matching factor, see linear_exact_avx512.c r8_load). */
V4_INLINE void r8_load(const int T, const uint8_t *p, __m256d S, __m256 sw, __m256d *lo, __m256d *hi)
{
    if (T == R8_F32) {
        *lo = _mm256_cvtps_pd(_mm_loadu_ps((const float *)p));
        *hi = _mm256_cvtps_pd(_mm_loadu_ps((const float *)p + 4));
    } else if (T == R8_BF16) {
        const __m128i h = _mm_loadu_si128((const __m128i *)p), z = _mm_setzero_si128();
        *lo = _mm256_cvtps_pd(_mm_castsi128_ps(_mm_unpacklo_epi16(z, h)));
        *hi = _mm256_cvtps_pd(_mm_castsi128_ps(_mm_unpackhi_epi16(z, h)));
    } else if (T == R8_FP8_BIAS || T == R8_FP8_MUL) {
        const __m128i b = _mm_loadl_epi64((const __m128i *)p);
        const __m256i a = r8_e4m3_bits(b), c = r8_e4m3_bits(_mm_srli_si128(b, 4));
        if (T == R8_FP8_BIAS) {
            const __m256i bias = _mm256_set1_epi64x(V4X_E4M3_PD_BIAS);
            *lo = _mm256_castsi256_pd(_mm256_or_si256(a, bias));
            *hi = _mm256_castsi256_pd(_mm256_or_si256(c, bias));
        } else {
            *lo = _mm256_mul_pd(_mm256_castsi256_pd(a), S);
            *hi = _mm256_mul_pd(_mm256_castsi256_pd(c), S);
        }
    } else {
        const __m256 f = v4x_fp8_dequant8(_mm_loadl_epi64((const __m128i *)p), sw);
        const __m256d post = _mm256_set1_pd(0x1p-128);
        *lo = _mm256_mul_pd(_mm256_cvtps_pd(_mm256_castps256_ps128(f)), post);
        *hi = _mm256_mul_pd(_mm256_cvtps_pd(_mm256_extractf128_ps(f, 1)), post);
    }
}

/* G groups x V vectors, nj columns from column j0 (see linear_exact_avx512.c r8_mk);
 * acc: [v][R8G][8]. */
V4_INLINE void r8_mk(const int T, const uint8_t *const *gp, int j0, int nj, const double *xd,
                     const __m256d *S, const __m256 *sw, double *acc, const int G, const int V, int pf)
{
    const int es = T == R8_F32 ? 4 : T == R8_BF16 ? 2 : 1;
    const int U = 8 / es;                   /* columns per 64-byte line of a stream */
    __m256d a[8];
#pragma GCC unroll 8
    for (int i = 0; i < 2 * V * G; i++)
        a[i] = _mm256_load_pd(acc + (size_t)(((i / 2) / G) * R8G + (i / 2) % G) * 8 + (i % 2) * 4);
    const uint8_t *p[4];
#pragma GCC unroll 4
    for (int g = 0; g < G; g++)
        p[g] = gp[g] + (size_t)j0 * 8 * es;
    int j = 0;
    for (; j + U <= nj; j += U) {
        if (pf) {
#pragma GCC unroll 4
            for (int g = 0; g < G; g++)
                _mm_prefetch((const char *)(p[g] + (size_t)j * 8 * es + R8PF), _MM_HINT_T0);
        }
#pragma GCC unroll 8
        for (int u = 0; u < U; u++) {
#pragma GCC unroll 4
            for (int g = 0; g < G; g++) {
                __m256d lo, hi;
                r8_load(T, p[g] + (size_t)(j + u) * 8 * es, S[g], sw[g], &lo, &hi);
#pragma GCC unroll 4
                for (int v = 0; v < V; v++) {
                    const __m256d xb = _mm256_broadcast_sd(xd + v * R8CK + j + u);
                    a[2 * (v * G + g)] = _mm256_fmadd_pd(lo, xb, a[2 * (v * G + g)]);
                    a[2 * (v * G + g) + 1] = _mm256_fmadd_pd(hi, xb, a[2 * (v * G + g) + 1]);
                }
            }
        }
    }
    for (; j < nj; j++) {
#pragma GCC unroll 4
        for (int g = 0; g < G; g++) {
            __m256d lo, hi;
            r8_load(T, p[g] + (size_t)j * 8 * es, S[g], sw[g], &lo, &hi);
#pragma GCC unroll 4
            for (int v = 0; v < V; v++) {
                const __m256d xb = _mm256_broadcast_sd(xd + v * R8CK + j);
                a[2 * (v * G + g)] = _mm256_fmadd_pd(lo, xb, a[2 * (v * G + g)]);
                a[2 * (v * G + g) + 1] = _mm256_fmadd_pd(hi, xb, a[2 * (v * G + g) + 1]);
            }
        }
    }
#pragma GCC unroll 8
    for (int i = 0; i < 2 * V * G; i++)
        _mm256_store_pd(acc + (size_t)(((i / 2) / G) * R8G + (i / 2) % G) * 8 + (i % 2) * 4, a[i]);
}

/* One pass (V vectors) over ng groups: micro-kernels of 4 (V = 1), 2 (V = 2) or 1 group. */
V4_INLINE void r8_pass(const int T, const uint8_t *const *gp, int ng, int j0, int nj, const double *xd,
                       const __m256d *S, const __m256 *sw, double *acc, const int V, int pf)
{
    const int gmax = V == 1 ? 4 : V == 2 ? 2 : 1;
    for (int g = 0; g < ng;) {
        const int left = imin(gmax, ng - g);
        const int G = left >= 4 ? 4 : left >= 2 ? 2 : 1;
        double *ag = acc + (size_t)g * 8;
        if (V == 1 && G == 4)
            r8_mk(T, gp + g, j0, nj, xd, S + g, sw + g, ag, 4, 1, pf);
        else if (V <= 2 && G == 2)
            r8_mk(T, gp + g, j0, nj, xd, S + g, sw + g, ag, 2, V <= 2 ? V : 1, pf);
        else
            r8_mk(T, gp + g, j0, nj, xd, S + g, sw + g, ag, 1, V, pf);
        g += G;
    }
}

V4_INLINE void r8_pass_v(const int T, const uint8_t *const *gp, int ng, int j0, int nj, const double *xd,
                         const __m256d *S, const __m256 *sw, double *acc, int V, int pf)
{
    switch (V) {
    case 1: r8_pass(T, gp, ng, j0, nj, xd, S, sw, acc, 1, pf); break;
    case 2: r8_pass(T, gp, ng, j0, nj, xd, S, sw, acc, 2, pf); break;
    case 3: r8_pass(T, gp, ng, j0, nj, xd, S, sw, acc, 3, pf); break;
    default: r8_pass(T, gp, ng, j0, nj, xd, S, sw, acc, 4, pf); break;
    }
}

/* FP8 block scan (see linear_exact_avx512.c): bit 0 = a NaN code, bit 1 = an exponent-0 code. */
static int r8_fp8_scan(const uint8_t *const *gp, int ng, int j0, int nj)
{
    const __m256i m7f = _mm256_set1_epi8(0x7f), m78 = _mm256_set1_epi8(0x78), z = _mm256_setzero_si256();
    const int nb = nj * 8;      /* a multiple of 8 */
    __m256i bn = z, bz = z;
    for (int g = 0; g < ng; g++) {
        const uint8_t *p = gp[g] + (size_t)j0 * 8;
        for (int o = 0; o < nb;) {
            __m256i v;
            if (o + 32 <= nb) {
                if (o % 64 == 0)
                    _mm_prefetch((const char *)(p + o + R8PF_FP8), _MM_HINT_T0);
                v = _mm256_loadu_si256((const __m256i *)(p + o));
                o += 32;
            } else {    /* 8 bytes; the rest of v reads as 0x08 (neither flag) */
                v = _mm256_blend_epi32(_mm256_set1_epi8(0x08),
                                       _mm256_castsi128_si256(_mm_loadl_epi64((const __m128i *)(p + o))), 0x03);
                o += 8;
            }
            bn = _mm256_or_si256(bn, _mm256_cmpeq_epi8(_mm256_and_si256(v, m7f), m7f));
            bz = _mm256_or_si256(bz, _mm256_cmpeq_epi8(_mm256_and_si256(v, m78), z));
        }
    }
    return (!_mm256_testz_si256(bn, bn)) | (!_mm256_testz_si256(bz, bz)) << 1;
}

/* Groups [ga0, ga0+ng) of an R8 matrix; writes only rows in [r0, r1). */
static void r8_tile(const v4_mat *W, int n, const float *x, int ldx, float *y, int ldy,
                    int ga0, int ng, int r0, int r1)
{
    const int K = W->cols, scols = (K + 127) / 128;
    const int fp8 = W->type == V4_W_FP8;
    const int es = W->type == V4_W_F32 ? 4 : W->type == V4_W_BF16 ? 2 : 1;
    const uint8_t *gp[R8G], *srow[R8G];
    for (int g = 0; g < ng; g++) {
        gp[g] = (const uint8_t *)W->w + (size_t)(ga0 + g) * (size_t)K * 8 * es;
        srow[g] = fp8 ? W->scale + (size_t)((ga0 + g) * 8 / 128) * scols : NULL;
    }
    double acc[VGROUP * R8G * 8] __attribute__((aligned(32)));
    double xd[R8V * R8CK] __attribute__((aligned(32)));
    __m256d S[R8G];
    __m256 sw[R8G];
    for (int g = 0; g < R8G; g++) {
        S[g] = _mm256_setzero_pd();
        sw[g] = _mm256_setzero_ps();
    }
    const int ckw = fp8 ? 128 : R8CK;       /* FP8: a chunk is one scale block */
    for (int vb = 0; vb < n; vb += VGROUP) {
        const int nvb = imin(VGROUP, n - vb);
        memset(acc, 0, sizeof(double) * (size_t)nvb * R8G * 8);
        for (int jc = 0; jc < K; jc += ckw) {
            const int ck = imin(ckw, K - jc);
            int T = W->type == V4_W_F32 ? R8_F32 : R8_BF16;
            double pre = 1.0;
            if (fp8) {
                const int kb = jc / 128, flags = r8_fp8_scan(gp, ng, jc, ck);
                int ok = !(flags & 1), uniform = 1;
                for (int g = 0; g < ng; g++) {
                    ok &= v4x_fp8_exact_scale(srow[g][kb]) != 0.0;
                    uniform &= srow[g][kb] == srow[0][kb];
                }
                if (!ok) {
                    T = R8_FP8_SLOW;
                    pre = 0x1p128;
                    for (int g = 0; g < ng; g++)
                        sw[g] = _mm256_set1_ps(v4x_e8m0(srow[g][kb]));
                } else if (uniform && !(flags & 2)) {
                    T = R8_FP8_BIAS;
                    pre = v4x_fp8_bias_xscale(srow[0][kb]);
                } else {
                    T = R8_FP8_MUL;
                    pre = 0x1p128;
                    for (int g = 0; g < ng; g++)
                        S[g] = _mm256_set1_pd(v4x_fp8_exact_scale(srow[g][kb]));
                }
            }
            const __m256d vpre = _mm256_set1_pd(pre);
            for (int v0 = 0; v0 < nvb; v0 += R8V) {
                const int V = imin(R8V, nvb - v0);
                for (int v = 0; v < V; v++) {
                    const float *xv = x + (size_t)(vb + v0 + v) * ldx + jc;
                    double *d = xd + (size_t)v * R8CK;
                    int j = 0;
                    for (; j + 4 <= ck; j += 4)
                        _mm256_store_pd(d + j, _mm256_mul_pd(_mm256_cvtps_pd(_mm_loadu_ps(xv + j)), vpre));
                    for (; j < ck; j++)
                        d[j] = (double)xv[j] * pre;
                }
                double *av = acc + (size_t)v0 * R8G * 8;
                const int pf = v0 == 0;
                switch (T) {
                case R8_F32: r8_pass_v(R8_F32, gp, ng, jc, ck, xd, S, sw, av, V, pf); break;
                case R8_BF16: r8_pass_v(R8_BF16, gp, ng, jc, ck, xd, S, sw, av, V, pf); break;
                case R8_FP8_BIAS: r8_pass_v(R8_FP8_BIAS, gp, ng, jc, ck, xd, S, sw, av, V, 0); break;
                case R8_FP8_MUL: r8_pass_v(R8_FP8_MUL, gp, ng, jc, ck, xd, S, sw, av, V, 0); break;
                default:    /* rare (NaN codes, extreme scales): one group, one vector at a time */
                    for (int v = 0; v < V; v++)
                        for (int g = 0; g < ng; g++)
                            r8_mk(R8_FP8_SLOW, gp + g, jc, ck, xd + (size_t)v * R8CK, S + g, sw + g,
                                  av + ((size_t)v * R8G + g) * 8, 1, 1, 0);
                    break;
                }
            }
        }
        for (int v = 0; v < nvb; v++)
            for (int g = 0; g < ng; g++) {
                const int rg = (ga0 + g) * 8;
                const double *ap = acc + ((size_t)v * R8G + g) * 8;
                float t[8];
                _mm_storeu_ps(t, _mm256_cvtpd_ps(_mm256_load_pd(ap)));
                _mm_storeu_ps(t + 4, _mm256_cvtpd_ps(_mm256_load_pd(ap + 4)));
                for (int i = 0; i < 8; i++)
                    if (rg + i >= r0 && rg + i < r1)
                        y[(size_t)(vb + v) * ldy + rg + i] = t[i];
            }
    }
}

static void exact_r8(const v4_mat *W, int n, const float *x, int ldx, float *y, int ldy, int r0, int r1)
{
    const int gend = (r1 + 7) / 8;
    for (int ga = r0 / 8; ga < gend; ga += R8G)
        r8_tile(W, n, x, ldx, y, ldy, ga, imin(R8G, gend - ga), r0, r1);
}

void v4_rows_exact_avx2(const v4_mat *W, int n, const float *xq, const float *xs,
                        const float *x, int ldx, float *y, int ldy, int r0, int r1)
{
    if (n <= 0 || W->cols <= 0 ||
        (W->type != V4_W_F32 && W->type != V4_W_BF16 && W->type != V4_W_FP8) ||
        !v4x_inputs_ok(x, n, W->cols, (size_t)ldx, 1)) {
        v4_rows_exact_scalar(W, n, xq, xs, x, ldx, y, ldy, r0, r1);
        return;
    }
    if (W->layout == V4_LAYOUT_R8) {
        exact_r8(W, n, x, ldx, y, ldy, r0, r1);
        return;
    }
    for (int rt = r0; rt < r1; rt += XROWS)
        exact_tile(W, n, x, ldx, y, ldy, rt, imin(XROWS, r1 - rt));
}

#endif /* V4_CPU_X86 */
