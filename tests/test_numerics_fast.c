/* test_numerics_fast.c - the CPU backend's `fast` numerics mode (kernels/cpu/
 * linear_fast*.c) on the weight products it changes (FP8 QUANT; V4_LIN_BF16, the head
 * and wo_a's mode, with BF16 / F32 / FP8-dequantized weights, row-major and R8), and
 * V4_LIN_EXACT left exact (the same bytes as the exact backend):
 *   - the same bits on every ISA (the SIMD kernels against the fast reference), with 1
 *     and 2 threads;
 *   - batch-invariant: each vector's outputs at n = 1 equal its outputs inside batches
 *     of 2, 3, 5 and 8 (and 17: several passes of the SIMD tiles), byte for byte;
 *   - the measured contract against the exact mode on identical inputs: DeepGEMM's
 *     calc_diff = 1 - 2<x,y> / (|x|^2 + |y|^2) (in double) <= 1e-6 per product, and the
 *     same NaN/Inf pattern (NaN activations, a NaN weight code, a NaN scale);
 *   - the FP8 row kernels called directly (reference, AVX-512F emulation of the dot
 *     instruction, AVX512-BF16) give the same bytes, also where products flush to zero;
 *   - FP4 products are unchanged (fast mode keeps the exact integer kernels);
 *   - V4_NUMERICS picks the mode, an unknown mode is an error naming it.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/calc_diff.h"
#include "kernels/cpu/cpu_backend.h"
#include "kernels/cpu/cpu_kernels.h"
#include "kernels/v4/weights.h"
#include "linear_gen.h"
#include "testutil.h"

#define MAXN 17

/* every value is finite here: a NaN/Inf would show as a calc_diff of NaN */
static double calc_diff(const float *a, const float *b, size_t n)
{
    long bad = 0;
    const double d = v4_calc_diff(a, b, n, &bad);
    return bad ? NAN : d;
}

typedef struct bk {
    v4_backend *be;
    const char *name;
} bk;

static int open_backends(bk *out, int max)
{
    static const char *isas[] = {"scalar", "avx2", "avx512", "avx512vnni"};
    int k = 0;
    for (size_t i = 0; i < sizeof isas / sizeof isas[0]; i++) {
        if (!v4_cpu_isa_supported(isas[i]))
            continue;
        for (int t = 1; t <= 2 && k < max; t++) {
            v4_error err = {0};
            out[k].be = v4_cpu_backend_create_ex(t, isas[i], "fast", &err);
            CHECK(out[k].be != NULL, "fast backend %s/%dt: %s", isas[i], t, err.msg);
            if (!out[k].be)
                continue;
            CHECK(v4_cpu_backend_numerics(out[k].be) == V4_NUM_FAST, "%s: numerics not fast", isas[i]);
            out[k].name = isas[i];
            k++;
        }
    }
    return k;
}

/* Realistic activations: per 128-block magnitudes 2^-6..2^4, a few zeros. */
static void acts(rng *r, float *x, int cols)
{
    for (int b = 0; b < cols / 128; b++) {
        int e = rint_(r, -6, 4);
        for (int j = 0; j < 128; j++)
            x[b * 128 + j] = rint_(r, 0, 30) == 0 ? 0.0f : v4_bf16(rval(r, e - rint_(r, 0, 6)));
    }
}

/* One product: y_ref = exact scalar, y[k] = each fast backend; checks bits across the
 * fast backends and batch sizes, and calc_diff against exact (when `contract`). */
