/* emulate_check.cpp - runs the CUDA linear kernels of cuda_linear.cu on the CPU
 * (simt_emu.h), through their launchers (batch chunking, tail memsets included),
 * against the scalar reference, so that every CUDA build checks the kernels even
 * without a GPU (ctest: test_cuda_emulated, registered in the top-level
 * CMakeLists.txt when V4_CUDA is ON).  It checks the kernels' indexing, lane mapping,
 * shuffles and rounding steps as written, not the GPU's arithmetic units (host IEEE
 * float/double with -ffp-contract=off stands in for __fmul_rn & co., which are IEEE
 * round-to-nearest on the GPU too); test_cuda_linear does that on a GPU.
 * Ownership/threads: a throwaway program; all memory is freed at exit.
 */
#include <cstdio>

extern "C" {
#include "kernels/codec.h"
#include "kernels/cpu/cpu_kernels.h"
}

#include "kernels/cuda/simt_emu.h"
#include "tests/linear_gen.h"
#define V4_CUDA_LINEAR_H    /* the kernels and launchers need only the emulator's types */
#include "kernels/cuda/cuda_linear.cu"

/* ------------------------------------------------------------------ driver -- */
/* the driver's random stream: tests/linear_gen.h's splitmix64 from a fixed seed */
static rng g_r = {0x1234567887654321ull};
static uint64_t rnd() { return rnext(&g_r); }
static int bad_total;

static void cmp(const char *what, const float *ref, const float *got, int n, int rows, int ldr)
{
    int bad = 0;
    for (int b = 0; b < n; b++)
        for (int r = 0; r < rows; r++) {
            float a = ref[(size_t)b * ldr + r], g = got[(size_t)b * rows + r];
            if (memcmp(&a, &g, 4) && !(std::isnan(a) && std::isnan(g)) && bad++ < 3)
                printf("  %s b=%d r=%d ref=%a got=%a\n", what, b, r, (double)a, (double)g);
        }
    printf("%-44s %s (%d of %d differ)\n", what, bad ? "FAIL" : "ok", bad, n * rows);
    bad_total += bad;
}

static void quant_case(int fp4, int rows, int K, int n, int nanx)
{
    const int nkb = K / 128;
    std::vector<uint8_t> w(fp4 ? (size_t)rows * K / 2 : (size_t)rows * K);
    for (auto &b : w) {
        b = (uint8_t)rnd();
        if (!fp4 && (b & 0x7f) == 0x7f)
            b = 0x12;
    }
    std::vector<uint8_t> sc(fp4 ? (size_t)rows * (K / 32) : (size_t)((rows + 127) / 128) * ((K + 127) / 128));
    for (auto &s : sc)
        s = (uint8_t)(rnd() % 100 == 0 ? rnd() % 6 : 127 - 69 + rnd() % 75);
    std::vector<float> x((size_t)n * K);
    for (size_t i = 0; i < x.size(); i++)
        x[i] = rnd() % 16 == 0 ? 0.0f : v4_bf16(rval(&g_r, (int)((i / 128) % 25) - 12 - (int)(rnd() % 12)));
    if (nanx) {             /* NaN/inf activations, a NaN weight code (FP8), a NaN scale */
        if (!fp4)
            w[rnd() % w.size()] = 0xff;
        sc[rnd() % sc.size()] = 0xff;
        x[5] = NAN;
        if (n > 1)
            x[(size_t)K + 7] = INFINITY;
    }
    /* reference: the CPU backend's steps */
    std::vector<float> rq((size_t)n * K + 1, 0.0f), rs((size_t)n * nkb + 1, 0.0f), ry((size_t)n * rows);
    for (int b = 0; b < n; b++)
        v4_act_quant(&x[(size_t)b * K], K, &rq[(size_t)b * K], &rs[(size_t)b * nkb]);
    v4_mat W = {fp4 ? V4_W_FP4 : V4_W_FP8, rows, K, w.data(), sc.data(), V4_LAYOUT_ROWMAJOR};
    (fp4 ? v4_rows_fp4_scalar : v4_rows_fp8_scalar)(&W, n, rq.data(), rs.data(), NULL, 0, ry.data(), rows, 0, rows);
    /* emulated kernels, through the launchers */
    std::vector<double> xq((size_t)n * K, -1.0);
    std::vector<float> xs((size_t)n * nkb + 1, -1.0f), y((size_t)n * rows, -7.0f);
    int lbad = v4cu_act_quant(x.data(), n, K, xq.data(), xs.data(), nullptr) != cudaSuccess;
    int qbad = 0;
    for (size_t i = 0; i < xq.size(); i++)
        qbad += !((double)rq[i] == xq[i] || (std::isnan(rq[i]) && std::isnan(xq[i])));
    for (size_t i = 0; i < (size_t)n * nkb; i++)
        qbad += rs[i] != xs[i];
    qbad += xs[(size_t)n * nkb] != 0.0f;                /* the launcher's tail memset */
    lbad += (fp4 ? v4cu_quant_fp4 : v4cu_quant_fp8)(w.data(), sc.data(), rows, K, n, xq.data(), xs.data(), y.data(),
                                                    nullptr) != cudaSuccess;
    qbad += lbad;
    char what[96];
    snprintf(what, sizeof what, "quant %s %dx%d n=%d%s (act quant: %d bad)", fp4 ? "fp4" : "fp8", rows, K, n,
             nanx ? " nan/inf x" : "", qbad);
    bad_total += qbad;
    cmp(what, ry.data(), y.data(), n, rows, rows);
}

