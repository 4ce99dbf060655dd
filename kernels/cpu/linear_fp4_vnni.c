/* linear_fp4_vnni.c - the FP4 (QUANT) row kernel on AVX-512 VNNI integer dot
 * products, bit-identical to v4_rows_fp4_scalar (linear_scalar.c).
 *
 * Compiled with -mavx512{f,bw,vl,dq,vnni} (CMake keys on the file name); the backend
 * only selects it (ISA "avx512vnni") after checking the CPU at run time.  Same
 * signature and row-range contract as the other row kernels (cpu_kernels.h).
 *
 * Arithmetic.  An e4m3 activation q is an integer Q times 2^-9 (|Q| <= 229376), an
 * e2m1 weight an integer k times 2^-1 (|k| <= 12).  Split Q = 8*H + L with H = Q >> 3
 * (|H| <= 28672, an int16) and L = Q & 7 (0..7; non-zero only for |q| < 2^-3 with low
 * bits set).  A 32-column scale block's partial is then, in units of 2^-10,
 *   S = 8 * sum(H*k) + sum(L*k),   |S| <= 32 * 229376 * 12 < 2^27,
 * an exact int32 computed with VPDPWSSD (int16 pairs multiplied and added into int32
 * lanes; every intermediate is far below 2^31, so no saturation or wrap occurs).  The
 * L pass runs only for (vector, 128-column block)s whose activations have L != 0.
 * f32(partial) is cvt(S) (one round to nearest even) times 2^-10 (exact; without the
 * L pass cvt(S/8) * 2^-7, the same value), then the
 * scalar epilogue op for op:  t = f32(partial) * s_act; t = t * s_w; acc = acc + t,
 * in float, blocks ascending.  A zero sum gives +0.0 like the scalar double sum.
 *
 * Layout trick (no 16-lane horizontal sums).  One row's 128-column block is 64 bytes
 * whose 128-bit lane g is scale block g.  VPSHUFB table lookups of the low and high
 * nibbles give the low and high bytes of the int16 values, and byte unpacks make four
 * vectors of 32 int16 (even columns of bytes 0-7 and 8-15 of each lane, then odd
 * columns), so lanes 4g..4g+3 of each dot product only see columns of scale block g.
 * The activations are pre-arranged in the same order once per call.
 * After the four dot products one accumulator per (row, vector) holds, per 128-bit
 * lane g, four partial sums of scale block g; a two-level transposed reduction turns
 * four rows' accumulators into one vector with a lane per (block g, row).
 *
 * Loop structure: tiles of 8 rows.  Up to 4 vectors (the common case: a routed expert
 * sees 1-3 rows of a batched step) go in register passes of 1-3 vectors (tile_one,
 * tile_small: each row's block decoded straight into the dot products, accumulators in
 * registers); more vectors decode each 128-column block once into an L1 buffer reused by
 * every vector (fp4_tile: up to VCHUNK vectors keep their float accumulators across the
 * blocks), so a weight byte is read from memory once per call.  The tile's E8M0 scales
 * are converted 32 blocks at a time (scales_seg); rows are prefetched 6 blocks ahead.
 *
 * Non-finite inputs: NaN/inf activations, columns not a multiple of 128, or a failed
 * allocation defer to the scalar reference.  E8M0 0xff scales give NaN like the scalar
 * code (which NaN payload survives may differ).
 *
 * Memory: one heap buffer per call (the arranged activations: 4 bytes per input
 * element plus a flag per 128-block), freed before returning; stack < 8 KiB.
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

static inline int imin(int a, int b) { return a < b ? a : b; }

/* The activations of n vectors, arranged for the dot products: per (vector, block)
 * 4 x 32 int16 of H, 4 x 32 of L, and whether any L is non-zero. */
typedef struct acts {
    int16_t *h, *l;     /* [n][nkb][128] each, in dot-product order */
    uint8_t *has_l;     /* [n][nkb] */
} acts;

/* Position p = 32i + 8g + w of a block's arranged activations (dot product i, 128-bit
 * lane g = scale block g, word w) holds column 32g + 2(w + 8(i & 1)) + (i >> 1): the
 * order in which decode_block produces the weights.  Lanes 0-1 of each output come
 * from columns 0-63, lanes 2-3 from 64-127 at the same offsets, so one index vector
 * (the column mod 64) serves two VPERMT2Ws and a blend. */
static void arrange_index(__m512i idx[4])
{
    for (int i = 0; i < 4; i++) {
        int16_t ix[32];
        for (int p = 0; p < 32; p++)
            ix[p] = (int16_t)((32 * (p / 8) + 2 * (p % 8 + 8 * (i & 1)) + (i >> 1)) & 63);
        idx[i] = _mm512_loadu_si512(ix);
    }
}

