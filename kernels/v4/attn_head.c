/* attn_head.c - the per-head math of the attention sub-layer (spec §5.3): the head
 * RMS in BF16 arithmetic and the sparse softmax with sink over a candidate list, as
 * pure functions (ops.h).
 *
 * v4_sparse_attn_head is the reference: one head, one double chain per q.k dot and per
 * acc element, latency-bound.  The CUDA kernels and tests/test_attn_fast.c are checked
 * against it.  v4_sparse_attn_heads (what attention.c calls) computes all heads of a
 * sequence with the same result bit for bit: heads go in groups of 8 whose queries are
 * transposed to [d][8] once, the q.k dots of a chunk's valid candidates run 8 heads per
 * SIMD vector (attn_kern.h dots8, each lane still sums d = 0, 1, .. from 0.0), the
 * softmax bookkeeping (rowmax, m, f, p, psum, l, the bf16 rounding of p) is the
 * reference's scalar code per head, and the acc update runs 8 d per vector for up to 8
 * heads at once (accum8, each lane still sums c = 0, 1, .. after f32(acc * f)).  acc
 * lives in the output rows until the final o = bf16(acc / l) (div_bf16, 8 at a time).
 * Stack: ~45 KiB in v4_sparse_attn_heads (q transposed for hd <= 1024, one chunk's
 * dots and probabilities).  Thread: any (pure). */
#include <math.h>
#include <string.h>

#include "attn_kern.h"
#include "ops.h"

void v4_head_rms_bf16(float *q, int n, float eps)
{
    double ss = 0.0;
    for (int i = 0; i < n; i++)
        ss += (double)v4_bf16(q[i] * q[i]);
    float ms = v4_bf16((float)ss / (float)n);
    float den = v4_bf16(ms + eps);
    float g = v4_bf16(v4_rsqrtf(den));
    for (int i = 0; i < n; i++)
        q[i] = v4_bf16(q[i] * g);
}

/* Masked slots contribute exactly 0 to every sum, so each chunk works on its valid
 * slots only. */
void v4_sparse_attn_head(const float *q, const float *const *cand, int L, int hd,
                         float scale, float sink, float *o)
{
    float acc[1024];
    float m = -INFINITY, l = 0.0f;
    for (int d = 0; d < hd; d++)
        acc[d] = 0.0f;
    for (int c0 = 0; c0 < L; c0 += 64) {
        int c1 = c0 + 64 < L ? c0 + 64 : L, nv = 0;
        const float *kv[64];
        float s[64], pb[64];
        float rowmax = -INFINITY;
        for (int c = c0; c < c1; c++) {
            if (!cand[c])
                continue;
            kv[nv] = cand[c];
            s[nv] = v4_dot(q, cand[c], hd) * scale;
            if (s[nv] > rowmax)
                rowmax = s[nv];
            nv++;
        }
        float mnew = rowmax > m ? rowmax : m;
        if (nv == 0 || mnew == -INFINITY)
            continue;           /* nothing valid yet */
        float f = v4_expf(m - mnew);
        double psum = 0.0;
        for (int c = 0; c < nv; c++) {
            float p = v4_expf(s[c] - mnew);
            psum += p;
            pb[c] = v4_bf16(p);
        }
        l = l * f + (float)psum;
        for (int d = 0; d < hd; d++) {
            double a = (double)(acc[d] * f);
            for (int c = 0; c < nv; c++)
                a += (double)pb[c] * (double)kv[c][d];
            acc[d] = (float)a;
        }
        m = mnew;
    }
    l = l + v4_expf(sink - m);
    for (int d = 0; d < hd; d++)
        o[d] = v4_bf16(acc[d] / l);
}

/* v4_sparse_attn_heads through the kernel set K (tests run every set; NULL: the
 * reference, one head at a time). */
void v4_sparse_attn_heads_k(const v4_attn_kern *K, const float *q, int H, const float *const *cand, int L,
                            int hd, float scale, const float *sinks, float *o)
{
    enum { NL = V4_AK_LANES, CH = V4_AK_CHUNK };
    float qT[V4_AK_MAX_HD * NL];
    double D[CH * NL], pbd[NL * CH];
    const float *kv[CH];
    if (!K || hd > V4_AK_MAX_HD) {   /* the reference loops (which are limited to 1024 too) */
        for (int h = 0; h < H; h++)
            v4_sparse_attn_head(q + (size_t)h * hd, cand, L, hd, scale, sinks[h], o + (size_t)h * hd);
        return;
    }
    for (int h0 = 0; h0 < H; h0 += NL) {
        const int nh = H - h0 < NL ? H - h0 : NL;
        float m[NL], l[NL], f[NL];
        float *acc[NL];
        v4_ak_transpose8(q + (size_t)h0 * hd, hd, nh, qT);
        for (int i = 0; i < NL; i++) {
            m[i] = -INFINITY;
            l[i] = 0.0f;
            f[i] = 0.0f;
            acc[i] = i < nh ? o + (size_t)(h0 + i) * hd : NULL;
            if (i < nh)
                memset(acc[i], 0, sizeof(float) * (size_t)hd);
        }
        memset(pbd, 0, sizeof pbd);
        for (int c0 = 0; c0 < L; c0 += CH) {
            const int c1 = c0 + CH < L ? c0 + CH : L;
            int nv = 0;
            for (int c = c0; c < c1; c++)
                if (cand[c])
                    kv[nv++] = cand[c];
            if (nv == 0)
                continue;           /* nothing valid in this chunk */
            K->dots8(qT, hd, kv, nv, D);
            unsigned active = 0;
            for (int i = 0; i < nh; i++) {
                float s[CH], rowmax = -INFINITY;
                for (int c = 0; c < nv; c++) {
                    s[c] = (float)D[(size_t)c * NL + i] * scale;
                    if (s[c] > rowmax)
                        rowmax = s[c];
                }
                float mnew = rowmax > m[i] ? rowmax : m[i];
                if (mnew == -INFINITY)
                    continue;       /* nothing valid yet for this head */
                f[i] = v4_expf(m[i] - mnew);
                double psum = 0.0;
                for (int c = 0; c < nv; c++) {
                    float p = v4_expf(s[c] - mnew);
                    psum += p;
                    pbd[(size_t)i * CH + c] = (double)v4_bf16(p);
                }
                l[i] = l[i] * f[i] + (float)psum;
                m[i] = mnew;
                active |= 1u << i;
            }
            if (active)
                K->accum8(acc, f, pbd, kv, nv, hd, active);
        }
        for (int i = 0; i < nh; i++)
            K->div_bf16(acc[i], hd, l[i] + v4_expf(sinks[h0 + i] - m[i]));
    }
}

void v4_sparse_attn_heads(const float *q, int H, const float *const *cand, int L, int hd, float scale,
                          const float *sinks, float *o)
{
    v4_sparse_attn_heads_k(v4_attn_kern_get(), q, H, cand, L, hd, scale, sinks, o);
}
