/* linear_fast_avx512.c - AVX-512 (F+BW+VL+DQ) kernels of the `fast` numerics mode, bit-
 * identical to linear_fast.c (the order is defined there and in cpu_kernels.h): FP8
 * QUANT and the V4_LIN_BF16 products (EXACT below: the head, wo_a).
 *
 * Compiled with -mavx512{f,bw,vl,dq} (CMake keys on the file name); only called after
 * the backend checked the CPU at run time.  Same signatures and row-range contract as
 * the other row kernels (cpu_kernels.h); reentrant, no global state.
 *
 * e4m3 decode without a table: the byte sign-extended to 32 bits and shifted left by 20,
 * masked with 0x87f00000, is the float w * 2^-120 (the sign lands in bit 31, the 7 bits
 * of exponent and mantissa in bits 20-26; e4m3 subnormals land on float subnormals,
 * exactly): three instructions for 16 weights.  NaN codes are looked for once per
 * 128-byte block (64 bytes per compare).  Multiplying by s_w * 2^120 (a power of two, a normal
 * float for e8m0 bytes below 135) gives w * s_w with the one rounding the reference
 * does.  Tiles with an e4m3 NaN code or an e8m0 byte >= 135 (weights scaled by 2^8 or
 * more, or a NaN scale) are run by the reference, which handles them exactly; each tile
 * is checked once, before its passes over the vectors (fp8_rows_ok, r8_fp8_ok).
 *
 * FP8 QUANT (where the CPU lacks AVX512-BF16; linear_fast_bf16.c otherwise): the
 * reference's dot-instruction order emulated with float FMAs.  The activations
 * x' = xq * s_act are made once per call into a buffer of n*K floats, per 32-column
 * chunk its 16 odd columns then its 16 even ones (if the buffer cannot be allocated the
 * reference runs); a chunk's 32 weight bytes are split into odd and even bytes
 * (a byte shuffle) and decoded; each lane does fma(odd), then fma(even), on chain 0 for
 * even chunks and chain 1 for odd ones, with MXCSR.FTZ set for the call (the
 * instruction flushes its results), then chain 0 + chain 1, the fold, bf16.  Tiles of 4
 * rows x up to 4 vectors, two accumulators per (row, vector).
 * EXACT (R8 layout only; row-major goes to the reference): one 16-lane vector = two R8
 * groups (16 rows) at column j, so each lane is one row's chain and x_j is one broadcast
 * load for all 16.  Tiles of 8 group pairs x 1 vector, 4 x 2 or 2 x 4 (2 x 8 from 8
 * vectors on: each decoded weight vector feeds twice as many chains): enough
 * independent FMA chains to hide the latency.
 */
#include "cpu_kernels.h"

#if V4_CPU_X86
#include <immintrin.h>
#include <stdlib.h>

#include "../codec.h"
#include "fast_x86.h"
#include "simd_x86.h"

static inline int imin(int a, int b) { return a < b ? a : b; }

/* 32 e4m3 bytes -> the odd (columns 1, 3, .., 31) and even bytes, 16 each. */
V4_INLINE void split_odd_even(const uint8_t *p, __m128i *odd, __m128i *even)
{
    const __m256i v = _mm256_loadu_si256((const __m256i *)p);
    const __m256i m = _mm256_setr_epi8(0, 2, 4, 6, 8, 10, 12, 14, 1, 3, 5, 7, 9, 11, 13, 15,
                                       0, 2, 4, 6, 8, 10, 12, 14, 1, 3, 5, 7, 9, 11, 13, 15);
    const __m256i t = _mm256_permute4x64_epi64(_mm256_shuffle_epi8(v, m), 0xd8);   /* e0 e1 o0 o1 (qwords) */
    *even = _mm256_castsi256_si128(t);
    *odd = _mm256_extracti128_si256(t, 1);
}

/* Rows [r, r + RT) x vectors [v0, v0 + V) of the FP8 product (rows fp8_rows_ok), in
 * the reference's dot-instruction order: xd holds each vector's x' per 32-column chunk
 * as its 16 odd then its 16 even columns; each lane does the odd FMA, then the even
 * one (MXCSR flush-to-zero on: the instruction's FTZ). */