V4_INLINE void arrange(const int16_t *nat, int16_t *out, const __m512i *idx)
{
    const __m512i n0 = _mm512_loadu_si512(nat), n1 = _mm512_loadu_si512(nat + 32);
    const __m512i n2 = _mm512_loadu_si512(nat + 64), n3 = _mm512_loadu_si512(nat + 96);
    for (int i = 0; i < 4; i++) {
        const __m512i lo = _mm512_permutex2var_epi16(n0, idx[i], n1), hi = _mm512_permutex2var_epi16(n2, idx[i], n3);
        _mm512_storeu_si512(out + 32 * i, _mm512_mask_blend_epi16(0xFFFF0000u, lo, hi));
    }
}

static int prepare(const float *xq, int n, int K, acts *a)
{
    const int nkb = K / 128;
    const size_t ne = (size_t)n * (size_t)K;
    a->h = malloc(ne * 2 * sizeof(int16_t) + (size_t)n * (size_t)nkb);
    if (!a->h)
        return -1;
    a->l = a->h + ne;
    a->has_l = (uint8_t *)(a->l + ne);
    const __m512 s512 = _mm512_set1_ps(512.0f);
    const __m512i seven = _mm512_set1_epi32(7);
    __m512i idx[4];
    arrange_index(idx);
    for (int b = 0; b < n; b++)
        for (int kb = 0; kb < nkb; kb++) {
            const float *q = xq + (size_t)b * K + (size_t)kb * 128;
            int16_t hn[128], ln[128];
            __mmask16 any = 0;
            for (int m = 0; m < 8; m++) {
                /* q * 512 is an integer below 2^18: exact in float, exact conversion */
                __m512i Q = _mm512_cvtps_epi32(_mm512_mul_ps(_mm512_loadu_ps(q + 16 * m), s512));
                __m512i L = _mm512_and_si512(Q, seven);
                any |= _mm512_test_epi32_mask(L, L);
                _mm256_storeu_si256((__m256i *)(hn + 16 * m), _mm512_cvtepi32_epi16(_mm512_srai_epi32(Q, 3)));
                _mm256_storeu_si256((__m256i *)(ln + 16 * m), _mm512_cvtepi32_epi16(L));
            }
            const size_t off = ((size_t)b * nkb + kb) * 128;
            arrange(hn, a->h + off, idx);
            a->has_l[(size_t)b * nkb + kb] = any != 0;
            if (any)
                arrange(ln, a->l + off, idx);
        }
    return 0;
}

/* e2m1 code -> k (the value in units of 1/2): low and high bytes of the int16, as
 * VPSHUFB tables (the same 16 entries in each 128-bit lane) */
V4_INLINE __m512i k_lo_table(void)
{
    return _mm512_broadcast_i32x4(_mm_setr_epi8(0, 1, 2, 3, 4, 6, 8, 12,
                                                0, -1, -2, -3, -4, -6, -8, -12));
}
V4_INLINE __m512i k_hi_table(void)
{
    return _mm512_broadcast_i32x4(_mm_setr_epi8(0, 0, 0, 0, 0, 0, 0, 0, 0, -1, -1, -1, -1, -1, -1, -1));
}

/* One row's 128-column block (64 bytes at p; 128-bit lane g = scale block g) -> 4
 * vectors of 32 int16 k values: even columns of bytes 0-7 / 8-15 of each lane, then
 * odd columns of bytes 0-7 / 8-15 (the order arrange() gives the activations). */
