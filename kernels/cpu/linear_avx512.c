/* linear_avx512.c - AVX-512 (F+BW+VL+DQ) QUANT row kernels (activation quantization,
 * FP8 and FP4 products), bit-identical to linear_scalar.c; the EXACT kernels are in
 * linear_exact_avx512.c.
 *
 * Compiled with -mavx512{f,bw,vl,dq} (CMake keys on the file name); only called after
 * the backend checked the CPU at run time.  Same signatures and row-range contract as
 * the scalar kernels (cpu_kernels.h); everything is reentrant, no global state.
 *
 * FP8 (QUANT).  e4m3 values are integers times 2^-9, so q*w is an integer times 2^-18
 * with |q*w| <= 448^2 < 2^17.6 and a 128-term block sum is below 2^43 units: exact in
 * double, whatever the order.  The kernel therefore sums each block in double with
 * FMAs (fma(q, w, acc) is exact because q*w and every partial sum are exact) in any
 * convenient order, then does the scalar epilogue op for op:
 *   t = f32(partial) * s_act; t = t * s_w; acc = acc + t   (float, blocks ascending).
 * Weight decode without a table: the e4m3 byte, sign-extended to 64 bits and shifted
 * left by 49, lands its exponent/mantissa in the top of a double's exponent/mantissa
 * fields: bits & 0x80FE000000000000 is the double w * 2^-1016 (e4m3 subnormals become
 * double subnormals, still exact).  The activations are pre-scaled by 2^1000 (exact:
 * |q| <= 448), so each product is q*w*2^-16 (>= 2^-34 when non-zero: normal, exact) and
 * the block sum is multiplied by 2^16 (exact) before the one rounding to float.
 * NaN weight codes (0x7f/0xff) would decode as finite numbers, so every 128-byte row
 * block is checked and a tile that contains one is recomputed by the scalar kernel.
 *
 * FP4 (QUANT).  e2m1 values are k/2 (|k| <= 12) and q is an integer times 2^-9, so
 * p = q*w is an integer times 2^-10 with |p| <= 448*6 = 2688 < 2^12.  fma(q, w, 12288)
 * is then exact and lies in [2^13, 2^14) where the float ulp is 2^-10, so its bit
 * pattern is bits(12288) + p*2^10: the product becomes an exact int32.  Summing those
 * bit patterns with wrap-around integer adds (the 32*bits(12288) bias is pre-subtracted
 * in the initial accumulator) gives the exact block sum * 2^10 (|.| < 2^27), whose
 * float conversion (one rounding) times 2^-10 (exact) is f32(partial).  The e2m1 decode
 * is a 16-entry vpermps table lookup.
 *
 * Loop structure (QUANT): tiles of 8 rows; per tile, passes of V <= 4 batch vectors
 * (V a compile-time constant) so that the float accumulators and the reduced block
 * partials stay in registers (the acc chain across blocks is the latency-critical
 * path for FP4 at n = 1); micro-kernels 8 rows x 1-2 vectors (FP8: 1-3) or 4 rows x
 * 4 vectors share each decoded weight vector between the vectors of the pass, and transposed
 * horizontal sums turn 8 accumulators into one vector with a lane per (row, vector).
 * The first pass reads the tile's weights from memory (with software prefetch); later
 * passes find them in L1/L2, so a weight byte crosses the memory bus once per call.
 * FP8 converts the call's activations to the pre-scaled doubles once per call, into a
 * heap buffer of n*K doubles owned by v4_rows_fp8_avx512 (allocated and freed per
 * call, so each thread has its own; if the allocation fails each pass converts its
 * blocks itself, as before): converting them per tile, pass and block cost about a
 * quarter as many instructions as the FMAs.  For n > 4 a weight is decoded once per
 * pass.  Two variants that decode each block once for all of the call's vectors were
 * measured and dropped: the previous n > 4 path (the block decoded into a stack
 * buffer, read back by groups of 4 vectors) and a broadcast kernel (weight pairs
 * broadcast against 4-vector groups, no horizontal sums); both were slower at n = 8
 * (the second by ~10%, though it was 5-8% faster at n = 12-16).
 *
 * Non-finite inputs: with NaN activations the kernels defer to the scalar reference
 * (v4x_inputs_ok): the integer FP4 trick would not reproduce the scalar NaN propagation.  Weights are assumed
 * finite apart from the e4m3 NaN codes handled above; E8M0 0xff (NaN) scales give NaN
 * outputs like the scalar code, but if several different NaNs meet, the one that
 * survives may differ.
 *
 * Threading: the backend gives each thread a disjoint [r0, r1); tiles here are 8 rows;
 * rows past r1 in the last tile read a valid row again and their results are dropped.
 * Stack use is below 40 KiB.
 */
