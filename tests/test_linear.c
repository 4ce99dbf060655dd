/* test_linear.c - the CPU linear kernels: scalar known answers, and every SIMD ISA the
 * CPU supports bit-for-bit against the scalar backend.
 *
 * Part 1 checks the reference itself on hand-computed cases (identity-like FP8, FP4
 * sums, a small BF16 EXACT product, act-quant scales and the 1e-4 clamp).
 * Part 2 runs random FP8 / FP4 (QUANT) and BF16 / F32 / FP8 (EXACT) matrices through
 * the scalar backend and through each supported ISA with 1 and 2 threads (plus one
 * oversubscribed run) and compares the outputs bit for bit, including that nothing is
 * written outside y's rows (ldy > rows, sentinel padding).  The data is built to hit
 * the hard cases: e4m3 subnormals, E8M0 scales 2^-69..2^-1 and near 2^0, tiny blocks
 * (amax clamp), exact zeros, rows that are not a multiple of the tiles, columns that
 * are not a multiple of the transpose width, EXACT sums whose double rounding depends
 * on the order (planted exact cancellations of +-2^28/2^40 products), subnormal
 * dequantized FP8 weights, NaN weight codes, NaN/inf activations, and QUANT rows of 32
 * blocks whose float sum over the blocks depends on the block order.  Mutation
 * checks during development (reordered EXACT sums, a wrong FP4 bias, skipped bf16
 * rounding, swapped transpose columns, missing NaN fallbacks, FP8/FP4 QUANT blocks added
 * in reverse order, the VNNI FP4 kernel's L pass skipped) all fail this test.
 * Prints which ISAs were tested and which skipped.
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/backend.h"
#include "kernels/codec.h"
#include "kernels/cpu/cpu_backend.h"
#include "kernels/cpu/cpu_kernels.h"
#include "kernels/v4/weights.h"
#include "testutil.h"

#include "linear_gen.h"

/* ----------------------------------------------------------------- helpers -- */

typedef struct bk {
    const char *isa;
    int threads;
    v4_backend *be;
} bk;

static v4_backend *mk_backend(int threads, const char *isa)
{
    v4_error err;
    v4_err_clear(&err);
    v4_backend *be = v4_cpu_backend_create(threads, isa, &err);
    CHECK(be != NULL, "create(%d, %s): %s", threads, isa, err.msg);
    return be;
}

#define PAD 5
static const float SENTINEL = -12345.5f;

/* y = W x on backend be, output with ldy = rows + PAD prefilled with SENTINEL. */
static float *run_linear(v4_backend *be, const v4_mat *W, v4_lin_mode mode, int n,
                         const float *x, int ldx)
{
    int ldy = W->rows + PAD;
    float *y = malloc(sizeof(float) * (size_t)n * (size_t)ldy);
    for (size_t i = 0; i < (size_t)n * (size_t)ldy; i++)
        y[i] = SENTINEL;
    v4_linear(be, W, mode, n, x, ldx, y, ldy);
    return y;
}

static int mismatches;

/* bitwise compare (and padding intact); returns number of differing floats */
static int compare(const char *what, const v4_mat *W, int n, const float *ref, const float *got)
{
    int ldy = W->rows + PAD, bad = 0;
    for (int b = 0; b < n; b++)
        for (int r = 0; r < ldy; r++) {
            size_t i = (size_t)b * ldy + r;
            if (memcmp(&ref[i], &got[i], 4) != 0) {
                if (bad < 5)
                    fprintf(stderr, "  %s: b=%d r=%d ref=%a (%08x) got=%a (%08x)\n", what, b, r,
                            (double)ref[i], v4_f32_bits(ref[i]), (double)got[i], v4_f32_bits(got[i]));
                bad++;
            }
            if (r >= W->rows)
                CHECK(v4_f32_bits(got[i]) == v4_f32_bits(SENTINEL), "%s wrote padding b=%d r=%d", what, b, r);
        }
    return bad;
}

/* ------------------------------------------------------------ known answers -- */