V4_INLINE void decode_block(const uint8_t *p, __m512i tlo, __m512i thi, __m512i *out)
{
    const __m512i m4 = _mm512_set1_epi8(0x0f);
    __m512i z = _mm512_loadu_si512(p);
    __m512i ev = _mm512_and_si512(z, m4);                        /* low nibbles: even columns */
    __m512i od = _mm512_and_si512(_mm512_srli_epi16(z, 4), m4);  /* high nibbles: odd columns */
    __m512i el = _mm512_shuffle_epi8(tlo, ev), eh = _mm512_shuffle_epi8(thi, ev);
    __m512i ol = _mm512_shuffle_epi8(tlo, od), oh = _mm512_shuffle_epi8(thi, od);
    out[0] = _mm512_unpacklo_epi8(el, eh);
    out[1] = _mm512_unpackhi_epi8(el, eh);
    out[2] = _mm512_unpacklo_epi8(ol, oh);
    out[3] = _mm512_unpackhi_epi8(ol, oh);
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

/* Start of block kb in a tile: prefetch the rows 6 blocks ahead (when the weights
 * come from memory), convert the next scale segment when kb starts one (sbuf holds
 * SSEG blocks), and give the block's two scale vectors. */
V4_INLINE void block_begin(const uint8_t *const *wrow, const uint8_t *const *srow, int kb, int nkb, int prefetch,
                           float *sbuf, __m512 *sw0, __m512 *sw1)
{
    if (prefetch)
        for (int i = 0; i < TILE; i++)
            _mm_prefetch((const char *)(wrow[i] + (size_t)(kb + 6) * 64), _MM_HINT_T0);
    if (kb % SSEG == 0)
        scales_seg(srow, kb, imin(SSEG, nkb - kb), sbuf);
    *sw0 = _mm512_loadu_ps(sbuf + (kb % SSEG) * 32);
    *sw1 = _mm512_loadu_ps(sbuf + (kb % SSEG) * 32 + 16);
}

V4_INLINE void bf16_store(float *dst, __m256 acc, int nr)
{
    _mm256_mask_storeu_ps(dst, (__mmask8)((1u << nr) - 1), v4x_bf16_ps(acc));
}

/* One row's block sums for one vector: 4 dot products with H (and, with L, the H sums
 * times 8 plus 4 dot products with L).  Lanes as decode_block's groups. */
V4_INLINE __m512i row_dot(const __m512i *w, const __m512i *H, const __m512i *L, int has_l)
{
    __m512i s = _mm512_dpwssd_epi32(_mm512_setzero_si512(), w[0], H[0]);
    s = _mm512_dpwssd_epi32(s, w[1], H[1]);
    s = _mm512_dpwssd_epi32(s, w[2], H[2]);
    s = _mm512_dpwssd_epi32(s, w[3], H[3]);
    if (has_l) {
        s = _mm512_slli_epi32(s, 3);
        for (int i = 0; i < 4; i++)
            s = _mm512_dpwssd_epi32(s, w[i], L[i]);
    }
    return s;
}

/* The scaled block partials t = f32(partial) * s_act * s_w of 4 rows (r[0..3]) for
 * the 4 scale blocks of one 128-column block: lane 4g+i = scale block g of row i. */
V4_INLINE __m512 half_partials(const __m512i *r, int has_l, float xs, __m512 sw)
{
    /* without the L pass the sums are S / 8: cvt(S / 8) * 2^-7 = cvt(S) * 2^-10 */
    const __m512 post = _mm512_set1_ps(has_l ? 0x1p-10f : 0x1p-7f);
    __m512 P = _mm512_mul_ps(_mm512_cvtepi32_ps(reduce4(r[0], r[1], r[2], r[3])), post);
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
V4_INLINE __m256 epilogue(const __m512i *r, int has_l, float xs, __m512 sw0, __m512 sw1, __m256 acc)
{
    return combine(half_partials(r, has_l, xs, sw0), half_partials(r + 4, has_l, xs, sw1), acc);
}

/* Vector v's H and L for block kb (L only if it has one) */
V4_INLINE int load_acts(const acts *a, int nkb, int v, int kb, __m512i *H, __m512i *L)
{
    const size_t off = ((size_t)v * nkb + kb) * 128;
    const int has_l = a->has_l[(size_t)v * nkb + kb];
    for (int i = 0; i < 4; i++)
        H[i] = _mm512_loadu_si512(a->h + off + 32 * i);
    if (has_l)
        for (int i = 0; i < 4; i++)
            L[i] = _mm512_loadu_si512(a->l + off + 32 * i);
    return has_l;
}

/* One vector: each row's decode goes straight to its dot products and the
 * accumulator stays in a register (measured faster than tile_small with NV = 1). */
static void tile_one(const v4_mat *W, const float *xs, const acts *a, float *y, int rt, int nr, int c0)
{
    const int K = W->cols, nkb = K / 128;
    const __m512i tlo = k_lo_table(), thi = k_hi_table();
    const uint8_t *wrow[TILE], *srow[TILE];
    tile_rows(W, rt, nr, wrow, srow);
    const float *xsv = xs + (size_t)c0 * nkb;
    float sbuf[SSEG * 32];
    __m256 acc = _mm256_setzero_ps();
    for (int kb = 0; kb < nkb; kb++) {
        __m512 sw0, sw1;
        block_begin(wrow, srow, kb, nkb, 1, sbuf, &sw0, &sw1);
        __m512i H[4], L[4], r[TILE];
        const int has_l = load_acts(a, nkb, c0, kb, H, L);
        for (int j = 0; j < TILE; j++) {
            __m512i w[4];
            decode_block(wrow[j] + (size_t)kb * 64, tlo, thi, w);
            r[j] = row_dot(w, H, L, has_l);
        }
        acc = epilogue(r, has_l, xsv[kb], sw0, sw1, acc);
    }
    bf16_store(y + rt, acc, nr);
}

/* Up to SMALLN vectors (NV, a constant after inlining): each row's decode goes
 * straight to the vectors' dot products and everything stays in registers (no L1
 * weight buffer: the general tile below spills at these sizes). */
V4_INLINE void tile_small(const v4_mat *W, const float *xs, const acts *a, float *y, int ldy,
                          int rt, int nr, int c0, const int NV)
{
    const int K = W->cols, nkb = K / 128;
    const __m512i tlo = k_lo_table(), thi = k_hi_table();
    const uint8_t *wrow[TILE], *srow[TILE];
    tile_rows(W, rt, nr, wrow, srow);
    float sbuf[SSEG * 32];
    __m256 acc[SMALLN];
    for (int v = 0; v < NV; v++)
        acc[v] = _mm256_setzero_ps();
    for (int kb = 0; kb < nkb; kb++) {
        __m512 sw0, sw1;
        block_begin(wrow, srow, kb, nkb, 1, sbuf, &sw0, &sw1);
        int has_l[SMALLN];
        __m512i H[SMALLN][4], L[SMALLN][4], r[SMALLN][TILE];
        for (int v = 0; v < NV; v++)
            has_l[v] = load_acts(a, nkb, c0 + v, kb, H[v], L[v]);
        for (int j = 0; j < TILE; j++) {
            __m512i w[4];
            decode_block(wrow[j] + (size_t)kb * 64, tlo, thi, w);
            for (int v = 0; v < NV; v++)
                r[v][j] = row_dot(w, H[v], L[v], has_l[v]);
        }
        for (int v = 0; v < NV; v++)
            acc[v] = epilogue(r[v], has_l[v], xs[(size_t)(c0 + v) * nkb + kb], sw0, sw1, acc[v]);
    }
    for (int v = 0; v < NV; v++)
        bf16_store(y + (size_t)(c0 + v) * ldy + rt, acc[v], nr);
}

static void fp4_tile(const v4_mat *W, int n, const float *xs, const acts *a, float *y, int ldy,
                     int rt, int nr)
{
    const int K = W->cols, nkb = K / 128;
    const __m512i tlo = k_lo_table(), thi = k_hi_table();
    const uint8_t *wrow[TILE], *srow[TILE];
    tile_rows(W, rt, nr, wrow, srow);
    __m512i wd[TILE][4];
    for (int c0 = 0; c0 < n; c0 += VCHUNK) {
        const int nv = imin(VCHUNK, n - c0);
        float sbuf[SSEG * 32];
        __m256 acc[VCHUNK];
        for (int v = 0; v < nv; v++)
            acc[v] = _mm256_setzero_ps();
        for (int kb = 0; kb < nkb; kb++) {
            __m512 sw0, sw1;
            block_begin(wrow, srow, kb, nkb, c0 == 0, sbuf, &sw0, &sw1);
            __m512i H[4], L[4], r[TILE];
            if (nv == 1) {      /* one vector: each row's decode goes straight to its dots */
                const int has_l = load_acts(a, nkb, c0, kb, H, L);
                for (int j = 0; j < TILE; j++) {
                    __m512i w[4];
                    decode_block(wrow[j] + (size_t)kb * 64, tlo, thi, w);
                    r[j] = row_dot(w, H, L, has_l);
                }
                acc[0] = epilogue(r, has_l, xs[(size_t)c0 * nkb + kb], sw0, sw1, acc[0]);
                continue;
            }
            for (int i = 0; i < TILE; i++)
                decode_block(wrow[i] + (size_t)kb * 64, tlo, thi, wd[i]);
            for (int v = 0; v < nv; v++) {
                const int has_l = load_acts(a, nkb, c0 + v, kb, H, L);
                for (int j = 0; j < TILE; j++)
                    r[j] = row_dot(wd[j], H, L, has_l);
                acc[v] = epilogue(r, has_l, xs[(size_t)(c0 + v) * nkb + kb], sw0, sw1, acc[v]);
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
        if (n > 4) {
            fp4_tile(W, n, xs, &a, y, ldy, rt, nr);
            continue;
        }
        /* n <= 4: passes of at most SMALLN vectors (4 = 3 + 1) */
        for (int c0 = 0; c0 < n;) {
            const int nv = imin(n - c0, SMALLN);
            if (nv == 1)
                tile_one(W, xs, &a, y + (size_t)c0 * ldy, rt, nr, c0);
            else if (nv == 2)
                tile_small(W, xs, &a, y, ldy, rt, nr, c0, 2);
            else
                tile_small(W, xs, &a, y, ldy, rt, nr, c0, 3);
            c0 += nv;
        }
    }
    free(a.h);
}

#endif /* V4_CPU_X86 */
