/* linear_fp4_vnni.c - the FP4 (QUANT) row kernel on AVX-512 VNNI integer dot
 * products, bit-identical to v4_rows_fp4_scalar (linear_scalar.c).
 *
 * Compiled with -mavx512{f,bw,vl,dq,vnni} (CMake keys on the file name); the backend
 * only selects it (ISA "avx512vnni") after checking the CPU at run time.  Same
 * signature and row-range contract as the other row kernels (cpu_kernels.h).
 *
 * Arithmetic.  An e4m3 activation q is an integer Q times 2^-9 (|Q| <= 229376), an
 * e2m1 weight an integer k times 2^-1 (|k| <= 12).  Split Q = 8*H + L with H = Q >> 3
 * (|H| <= 28672) and L = Q & 7 (0..7; non-zero only for |q| < 2^-3 with low bits
 * set), and H = 256*d1 + d0 into signed bytes (d0 = H's low byte as int8, |d1| <= 112).
 * The weights go in as unsigned bytes u = k + 12 (0..24, one VPSHUFB per nibble).  A
 * 32-column scale block's partial is then, in units of 2^-10,
 *   S = 8 * (256 * sum(u*d1) + sum(u*d0)) + sum(u*L) - 12 * sum(Q),   |S| < 2^27,
 * each sum(u*x) by VPDPBUSD (unsigned x signed bytes, 4 products added into an int32
 * lane; no lane comes near 2^31, so nothing wraps), 12 * sum(Q) (the bias, per vector
 * and block) computed once per call.  The L pass runs only for (vector, 128-column
 * block)s whose activations have L != 0 (rare: only values below 2^-3, under 1/3584
 * of the block's largest, 448).
 * f32(partial) is cvt(S) (one round to nearest even) times 2^-10 (exact; without the
 * L pass cvt(S/8) * 2^-7, the same value), then the
 * scalar epilogue op for op:  t = f32(partial) * s_act; t = t * s_w; acc = acc + t,
 * in float, blocks ascending.  A zero sum gives +0.0 like the scalar double sum.
 * (Measured against the earlier int16 VPDPWSSD form, the same bits: one 4-instruction
 * decode instead of 11; per expert in cache: -10% at 1 vector, -2% at 2, -5% at 3.)
 *
 * Layout trick (no 16-lane horizontal sums).  One row's 128-column block is 64 bytes
 * whose 128-bit lane g is scale block g.  The low nibbles give the even columns, the
 * high nibbles the odd ones, so every dword lane of a dot product sees 4 columns of
 * one scale block: lanes 4g..4g+3 belong to block g.  The activation digits are
 * pre-arranged in the same order once per call (prepare: even columns, then odd).
 * After the dot products one accumulator per (row, vector) holds, per 128-bit lane g,
 * four partial sums of scale block g; a two-level transposed reduction turns four
 * rows' accumulators into one vector with a lane per (block g, row).
 *
 * Loop structure: tiles of 8 rows.  Up to 4 vectors (the common case: a routed expert
 * sees 1-3 rows of a batched step) go in register passes of 1-3 vectors (tile_one,
 * tile_small: each row's block decoded straight into the dot products, accumulators in
 * registers); more vectors decode each 128-column block once into an L1 buffer reused by
 * every vector (fp4_tile: up to VCHUNK vectors keep their float accumulators across the
 * blocks), so a weight byte is read from memory once per call.  The tile's E8M0 scales
 * are converted 32 blocks at a time (scales_seg); each tile prefetches the next one
 * (pfetch), the first tile of a call its own rows 6 blocks ahead.
 *
 * Non-finite inputs: NaN/inf activations, columns not a multiple of 128, or a failed
 * allocation defer to the scalar reference.  E8M0 0xff scales give NaN like the scalar
 * code (which NaN payload survives may differ).
 *
 * Memory: one heap buffer per call (the arranged activations: 3 bytes per input
 * element, 64 bytes of bias and a flag per 128-block), freed before returning;
 * stack < 8 KiB.
 * Threading: reentrant; the backend gives each thread disjoint rows.  Rows past r1 in
 * the last tile re-read a valid row and their results are dropped.
 */
#include "cpu_kernels.h"

