/* linear_exact_avx512.c - AVX-512 (F+BW+VL+DQ) EXACT row kernels (BF16, F32 and
 * dequantized FP8 weights, double accumulation), bit-identical to linear_scalar.c; the
 * QUANT kernels are in linear_avx512.c.
 *
 * Compiled with -mavx512{f,bw,vl,dq} (CMake keys on the file name); only called after
 * the backend checked the CPU at run time.  Same signatures and row-range contract as
 * the scalar kernels (cpu_kernels.h); everything is reentrant, no global state.
 *
 * EXACT (BF16, F32, FP8 dequantized).  The scalar loop rounds after every addition of
 * its double sum, so the order matters in general (mixed magnitudes).  These kernels
 * keep that order: SIMD lanes are different ROWS, each lane does exactly the scalar
 * sequence acc = acc + x_j*w_j for j ascending.  fma(w_j, x_j, acc) is identical:
 * x_j*w_j is exact in double (float*float: 48 significant bits; float*bf16 and
 * float*dequantized-FP8 fewer; exponents far inside the double range), so the fma
 * rounds the same exact sum once.
 * Row-major weights (V4_LAYOUT_ROWMAJOR) need a transpose of 8-row x 32-column tiles
 * (a 16-bit unpack tree for BF16/FP8, 8x8 float transposes for F32) into a small L1
 * buffer of doubles; 8 such 8-row subtiles run as independent FMA chains.  That is
 * compute-bound.  Prepared weights (V4_LAYOUT_R8, see the EXACT, R8 section) already
 * hold each 8-row group column-interleaved: one load + conversion per column gives a
 * lane-per-row vector, and the kernels run at memory speed for BF16/F32.
 * FP8-dequant weights are rebuilt exactly as the scalar code does, bf16(f32(e4m3 *
 * s_w)), or (R8 fast paths) replaced by decodes proven equal to it (simd_x86.h).
 *
 * Loop structure: row-major: 64-row tiles with explicit prefetch (64 concurrent row
 * streams at a power-of-two stride defeat the hardware prefetchers); R8: tiles of 8
 * groups (one stream per group), see below.
 *
 * Non-finite inputs: with NaN/inf inputs the kernels defer to the scalar reference
 * (v4x_inputs_ok): the reordered sums would not reproduce the scalar NaN propagation.
 *
 * Threading: the backend gives each thread a disjoint [r0, r1); tiles here are 64 rows;
 * rows past r1 in the last tile read a valid row again and their results are dropped
 * (R8: whole groups are computed, padding rows included, and only rows in [r0, r1) are
 * stored).  Stack use is below 40 KiB.
 */
#include "cpu_kernels.h"

#if V4_CPU_X86
#include <immintrin.h>
#include <string.h>

#include "simd_x86.h"

#define VGROUP 16       /* EXACT: batch vectors per pass over a tile */

static inline int imin(int a, int b) { return a < b ? a : b; }

/* ------------------------------------------------------------------ EXACT -- */

#define XSUB 8                  /* 8-row subtiles per EXACT tile (independent chains) */
#define XROWS (XSUB * 8)        /* 64 rows */
#define XCOLS 32                /* columns transposed per step */
#define XPF (4 * XCOLS)         /* prefetch distance in elements (4 steps ahead) */

/* buf layout: buf[(j * XSUB + s) * 8 + lane] = w[row s*8+lane][j0 + j] as double */