#include "cpu_kernels.h"

#if V4_CPU_X86
#include <immintrin.h>
#include <stdlib.h>
#include <string.h>

#include "simd_x86.h"

#define TILE 8          /* rows per QUANT tile (one ymm of float accumulators) */

static inline int imin(int a, int b) { return a < b ? a : b; }

/* ---------------------------------------------------------------- reductions -- */

/* Transposed horizontal sums: lane i of the result = sum of the lanes of a[i].
 * Used on exact partial sums only, so the order is irrelevant. */
V4_INLINE __m512d hsum8_pd(const __m512d *a)
{
    __m512d s01 = _mm512_add_pd(_mm512_unpacklo_pd(a[0], a[1]), _mm512_unpackhi_pd(a[0], a[1]));
    __m512d s23 = _mm512_add_pd(_mm512_unpacklo_pd(a[2], a[3]), _mm512_unpackhi_pd(a[2], a[3]));
    __m512d s45 = _mm512_add_pd(_mm512_unpacklo_pd(a[4], a[5]), _mm512_unpackhi_pd(a[4], a[5]));
    __m512d s67 = _mm512_add_pd(_mm512_unpacklo_pd(a[6], a[7]), _mm512_unpackhi_pd(a[6], a[7]));
    __m512d v0 = _mm512_add_pd(_mm512_shuffle_f64x2(s01, s23, _MM_SHUFFLE(2, 0, 2, 0)),
                               _mm512_shuffle_f64x2(s01, s23, _MM_SHUFFLE(3, 1, 3, 1)));
    __m512d v1 = _mm512_add_pd(_mm512_shuffle_f64x2(s45, s67, _MM_SHUFFLE(2, 0, 2, 0)),
                               _mm512_shuffle_f64x2(s45, s67, _MM_SHUFFLE(3, 1, 3, 1)));
    return _mm512_add_pd(_mm512_shuffle_f64x2(v0, v1, _MM_SHUFFLE(2, 0, 2, 0)),
                         _mm512_shuffle_f64x2(v0, v1, _MM_SHUFFLE(3, 1, 3, 1)));
}

V4_INLINE __m256i hsum8_epi32(const __m512i *a)
{
    __m512i s01 = _mm512_add_epi32(_mm512_unpacklo_epi32(a[0], a[1]), _mm512_unpackhi_epi32(a[0], a[1]));
    __m512i s23 = _mm512_add_epi32(_mm512_unpacklo_epi32(a[2], a[3]), _mm512_unpackhi_epi32(a[2], a[3]));
    __m512i s45 = _mm512_add_epi32(_mm512_unpacklo_epi32(a[4], a[5]), _mm512_unpackhi_epi32(a[4], a[5]));
    __m512i s67 = _mm512_add_epi32(_mm512_unpacklo_epi32(a[6], a[7]), _mm512_unpackhi_epi32(a[6], a[7]));
    /* per 128-bit lane: [a0 a1 a2 a3] and [a4 a5 a6 a7] partials */
    __m512i t0 = _mm512_add_epi32(_mm512_unpacklo_epi64(s01, s23), _mm512_unpackhi_epi64(s01, s23));
    __m512i t1 = _mm512_add_epi32(_mm512_unpacklo_epi64(s45, s67), _mm512_unpackhi_epi64(s45, s67));
    /* lanes [t0.0+t0.1, t0.2+t0.3, t1.0+t1.1, t1.2+t1.3] */
    __m512i u = _mm512_add_epi32(_mm512_shuffle_i32x4(t0, t1, _MM_SHUFFLE(2, 0, 2, 0)),
                                 _mm512_shuffle_i32x4(t0, t1, _MM_SHUFFLE(3, 1, 3, 1)));
    __m512i p = _mm512_shuffle_i32x4(u, u, _MM_SHUFFLE(3, 1, 2, 0));
    return _mm256_add_epi32(_mm512_castsi512_si256(p), _mm512_extracti64x4_epi64(p, 1));
}