#if V4_CPU_X86
#include <immintrin.h>
#include <stdlib.h>
#include <string.h>

#include "simd_x86.h"

#define TILE 8          /* rows per tile */
#define VCHUNK 16       /* vectors whose float accumulators live across the blocks */
#define SMALLN 3        /* up to this many vectors per pass: the register path */
#define KBIAS 12        /* the weights go in as unsigned bytes u = k + KBIAS (0..24) */

static inline int imin(int a, int b) { return a < b ? a : b; }

/* The activations of n vectors, arranged for the dot products, per (vector, block):
 * the signed-byte digits of H (d1, d0: H = 256 d1 + d0, |d1| <= 112) and of L, 128
 * bytes each (64 for the even columns, then 64 for the odd ones, in decode_block's
 * order); the bias correction (16 int32 lanes, lane 4g+i = KBIAS * sum over scale
 * block g of H, or of Q = 8H + L when the block has an L pass); and whether any L is
 * non-zero. */
typedef struct acts {
    int8_t *d1, *d0, *l;    /* [n][nkb][128] each */
    int32_t *corr;          /* [n][nkb][16] */
    uint8_t *has_l;         /* [n][nkb] */
} acts;

/* Byte 16g + j of the even (odd) half is column 32g + 2j (+ 1): the order decode_block
 * gives the weights (low nibbles = even columns, 128-bit lane g = scale block g).
 * idx[0] picks the even columns of two 32-column blocks (two vectors of int16), idx[1]
 * the odd ones. */
static void arrange_index(__m512i idx[2])
{
    for (int o = 0; o < 2; o++) {
        int16_t ix[32];
        for (int p = 0; p < 32; p++)
            ix[p] = (int16_t)(32 * (p / 16) + 2 * (p % 16) + o);
        idx[o] = _mm512_loadu_si512(ix);
    }
}

/* 128 int16 digits (4 vectors, natural column order) -> 128 bytes in decode order */
V4_INLINE void arrange(const __m512i *v, int8_t *out, const __m512i *idx)
{
    for (int o = 0; o < 2; o++) {
        _mm256_storeu_si256((__m256i *)(out + 64 * o), _mm512_cvtepi16_epi8(_mm512_permutex2var_epi16(v[0], idx[o], v[1])));
        _mm256_storeu_si256((__m256i *)(out + 64 * o + 32), _mm512_cvtepi16_epi8(_mm512_permutex2var_epi16(v[2], idx[o], v[3])));
    }
}

static int prepare(const float *xq, int n, int K, acts *a)
{
    const int nkb = K / 128;
    const size_t ne = (size_t)n * (size_t)K, nb = (size_t)n * (size_t)nkb;
    a->corr = malloc(nb * 16 * sizeof(int32_t) + ne * 3 + nb);
    if (!a->corr)
        return -1;
    a->d1 = (int8_t *)(a->corr + nb * 16);
    a->d0 = a->d1 + ne;
    a->l = a->d0 + ne;
    a->has_l = (uint8_t *)(a->l + ne);
    const __m512 s512 = _mm512_set1_ps(512.0f);
    const __m512i seven = _mm512_set1_epi32(7);
    __m512i idx[2];
    arrange_index(idx);
    for (size_t bk = 0; bk < nb; bk++) {
        const float *q = xq + bk * 128;     /* vector bk / nkb, block bk % nkb */
        __m512i D1[4], D0[4], L16[4];
        int32_t sh[4], sq[4];
        __mmask16 any = 0;
        for (int g = 0; g < 4; g++) {       /* scale block g: columns 32g .. 32g+31 */
            __m512i d1[2], d0[2], l[2], SH = _mm512_setzero_si512(), SQ = _mm512_setzero_si512();
            for (int m = 0; m < 2; m++) {
                /* q * 512 is an integer below 2^18: exact in float, exact conversion */
                const __m512i Q = _mm512_cvtps_epi32(_mm512_mul_ps(_mm512_loadu_ps(q + 32 * g + 16 * m), s512));
                const __m512i H = _mm512_srai_epi32(Q, 3);
                l[m] = _mm512_and_si512(Q, seven);
                any |= _mm512_test_epi32_mask(l[m], l[m]);
                d0[m] = _mm512_srai_epi32(_mm512_slli_epi32(H, 24), 24);          /* -128..127 */
                d1[m] = _mm512_srai_epi32(_mm512_sub_epi32(H, d0[m]), 8);         /* exact */
                SH = _mm512_add_epi32(SH, H);
                SQ = _mm512_add_epi32(SQ, Q);
            }
            /* int32 -> int16, natural order: columns 32g .. 32g+31 in one vector */
            D1[g] = _mm512_inserti64x4(_mm512_castsi256_si512(_mm512_cvtepi32_epi16(d1[0])), _mm512_cvtepi32_epi16(d1[1]), 1);
            D0[g] = _mm512_inserti64x4(_mm512_castsi256_si512(_mm512_cvtepi32_epi16(d0[0])), _mm512_cvtepi32_epi16(d0[1]), 1);
            L16[g] = _mm512_inserti64x4(_mm512_castsi256_si512(_mm512_cvtepi32_epi16(l[0])), _mm512_cvtepi32_epi16(l[1]), 1);
            sh[g] = _mm512_reduce_add_epi32(SH);
            sq[g] = _mm512_reduce_add_epi32(SQ);
        }
        arrange(D1, a->d1 + bk * 128, idx);
        arrange(D0, a->d0 + bk * 128, idx);
        a->has_l[bk] = any != 0;
        if (any)
            arrange(L16, a->l + bk * 128, idx);
        for (int i = 0; i < 16; i++)
            a->corr[bk * 16 + i] = KBIAS * (any ? sq[i / 4] : sh[i / 4]);
    }
    return 0;
}

