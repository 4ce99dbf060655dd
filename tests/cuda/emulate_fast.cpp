/* emulate_fast.cpp - the fast numerics mode's GPU kernels (cuda_fast.cu) on the CPU
 * (simt_emu.h), through their launchers, against C references; then a C model of the
 * block-scaled GEMM that cuBLASLt documents (per 128-column block an FP32 partial of
 * the e4m3 products, times the A and B scales read through the documented VEC128 /
 * BLK128x128 layouts, FP32 accumulation; BF16 products with FP32 accumulation) fed with
 * the kernels' outputs, held to the kernel bound of issue 18 (calc_diff <= 1e-6)
 * against the exact product (kernels/cpu/linear_scalar.c).
 *
 * What this proves: the quantized activations are bit for bit the model's (bytes and
 * scales), the FP4 -> FP8 conversion is exact where cuda_fast.h says it is, the scale
 * layouts are what the cuBLAS documentation specifies, and a GEMM that follows that
 * specification meets the contract.  What it cannot: that cuBLASLt on a GPU does
 * follow it (the self-test of cuda_lt.cu and numerics-check --device cuda check that
 * on a GPU).
 * Ownership/threads: a throwaway program.
 */
#include <algorithm>
#include <cstdio>
#include <vector>

extern "C" {
#include "kernels/codec.h"
#include "kernels/cpu/cpu_kernels.h"
}

#include "kernels/cuda/simt_emu.h"
#include "tests/linear_gen.h"
#include "kernels/cuda/cuda_fast.cu"

static rng g_r = {0x0fa570fa570fa57ull};
static int bad_total;

static void verdict(const char *what, int bad, const char *extra)
{
    printf("%-58s %s%s\n", what, bad ? "FAIL" : "ok", extra ? extra : "");
    bad_total += bad != 0;
}

/* nw weights of type t (FP8: e4m3 bytes without NaN codes), malloc'd */
static void *rand_weights(v4_wtype t, size_t nw)
{
    if (t != V4_W_FP8)
        return rand_dense_weights(&g_r, t, nw);
    uint8_t *w = (uint8_t *)malloc(nw);
    for (size_t i = 0; w && i < nw; i++)
        w[i] = rand_e4m3(&g_r);
    return w;
}

static double calc_diff(const float *a, const float *b, size_t n)
{
    double xy = 0, xx = 0, yy = 0;
    for (size_t i = 0; i < n; i++) {
        xy += (double)a[i] * b[i];
        xx += (double)a[i] * a[i];
        yy += (double)b[i] * b[i];
    }
    return xx + yy > 0 ? 1.0 - 2.0 * xy / (xx + yy) : 0.0;
}

/* The activations: bytes and VEC128 scales against v4_act_quant, padding rows. */
static void act_case(int n, int K)
{
    const int npad = v4cu_npad(n), L = K / 128, ldx = K + 16;
    std::vector<float> x((size_t)n * ldx, 12345.0f);
    for (int b = 0; b < n; b++)
        rand_acts(&g_r, &x[(size_t)b * ldx], K, b & 1);
    if (n > 1) {
        x[3] = NAN;
        x[(size_t)ldx + 9] = INFINITY;
    }
    std::vector<uint8_t> q((size_t)npad * K, 0xaa);
    std::vector<float> qs((size_t)L * npad, -1.0f);
    int bad = v4cu_fast_act_quant(x.data(), ldx, n, npad, K, q.data(), qs.data(), nullptr) != cudaSuccess;
    std::vector<float> rq((size_t)K), rs((size_t)L);
    for (int b = 0; b < npad; b++) {
        if (b < n)
            v4_act_quant(&x[(size_t)b * ldx], K, rq.data(), rs.data());
        for (int j = 0; j < K; j++) {
            const uint8_t want = b < n ? v4_e4m3_encode(rq[j]) : 0;
            const int nan_ok = b < n && std::isnan(rq[j]) && (q[(size_t)b * K + j] & 0x7f) == 0x7f;
            bad += q[(size_t)b * K + j] != want && !nan_ok;
        }
        for (int k = 0; k < L; k++)
            bad += qs[(size_t)k * npad + b] != (b < n ? rs[k] : 1.0f);
    }
    char what[96];
    snprintf(what, sizeof what, "act quant n=%d (npad %d) K=%d, strided x", n, npad, K);
    verdict(what, bad, NULL);
}

/* e2m1 * 2^(E-127), the value of one FP4 weight element */
static double fp4_value(const uint8_t *w4, const uint8_t *s4, int K, int r, int j)
{
    const uint8_t byte = w4[(size_t)r * (K / 2) + j / 2];
    return (double)v4_e2m1_to_f32(j & 1 ? byte >> 4 : byte & 15) * ldexp(1.0, (int)s4[(size_t)r * (K / 32) + j / 32] - 127);
}

