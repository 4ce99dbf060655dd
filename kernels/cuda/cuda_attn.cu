/* cuda_attn.cu - attention-path kernels (see cuda_attn.h for the contract).  Read each
 * kernel next to the C function it names in kernels/v4 (attention.c, compressor.c,
 * indexer.c, ops.c): the arithmetic is the same expression in the same order.
 * Ownership: kernels touch only their arguments.  Thread: launchers from the caller's
 * thread; kernels are stream-ordered.
 */
#include <math.h>
#include <stdint.h>

#include "cuda_attn.h"
#include "cu_launch.h"
#include "cuda_num.cuh"

namespace {

constexpr int AT = 128;         /* threads per attention / head-RMS block */
constexpr int CHUNK = 64;       /* candidates per softmax chunk (the reference's) */
constexpr int DMAX = 1024 / AT; /* head dims per thread */
constexpr int POOL_MAX = 512;   /* compressor candidates per channel */
constexpr int KT = 32;          /* head dims per staged tile of the attention's key rows */
constexpr int IS_T = 64;        /* keys per index-score block (one per thread) */
constexpr int IS_DMAX = 128;    /* index head dims staged in shared memory (larger: unstaged) */

/* x . y accumulated in double left to right, rounded to f32 (ops.c v4_dot). */
__device__ float dot_lr(const float *x, const float *y, int n)
{
    double s = 0.0;
    for (int i = 0; i < n; i++)
        s += (double)x[i] * (double)y[i];
    return (float)s;
}

/* v4_head_rms_bf16; one block of AT threads per vector. */
__global__ void k_head_rms_bf16(float *q, int hd, float eps)
{
    __shared__ double red[AT / 32];
    float *v = q + (size_t)blockIdx.x * hd;
    double ss = 0.0;
    for (int i = threadIdx.x; i < hd; i += AT)
        ss += (double)v4d_bf16(v[i] * v[i]);
    for (int o = 16; o > 0; o >>= 1)
        ss += __shfl_xor_sync(0xffffffffu, ss, o);
    if ((threadIdx.x & 31) == 0)
        red[threadIdx.x >> 5] = ss;
    __syncthreads();
    double tot = 0.0;
    for (int w = 0; w < AT / 32; w++)
        tot += red[w];
    const float ms = v4d_bf16((float)tot / (float)hd);
    const float den = v4d_bf16(ms + eps);
    const float g = v4d_bf16(v4d_rsqrt(den));
    for (int i = threadIdx.x; i < hd; i += AT)
        v[i] = v4d_bf16(v[i] * g);
}

/* v4_sparse_attn_head on bf16 candidate rows (v4_sparse_attn_head_bf16: each value
 * converted to float on load, exact); one block of AT threads per (head, row).  Per chunk, thread
 * t < 64 scores candidate c0 + t: the block stages the chunk's key rows KT dims at a
 * time in shared memory (a warp reads 128-byte runs of one row) and thread t adds its
 * products in dim order, the dot_lr sum unchanged.  Thread 0 compacts the valid ones
 * in order and does the order-sensitive softmax bookkeeping; every thread then
 * accumulates its head dims over the valid candidates in order. */
__global__ void k_sparse_attn(const float *q, const uint16_t *const *cand, const int32_t *len, int lmax, int H, int hd,
                              float scale, const float *sink, float *o)
{
    __shared__ float sc_all[CHUNK], s_sc[CHUNK], pb[CHUNK];
    __shared__ float kt[CHUNK][KT + 1];   /* +1: thread t reads row t without bank conflicts */
    __shared__ int ok_all[CHUNK], s_idx[CHUNK];
    __shared__ float s_m, s_l, s_f;
    __shared__ int s_nv, s_skip;
    const int h = blockIdx.x, b = blockIdx.y, t = threadIdx.x;
    const float *qh = q + ((size_t)b * H + h) * hd;
    const uint16_t *const *cb = cand + (size_t)b * lmax;
    const int L = len[b];
    float acc[DMAX];
    for (int k = 0; k < DMAX; k++)
        acc[k] = 0.0f;
    if (t == 0) {
        s_m = -INFINITY;
        s_l = 0.0f;
    }
    __syncthreads();
    for (int c0 = 0; c0 < L; c0 += CHUNK) {
        const int c1 = c0 + CHUNK < L ? c0 + CHUNK : L, nc = c1 - c0;
        const uint16_t *kvt = t < nc ? cb[c0 + t] : nullptr;
        double dsum = 0.0;   /* dot_lr(qh, kvt, hd), tile by tile */
        for (int i0 = 0; i0 < hd; i0 += KT) {
            const int ie = hd - i0 < KT ? hd - i0 : KT;
            for (int e = t; e < CHUNK * KT; e += AT) {
                const int c = e / KT, i = e % KT;
                const uint16_t *r = c < nc ? cb[c0 + c] : nullptr;
                if (r && i < ie)
                    kt[c][i] = v4d_bf16_load(r[i0 + i]);
            }
            __syncthreads();
            if (kvt)
                for (int i = 0; i < ie; i++)
                    dsum += (double)qh[i0 + i] * (double)kt[t][i];
            __syncthreads();
        }
        if (t < nc) {
            ok_all[t] = kvt != nullptr;
            sc_all[t] = kvt ? (float)dsum * scale : 0.0f;
        }
        __syncthreads();
        if (t == 0) {
            int nv = 0;
            float rowmax = -INFINITY;
            for (int c = 0; c < c1 - c0; c++) {
                if (!ok_all[c])
                    continue;
                s_idx[nv] = c;
                s_sc[nv] = sc_all[c];
                if (sc_all[c] > rowmax)
                    rowmax = sc_all[c];
                nv++;
            }
            const float m = s_m, mnew = rowmax > m ? rowmax : m;
            s_nv = nv;
            s_skip = nv == 0 || mnew == -INFINITY;
            if (!s_skip) {
                const float f = v4d_expf(m - mnew);
                double psum = 0.0;
                for (int c = 0; c < nv; c++) {
                    const float p = v4d_expf(s_sc[c] - mnew);
                    psum += p;
                    pb[c] = v4d_bf16(p);
                }
                s_l = s_l * f + (float)psum;
                s_f = f;
                s_m = mnew;
            }
        }
        __syncthreads();
        if (!s_skip) {
            const float f = s_f;
            const int nv = s_nv;
            for (int k = 0; k < DMAX; k++) {
                const int d = t + k * AT;
                if (d >= hd)
                    break;
                double a = (double)(acc[k] * f);
                for (int c = 0; c < nv; c++)
                    a += (double)pb[c] * (double)v4d_bf16_load(cb[c0 + s_idx[c]][d]);
                acc[k] = (float)a;
            }
        }
        __syncthreads();
    }
    if (t == 0)
        s_l = s_l + v4d_expf(sink[h] - s_m);
    __syncthreads();
    float *oh = o + ((size_t)b * H + h) * hd;
    for (int k = 0; k < DMAX; k++) {
        const int d = t + k * AT;
        if (d < hd)
            oh[d] = v4d_bf16(acc[k] / s_l);
    }
}

/* v4_comp_pool; one thread per channel. */
__global__ void k_comp_pool(const float *kv, const float *sc, int W, int r, int d, int overlap, float *e)
{
    const int ch = blockIdx.x * blockDim.x + threadIdx.x;
    if (ch >= d)
        return;
    const int nrows = overlap ? 2 * r : r;
    float p[POOL_MAX];
    float mx = -INFINITY;
    for (int i = 0; i < nrows; i++) {
        const int col = (overlap && i >= r) ? d + ch : ch;
        const float g = sc[(size_t)i * W + col];
        if (g > mx)
            mx = g;
    }
    double sum = 0.0;
    for (int i = 0; i < nrows; i++) {
        const int col = (overlap && i >= r) ? d + ch : ch;
        p[i] = v4d_expf(sc[(size_t)i * W + col] - mx);
        sum += p[i];
    }
    const float fs = (float)sum;
    double acc = 0.0;
    for (int i = 0; i < nrows; i++) {
        const int col = (overlap && i >= r) ? d + ch : ch;
        const float pi = p[i] / fs;
        acc += (double)(kv[(size_t)i * W + col] * pi);
    }
    e[ch] = v4d_bf16((float)acc);
}

/* v4_index_scores for one key row K: the heads' clamped dot products, bf16-weighted,
 * summed in double in head order. */
__device__ float index_score(const float *q, const float *K, const float *wh, int ih, int id)
{
    double acc = 0.0;
    for (int h = 0; h < ih; h++) {
        float dd = v4d_bf16(dot_lr(q + (size_t)h * id, K, id));
        if (dd < 0.0f)
            dd = 0.0f;
        acc += (double)v4d_bf16(dd * wh[h]);
    }
    return v4d_bf16((float)acc);
}

/* index_score on a bf16 key row (converted to float on load, exact). */
__device__ float index_score_bf16(const float *q, const uint16_t *K, const float *wh, int ih, int id)
{
    double acc = 0.0;
    for (int h = 0; h < ih; h++) {
        const float *qh = q + (size_t)h * id;
        double s = 0.0;
        for (int i = 0; i < id; i++)
            s += (double)qh[i] * (double)v4d_bf16_load(K[i]);
        float dd = v4d_bf16((float)s);
        if (dd < 0.0f)
            dd = 0.0f;
        acc += (double)v4d_bf16(dd * wh[h]);
    }
    return v4d_bf16((float)acc);
}

/* Key j of a paged key cache (see v4cu_index_scores). */
__device__ __forceinline__ const uint16_t *page_key(const uint16_t *const *pages, int shift, int j, int id)
{
    return pages[j >> shift] + (size_t)(j & ((1 << shift) - 1)) * id;
}

/* v4_index_head_weights + v4_index_scores_ref_bf16 (bf16 keys); one thread per key,
 * IS_T keys per block: the block first copies its keys' rows (each contiguous in its
 * page) into shared memory as floats (exact) with coalesced reads, then each thread
 * runs the same sums in the same order on its row. */
__global__ void k_index_scores_staged(const float *q, const uint16_t *const *pages, int shift, int n, const float *iw,
                                      int ih, int id, float wscale, float *score)
{
    __shared__ float wh[1024];
    __shared__ float ks[IS_T * (IS_DMAX + 1)];   /* row stride id + 1: no bank conflicts for even id */
    const int t = threadIdx.x, j0 = blockIdx.x * IS_T, rows = n - j0 < IS_T ? n - j0 : IS_T;
    for (int h = t; h < ih; h += IS_T)
        wh[h] = v4d_bf16(v4d_bf16(iw[h]) * wscale);
    for (int r = 0; r < rows; r++) {
        const uint16_t *src = page_key(pages, shift, j0 + r, id);
        for (int i = t; i < id; i += IS_T)
            ks[r * (id + 1) + i] = v4d_bf16_load(src[i]);
    }
    __syncthreads();
    if (t >= rows)
        return;
    score[j0 + t] = index_score(q, ks + t * (id + 1), wh, ih, id);
}

/* The same for id > IS_DMAX (no model: 128), reading each row from global memory. */
__global__ void k_index_scores(const float *q, const uint16_t *const *pages, int shift, int n, const float *iw, int ih,
                               int id, float wscale, float *score)
{
    __shared__ float wh[1024];
    for (int h = threadIdx.x; h < ih; h += blockDim.x)
        wh[h] = v4d_bf16(v4d_bf16(iw[h]) * wscale);
    __syncthreads();
    const int j = blockIdx.x * blockDim.x + threadIdx.x;
    if (j >= n)
        return;
    score[j] = index_score_bf16(q, page_key(pages, shift, j, id), wh, ih, id);
}

/* ---- top-k (ops.c v4_topk).  What the C function returns, derived from its insertion:
 * it appends every one of the first m = min(k, n) scores (cnt < k), each inserted into
 * place by "s > score[previous]"; a NaN compares false, so it stays where it was
 * appended (slot = its index) and no later score moves past it; once the list is full a
 * score enters only if s > the last one, so a NaN never enters and nothing enters past
 * a NaN in the last slot.  Hence, with r the last NaN among the first m (t0 = r + 1,
 * t0 = 0 if none):
 *   slots [0, t0): the scores [0, t0) themselves, each NaN at its own slot and each run
 *     between two NaNs sorted in place (score desc, ties to the lower index);
 *   slots [t0, m): the best m - t0 non-NaN scores of [t0, n), score desc, ties to the
 *     lower index (-0 == +0 ties too; -inf is an ordinary value).
 * Without NaN (every real case) t0 = 0 and this is the plain top-k.  The tail is a
 * radix select on order-preserving keys in one block: OR/AND of the keys (digits equal
 * in every key need no pass), a 256-bin histogram per remaining 8-bit digit from the top
 * to find the m-th key's prefix (stopping early when its whole bin is taken), one
 * sweep that collects everything above the prefix and the lowest-index ones equal to
 * it (warp ballots + a block prefix, in index order), then a bitonic sort of the
 * <= TK_KMAX entries (key desc, index asc) in shared memory.  At most 6 sweeps over
 * the n scores (4 for the indexer's bf16 scores: OR/AND, 2 histograms, collect), each
 * thread loading TK_U scores per step; see v4cu_topk in cuda_attn.h. */
constexpr int TK_T = 1024;      /* threads of the top-k block */
constexpr int TK_W = TK_T / 32; /* its warps: 32, one per lane of the warp scan below */
constexpr int TK_U = 4;         /* scores per thread per sweep step (loads in flight) */
constexpr int TK_KMAX = 4096;   /* largest m of the one-block selection (32 KiB of shared entries) */
static_assert(TK_W == 32, "tk_scan maps one warp count to each lane");

/* a > b <=> key(a) > key(b) for non-NaN floats; -0 and +0 share a key (they are == in
 * the C function); -inf has the smallest key, 0x00800000 > 0 (0 pads the sort). */
__device__ __forceinline__ uint32_t tk_key(float f)
{
    const uint32_t u = __float_as_uint(f);
    return (u & 0x80000000u) ? 0x80000000u - (u & 0x7fffffffu) : 0x80000000u + u;
}
__device__ __forceinline__ bool tk_nan(float f) { return (__float_as_uint(f) & 0x7fffffffu) > 0x7f800000u; }

/* f[u] = score[j + u * TK_T], NaN past n (NaN is never a tail candidate). */
__device__ __forceinline__ void tk_load(const float *score, int j, int n, float *f)
{
#pragma unroll
    for (int u = 0; u < TK_U; u++)
        f[u] = j + u * TK_T < n ? score[j + u * TK_T] : __uint_as_float(0x7fc00000u);
}

/* c[0..TK_W): one count per warp -> the sum over the warps before warp w, and the
 * total (every thread gets both; an inclusive shuffle scan across the lanes). */
__device__ __forceinline__ void tk_scan(const int *c, int w, int lane, int *before, int *total)
{
    const int v = c[lane];
    int inc = v;
    for (int d = 1; d < 32; d <<= 1) {
        const int x = __shfl_sync(0xffffffffu, inc, lane >= d ? lane - d : lane);
        if (lane >= d)
            inc += x;
    }
    *total = __shfl_sync(0xffffffffu, inc, 31);
    *before = __shfl_sync(0xffffffffu, inc - v, w);
}

/* Block-wide max (OP 0), OR (1), AND (2) of v; every thread gets it; red: TK_W words. */
template <int OP> __device__ uint32_t tk_reduce(uint32_t v, uint32_t *red)
{
    for (int o = 16; o > 0; o >>= 1) {
        const uint32_t x = __shfl_xor_sync(0xffffffffu, v, o);
        v = OP == 0 ? (x > v ? x : v) : OP == 1 ? (v | x) : (v & x);
    }
    if ((threadIdx.x & 31) == 0)
        red[threadIdx.x >> 5] = v;
    __syncthreads();
    uint32_t r = red[0];
    for (int w = 1; w < TK_W; w++)
        r = OP == 0 ? (red[w] > r ? red[w] : r) : OP == 1 ? (r | red[w]) : (r & red[w]);
    __syncthreads();   /* red may be rewritten */
    return r;
}

/* v4_topk of score[0..n) -> sel[0..m), m = min(k, n) <= TK_KMAX; one block of TK_T. */
__global__ void __launch_bounds__(TK_T) k_topk_select(const float *score, int n, int m, int32_t *sel)
{
    __shared__ uint64_t ent[TK_KMAX];   /* key << 32 | ~index: descending = the output order */
    __shared__ int hist[256];
    __shared__ uint32_t red[TK_W];
    __shared__ int wc[TK_U][TK_W];     /* per sweep step: (equal << 16) + greater, per warp */
    __shared__ int s_bin, s_need, s_all;
    const int t = threadIdx.x, lane = t & 31, w = t >> 5;

    /* the last NaN among the first m: t0 = its index + 1 */
    uint32_t last = 0;
    for (int j = t; j < m; j += TK_T)
        if (tk_nan(score[j]))
            last = (uint32_t)j + 1;
    const int t0 = (int)tk_reduce<0>(last, red);
    /* slots [0, t0): NaN in place, each run between NaNs ranked within itself (only
     * with NaN scores: O(run length) per element) */
    for (int e = t; e < t0; e += TK_T) {
        const float f = score[e];
        if (tk_nan(f)) {
            sel[e] = e;
            continue;
        }
        int s = e, end = e + 1;
        while (s > 0 && !tk_nan(score[s - 1]))
            s--;
        while (!tk_nan(score[end]))   /* score[t0 - 1] is NaN */
            end++;
        const uint32_t ke = tk_key(f);
        int r = 0;
        for (int i = s; i < end; i++) {
            const uint32_t ki = tk_key(score[i]);
            r += ki > ke || (ki == ke && i < e);
        }
        sel[s + r] = e;
    }
    const int mt = m - t0;   /* slots [t0, m): the best mt non-NaN scores of [t0, n) */
    if (mt <= 0)
        return;
    uint32_t kor = 0, kand = 0xffffffffu;
    for (int j = t0 + t; j < n; j += TK_U * TK_T) {
        float f[TK_U];
        tk_load(score, j, n, f);
#pragma unroll
        for (int u = 0; u < TK_U; u++)
            if (!tk_nan(f[u])) {
                kor |= tk_key(f[u]);
                kand &= tk_key(f[u]);
            }
    }
    kor = tk_reduce<1>(kor, red);
    kand = tk_reduce<2>(kand, red);
    /* radix select: the top `mask` bits of the mt-th best key are `prefix`; `need` of
     * the keys with that prefix are taken (all of them once `all`). Invariant: at least
     * `need` >= 1 tail keys have the prefix. */
    uint32_t prefix = 0, mask = 0;
    int need = mt;
    for (int shift = 24; shift >= 0; shift -= 8) {
        const uint32_t dm = 0xffu << shift;
        if (!((kor ^ kand) & dm)) {   /* the same digit in every key */
            prefix |= kand & dm;
            mask |= dm;
            continue;
        }
        for (int b = t; b < 256; b += TK_T)
            hist[b] = 0;
        __syncthreads();
        for (int j = t0 + t; j < n; j += TK_U * TK_T) {
            float f[TK_U];
            tk_load(score, j, n, f);
#pragma unroll
            for (int u = 0; u < TK_U; u++) {
                const uint32_t kk = tk_key(f[u]);
                if (!tk_nan(f[u]) && (kk & mask) == prefix)
                    atomicAdd(&hist[(kk >> shift) & 0xffu], 1);
            }
        }
        __syncthreads();
        if (t == 0) {
            int above = 0, b = 255;
            while (above + hist[b] < need)
                above += hist[b--];
            s_bin = b;
            s_need = need - above;
            s_all = hist[b] == need - above;
        }
        __syncthreads();   /* s_* are rewritten two barriers later at the earliest */
        prefix |= (uint32_t)s_bin << shift;
        mask |= dm;
        need = s_need;
        if (s_all)
            break;
    }
    /* collect, in index order: every key above the prefix (mt - need of them) at
     * ent[0..), the first `need` equal to it at ent[mt - need ..).  A step covers
     * TK_U runs of TK_T scores; thread t holds score t of each run. */
    const int ngt = mt - need;
    const unsigned below = (1u << lane) - 1u;
    int bg = 0, be = 0;   /* taken so far (the same in every thread) */
    for (int c0 = t0; c0 < n && (bg < ngt || be < need); c0 += TK_U * TK_T) {
        float f[TK_U];
        tk_load(score, c0 + t, n, f);
        unsigned mg[TK_U], me[TK_U];
#pragma unroll
        for (int u = 0; u < TK_U; u++) {
            const uint32_t kk = tk_key(f[u]) & mask;
            const int ok = !tk_nan(f[u]);
            mg[u] = __ballot_sync(0xffffffffu, ok && kk > prefix);
            me[u] = __ballot_sync(0xffffffffu, ok && kk == prefix);
            if (lane == 0)
                wc[u][w] = __popc(me[u]) << 16 | __popc(mg[u]);   /* <= 32 each: no carry */
        }
        __syncthreads();
#pragma unroll
        for (int u = 0; u < TK_U; u++) {
            int before, total;   /* packed sums of <= TK_T each: no carry */
            tk_scan(wc[u], w, lane, &before, &total);
            const int j = c0 + u * TK_T + t;
            const uint64_t v64 = (uint64_t)tk_key(f[u]) << 32 | (uint32_t)~(uint32_t)j;
            if (mg[u] >> lane & 1u)
                ent[bg + (before & 0xffff) + __popc(mg[u] & below)] = v64;
            const int r = be + (before >> 16) + __popc(me[u] & below);
            if ((me[u] >> lane & 1u) && r < need)
                ent[ngt + r] = v64;
            bg += total & 0xffff;
            be += total >> 16;
        }
        __syncthreads();   /* wc is rewritten */
    }
    /* bitonic sort of ent[0..P), descending; pads (0) sort last */
    int P = 1;
    while (P < mt)
        P <<= 1;
    for (int q = mt + t; q < P; q += TK_T)
        ent[q] = 0;
    __syncthreads();
    for (int size = 2; size <= P; size <<= 1)
        for (int stride = size >> 1; stride > 0; stride >>= 1) {
            for (int q = t; q < P / 2; q += TK_T) {
                const int i = 2 * stride * (q / stride) + q % stride, p = i + stride;
                const uint64_t a = ent[i], b = ent[p];
                if ((i & size) == 0 ? a < b : a > b) {
                    ent[i] = b;
                    ent[p] = a;
                }
            }
            __syncthreads();
        }
    for (int q = t; q < mt; q += TK_T)
        sel[t0 + q] = (int32_t)~(uint32_t)ent[q];
}

/* v4_topk for m > TK_KMAX (no model has it: index_topk is 512) by ranks: element j goes
 * to slot #{i: s_i > s_j} + #{i < j: s_i == s_j}; O(n * m), the C function's result
 * for NaN-free scores. */
__global__ void k_topk_rank(const float *score, int n, int k, int32_t *sel)
{
    const int j = blockIdx.x * blockDim.x + threadIdx.x;
    if (j >= n)
        return;
    const float sj = score[j];
    int rank = 0;
    for (int i = 0; i < n && rank < k; i++) {
        const float si = score[i];
        rank += si > sj || (si == sj && i < j);
    }
    if (rank < k)
        sel[rank] = j;
}

}  // namespace