/* e2m1 code -> u = k + KBIAS (k: the value in units of 1/2), a VPSHUFB table (the same
 * 16 entries in each 128-bit lane) */
V4_INLINE __m512i u_table(void)
{
    return _mm512_broadcast_i32x4(_mm_setr_epi8(12, 13, 14, 15, 16, 18, 20, 24, 12, 11, 10, 9, 8, 6, 4, 0));
}

/* One row's 128-column block (64 bytes at p; 128-bit lane g = scale block g) -> the
 * unsigned bytes u of its even columns (low nibbles) and odd columns (high nibbles). */
V4_INLINE void decode_block(const uint8_t *p, __m512i tu, __m512i *out)
{
    const __m512i m4 = _mm512_set1_epi8(0x0f);
    const __m512i z = _mm512_loadu_si512(p);
    out[0] = _mm512_shuffle_epi8(tu, _mm512_and_si512(z, m4));
    out[1] = _mm512_shuffle_epi8(tu, _mm512_and_si512(_mm512_srli_epi16(z, 4), m4));
}

/* Lane 4g+i of the result = sum of dwords 4g..4g+3 of a[i] (i = 0..3). */
V4_INLINE __m512i reduce4(__m512i a0, __m512i a1, __m512i a2, __m512i a3)
{
    __m512i s01 = _mm512_add_epi32(_mm512_unpacklo_epi32(a0, a1), _mm512_unpackhi_epi32(a0, a1));
    __m512i s23 = _mm512_add_epi32(_mm512_unpacklo_epi32(a2, a3), _mm512_unpackhi_epi32(a2, a3));
    return _mm512_add_epi32(_mm512_unpacklo_epi64(s01, s23), _mm512_unpackhi_epi64(s01, s23));
}

/* E8M0 bytes (one per dword lane) -> floats, as v4_e8m0_to_f32 */
V4_INLINE __m512 e8m0_ps(__m512i b)
{
    __m512i u = _mm512_slli_epi32(b, 23);
    u = _mm512_mask_mov_epi32(u, _mm512_cmpeq_epi32_mask(b, _mm512_setzero_si512()), _mm512_set1_epi32(0x00400000));
    u = _mm512_mask_mov_epi32(u, _mm512_cmpeq_epi32_mask(b, _mm512_set1_epi32(0xff)), _mm512_set1_epi32(0x7fc00000));
    return _mm512_castsi512_ps(u);
}

/* Scales of rows 4h..4h+3 for the 4 scale blocks of block kb: lane 4g+i = row 4h+i,
 * scale block 4kb+g. */