/* 8 rows of 32 16-bit bf16 words (zmm each) -> 32 columns of 8 doubles. */
V4_INLINE void tr16_to_buf(const __m512i *r, double *buf, int s)
{
    __m512i a0 = _mm512_unpacklo_epi16(r[0], r[1]), a1 = _mm512_unpackhi_epi16(r[0], r[1]);
    __m512i a2 = _mm512_unpacklo_epi16(r[2], r[3]), a3 = _mm512_unpackhi_epi16(r[2], r[3]);
    __m512i a4 = _mm512_unpacklo_epi16(r[4], r[5]), a5 = _mm512_unpackhi_epi16(r[4], r[5]);
    __m512i a6 = _mm512_unpacklo_epi16(r[6], r[7]), a7 = _mm512_unpackhi_epi16(r[6], r[7]);
    /* per 128-bit lane L: rows 0-3 (b0..b3) / 4-7 (b4..b7), column pairs 8L+{0,1},{2,3},{4,5},{6,7} */
    __m512i b0 = _mm512_unpacklo_epi32(a0, a2), b1 = _mm512_unpackhi_epi32(a0, a2);
    __m512i b2 = _mm512_unpacklo_epi32(a1, a3), b3 = _mm512_unpackhi_epi32(a1, a3);
    __m512i b4 = _mm512_unpacklo_epi32(a4, a6), b5 = _mm512_unpackhi_epi32(a4, a6);
    __m512i b6 = _mm512_unpacklo_epi32(a5, a7), b7 = _mm512_unpackhi_epi32(a5, a7);
    /* c[k] lane L = rows 0..7 of column 8L+k */
    __m512i c[8];
    c[0] = _mm512_unpacklo_epi64(b0, b4); c[1] = _mm512_unpackhi_epi64(b0, b4);
    c[2] = _mm512_unpacklo_epi64(b1, b5); c[3] = _mm512_unpackhi_epi64(b1, b5);
    c[4] = _mm512_unpacklo_epi64(b2, b6); c[5] = _mm512_unpackhi_epi64(b2, b6);
    c[6] = _mm512_unpacklo_epi64(b3, b7); c[7] = _mm512_unpackhi_epi64(b3, b7);
    const __m512i zero = _mm512_setzero_si512();
    for (int L = 0; L < 4; L++) {
        /* words 2i <- 0, 2i+1 <- c[k] word 8L+i: floats (bf16 << 16) of lane L */
        const __m512i idx = _mm512_set_epi16(
            32 + 8 * L + 7, 0, 32 + 8 * L + 6, 0, 32 + 8 * L + 5, 0, 32 + 8 * L + 4, 0,
            32 + 8 * L + 3, 0, 32 + 8 * L + 2, 0, 32 + 8 * L + 1, 0, 32 + 8 * L + 0, 0,
            32 + 8 * L + 7, 0, 32 + 8 * L + 6, 0, 32 + 8 * L + 5, 0, 32 + 8 * L + 4, 0,
            32 + 8 * L + 3, 0, 32 + 8 * L + 2, 0, 32 + 8 * L + 1, 0, 32 + 8 * L + 0, 0);
#pragma GCC unroll 8
        for (int k = 0; k < 8; k++) {
            __m512i f = _mm512_permutex2var_epi16(zero, idx, c[k]);
            __m512d d = _mm512_cvtps_pd(_mm512_castps512_ps256(_mm512_castsi512_ps(f)));
            _mm512_store_pd(buf + ((size_t)(8 * L + k) * XSUB + s) * 8, d);
        }
    }
}

/* bf16(f32(e4m3 * sw)) for 16 bytes, as 16 bf16 words */
V4_INLINE __m256i fp8_dequant16(__m128i bytes, __m512 sw)
{
    __m512i b = _mm512_cvtepi8_epi32(bytes);
    __m512i bits = _mm512_and_si512(_mm512_slli_epi32(b, 20), _mm512_set1_epi32((int)0x87f00000u));
    __m512 v = _mm512_mul_ps(_mm512_castsi512_ps(bits), _mm512_set1_ps(0x1p120f));
    __mmask16 nan = _mm512_cmpeq_epi32_mask(_mm512_and_si512(b, _mm512_set1_epi32(0x7f)),
                                            _mm512_set1_epi32(0x7f));
    __m512i nanbits = _mm512_or_si512(_mm512_and_si512(b, _mm512_set1_epi32((int)0x80000000u)),
                                      _mm512_set1_epi32(0x7fc00000));
    v = _mm512_mask_blend_ps(nan, v, _mm512_castsi512_ps(nanbits));
    v = _mm512_mul_ps(v, sw);
    __m256 lo = v4x_bf16_ps(_mm512_castps512_ps256(v));
    __m256 hi = v4x_bf16_ps(_mm512_extractf32x8_ps(v, 1));
    __m512i u = _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_castps_si256(lo)), _mm256_castps_si256(hi), 1);
    return _mm512_cvtepi32_epi16(_mm512_srli_epi32(u, 16));
}

