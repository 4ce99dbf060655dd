/* emulate_moe.cpp - the on-device MoE of the resident step (cuda_moe.cu) on the CPU
 * by the SIMT emulator (simt_emu.h): test_cuda_moe_emulated, every CUDA build.
 *   1. the row-list builder against the host loop it replaces (cuda_step.cu's
 *      host-driven MoE: experts ascending, rows ascending, then k): ties (one expert
 *      twice in a row, as a hash-routed layer's table may give), an expert used by
 *      every row, n = 1, hash-routed ids drawn from a table, an id out of range
 *      (dropped), tiles of 1 and 4;
 *   2. the grouped products + SwiGLU + ordered combination (v4cu_moe_routed and
 *      v4cu_moe_combine) against the per-expert launches of the host-driven path
 *      (act_quant + quant_fp8/fp4 per expert, swiglu, scatter-adds in ascending expert
 *      id from a zeroed y, add_bf16), FP8 and FP4, batch 1 and 5: bit for bit;
 *   3. the combination alone on values whose sums cancel (any other order than the
 *      scatter-adds' shows).
 * Ownership/threads: a throwaway program; memory is freed at exit.
 */
#include <cstdio>
#include <vector>

#include "kernels/cuda/simt_emu.h"
#include "tests/linear_gen.h"
#define V4_CUDA_LINEAR_H
#define V4_CUDA_OPS_H
#include "kernels/cuda/cuda_linear.cu"
#include "kernels/cuda/cuda_ops.cu"
#include "kernels/cuda/cuda_moe.cu"
static const char *cudaGetErrorString(cudaError_t e) { return e ? "emulated CUDA error" : "no error"; }
#include "kernels/cuda/cuda_mma.cu"

/* the driver's random stream: tests/linear_gen.h's splitmix64 from a fixed seed */
static rng g_r = {0x0123456789abcdefull};
static uint64_t rnd() { return rnext(&g_r); }
static float rbf(int e)   /* a bf16-representable value of magnitude ~2^e */
{
    float v = ldexpf((float)(1.0 + (double)(rnd() >> 56) / 256.0), e);
    return rnd() & 1 ? -v : v;
}
static int bad_total;

struct bufs {
    std::vector<int32_t> rows, eid, tile, comb, start, active, nact;
    std::vector<float> wt, gx, gg, gu, gh, go, xs;
    std::vector<double> xq;
    std::vector<uint16_t> xb;
    std::vector<int32_t> tl;
    v4cu_moe_bufs b;
    bufs(int P, int E, int d, int I)
        : rows(P, -9), eid(P, -9), tile(P, -9), comb(P, -9), start(E + 1, -9), active(E, -9), nact(1, -9),
          wt(P, -9.0f), gx((size_t)P * d), gg((size_t)P * I), gu((size_t)P * I), gh((size_t)P * I),
          go((size_t)P * d), xs((size_t)P * ((d > I ? d : I) / 128 + 1) + 1), xq((size_t)P * (d > I ? d : I)),
          xb((size_t)P * (d > I ? d : I)), tl((size_t)v4cu_mma_tile_bound(P, E), -9)
    {
        b = v4cu_moe_bufs{rows.data(), eid.data(), tile.data(), comb.data(), start.data(), active.data(),
                          nact.data(), wt.data(), gx.data(), gg.data(), gu.data(), gh.data(), go.data(),
                          xq.data(), xs.data(), xb.data(), tl.data()};
    }
};

