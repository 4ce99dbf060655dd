/* emulate_ops.cpp - runs the CUDA kernels of cuda_ops.cu and cuda_attn.cu on the CPU
 * (simt_emu.h), through their launchers (grid and block arithmetic included), against
 * the C functions they follow (kernels/v4/ops.c, mhc.c, moe.c,
 * attention.c, compressor.c, indexer.c):
 * every output must be bit-identical, except the RMS reductions on inputs whose
 * sum of squares is not exact in double (checked within 1e-6 relative; cuda_ops.h).
 * Cases include NaN/inf/zero/subnormal-range values for the block quantizers, ties
 * for the router's top-k, the indexer's top-k on n = 1..6000 (below, at and above k,
 * ragged against the block) with ties, all-equal, -inf/+-0/inf, NaN (placed as
 * v4_topk places them) and full-range floats, hash routing, large positions for
 * RoPE/YaRN, masked and all-masked attention chunks, dot products whose double sums
 * round (full floats, cancelling pairs: a changed summation order fails), ragged
 * key tiles, -inf compressor rows, and planted
 * kernel bugs are caught (a self-check at the end flips one value).
 * ctest: test_cuda_ops_emulated (CMakeLists.txt, when V4_CUDA is ON).
 * Ownership/threads: a throwaway program; memory is freed at exit.
 */
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <algorithm>
#include <string>

#include "kernels/cuda/simt_emu.h"
#include "tests/linear_gen.h"
#define V4_CUDA_OPS_H   /* the kernels need only the emulator's types */
#define V4_CUDA_ATTN_H
#include "kernels/cuda/cuda_ops.cu"
#include "kernels/cuda/cuda_attn.cu"

extern "C" {
#include "kernels/codec.h"
#include "kernels/v4/ops.h"
}

/* the driver's random stream: tests/linear_gen.h's splitmix64 from a fixed seed */
static rng g_r = {0x243f6a8885a308d3ull};
static uint64_t rnd() { return rnext(&g_r); }
static double unif() { return (double)(rnd() >> 11) * 0x1p-53; }
/* a bf16 value with exponent in [lo, hi], random sign */
static float rbf(int lo, int hi)
{
    float v = ldexpf((float)(1.0 + unif()), lo + (int)(rnd() % (uint64_t)(hi - lo + 1)));
    return v4_bf16(rnd() & 1 ? -v : v);
}
/* a full-mantissa float with exponent in [lo, hi], random sign: sums of products of
 * these round in double, so a changed summation order shows */
static float rfull(int lo, int hi)
{
    const float v = ldexpf((float)(1.0 + unif()), lo + (int)(rnd() % (uint64_t)(hi - lo + 1)));
    return rnd() & 1 ? -v : v;
}
/* Full mode of the dot-product cases: x[1] and x[d-2] = +-2^24..2^26 (key: opposite
 * signs; query: the same), so each dot has two products near 2^50 that cancel
 * exactly and leave the rounding of every partial sum in between visible. */
static void cancel_pair(float *x, int d, int key)
{
    const float big = rfull(24, 25);
    x[1] = big;
    x[d - 2] = key ? -big : big;
}
static float rnorm() { return (float)((unif() + unif() + unif() + unif() - 2.0) * 1.7); }

static int bad_total;