static void check_product(const char *what, const v4_mat *W, v4_lin_mode mode, const float *x, int n, bk *fb,
                          int nfb, v4_backend *exact, int contract)
{
    const int R = W->rows, K = W->cols;
    float *ye = malloc(sizeof(float) * (size_t)n * R), *y0 = malloc(sizeof(float) * (size_t)n * R);
    float *y = malloc(sizeof(float) * (size_t)n * R), *y1 = malloc(sizeof(float) * (size_t)R);
    v4_linear(exact, W, mode, n, x, K, ye, R);
    for (int k = 0; k < nfb; k++) {
        float *dst = k == 0 ? y0 : y;
        for (size_t i = 0; i < (size_t)n * R; i++)
            dst[i] = -12345.0f;
        v4_linear(fb[k].be, W, mode, n, x, K, dst, R);
        if (k > 0)
            CHECK(memcmp(y, y0, sizeof(float) * (size_t)n * R) == 0, "%s n=%d: %s/%dt differs from %s/1t", what, n,
                  fb[k].name, v4_cpu_backend_threads(fb[k].be), fb[0].name);
        /* batch invariance: every vector alone gives the bytes it gave in the batch */
        for (int b = 0; b < n; b++) {
            v4_linear(fb[k].be, W, mode, 1, x + (size_t)b * K, K, y1, R);
            CHECK(memcmp(y1, dst + (size_t)b * R, sizeof(float) * R) == 0, "%s n=%d: vector %d alone differs (%s/%dt)",
                  what, n, b, fb[k].name, v4_cpu_backend_threads(fb[k].be));
        }
    }
    int nan_e = 0, nan_f = 0, pat = 1;
    for (size_t i = 0; i < (size_t)n * R; i++) {
        int a = isnan(ye[i]), b = isnan(y0[i]);
        nan_e += a;
        nan_f += b;
        pat &= a == b && (isinf(ye[i]) == isinf(y0[i]));
    }
    CHECK(pat, "%s n=%d: NaN/Inf pattern differs (exact %d NaN, fast %d NaN)", what, n, nan_e, nan_f);
    if (contract) {
        double d = calc_diff(ye, y0, (size_t)n * R);
        CHECK(d <= 1e-6, "%s n=%d: calc_diff %.3g > 1e-6", what, n, d);
        if (n == 8)
            printf("  %-34s calc_diff vs exact %.3g\n", what, d);
    }
    free(ye);
    free(y0);
    free(y);
    free(y1);
}

static void fp8_case(rng *r, int R, int K, int stress, bk *fb, int nfb, v4_backend *exact)
{
    uint8_t *w = malloc((size_t)R * K), *s = malloc((size_t)((R + 127) / 128) * ((K + 127) / 128));
    for (size_t i = 0; i < (size_t)R * K; i++)
        w[i] = rand_e4m3(r);
    for (int i = 0; i < ((R + 127) / 128) * ((K + 127) / 128); i++)
        s[i] = stress ? rand_e8m0(r) : (uint8_t)rint_(r, 127 - 12, 127 - 4);
    v4_mat W = {V4_W_FP8, R, K, w, s, V4_LAYOUT_ROWMAJOR};
    float *x = malloc(sizeof(float) * MAXN * K);
    for (int b = 0; b < MAXN; b++) {
        if (stress)
            rand_acts(r, x + (size_t)b * K, K, 1);
        else
            acts(r, x + (size_t)b * K, K);
    }
    static const int ns[] = {1, 2, 3, 5, 8, 17};
    char what[96];
    snprintf(what, sizeof what, "FP8 QUANT %dx%d%s", R, K, stress ? " (stress scales)" : "");
    for (size_t i = 0; i < sizeof ns / sizeof ns[0]; i++)
        check_product(what, &W, V4_LIN_QUANT, x, ns[i], fb, nfb, exact, !stress);
    /* NaN: an activation, a weight code, a scale */
    x[5] = NAN;
    snprintf(what, sizeof what, "FP8 QUANT %dx%d NaN activation", R, K);
    check_product(what, &W, V4_LIN_QUANT, x, 3, fb, nfb, exact, 0);
    x[5] = 1.0f;
    w[(size_t)7 * K + 3] = 0x7f;
    snprintf(what, sizeof what, "FP8 QUANT %dx%d NaN weight code", R, K);
    check_product(what, &W, V4_LIN_QUANT, x, 3, fb, nfb, exact, 0);
    s[0] = 0xff;
    snprintf(what, sizeof what, "FP8 QUANT %dx%d NaN weight+scale", R, K);
    check_product(what, &W, V4_LIN_QUANT, x, 3, fb, nfb, exact, 0);
    free(w);
    free(s);
    free(x);
}