/* The host loop of cuda_step.cu's host-driven MoE, and what the builder derives from it. */
static int lists_case(const char *what, const std::vector<int32_t> &ids, int n, int K, int E, int nbt)
{
    const int P = n * K;
    std::vector<float> w((size_t)P);
    for (auto &v : w)
        v = rbf(-2);
    std::vector<int32_t> rrows, reid, rtile((size_t)P, 0), rstart((size_t)E + 1), ractive, rcomb((size_t)P, -1);
    std::vector<float> rwt;
    for (int x = 0; x < E; x++) {
        rstart[(size_t)x] = (int32_t)rrows.size();
        for (int b = 0; b < n; b++)
            for (int k = 0; k < K; k++)
                if (ids[(size_t)b * K + k] == x) {
                    rrows.push_back(b);
                    rwt.push_back(w[(size_t)b * K + k]);
                    reid.push_back(x);
                }
        const int m = (int)rrows.size() - rstart[(size_t)x];
        if (m)
            ractive.push_back(x);
        for (int r = 0; r < m; r += nbt)
            rtile[(size_t)rstart[(size_t)x] + r] = m - r < nbt ? m - r : nbt;
    }
    const int total = (int)rrows.size();
    rstart[(size_t)E] = total;
    std::vector<int> fill((size_t)n, 0);
    for (int s = 0; s < total; s++)   /* the scatter-adds' order per output row */
        rcomb[(size_t)rrows[(size_t)s] * K + fill[(size_t)rrows[(size_t)s]]++] = s;
    bufs B(P, E, 8, 8);
    int bad = v4cu_moe_lists(ids.data(), w.data(), n, K, E, nbt, &B.b, nullptr) != cudaSuccess;
    for (int s = 0; s < P; s++) {
        if (s < total)
            bad += B.rows[(size_t)s] != rrows[(size_t)s] || B.eid[(size_t)s] != reid[(size_t)s] ||
                   memcmp(&B.wt[(size_t)s], &rwt[(size_t)s], 4) != 0;
        else
            bad += B.rows[(size_t)s] != -1;
        bad += B.tile[(size_t)s] != rtile[(size_t)s] || B.comb[(size_t)s] != rcomb[(size_t)s];
    }
    for (int x = 0; x <= E; x++)
        bad += B.start[(size_t)x] != rstart[(size_t)x];
    bad += B.nact[0] != (int)ractive.size();
    for (size_t i = 0; i < ractive.size(); i++)
        bad += B.active[i] != ractive[i];
    printf("%-58s %s (%d bad)\n", what, bad ? "FAIL" : "ok", bad);
    bad_total += bad;
    return bad;
}

static void lists_cases()
{
    /* ties: expert 2 twice in row 0 and row 2, rows sharing experts */
    lists_case("lists: ties (one expert twice in a row), n=3", {2, 5, 2, 0, 5, 2, 1, 7, 2, 2, 7, 1}, 3, 4, 8, 4);
    lists_case("lists: ties, tiles of 1", {2, 5, 2, 0, 5, 2, 1, 7, 2, 2, 7, 1}, 3, 4, 8, 1);
    /* an expert used by every row (more rows than a tile) */
    std::vector<int32_t> every;
    for (int b = 0; b < 9; b++)
        for (int k = 0; k < 3; k++)
            every.push_back(k == 1 ? 4 : (int32_t)(rnd() % 16));
    lists_case("lists: an expert used by all 9 rows", every, 9, 3, 16, 4);
    lists_case("lists: n=1", {11, 3, 14, 6, 0, 9}, 1, 6, 16, 1);
    lists_case("lists: n=1, the last expert and expert 0", {15, 0, 8, 1}, 1, 4, 16, 1);
    /* hash-routed layer: ids from a token -> experts table (repeats across rows) */
    std::vector<int32_t> table(32 * 6), hashed;
    for (auto &v : table)
        v = (int32_t)(rnd() % 64);
    for (int b = 0; b < 8; b++) {
        const int tok = (int)(rnd() % 32);
        for (int k = 0; k < 6; k++)
            hashed.push_back(table[(size_t)tok * 6 + k]);
    }
    lists_case("lists: hash-routed ids, n=8 K=6 E=64", hashed, 8, 6, 64, 4);
    std::vector<int32_t> big((size_t)256 * 6);
    for (auto &v : big)
        v = (int32_t)(rnd() % 256);
    lists_case("lists: n=256 K=6 E=256", big, 256, 6, 256, 4);
    lists_case("lists: an id out of range is dropped", {3, 17, 1, 3, -1, 2}, 2, 3, 16, 4);
}

/* E random experts (w1/w3 I x d, w2 d x I; FP4 or FP8 without NaN codes) and their
 * pointer table [6][E].  exact_sums: FP8 codes in +-[1, 3.75] and every scale 2^0, so
 * that products of small-integer activations sum exactly in float (mma_case); misalign:
 * every weight one byte past a 16-byte boundary (the kernels' byte-load paths). */
