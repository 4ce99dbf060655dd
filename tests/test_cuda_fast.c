/* test_cuda_fast.c - the CUDA backend's fast numerics mode (tensor cores through
 * cuBLASLt, kernels/cuda/cuda_lt.h) against the CPU's exact products: the kernel part
 * of the validation contract of issue 18, on a GPU.
 *
 * Without the CUDA backend or without a GPU it exits 77 (SKIPPED) and says why.  With
 * one: the backend must come up in the fast mode (its self-test passed; otherwise the
 * failure names the product and the cuBLAS / CUDA status of v4_cuda_backend_selftest), and for FP8
 * and FP4 QUANT and V4_LIN_BF16 (BF16, FP8 and R8 weights) products of V4-like shapes
 * and batches 1..64:
 *   - calc_diff against the CPU exact backend <= 1e-6, identical NaN/Inf positions;
 *   - batch invariance: every row's bytes are the same at n = 1, 5, 8 and 64, and in
 *     a second identical call (pinned algorithms, no split-K);
 *   - shapes the tensor-core path declines (K % 128 != 0) give the exact bits;
 *   - y's padding (ldy > rows) is untouched;
 * and the resident step's grouped tensor-core expert products (cuda_mma.h) pass their
 * self-test (calc_diff <= 1e-5 against the exact kernels, FP4 and FP8).
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/backend.h"
#include "kernels/codec.h"
#include "kernels/cpu/cpu_backend.h"
#include "linear_gen.h"
#ifdef V4_HAVE_CUDA
#include "kernels/calc_diff.h"
#include "kernels/cuda/cuda_backend.h"
#include "kernels/cuda/cuda_mma.h"
#include "testutil.h"   /* only the GPU part checks anything */
#endif

#ifdef V4_HAVE_CUDA
static rng g_r = {0xfa57fa57fa57ull};

/* calc_diff over n rows of `rows` values, ld apart */
static double calc_diff(const float *a, const float *b, int n, int rows, int ld, int *pattern_bad)
{
    v4_diff d = {0};
    for (int i = 0; i < n; i++)
        v4_diff_add(&d, a + (size_t)i * ld, b + (size_t)i * ld, (size_t)rows);
    *pattern_bad += (int)d.pattern_bad;
    return v4_diff_value(&d);
}

typedef struct mat {
    v4_mat W;
    void *w;
    uint8_t *s;
} mat;

/* A weight of V4-like statistics: e4m3 / e2m1 codes, E8M0 scales near 2^-7 (FP8) or
 * 2^-1..2^-5 (FP4), bf16 values of magnitude ~2^-6. */
static mat make(v4_wtype t, int rows, int K)
{
    mat m = {0};
    size_t nw = (size_t)rows * K, ns = 0;
    if (t == V4_W_FP8) {
        m.w = malloc(nw);
        for (size_t i = 0; i < nw; i++)
            ((uint8_t *)m.w)[i] = rand_e4m3(&g_r);
        ns = (size_t)((rows + 127) / 128) * ((K + 127) / 128);
    } else if (t == V4_W_FP4) {
        m.w = malloc(nw / 2);
        for (size_t i = 0; i < nw / 2; i++)
            ((uint8_t *)m.w)[i] = (uint8_t)rnext(&g_r);
        ns = (size_t)rows * (K / 32);
    } else {
        m.w = malloc(nw * 2);
        for (size_t i = 0; i < nw; i++)
            ((uint16_t *)m.w)[i] = v4_bf16_bits(rval(&g_r, rint_(&g_r, -10, -4)));
    }
    if (ns) {
        m.s = malloc(ns);
        for (size_t i = 0; i < ns; i++)
            m.s[i] = (uint8_t)(t == V4_W_FP8 ? rint_(&g_r, 118, 124) : rint_(&g_r, 122, 126));
    }
    m.W = (v4_mat){t, rows, K, m.w, m.s, V4_LAYOUT_ROWMAJOR};
    return m;
}

static void drop(mat *m)
{
    free(m->w);
    free(m->s);
}

/* fast (cu) against exact (cpu) on W at batch n; row-invariance against ref1 (the
 * n = 1 result of row 0) when given. */
