/* linear_avx2.c - AVX2+FMA QUANT row kernels (activation quantization, FP8, FP4),
 * bit-identical to linear_scalar.c; the EXACT kernels are in linear_exact_avx2.c.
 *
 * Compiled with -mavx2 -mfma (CMake keys on the file name); only called after the
 * backend checked the CPU at run time.  The algorithms and the exactness arguments are
 * those of linear_avx512.c (read its header comment), at 256-bit width:
 *   FP8   exact double block sums with FMAs (e4m3 decoded by shift+mask to w*2^-1016,
 *         activations pre-scaled by 2^1000, sums rescaled by 2^16), 4-row x 1..2-vector
 *         micro-kernels, scalar-order float epilogue per 128-block; tiles holding NaN
 *         weight codes are recomputed by the scalar kernel.
 *   FP4   weights decoded to k = 2w (integer-valued, |k| <= 12) with a pshufb table;
 *         q*k = 2p is an integer times 2^-9 with |2p| <= 5376, so fma(q, k, 24576) is
 *         exact in [2^14, 2^15) (ulp 2^-9) and its bits are bits(24576) + p*2^10: exact
 *         int32 block sums, one rounding to float, times 2^-10.
 * QUANT tiles are 8 rows, processed in passes of 1-2 vectors with register-resident
 * accumulators (16 ymm registers); the first pass streams the weights from memory.
 * NaN activations go to the scalar kernels.
 * Threading/ownership: reentrant, disjoint row ranges per thread, no global state.
 */
#include "cpu_kernels.h"

#if V4_CPU_X86
#include <immintrin.h>
#include <string.h>

#include "simd_x86.h"

#define TILE 8          /* rows per QUANT tile (one ymm of float accumulators) */

static inline int imin(int a, int b) { return a < b ? a : b; }

/* lane i = sum of a[i]'s lanes (exact partial sums: order irrelevant) */
V4_INLINE __m256d hsum4_pd(const __m256d *a)
{
    __m256d t0 = _mm256_hadd_pd(a[0], a[1]), t1 = _mm256_hadd_pd(a[2], a[3]);
    __m256d u = _mm256_permute2f128_pd(t0, t1, 0x21);
    __m256d v = _mm256_blend_pd(t0, t1, 0xc);
    return _mm256_add_pd(u, v);
}

V4_INLINE __m128i hsum4_epi32(const __m256i *a)
{
    __m256i t0 = _mm256_hadd_epi32(a[0], a[1]), t1 = _mm256_hadd_epi32(a[2], a[3]);
    __m256i t = _mm256_hadd_epi32(t0, t1);
    return _mm_add_epi32(_mm256_castsi256_si128(t), _mm256_extracti128_si256(t, 1));
}

/* Store bf16(acc) rows [0, nr). */
V4_INLINE void bf16_store(float *dst, __m256 acc, int nr)
{
    float t[8];
    _mm256_storeu_ps(t, v4x_bf16_ps(acc));
    memcpy(dst, t, sizeof(float) * (size_t)nr);
}

/* --------------------------------------------------------------- act quant -- */

void v4_act_quant_avx2(const float *x, int cols, float *xq, float *xs)
{
    const __m256 absmask = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff));
    const __m256 hi = _mm256_set1_ps(448.0f), lo = _mm256_set1_ps(-448.0f);
    for (int b = 0; b < cols / 128; b++) {
        const float *xb = x + (size_t)b * 128;
        __m256 m = _mm256_set1_ps(1e-4f);
        for (int k = 0; k < 16; k++)  /* maxps returns its 2nd operand for NaN: skipped */
            m = _mm256_max_ps(_mm256_and_ps(_mm256_loadu_ps(xb + 8 * k), absmask), m);
        __m128 h = _mm_max_ps(_mm256_castps256_ps128(m), _mm256_extractf128_ps(m, 1));
        h = _mm_max_ps(h, _mm_movehl_ps(h, h));
        h = _mm_max_ss(h, _mm_shuffle_ps(h, h, 1));
        float s = v4x_act_scale(_mm_cvtss_f32(h));
        xs[b] = s;
        const __m256 vs = _mm256_set1_ps(s);
        for (int k = 0; k < 16; k++) {
            __m256 v = _mm256_div_ps(_mm256_loadu_ps(xb + 8 * k), vs);
            v = _mm256_min_ps(hi, v);
            v = _mm256_max_ps(lo, v);
            _mm256_storeu_ps(xq + (size_t)b * 128 + 8 * k, v4x_e4m3_round_ps(v));
        }
    }
}