static void known_answers(v4_backend *sc)
{
    /* act quant: one block with x[0] = 1 -> s = 2^ceil(log2(1/448)) = 2^-8, q = 256 */
    {
        float x[128] = {0}, xq[128], xs[1];
        x[0] = 1.0f;
        x[1] = -0.0f;
        x[2] = 0.5f;
        v4_act_quant(x, 128, xq, xs);
        CHECK(xs[0] == 0x1p-8f, "act scale %a", (double)xs[0]);
        CHECK(xq[0] == 256.0f && xq[2] == 128.0f && xq[3] == 0.0f, "act q %g %g", xq[0], xq[2]);
        CHECK(signbit(xq[1]), "-0 keeps its sign");
        /* tiny block: amax clamps to 1e-4 -> s = 2^ceil(log2(1e-4/448)) = 2^-22;
         * 1e-6 * 2^22 = 4.19 -> e4m3 4.0 */
        for (int j = 0; j < 128; j++)
            x[j] = 1e-6f;
        v4_act_quant(x, 128, xq, xs);
        CHECK(xs[0] == 0x1p-22f, "clamped scale %a", (double)xs[0]);
        CHECK(xq[5] == 4.0f, "tiny q %g", xq[5]);
        /* 448 exactly -> s = 1, q = 448; 465 -> s = 2 (465/448 > 1), q = 232.5 -> 224/240: 232 */
        x[0] = 448.0f;
        for (int j = 1; j < 128; j++)
            x[j] = 0.0f;
        v4_act_quant(x, 128, xq, xs);
        CHECK(xs[0] == 1.0f && xq[0] == 448.0f, "448: s=%g q=%g", xs[0], xq[0]);
    }
    /* FP8 identity: w[i][i] = e4m3(1.0) = 0x38, scale 2^0, and x values that are e4m3
     * numbers with amax 448 (act scale 1): y = x exactly.  A second row block with
     * scale 2^-3 gives y = x/8. */
    {
        enum { N = 256 };
        static uint8_t w[N * N];
        uint8_t scl[2 * 2] = {127, 127, 124, 124};
        memset(w, 0, sizeof w);
        for (int i = 0; i < N; i++)
            w[(size_t)i * N + i] = 0x38;
        float x[N], y[N];
        for (int j = 0; j < N; j++)
            x[j] = v4_e4m3_to_f32((uint8_t)((j * 37) % 0x7f));     /* codes 0..0x7e */
        x[0] = 448.0f;
        x[128] = -448.0f;
        v4_mat W = {V4_W_FP8, N, N, w, scl, V4_LAYOUT_ROWMAJOR};
        v4_linear(sc, &W, V4_LIN_QUANT, 1, x, N, y, N);
        int ok = 1;
        for (int i = 0; i < N; i++)
            if (y[i] != (i < 128 ? x[i] : x[i] / 8))
                ok = 0;
        CHECK(ok, "FP8 identity");
    }
    /* FP4: row r has all weights 1.0 (code 2) with scale 2^-r; x = 1 everywhere:
     * q = 256 (s = 2^-8), block partial 32*256 = 8192, t = 8192 * 2^-8 * 2^-r = 32*2^-r,
     * acc = 4 * 32 * 2^-r = 2^(7-r). */
    {
        enum { R = 4, C = 128 };
        uint8_t w[R * C / 2], scl[R * C / 32];
        memset(w, 0x22, sizeof w);
        for (int r = 0; r < R; r++)
            for (int b = 0; b < C / 32; b++)
                scl[r * (C / 32) + b] = (uint8_t)(127 - r);
        float x[C], y[R];
        for (int j = 0; j < C; j++)
            x[j] = 1.0f;
        v4_mat W = {V4_W_FP4, R, C, w, scl, V4_LAYOUT_ROWMAJOR};
        v4_linear(sc, &W, V4_LIN_QUANT, 1, x, C, y, R);
        for (int r = 0; r < R; r++)
            CHECK(y[r] == ldexpf(1.0f, 7 - r), "FP4 row %d: %g", r, y[r]);
        /* e2m1 code 15 = -6: row 0 all -6 -> -6 * 128 = -768 */
        memset(w, 0xff, C / 2);
        v4_linear(sc, &W, V4_LIN_QUANT, 1, x, C, y, R);
        CHECK(y[0] == -768.0f, "FP4 -6 row: %g", y[0]);
    }
    /* BF16 EXACT: [[1, 2], [0.5, -1]] x [3, 4] = [11, -2.5] */
    {
        uint16_t w[4] = {v4_bf16_bits(1.0f), v4_bf16_bits(2.0f), v4_bf16_bits(0.5f), v4_bf16_bits(-1.0f)};
        float x[2] = {3.0f, 4.0f}, y[2];
        v4_mat W = {V4_W_BF16, 2, 2, w, NULL, V4_LAYOUT_ROWMAJOR};
        v4_linear(sc, &W, V4_LIN_EXACT, 1, x, 2, y, 2);
        CHECK(y[0] == 11.0f && y[1] == -2.5f, "BF16 exact %g %g", y[0], y[1]);
        /* rounding happens once, at the end: 1 + 2^-30 - 1 in double, then f32 */
        float x3[3] = {1.0f, 0x1p-30f, -1.0f}, y1;
        uint16_t w3[3] = {v4_bf16_bits(1.0f), v4_bf16_bits(1.0f), v4_bf16_bits(1.0f)};
        v4_mat W3 = {V4_W_BF16, 1, 3, w3, NULL, V4_LAYOUT_ROWMAJOR};
        v4_linear(sc, &W3, V4_LIN_EXACT, 1, x3, 3, &y1, 1);
        CHECK(y1 == 0x1p-30f, "double accumulation: %a", (double)y1);
    }
}

/* ------------------------------------------------------------- act quant -- */

static void act_quant_equal(rng *r)
{
#if V4_CPU_X86
    enum { C = 128 * 64 };
    float *x = malloc(sizeof(float) * C), q0[C], s0[C / 128], q1[C], s1[C / 128];
    rand_acts(r, x, C, 0);
    /* specials: NaN, inf, huge, subnormal, ties of the e4m3 grid */
    x[3] = NAN; x[130] = -INFINITY; x[300] = 3e38f; x[301] = -3e38f; x[500] = 1e-42f;
    for (int j = 0; j < 128; j++)     /* block 10: every e4m3 tie and neighbour */
        x[1280 + j] = (j == 0) ? 448.0f : ldexpf(1.0f + (float)(j % 16) / 16.0f + 1.0f / 32.0f, (j % 24) - 12);
    x[1280 + 1] = 464.0f;    /* clamps */
    v4_act_quant(x, C, q0, s0);
    const char *names[2] = {"avx2", "avx512"};
    v4_act_quant_fn fns[2] = {v4_act_quant_avx2, v4_act_quant_avx512};
    for (int k = 0; k < 2; k++) {
        if (!v4_cpu_isa_supported(names[k]))
            continue;
        fns[k](x, C, q1, s1);
        CHECK(memcmp(s0, s1, sizeof s0) == 0, "act scales %s", names[k]);
        int bad = 0;
        for (int j = 0; j < C; j++)
            if (v4_f32_bits(q0[j]) != v4_f32_bits(q1[j]) && bad++ < 5)
                fprintf(stderr, "  act %s j=%d x=%a ref=%a got=%a\n", names[k], j, (double)x[j],
                        (double)q0[j], (double)q1[j]);
        CHECK(bad == 0, "act quant %s: %d differ", names[k], bad);
    }
    /* sweep: every float in [2^-12, 448] at a coarse stride plus all of [0, 2^-6],
     * through blocks whose scale is 1 (x[0] = 448) */
    float xb[128], qa[128], sa[1], qb[128], sb[1];
    int bad = 0;
    for (uint32_t u = 0; u <= 0x43e00000u && !bad; u += 127 * 10) {
        xb[0] = 448.0f;
        for (int j = 1; j < 128; j++)
            xb[j] = v4_f32_from_bits(u + (uint32_t)j * 10u) * ((j & 1) ? -1.0f : 1.0f);
        v4_act_quant(xb, 128, qa, sa);
        for (int k = 0; k < 2; k++) {
            if (!v4_cpu_isa_supported(names[k]))
                continue;
            fns[k](xb, 128, qb, sb);
            if (memcmp(qa, qb, sizeof qa) != 0 || sa[0] != sb[0])
                bad++;
        }
    }
    CHECK(bad == 0, "e4m3 rounding sweep");
    free(x);
#else
    (void)r;
#endif
}