static void exact_case(rng *r, v4_wtype t, int R, int K, int r8, bk *fb, int nfb, v4_backend *exact)
{
    void *w;
    uint8_t *s = NULL;
    if (t == V4_W_FP8) {
        uint8_t *b = malloc((size_t)R * K);
        for (size_t i = 0; i < (size_t)R * K; i++)
            b[i] = rand_e4m3(r);
        s = malloc((size_t)((R + 127) / 128) * ((K + 127) / 128));
        for (int i = 0; i < ((R + 127) / 128) * ((K + 127) / 128); i++)
            s[i] = (uint8_t)rint_(r, 127 - 12, 127 - 4);
        w = b;
    } else {
        w = rand_dense_weights(r, t, (size_t)R * K);
    }
    v4_mat W = {t, R, K, w, s, V4_LAYOUT_ROWMAJOR};
    void *packed = NULL;
    if (r8) {
        packed = calloc(1, v4_mat_r8_bytes(&W));
        v4_mat_pack_r8(&W, packed, 0, (R + 7) / 8);
        W.w = packed;
        W.layout = V4_LAYOUT_R8;
    }
    float *x = malloc(sizeof(float) * MAXN * K);
    for (int i = 0; i < MAXN * K; i++)
        x[i] = rint_(r, 0, 25) == 0 ? 0.0f : rval(r, rint_(r, -8, 3));
    static const int ns[] = {1, 2, 3, 5, 8, 17};
    char what[96];
    snprintf(what, sizeof what, "BF16-mode %s %dx%d %s", t == V4_W_BF16 ? "BF16" : t == V4_W_F32 ? "F32" : "FP8", R, K,
             r8 ? "R8" : "row-major");
    for (size_t i = 0; i < sizeof ns / sizeof ns[0]; i++)
        check_product(what, &W, V4_LIN_BF16, x, ns[i], fb, nfb, exact, 1);
    {   /* V4_LIN_EXACT stays exact in the fast mode: the exact backend's bytes */
        float *ye = malloc(sizeof(float) * 8 * R), *yf = malloc(sizeof(float) * 8 * R);
        v4_linear(exact, &W, V4_LIN_EXACT, 8, x, K, ye, R);
        for (int k = 0; k < nfb; k++) {
            v4_linear(fb[k].be, &W, V4_LIN_EXACT, 8, x, K, yf, R);
            CHECK(!memcmp(ye, yf, sizeof(float) * 8 * R), "%s: V4_LIN_EXACT on fast %s/%dt differs from exact", what,
                  fb[k].name, v4_cpu_backend_threads(fb[k].be));
        }
        free(ye);
        free(yf);
    }
    if (t == V4_W_FP8) {   /* a NaN weight code alone (the scales stay finite) */
        uint8_t *b = w;
        b[(size_t)(R / 2) * K + 5] = 0xff;
        if (r8)
            v4_mat_pack_r8(&(v4_mat){t, R, K, w, s, V4_LAYOUT_ROWMAJOR}, packed, 0, (R + 7) / 8);
        snprintf(what, sizeof what, "BF16-mode FP8 %dx%d %s NaN weight code", R, K, r8 ? "R8" : "row-major");
        check_product(what, &W, V4_LIN_BF16, x, 3, fb, nfb, exact, 0);
    }
    x[K + 9] = INFINITY;
    x[2 * K + 1] = NAN;
    snprintf(what, sizeof what, "BF16-mode %s %dx%d %s Inf/NaN input", t == V4_W_BF16 ? "BF16" : t == V4_W_F32 ? "F32" : "FP8",
             R, K, r8 ? "R8" : "row-major");
    check_product(what, &W, V4_LIN_BF16, x, 3, fb, nfb, exact, 0);
    free(packed);
    free(w);
    free(s);
    free(x);
}

static void fp4_unchanged(rng *r, bk *fb, int nfb, v4_backend *exact)
{
    const int R = 64, K = 512;
    uint8_t *w = malloc((size_t)R * K / 2), *s = malloc((size_t)R * K / 32);
    for (int i = 0; i < R * K / 2; i++)
        w[i] = (uint8_t)rnext(r);
    for (int i = 0; i < R * K / 32; i++)
        s[i] = (uint8_t)rint_(r, 127 - 10, 127 - 2);
    v4_mat W = {V4_W_FP4, R, K, w, s, V4_LAYOUT_ROWMAJOR};
    float x[3 * 512], ye[3 * 64], y[3 * 64];
    for (int b = 0; b < 3; b++)
        acts(r, x + b * K, K);
    v4_linear(exact, &W, V4_LIN_QUANT, 3, x, K, ye, R);
    for (int k = 0; k < nfb; k++) {
        v4_linear(fb[k].be, &W, V4_LIN_QUANT, 3, x, K, y, R);
        CHECK(memcmp(y, ye, sizeof y) == 0, "FP4 in fast mode (%s) differs from exact", fb[k].name);
    }
    free(w);
    free(s);
}