/* Transpose rows [s*8, s*8+8) of the tile, columns [j0, j0+cw), into buf. */
static void exact_transpose(const v4_mat *W, const int *rows, int j0, int cw, double *buf, int s)
{
    const int K = W->cols;
    if (W->type == V4_W_F32) {
        const float *w = W->w;
        for (int g = 0; g < XCOLS; g += 8) {
            __m256 m[8];
            int c = cw - g;
            __mmask8 k = c >= 8 ? 0xff : c <= 0 ? 0 : (__mmask8)((1u << c) - 1);
            for (int i = 0; i < 8; i++) {
                const float *p = w + (size_t)rows[s * 8 + i] * K + j0 + g;
                m[i] = _mm256_maskz_loadu_ps(k, p);
                if (g % 16 == 0)
                    _mm_prefetch((const char *)(p + XPF), _MM_HINT_T0);
            }
            v4x_transpose8_ps(m);
            for (int j = 0; j < 8; j++)
                _mm512_store_pd(buf + ((size_t)(g + j) * XSUB + s) * 8, _mm512_cvtps_pd(m[j]));
        }
        return;
    }
    __m512i r[8];
    if (W->type == V4_W_BF16) {
        const uint16_t *w = W->w;
        if (cw == XCOLS) {
            for (int i = 0; i < 8; i++) {
                const uint16_t *p = w + (size_t)rows[s * 8 + i] * K + j0;
                r[i] = _mm512_loadu_si512(p);
                _mm_prefetch((const char *)(p + XPF), _MM_HINT_T0);
            }
        } else {
            __mmask32 k = (__mmask32)((1u << cw) - 1);
            for (int i = 0; i < 8; i++)
                r[i] = _mm512_maskz_loadu_epi16(k, w + (size_t)rows[s * 8 + i] * K + j0);
        }
    } else {    /* V4_W_FP8, dequantized */
        const uint8_t *w = W->w;
        const int scols = (K + 127) / 128;
        __mmask32 k = cw >= 32 ? 0xffffffffu : (__mmask32)((1u << cw) - 1);
        for (int i = 0; i < 8; i++) {
            int row = rows[s * 8 + i];
            __m512 sw = _mm512_set1_ps(v4x_e8m0(W->scale[(size_t)(row / 128) * scols + j0 / 128]));
            __m256i bytes = _mm256_maskz_loadu_epi8(k, w + (size_t)row * K + j0);
            if ((j0 / XCOLS) % 2 == 0)
                _mm_prefetch((const char *)(w + (size_t)row * K + j0 + XPF), _MM_HINT_T0);
            __m256i lo = fp8_dequant16(_mm256_castsi256_si128(bytes), sw);
            __m256i hi = fp8_dequant16(_mm256_extracti128_si256(bytes, 1), sw);
            r[i] = _mm512_inserti64x4(_mm512_castsi256_si512(lo), hi, 1);
        }
    }
    tr16_to_buf(r, buf, s);
}

/* acc[s] (8 rows each) += sum over j < cw, in column order, of buf[j][s] * xd[j]:
 * each lane is one row's scalar double sequence. */