/* --------------------------------------------------------------- act quant -- */

void v4_act_quant_avx512(const float *x, int cols, float *xq, float *xs)
{
    const __m512 absmask = _mm512_castsi512_ps(_mm512_set1_epi32(0x7fffffff));
    const __m256 hi = _mm256_set1_ps(448.0f), lo = _mm256_set1_ps(-448.0f);
    for (int b = 0; b < cols / 128; b++) {
        const float *xb = x + (size_t)b * 128;
        __m512 m = _mm512_set1_ps(1e-4f);
        for (int k = 0; k < 8; k++)   /* maxps returns its 2nd operand for NaN: skipped */
            m = _mm512_max_ps(_mm512_and_ps(_mm512_loadu_ps(xb + 16 * k), absmask), m);
        float amax = _mm512_reduce_max_ps(m);
        float s = v4x_act_scale(amax);
        xs[b] = s;
        const __m256 vs = _mm256_set1_ps(s);
        for (int k = 0; k < 16; k++) {
            __m256 v = _mm256_div_ps(_mm256_loadu_ps(xb + 8 * k), vs);
            v = _mm256_min_ps(hi, v);     /* (448 < v) ? 448 : v; NaN stays */
            v = _mm256_max_ps(lo, v);
            _mm256_storeu_ps(xq + (size_t)b * 128 + 8 * k, v4x_e4m3_round_ps(v));
        }
    }
}

/* -------------------------------------------------------------------- FP8 -- */

#define E4M3_PD_MASK ((long long)0x80FE000000000000ull)

/* 8 e4m3 bytes -> doubles w * 2^-1016 */
V4_INLINE __m512d e4m3x8_pd(const uint8_t *p)
{
    __m512i b = _mm512_cvtepi8_epi64(_mm_loadl_epi64((const __m128i *)p));
    return _mm512_castsi512_pd(_mm512_and_si512(_mm512_slli_epi64(b, 49), _mm512_set1_epi64(E4M3_PD_MASK)));
}

/* R rows x V vectors of one 128-column block (R * V = 8, 16 or 24).  wr[r] points at the
 * block's bytes, qd + v*ldq at vector v's activations as doubles * 2^1000.  Result:
 * out[g] lane i is the exact block sum * 2^-16 of (row, vector) = (f % R, f / R),
 * f = 8g + i. */
V4_INLINE void fp8_mk(const uint8_t *const *wr, const int R, const double *qd, const size_t ldq,
                      const int V, __m512d *out)
{
    __m512d acc[24];
#pragma GCC unroll 24
    for (int i = 0; i < R * V; i++)
        acc[i] = _mm512_setzero_pd();
#pragma GCC unroll 2
    for (int c = 0; c < 128; c += 8) {
        __m512d q[4];
#pragma GCC unroll 4
        for (int v = 0; v < V; v++)
            q[v] = _mm512_load_pd(qd + v * ldq + c);
#pragma GCC unroll 8
        for (int r = 0; r < R; r++) {
            __m512d w = e4m3x8_pd(wr[r] + c);
#pragma GCC unroll 8
            for (int v = 0; v < V; v++)
                acc[v * R + r] = _mm512_fmadd_pd(q[v], w, acc[v * R + r]);
        }
    }
#pragma GCC unroll 3
    for (int g = 0; g < R * V / 8; g++)
        out[g] = hsum8_pd(acc + 8 * g);
}

/* any (b & 0x7f) == 0x7f in 8 rows x 128 bytes */
V4_INLINE int fp8_has_nan(const uint8_t *const *wr)
{
    const __m512i m7f = _mm512_set1_epi8(0x7f);
    __mmask64 k = 0;
    for (int r = 0; r < TILE; r++) {
        __m512i a = _mm512_loadu_si512(wr[r]), b = _mm512_loadu_si512(wr[r] + 64);
        k |= _mm512_cmpeq_epi8_mask(_mm512_and_si512(a, m7f), m7f);
        k |= _mm512_cmpeq_epi8_mask(_mm512_and_si512(b, m7f), m7f);
    }
    return k != 0;
}