struct experts {
    std::vector<std::vector<uint8_t>> W, S;
    std::vector<const uint8_t *> tab;
    experts(int fp4, int E, int d, int I, int exact_sums, int misalign = 0)
        : W(3 * (size_t)E), S(3 * (size_t)E), tab(6 * (size_t)E)
    {
        for (int x = 0; x < E; x++)
            for (int k = 0; k < 3; k++) {
                const int rows = k == 2 ? d : I, cols = k == 2 ? I : d;
                auto &w = W[(size_t)x * 3 + k];
                auto &s = S[(size_t)x * 3 + k];
                w.resize((fp4 ? (size_t)rows * cols / 2 : (size_t)rows * cols) + (misalign ? 16 : 0));
                for (auto &b : w) {
                    b = (uint8_t)rnd();
                    if (!fp4 && exact_sums)
                        b = (uint8_t)((b & 0x80) | (0x38 + (b & 0x0f)));   /* e4m3 in [1, 3.75]: multiples of 1/8 */
                    if (!fp4 && (b & 0x7f) == 0x7f)
                        b = 0x21;
                }
                s.resize(fp4 ? (size_t)rows * (cols / 32) : (size_t)((rows + 127) / 128) * ((cols + 127) / 128));
                for (auto &v : s)
                    v = exact_sums ? (uint8_t)127 : (uint8_t)(120 + rnd() % 10);
                const uint8_t *wp = w.data();
                if (misalign)
                    wp += (17 - (uintptr_t)wp % 16) % 16;   /* = 1 mod 16, within the 16 extra bytes */
                tab[(size_t)(2 * k) * E + x] = wp;
                tab[(size_t)(2 * k + 1) * E + x] = s.data();
            }
    }
};

/* Grouped path vs the host-driven per-expert launches, bit for bit. */
static void grouped_case(int fp4, int n, int K, int E, int d, int I)
{
    const int P = n * K;
    const experts X(fp4, E, d, I, 0);
    const std::vector<const uint8_t *> &tab = X.tab;
    std::vector<float> x((size_t)n * d), sh((size_t)n * d), rw((size_t)P);
    std::vector<int32_t> ids((size_t)P);
    for (auto &v : x)
        v = rbf((int)(rnd() % 6) - 3);
    for (auto &v : sh)
        v = rbf((int)(rnd() % 6) - 8);
    for (int b = 0; b < n; b++)
        for (int k = 0; k < K; k++) {
            int32_t id = (int32_t)(rnd() % E);
            if (b > 0 && k == 0)
                id = ids[0];   /* an expert shared by every row */
            ids[(size_t)b * K + k] = id;
            rw[(size_t)b * K + k] = rbf(-1);
        }
    const float lim = 10.0f;
    /* reference: cuda_step.cu's host-driven path, expert by expert */
    std::vector<float> y((size_t)n * d, 0.0f), ref((size_t)n * d);
    for (int e = 0; e < E; e++) {
        std::vector<int32_t> rows;
        std::vector<float> wt;
        for (int b = 0; b < n; b++)
            for (int k = 0; k < K; k++)
                if (ids[(size_t)b * K + k] == e) {
                    rows.push_back(b);
                    wt.push_back(rw[(size_t)b * K + k]);
                }
        const int m = (int)rows.size();
        if (!m)
            continue;
        std::vector<float> ex((size_t)m * d), g((size_t)m * I), u((size_t)m * I), h((size_t)m * I), o((size_t)m * d);
        for (int r = 0; r < m; r++)
            memcpy(&ex[(size_t)r * d], &x[(size_t)rows[(size_t)r] * d], sizeof(float) * d);
        std::vector<double> xq((size_t)m * (d > I ? d : I));
        std::vector<float> xs((size_t)m * ((d > I ? d : I) / 128) + 1);
        auto lin = [&](int k, int rows_, int cols, const float *in, float *out) {
            v4cu_act_quant(in, m, cols, xq.data(), xs.data(), nullptr);
            (fp4 ? v4cu_quant_fp4 : v4cu_quant_fp8)(tab[(size_t)(2 * k) * E + e], tab[(size_t)(2 * k + 1) * E + e],
                                                    rows_, cols, m, xq.data(), xs.data(), out, nullptr);
        };
        lin(0, I, d, ex.data(), g.data());
        lin(1, I, d, ex.data(), u.data());
        v4cu_swiglu(g.data(), u.data(), I, lim, wt.data(), h.data(), m, nullptr);
        lin(2, d, I, h.data(), o.data());
        v4cu_scatter_add(y.data(), d, o.data(), rows.data(), m, nullptr);
    }
    v4cu_add_bf16(y.data(), sh.data(), ref.data(), (long)n * d, nullptr);
    /* the grouped path */
    bufs B(P, E, d, I);
    std::vector<float> out((size_t)n * d, -7.0f);
    int bad = v4cu_moe_routed(&B.b, tab.data(), fp4, E, d, I, lim, ids.data(), rw.data(), x.data(), n, K, nullptr) !=
                      cudaSuccess ||
              v4cu_moe_combine(B.go.data(), d, B.comb.data(), n, K, sh.data(), out.data(), nullptr) != cudaSuccess;
    for (size_t i = 0; i < out.size(); i++)
        if (memcmp(&out[i], &ref[i], 4) && bad++ < 3)
            printf("  out[%zu]: host path %a grouped %a\n", i, (double)ref[i], (double)out[i]);
    char what[96];
    snprintf(what, sizeof what, "grouped %s n=%d K=%d E=%d d=%d I=%d vs per expert", fp4 ? "fp4" : "fp8", n, K, E, d,
             I);
    printf("%-58s %s (%d of %zu differ)\n", what, bad ? "FAIL" : "ok", bad, out.size());
    bad_total += bad;
}