static void exact_case(v4_wtype t, int r8, int rows, int K, int n)
{
    const size_t es = t == V4_W_F32 ? 4 : t == V4_W_BF16 ? 2 : 1;
    const int grows = (rows + 7) / 8 * 8;
    std::vector<uint8_t> w((size_t)rows * K * es), w8((size_t)grows * K * es, 0xff);
    for (size_t i = 0; i < (size_t)rows * K; i++) {
        if (t == V4_W_F32) {
            float v = rval(&g_r, (int)(rnd() % 24) - 20);
            memcpy(&w[i * 4], &v, 4);
        } else if (t == V4_W_BF16) {
            uint16_t v = v4_bf16_bits(rval(&g_r, (int)(rnd() % 24) - 20));
            memcpy(&w[i * 2], &v, 2);
        } else {
            w[i] = (uint8_t)rnd();
            if ((w[i] & 0x7f) == 0x7f)
                w[i] = 0x33;
        }
    }
    for (int r = 0; r < rows; r++)
        for (int j = 0; j < K; j++)
            memcpy(&w8[(((size_t)(r / 8) * K + j) * 8 + r % 8) * es], &w[((size_t)r * K + j) * es], es);
    std::vector<uint8_t> sc((size_t)((rows + 127) / 128) * ((K + 127) / 128));
    for (auto &s : sc)
        s = (uint8_t)(rnd() % 50 == 0 ? rnd() % 4 : 120 + rnd() % 10);
    std::vector<float> x((size_t)n * K);
    for (int b = 0; b < n; b++)
        for (int j = 0; j < K; j++)
            x[(size_t)b * K + j] = rval(&g_r, (int)(rnd() % 30) - 15);
    if (K >= 4)
        for (int b = 0; b < n; b += 2) {
            x[(size_t)b * K + 1] = 0x1p40f;
            x[(size_t)b * K + K - 2] = -0x1p40f;
            memcpy(&w[(size_t)(K - 2) * es], &w[1 * es], es);   /* row 0: planted cancellation */
        }
    for (int j = 0; j < K; j++)      /* re-pack row 0 after the plant */
        memcpy(&w8[(size_t)j * 8 * es], &w[(size_t)j * es], es);
    v4_mat W = {t, rows, K, w.data(), sc.data(), V4_LAYOUT_ROWMAJOR};
    std::vector<float> ry((size_t)n * rows), y((size_t)n * rows, -7.0f);
    v4_rows_exact_scalar(&W, n, NULL, NULL, x.data(), K, ry.data(), rows, 0, rows);
    const void *dw = r8 ? (const void *)w8.data() : (const void *)w.data();
    if (v4cu_exact((int)t, r8, dw, sc.data(), rows, K, n, x.data(), y.data(), nullptr) != cudaSuccess) {
        printf("  exact launcher refused its arguments\n");
        bad_total++;
    }
    char what[96];
    snprintf(what, sizeof what, "exact %s %s %dx%d n=%d", t == V4_W_FP8 ? "fp8" : t == V4_W_BF16 ? "bf16" : "f32",
             r8 ? "R8" : "rowmajor", rows, K, n);
    cmp(what, ry.data(), y.data(), n, rows, rows);
}

int main()
{
    quant_case(0, 40, 256, 1, 0);
    quant_case(0, 130, 640, 3, 0);
    quant_case(0, 20, 384, 6, 1);
    quant_case(0, 17, 160, 2, 0);
    quant_case(1, 40, 256, 1, 0);
    quant_case(1, 36, 2048, 5, 0);
    quant_case(1, 20, 384, 3, 1);
    quant_case(1, 9, 160, 3, 0);
    quant_case(0, 36, 512, 17, 0);
    quant_case(1, 36, 512, 17, 1);
    quant_case(0, 260, 256, 2, 1);
    const v4_wtype ts[3] = {V4_W_BF16, V4_W_F32, V4_W_FP8};
    for (int k = 0; k < 3; k++)
        for (int r8 = 0; r8 < 2; r8++) {
            exact_case(ts[k], r8, 45, 200, 1);
            exact_case(ts[k], r8, 70, 131, 3);
            exact_case(ts[k], r8, 33, 64, 9);
            exact_case(ts[k], r8, 5, 7, 2);
            exact_case(ts[k], r8, 24, 1100, 17);
        }
    printf("%s: %d mismatches\n", bad_total ? "FAILED" : "all equal", bad_total);
    return bad_total != 0;
}