/* -------------------------------------------------------------------- FP8 -- */

/* 4 e4m3 bytes (low 4 of b) -> doubles w * 2^-1016 */
V4_INLINE __m256d e4m3x4_pd(__m128i b)
{
    __m256i q = _mm256_cvtepi8_epi64(b);
    return _mm256_castsi256_pd(_mm256_and_si256(_mm256_slli_epi64(q, 49),
                                                _mm256_set1_epi64x((long long)0x80FE000000000000ull)));
}

/* 4 rows x V (1..2) vectors of one 128-column block; qd + 128v = vector v's
 * activations as doubles * 2^1000.  out[v] lane r = exact block sum * 2^-16. */
V4_INLINE void fp8_mk(const uint8_t *const *wr, const double *qd, const int V, __m256d *out)
{
    __m256d acc[8];
#pragma GCC unroll 8
    for (int i = 0; i < 4 * V; i++)
        acc[i] = _mm256_setzero_pd();
    for (int c = 0; c < 128; c += 8) {
        __m256d q0[2], q1[2];
#pragma GCC unroll 2
        for (int v = 0; v < V; v++) {
            q0[v] = _mm256_load_pd(qd + 128 * v + c);
            q1[v] = _mm256_load_pd(qd + 128 * v + c + 4);
        }
#pragma GCC unroll 4
        for (int r = 0; r < 4; r++) {
            __m128i b = _mm_loadl_epi64((const __m128i *)(wr[r] + c));
            __m256d w0 = e4m3x4_pd(b), w1 = e4m3x4_pd(_mm_srli_si128(b, 4));
#pragma GCC unroll 2
            for (int v = 0; v < V; v++) {
                acc[v * 4 + r] = _mm256_fmadd_pd(q0[v], w0, acc[v * 4 + r]);
                acc[v * 4 + r] = _mm256_fmadd_pd(q1[v], w1, acc[v * 4 + r]);
            }
        }
    }
#pragma GCC unroll 2
    for (int v = 0; v < V; v++)
        out[v] = hsum4_pd(acc + 4 * v);
}

V4_INLINE int fp8_has_nan(const uint8_t *const *wr)
{
    const __m256i m7f = _mm256_set1_epi8(0x7f);
    __m256i k = _mm256_setzero_si256();
    for (int r = 0; r < TILE; r++)
        for (int c = 0; c < 128; c += 32) {
            __m256i a = _mm256_and_si256(_mm256_loadu_si256((const __m256i *)(wr[r] + c)), m7f);
            k = _mm256_or_si256(k, _mm256_cmpeq_epi8(a, m7f));
        }
    return !_mm256_testz_si256(k, k);
}

typedef struct tile_ctx {
    const uint8_t *wrow[TILE];      /* the tile's rows (clamped to valid rows) */
    const uint8_t *srow[TILE];      /* their scale rows */
    int rt, nr;
} tile_ctx;

/* One pass over an FP8 tile for V (1..2) vectors starting at v0; returns whether a NaN
 * weight code was seen (checked on the first pass only). */