/* FP4 -> FP8: exact while the block's exponent spread is <= 14; NaN scales. */
static void fp4_case(int rows, int K, int spread)
{
    const int L = K / 128;
    std::vector<uint8_t> w4((size_t)rows * K / 2), s4((size_t)rows * (K / 32));
    for (auto &b : w4)
        b = (uint8_t)rnext(&g_r);
    for (auto &s : s4)
        s = (uint8_t)(110 + rnext(&g_r) % (unsigned)(spread + 1));
    s4[7] = 0xff;   /* a NaN scale: its 128-block becomes NaN */
    std::vector<uint8_t> w8((size_t)rows * K);
    std::vector<float> s8((size_t)L * rows);
    int bad = v4cu_fast_fp4_to_fp8(w4.data(), s4.data(), rows, K, w8.data(), s8.data(), nullptr) != cudaSuccess;
    int inexact = 0;
    double worst = 0;
    for (int r = 0; r < rows; r++)
        for (int b = 0; b < L; b++) {
            const float sc = s8[(size_t)b * rows + r];
            int emax = -1000, nan = 0;
            for (int k = 0; k < 4; k++) {
                const uint8_t e = s4[(size_t)r * (K / 32) + b * 4 + k];
                nan |= e == 0xff;
                emax = std::max(emax, (int)e - 127);
            }
            if (nan) {
                bad += !std::isnan(sc);
                continue;
            }
            for (int j = b * 128; j < b * 128 + 128; j++) {
                const double want = fp4_value(w4.data(), s4.data(), K, r, j);
                const double got = (double)v4_e4m3_to_f32(w8[(size_t)r * K + j]) * (double)sc;
                const int E = (int)s4[(size_t)r * (K / 32) + j / 32] - 127;
                if (got != want) {
                    if (emax - E <= 14)
                        bad++;      /* promised exact */
                    inexact++;
                    worst = std::max(worst, fabs(got - want) / ldexp(6.0, emax));
                }
            }
        }
    char what[96], extra[96];
    snprintf(what, sizeof what, "fp4 -> fp8 %dx%d, exponent spread %d", rows, K, spread);
    snprintf(extra, sizeof extra, "  (%d inexact, worst %.2g of the block max)", inexact, worst);
    verdict(what, bad || worst > 0x1p-10, extra);
}

/* The C model of cuBLASLt's block-scaled product, read through the documented
 * layouts: A = weight (BLK128x128 K-major [rb][L4] when vec == 0, VEC128 M-major
 * [L][rows] when vec == 1), B = activations (VEC128 N-major [L][npad]). */
static void model_gemm(const uint8_t *a, const float *as, int vec, const uint8_t *q, const float *qs, int rows, int K,
                       int n, int npad, float *d)
{
    const int L = K / 128, L4 = v4cu_l4(K);
    for (int j = 0; j < n; j++)
        for (int r = 0; r < rows; r++) {
            float acc = 0;
            for (int b = 0; b < L; b++) {
                float part = 0;
                for (int k = b * 128; k < b * 128 + 128; k++)
                    part += v4_e4m3_to_f32(a[(size_t)r * K + k]) * v4_e4m3_to_f32(q[(size_t)j * K + k]);
                const float sa = vec ? as[(size_t)b * rows + r] : as[(size_t)(r / 128) * L4 + b];
                acc += part * (sa * qs[(size_t)b * npad + j]);
            }
            d[(size_t)j * rows + r] = acc;
        }
}