/* A launcher's status: its argument checks must accept every case here. */
#define CK(call)                                                                                                    \
    do {                                                                                                            \
        if ((call) != cudaSuccess) {                                                                                \
            printf("  %s: refused its arguments (line %d)\n", #call, __LINE__);                                    \
            bad_total++;                                                                                            \
        }                                                                                                           \
    } while (0)

/* Bitwise comparison (NaN == NaN); tol > 0: relative tolerance instead, counting
 * the bit differences separately. */
static void cmp(const char *what, const float *ref, const float *got, size_t n, double tol = 0.0)
{
    size_t bad = 0, diff = 0;
    for (size_t i = 0; i < n; i++) {
        float a = ref[i], g = got[i];
        if (!memcmp(&a, &g, 4) || (std::isnan(a) && std::isnan(g)))
            continue;
        diff++;
        double rel = fabs((double)a - (double)g) / (fabs((double)a) > 1e-30 ? fabs((double)a) : 1e-30);
        if (tol > 0.0 && rel <= tol)
            continue;
        if (bad++ < 3)
            printf("  %s [%zu] ref=%a got=%a\n", what, i, (double)a, (double)g);
    }
    if (tol > 0.0)
        printf("%-48s %s (%zu of %zu differ in bits, %zu beyond %.0e)\n", what, bad ? "FAIL" : "ok", diff, n, bad, tol);
    else
        printf("%-48s %s (%zu of %zu differ)\n", what, bad ? "FAIL" : "ok", bad, n);
    bad_total += (int)bad;
}

static void case_embed()
{
    const int n = 3, dim = 300, hc = 4, vocab = 50;
    std::vector<uint16_t> emb((size_t)vocab * dim);
    for (auto &e : emb)
        e = v4_bf16_bits(rbf(-8, 4));
    std::vector<int32_t> tok = {7, 0, 49};
    std::vector<float> X((size_t)n * hc * dim, -1.0f), R(X.size());
    for (int b = 0; b < n; b++)
        for (int j = 0; j < hc; j++)
            for (int i = 0; i < dim; i++)
                R[((size_t)b * hc + j) * dim + i] = v4_bf16_from_bits(emb[(size_t)tok[b] * dim + i]);
    CK(v4cu_embed(emb.data(), tok.data(), n, dim, hc, X.data(), nullptr));
    cmp("embed n=3 dim=300 hc=4", R.data(), X.data(), X.size());
}

static void case_rmsnorm(int dim, int lo, int hi, double tol)
{
    const int n = 3, ld = dim + 5;
    std::vector<float> x((size_t)n * ld), w(dim), y((size_t)n * ld, -3.0f), ry((size_t)n * ld, -3.0f);
    for (auto &v : x)
        v = rbf(lo, hi);
    for (auto &v : w)
        v = rbf(-2, 1);
    for (int b = 0; b < n; b++)
        v4_rmsnorm(&x[(size_t)b * ld], w.data(), dim, 1e-6f, &ry[(size_t)b * ld]);
    CK(v4cu_rmsnorm(x.data(), ld, w.data(), dim, 1e-6f, y.data(), ld, n, nullptr));
    char what[96];
    snprintf(what, sizeof what, "rmsnorm dim=%d exps [%d,%d]", dim, lo, hi);
    cmp(what, ry.data(), y.data(), y.size(), tol);
    /* in place */
    std::vector<float> xi = x;
    CK(v4cu_rmsnorm(xi.data(), ld, w.data(), dim, 1e-6f, xi.data(), ld, n, nullptr));
    for (int b = 0; b < n; b++)
        for (int i = dim; i < ld; i++)
            ry[(size_t)b * ld + i] = x[(size_t)b * ld + i];   /* padding untouched */
    snprintf(what, sizeof what, "rmsnorm in place dim=%d", dim);
    cmp(what, ry.data(), xi.data(), xi.size(), tol);
}

static void case_hc(int hc, int dim)
{
    const int n = 3, mix = (2 + hc) * hc, hd = hc * dim;
    std::vector<float> X((size_t)n * hd), mixes((size_t)n * mix), scale(3), base(mix);
    for (auto &v : X)
        v = rbf(-6, 3);
    for (auto &v : mixes)
        v = rnorm();
    for (auto &v : scale)
        v = (float)(0.5 + unif());
    for (auto &v : base)
        v = rnorm() * 0.3f;
    /* rms_scale */
    std::vector<float> rm = mixes, gm = mixes;
    for (int b = 0; b < n; b++) {
        float r = v4_rms_factor(&X[(size_t)b * hd], hd, 1e-6f);
        for (int m = 0; m < mix; m++)
            rm[(size_t)b * mix + m] = rm[(size_t)b * mix + m] * r;
    }
    CK(v4cu_rms_scale(X.data(), hd, 1e-6f, gm.data(), mix, n, nullptr));
    char what[96];
    snprintf(what, sizeof what, "rms_scale hc=%d dim=%d", hc, dim);
    cmp(what, rm.data(), gm.data(), rm.size());
    /* weights */
    std::vector<float> rpre((size_t)n * hc), rpost((size_t)n * hc), rcomb((size_t)n * hc * hc);
    std::vector<float> gpre(rpre.size(), -1), gpost(rpost.size(), -1), gcomb(rcomb.size(), -1);
    for (int b = 0; b < n; b++)
        v4_hc_weights(&rm[(size_t)b * mix], scale.data(), base.data(), hc, 20, 1e-6f, &rpre[(size_t)b * hc],
                      &rpost[(size_t)b * hc], &rcomb[(size_t)b * hc * hc]);
    CK(v4cu_hc_weights(rm.data(), scale.data(), base.data(), hc, 20, 1e-6f, gpre.data(), gpost.data(), gcomb.data(), n,
                       nullptr));
    snprintf(what, sizeof what, "hc_weights pre/post/comb hc=%d", hc);
    rpre.insert(rpre.end(), rpost.begin(), rpost.end());
    rpre.insert(rpre.end(), rcomb.begin(), rcomb.end());
    gpre.insert(gpre.end(), gpost.begin(), gpost.end());
    gpre.insert(gpre.end(), gcomb.begin(), gcomb.end());
    cmp(what, rpre.data(), gpre.data(), rpre.size());
    /* reduce (pre = the first n*hc of rpre) */
    std::vector<float> ru((size_t)n * dim), gu((size_t)n * dim, -1);
    for (int b = 0; b < n; b++)
        v4_hc_reduce(&X[(size_t)b * hd], &rpre[(size_t)b * hc], hc, dim, &ru[(size_t)b * dim]);
    CK(v4cu_hc_reduce(X.data(), rpre.data(), hc, dim, gu.data(), n, nullptr));
    snprintf(what, sizeof what, "hc_reduce hc=%d dim=%d", hc, dim);
    cmp(what, ru.data(), gu.data(), ru.size());
    /* post */
    std::vector<float> out((size_t)n * dim), RX = X, GX = X;
    for (auto &v : out)
        v = rbf(-5, 2);
    for (int b = 0; b < n; b++)
        v4_hc_post_row(&RX[(size_t)b * hd], &out[(size_t)b * dim], &rpost[(size_t)b * hc], &rcomb[(size_t)b * hc * hc],
                       hc, dim);
    CK(v4cu_hc_post(GX.data(), out.data(), rpost.data(), rcomb.data(), hc, dim, n, nullptr));
    snprintf(what, sizeof what, "hc_post hc=%d dim=%d", hc, dim);
    cmp(what, RX.data(), GX.data(), RX.size());
}

static void case_rope(int yarn, int inverse)
{
    const int n = 3, H = 5, hd = 96, rd = 64, np = rd / 2;
    std::vector<float> freqs(np);
    if (yarn)
        v4_rope_freqs(freqs.data(), rd, 160000, 16, 65536, 32, 1);
    else
        v4_rope_freqs(freqs.data(), rd, 10000, 1.0, 0, 0, 0);
    std::vector<int32_t> pos = {0, 77, 1000003};
    std::vector<float> v((size_t)n * H * hd);
    for (auto &x : v)
        x = rbf(-7, 3);
    std::vector<float> R = v, G = v;
    for (int b = 0; b < n; b++)
        for (int h = 0; h < H; h++)
            v4_rope(&R[((size_t)b * H + h) * hd + hd - rd], np, freqs.data(), pos[b], inverse);
    CK(v4cu_rope(G.data() + hd - rd, n * H, hd, np, freqs.data(), pos.data(), H, inverse, nullptr));
    char what[96];
    snprintf(what, sizeof what, "rope %s%s 3x5 heads", yarn ? "yarn" : "plain", inverse ? " inverse" : "");
    cmp(what, R.data(), G.data(), R.size());
}

static void case_hadamard(int n)
{
    const int nvec = 4, stride = n + 3;
    std::vector<float> v((size_t)nvec * stride);
    for (auto &x : v)
        x = rbf(-9, 4);
    std::vector<float> R = v, G = v;
    for (int k = 0; k < nvec; k++)
        v4_hadamard(&R[(size_t)k * stride], n);
    CK(v4cu_hadamard(G.data(), nvec, stride, n, nullptr));
    char what[96];
    snprintf(what, sizeof what, "hadamard n=%d", n);
    cmp(what, R.data(), G.data(), R.size());
}

static void case_qdq(int fp4, int n, int block)
{
    const int nvec = 5, stride = n + 16;
    std::vector<float> v((size_t)nvec * stride);
    for (size_t i = 0; i < v.size(); i++) {
        const int blk = (int)((i % stride) / block);
        v[i] = rnd() % 9 == 0 ? 0.0f : rbf(-30 + blk * 7 + (int)(i / stride) * 3, -24 + blk * 7 + (int)(i / stride) * 3);
    }
    v[3] = NAN;                         /* a NaN in a block */
    v[(size_t)stride + 1] = INFINITY;   /* inf makes its block's scale inf */
    for (int j = 0; j < block; j++)     /* an all-zero block: the amax floor */
        v[(size_t)2 * stride + j] = 0.0f;
    for (int j = 0; j < block; j++)     /* a block of values far below the floor */
        v[(size_t)3 * stride + j] = rbf(-140, -127);
    std::vector<float> R = v, G = v;
    for (int k = 0; k < nvec; k++)
        (fp4 ? v4_fp4_sim : v4_fp8_sim)(&R[(size_t)k * stride], n, block);
    CK(v4cu_block_qdq(G.data(), nvec, stride, n, block, fp4, nullptr));
    char what[96];
    snprintf(what, sizeof what, "%s_sim n=%d block=%d (nan/inf/zero/tiny)", fp4 ? "fp4" : "fp8", n, block);
    cmp(what, R.data(), G.data(), R.size());
}

static void case_route(int hash, int E, int K)
{
    const int n = 4, vocab = 20;
    std::vector<float> z((size_t)n * E), bias(E);
    for (auto &x : z)
        x = rnorm() * 3.0f;
    z[5] = 40.0f;                       /* softplus above 20: identity */
    for (int e = 0; e < E; e++)
        bias[e] = e % 7 == 0 ? 0.0f : rnorm() * 0.01f;
    for (int e = 8; e < 16; e++) {      /* ties among the best: equal scores and biases */
        z[(size_t)E + e] = 30.0f;
        bias[e] = 0.0f;
    }
    std::vector<int32_t> tab((size_t)vocab * K), tok = {3, 19, 0, 7};
    for (auto &t : tab)
        t = (int32_t)(rnd() % (uint64_t)E);
    std::vector<float> rz = z, gz = z, rw((size_t)n * K), gw((size_t)n * K, -1);
    std::vector<int> rs((size_t)n * K);
    std::vector<int32_t> gs((size_t)n * K, -1);
    for (int b = 0; b < n; b++)
        v4_moe_route(&rz[(size_t)b * E], E, K, bias.data(), hash ? &tab[(size_t)tok[b] * K] : NULL, 1.5f,
                     &rs[(size_t)b * K], &rw[(size_t)b * K]);
    CK(v4cu_route(gz.data(), E, K, bias.data(), hash ? tab.data() : NULL, tok.data(), 1.5f, gs.data(), gw.data(), n,
                  nullptr));
    int sbad = 0;
    for (size_t i = 0; i < rs.size(); i++)
        sbad += rs[i] != gs[i];
    char what[96];
    snprintf(what, sizeof what, "route %s E=%d K=%d: %d ids differ; scores+weights", hash ? "hash" : "topk", E, K,
             sbad);
    bad_total += sbad;
    rz.insert(rz.end(), rw.begin(), rw.end());
    gz.insert(gz.end(), gw.begin(), gw.end());
    cmp(what, rz.data(), gz.data(), rz.size());
}

static void case_swiglu(float lim, int weighted)
{
    const int n = 3, I = 300;
    std::vector<float> g((size_t)n * I), u((size_t)n * I), wt = {0.25f, 1.7f, 0.03f};
    for (size_t i = 0; i < g.size(); i++) {
        g[i] = rnorm() * 6.0f;
        u[i] = rnorm() * 6.0f;
    }
    std::vector<float> R((size_t)n * I), G((size_t)n * I, -1);
    for (int b = 0; b < n; b++)
        v4_swiglu(&g[(size_t)b * I], &u[(size_t)b * I], I, lim, weighted ? &wt[b] : NULL, &R[(size_t)b * I]);
    CK(v4cu_swiglu(g.data(), u.data(), I, lim, weighted ? wt.data() : NULL, G.data(), n, nullptr));
    char what[96];
    snprintf(what, sizeof what, "swiglu lim=%g %s", (double)lim, weighted ? "weighted" : "shared");
    cmp(what, R.data(), G.data(), R.size());
}


static void case_head_rms(int hd)
{
    const int nvec = 6;
    std::vector<float> v((size_t)nvec * hd);
    for (auto &x : v)
        x = rbf(-8, 4);
    std::vector<float> R = v, G = v;
    for (int k = 0; k < nvec; k++)
        v4_head_rms_bf16(&R[(size_t)k * hd], hd, 1e-6f);
    CK(v4cu_head_rms_bf16(G.data(), nvec, hd, 1e-6f, nullptr));
    char what[96];
    snprintf(what, sizeof what, "head_rms_bf16 hd=%d", hd);
    cmp(what, R.data(), G.data(), R.size());
}

static void case_sparse_attn(int hd, int full = 0)
{
    const int n = 3, H = 3, npool = 300, lmax = 230;
    std::vector<float> pool((size_t)npool * hd), q((size_t)n * H * hd), sink(H);
    for (auto &x : pool)
        x = full ? rfull(-20, 1) : rbf(-7, 1);
    for (auto &x : q)
        x = full ? rfull(-20, 0) : rbf(-6, 0);
    for (auto &x : sink)
        x = rnorm();
    for (int r = 0; full && r < npool; r++)
        cancel_pair(&pool[(size_t)r * hd], hd, 1);
    for (int r = 0; full && r < n * H; r++)
        cancel_pair(&q[(size_t)r * hd], hd, 0);
    /* the device reads bf16 rows (the sequence caches' precision): the pool as bf16
     * bits, the reference on float rows holding the same values */
    std::vector<uint16_t> pool16(pool.size());
    for (size_t i = 0; i < pool.size(); i++) {
        pool16[i] = v4_bf16_bits(pool[i]);
        pool[i] = v4_bf16_from_bits(pool16[i]);
    }
    std::vector<const float *> cand((size_t)n * lmax, nullptr);
    std::vector<int32_t> len = {lmax, 40, 64 + 30};
    for (int c = 20; c < len[0]; c++)            /* row 0: 20 masked window slots first */
        cand[c] = &pool[(size_t)((c * 7) % npool) * hd];
    for (int c = 0; c < len[1]; c++)             /* row 1: shorter than a chunk */
        cand[(size_t)lmax + c] = &pool[(size_t)((c * 13 + 5) % npool) * hd];
    for (int c = 64; c < len[2]; c++)            /* row 2: a fully masked first chunk */
        cand[(size_t)2 * lmax + c] = &pool[(size_t)((c * 3 + 1) % npool) * hd];
    const float scale = (float)pow((double)hd, -0.5);
    std::vector<float> R((size_t)n * H * hd), G((size_t)n * H * hd, -1);
    for (int b = 0; b < n; b++)
        for (int h = 0; h < H; h++)
            v4_sparse_attn_head(&q[((size_t)b * H + h) * hd], &cand[(size_t)b * lmax], len[b], hd, scale, sink[h],
                                &R[((size_t)b * H + h) * hd]);
    std::vector<const uint16_t *> cand16(cand.size(), nullptr);
    for (size_t c = 0; c < cand.size(); c++)
        cand16[c] = cand[c] ? pool16.data() + (cand[c] - pool.data()) : nullptr;
    CK(v4cu_sparse_attn(q.data(), cand16.data(), len.data(), lmax, n, H, hd, scale, sink.data(), G.data(), nullptr));
    char what[96];
    snprintf(what, sizeof what, "sparse_attn hd=%d%s (masked, short, masked chunk)", hd, full ? " full floats" : "");
    cmp(what, R.data(), G.data(), R.size());
}

/* v4cu_bf16_bits against v4_bf16_bits: bf16 values (exact), full floats (rounded, ties
 * to even), +-0, +-inf, NaN, the largest finite float (rounds to inf). */
static void case_bf16_bits()
{
    std::vector<float> x;
    for (int i = 0; i < 300; i++)
        x.push_back(i % 2 ? rbf(-30, 30) : rfull(-130, 127));
    const uint32_t special[] = {0u, 0x80000000u, 0x7f800000u, 0xff800000u, 0x7fc00000u, 0xffa00001u,
                                0x7f7fffffu, 0x3f808000u, 0x3f818000u, 0x00000001u};
    for (uint32_t u : special)
        x.push_back(v4_f32_from_bits(u));
    std::vector<uint16_t> g(x.size(), 0xdeadu);
    CK(v4cu_bf16_bits(x.data(), g.data(), (long)x.size(), nullptr));
    size_t bad = 0;
    for (size_t i = 0; i < x.size(); i++)
        if (g[i] != v4_bf16_bits(x[i]) && bad++ < 3)
            printf("  bf16_bits [%zu] x=%a ref=%04x got=%04x\n", i, (double)x[i], v4_bf16_bits(x[i]), g[i]);
    printf("%-48s %s (%zu of %zu differ)\n", "bf16_bits (cache stores)", bad ? "FAIL" : "ok", bad, x.size());
    bad_total += (int)bad;
}

static void case_comp_pool(int r, int d, int overlap, int fresh)
{
    const int rows = (overlap ? 2 : 1) * r, W = (overlap ? 2 : 1) * d;
    std::vector<float> kv((size_t)rows * W), sc((size_t)rows * W);
    for (size_t i = 0; i < kv.size(); i++) {
        kv[i] = rbf(-6, 2);
        sc[i] = rnorm() * 4.0f;
    }
    if (fresh)      /* the first block of an overlapping compressor: the previous rows are -inf */
        for (int i = 0; i < r; i++)
            for (int c = 0; c < W; c++)
                sc[(size_t)i * W + c] = -INFINITY;
    std::vector<float> R(d), G(d, -1);
    v4_comp_pool(kv.data(), sc.data(), W, r, d, overlap, R.data());
    CK(v4cu_comp_pool(kv.data(), sc.data(), W, r, d, overlap, G.data(), nullptr));
    char what[96];
    snprintf(what, sizeof what, "comp_pool r=%d d=%d%s%s", r, d, overlap ? " overlap" : "", fresh ? " -inf rows" : "");
    cmp(what, R.data(), G.data(), R.size());
}

static void case_index(int ih, int id, int n, int full = 0)
{
    std::vector<float> q((size_t)ih * id), keys((size_t)n * id), iw(ih);
    for (auto &x : q)
        x = full ? rfull(-24, 1) : rbf(-4, 1);
    for (auto &x : keys)
        x = full ? rfull(-24, 1) : rbf(-4, 1);
    for (auto &x : iw)
        x = rnorm();
    for (int j = 0; full && j < n; j++)
        cancel_pair(&keys[(size_t)j * id], id, 1);
    for (int h = 0; full && h < ih; h++)
        cancel_pair(&q[(size_t)h * id], id, 0);
    std::vector<uint16_t> keys16(keys.size());   /* the device reads bf16 keys */
    for (size_t i = 0; i < keys.size(); i++) {
        keys16[i] = v4_bf16_bits(keys[i]);
        keys[i] = v4_bf16_from_bits(keys16[i]);
    }
    std::vector<float> wh(ih), R(n), G(n, -1);
    v4_index_head_weights(iw.data(), ih, id, wh.data());
    v4_index_scores(q.data(), keys.data(), n, wh.data(), ih, id, R.data());
    /* the keys in one page, then in pages of 4 keys held apart (each its own
     * allocation, filled in reverse order) */
    const uint16_t *one[1] = {keys16.data()};
    CK(v4cu_index_scores(q.data(), one, 30, n, iw.data(), ih, id, G.data(), nullptr));
    char what[96];
    snprintf(what, sizeof what, "index_scores ih=%d id=%d n=%d%s", ih, id, n, full ? " full floats" : "");
    cmp(what, R.data(), G.data(), R.size());
    const int np = (n + 3) / 4;
    std::vector<std::vector<uint16_t>> pg(np);
    std::vector<const uint16_t *> tab(np);
    for (int p = np - 1; p >= 0; p--) {
        pg[p].assign((size_t)4 * id, 0xffff);   /* past n: NaN bits, never read */
        for (int j = 4 * p; j < n && j < 4 * p + 4; j++)
            memcpy(&pg[p][(size_t)(j - 4 * p) * id], &keys16[(size_t)j * id], sizeof(uint16_t) * id);
        tab[p] = pg[p].data();
    }
    std::fill(G.begin(), G.end(), -1.0f);
    CK(v4cu_index_scores(q.data(), tab.data(), 2, n, iw.data(), ih, id, G.data(), nullptr));
    snprintf(what, sizeof what, "index_scores ih=%d id=%d n=%d%s, pages of 4", ih, id, n, full ? " full floats" : "");
    cmp(what, R.data(), G.data(), R.size());
}

/* Score patterns for the top-k cases. */
enum { TK_TIES, TK_EQUAL, TK_SPECIAL, TK_NAN, TK_NAN_LATE, TK_SPREAD, TK_FLOAT };
static const char *const tk_name[] = {"ties", "all equal", "-inf/+-0/inf", "NaN in the first k", "NaN after k",
                                      "bf16 spread", "full floats"};

static float tk_score(int pat, int i, int n)
{
    switch (pat) {
    case TK_TIES:       /* few distinct values: many ties */
        return v4_bf16((float)(rnd() % 40) * 0.25f - 3.0f);
    case TK_EQUAL:
        return 0.5f;
    case TK_SPECIAL: {  /* ties of -0/+0, runs of -inf, one +inf, negatives */
        const uint64_t r = rnd() % 8;
        return r == 0 ? -0.0f : r == 1 ? 0.0f : r == 2 ? -INFINITY : r == 3 && i == n / 2 ? INFINITY
                                                                        : v4_bf16(-(float)(rnd() % 5));
    }
    case TK_NAN:        /* NaNs of both signs early and late (the C function's slots) */
    case TK_NAN_LATE: {
        const int first = pat == TK_NAN ? 0 : 600;
        if (i >= first && rnd() % 23 == 0)
            return rnd() & 1 ? NAN : -NAN;
        return v4_bf16((float)(rnd() % 12) - 4.0f);
    }
    case TK_SPREAD:     /* bf16 scores over a few binades (the indexer's): low key bits constant */
        return v4_bf16(ldexpf((float)(1.0 + unif()), (int)(rnd() % 6) - 3));
    default:            /* any float: every key digit varies */
        return ldexpf((float)(unif() * 2.0 - 1.0), (int)(rnd() % 200) - 100);
    }
}

static void case_topk(int n, int k, int pat)
{
    std::vector<float> s(n);
    for (int i = 0; i < n; i++)
        s[i] = tk_score(pat, i, n);
    if (pat == TK_TIES && n > 3) {
        s[n / 2] = -0.0f;
        s[n / 3] = 0.0f;
    }
    const int m = k < n ? k : n;
    std::vector<int> R(m);
    std::vector<int32_t> G(m + 1, -1);
    v4_topk(s.data(), n, m, R.data());
    CK(v4cu_topk(s.data(), n, k, G.data(), nullptr));   /* the launcher takes any k: min(k, n) come out */
    int bad = G[m] != -1;                                 /* nothing written past them */
    for (int i = 0; i < m; i++)
        if (R[i] != G[i] && bad++ < 3)
            printf("  topk [%d] ref=%d got=%d\n", i, R[i], G[i]);
    char what[96];
    snprintf(what, sizeof what, "topk n=%d k=%d %s", n, k, tk_name[pat]);
    printf("%-48s %s (%d of %d differ)\n", what, bad ? "FAIL" : "ok", bad, m);
    bad_total += bad;
}

int main()
{
    case_embed();
    case_rmsnorm(4096, -6, 6, 0.0);      /* sums exact in double: bit-identical */
    case_rmsnorm(256, -3, 3, 0.0);
    case_rmsnorm(1000, -40, 30, 1e-6);   /* wide range: the tree may round differently */
    case_hc(4, 512);
    case_hc(2, 300);
    for (int y = 0; y < 2; y++)
        for (int inv = 0; inv < 2; inv++)
            case_rope(y, inv);
    case_hadamard(128);
    case_hadamard(512);
    case_hadamard(16);
    case_qdq(0, 448, 64);
    case_qdq(1, 128, 32);
    case_qdq(0, 256, 128);
    case_route(0, 64, 6);
    case_route(1, 64, 6);
    case_route(0, 256, 8);
    case_swiglu(10.0f, 1);
    case_swiglu(10.0f, 0);
    case_swiglu(0.0f, 1);
    case_head_rms(512);
    case_head_rms(128);
    case_sparse_attn(512);
    case_sparse_attn(128);
    case_sparse_attn(200);   /* a last key tile of 8 dims */
    case_sparse_attn(40);
    case_sparse_attn(512, 1);   /* rounding sums: the dot order matters */
    case_sparse_attn(200, 1);
    case_bf16_bits();
    case_comp_pool(4, 128, 1, 1);
    case_comp_pool(4, 128, 1, 0);
    case_comp_pool(128, 512, 0, 0);
    case_index(8, 128, 50);
    case_index(64, 128, 130);
    case_index(64, 128, 1000);   /* many blocks, a ragged last one */
    case_index(16, 96, 65);
    case_index(3, 200, 70);      /* id > 128: the unstaged kernel */
    case_index(64, 128, 130, 1); /* rounding sums: the dot order matters */
    case_index(5, 200, 70, 1);
    {   /* n below, at and above k, not multiples of the 1024-thread block */
        const int tn[][2] = {{1, 512},    {2, 1},      {30, 64},    {511, 512},  {512, 512},  {513, 512},
                             {1000, 64},  {1023, 512}, {1025, 512}, {2049, 512}, {4099, 512}, {3001, 1}};
        for (const auto &c : tn)
            for (int pat = 0; pat <= TK_FLOAT; pat++)
                case_topk(c[0], c[1], pat);
        case_topk(6000, 2048, TK_FLOAT);
        case_topk(5000, 4096, TK_TIES);      /* the largest one-block selection */
        case_topk(5000, 4500, TK_TIES);      /* above it: the rank kernel (NaN-free) */
        case_topk(40, 40, TK_NAN);           /* a NaN-only structure in every slot */
    }
    /* self-check: the comparison catches a one-ulp difference */
    const int before = bad_total;
    float a = 1.0f, b = nextafterf(1.0f, 2.0f);
    printf("self-check (a planted 1-ulp difference must FAIL):\n");
    cmp("  planted", &a, &b, 1);
    const int caught = bad_total - before == 1;
    bad_total = before + !caught;
    printf("%s: %d mismatches%s\n", bad_total ? "FAILED" : "all equal", bad_total,
           caught ? "" : " (the self-check did not catch the planted difference)");
    return bad_total != 0;
}