/* ------------------------------------------------------------ random cases -- */

typedef struct mat_buf {
    v4_mat W;
    void *w;
    uint8_t *s;
} mat_buf;

/* NaN weight codes; all scales 2^-127..2^-121; NaN/inf activations; FP8 without
 * exponent-0 codes (zeros, subnormals: the R8 kernels' BIAS decode); FP8 scales at the
 * edges of the R8 fast paths (E8M0 0..4, 245..248, 254, 255 = NaN); FLAT (QUANT):
 * every scale 2^0, the middle 128-column block of each row repeats the first, and the
 * activations of the middle block are minus those of the first (2^16..2^19), small
 * (2^-5..2^-1) elsewhere: the two big block partials cancel exactly, the small ones
 * added between them are rounded to the big partial's ulp, those after them are not,
 * so the float sum over the blocks depends on their order */
enum { F_NAN = 1, F_TINY = 2, F_XNAN = 4, F_NOE0 = 8, F_EDGE = 16, F_FLAT = 32 };

static const uint8_t edge_scales[] = {0, 1, 2, 3, 4, 127, 245, 246, 247, 248, 254, 255, 120, 130};   /* 14 */

static mat_buf make_mat(rng *r, v4_wtype t, int rows, int cols, int flags)
{
    mat_buf m = {{t, rows, cols, NULL, NULL, V4_LAYOUT_ROWMAJOR}, NULL, NULL};
    size_t nw = (size_t)rows * cols;
    switch (t) {
    case V4_W_FP8: {
        uint8_t *w = malloc(nw);
        for (size_t i = 0; i < nw; i++) {
            w[i] = rand_e4m3(r);
            while ((flags & F_NOE0) && (w[i] & 0x78) == 0)
                w[i] = rand_e4m3(r);
        }
        if (flags & F_NAN)
            for (int k = 0; k < 3; k++)
                w[rnext(r) % nw] = (k & 1) ? 0xff : 0x7f;
        size_t ns = (size_t)((rows + 127) / 128) * ((cols + 127) / 128);
        m.s = malloc(ns);
        const size_t scols = (size_t)((cols + 127) / 128);
        for (size_t i = 0; i < ns; i++) {
            m.s[i] = (flags & F_TINY) ? (uint8_t)rint_(r, 0, 6) : (flags & F_FLAT) ? 127 : rand_e8m0(r);
            if (flags & F_EDGE) {   /* row block rb: one edge scale (in column block rb % scols), else 2^-7 */
                const size_t rb = i / scols, cb = i % scols;
                m.s[i] = cb == rb % scols ? edge_scales[rb % sizeof edge_scales] : 120;
            }
        }
        m.w = w;
        break;
    }
    case V4_W_FP4: {
        uint8_t *w = malloc(nw / 2);
        for (size_t i = 0; i < nw / 2; i++)
            w[i] = (uint8_t)rnext(r);
        size_t ns = (size_t)rows * (cols / 32);
        m.s = malloc(ns);
        for (size_t i = 0; i < ns; i++)
            m.s[i] = (flags & F_FLAT) ? 127 : rand_e8m0(r);
        m.w = w;
        break;
    }
    case V4_W_BF16:
    case V4_W_F32:
        m.w = rand_dense_weights(r, t, nw);
        break;
    }
    if ((flags & F_FLAT) && cols >= 256) {
        const size_t rb = t == V4_W_FP4 ? (size_t)cols / 2 : (size_t)cols, bb = t == V4_W_FP4 ? 64 : 128;   /* cols % 256 == 0 */
        for (int i = 0; i < rows; i++)
            memcpy((uint8_t *)m.w + i * rb + rb / 2, (uint8_t *)m.w + i * rb, bb);
    }
    /* EXACT types: column K-2 repeats column 1, so with x[1] = -x[K-2] = 2^28 the two
     * big products cancel exactly and everything summed between them is rounded to
     * the big partial sum's ulp: the result depends on the summation order. */
    if (t != V4_W_FP4 && cols >= 4)
        for (int i = 0; i < rows; i++) {
            size_t a = (size_t)i * cols + 1, b = (size_t)i * cols + cols - 2;
            if (t == V4_W_FP8)
                ((uint8_t *)m.w)[b] = ((uint8_t *)m.w)[a];
            else if (t == V4_W_BF16)
                ((uint16_t *)m.w)[b] = ((uint16_t *)m.w)[a];
            else
                ((float *)m.w)[b] = ((float *)m.w)[a];
        }
    m.W.w = m.w;
    m.W.scale = m.s;
    return m;
}

