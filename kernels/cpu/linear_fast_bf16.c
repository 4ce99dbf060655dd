/* linear_fast_bf16.c - the fast mode's FP8 QUANT kernel on AVX512-BF16: VDPBF16PS, 32
 * products per instruction, in exactly the order the reference defines
 * (linear_fast.c: that order is this instruction's, two FMAs per lane, odd element
 * first, subnormals flushed), so it gives the bits of the reference and of the
 * AVX-512F kernel (linear_fast_avx512.c) that emulates it.
 *
 * Compiled with -mavx512{f,bw,vl,dq,bf16} (CMake keys on the file name); only called
 * after the backend checked the CPU (v4_cpu_fast_bf16_supported).  Same signature and
 * row-range contract as the other row kernels (cpu_kernels.h); reentrant.
 *
 * Per call the activations become x' = bf16(ftz(xq * s_act)) (exact), n*K bf16 in a
 * buffer; per tile of rows the weights are decoded once per 32 columns (e4m3 -> float
 * * s_w, exact, -> bf16 pairs) and used for every vector of the pass: tiles of 4 rows x
 * 1-2 vectors or 2 rows x 4 vectors, two chains per (row, vector) (even / odd chunks).
 * From WIDE_N = 3 vectors on (prefill chunks, batched steps) a tile's 4 rows are decoded
 * once into a bf16 buffer and every vector reads them from there (4 rows x 3 vectors per
 * pass): the same operands and the same chains, so the same bits, without a decode per
 * pass (`bench_linear --rate`, [1024 x 4096], 1 thread: n = 3 / 4 / 6 at 54 / 64 / 85 G
 * multiply-adds/s, against 31 / 36 / 37 with the threshold at 8; n = 2 stays faster on
 * the register path, 43 against 37).
 * Tiles with a NaN code or a scale byte outside [10, 135), and calls with a
 * non-finite activation scale, run the reference.
 */
#include "cpu_kernels.h"

#if V4_CPU_X86
#include <immintrin.h>
#include <stdlib.h>

#include "../codec.h"
#include "fast_x86.h"


static inline int imin(int a, int b) { return a < b ? a : b; }

enum { WIDE_N = 3 };   /* vectors from which a row tile is decoded once (see the header) */

/* Rows [r, r + 4) as the bf16 operands w' = bf16(e4m3 * s_w * 2^120), [4][K]. */
static void decode4(const v4_mat *W, int K, int r, uint16_t *wd)
{
    const int nkb = K / 128, scols = (K + 127) / 128;
    const uint8_t *w = W->w;
    for (int i = 0; i < 4; i++)
        for (int kb = 0; kb < nkb; kb++) {
            const __m512 fb = _mm512_set1_ps(scale_up(W->scale[(size_t)((r + i) / 128) * scols + kb]));
            for (int c = kb * 128; c < kb * 128 + 128; c += 32) {
                const uint8_t *p = w + (size_t)(r + i) * K + c;
                const __m512 lo = _mm512_mul_ps(e4m3x16(_mm_loadu_si128((const __m128i *)p)), fb);
                const __m512 hi = _mm512_mul_ps(e4m3x16(_mm_loadu_si128((const __m128i *)(p + 16))), fb);
                _mm512_storeu_si512(wd + (size_t)i * K + c, (__m512i)_mm512_cvtne2ps_pbh(hi, lo));
            }
        }
}

/* The 4 decoded rows wd x vectors [v0, v0 + V) (V <= 3): tile()'s chains and fold. */
V4_INLINE void tile_dec(const uint16_t *wd, const uint16_t *xb, int K, int r, int v0, const int V, float *y, int ldy)
{
    __m512 acc[4][3][2];
    #pragma GCC unroll 4
    for (int i = 0; i < 4; i++)
        #pragma GCC unroll 3
        for (int v = 0; v < V; v++)
            acc[i][v][0] = acc[i][v][1] = _mm512_setzero_ps();
    for (int c = 0; c < K; c += 64) {
        #pragma GCC unroll 2
        for (int ch = 0; ch < 2; ch++) {
            __m512bh wv[4];
            #pragma GCC unroll 4
            for (int i = 0; i < 4; i++)
                wv[i] = (__m512bh)_mm512_loadu_si512(wd + (size_t)i * K + c + 32 * ch);
            #pragma GCC unroll 3
            for (int v = 0; v < V; v++) {
                const __m512bh xv = (__m512bh)_mm512_loadu_si512(xb + (size_t)(v0 + v) * K + c + 32 * ch);
                #pragma GCC unroll 4
                for (int i = 0; i < 4; i++)
                    acc[i][v][ch] = _mm512_dpbf16_ps(acc[i][v][ch], xv, wv[i]);
            }
        }
    }
    #pragma GCC unroll 4
    for (int i = 0; i < 4; i++)
        #pragma GCC unroll 3
        for (int v = 0; v < V; v++)
            y[(size_t)(v0 + v) * ldy + r + i] = v4_bf16(fold16(_mm512_add_ps(acc[i][v][0], acc[i][v][1])));
}