V4_INLINE __m512 tile_scales(const uint8_t *const *srow, int h, int kb)
{
    int32_t d[4];
    for (int i = 0; i < 4; i++)
        memcpy(&d[i], srow[4 * h + i] + 4 * kb, 4);
    const __m128i t = _mm_setr_epi8(0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15);
    __m128i b = _mm_shuffle_epi8(_mm_setr_epi32(d[0], d[1], d[2], d[3]), t);
    return e8m0_ps(_mm512_cvtepu8_epi32(b));
}

#define SSEG 32          /* 128-column blocks whose tile scales are converted at once */

/* tile_scales for blocks kb0 .. kb0+nb-1 (nb <= SSEG) of both row halves, into
 * buf[(kb - kb0) * 2 + h][16]: four blocks at a time from one 16-byte load per row
 * (a 4 x 4 dword transpose), the rest one by one; same values as tile_scales. */
static void scales_seg(const uint8_t *const *srow, int kb0, int nb, float *buf)
{
    const __m128i t = _mm_setr_epi8(0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15);
    for (int h = 0; h < 2; h++) {
        int k = 0;
        for (; k + 4 <= nb; k += 4) {
            __m128i R[4];
            for (int i = 0; i < 4; i++)
                R[i] = _mm_loadu_si128((const __m128i *)(srow[4 * h + i] + 4 * (kb0 + k)));
            const __m128i t0 = _mm_unpacklo_epi32(R[0], R[1]), t1 = _mm_unpacklo_epi32(R[2], R[3]);
            const __m128i t2 = _mm_unpackhi_epi32(R[0], R[1]), t3 = _mm_unpackhi_epi32(R[2], R[3]);
            const __m128i c[4] = {_mm_unpacklo_epi64(t0, t1), _mm_unpackhi_epi64(t0, t1),
                                  _mm_unpacklo_epi64(t2, t3), _mm_unpackhi_epi64(t2, t3)};
            for (int j = 0; j < 4; j++)
                _mm512_storeu_ps(buf + ((k + j) * 2 + h) * 16,
                                 e8m0_ps(_mm512_cvtepu8_epi32(_mm_shuffle_epi8(c[j], t))));
        }
        for (; k < nb; k++)
            _mm512_storeu_ps(buf + (k * 2 + h) * 16, tile_scales(srow, h, kb0 + k));
    }
}

/* A tile's weight rows and scale rows (rows past the matrix re-read its last row). */
V4_INLINE void tile_rows(const v4_mat *W, int rt, int nr, const uint8_t **wrow, const uint8_t **srow)
{
    const int K = W->cols, nsb = K / 32;
    for (int i = 0; i < TILE; i++) {
        int r = rt + imin(i, nr - 1);
        wrow[i] = (const uint8_t *)W->w + (size_t)r * (K / 2);
        srow[i] = W->scale + (size_t)r * nsb;
    }
}

/* What a tile prefetches: the next tile's weights and scales (contiguous: rows rt+8 ..
 * rt+15), spread over its blocks (8 lines of weights per block: the next tile arrives
 * as this one is consumed), and, for the first tile of a call, its own rows 6 blocks
 * ahead.  next == NULL: nothing (a tile's repeated pass, or the last tile). */
typedef struct pfetch {
    const uint8_t *next, *next_s;
    int first;
} pfetch;

/* Start of block kb in a tile: the prefetches, convert the next scale segment when kb
 * starts one (sbuf holds SSEG blocks), and give the block's two scale vectors. */
V4_INLINE void block_begin(const uint8_t *const *wrow, const uint8_t *const *srow, int kb, int nkb, pfetch pf,
                           float *sbuf, __m512 *sw0, __m512 *sw1)
{
    if (pf.first)
        for (int i = 0; i < TILE; i++)
            _mm_prefetch((const char *)(wrow[i] + (size_t)(kb + 6) * 64), _MM_HINT_T0);
    if (pf.next) {
        for (int i = 0; i < TILE; i++)
            _mm_prefetch((const char *)(pf.next + ((size_t)kb * TILE + i) * 64), _MM_HINT_T0);
        if (2 * kb < nkb)   /* the next tile's scales: TILE * nkb * 4 bytes = nkb / 2 lines */
            _mm_prefetch((const char *)(pf.next_s + (size_t)kb * 64), _MM_HINT_T0);
    }
    if (kb % SSEG == 0)
        scales_seg(srow, kb, imin(SSEG, nkb - kb), sbuf);
    *sw0 = _mm512_loadu_ps(sbuf + (kb % SSEG) * 32);
    *sw1 = _mm512_loadu_ps(sbuf + (kb % SSEG) * 32 + 16);
}