V4_INLINE void bf16_store_mask(float *dst, __m256 acc, int nr)
{
    _mm256_mask_storeu_ps(dst, (__mmask8)((1u << nr) - 1), v4x_bf16_ps(acc));
}

typedef struct tile_ctx {
    const uint8_t *wrow[TILE];      /* the tile's rows (clamped to valid rows) */
    const uint8_t *srow[TILE];      /* their scale rows */
    const uint8_t *next;            /* FP8: the next tile's weights to prefetch, or NULL */
    int rt, nr;
} tile_ctx;

/* One pass over an FP8 tile for V (1..4) vectors starting at v0; returns whether a
 * NaN weight code was seen (checked on the first pass only).  qall: the call's
 * activations as doubles * 2^1000 (vector v at qall + v*K, see fp8_qd_make), or NULL
 * (no buffer) to convert each block here. */
V4_INLINE int fp8_pass(const v4_mat *W, const float *xq, const float *xs, const double *qall,
                       float *y, int ldy, const tile_ctx *t, int v0, const int V)
{
    const int K = W->cols, nkb = K / 128;
    const int uniform = t->srow[0] == t->srow[TILE - 1];
    const __m512d pre = _mm512_set1_pd(0x1p1000), post = _mm512_set1_pd(0x1p16);
    double qd[4 * 128] __attribute__((aligned(64)));
    __m256 acc[4];
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
            /* the next tile (8 contiguous rows): 16 lines per block, so it has arrived
             * when this one ends */
            if (t->next)
                for (int i = 0; i < 2 * TILE; i++)
                    _mm_prefetch((const char *)(t->next + ((size_t)kb * 2 * TILE + i) * 64), _MM_HINT_T0);
        }
        const double *qb = qd;
        size_t ldq = 128;
        if (qall) {
            ldq = (size_t)K;
            qb = qall + (size_t)v0 * ldq + (size_t)kb * 128;
        } else {
            for (int v = 0; v < V; v++) {
                const float *q = xq + (size_t)(v0 + v) * K + (size_t)kb * 128;
                for (int c = 0; c < 128; c += 8)
                    _mm512_store_pd(qd + v * 128 + c, _mm512_mul_pd(_mm512_cvtps_pd(_mm256_loadu_ps(q + c)), pre));
            }
        }
        __m512d P[4];                   /* P[v] lane i: row i of vector v */
        if (V == 1) {
            fp8_mk(wr, 8, qb, ldq, 1, P);
        } else if (V == 2) {
            fp8_mk(wr, 8, qb, ldq, 2, P);
        } else if (V == 3) {
            fp8_mk(wr, 8, qb, ldq, 3, P);
        } else {
            __m512d X[2], Y[2];         /* X[g] = [v 2g rows 0-3, v 2g+1 rows 0-3], Y: rows 4-7 */
            fp8_mk(wr, 4, qb, ldq, 4, X);
            fp8_mk(wr + 4, 4, qb, ldq, 4, Y);
            for (int g = 0; g < 2; g++) {
                P[2 * g] = _mm512_shuffle_f64x2(X[g], Y[g], _MM_SHUFFLE(1, 0, 1, 0));
                P[2 * g + 1] = _mm512_shuffle_f64x2(X[g], Y[g], _MM_SHUFFLE(3, 2, 3, 2));
            }
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
            __m256 pf = _mm512_cvtpd_ps(_mm512_mul_pd(P[v], post));
            __m256 tt = _mm256_mul_ps(pf, _mm256_set1_ps(xs[(size_t)(v0 + v) * nkb + kb]));
            tt = _mm256_mul_ps(tt, sw);
            acc[v] = _mm256_add_ps(acc[v], tt);
        }
    }
    for (int v = 0; v < V; v++)
        bf16_store_mask(y + (size_t)(v0 + v) * ldy + t->rt, acc[v], t->nr);
    return nan_seen;
}

/* The call's activations as doubles * 2^1000 (exact: |q| <= 448), vector v at
 * q + v*K: converted once per call instead of once per tile, pass and block.  Heap
 * (n*K doubles, freed by the caller); NULL if the allocation fails, and the passes
 * then convert each block themselves (the same values). */