V4_INLINE void fp8_tile(const v4_mat *W, const float *xd, int K, int r, const int RT, int v0, const int V, float *y,
                       int ldy)
{
    const int nkb = K / 128, scols = (K + 127) / 128;
    const uint8_t *w = W->w;
    __m512 acc[4][4][2];
    #pragma GCC unroll 4
    for (int i = 0; i < RT; i++)
        #pragma GCC unroll 4
        for (int v = 0; v < V; v++)
            acc[i][v][0] = acc[i][v][1] = _mm512_setzero_ps();
    for (int kb = 0; kb < nkb; kb++) {
        __m512 fb[4];
        #pragma GCC unroll 4
        for (int i = 0; i < RT; i++)
            fb[i] = _mm512_set1_ps(scale_up(W->scale[(size_t)((r + i) / 128) * scols + kb]));
        for (int c = kb * 128; c < kb * 128 + 128; c += 64) {   /* chunk c: chain 0, c + 32: chain 1 */
            #pragma GCC unroll 2
            for (int ch = 0; ch < 2; ch++) {
                const int cc = c + 32 * ch;
                __m512 xo[4], xe[4];
                #pragma GCC unroll 4
                for (int v = 0; v < V; v++) {
                    xo[v] = _mm512_loadu_ps(xd + (size_t)(v0 + v) * K + cc);
                    xe[v] = _mm512_loadu_ps(xd + (size_t)(v0 + v) * K + cc + 16);
                }
                #pragma GCC unroll 4
                for (int i = 0; i < RT; i++) {
                    const uint8_t *p = w + (size_t)(r + i) * K + cc;
                    if (ch == 0 && v0 == 0)   /* the next tile's row, while this one computes */
                        _mm_prefetch((const char *)(p + (size_t)RT * K), _MM_HINT_T0);
                    __m128i bo, be;
                    split_odd_even(p, &bo, &be);
                    const __m512 wo = _mm512_mul_ps(e4m3x16(bo), fb[i]), we = _mm512_mul_ps(e4m3x16(be), fb[i]);
                    #pragma GCC unroll 4
                    for (int v = 0; v < V; v++)
                        acc[i][v][ch] = _mm512_fmadd_ps(xe[v], we, _mm512_fmadd_ps(xo[v], wo, acc[i][v][ch]));
                }
            }
        }
    }
    #pragma GCC unroll 4
    for (int i = 0; i < RT; i++)
        #pragma GCC unroll 4
        for (int v = 0; v < V; v++)
            y[(size_t)(v0 + v) * ldy + r + i] = v4_bf16(fold16(_mm512_add_ps(acc[i][v][0], acc[i][v][1])));
}

void v4_rows_fp8_fast_avx512(const v4_mat *W, int n, const float *xq, const float *xs,
                             const float *x, int ldx, float *y, int ldy, int r0, int r1)
{
    const int K = W->cols, nkb = K / 128;
    float *xd = K % 128 == 0 && n > 0 && scales_finite(xs, (size_t)n * nkb)
                    ? malloc(sizeof(float) * (size_t)n * (size_t)K) : NULL;
    if (!xd) {
        v4_rows_fp8_fast_scalar(W, n, xq, xs, x, ldx, y, ldy, r0, r1);
        return;
    }
    const unsigned csr = _mm_getcsr();
    _mm_setcsr(csr | 0x8000);   /* flush to zero: products below FLT_MIN, as the reference's ftz */
    const __m512i odd = _mm512_setr_epi32(1, 3, 5, 7, 9, 11, 13, 15, 17, 19, 21, 23, 25, 27, 29, 31);
    const __m512i even = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
    for (int b = 0; b < n; b++)
        for (int kb = 0; kb < nkb; kb++) {
            const __m512 s = _mm512_set1_ps(xs[(size_t)b * nkb + kb]);
            for (int c = kb * 128; c < kb * 128 + 128; c += 32) {
                /* x' = ftz(xq * s_act), exact (a bf16 value): MXCSR.FTZ does the flush */
                const __m512 lo = _mm512_mul_ps(_mm512_loadu_ps(xq + (size_t)b * K + c), s);
                const __m512 hi = _mm512_mul_ps(_mm512_loadu_ps(xq + (size_t)b * K + c + 16), s);
                _mm512_storeu_ps(xd + (size_t)b * K + c, _mm512_permutex2var_ps(lo, odd, hi));
                _mm512_storeu_ps(xd + (size_t)b * K + c + 16, _mm512_permutex2var_ps(lo, even, hi));
            }
        }
    for (int r = r0; r < r1; r += 4) {
        const int rt = imin(4, r1 - r);
        if (rt < 4 || !fp8_rows_ok(W, r, rt)) {   /* a 1-3 row tail (not with 128-row chunks), or rows the decode cannot take */
            _mm_setcsr(csr);
            v4_rows_fp8_fast_scalar(W, n, xq, xs, NULL, 0, y, ldy, r, r + rt);
            _mm_setcsr(csr | 0x8000);
            continue;
        }
        for (int v0 = 0; v0 < n; v0 += 4) {
            switch (imin(4, n - v0)) {
            case 1: fp8_tile(W, xd, K, r, 4, v0, 1, y, ldy); break;
            case 2: fp8_tile(W, xd, K, r, 4, v0, 2, y, ldy); break;
            case 3: fp8_tile(W, xd, K, r, 4, v0, 3, y, ldy); break;
            default: fp8_tile(W, xd, K, r, 4, v0, 4, y, ldy); break;
            }
        }
    }
    _mm_setcsr(csr);
    free(xd);
}