/* The tensor-core grouped path (cuda_mma.h) against the exact grouped path on the same
 * inputs.  exact_sums: x small integers and weights with scale 1 (FP4) or a power-of-two
 * grid (FP8) chosen so every sum of the w1/w3 products is exact in float: those outputs
 * must then be bit-identical (any tiling, staging, masking or layout fault shows as a
 * wrong sum, not as rounding), and the tile list must be the 16-pair tiles of each
 * expert; otherwise random inputs.  Always: the final outputs within calc_diff 1e-5 of
 * the exact path's, the same NaN/Inf pattern. */
static void mma_case(int fp4, int exact_sums, int n, int K, int E, int d, int I, int misalign = 0)
{
    const int P = n * K;
    const experts X(fp4, E, d, I, exact_sums, misalign);
    const std::vector<const uint8_t *> &tab = X.tab;
    std::vector<float> x((size_t)n * d), sh((size_t)n * d), rw((size_t)P);
    std::vector<int32_t> ids((size_t)P);
    for (auto &v : x)   /* exact: integers |x| <= 15 (e4m3 keeps x * 16 exactly) */
        v = exact_sums ? (float)((int)(rnd() % 31) - 15) : rbf((int)(rnd() % 6) - 3);
    for (auto &v : sh)
        v = rbf((int)(rnd() % 6) - 8);
    for (int b = 0; b < n; b++)
        for (int k = 0; k < K; k++) {
            ids[(size_t)b * K + k] = (int32_t)(rnd() % E);
            rw[(size_t)b * K + k] = rbf(-1);
        }
    if (exact_sums)
        for (int j = 0; j < d; j++)
            x[(size_t)j] = (float)(j % 31) - 15.0f;   /* amax 15 in every block of row 0 */
    const float lim = 10.0f;
    bufs R(P, E, d, I), T(P, E, d, I);
    std::vector<float> ref((size_t)n * d, -7.0f), out((size_t)n * d, -7.0f);
    int bad = v4cu_moe_routed(&R.b, tab.data(), fp4, E, d, I, lim, ids.data(), rw.data(), x.data(), n, K, nullptr) !=
                      cudaSuccess ||
              v4cu_moe_combine(R.go.data(), d, R.comb.data(), n, K, sh.data(), ref.data(), nullptr) != cudaSuccess ||
              v4cu_moe_routed_mma(&T.b, tab.data(), fp4, E, d, I, lim, ids.data(), rw.data(), x.data(), n, K,
                                  nullptr) != cudaSuccess ||
              v4cu_moe_combine(T.go.data(), d, T.comb.data(), n, K, sh.data(), out.data(), nullptr) != cudaSuccess;
    /* the tile list: each expert's pairs from its first slot in steps of 16 */
    std::vector<int32_t> rtl;
    for (int e = 0; e < E; e++)
        for (int s = T.start[(size_t)e]; s < T.start[(size_t)e + 1]; s += 16)
            rtl.push_back(s);
    int tiles_bad = 0, straddle = 0;
    for (size_t t = 0; t < T.tl.size(); t++)
        tiles_bad += T.tl[t] != (t < rtl.size() ? rtl[t] : -1);
    for (int e = 0; e < E; e++)
        straddle += T.start[(size_t)e + 1] - T.start[(size_t)e] > 16;
    int exact_bad = 0;
    if (exact_sums)
        for (size_t i = 0; i < (size_t)P * I; i++)
            exact_bad += memcmp(&R.gg[i], &T.gg[i], 4) != 0 || memcmp(&R.gu[i], &T.gu[i], 4) != 0;
    long pat = 0;
    const double cd = v4_calc_diff(ref.data(), out.data(), out.size(), &pat);
    bad += tiles_bad + exact_bad + (pat != 0) + !(cd <= 1e-5) + (straddle == 0);
    char what[120];
    snprintf(what, sizeof what, "tensor-core %s%s%s n=%d K=%d E=%d d=%d I=%d vs exact grouped", fp4 ? "fp4" : "fp8",
             exact_sums ? " (exact sums)" : "", misalign ? " (misaligned)" : "", n, K, E, d, I);
    char eq[64] = "";
    if (exact_sums)
        snprintf(eq, sizeof eq, "; w1/w3 %d of %zu differ", exact_bad, (size_t)P * I);
    printf("%-58s %s (calc_diff %.3g; %zu tiles, %d experts over 16 pairs; tile list %d bad%s; %ld NaN/Inf "
           "mismatches)\n",
           what, bad ? "FAIL" : "ok", cd, rtl.size(), straddle, tiles_bad, eq, pat);
    bad_total += bad != 0;
}