static void one(v4_backend *cpu, v4_backend *cu, const v4_mat *W, v4_lin_mode mode, int n, const char *what,
                double bound)
{
    const int rows = W->rows, K = W->cols, ldy = rows + 3;
    float *x = malloc(sizeof(float) * (size_t)n * K);
    float *ye = malloc(sizeof(float) * (size_t)n * ldy), *yf = malloc(sizeof(float) * (size_t)n * ldy);
    float *y1 = malloc(sizeof(float) * (size_t)ldy), *y2 = malloc(sizeof(float) * (size_t)n * ldy);
    for (int b = 0; b < n; b++)
        rand_acts(&g_r, x + (size_t)b * K, K, mode == V4_LIN_QUANT);
    if (n > 2) {
        x[7] = NAN;
        x[(size_t)K + 3] = INFINITY;
    }
    for (size_t i = 0; i < (size_t)n * ldy; i++)
        ye[i] = yf[i] = y2[i] = -5.0f;
    v4_linear(cpu, W, mode, n, x, K, ye, ldy);
    v4_linear(cu, W, mode, n, x, K, yf, ldy);
    v4_linear(cu, W, mode, n, x, K, y2, ldy);
    v4_linear(cu, W, mode, 1, x + (size_t)(n - 1) * K, K, y1, ldy);
    int pat = 0, pad = 0;
    const double cd = calc_diff(ye, yf, n, rows, ldy, &pat);
    for (int b = 0; b < n; b++)
        for (int r = rows; r < ldy; r++)
            pad += yf[(size_t)b * ldy + r] != -5.0f;
    const int again = memcmp(yf, y2, sizeof(float) * (size_t)n * ldy) != 0;
    const int inv = memcmp(y1, yf + (size_t)(n - 1) * ldy, sizeof(float) * (size_t)rows) != 0;
    printf("%-44s n=%-3d calc_diff %.2e%s%s%s%s\n", what, n, cd, pat ? " NONFINITE-PATTERN" : "",
           again ? " NOT-DETERMINISTIC" : "", inv ? " NOT-BATCH-INVARIANT" : "", pad ? " PADDING-WRITTEN" : "");
    CHECK(cd <= bound, "%s n=%d: calc_diff %.3g > %.0e", what, n, cd, bound);
    CHECK(!pat, "%s n=%d: %d NaN/Inf positions differ from the exact mode", what, n, pat);
    CHECK(!again, "%s n=%d: a second identical call gave other bytes", what, n);
    CHECK(!inv, "%s n=%d: the last row alone gave other bytes than in the batch", what, n);
    CHECK(!pad, "%s n=%d: y's padding was written", what, n);
    free(x), free(ye), free(yf), free(y1), free(y2);
}
#endif

int main(void)
{
#ifndef V4_HAVE_CUDA
    printf("SKIPPED: built without the CUDA backend (V4_CUDA=OFF or no nvcc)\n");
    return 77;
#else
    char why[256] = "";
    if (v4_cuda_device_count(why, sizeof why) <= 0) {
        printf("SKIPPED: %s\n", why);
        return 77;
    }
    v4_error err = {0};
    v4_backend *cu = v4_cuda_backend_create_ex(0, 1, &err);
    CHECK(cu != NULL, "cuda backend: %s", err.msg);
    if (!cu)
        TEST_DONE();
    v4_fast_selftest ft;
    v4_cuda_backend_selftest(cu, &ft);
    CHECK(v4_cuda_backend_fast(cu) && ft.state == V4_FAST_PASSED,
          "the fast mode did not start: self-test %s, product %s, status %s (%d): %s", v4_fast_state_name(ft.state),
          ft.product, ft.status, ft.code, ft.detail);
    v4_backend *cpu = v4_cpu_backend_create_ex(1, "auto", "exact", &err);
    CHECK(cpu != NULL, "cpu backend: %s", err.msg);
    if (!cpu || !v4_cuda_backend_fast(cu)) {
        if (cpu)
            cpu->ops->destroy(cpu);
        cu->ops->destroy(cu);
        TEST_DONE();
    }
    printf("GPU: %s, fast numerics\n", v4_cuda_backend_device_name(cu));
    static const int ns[] = {1, 5, 8, 64};
    struct { v4_wtype t; v4_lin_mode m; int rows, K; const char *what; } cases[] = {
        {V4_W_FP8, V4_LIN_QUANT, 1024, 4096, "fp8 quant 1024x4096 (wq_a-like)"},
        {V4_W_FP8, V4_LIN_QUANT, 512, 1024, "fp8 quant 512x1024"},
        {V4_W_FP4, V4_LIN_QUANT, 2048, 4096, "fp4 quant 2048x4096 (expert w1)"},
        {V4_W_FP4, V4_LIN_QUANT, 4096, 2048, "fp4 quant 4096x2048 (expert w2)"},
        {V4_W_BF16, V4_LIN_BF16, 4096, 1024, "bf16 4096x1024 (head-like)"},
        {V4_W_FP8, V4_LIN_BF16, 1024, 2048, "fp8 as bf16 1024x2048 (wo_a)"},
    };
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        mat m = make(cases[c].t, cases[c].rows, cases[c].K);
        for (size_t i = 0; i < sizeof ns / sizeof ns[0]; i++)
            one(cpu, cu, &m.W, cases[c].m, ns[i], cases[c].what, 1e-6);
        if (c == 0) {   /* a row view inside the matrix (v4_mat_rows) */
            v4_mat v = v4_mat_rows(&m.W, 256, 512);
            one(cpu, cu, &v, V4_LIN_QUANT, 8, "fp8 quant row view 512 of 1024", 1e-6);
        }
        drop(&m);
    }
    {   /* K % 128 != 0: declined, the exact kernel runs (bits equal to the CPU's) */
        mat m = make(V4_W_FP8, 256, 320);
        one(cpu, cu, &m.W, V4_LIN_QUANT, 4, "fp8 quant 256x320 (declined: exact)", 0.0);
        drop(&m);
    }
    {   /* the resident step's grouped tensor-core expert products (cuda_mma.h) */
        char mwhy[240] = "";
        const int r = v4cu_mma_selftest(0, mwhy, sizeof mwhy);
        CHECK(r == 1, "grouped tensor-core expert products (FP4, FP8): %s", mwhy);
        if (r == 1)
            printf("grouped tensor-core expert products (FP4, FP8) against the exact kernels: ok\n");
    }
    v4_error st = {0};
    CHECK(v4_cuda_backend_status(cu, &st) == 0, "backend status: %s", st.msg);
    cpu->ops->destroy(cpu);
    cu->ops->destroy(cu);
    TEST_DONE();
#endif
}