static void free_mat(mat_buf *m)
{
    free(m->w);
    free(m->s);
}

static const char *tname(v4_wtype t)
{
    return t == V4_W_FP8 ? "fp8" : t == V4_W_FP4 ? "fp4" : t == V4_W_BF16 ? "bf16" : "f32";
}

/* R8 copy of a row-major EXACT-type matrix, written from the layout's definition in
 * backend.h (element (r, j) at ((r/8)*cols + j)*8 + r%8), with garbage (NaN/inf bit
 * patterns included) in the padding rows: the kernels must not let it leak into real
 * rows.  Also checks that the library's packer gives the same elements and zero
 * padding.  The copy shares m's scales (its s is NULL). */
static mat_buf to_r8(rng *r, const mat_buf *m)
{
    const v4_mat *W = &m->W;
    const size_t es = W->type == V4_W_F32 ? 4 : W->type == V4_W_BF16 ? 2 : 1;
    const int rows = W->rows, cols = W->cols, ng = (rows + 7) / 8;
    const size_t bytes = (size_t)ng * 8 * cols * es;
    CHECK(v4_mat_r8_bytes(W) == bytes, "v4_mat_r8_bytes");
    uint8_t *d = malloc(bytes), *lib = malloc(bytes);
    for (size_t i = 0; i < bytes; i++)
        d[i] = (i / es) % 3 ? (uint8_t)rnext(r) : 0xff;
    for (int i = 0; i < rows; i++)
        for (int j = 0; j < cols; j++)
            memcpy(d + (((size_t)(i / 8) * cols + j) * 8 + i % 8) * es,
                   (const uint8_t *)W->w + ((size_t)i * cols + j) * es, es);
    memset(lib, 0xa5, bytes);
    v4_mat_pack_r8(W, lib, 0, ng / 2);          /* in two ranges, as the pool would */
    v4_mat_pack_r8(W, lib, ng / 2, ng);
    int bad = 0;
    for (int g = 0; g < ng; g++)
        for (int j = 0; j < cols; j++)
            for (int i = 0; i < 8; i++) {
                size_t o = (((size_t)g * cols + j) * 8 + i) * es;
                int pad = g * 8 + i >= rows;
                for (size_t b = 0; b < es; b++)
                    bad += lib[o + b] != (pad ? 0 : d[o + b]);
            }
    CHECK(bad == 0, "v4_mat_pack_r8 %dx%d: %d bytes differ", rows, cols, bad);
    free(lib);
    mat_buf o = {*W, d, NULL};
    o.W.w = d;
    o.W.layout = V4_LAYOUT_R8;
    return o;
}

/* y = W x for the rows of a view (v4_mat_rows) against rows [r0, r0+nr) of ref. */
static int compare_rows(const char *what, const float *ref, int ldr, const float *got, int ldg,
                        int n, int r0, int nr)
{
    int bad = 0;
    for (int b = 0; b < n; b++)
        for (int i = 0; i < nr; i++)
            if (memcmp(&ref[(size_t)b * ldr + r0 + i], &got[(size_t)b * ldg + i], 4) != 0) {
                if (bad++ < 5)
                    fprintf(stderr, "  %s: b=%d r=%d ref=%a got=%a\n", what, b, r0 + i,
                            (double)ref[(size_t)b * ldr + r0 + i], (double)got[(size_t)b * ldg + i]);
            }
    return bad;
}

/* The R8 layout through every backend (scalar included) against the row-major scalar
 * reference ref; a row view; and the SIMD kernels called directly on a row range that
 * does not start or end at a group boundary. */
static void run_r8(rng *r, const mat_buf *m, v4_backend *sc, bk *be, int nbe, int n, const float *x, int ldx,
                   const float *ref, int flags)
{
    mat_buf m8 = to_r8(r, m);
    const int rows = m->W.rows, cols = m->W.cols;
    char what[160];
    for (int k = -1; k < nbe; k++) {
        v4_backend *b = k < 0 ? sc : be[k].be;
        float *got = run_linear(b, &m8.W, V4_LIN_EXACT, n, x, ldx);
        snprintf(what, sizeof what, "exact-r8 %s %s %dx%d n=%d %s/%dt", tname(m->W.type),
                 flags & F_NAN ? "nan-codes" : flags & F_TINY ? "tiny-scales" : flags & F_XNAN ? "nan/inf-x"
                 : flags & F_EDGE ? "edge-scales" : flags & F_NOE0 ? "no-e0" : "",
                 rows, cols, n, k < 0 ? "scalar" : be[k].isa, k < 0 ? 1 : be[k].threads);
        int bad = compare(what, &m8.W, n, ref, got);
        CHECK(bad == 0, "%s: %d outputs differ", what, bad);
        mismatches += bad;
        free(got);
    }
    /* a row view, as attention takes of wo_a (FP8: at a 128-row block) */
    const int r0v = m->W.type == V4_W_FP8 ? (rows >= 256 ? 128 : 0) : (rows >= 16 ? 8 : 0);
    const int nrv = rows - r0v > 12 ? rows - r0v - 3 : rows - r0v;
    v4_mat view = v4_mat_rows(&m8.W, r0v, nrv);
    for (int k = 0; k < nbe; k++) {
        float *got = run_linear(be[k].be, &view, V4_LIN_EXACT, n, x, ldx);
        snprintf(what, sizeof what, "exact-r8 view %s rows %d+%d n=%d %s/%dt", tname(m->W.type), r0v, nrv, n,
                 be[k].isa, be[k].threads);
        int bad = compare_rows(what, ref, rows + PAD, got, nrv + PAD, n, r0v, nrv);
        CHECK(bad == 0, "%s: %d outputs differ", what, bad);
        mismatches += bad;
        free(got);
    }
#if V4_CPU_X86
    /* kernels on [3, rows-2): partial first and last groups, nothing written outside */
    if (rows >= 8) {
        const char *names[3] = {"scalar", "avx2", "avx512"};
        v4_rows_fn fns[3] = {v4_rows_exact_scalar, v4_rows_exact_avx2, v4_rows_exact_avx512};
        const int ldy = rows + PAD, a = 3, e = rows - 2;
        float *y = malloc(sizeof(float) * (size_t)n * ldy);
        for (int k = 0; k < 3; k++) {
            if (!v4_cpu_isa_supported(names[k]))
                continue;
            for (size_t i = 0; i < (size_t)n * ldy; i++)
                y[i] = SENTINEL;
            fns[k](&m8.W, n, NULL, NULL, x, ldx, y, ldy, a, e);
            int bad = 0, outside = 0;
            for (int b = 0; b < n; b++)
                for (int i = 0; i < ldy; i++) {
                    uint32_t g = v4_f32_bits(y[(size_t)b * ldy + i]);
                    if (i >= a && i < e)
                        bad += g != v4_f32_bits(ref[(size_t)b * ldy + i]);
                    else
                        outside += g != v4_f32_bits(SENTINEL);
                }
            CHECK(bad == 0 && outside == 0, "exact-r8 %s kernel rows [%d, %d) of %dx%d n=%d: %d differ, %d written outside",
                  names[k], a, e, rows, cols, n, bad, outside);
            mismatches += bad;
        }
        free(y);
    }
#endif
    free_mat(&m8);
}