V4_INLINE int fp8_pass(const v4_mat *W, const float *xq, const float *xs, float *y, int ldy,
                       const tile_ctx *t, int v0, const int V)
{
    const int K = W->cols, nkb = K / 128;
    const int uniform = t->srow[0] == t->srow[TILE - 1];
    const __m256d pre = _mm256_set1_pd(0x1p1000), post = _mm256_set1_pd(0x1p16);
    double qd[2 * 128] __attribute__((aligned(32)));
    __m256 acc[2];
    int nan_seen = 0;
    for (int v = 0; v < V; v++)
        acc[v] = _mm256_setzero_ps();
    for (int kb = 0; kb < nkb; kb++) {
        const uint8_t *wr[TILE];
        for (int i = 0; i < TILE; i++)
            wr[i] = t->wrow[i] + (size_t)kb * 128;
        if (v0 == 0) {
            nan_seen |= fp8_has_nan(wr);
            for (int i = 0; i < TILE; i++) {
                _mm_prefetch((const char *)(wr[i] + 2 * 128), _MM_HINT_T0);
                _mm_prefetch((const char *)(wr[i] + 2 * 128 + 64), _MM_HINT_T0);
            }
        }
        for (int v = 0; v < V; v++) {
            const float *q = xq + (size_t)(v0 + v) * K + (size_t)kb * 128;
            for (int c = 0; c < 128; c += 4)
                _mm256_store_pd(qd + 128 * v + c, _mm256_mul_pd(_mm256_cvtps_pd(_mm_loadu_ps(q + c)), pre));
        }
        __m256d lo[2], hi[2];           /* rows 0-3 / 4-7 of each vector */
        if (V == 1) {
            fp8_mk(wr, qd, 1, lo);
            fp8_mk(wr + 4, qd, 1, hi);
        } else {
            fp8_mk(wr, qd, 2, lo);
            fp8_mk(wr + 4, qd, 2, hi);
        }
        __m256 sw;
        if (uniform) {
            sw = _mm256_set1_ps(v4x_e8m0(t->srow[0][kb]));
        } else {
            float s[TILE];
            for (int i = 0; i < TILE; i++)
                s[i] = v4x_e8m0(t->srow[i][kb]);
            sw = _mm256_loadu_ps(s);
        }
        for (int v = 0; v < V; v++) {   /* the scalar epilogue, lane-wise */
            __m256 pf = _mm256_set_m128(_mm256_cvtpd_ps(_mm256_mul_pd(hi[v], post)),
                                        _mm256_cvtpd_ps(_mm256_mul_pd(lo[v], post)));
            __m256 tt = _mm256_mul_ps(pf, _mm256_set1_ps(xs[(size_t)(v0 + v) * nkb + kb]));
            tt = _mm256_mul_ps(tt, sw);
            acc[v] = _mm256_add_ps(acc[v], tt);
        }
    }
    for (int v = 0; v < V; v++)
        bf16_store(y + (size_t)(v0 + v) * ldy + t->rt, acc[v], t->nr);
    return nan_seen;
}

static void fp8_tile(const v4_mat *W, int n, const float *xq, const float *xs,
                     float *y, int ldy, int rt, int nr)
{
    const int K = W->cols, scols = (K + 127) / 128;
    tile_ctx t = {.rt = rt, .nr = nr};
    for (int i = 0; i < TILE; i++) {
        int r = rt + imin(i, nr - 1);
        t.wrow[i] = (const uint8_t *)W->w + (size_t)r * K;
        t.srow[i] = W->scale + (size_t)(r / 128) * scols;
    }
    int nan_seen = 0;
    for (int v0 = 0; v0 < n; v0 += 2) {
        if (n - v0 >= 2)
            nan_seen |= fp8_pass(W, xq, xs, y, ldy, &t, v0, 2);
        else
            nan_seen |= fp8_pass(W, xq, xs, y, ldy, &t, v0, 1);
    }
    if (nan_seen)
        v4_rows_fp8_scalar(W, n, xq, xs, NULL, 0, y, ldy, rt, rt + nr);
}

void v4_rows_fp8_avx2(const v4_mat *W, int n, const float *xq, const float *xs,
                      const float *x, int ldx, float *y, int ldy, int r0, int r1)
{
    if (W->cols % 128 != 0 || n <= 0 || !v4x_inputs_ok(xq, n, W->cols, (size_t)W->cols, 0)) {
        v4_rows_fp8_scalar(W, n, xq, xs, x, ldx, y, ldy, r0, r1);
        return;
    }
    for (int rt = r0; rt < r1; rt += TILE)
        fp8_tile(W, n, xq, xs, y, ldy, rt, imin(TILE, r1 - rt));
}