static void env_choice(void)
{
    v4_error err = {0};
    setenv("V4_NUMERICS", "fast", 1);
    v4_backend *be = v4_cpu_backend_create(1, "scalar", &err);
    CHECK(be && v4_cpu_backend_numerics(be) == V4_NUM_FAST, "V4_NUMERICS=fast: not fast");
    if (be)
        be->ops->destroy(be);
    be = v4_cpu_backend_create_ex(1, "scalar", "exact", &err);
    CHECK(be && v4_cpu_backend_numerics(be) == V4_NUM_EXACT, "an explicit exact must win over V4_NUMERICS");
    if (be)
        be->ops->destroy(be);
    setenv("V4_NUMERICS", "fastest", 1);
    memset(&err, 0, sizeof err);
    be = v4_cpu_backend_create(1, "scalar", &err);
    CHECK(!be && err.code == V4_ERR_INVALID && strstr(err.msg, "fastest") && !strcmp(err.where, "V4_NUMERICS"),
          "V4_NUMERICS=fastest: want an error naming it, got %s: %s", err.where, err.msg);
    if (be)
        be->ops->destroy(be);
    unsetenv("V4_NUMERICS");
    be = v4_cpu_backend_create(1, "scalar", &err);
    CHECK(be && v4_cpu_backend_numerics(be) == V4_NUM_EXACT, "default: not exact");
    if (be)
        be->ops->destroy(be);
}

/* The FP8 row kernels called directly on the same quantized inputs: the reference, the
 * AVX-512F kernel that emulates the dot instruction's order, and the AVX512-BF16
 * kernel (VDPBF16PS) give the same bytes; each SIMD kernel is run only where the CPU
 * has it (reported as skipped otherwise).  Cases: ordinary, stress scales (bytes
 * routed to the reference), products below FLT_MIN (scale bytes 10-14 with tiny
 * activations: the flush-to-zero path, every output 0) and around it, and every e4m3
 * code in every row under every scale byte the SIMD decode takes (10 .. 134). */