static void run_case(rng *r, v4_backend *sc, bk *be, int nbe, v4_wtype t, v4_lin_mode mode,
                     int rows, int cols, int n, int flags)
{
    mat_buf m = make_mat(r, t, rows, cols, flags);
    int ldx = cols + 3;
    float *x = malloc(sizeof(float) * (size_t)n * ldx);
    for (int b = 0; b < n; b++) {
        float *xb = x + (size_t)b * ldx;
        rand_acts(r, xb, cols, t != V4_W_F32 || mode == V4_LIN_QUANT);
        if (flags & F_FLAT)
            for (int j = 0; j < cols; j++)
                xb[j] = j < 128 ? v4_bf16(rval(r, 19 - rint_(r, 0, 3)))
                        : j >= cols / 2 && j < cols / 2 + 128 ? -xb[j - cols / 2] : v4_bf16(rval(r, -rint_(r, 2, 5)));
        if (mode == V4_LIN_EXACT && cols >= 4 && b % 2 == 0) {
            xb[1] = b % 4 ? 0x1p28f : 0x1p40f;
            xb[cols - 2] = -xb[1];
        }
        if (flags & F_XNAN) {       /* vector 0: two NaN payloads; 1: +inf; 2: -inf */
            if (b == 0) {
                xb[5] = v4_f32_from_bits(0x7fc01234u);
                xb[cols - 1] = v4_f32_from_bits(0xffc00077u);
            } else if (b <= 2) {
                xb[cols / 2] = b == 1 ? INFINITY : -INFINITY;
            }
        }
    }
    float *ref = run_linear(sc, &m.W, mode, n, x, ldx);
    for (int k = 0; k < nbe; k++) {
        float *got = run_linear(be[k].be, &m.W, mode, n, x, ldx);
        char what[128];
        snprintf(what, sizeof what, "%s %s %s %dx%d n=%d %s/%dt", mode == V4_LIN_QUANT ? "quant" : "exact",
                 tname(t), flags & F_NAN ? "nan-codes" : flags & F_TINY ? "tiny-scales" : flags & F_XNAN ? "nan/inf-x" : flags & F_FLAT ? "flat" : "", rows, cols, n, be[k].isa, be[k].threads);
        int bad = compare(what, &m.W, n, ref, got);
        CHECK(bad == 0, "%s: %d outputs differ", what, bad);
        mismatches += bad;
        free(got);
    }
    if (mode == V4_LIN_EXACT)
        run_r8(r, &m, sc, be, nbe, n, x, ldx, ref, flags);
    if ((flags & F_NAN) && t == V4_W_FP8 && mode == V4_LIN_QUANT) {
        int nans = 0;
        for (int b = 0; b < n; b++)
            for (int i = 0; i < rows; i++)
                nans += isnan(ref[(size_t)b * (rows + PAD) + i]) != 0;
        CHECK(nans > 0, "NaN weight codes give NaN outputs");
    }
    free(ref);
    free(x);
    free_mat(&m);
}

/* How often does the EXACT data make the summation order matter after the final
 * rounding to float?  (Shows that the bit-exact comparison of EXACT mode has teeth: a
 * kernel that reordered the double sum would fail.) */
static int order_sensitive_outputs(rng *r)
{
    mat_buf m = make_mat(r, V4_W_BF16, 512, 1000, 0);
    float x[1000];
    rand_acts(r, x, 1000, 1);
    x[1] = 0x1p40f;
    x[998] = -0x1p40f;
    int diff = 0;
    for (int i = 0; i < 512; i++) {
        const uint16_t *w = (const uint16_t *)m.w + (size_t)i * 1000;
        double seq = 0.0, l[8] = {0};
        for (int j = 0; j < 1000; j++) {
            double p = (double)x[j] * (double)v4_bf16_from_bits(w[j]);
            seq += p;
            l[j % 8] += p;
        }
        double lanes = ((l[0] + l[1]) + (l[2] + l[3])) + ((l[4] + l[5]) + (l[6] + l[7]));
        diff += (float)seq != (float)lanes;
    }
    free_mat(&m);
    return diff;
}