V4_INLINE void bf16_store(float *dst, __m256 acc, int nr)
{
    _mm256_mask_storeu_ps(dst, (__mmask8)((1u << nr) - 1), v4x_bf16_ps(acc));
}

/* One row's block sums for one vector, in units of 2^-7 (2^-10 with the L pass), plus
 * the bias KBIAS times the activations' sum: the d1 dot products, times 256, plus the
 * d0 ones (and, with L, that times 8 plus the L ones).  VPDPBUSD multiplies the
 * unsigned weight bytes by the signed digit bytes and adds each group of 4 into an
 * int32 lane: every lane stays below 2^26.  Lanes as decode_block's groups. */
V4_INLINE __m512i row_dot(const __m512i *w, const __m512i *H, const __m512i *L, int has_l)
{
    __m512i s = _mm512_dpbusd_epi32(_mm512_setzero_si512(), w[0], H[0]);
    s = _mm512_dpbusd_epi32(s, w[1], H[1]);
    s = _mm512_slli_epi32(s, 8);
    s = _mm512_dpbusd_epi32(s, w[0], H[2]);
    s = _mm512_dpbusd_epi32(s, w[1], H[3]);
    if (has_l) {
        s = _mm512_slli_epi32(s, 3);
        s = _mm512_dpbusd_epi32(s, w[0], L[0]);
        s = _mm512_dpbusd_epi32(s, w[1], L[1]);
    }
    return s;
}

/* The scaled block partials t = f32(partial) * s_act * s_w of 4 rows (r[0..3]) for
 * the 4 scale blocks of one 128-column block: lane 4g+i = scale block g of row i.
 * C removes the bias (lane 4g+i: KBIAS times block g's activation sum). */
V4_INLINE __m512 half_partials(const __m512i *r, int has_l, __m512i C, float xs, __m512 sw)
{
    /* without the L pass the sums are S / 8: cvt(S / 8) * 2^-7 = cvt(S) * 2^-10 */
    const __m512 post = _mm512_set1_ps(has_l ? 0x1p-10f : 0x1p-7f);
    const __m512i S = _mm512_sub_epi32(reduce4(r[0], r[1], r[2], r[3]), C);
    __m512 P = _mm512_mul_ps(_mm512_cvtepi32_ps(S), post);
    return _mm512_mul_ps(_mm512_mul_ps(P, _mm512_set1_ps(xs)), sw);
}

/* acc (lane = row) += the 8 rows' t of scale blocks 0, 1, 2, 3 in that order; P holds
 * rows 0-3, Q rows 4-7 (half_partials). */
V4_INLINE __m256 combine(__m512 P, __m512 Q, __m256 acc)
{
    /* [P0 Q0 P1 Q1] and [P2 Q2 P3 Q3]: 8 rows per scale block, in order */
    __m512 lo = _mm512_shuffle_f32x4(P, Q, _MM_SHUFFLE(1, 0, 1, 0));
    __m512 hi = _mm512_shuffle_f32x4(P, Q, _MM_SHUFFLE(3, 2, 3, 2));
    lo = _mm512_shuffle_f32x4(lo, lo, _MM_SHUFFLE(3, 1, 2, 0));
    hi = _mm512_shuffle_f32x4(hi, hi, _MM_SHUFFLE(3, 1, 2, 0));
    acc = _mm256_add_ps(acc, _mm512_castps512_ps256(lo));
    acc = _mm256_add_ps(acc, _mm512_extractf32x8_ps(lo, 1));
    acc = _mm256_add_ps(acc, _mm512_castps512_ps256(hi));
    return _mm256_add_ps(acc, _mm512_extractf32x8_ps(hi, 1));
}

