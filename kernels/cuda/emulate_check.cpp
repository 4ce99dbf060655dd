/* emulate_check.cpp - runs the CUDA kernels of cuda_linear.cu on the CPU (a small
 * SIMT emulation) against the scalar reference, so that every CUDA build checks the
 * kernels even without a GPU (ctest: test_cuda_emulated, registered in the top-level
 * CMakeLists.txt when V4_CUDA is ON).  It checks the kernels' indexing, lane mapping,
 * shuffles and rounding steps as written, not the GPU's arithmetic units (host IEEE
 * float/double with -ffp-contract=off stands in for __fmul_rn & co., which are IEEE
 * round-to-nearest on the GPU too); test_cuda_linear does that on a GPU.  The
 * launchers (<<<>>>, memsets) are not compiled here; this driver repeats their
 * chunking and the tail memsets.
 *
 * Emulation: blocks run one after another; a block's threads are std::threads; a
 * warp's shuffles exchange values through a per-warp slot array between two
 * std::barrier waits; __syncthreads/__syncwarp are barriers; __shared__ arrays are
 * function-local statics (one block at a time).  A warp returns as a whole or not at
 * all in these kernels, so the barriers always see full warps.
 *
 * By hand (from the repository root):
 *   gcc -O1 -ffp-contract=off -I. -c kernels/codec.c kernels/cpu/linear_scalar.c &&
 *   g++ -std=c++20 -O1 -ffp-contract=off -pthread -I. -I/usr/local/cuda/include \
 *       -o /tmp/emu kernels/cuda/emulate_check.cpp codec.o linear_scalar.o
 *   /tmp/emu
 * Ownership/threads: a throwaway program; all memory is freed at exit.
 */
#include <barrier>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <memory>
#include <thread>
#include <vector>

extern "C" {
#include "kernels/codec.h"
#include "kernels/cpu/cpu_kernels.h"
}

/* ------------------------------------------------------------- SIMT shim -- */
struct dim3e { unsigned x = 0, y = 0, z = 0; };
static thread_local dim3e threadIdx, blockIdx;
struct warp_ctx {
    std::barrier<> *bar;
    uint64_t slot[32];
};
static thread_local warp_ctx *g_warp;
static std::barrier<> *g_block_bar;

#define __global__
#define __device__
#define __forceinline__ inline
#define __launch_bounds__(x)
#define __restrict__
#define __shared__ static

struct uint4 { uint32_t x, y, z, w; };
template <typename T> static T __ldg(const T *p) { T v; std::memcpy(&v, p, sizeof v); return v; }
static float __int_as_float(int i) { float f; std::memcpy(&f, &i, 4); return f; }
static float __uint_as_float(uint32_t i) { float f; std::memcpy(&f, &i, 4); return f; }
static uint32_t __float_as_uint(float f) { uint32_t u; std::memcpy(&u, &f, 4); return u; }
static double __hiloint2double(int hi, int lo)
{
    uint64_t u = ((uint64_t)(uint32_t)hi << 32) | (uint32_t)lo;
    double d;
    std::memcpy(&d, &u, 8);
    return d;
}
static double __longlong_as_double(long long v) { double d; std::memcpy(&d, &v, 8); return d; }
static float __fmul_rn(float a, float b) { return a * b; }
static float __fadd_rn(float a, float b) { return a + b; }
static float __fdiv_rn(float a, float b) { return a / b; }
static double __dmul_rn(double a, double b) { return a * b; }
static float __double2float_rn(double d) { return (float)d; }
using std::fma;
using std::rintf;
using std::fmaxf;
using std::copysignf;

template <typename T> static T shfl_idx(T v, int src)
{
    const unsigned lane = threadIdx.x & 31;
    uint64_t u = 0;
    std::memcpy(&u, &v, sizeof v);
    g_warp->slot[lane] = u;
    g_warp->bar->arrive_and_wait();
    u = g_warp->slot[src & 31];
    g_warp->bar->arrive_and_wait();
    T r;
    std::memcpy(&r, &u, sizeof r);
    return r;
}
template <typename T> static T __shfl_sync(unsigned, T v, int src) { return shfl_idx(v, src); }
template <typename T> static T __shfl_xor_sync(unsigned, T v, int m) { return shfl_idx(v, (int)(threadIdx.x & 31) ^ m); }
static void __syncwarp() { g_warp->bar->arrive_and_wait(); }
static void __syncthreads() { g_block_bar->arrive_and_wait(); }

typedef int cudaError_t;
typedef void *cudaStream_t;
#define V4CU_HOST_EMULATION 1
#define V4_CUDA_LINEAR_H    /* the kernels only need the types above */
#include "cuda_linear.cu"