int main(void)
{
    v4_backend *sc = mk_backend(1, "scalar");
    if (!sc)
        TEST_DONE();
    CHECK(strcmp(v4_cpu_backend_isa(sc), "scalar") == 0, "scalar isa name");

    /* creation errors and auto */
    {
        v4_error err;
        v4_err_clear(&err);
        CHECK(v4_cpu_backend_create(1, "sse9", &err) == NULL && err.code == V4_ERR_INVALID, "unknown isa");
        v4_backend *a = v4_cpu_backend_create(0, "auto", &err);
        CHECK(a != NULL, "auto backend: %s", err.msg);
        if (a) {
            printf("auto backend: isa %s, %d threads\n", v4_cpu_backend_isa(a), v4_cpu_backend_threads(a));
            CHECK(v4_cpu_backend_threads(a) >= 1, "threads");
            a->ops->destroy(a);
        }
        for (int k = 0; k < 3; k++) {
            const char *isa = k == 2 ? "avx512vnni" : k ? "avx512" : "avx2";
            if (!v4_cpu_isa_supported(isa)) {
                v4_err_clear(&err);
                CHECK(v4_cpu_backend_create(1, isa, &err) == NULL, "unsupported %s must fail", isa);
            }
        }
    }

    known_answers(sc);
    rng r = {0x5eed1234abcdull};
    act_quant_equal(&r);

    /* the backends under test: every supported ISA (scalar too, multi-threaded) */
    const char *isas[4] = {"scalar", "avx2", "avx512", "avx512vnni"};
    bk be[16];
    int nbe = 0;
    char tested[64] = "", skipped[64] = "";
    for (int k = 0; k < 4; k++) {
        if (!v4_cpu_isa_supported(isas[k])) {
            strcat(skipped, " ");
            strcat(skipped, isas[k]);
            continue;
        }
        strcat(tested, " ");
        strcat(tested, isas[k]);
        for (int t = 1; t <= 2; t++) {
            v4_backend *b = mk_backend(t, isas[k]);
            if (b) {
                CHECK(strcmp(v4_cpu_backend_isa(b), isas[k]) == 0, "isa name");
                be[nbe++] = (bk){isas[k], t, b};
            }
        }
    }
    /* one oversubscribed instance with the best ISA: uneven chunks, more threads than cores */
    {
        v4_backend *b = mk_backend(5, "auto");
        if (b)
            be[nbe++] = (bk){v4_cpu_backend_isa(b), 5, b};
    }
    printf("ISAs tested:%s; skipped (CPU lacks them):%s\n", tested, *skipped ? skipped : " none");

    static const int shapes[][2] = {{256, 256}, {384, 640}, {129, 128}, {4096, 256}, {8, 128}, {200, 384}};
    static const int batches[] = {1, 3, 8};
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++)
        for (size_t b = 0; b < sizeof batches / sizeof batches[0]; b++) {
            run_case(&r, sc, be, nbe, V4_W_FP8, V4_LIN_QUANT, shapes[s][0], shapes[s][1], batches[b], 0);
            run_case(&r, sc, be, nbe, V4_W_FP4, V4_LIN_QUANT, shapes[s][0], shapes[s][1], batches[b], 0);
        }
    /* more vectors than one pass handles (VGROUP 16), odd counts */
    run_case(&r, sc, be, nbe, V4_W_FP8, V4_LIN_QUANT, 136, 256, 17, 0);
    run_case(&r, sc, be, nbe, V4_W_FP4, V4_LIN_QUANT, 136, 256, 17, 0);
    run_case(&r, sc, be, nbe, V4_W_FP8, V4_LIN_QUANT, 256, 512, 5, 0);
    run_case(&r, sc, be, nbe, V4_W_FP4, V4_LIN_QUANT, 256, 512, 6, 0);
    /* the FP4 VNNI kernel's register paths: 2 and 3 vectors per pass, 4 = 3 + 1 */
    run_case(&r, sc, be, nbe, V4_W_FP4, V4_LIN_QUANT, 200, 384, 2, 0);
    run_case(&r, sc, be, nbe, V4_W_FP4, V4_LIN_QUANT, 136, 512, 4, 0);
    /* more 128-column blocks than one converted scale segment (32), not a multiple of 4 */
    run_case(&r, sc, be, nbe, V4_W_FP4, V4_LIN_QUANT, 40, 4608 + 128, 1, 0);
    run_case(&r, sc, be, nbe, V4_W_FP4, V4_LIN_QUANT, 40, 4608 + 128, 3, 0);
    run_case(&r, sc, be, nbe, V4_W_FP4, V4_LIN_QUANT, 24, 4608 + 128, 6, 0);
    /* many 128-column blocks (a model row): the epilogue's float sum over blocks is
     * order-sensitive here, so a kernel that adds the blocks in another order fails */
    run_case(&r, sc, be, nbe, V4_W_FP8, V4_LIN_QUANT, 72, 4096, 3, F_FLAT);
    run_case(&r, sc, be, nbe, V4_W_FP4, V4_LIN_QUANT, 72, 4096, 2, F_FLAT);
    /* NaN weight codes (scalar fallback per tile) */
    run_case(&r, sc, be, nbe, V4_W_FP8, V4_LIN_QUANT, 256, 384, 2, 1);
    /* FP8 batches of several passes (the AVX-512 kernel: 7 = 4 + 3, 12 = 4 + 4 + 4,
     * 13 = 4 + 4 + 3 + 2, 16 = 4 x 4): partial tiles (130 rows), tiles straddling
     * 128-row scale blocks (2+ threads), NaN codes at n = 8, and the order-sensitive
     * flat data over a model row at n = 8 and 16 */
    run_case(&r, sc, be, nbe, V4_W_FP8, V4_LIN_QUANT, 130, 384, 7, 0);
    run_case(&r, sc, be, nbe, V4_W_FP8, V4_LIN_QUANT, 136, 512, 12, 0);
    run_case(&r, sc, be, nbe, V4_W_FP8, V4_LIN_QUANT, 200, 256, 13, 0);
    run_case(&r, sc, be, nbe, V4_W_FP8, V4_LIN_QUANT, 256, 384, 8, 1);
    run_case(&r, sc, be, nbe, V4_W_FP8, V4_LIN_QUANT, 72, 4096, 8, F_FLAT);
    run_case(&r, sc, be, nbe, V4_W_FP8, V4_LIN_QUANT, 72, 4096, 16, F_FLAT);

    /* EXACT: BF16, F32 (mHC-like 24 x 4*dim), FP8 dequantized; odd row/column counts */
    static const int xshapes[][2] = {{256, 256}, {129, 128}, {24, 1024}, {200, 300}, {64, 1000}, {5, 7}, {384, 640}};
    for (size_t s = 0; s < sizeof xshapes / sizeof xshapes[0]; s++)
        for (size_t b = 0; b < sizeof batches / sizeof batches[0]; b++) {
            run_case(&r, sc, be, nbe, V4_W_BF16, V4_LIN_EXACT, xshapes[s][0], xshapes[s][1], batches[b], 0);
            run_case(&r, sc, be, nbe, V4_W_F32, V4_LIN_EXACT, xshapes[s][0], xshapes[s][1], batches[b], 0);
            run_case(&r, sc, be, nbe, V4_W_FP8, V4_LIN_EXACT, xshapes[s][0], xshapes[s][1], batches[b], 0);
        }
    run_case(&r, sc, be, nbe, V4_W_BF16, V4_LIN_EXACT, 1100, 256, 1, 0);
    run_case(&r, sc, be, nbe, V4_W_BF16, V4_LIN_EXACT, 100, 200, 17, 0);
    run_case(&r, sc, be, nbe, V4_W_F32, V4_LIN_EXACT, 24, 4096, 1, 0);
    /* FP8 dequant with subnormal e4m3*scale products: the bf16 rounding matters */
    run_case(&r, sc, be, nbe, V4_W_FP8, V4_LIN_EXACT, 130, 300, 2, F_TINY);
    run_case(&r, sc, be, nbe, V4_W_FP8, V4_LIN_QUANT, 130, 384, 2, F_TINY);
    run_case(&r, sc, be, nbe, V4_W_FP8, V4_LIN_EXACT, 130, 300, 2, F_NAN);
    /* FP8 dequantized in the R8 kernels' decodes: BIAS (no exponent-0 codes, one
     * scale per tile), MUL (exponent-0 codes, or tiles straddling 128-row blocks with
     * 2+ threads), exact dequantization (NaN codes, scales outside [3, 246]) */
    static const int fshapes[][2] = {{256, 256}, {384, 640}, {136, 300}, {8, 128}};
    for (size_t s = 0; s < sizeof fshapes / sizeof fshapes[0]; s++)
        for (size_t b = 0; b < sizeof batches / sizeof batches[0]; b++)
            run_case(&r, sc, be, nbe, V4_W_FP8, V4_LIN_EXACT, fshapes[s][0], fshapes[s][1], batches[b], F_NOE0);
    run_case(&r, sc, be, nbe, V4_W_FP8, V4_LIN_EXACT, 128 * 14, 384, 1, F_EDGE);
    run_case(&r, sc, be, nbe, V4_W_FP8, V4_LIN_EXACT, 128 * 14, 384, 3, F_EDGE | F_NOE0);
    run_case(&r, sc, be, nbe, V4_W_FP8, V4_LIN_EXACT, 130, 300, 2, F_TINY | F_NOE0);
    run_case(&r, sc, be, nbe, V4_W_FP8, V4_LIN_EXACT, 256, 384, 5, F_NAN | F_NOE0);
    /* batches beyond one pass (4) and one vector group (16) over R8 tiles */
    run_case(&r, sc, be, nbe, V4_W_FP8, V4_LIN_EXACT, 136, 256, 17, F_NOE0);
    run_case(&r, sc, be, nbe, V4_W_F32, V4_LIN_EXACT, 72, 520, 6, 0);
    /* an R8 matrix in QUANT mode (or FP4) is a caller bug: NaN outputs, not garbage */
    {
        mat_buf m = make_mat(&r, V4_W_FP8, 128, 128, 0);
        mat_buf m8 = to_r8(&r, &m);
        float x[128], y[128];
        rand_acts(&r, x, 128, 1);
        for (int k = 0; k < nbe; k++) {
            v4_linear(be[k].be, &m8.W, V4_LIN_QUANT, 1, x, 128, y, 128);
            int nans = 0;
            for (int i = 0; i < 128; i++)
                nans += isnan(y[i]) != 0;
            CHECK(nans == 128, "R8 in QUANT mode (%s/%dt): %d NaN outputs of 128", be[k].isa, be[k].threads, nans);
        }
        free_mat(&m8);
        free_mat(&m);
    }
    /* v4_linear_many: a MoE-like list (two FP4 products sharing an input, FP8 QUANT on
     * another input, R8 BF16 EXACT, a tiny product below the parallel threshold, a
     * job with n = 0 and an invalid R8-in-QUANT job) gives exactly what one
     * v4_linear per job gives, and the invalid job NaN outputs */
    {
        mat_buf f1 = make_mat(&r, V4_W_FP4, 256, 512, 0), f3 = make_mat(&r, V4_W_FP4, 200, 512, 0);
        mat_buf f8 = make_mat(&r, V4_W_FP8, 384, 512, 0), bd = make_mat(&r, V4_W_BF16, 24, 512, 0);
        mat_buf b8 = to_r8(&r, &bd), tiny = make_mat(&r, V4_W_FP4, 32, 128, 0);
        mat_buf q0 = make_mat(&r, V4_W_FP8, 128, 128, 0), q8 = to_r8(&r, &q0);
        float xa[3 * 512], xb[3 * 512], xt[128];
        for (int b = 0; b < 3; b++) {
            rand_acts(&r, xa + b * 512, 512, 1);
            rand_acts(&r, xb + b * 512, 512, 1);
        }
        rand_acts(&r, xt, 128, 1);
        /* job 2 has the shape of jobs 0-1 but its own input: it must not share theirs */
        const v4_lin_job proto[] = {
            {&f1.W, V4_LIN_QUANT, 3, xa, 512, NULL, 256 + PAD}, {&f3.W, V4_LIN_QUANT, 3, xa, 512, NULL, 200 + PAD},
            {&f8.W, V4_LIN_QUANT, 3, xb, 512, NULL, 384 + PAD}, {&b8.W, V4_LIN_EXACT, 3, xa, 512, NULL, 24 + PAD},
            {&tiny.W, V4_LIN_QUANT, 1, xt, 128, NULL, 32 + PAD}, {&f1.W, V4_LIN_QUANT, 0, xa, 512, NULL, 256 + PAD},
            {&q8.W, V4_LIN_QUANT, 1, xt, 128, NULL, 128 + PAD},
        };
        enum { NJ = sizeof proto / sizeof proto[0] };
        for (int k = 0; k < nbe; k++) {
            v4_lin_job jobs[NJ];
            float *want[NJ];
            for (int i = 0; i < NJ; i++) {
                jobs[i] = proto[i];
                const size_t ny = (size_t)(jobs[i].n > 0 ? jobs[i].n : 1) * (size_t)jobs[i].ldy;
                jobs[i].y = malloc(sizeof(float) * ny);
                want[i] = malloc(sizeof(float) * ny);
                for (size_t e = 0; e < ny; e++)
                    jobs[i].y[e] = want[i][e] = SENTINEL;
                v4_linear(be[k].be, jobs[i].W, jobs[i].mode, jobs[i].n, jobs[i].x, jobs[i].ldx, want[i], jobs[i].ldy);
            }
            v4_linear_many(be[k].be, jobs, NJ);
            int bad = 0, nans = 0;
            for (int i = 0; i < NJ; i++) {
                const size_t ny = (size_t)(jobs[i].n > 0 ? jobs[i].n : 1) * (size_t)jobs[i].ldy;
                bad += memcmp(jobs[i].y, want[i], sizeof(float) * ny) != 0;
                free(want[i]);
            }
            for (int i = 0; i < 128; i++)
                nans += isnan(jobs[NJ - 1].y[i]) != 0;
            CHECK(bad == 0, "linear_many (%s/%dt): %d of %d jobs differ from one v4_linear each", be[k].isa,
                  be[k].threads, bad, NJ);
            CHECK(nans == 128 && jobs[NJ - 1].y[128] == SENTINEL && jobs[5].y[0] == SENTINEL,
                  "linear_many (%s/%dt): invalid job: %d NaNs of 128, or padding / the n = 0 job written", be[k].isa,
                  be[k].threads, nans);
            /* and against the scalar reference */
            float *ref = run_linear(sc, &f8.W, V4_LIN_QUANT, 3, xb, 512);
            CHECK(memcmp(ref, jobs[2].y, sizeof(float) * 3 * (384 + PAD)) == 0, "linear_many (%s/%dt): FP8 vs scalar",
                  be[k].isa, be[k].threads);
            free(ref);
            for (int i = 0; i < NJ; i++)
                free(jobs[i].y);
        }
        mat_buf *all[] = {&f1, &f3, &f8, &bd, &b8, &tiny, &q0, &q8};
        for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
            free_mat(all[i]);
    }
    /* NaN / inf activations: the SIMD kernels defer to the scalar ones */
    run_case(&r, sc, be, nbe, V4_W_FP8, V4_LIN_QUANT, 256, 384, 3, F_XNAN);
    run_case(&r, sc, be, nbe, V4_W_FP4, V4_LIN_QUANT, 256, 384, 3, F_XNAN);
    run_case(&r, sc, be, nbe, V4_W_BF16, V4_LIN_EXACT, 130, 300, 3, F_XNAN);
    run_case(&r, sc, be, nbe, V4_W_F32, V4_LIN_EXACT, 24, 1000, 3, F_XNAN);
    run_case(&r, sc, be, nbe, V4_W_FP8, V4_LIN_EXACT, 130, 300, 3, F_XNAN | F_NOE0);

    int sens = order_sensitive_outputs(&r);
    printf("EXACT data: %d of 512 BF16 dot products round to a different float with an 8-lane summation order\n", sens);
    CHECK(sens > 0, "EXACT test data should be order-sensitive");

    printf("%d backends compared against scalar, %d mismatching outputs\n", nbe, mismatches);
    for (int k = 0; k < nbe; k++)
        be[k].be->ops->destroy(be[k].be);
    sc->ops->destroy(sc);
    TEST_DONE();
}
