/* linear_fast_bf16.c - the fast mode's FP8 QUANT kernel on AVX512-BF16: VDPBF16PS, 32
 * products per instruction, in exactly the order the reference defines
 * (linear_fast.c: that order is this instruction's, two FMAs per lane, odd element
 * first, subnormals flushed), so it gives the bits of the reference and of the
 * AVX-512F kernel (linear_fast_avx512.c) that emulates it.
 *
 * Compiled with -mavx512{f,bw,vl,dq,bf16,vbmi} (CMake keys on the file name); only
 * called after the backend checked that the CPU has AVX512-BF16 and AVX512-VBMI (a CPU
 * with BF16 and no VBMI runs the AVX-512F kernel: the same bits).  Same signature and
 * row-range contract as the other row kernels (cpu_kernels.h); reentrant.
 *
 * Per call the activations become x' = bf16(ftz(xq * s_act)) (exact), n*K bf16 in a
 * buffer; per tile of rows the weights are decoded once per 64 columns from byte tables
 * (dec64: e4m3 * s_w as bf16, exact, 6 instructions per 64 weights) and used for every
 * vector of the pass: tiles of 4 rows x 1-2 vectors or 2 rows x 4 vectors, two chains
 * per (row, vector) (even / odd 32-column chunks).  With the table decode re-decoding a
 * tile per pass is cheaper than decoding it once into a buffer, at every n measured
 * (`bench_linear --rate`; the buffered route of the float decode was removed).
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

/* The e4m3 -> bf16 decode by byte tables (VPERMI2B).  For a scale byte e in [10, 135)
 * and a nonzero magnitude code m (7 bits) the operand w' = e4m3(m) * 2^(e - 127) is a
 * normal bf16 whose bits are B[m] + (e << 7), B[m] those bits at a formal e = 0 (mod
 * 2^16); m = 0 gives 0; the sign bit is the code's bit 7 moved to bit 15.  So per call
 * two tables per parity of e: lo[p] = the low bytes of B[m] + (p << 7), hi[p] = their
 * high bytes, to which a 128-column block adds e >> 1 (entry 0 stays 0).  These are the
 * bits of the float route (e4m3x16 * scale_up, then VCVTNE2PS2BF16: exact here), so the
 * kernels' results do not change; 6 instructions per 64 weights instead of 18. */
typedef struct dec_tab {
    __m512i lo[2][2], hi[2][2];
} dec_tab;

static void dec_tab_init(dec_tab *t)
{
    uint8_t lo[2][128], hi[2][128];
    for (int m = 0; m < 128; m++) {
        /* B[m] + (64 << 7), from the float route at e = 64; then back to e = p */
        const float w = _mm512_cvtss_f32(e4m3x16(_mm_cvtsi32_si128(m))) * scale_up(64);
        union { float f; uint32_t u; } v = {w};
        for (int p = 0; p < 2; p++) {
            const uint16_t b = m ? (uint16_t)((v.u >> 16) - (64u << 7) + ((unsigned)p << 7)) : 0;
            lo[p][m] = (uint8_t)b;
            hi[p][m] = (uint8_t)(b >> 8);
        }
    }
    for (int p = 0; p < 2; p++)
        for (int h = 0; h < 2; h++) {
            t->lo[p][h] = _mm512_loadu_si512(lo[p] + 64 * h);
            t->hi[p][h] = _mm512_loadu_si512(hi[p] + 64 * h);
        }
}

/* One 128-column block's tables (scale byte e). */
typedef struct blk_tab {
    __m512i lo0, lo1, hi0, hi1;
} blk_tab;

V4_INLINE blk_tab blk_tab_of(const dec_tab *t, uint8_t e)
{
    const int p = e & 1;
    const __m512i add = _mm512_set1_epi8((char)(e >> 1));
    return (blk_tab){t->lo[p][0], t->lo[p][1], _mm512_maskz_add_epi8(~(__mmask64)1, t->hi[p][0], add),
                     _mm512_add_epi8(t->hi[p][1], add)};
}

