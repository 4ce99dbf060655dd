/* attn_head.c - the per-head math of the attention sub-layer (spec §5.3): the head
 * RMS in BF16 arithmetic and the sparse softmax with sink over a candidate list, as
 * pure functions (ops.h) that attention.c calls per head and the CUDA kernels are
 * checked against.  Thread: any (pure). */
#include <math.h>

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