V4_INLINE void exact_fma(const double *buf, const double *xd, int cw, double *acc, const int NS)
{
    __m512d a[XSUB];
#pragma GCC unroll 8
    for (int s = 0; s < NS; s++)
        a[s] = _mm512_load_pd(acc + (size_t)s * 8);
    for (int j = 0; j < cw; j++) {
        const __m512d xb = _mm512_set1_pd(xd[j]);
#pragma GCC unroll 8
        for (int s = 0; s < NS; s++)
            a[s] = _mm512_fmadd_pd(_mm512_load_pd(buf + ((size_t)j * XSUB + s) * 8), xb, a[s]);
    }
#pragma GCC unroll 8
    for (int s = 0; s < NS; s++)
        _mm512_store_pd(acc + (size_t)s * 8, a[s]);
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
    const int ns = (nr + 7) / 8;
    int rows[XROWS];
    for (int i = 0; i < XROWS; i++)
        rows[i] = rt + imin(i, nr - 1);
    double buf[XCOLS * XSUB * 8] __attribute__((aligned(64)));
    double acc[VGROUP * XSUB * 8] __attribute__((aligned(64)));
    double xd[XCOLS] __attribute__((aligned(64)));
    for (int v0 = 0; v0 < n; v0 += VGROUP) {
        const int nv = imin(VGROUP, n - v0);
        memset(acc, 0, sizeof(double) * (size_t)nv * XSUB * 8);
        for (int j0 = 0; j0 < K; j0 += XCOLS) {
            const int cw = imin(XCOLS, K - j0);
            for (int s = 0; s < ns; s++)
                exact_transpose(W, rows, j0, cw, buf, s);
            for (int v = 0; v < nv; v++) {
                const float *xv = x + (size_t)(v0 + v) * ldx + j0;
                for (int j = 0; j < cw; j++)
                    xd[j] = (double)xv[j];
                exact_fma_ns(buf, xd, cw, acc + (size_t)v * XSUB * 8, ns);
            }
        }
        for (int v = 0; v < nv; v++)
            for (int s = 0; s < ns; s++) {
                int cnt = imin(8, nr - s * 8);
                __m256 f = _mm512_cvtpd_ps(_mm512_load_pd(acc + ((size_t)v * XSUB + s) * 8));
                _mm256_mask_storeu_ps(y + (size_t)(v0 + v) * ldy + rt + s * 8, (__mmask8)((1u << cnt) - 1), f);
            }
    }
}

/* ------------------------------------------------------------- EXACT, R8 -- */

/* R8 layout (backend.h): group g's column j is 8 contiguous weights, rows 8g..8g+7,
 * so one load + conversion gives a zmm of 8 doubles, lane i = row 8g+i, and the
 * scalar sequence acc = fma(w_j, x_j, acc), j ascending, runs in every lane with no
 * transpose.  A tile is up to R8G groups; its columns are walked in chunks (R8CK, or
 * one 128-column scale block for FP8); per chunk, passes of V <= 4 vectors run
 * micro-kernels of G groups x V vectors (G*V <= 16 independent FMA chains, 8 for a
 * single vector, enough to cover the FMA latency) that share each converted weight
 * vector between the pass's vectors.  The first pass streams the chunk from memory
 * with software prefetch (one prefetch per 64-byte line, R8PF bytes ahead, in each
 * group's stream); later passes find it in L1.  The double accumulators live in
 * acc[v][g][8] between chunks (storing and reloading a double does not round).
 * FP8 blocks are first scanned (NaN codes, exponent-0 codes; the scan is also the
 * first touch, so it carries the prefetch) and then computed by one of three decodes
 * (simd_x86.h): BIAS (no exponent-0 codes, one scale for the tile's groups), MUL, or
 * the exact dequantization bf16(f32(q * sw)) when the block holds NaN codes or an
 * E8M0 scale outside [3, 246]. */
#define R8G 8                   /* groups of 8 rows per tile */
#define R8CK 256                /* columns per chunk (BF16/F32) */
#define R8V 4                   /* vectors per pass */
#define R8PF 1024               /* prefetch distance, bytes ahead in a group's stream */
#define R8PF_FP8 2048           /* FP8: the scan's prefetch distance (2 column blocks) */

enum { R8_F32, R8_BF16, R8_FP8_BIAS, R8_FP8_MUL, R8_FP8_SLOW };

/* 8 weights (one column of one group) as doubles (x carries the matching factor:
 * 1 for F32/BF16, 2^(k+8) for BIAS, 2^128 for MUL and SLOW). */
V4_INLINE __m512d r8_load(const int T, const uint8_t *p, __m512d S, __m256 sw)
{
    if (T == R8_F32)
        return _mm512_cvtps_pd(_mm256_loadu_ps((const float *)p));
    if (T == R8_BF16) {
        __m256i u = _mm256_slli_epi32(_mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)p)), 16);
        return _mm512_cvtps_pd(_mm256_castsi256_ps(u));
    }
    if (T == R8_FP8_BIAS || T == R8_FP8_MUL) {
        __m512i b = _mm512_slli_epi64(_mm512_cvtepi8_epi64(_mm_loadl_epi64((const __m128i *)p)), 49);
        if (T == R8_FP8_BIAS)   /* (b & mask) | bias */
            return _mm512_castsi512_pd(_mm512_ternarylogic_epi64(b, _mm512_set1_epi64(V4X_E4M3_PD_MASK),
                                                                 _mm512_set1_epi64(V4X_E4M3_PD_BIAS), 0xEA));
        return _mm512_mul_pd(_mm512_castsi512_pd(_mm512_and_si512(b, _mm512_set1_epi64(V4X_E4M3_PD_MASK))), S);
    }
    __m256 f = v4x_fp8_dequant8(_mm_loadl_epi64((const __m128i *)p), sw);
    return _mm512_mul_pd(_mm512_cvtps_pd(f), _mm512_set1_pd(0x1p-128));
}