/* ------------------------------------------------------------------ EXACT -- */

/* The 16 weights of groups ga (lanes 0-7) and gb (lanes 8-15) at column c as floats; FP8:
 * dequantized with fb (s_w * 2^120 per half) and rounded to bf16 (finite: the tile passed
 * r8_fp8_ok). */
V4_INLINE __m512 r8_pair(const v4_mat *W, size_t ia, size_t ib, __m512 fb)
{
    switch (W->type) {
    case V4_W_F32: {
        const float *w = W->w;
        return _mm512_insertf32x8(_mm512_castps256_ps512(_mm256_loadu_ps(w + ia)), _mm256_loadu_ps(w + ib), 1);
    }
    case V4_W_BF16: {
        const uint16_t *w = W->w;
        const __m256i h = _mm256_inserti128_si256(_mm256_castsi128_si256(_mm_loadu_si128((const __m128i *)(w + ia))),
                                                  _mm_loadu_si128((const __m128i *)(w + ib)), 1);
        return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
    }
    default: {   /* FP8 */
        const uint8_t *w = W->w;
        const __m128i q = _mm_unpacklo_epi64(_mm_loadl_epi64((const __m128i *)(w + ia)),
                                             _mm_loadl_epi64((const __m128i *)(w + ib)));
        const __m512 v = _mm512_mul_ps(e4m3x16(q), fb);
        /* round to nearest even bf16 (finite values) */
        const __m512i u = _mm512_castps_si512(v);
        const __m512i lsb = _mm512_and_si512(_mm512_srli_epi32(u, 16), _mm512_set1_epi32(1));
        const __m512i rnd = _mm512_add_epi32(_mm512_add_epi32(u, _mm512_set1_epi32(0x7fff)), lsb);
        return _mm512_castsi512_ps(_mm512_and_si512(rnd, _mm512_set1_epi32((int)0xffff0000u)));
    }
    }
}

/* Whether the decode takes the R8 FP8 groups [g0, g1) (every column): no NaN code,
 * every scale byte below 135.  Checked once per tile, before its passes. */
static int r8_fp8_ok(const v4_mat *W, int g0, int g1)
{
    const int K = W->cols, scols = (K + 127) / 128;
    for (int g = g0; g < g1; g++) {
        for (int kb = 0; kb < K / 128; kb++)
            if (W->scale[(size_t)((g * 8) / 128) * scols + kb] >= 135)
                return 0;
        const uint8_t *w = (const uint8_t *)W->w + (size_t)g * K * 8;   /* K cols x 8 rows */
        for (size_t k = 0; k < (size_t)K * 8; k += 128)
            if (nan_codes128(w + k))
                return 0;
    }
    return 1;
}

/* Group pairs starting at g0 (pair k: groups g0 + 2k, g0 + 2k + 1; a group past the
 * matrix reads its partner again, its rows dropped) x vectors [v0, v0 + V); rows
 * outside [r0, r1) are dropped.  FP8: the groups pass r8_fp8_ok. */