/* -------------------------------------------------------------------- FP4 -- */

#define FP4K_MAGIC 24576.0f         /* 1.5 * 2^14: ulp 2^-9 on [2^14, 2^15) */
#define FP4K_MAGIC_BITS 0x46C00000u

/* 32 activations -> [evens 0..14, evens 16..30, odds 1..15, odds 17..31] */
V4_INLINE void fp4_deinterleave(const float *q, float *out)
{
    const __m256i idx = _mm256_setr_epi32(0, 2, 4, 6, 1, 3, 5, 7);
    for (int h = 0; h < 2; h++) {
        __m256 a = _mm256_permutevar8x32_ps(_mm256_loadu_ps(q + 16 * h), idx);
        __m256 b = _mm256_permutevar8x32_ps(_mm256_loadu_ps(q + 16 * h + 8), idx);
        _mm256_store_ps(out + 8 * h, _mm256_permute2f128_ps(a, b, 0x20));
        _mm256_store_ps(out + 16 + 8 * h, _mm256_permute2f128_ps(a, b, 0x31));
    }
}

/* 4 rows x V (1..2) vectors of one 32-column block; qd + 32v = vector v's
 * deinterleaved activations.  out[v] lane r = exact block sum * 2^10. */
V4_INLINE void fp4_mk(const uint8_t *const *wr, const float *qd, const int V, __m128i *out)
{
    const __m128i lut = _mm_setr_epi8(0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12);
    const __m128i m0f = _mm_set1_epi8(0x0f);
    const __m256 magic = _mm256_set1_ps(FP4K_MAGIC);
    /* each lane adds 4 biased terms: start at -4*bits(magic) (mod 2^32) */
    const __m256i init = _mm256_set1_epi32((int)(0u - 4u * FP4K_MAGIC_BITS));
    __m256i acc[8];
#pragma GCC unroll 8
    for (int i = 0; i < 4 * V; i++)
        acc[i] = init;
#pragma GCC unroll 4
    for (int r = 0; r < 4; r++) {
        __m128i wb = _mm_loadu_si128((const __m128i *)wr[r]);
        __m128i ke = _mm_shuffle_epi8(lut, _mm_and_si128(wb, m0f));
        __m128i ko = _mm_shuffle_epi8(lut, _mm_and_si128(_mm_srli_epi16(wb, 4), m0f));
        __m256 k[4];
        k[0] = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(ke));
        k[1] = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_srli_si128(ke, 8)));
        k[2] = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(ko));
        k[3] = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_srli_si128(ko, 8)));
#pragma GCC unroll 2
        for (int v = 0; v < V; v++) {
            __m256i a = acc[v * 4 + r];
#pragma GCC unroll 4
            for (int g = 0; g < 4; g++)
                a = _mm256_add_epi32(a, _mm256_castps_si256(
                        _mm256_fmadd_ps(_mm256_load_ps(qd + 32 * v + 8 * g), k[g], magic)));
            acc[v * 4 + r] = a;
        }
    }
#pragma GCC unroll 2
    for (int v = 0; v < V; v++)
        out[v] = hsum4_epi32(acc + 4 * v);
}

#define SBCHUNK 16

/* E8M0 scales of 8 rows x nb (<= 16) blocks starting at sb0 -> swt[block][row] */
V4_INLINE void fp4_scales(const tile_ctx *t, int sb0, int nb, float swt[SBCHUNK][TILE])
{
    for (int h = 0; h < nb; h += 8) {
        __m256 m[8];
        const int cnt = imin(8, nb - h);
        for (int i = 0; i < TILE; i++) {
            __m128i b;
            if (cnt == 8) {
                b = _mm_loadl_epi64((const __m128i *)(t->srow[i] + sb0 + h));
            } else {
                uint8_t tmp[8] = {0};
                memcpy(tmp, t->srow[i] + sb0 + h, (size_t)cnt);
                b = _mm_loadl_epi64((const __m128i *)tmp);
            }
            m[i] = v4x_e8m0_ps(_mm256_cvtepu8_epi32(b));
        }
        v4x_transpose8_ps(m);
        for (int j = 0; j < 8; j++)
            _mm256_store_ps(swt[h + j], m[j]);
    }
}