/* Rows [r, r + RT) x vectors [v0, v0 + V) (fp8_rows_ok); xb: the vectors' x' as bf16. */
V4_INLINE void tile(const v4_mat *W, const uint16_t *xb, int K, int r, const int RT, int v0, const int V, float *y,
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
            for (int ch = 0; ch < 2; ch++)
                #pragma GCC unroll 4
                for (int i = 0; i < RT; i++) {
                    const uint8_t *p = w + (size_t)(r + i) * K + c + 32 * ch;
                    if (ch == 0 && v0 == 0)   /* the next tile's row, while this one computes */
                        _mm_prefetch((const char *)(p + (size_t)RT * K), _MM_HINT_T0);
                    const __m512 lo = _mm512_mul_ps(e4m3x16(_mm_loadu_si128((const __m128i *)p)), fb[i]);
                    const __m512 hi = _mm512_mul_ps(e4m3x16(_mm_loadu_si128((const __m128i *)(p + 16))), fb[i]);
                    const __m512bh wv = _mm512_cvtne2ps_pbh(hi, lo);
                    #pragma GCC unroll 4
                    for (int v = 0; v < V; v++) {
                        const __m512bh xv =
                            (__m512bh)_mm512_loadu_si512(xb + (size_t)(v0 + v) * K + c + 32 * ch);
                        acc[i][v][ch] = _mm512_dpbf16_ps(acc[i][v][ch], xv, wv);
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

void v4_rows_fp8_fast_bf16(const v4_mat *W, int n, const float *xq, const float *xs,
                           const float *x, int ldx, float *y, int ldy, int r0, int r1)
{
    const int K = W->cols, nkb = K / 128;
    uint16_t *xb = K % 128 == 0 && n > 0 && scales_finite(xs, (size_t)n * nkb)
                       ? malloc(sizeof(uint16_t) * (size_t)n * (size_t)K) : NULL;
    if (!xb) {
        v4_rows_fp8_fast_scalar(W, n, xq, xs, x, ldx, y, ldy, r0, r1);
        return;
    }
    uint16_t *wd = n >= WIDE_N ? malloc(sizeof(uint16_t) * 4 * (size_t)K) : NULL;
    const unsigned csr = _mm_getcsr();
    _mm_setcsr(csr | 0x8000);   /* flush to zero: x' and the final folds, as the reference's ftz */
    for (int b = 0; b < n; b++)
        for (int kb = 0; kb < nkb; kb++) {
            const __m512 s = _mm512_set1_ps(xs[(size_t)b * nkb + kb]);
            for (int c = kb * 128; c < kb * 128 + 128; c += 32) {
                const __m512 lo = _mm512_mul_ps(_mm512_loadu_ps(xq + (size_t)b * K + c), s);
                const __m512 hi = _mm512_mul_ps(_mm512_loadu_ps(xq + (size_t)b * K + c + 16), s);
                _mm512_storeu_si512(xb + (size_t)b * K + c, (__m512i)_mm512_cvtne2ps_pbh(hi, lo));
            }
        }
    for (int r = r0; r < r1; r += 4) {
        const int rt = imin(4, r1 - r);
        if (rt < 4 || !fp8_rows_ok(W, r, rt)) {
            _mm_setcsr(csr);
            v4_rows_fp8_fast_scalar(W, n, xq, xs, NULL, 0, y, ldy, r, r + rt);
            _mm_setcsr(csr | 0x8000);
            continue;
        }
        if (wd) {
            decode4(W, K, r, wd);
            int v0 = 0;
            for (; v0 + 3 <= n; v0 += 3)
                tile_dec(wd, xb, K, r, v0, 3, y, ldy);
            if (n - v0 == 2)
                tile_dec(wd, xb, K, r, v0, 2, y, ldy);
            else if (n - v0 == 1)
                tile_dec(wd, xb, K, r, v0, 1, y, ldy);
            continue;
        }
        for (int v0 = 0; v0 < n;) {
            const int left = n - v0;
            if (left >= 4) {
                tile(W, xb, K, r, 2, v0, 4, y, ldy);
                tile(W, xb, K, r + 2, 2, v0, 4, y, ldy);
                v0 += 4;
            } else if (left >= 2) {
                tile(W, xb, K, r, 4, v0, 2, y, ldy);
                v0 += 2;
            } else {
                tile(W, xb, K, r, 4, v0, 1, y, ldy);
                v0 += 1;
            }
        }
    }
    _mm_setcsr(csr);
    free(wd);
    free(xb);
}

#endif