V4_INLINE void exact_tile(const v4_mat *W, const float *x, int ldx, int g0, const int P, int v0, const int V,
                         float *y, int ldy, int r0, int r1)
{
    const int K = W->cols, ng = (W->rows + 7) / 8, scols = (K + 127) / 128;
    int ga[8], gb[8];
#pragma GCC unroll 8
    for (int k = 0; k < P; k++) {
        ga[k] = imin(g0 + 2 * k, ng - 1);
        gb[k] = imin(g0 + 2 * k + 1, ng - 1);
    }
    __m512 acc[8][8];
#pragma GCC unroll 8
    for (int k = 0; k < P; k++)
#pragma GCC unroll 8
        for (int v = 0; v < V; v++)
            acc[k][v] = _mm512_setzero_ps();
    __m512 fb[8];
#pragma GCC unroll 8
    for (int k = 0; k < P; k++)
        fb[k] = _mm512_setzero_ps();
    for (int c = 0; c < K; c++) {
        if (W->type == V4_W_FP8 && c % 128 == 0)
#pragma GCC unroll 8
            for (int k = 0; k < P; k++) {
                const float fa = scale_up(W->scale[(size_t)((ga[k] * 8) / 128) * scols + c / 128]);
                const float fbb = scale_up(W->scale[(size_t)((gb[k] * 8) / 128) * scols + c / 128]);
                fb[k] = _mm512_insertf32x8(_mm512_set1_ps(fa), _mm256_set1_ps(fbb), 1);
            }
        __m512 xb[8];
#pragma GCC unroll 8
        for (int v = 0; v < V; v++)
            xb[v] = _mm512_set1_ps(x[(size_t)(v0 + v) * ldx + c]);
#pragma GCC unroll 8
        for (int k = 0; k < P; k++) {
            const __m512 wv = r8_pair(W, ((size_t)ga[k] * (size_t)K + (size_t)c) * 8,
                                      ((size_t)gb[k] * (size_t)K + (size_t)c) * 8, fb[k]);
#pragma GCC unroll 8
            for (int v = 0; v < V; v++)
                acc[k][v] = _mm512_fmadd_ps(xb[v], wv, acc[k][v]);
        }
    }
#pragma GCC unroll 8
    for (int k = 0; k < P; k++)
#pragma GCC unroll 8
        for (int v = 0; v < V; v++) {
            float out[16];
            _mm512_storeu_ps(out, acc[k][v]);
            for (int l = 0; l < 16; l++) {
                const int r = (g0 + 2 * k + l / 8) * 8 + l % 8;
                if (r >= r0 && r < r1)
                    y[(size_t)(v0 + v) * ldy + r] = out[l];
            }
        }
}

void v4_rows_exact_fast_avx512(const v4_mat *W, int n, const float *xq, const float *xs,
                               const float *x, int ldx, float *y, int ldy, int r0, int r1)
{
    if (W->layout != V4_LAYOUT_R8 || (W->type != V4_W_F32 && W->type != V4_W_BF16 && W->type != V4_W_FP8) ||
        (W->type == V4_W_FP8 && W->cols % 128 != 0)) {
        v4_rows_exact_fast_scalar(W, n, xq, xs, x, ldx, y, ldy, r0, r1);
        return;
    }
    /* tiles of 2P groups outer, passes over the vectors inner: a tile's weights are read
     * from memory once and found in L1/L2 by the later passes */
    const int g_end = (r1 + 7) / 8;
    const int P = n == 1 ? 8 : n <= 3 ? 4 : 2, vmax = n >= 8 ? 8 : 8 / P;   /* wide: 2 pairs x 8 vectors */
    const int ng = (W->rows + 7) / 8;
    for (int g0 = r0 / 8; g0 < g_end; g0 += 2 * P) {
        if (W->type == V4_W_FP8 && !r8_fp8_ok(W, g0, imin(g0 + 2 * P, ng))) {   /* the reference for these rows */
            const int a = g0 * 8 > r0 ? g0 * 8 : r0, b = imin((g0 + 2 * P) * 8, r1);
            v4_rows_exact_fast_scalar(W, n, NULL, NULL, x, ldx, y, ldy, a, b);
            continue;
        }
        for (int v0 = 0; v0 < n;) {
            const int left = n - v0, nv = left >= vmax ? vmax : left >= 4 && vmax > 4 ? 4 : left >= 2 ? 2 : 1;
            if (P == 8)
                exact_tile(W, x, ldx, g0, 8, v0, 1, y, ldy, r0, r1);
            else if (P == 4 && nv == 2)
                exact_tile(W, x, ldx, g0, 4, v0, 2, y, ldy, r0, r1);
            else if (P == 4)
                exact_tile(W, x, ldx, g0, 4, v0, 1, y, ldy, r0, r1);
            else if (nv == 8)
                exact_tile(W, x, ldx, g0, 2, v0, 8, y, ldy, r0, r1);
            else if (nv == 4)
                exact_tile(W, x, ldx, g0, 2, v0, 4, y, ldy, r0, r1);
            else if (nv == 2)
                exact_tile(W, x, ldx, g0, 2, v0, 2, y, ldy, r0, r1);
            else
                exact_tile(W, x, ldx, g0, 2, v0, 1, y, ldy, r0, r1);
            v0 += nv;
        }
    }
}

#endif