/* 64 codes (columns c .. c + 63) -> the bf16 operands of columns c .. c + 31 (*w0) and
 * c + 32 .. c + 63 (*w1).  The codes are first put in the order in which the in-lane
 * byte interleave (VPUNPCK{L,H}BW) gives columns in order. */
V4_INLINE void dec64(const blk_tab *b, const uint8_t *p, __m512i *w0, __m512i *w1)
{
    const __m512i perm = _mm512_set_epi8(63, 62, 61, 60, 59, 58, 57, 56, 31, 30, 29, 28, 27, 26, 25, 24,
                                         55, 54, 53, 52, 51, 50, 49, 48, 23, 22, 21, 20, 19, 18, 17, 16,
                                         47, 46, 45, 44, 43, 42, 41, 40, 15, 14, 13, 12, 11, 10, 9, 8,
                                         39, 38, 37, 36, 35, 34, 33, 32, 7, 6, 5, 4, 3, 2, 1, 0);
    const __m512i c = _mm512_permutexvar_epi8(perm, _mm512_loadu_si512(p));
    const __m512i lo = _mm512_permutex2var_epi8(b->lo0, c, b->lo1);
    const __m512i hi = _mm512_ternarylogic_epi32(_mm512_permutex2var_epi8(b->hi0, c, b->hi1), c,
                                                 _mm512_set1_epi8((char)0x80), 0xf8);   /* hi | (c & 0x80) */
    *w0 = _mm512_unpacklo_epi8(lo, hi);
    *w1 = _mm512_unpackhi_epi8(lo, hi);
}

/* Rows [r, r + RT) x vectors [v0, v0 + V) (fp8_rows_ok); xb: the vectors' x' as bf16. */
V4_INLINE void tile(const v4_mat *W, const dec_tab *t, const uint16_t *xb, int K, int r, const int RT, int v0,
                   const int V, float *y, int ldy)
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
        /* the tile's rows lie in one 128-row block (the caller checks): one scale per block */
        const blk_tab b = blk_tab_of(t, W->scale[(size_t)(r / 128) * scols + kb]);
        for (int c = kb * 128; c < kb * 128 + 128; c += 64) {   /* chunk c: chain 0, c + 32: chain 1 */
            #pragma GCC unroll 4
            for (int i = 0; i < RT; i++) {
                const uint8_t *p = w + (size_t)(r + i) * K + c;
                if (v0 == 0)   /* the next tile's row, while this one computes */
                    _mm_prefetch((const char *)(p + (size_t)RT * K), _MM_HINT_T0);
                __m512i wv[2];
                dec64(&b, p, &wv[0], &wv[1]);
                #pragma GCC unroll 2
                for (int ch = 0; ch < 2; ch++)
                    #pragma GCC unroll 4
                    for (int v = 0; v < V; v++) {
                        const __m512bh xv =
                            (__m512bh)_mm512_loadu_si512(xb + (size_t)(v0 + v) * K + c + 32 * ch);
                        acc[i][v][ch] = _mm512_dpbf16_ps(acc[i][v][ch], xv, (__m512bh)wv[ch]);
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
    dec_tab t;
    dec_tab_init(&t);
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
        if (rt < 4 || r / 128 != (r + 3) / 128 || !fp8_rows_ok(W, r, rt)) {   /* one scale row per tile */
            _mm_setcsr(csr);
            v4_rows_fp8_fast_scalar(W, n, xq, xs, NULL, 0, y, ldy, r, r + rt);
            _mm_setcsr(csr | 0x8000);
            continue;
        }
        for (int v0 = 0; v0 < n;) {
            const int left = n - v0;
            if (left >= 4) {
                tile(W, &t, xb, K, r, 2, v0, 4, y, ldy);
                tile(W, &t, xb, K, r + 2, 2, v0, 4, y, ldy);
                v0 += 4;
            } else if (left >= 2) {
                tile(W, &t, xb, K, r, 4, v0, 2, y, ldy);
                v0 += 2;
            } else {
                tile(W, &t, xb, K, r, 4, v0, 1, y, ldy);
                v0 += 1;
            }
        }
    }
    _mm_setcsr(csr);
    free(xb);
}

#endif