static double *fp8_qd_make(int n, int K, const float *xq)
{
    const size_t nq = (size_t)n * K;
    double *qd = aligned_alloc(64, nq * sizeof(double));   /* K % 128 == 0: a multiple of 64 */
    if (!qd)
        return NULL;
    const __m512d pre = _mm512_set1_pd(0x1p1000);
    for (size_t i = 0; i < nq; i += 8)
        _mm512_store_pd(qd + i, _mm512_mul_pd(_mm512_cvtps_pd(_mm256_loadu_ps(xq + i)), pre));
    return qd;
}

static void fp8_tile(const v4_mat *W, int n, const float *xq, const float *xs,
                     const double *qall, float *y, int ldy, int rt, int nr, int r1)
{
    const int K = W->cols, scols = (K + 127) / 128;
    tile_ctx t = {.rt = rt, .nr = nr, .next = rt + TILE < r1 ? (const uint8_t *)W->w + (size_t)(rt + TILE) * K : NULL};
    for (int i = 0; i < TILE; i++) {
        int r = rt + imin(i, nr - 1);
        t.wrow[i] = (const uint8_t *)W->w + (size_t)r * K;
        t.srow[i] = W->scale + (size_t)(r / 128) * scols;
    }
    int nan_seen = 0;
    /* passes of up to 4 vectors; the tile's weights come from L1/L2 after the first.
     * A pass of 1 or 2 vectors decodes a weight for fewer FMAs than one of 3 or 4, so
     * 5 and 6 remaining vectors go as 3 + 2 and 3 + 3 rather than 4 + 1 and 4 + 2. */
    for (int v0 = 0, V; v0 < n; v0 += V) {
        const int left = n - v0;
        V = left == 5 || left == 6 ? 3 : imin(4, left);
        switch (V) {
        case 1: nan_seen |= fp8_pass(W, xq, xs, qall, y, ldy, &t, v0, 1); break;
        case 2: nan_seen |= fp8_pass(W, xq, xs, qall, y, ldy, &t, v0, 2); break;
        case 3: nan_seen |= fp8_pass(W, xq, xs, qall, y, ldy, &t, v0, 3); break;
        default: nan_seen |= fp8_pass(W, xq, xs, qall, y, ldy, &t, v0, 4); break;
        }
    }
    if (nan_seen)
        v4_rows_fp8_scalar(W, n, xq, xs, NULL, 0, y, ldy, rt, rt + nr);
}

void v4_rows_fp8_avx512(const v4_mat *W, int n, const float *xq, const float *xs,
                        const float *x, int ldx, float *y, int ldy, int r0, int r1)
{
    if (W->cols % 128 != 0 || n <= 0 || !v4x_inputs_ok(xq, n, W->cols, (size_t)W->cols, 0)) {
        v4_rows_fp8_scalar(W, n, xq, xs, x, ldx, y, ldy, r0, r1);
        return;
    }
    double *qall = fp8_qd_make(n, W->cols, xq);
    for (int rt = r0; rt < r1; rt += TILE)
        fp8_tile(W, n, xq, xs, qall, y, ldy, rt, imin(TILE, r1 - rt), r1);
    free(qall);
}

/* -------------------------------------------------------------------- FP4 -- */

#define FP4_MAGIC 12288.0f          /* 1.5 * 2^13: ulp 2^-10 on [2^13, 2^14) */
#define FP4_MAGIC_BITS 0x46400000u

/* R rows x V vectors of one 32-column block; wr[r] at the block's 16 bytes, qd + 32v
 * = vector v's activations deinterleaved (16 even columns, then 16 odd).  Result:
 * out[g] lane i = exact block sum * 2^10 of (row, vector) = (f % R, f / R), f = 8g+i. */
V4_INLINE void fp4_mk(const uint8_t *const *wr, const int R, const float *qd, const int V,
                      __m256i *out)
{
    const __m512 lut = _mm512_setr_ps(0.f, .5f, 1.f, 1.5f, 2.f, 3.f, 4.f, 6.f,
                                      -0.f, -.5f, -1.f, -1.5f, -2.f, -3.f, -4.f, -6.f);
    const __m512 magic = _mm512_set1_ps(FP4_MAGIC);
    /* each lane adds 2 biased terms: start at -2*bits(magic) (mod 2^32) */
    const __m512i init = _mm512_set1_epi32((int)(0u - 2u * FP4_MAGIC_BITS));
    __m512i acc[16];
#pragma GCC unroll 16
    for (int i = 0; i < R * V; i++)
        acc[i] = init;
#pragma GCC unroll 8
    for (int r = 0; r < R; r++) {
        __m512i d = _mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)wr[r]));
        __m512 we = _mm512_permutexvar_ps(d, lut);
        __m512 wo = _mm512_permutexvar_ps(_mm512_srli_epi32(d, 4), lut);