static void quant_model_case(int fp4, int rows, int K, int n)
{
    const int npad = v4cu_npad(n), L = K / 128;
    void *wv = fp4 ? NULL : rand_weights(V4_W_FP8, (size_t)rows * K);
    std::vector<uint8_t> w4((size_t)rows * K / 2), s4((size_t)rows * (K / 32));
    std::vector<uint8_t> sg((size_t)((rows + 127) / 128) * L);
    for (auto &b : w4)
        b = (uint8_t)rnext(&g_r);
    for (auto &s : s4)
        s = (uint8_t)(120 + rnext(&g_r) % 8);
    for (auto &s : sg)
        s = (uint8_t)(118 + rnext(&g_r) % 10);
    std::vector<float> x((size_t)n * K);
    for (int b = 0; b < n; b++)
        rand_acts(&g_r, &x[(size_t)b * K], K, 1);
    /* exact reference */
    std::vector<float> rq((size_t)n * K + 1), rs((size_t)n * L + 1), ry((size_t)n * rows);
    for (int b = 0; b < n; b++)
        v4_act_quant(&x[(size_t)b * K], K, &rq[(size_t)b * K], &rs[(size_t)b * L]);
    v4_mat W = {fp4 ? V4_W_FP4 : V4_W_FP8, rows, K, fp4 ? (const void *)w4.data() : wv,
                fp4 ? s4.data() : sg.data(), V4_LAYOUT_ROWMAJOR};
    (fp4 ? v4_rows_fp4_scalar : v4_rows_fp8_scalar)(&W, n, rq.data(), rs.data(), NULL, 0, ry.data(), rows, 0, rows);
    /* emulated kernels + the GEMM model + the finishing kernel */
    std::vector<uint8_t> q((size_t)npad * K), w8((size_t)rows * K);
    std::vector<float> qs((size_t)L * npad), as(fp4 ? (size_t)L * rows : (size_t)((rows + 127) / 128) * v4cu_l4(K));
    std::vector<float> d((size_t)npad * rows), y((size_t)n * rows);
    int bad = v4cu_fast_act_quant(x.data(), K, n, npad, K, q.data(), qs.data(), nullptr) != cudaSuccess;
    if (fp4)
        bad += v4cu_fast_fp4_to_fp8(w4.data(), s4.data(), rows, K, w8.data(), as.data(), nullptr) != cudaSuccess;
    else
        bad += v4cu_fast_wscale(sg.data(), rows, K, as.data(), nullptr) != cudaSuccess;
    model_gemm(fp4 ? w8.data() : (const uint8_t *)wv, as.data(), fp4, q.data(), qs.data(), rows, K, n, npad, d.data());
    bad += v4cu_fast_finish(d.data(), rows, n, npad, 0, y.data(), rows, nullptr) != cudaSuccess;
    for (size_t i = 0; i < y.size(); i++)
        bad += y[i] != v4_bf16(y[i]);
    const double cd = calc_diff(ry.data(), y.data(), y.size());
    char what[96], extra[64];
    snprintf(what, sizeof what, "%s product model %dx%d n=%d vs exact", fp4 ? "fp4 (w4a8)" : "fp8 blk128", rows, K, n);
    snprintf(extra, sizeof extra, "  (calc_diff %.2e, bound 1e-6)", cd);
    verdict(what, bad || !(cd <= 1e-6), extra);
    free(wv);
}

/* V4_LIN_BF16: the weight decode, the split, a BF16 GEMM model (FP32 accumulation of
 * bf16 x bf16 products), the hi + lo finish, against the exact product. */
static void bf16_model_case(v4_wtype t, int r8, int rows, int K, int n)
{
    const int npad = v4cu_npad(n), grows = (rows + 7) / 8 * 8;
    const size_t es = t == V4_W_BF16 ? 2 : 1;
    void *w = rand_weights(t, (size_t)rows * K);
    std::vector<uint8_t> wr8((size_t)grows * K * es, 0);
    for (int r = 0; r < rows; r++)
        for (int j = 0; j < K; j++)
            memcpy(&wr8[(((size_t)(r / 8) * K + j) * 8 + r % 8) * es], (uint8_t *)w + ((size_t)r * K + j) * es, es);
    std::vector<uint8_t> sg((size_t)((rows + 127) / 128) * ((K + 127) / 128));
    for (auto &s : sg)
        s = (uint8_t)(118 + rnext(&g_r) % 10);
    std::vector<float> x((size_t)n * K);
    for (int b = 0; b < n; b++)
        for (int j = 0; j < K; j++)
            x[(size_t)b * K + j] = rval(&g_r, (int)(rnext(&g_r) % 16) - 8);
    v4_mat W = {t, rows, K, w, sg.data(), V4_LAYOUT_ROWMAJOR};
    std::vector<float> ry((size_t)n * rows);
    v4_rows_exact_scalar(&W, n, NULL, NULL, x.data(), K, ry.data(), rows, 0, rows);
    std::vector<uint16_t> wb((size_t)rows * K), xb((size_t)2 * npad * K);
    int bad = v4cu_fast_weight_bf16((int)t, r8, r8 ? (const void *)wr8.data() : w, sg.data(), rows, K, wb.data(),
                                    nullptr) != cudaSuccess;
    for (int r = 0; r < rows; r++)      /* the decode is the exact mode's weight value */
        for (int j = 0; j < K; j++) {
            const float want = t == V4_W_BF16 ? v4_bf16_from_bits(((uint16_t *)w)[(size_t)r * K + j])
                                              : v4_bf16(v4_e4m3_to_f32(((uint8_t *)w)[(size_t)r * K + j]) *
                                                        v4_e8m0_to_f32(sg[(size_t)(r / 128) * ((K + 127) / 128) + j / 128]));
            bad += v4_bf16_from_bits(wb[(size_t)r * K + j]) != want;
        }
    bad += v4cu_fast_split_bf16(x.data(), K, n, npad, K, xb.data(), nullptr) != cudaSuccess;
    for (int b = 0; b < n; b++)
        for (int j = 0; j < K; j++) {
            const float v = x[(size_t)b * K + j], hi = v4_bf16_from_bits(xb[(size_t)b * K + j]),
                        lo = v4_bf16_from_bits(xb[((size_t)npad + b) * K + j]);
            bad += hi != v4_bf16(v) || fabsf(v - hi - lo) > fabsf(v) * 0x1p-16f;
        }
    std::vector<float> d((size_t)2 * npad * rows), y((size_t)n * rows);
    for (int c = 0; c < 2 * npad; c++)
        for (int r = 0; r < rows; r++) {
            float acc = 0;
            for (int j = 0; j < K; j++)
                acc += v4_bf16_from_bits(wb[(size_t)r * K + j]) * v4_bf16_from_bits(xb[(size_t)c * K + j]);
            d[(size_t)c * rows + r] = acc;
        }
    bad += v4cu_fast_finish(d.data(), rows, n, npad, 1, y.data(), rows, nullptr) != cudaSuccess;
    const double cd = calc_diff(ry.data(), y.data(), y.size());
    char what[96], extra[64];
    snprintf(what, sizeof what, "bf16 product model (%s %s) %dx%d n=%d vs exact", t == V4_W_FP8 ? "fp8" : "bf16",
             r8 ? "R8" : "rowmajor", rows, K, n);
    snprintf(extra, sizeof extra, "  (calc_diff %.2e, bound 1e-6)", cd);
    verdict(what, bad || !(cd <= 1e-6), extra);
    free(w);
}