V4_INLINE void fp4_pass(const v4_mat *W, const float *xq, const float *xs, float *y, int ldy,
                        const tile_ctx *t, int v0, const int V)
{
    const int K = W->cols, nkb = K / 128, nsb = K / 32;
    const __m256 post = _mm256_set1_ps(0x1p-10f);
    float swt[SBCHUNK][TILE] __attribute__((aligned(32)));
    float qd[2 * 32] __attribute__((aligned(32)));
    __m256 acc[2];
    for (int v = 0; v < V; v++)
        acc[v] = _mm256_setzero_ps();
    for (int sb0 = 0; sb0 < nsb; sb0 += SBCHUNK) {
        const int nb = imin(SBCHUNK, nsb - sb0);
        fp4_scales(t, sb0, nb, swt);
        for (int b = 0; b < nb; b++) {
            const int sb = sb0 + b;
            const uint8_t *wr[TILE];
            for (int i = 0; i < TILE; i++)
                wr[i] = t->wrow[i] + (size_t)sb * 16;
            if (v0 == 0 && sb % 4 == 0)
                for (int i = 0; i < TILE; i++)
                    _mm_prefetch((const char *)(wr[i] + 128), _MM_HINT_T0);
            for (int v = 0; v < V; v++)
                fp4_deinterleave(xq + (size_t)(v0 + v) * K + (size_t)sb * 32, qd + 32 * v);
            __m128i lo[2], hi[2];       /* rows 0-3 / 4-7 of each vector */
            if (V == 1) {
                fp4_mk(wr, qd, 1, lo);
                fp4_mk(wr + 4, qd, 1, hi);
            } else {
                fp4_mk(wr, qd, 2, lo);
                fp4_mk(wr + 4, qd, 2, hi);
            }
            const __m256 sw = _mm256_load_ps(swt[b]);
            for (int v = 0; v < V; v++) {
                __m256 pf = _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_set_m128i(hi[v], lo[v])), post);
                __m256 tt = _mm256_mul_ps(pf, _mm256_set1_ps(xs[(size_t)(v0 + v) * nkb + sb / 4]));
                tt = _mm256_mul_ps(tt, sw);
                acc[v] = _mm256_add_ps(acc[v], tt);
            }
        }
    }
    for (int v = 0; v < V; v++)
        bf16_store(y + (size_t)(v0 + v) * ldy + t->rt, acc[v], t->nr);
}

static void fp4_tile(const v4_mat *W, int n, const float *xq, const float *xs,
                     float *y, int ldy, int rt, int nr)
{
    const int K = W->cols, nsb = K / 32;
    tile_ctx t = {.rt = rt, .nr = nr};
    for (int i = 0; i < TILE; i++) {
        int r = rt + imin(i, nr - 1);
        t.wrow[i] = (const uint8_t *)W->w + (size_t)r * (K / 2);
        t.srow[i] = W->scale + (size_t)r * nsb;
    }
    for (int v0 = 0; v0 < n; v0 += 2) {
        if (n - v0 >= 2)
            fp4_pass(W, xq, xs, y, ldy, &t, v0, 2);
        else
            fp4_pass(W, xq, xs, y, ldy, &t, v0, 1);
    }
}

void v4_rows_fp4_avx2(const v4_mat *W, int n, const float *xq, const float *xs,
                      const float *x, int ldx, float *y, int ldy, int r0, int r1)
{
    if (W->cols % 128 != 0 || n <= 0 || !v4x_inputs_ok(xq, n, W->cols, (size_t)W->cols, 0)) {
        v4_rows_fp4_scalar(W, n, xq, xs, x, ldx, y, ldy, r0, r1);
        return;
    }
    for (int rt = r0; rt < r1; rt += TILE)
        fp4_tile(W, n, xq, xs, y, ldy, rt, imin(TILE, r1 - rt));
}

#endif /* V4_CPU_X86 */