/* The combination alone on order-sensitive values (+-2^25 and small ones, so partial
 * sums cancel): against the scatter-adds of the host path in ascending expert id. */
static void combine_case(int n, int K, int E, int d)
{
    const int P = n * K;
    std::vector<int32_t> ids((size_t)P);
    std::vector<float> w((size_t)P, 1.0f), sh((size_t)n * d), y((size_t)n * d, 0.0f), ref((size_t)n * d);
    for (auto &v : ids)
        v = (int32_t)(rnd() % E);
    for (auto &v : sh)
        v = rbf((int)(rnd() % 8) - 12);
    bufs B(P, E, d, 8);
    int bad = v4cu_moe_lists(ids.data(), w.data(), n, K, E, 4, &B.b, nullptr) != cudaSuccess;
    for (auto &v : B.go) {   /* (2^25 + x) - 2^25 = 0 but (2^25 - 2^25) + x = x */
        const int r = (int)(rnd() % 3);
        v = r == 0 ? 0x1p25f : r == 1 ? -0x1p25f : rbf((int)(rnd() % 4));
    }
    for (int e = 0; e < E; e++) {
        const int s0 = B.start[(size_t)e], m = B.start[(size_t)e + 1] - s0;
        v4cu_scatter_add(y.data(), d, &B.go[(size_t)s0 * d], &B.rows[(size_t)s0], m, nullptr);
    }
    v4cu_add_bf16(y.data(), sh.data(), ref.data(), (long)n * d, nullptr);
    std::vector<float> out((size_t)n * d, -7.0f);
    bad += v4cu_moe_combine(B.go.data(), d, B.comb.data(), n, K, sh.data(), out.data(), nullptr) != cudaSuccess;
    for (size_t i = 0; i < out.size(); i++)
        if (memcmp(&out[i], &ref[i], 4) && bad++ < 3)
            printf("  out[%zu]: scatter-adds %a combine %a\n", i, (double)ref[i], (double)out[i]);
    char what[96];
    snprintf(what, sizeof what, "combine n=%d K=%d E=%d d=%d, cancelling sums", n, K, E, d);
    printf("%-58s %s (%d of %zu differ)\n", what, bad ? "FAIL" : "ok", bad, out.size());
    bad_total += bad;
}

int main()
{
    setvbuf(stdout, NULL, _IONBF, 0);
    lists_cases();
    grouped_case(1, 1, 4, 8, 256, 128);
    grouped_case(1, 5, 4, 8, 256, 128);
    grouped_case(0, 1, 3, 6, 256, 256);
    grouped_case(0, 5, 3, 6, 256, 128);
    mma_case(1, 1, 24, 4, 5, 256, 128);
    mma_case(0, 1, 24, 4, 5, 256, 128);
    mma_case(1, 1, 20, 4, 5, 256, 128, 1);
    mma_case(0, 1, 20, 4, 5, 256, 128, 1);
    mma_case(1, 0, 40, 6, 8, 256, 256);
    mma_case(0, 0, 33, 3, 4, 384, 128);
    {
        char why[240] = "";
        const int r = v4cu_mma_selftest(nullptr, why, sizeof why);
        printf("%-58s %s %s\n", "tensor-core self-test (as the engine runs it)", r == 1 ? "ok" : "FAIL", why);
        bad_total += r != 1;
    }
    combine_case(7, 6, 5, 300);
    combine_case(1, 4, 16, 256);
    printf("%s: %d mismatches\n", bad_total ? "FAILED" : "all equal", bad_total);
    return bad_total != 0;
}