extern "C" cudaError_t v4cu_head_rms_bf16(float *q, int nvec, int hd, float eps, cudaStream_t st)
{
    V4CU_LAUNCH(k_head_rms_bf16, nvec, AT, st, q, hd, eps);
    return cudaGetLastError();
}

extern "C" cudaError_t v4cu_sparse_attn(const float *q, const uint16_t *const *cand, const int32_t *len, int lmax, int n,
                                        int H, int hd, float scale, const float *sink, float *o, cudaStream_t st)
{
    if (hd > AT * DMAX)
        return cudaErrorInvalidValue;
    V4CU_LAUNCH(k_sparse_attn, dim3(H, n), AT, st, q, cand, len, lmax, H, hd, scale, sink, o);
    return cudaGetLastError();
}

extern "C" cudaError_t v4cu_comp_pool(const float *kv, const float *sc, int W, int r, int d, int overlap, float *e,
                                      cudaStream_t st)
{
    if ((overlap ? 2 : 1) * r > POOL_MAX)
        return cudaErrorInvalidValue;
    V4CU_LAUNCH(k_comp_pool, v4cu_cdiv(d, 128), 128, st, kv, sc, W, r, d, overlap, e);
    return cudaGetLastError();
}

extern "C" cudaError_t v4cu_index_scores(const float *q, const uint16_t *const *pages, int shift, int n, const float *iw,
                                         int ih, int id, float *score, cudaStream_t st)
{
    if (ih > 1024 || shift < 0 || shift > 30)
        return cudaErrorInvalidValue;
    if (n <= 0)
        return cudaSuccess;
    const float wscale = (float)(pow((double)id, -0.5) * pow((double)ih, -0.5));
    if (id <= IS_DMAX) {
        V4CU_LAUNCH(k_index_scores_staged, v4cu_cdiv(n, IS_T), IS_T, st, q, pages, shift, n, iw, ih, id, wscale, score);
    } else {
        V4CU_LAUNCH(k_index_scores, v4cu_cdiv(n, 128), 128, st, q, pages, shift, n, iw, ih, id, wscale, score);
    }
    return cudaGetLastError();
}

extern "C" cudaError_t v4cu_topk(const float *score, int n, int k, int32_t *sel, cudaStream_t st)
{
    if (n <= 0 || k <= 0)
        return cudaSuccess;
    const int m = k < n ? k : n;
    if (m <= TK_KMAX) {
        V4CU_LAUNCH(k_topk_select, 1, TK_T, st, score, n, m, sel);
    } else {
        V4CU_LAUNCH(k_topk_rank, v4cu_cdiv(n, 128), 128, st, score, n, m, sel);
    }
    return cudaGetLastError();
}