/* The scalar epilogue for 8 rows x the 4 scale blocks of one 128-column block, in
 * block order: acc += f32(partial) * s_act * s_w. */
V4_INLINE __m256 epilogue(const __m512i *r, int has_l, __m512i C, float xs, __m512 sw0, __m512 sw1, __m256 acc)
{
    return combine(half_partials(r, has_l, C, xs, sw0), half_partials(r + 4, has_l, C, xs, sw1), acc);
}

/* Vector v's digits for block kb (H: d1 even/odd, d0 even/odd; L only if it has one)
 * and its bias correction */
V4_INLINE int load_acts(const acts *a, int nkb, int v, int kb, __m512i *H, __m512i *L, __m512i *C)
{
    const size_t bk = (size_t)v * nkb + kb, off = bk * 128;
    const int has_l = a->has_l[bk];
    H[0] = _mm512_loadu_si512(a->d1 + off);
    H[1] = _mm512_loadu_si512(a->d1 + off + 64);
    H[2] = _mm512_loadu_si512(a->d0 + off);
    H[3] = _mm512_loadu_si512(a->d0 + off + 64);
    if (has_l) {
        L[0] = _mm512_loadu_si512(a->l + off);
        L[1] = _mm512_loadu_si512(a->l + off + 64);
    }
    *C = _mm512_loadu_si512(a->corr + bk * 16);
    return has_l;
}

/* One vector: each row's decode goes straight to its dot products and the
 * accumulator stays in a register (measured faster than tile_small with NV = 1). */
static void tile_one(const v4_mat *W, const float *xs, const acts *a, float *y, int rt, int nr, int c0, pfetch pf)
{
    const int K = W->cols, nkb = K / 128;
    const __m512i tu = u_table();
    const uint8_t *wrow[TILE], *srow[TILE];
    tile_rows(W, rt, nr, wrow, srow);
    const float *xsv = xs + (size_t)c0 * nkb;
    float sbuf[SSEG * 32];
    __m256 acc = _mm256_setzero_ps();
    for (int kb = 0; kb < nkb; kb++) {
        __m512 sw0, sw1;
        block_begin(wrow, srow, kb, nkb, pf, sbuf, &sw0, &sw1);
        __m512i H[4], L[2], C, r[TILE];
        const int has_l = load_acts(a, nkb, c0, kb, H, L, &C);
        for (int j = 0; j < TILE; j++) {
            __m512i w[2];
            decode_block(wrow[j] + (size_t)kb * 64, tu, w);
            r[j] = row_dot(w, H, L, has_l);
        }
        acc = epilogue(r, has_l, C, xsv[kb], sw0, sw1, acc);
    }
    bf16_store(y + rt, acc, nr);
}

/* Up to SMALLN vectors (NV, a constant after inlining): each row's decode goes
 * straight to the vectors' dot products and everything stays in registers (no L1
 * weight buffer: the general tile below spills at these sizes). */
V4_INLINE void tile_small(const v4_mat *W, const float *xs, const acts *a, float *y, int ldy,
                          int rt, int nr, int c0, pfetch pf, const int NV)
{
    const int K = W->cols, nkb = K / 128;
    const __m512i tu = u_table();
    const uint8_t *wrow[TILE], *srow[TILE];
    tile_rows(W, rt, nr, wrow, srow);
    float sbuf[SSEG * 32];
    __m256 acc[SMALLN];
    for (int v = 0; v < NV; v++)
        acc[v] = _mm256_setzero_ps();
    for (int kb = 0; kb < nkb; kb++) {
        __m512 sw0, sw1;
        block_begin(wrow, srow, kb, nkb, pf, sbuf, &sw0, &sw1);
        int has_l[SMALLN];
        __m512i H[SMALLN][4], L[SMALLN][2], C[SMALLN], r[SMALLN][TILE];
        for (int v = 0; v < NV; v++)
            has_l[v] = load_acts(a, nkb, c0 + v, kb, H[v], L[v], &C[v]);
        for (int j = 0; j < TILE; j++) {
            __m512i w[2];
            decode_block(wrow[j] + (size_t)kb * 64, tu, w);
            for (int v = 0; v < NV; v++)
                r[v][j] = row_dot(w, H[v], L[v], has_l[v]);
        }
        for (int v = 0; v < NV; v++)
            acc[v] = epilogue(r[v], has_l[v], C[v], xs[(size_t)(c0 + v) * nkb + kb], sw0, sw1, acc[v]);
    }
    for (int v = 0; v < NV; v++)
        bf16_store(y + (size_t)(c0 + v) * ldy + rt, acc[v], nr);
}