/* G groups x V vectors, nj columns from column j0: acc[v][g] += w(g, j) * xd[v][j]
 * for j ascending, one fma per column (lane = row).  gp[g]: group g's stream; xd:
 * vector v's doubles for columns j0.. at xd + v * R8CK; acc: [v][R8G][8]. */
V4_INLINE void r8_mk(const int T, const uint8_t *const *gp, int j0, int nj, const double *xd,
                     const __m512d *S, const __m256 *sw, double *acc, const int G, const int V, int pf)
{
    const int es = T == R8_F32 ? 4 : T == R8_BF16 ? 2 : 1;
    const int U = 8 / es;                   /* columns per 64-byte line of a stream */
    __m512d a[16];
#pragma GCC unroll 16
    for (int i = 0; i < V * G; i++)
        a[i] = _mm512_load_pd(acc + (size_t)((i / G) * R8G + i % G) * 8);
    const uint8_t *p[R8G];
#pragma GCC unroll 8
    for (int g = 0; g < G; g++)
        p[g] = gp[g] + (size_t)j0 * 8 * es;
    int j = 0;
    for (; j + U <= nj; j += U) {
        if (pf) {
#pragma GCC unroll 8
            for (int g = 0; g < G; g++)
                _mm_prefetch((const char *)(p[g] + (size_t)j * 8 * es + R8PF), _MM_HINT_T0);
        }
#pragma GCC unroll 8
        for (int u = 0; u < U; u++) {
#pragma GCC unroll 8
            for (int g = 0; g < G; g++) {
                __m512d w = r8_load(T, p[g] + (size_t)(j + u) * 8 * es, S[g], sw[g]);
#pragma GCC unroll 4
                for (int v = 0; v < V; v++)
                    a[v * G + g] = _mm512_fmadd_pd(w, _mm512_set1_pd(xd[v * R8CK + j + u]), a[v * G + g]);
            }
        }
    }
    for (; j < nj; j++) {
#pragma GCC unroll 8
        for (int g = 0; g < G; g++) {
            __m512d w = r8_load(T, p[g] + (size_t)j * 8 * es, S[g], sw[g]);
#pragma GCC unroll 4
            for (int v = 0; v < V; v++)
                a[v * G + g] = _mm512_fmadd_pd(w, _mm512_set1_pd(xd[v * R8CK + j]), a[v * G + g]);
        }
    }
#pragma GCC unroll 16
    for (int i = 0; i < V * G; i++)
        _mm512_store_pd(acc + (size_t)((i / G) * R8G + i % G) * 8, a[i]);
}

/* One pass (V vectors) over ng groups, in micro-kernels of up to 8 (V = 1) or 4 groups. */
V4_INLINE void r8_pass(const int T, const uint8_t *const *gp, int ng, int j0, int nj, const double *xd,
                       const __m512d *S, const __m256 *sw, double *acc, const int V, int pf)
{
    const int gmax = V == 1 ? 8 : 4;
    for (int g = 0; g < ng;) {
        const int left = imin(gmax, ng - g);
        const int G = left >= 8 ? 8 : left >= 4 ? 4 : left >= 2 ? 2 : 1;
        double *ag = acc + (size_t)g * 8;
        if (V == 1 && G == 8)
            r8_mk(T, gp + g, j0, nj, xd, S + g, sw + g, ag, 8, 1, pf);
        else if (G == 4)
            r8_mk(T, gp + g, j0, nj, xd, S + g, sw + g, ag, 4, V, pf);
        else if (G == 2)
            r8_mk(T, gp + g, j0, nj, xd, S + g, sw + g, ag, 2, V, pf);
        else
            r8_mk(T, gp + g, j0, nj, xd, S + g, sw + g, ag, 1, V, pf);
        g += G;
    }
}