static void wscale_case(int rows, int K)
{
    const int rb = (rows + 127) / 128, L = K / 128, L4 = v4cu_l4(K);
    std::vector<uint8_t> g((size_t)rb * L);
    for (auto &s : g)
        s = (uint8_t)rnext(&g_r);
    g[0] = 0;
    g[1 % g.size()] = 0xff;
    std::vector<float> out((size_t)rb * L4, -3.0f);
    int bad = v4cu_fast_wscale(g.data(), rows, K, out.data(), nullptr) != cudaSuccess;
    for (int p = 0; p < rb; p++)
        for (int b = 0; b < L4; b++) {
            const float got = out[(size_t)p * L4 + b];
            const float want = b < L ? v4_e8m0_to_f32(g[(size_t)p * L + b]) : 1.0f;
            bad += !(got == want || (std::isnan(got) && std::isnan(want)));
        }
    char what[96];
    snprintf(what, sizeof what, "weight scales %dx%d -> BLK128x128 [%d][%d]", rows, K, rb, L4);
    verdict(what, bad, NULL);
}

int main()
{
    act_case(1, 256);
    act_case(5, 512);
    act_case(8, 128);
    wscale_case(256, 640);
    wscale_case(384, 128);
    fp4_case(64, 256, 8);
    fp4_case(64, 512, 40);      /* spreads past 14: rounding allowed there, bounded */
    quant_model_case(0, 256, 512, 3);
    quant_model_case(0, 384, 1024, 6);
    quant_model_case(0, 256, 640, 4);      /* L = 5: the BLK128x128 stride pads to 8 */
    quant_model_case(1, 64, 640, 2);
    quant_model_case(1, 256, 512, 5);
    quant_model_case(1, 128, 1024, 8);
    bf16_model_case(V4_W_BF16, 0, 64, 384, 3);
    bf16_model_case(V4_W_FP8, 1, 136, 256, 5);
    bf16_model_case(V4_W_FP8, 0, 128, 512, 4);
    /* launchers refuse what the products cannot take */
    int refused = v4cu_fast_act_quant(nullptr, 0, 1, 4, 100, nullptr, nullptr, nullptr) != cudaSuccess &&
                  v4cu_fast_act_quant(nullptr, 0, 5, 4, 128, nullptr, nullptr, nullptr) != cudaSuccess &&
                  v4cu_fast_fp4_to_fp8(nullptr, nullptr, 4, 96, nullptr, nullptr, nullptr) != cudaSuccess &&
                  v4cu_fast_weight_bf16(4, 0, nullptr, nullptr, 4, 4, nullptr, nullptr) != cudaSuccess;
    verdict("launchers refuse bad shapes", !refused, NULL);
    printf("%s\n", bad_total ? "FAILED" : "all fast-mode kernels ok");
    return bad_total ? 1 : 0;
}