#pragma GCC unroll 4
        for (int v = 0; v < V; v++) {
            __m512i a = acc[v * R + r];
            a = _mm512_add_epi32(a, _mm512_castps_si512(_mm512_fmadd_ps(_mm512_load_ps(qd + 32 * v), we, magic)));
            a = _mm512_add_epi32(a, _mm512_castps_si512(_mm512_fmadd_ps(_mm512_load_ps(qd + 32 * v + 16), wo, magic)));
            acc[v * R + r] = a;
        }
    }
#pragma GCC unroll 2
    for (int g = 0; g < R * V / 8; g++)
        out[g] = hsum8_epi32(acc + 8 * g);
}

#define SBCHUNK 16      /* FP4 scale blocks whose scales are transposed at once */

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
    const __m512i ie = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
    const __m512i io = _mm512_setr_epi32(1, 3, 5, 7, 9, 11, 13, 15, 17, 19, 21, 23, 25, 27, 29, 31);
    const __m256 post = _mm256_set1_ps(0x1p-10f);
    float swt[SBCHUNK][TILE] __attribute__((aligned(32)));
    float qd[4 * 32] __attribute__((aligned(64)));
    __m256 acc[4];
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
            for (int v = 0; v < V; v++) {
                const float *q = xq + (size_t)(v0 + v) * K + (size_t)sb * 32;
                __m512 a = _mm512_loadu_ps(q), c = _mm512_loadu_ps(q + 16);
                _mm512_store_ps(qd + 32 * v, _mm512_permutex2var_ps(a, ie, c));
                _mm512_store_ps(qd + 32 * v + 16, _mm512_permutex2var_ps(a, io, c));
            }
            __m256i P[4];               /* P[v] lane i: row i of vector v */
            if (V == 1) {
                fp4_mk(wr, 8, qd, 1, P);
            } else if (V == 2) {
                fp4_mk(wr, 8, qd, 2, P);
            } else if (V == 3) {
                fp4_mk(wr, 8, qd, 2, P);
                fp4_mk(wr, 8, qd + 64, 1, P + 2);
            } else {
                __m256i X[2], Y[2];
                fp4_mk(wr, 4, qd, 4, X);
                fp4_mk(wr + 4, 4, qd, 4, Y);
                for (int g = 0; g < 2; g++) {
                    P[2 * g] = _mm256_permute2x128_si256(X[g], Y[g], 0x20);
                    P[2 * g + 1] = _mm256_permute2x128_si256(X[g], Y[g], 0x31);
                }
            }
            const __m256 sw = _mm256_load_ps(swt[b]);
            for (int v = 0; v < V; v++) {
                __m256 pf = _mm256_mul_ps(_mm256_cvtepi32_ps(P[v]), post);
                __m256 tt = _mm256_mul_ps(pf, _mm256_set1_ps(xs[(size_t)(v0 + v) * nkb + sb / 4]));
                tt = _mm256_mul_ps(tt, sw);
                acc[v] = _mm256_add_ps(acc[v], tt);
            }
        }
    }
    for (int v = 0; v < V; v++)
        bf16_store_mask(y + (size_t)(v0 + v) * ldy + t->rt, acc[v], t->nr);
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
    for (int v0 = 0; v0 < n; v0 += 4) {
        switch (imin(4, n - v0)) {
        case 1: fp4_pass(W, xq, xs, y, ldy, &t, v0, 1); break;
        case 2: fp4_pass(W, xq, xs, y, ldy, &t, v0, 2); break;
        case 3: fp4_pass(W, xq, xs, y, ldy, &t, v0, 3); break;
        default: fp4_pass(W, xq, xs, y, ldy, &t, v0, 4); break;
        }
    }
}

void v4_rows_fp4_avx512(const v4_mat *W, int n, const float *xq, const float *xs,
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