static void fp4_tile(const v4_mat *W, int n, const float *xs, const acts *a, float *y, int ldy,
                     int rt, int nr, pfetch pf)
{
    const int K = W->cols, nkb = K / 128;
    const __m512i tu = u_table();
    const uint8_t *wrow[TILE], *srow[TILE];
    tile_rows(W, rt, nr, wrow, srow);
    __m512i wd[TILE][2];
    for (int c0 = 0; c0 < n; c0 += VCHUNK) {
        const int nv = imin(VCHUNK, n - c0);
        const pfetch pfc = c0 == 0 ? pf : (pfetch){NULL, NULL, 0};
        if (nv == 1) {          /* a last single vector: the register path */
            tile_one(W, xs, a, y + (size_t)c0 * ldy, rt, nr, c0, pfc);
            continue;
        }
        float sbuf[SSEG * 32];
        __m256 acc[VCHUNK];
        for (int v = 0; v < nv; v++)
            acc[v] = _mm256_setzero_ps();
        for (int kb = 0; kb < nkb; kb++) {
            __m512 sw0, sw1;
            block_begin(wrow, srow, kb, nkb, pfc, sbuf, &sw0, &sw1);
            __m512i H[4], L[2], C, r[TILE];
            for (int i = 0; i < TILE; i++)
                decode_block(wrow[i] + (size_t)kb * 64, tu, wd[i]);
            for (int v = 0; v < nv; v++) {
                const int has_l = load_acts(a, nkb, c0 + v, kb, H, L, &C);
                for (int j = 0; j < TILE; j++)
                    r[j] = row_dot(wd[j], H, L, has_l);
                acc[v] = epilogue(r, has_l, C, xs[(size_t)(c0 + v) * nkb + kb], sw0, sw1, acc[v]);
            }
        }
        for (int v = 0; v < nv; v++)
            bf16_store(y + (size_t)(c0 + v) * ldy + rt, acc[v], nr);
    }
}

void v4_rows_fp4_vnni(const v4_mat *W, int n, const float *xq, const float *xs,
                      const float *x, int ldx, float *y, int ldy, int r0, int r1)
{
    acts a;
    if (W->cols % 128 != 0 || n <= 0 || !v4x_inputs_ok(xq, n, W->cols, (size_t)W->cols, 0) ||
        prepare(xq, n, W->cols, &a) != 0) {
        v4_rows_fp4_scalar(W, n, xq, xs, x, ldx, y, ldy, r0, r1);
        return;
    }
    for (int rt = r0; rt < r1; rt += TILE) {
        const int nr = imin(TILE, r1 - rt);
        pfetch pf = {NULL, NULL, rt == r0};
        if (rt + TILE < r1) {
            pf.next = (const uint8_t *)W->w + (size_t)(rt + TILE) * (W->cols / 2);
            pf.next_s = W->scale + (size_t)(rt + TILE) * (W->cols / 32);
        }
        if (n > 4) {
            fp4_tile(W, n, xs, &a, y, ldy, rt, nr, pf);
            continue;
        }
        /* n <= 4: passes of at most SMALLN vectors (4 = 3 + 1; the second pass finds
         * the tile in the cache and prefetches nothing) */
        for (int c0 = 0; c0 < n;) {
            const int nv = imin(n - c0, SMALLN);
            if (nv == 1)
                tile_one(W, xs, &a, y + (size_t)c0 * ldy, rt, nr, c0, pf);
            else if (nv == 2)
                tile_small(W, xs, &a, y, ldy, rt, nr, c0, pf, 2);
            else
                tile_small(W, xs, &a, y, ldy, rt, nr, c0, pf, 3);
            c0 += nv;
            pf = (pfetch){NULL, NULL, 0};
        }
    }
    free(a.corr);
}

#endif /* V4_CPU_X86 */