/* Run fn() as a grid of gx*gy blocks of nt threads. */
static void launch(unsigned gx, unsigned gy, unsigned nt, const std::function<void()> &fn)
{
    for (unsigned by = 0; by < gy; by++)
        for (unsigned bx = 0; bx < gx; bx++) {
            std::barrier<> block_bar((std::ptrdiff_t)nt);
            std::vector<warp_ctx> warps((nt + 31) / 32);
            std::vector<std::unique_ptr<std::barrier<>>> wbars;
            for (size_t w = 0; w < warps.size(); w++) {
                wbars.push_back(std::make_unique<std::barrier<>>(32));
                warps[w].bar = wbars[w].get();
            }
            g_block_bar = &block_bar;
            std::vector<std::thread> th;
            for (unsigned t = 0; t < nt; t++)
                th.emplace_back([&, t] {
                    threadIdx.x = t;
                    blockIdx.x = bx;
                    blockIdx.y = by;
                    g_warp = &warps[t / 32];
                    fn();
                });
            for (auto &x : th)
                x.join();
        }
}

/* ------------------------------------------------------------------ driver -- */
static uint64_t g_s = 0x1234567887654321ull;
static uint64_t rnd()
{
    uint64_t z = (g_s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}
static float rval(int e) { float v = ldexpf((float)(0.5 + 0.5 * (double)(rnd() >> 11) * 0x1p-53), e); return rnd() & 1 ? -v : v; }
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
        x[i] = rnd() % 16 == 0 ? 0.0f : v4_bf16(rval((int)((i / 128) % 25) - 12 - (int)(rnd() % 12)));
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
    /* emulated kernels, chunked as the launcher does */
    std::vector<double> xq((size_t)n * K, -1.0);
    std::vector<float> xs((size_t)n * nkb + 1, -1.0f), y((size_t)n * rows, -7.0f);
    launch((unsigned)nkb, (unsigned)n, 128, [&] { k_act_quant(x.data(), K, nkb, xq.data(), xs.data()); });
    xs[(size_t)n * nkb] = 0.0f;                       /* the launcher's two memsets */
    for (int b = 0; b < n; b++)
        for (int j = nkb * 128; j < K; j++)
            xq[(size_t)b * K + j] = 0.0;
    int qbad = 0;
    for (size_t i = 0; i < xq.size(); i++)
        qbad += !((double)rq[i] == xq[i] || (std::isnan(rq[i]) && std::isnan(xq[i])));
    for (size_t i = 0; i < (size_t)n * nkb; i++)
        qbad += rs[i] != xs[i];
    const int blocks = (rows + QR * QWARPS - 1) / (QR * QWARPS);
    for (int b0 = 0; b0 < n;) {
        const int nb = n - b0 < 4 ? n - b0 : 4;
        const double *q = xq.data() + (size_t)b0 * K;
        const float *s = xs.data() + (size_t)b0 * nkb;
        float *yo = y.data() + (size_t)b0 * rows;
        const bool vec = (K % 32) == 0 && (rnd() & 1);     /* both load paths */
        launch((unsigned)blocks, 1, QWARPS * 32, [&] {
            if (nb == 1)
                (fp4 ? k_quant_fp4<1> : k_quant_fp8<1>)(w.data(), sc.data(), rows, K, 1, q, s, nkb, yo, rows, vec);
            else
                (fp4 ? k_quant_fp4<4> : k_quant_fp8<4>)(w.data(), sc.data(), rows, K, nb, q, s, nkb, yo, rows, vec);
        });
        b0 += nb;
    }
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
            float v = rval((int)(rnd() % 24) - 20);
            memcpy(&w[i * 4], &v, 4);
        } else if (t == V4_W_BF16) {
            uint16_t v = v4_bf16_bits(rval((int)(rnd() % 24) - 20));
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
            x[(size_t)b * K + j] = rval((int)(rnd() % 30) - 15);
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
    const int blocks = (rows + 31) / 32;
    for (int b0 = 0; b0 < n;) {
        const int nb = n - b0, m = nb == 1 ? 1 : nb <= 4 ? nb : (nb < 8 ? nb : 8);
        const float *xo = x.data() + (size_t)b0 * K;
        float *yo = y.data() + (size_t)b0 * rows;
        launch((unsigned)blocks, 1, 32, [&] {
#define EX(T) (r8 ? (nb == 1 ? k_exact<T, 1, 1> : nb <= 4 ? k_exact<T, 1, 4> : k_exact<T, 1, 8>) \
                  : (nb == 1 ? k_exact<T, 0, 1> : nb <= 4 ? k_exact<T, 0, 4> : k_exact<T, 0, 8>))
            auto fn = t == V4_W_FP8 ? EX(1) : t == V4_W_BF16 ? EX(3) : EX(4);
            fn(dw, sc.data(), rows, K, m, xo, yo, rows);
        });
        b0 += m;
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