static void fp8_direct(rng *r, int R, int K, int kind)
{
    uint8_t *w = malloc((size_t)R * K), *s = malloc((size_t)((R + 127) / 128) * ((K + 127) / 128));
    for (size_t i = 0; i < (size_t)R * K; i++) {
        const uint8_t c = (uint8_t)(i % (size_t)K + 7 * (i / (size_t)K));   /* kind 4: a row holds every code */
        w[i] = kind == 4 ? ((c & 0x7f) == 0x7f ? 0 : c) : rand_e4m3(r);
    }
    for (int i = 0; i < ((R + 127) / 128) * ((K + 127) / 128); i++)
        s[i] = kind == 4   ? (uint8_t)(10 + i % 125)   /* every scale byte the decode takes */
               : kind == 1 ? rand_e8m0(r)
               : kind >= 2 ? (uint8_t)rint_(r, 10, 14)
                           : (uint8_t)rint_(r, 115, 123);
    v4_mat W = {V4_W_FP8, R, K, w, s, V4_LAYOUT_ROWMAJOR};
    const int n = 9;
    float *x = malloc(sizeof(float) * n * K), *xq = malloc(sizeof(float) * n * K), *xs = malloc(sizeof(float) * n * K);
    float *y[3];
    for (int k = 0; k < 3; k++)
        y[k] = malloc(sizeof(float) * n * R);
    for (int b = 0; b < n; b++) {
        if (kind == 2 || kind == 3)   /* 2: every product below FLT_MIN; 3: products around it */
            for (int j = 0; j < K; j++)
                x[(size_t)b * K + j] = v4_bf16(rval(r, kind == 2 ? -100 - rint_(r, 0, 25) : -5 - rint_(r, 0, 20)));
        else if (kind == 1)
            rand_acts(r, x + (size_t)b * K, K, 1);
        else
            acts(r, x + (size_t)b * K, K);
        v4_act_quant(x + (size_t)b * K, K, xq + (size_t)b * K, xs + (size_t)b * (K / 128));
    }
    static const char *names[3] = {"reference", "avx512 (emulated dot)", "avx512bf16 (vdpbf16ps)"};
    const int have[3] = {1, v4_cpu_isa_supported("avx512"),
                         v4_cpu_isa_supported("avx512") && __builtin_cpu_supports("avx512bf16") &&
                             __builtin_cpu_supports("avx512vbmi")};
    static const int ns[] = {1, 2, 3, 4, 5, 8, 9};
    long zeros = 0, nonzero = 0;
    for (size_t t = 0; t < sizeof ns / sizeof ns[0]; t++) {
        const int m = ns[t];
        for (int k = 0; k < 3; k++)
            memset(y[k], 0xa5, sizeof(float) * n * R);
        v4_rows_fp8_fast_scalar(&W, m, xq, xs, x, K, y[0], R, 0, R);
#if V4_CPU_X86
        if (have[1])
            v4_rows_fp8_fast_avx512(&W, m, xq, xs, x, K, y[1], R, 0, R);
        if (have[2])
            v4_rows_fp8_fast_bf16(&W, m, xq, xs, x, K, y[2], R, 0, R);
#endif
        for (int k = 1; k < 3; k++)
            if (have[k])
                CHECK(!memcmp(y[0], y[k], sizeof(float) * m * R), "FP8 %dx%d kind %d n=%d: %s differs from the reference",
                      R, K, kind, m, names[k]);
        for (int i = 0; i < m * R; i++)
            zeros += y[0][i] == 0.0f, nonzero += y[0][i] != 0.0f;
    }
    if (kind == 2)
        CHECK(zeros > 0 && nonzero == 0, "the flush-to-zero case: %ld zero, %ld nonzero outputs", zeros, nonzero);
    for (int k = 1; k < 3; k++)
        if (!have[k] || !V4_CPU_X86)
            printf("SKIP: FP8 direct %s: not on this CPU\n", names[k]);
    printf("  FP8 direct %dx%d kind %d: kernels agree (%ld zero outputs)\n", R, K, kind, zeros);
    free(w); free(s); free(x); free(xq); free(xs);
    for (int k = 0; k < 3; k++)
        free(y[k]);
}

int main(void)
{
    unsetenv("V4_NUMERICS");
    unsetenv("V4_CPU_ISA");
    v4_error err = {0};
    v4_backend *exact = v4_cpu_backend_create_ex(1, "scalar", "exact", &err);
    CHECK(exact != NULL, "exact backend: %s", err.msg);
    bk fb[8];
    int nfb = open_backends(fb, 8);
    CHECK(nfb >= 2, "no fast backends");
    if (!exact || nfb < 1)
        TEST_DONE();
    printf("fast backends:");
    for (int k = 0; k < nfb; k++)
        printf(" %s/%dt", fb[k].name, v4_cpu_backend_threads(fb[k].be));
    printf("\n");
    rng r = {20261202};
    fp8_case(&r, 256, 512, 0, fb, nfb, exact);
    fp8_case(&r, 384, 1024, 0, fb, nfb, exact);
    fp8_case(&r, 130, 256, 1, fb, nfb, exact);     /* stress scales; a 2-row tail */
    static const v4_wtype ts[] = {V4_W_BF16, V4_W_F32, V4_W_FP8};
    for (int t = 0; t < 3; t++)
        for (int r8 = 0; r8 <= 1; r8++) {
            exact_case(&r, ts[t], 200, 512, r8, fb, nfb, exact);
            exact_case(&r, ts[t], 40, 128, r8, fb, nfb, exact);
        }
    fp8_direct(&r, 256, 1024, 0);
    fp8_direct(&r, 128, 512, 1);
    fp8_direct(&r, 128, 512, 2);
    fp8_direct(&r, 128, 512, 3);
    fp8_direct(&r, 63 * 128, 256, 4);   /* every e4m3 code under every scale byte in [10, 135) */
    fp4_unchanged(&r, fb, nfb, exact);
    env_choice();
    for (int k = 0; k < nfb; k++)
        fb[k].be->ops->destroy(fb[k].be);
    exact->ops->destroy(exact);
    TEST_DONE();
}