V4_INLINE void r8_pass_v(const int T, const uint8_t *const *gp, int ng, int j0, int nj, const double *xd,
                         const __m512d *S, const __m256 *sw, double *acc, int V, int pf)
{
    switch (V) {
    case 1: r8_pass(T, gp, ng, j0, nj, xd, S, sw, acc, 1, pf); break;
    case 2: r8_pass(T, gp, ng, j0, nj, xd, S, sw, acc, 2, pf); break;
    case 3: r8_pass(T, gp, ng, j0, nj, xd, S, sw, acc, 3, pf); break;
    default: r8_pass(T, gp, ng, j0, nj, xd, S, sw, acc, 4, pf); break;
    }
}

/* FP8 block scan of groups [0, ng), columns [j0, j0+nj): returns bit 0 = a NaN code
 * (b & 0x7f == 0x7f), bit 1 = an exponent-0 code (zero or subnormal, b & 0x78 == 0). */
static int r8_fp8_scan(const uint8_t *const *gp, int ng, int j0, int nj)
{
    const __m512i m7f = _mm512_set1_epi8(0x7f), m78 = _mm512_set1_epi8(0x78);
    const int nb = nj * 8;
    __mmask64 kn = 0, kz = 0;
    for (int g = 0; g < ng; g++) {
        const uint8_t *p = gp[g] + (size_t)j0 * 8;
        for (int o = 0; o < nb; o += 64) {
            __m512i v;
            if (o + 64 <= nb) {
                _mm_prefetch((const char *)(p + o + R8PF_FP8), _MM_HINT_T0);
                v = _mm512_loadu_si512(p + o);
            } else {    /* bytes past the block read as 0x08 (neither flag) */
                v = _mm512_mask_loadu_epi8(_mm512_set1_epi8(0x08), (__mmask64)(~0ull >> (64 - (nb - o))), p + o);
            }
            kn |= _mm512_cmpeq_epi8_mask(_mm512_and_si512(v, m7f), m7f);
            kz |= _mm512_testn_epi8_mask(v, m78);
        }
    }
    return (kn != 0) | (kz != 0) << 1;
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
    double acc[VGROUP * R8G * 8] __attribute__((aligned(64)));
    double xd[R8V * R8CK] __attribute__((aligned(64)));
    __m512d S[R8G];
    __m256 sw[R8G];
    for (int g = 0; g < R8G; g++) {
        S[g] = _mm512_setzero_pd();
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
                        S[g] = _mm512_set1_pd(v4x_fp8_exact_scale(srow[g][kb]));
                }
            }
            const __m512d vpre = _mm512_set1_pd(pre);
            for (int v0 = 0; v0 < nvb; v0 += R8V) {
                const int V = imin(R8V, nvb - v0);
                for (int v = 0; v < V; v++) {
                    const float *xv = x + (size_t)(vb + v0 + v) * ldx + jc;
                    double *d = xd + (size_t)v * R8CK;
                    int j = 0;
                    for (; j + 8 <= ck; j += 8)
                        _mm512_store_pd(d + j, _mm512_mul_pd(_mm512_cvtps_pd(_mm256_loadu_ps(xv + j)), vpre));
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
                unsigned m = 0;
                for (int i = 0; i < 8; i++)
                    m |= (unsigned)(rg + i >= r0 && rg + i < r1) << i;
                __m256 f = _mm512_cvtpd_ps(_mm512_load_pd(acc + ((size_t)v * R8G + g) * 8));
                _mm256_mask_storeu_ps(y + (size_t)(vb + v) * ldy + rg, (__mmask8)m, f);
            }
    }
}

static void exact_r8(const v4_mat *W, int n, const float *x, int ldx, float *y, int ldy, int r0, int r1)
{
    const int gend = (r1 + 7) / 8;
    for (int ga = r0 / 8; ga < gend; ga += R8G)
        r8_tile(W, n, x, ldx, y, ldy, ga, imin(R8G, gend - ga), r0, r1);
}

void v4_rows_exact_avx512(const v4_mat *W, int n, const float *xq, const float *xs,
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
