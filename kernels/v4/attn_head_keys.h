/* attn_head_keys.h - v4_sparse_attn_head and v4_sparse_attn_heads_k for one key-row
 * type, included by attn_head.c once per type:
 *   V4_AH_KT       the element type of a candidate row (float, or uint16_t = bf16 bits)
 *   V4_AH_HEAD / V4_AH_HEADS_K   the names of the two functions
 *   V4_AH_DOTS / V4_AH_ACCUM     the attn_kern.h members for that type
 *   V4_AH_LD1(x)   one element as a float (exact)
 * The arithmetic does not depend on the type: a bf16 row gives the bits of the float
 * row holding the same values.  Thread: any (pure). */

/* Masked slots contribute exactly 0 to every sum, so each chunk works on its valid
 * slots only. */
void V4_AH_HEAD(const float *q, const V4_AH_KT *const *cand, int L, int hd, float scale, float sink, float *o)
{
    float acc[1024];
    float m = -INFINITY, l = 0.0f;
    for (int d = 0; d < hd; d++)
        acc[d] = 0.0f;
    for (int c0 = 0; c0 < L; c0 += 64) {
        int c1 = c0 + 64 < L ? c0 + 64 : L, nv = 0;
        const V4_AH_KT *kv[64];
        float s[64], pb[64];
        float rowmax = -INFINITY;
        for (int c = c0; c < c1; c++) {
            if (!cand[c])
                continue;
            kv[nv] = cand[c];
            double dot = 0.0;   /* v4_dot */
            for (int d = 0; d < hd; d++)
                dot += (double)q[d] * (double)V4_AH_LD1(cand[c][d]);
            s[nv] = (float)dot * scale;
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
                a += (double)pb[c] * (double)V4_AH_LD1(kv[c][d]);
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
void V4_AH_HEADS_K(const v4_attn_kern *K, const float *q, int H, const V4_AH_KT *const *cand, int L, int hd,
                   float scale, const float *sinks, float *o)
{
    enum { NL = V4_AK_LANES, CH = V4_AK_CHUNK };
    float qT[V4_AK_MAX_HD * NL];
    double D[CH * NL], pbd[NL * CH];
    const V4_AH_KT *kv[CH];
    if (!K || hd > V4_AK_MAX_HD) {   /* the reference loops (which are limited to 1024 too) */
        for (int h = 0; h < H; h++)
            V4_AH_HEAD(q + (size_t)h * hd, cand, L, hd, scale, sinks[h], o + (size_t)h * hd);
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
            K->V4_AH_DOTS(qT, hd, kv, nv, D);
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
                K->V4_AH_ACCUM(acc, f, pbd, kv, nv, hd, active);
        }
        for (int i = 0; i < nh; i++)
            K->div_bf16(acc[i], hd, l[i] + v4_expf(sinks[h0 + i] - m[i]));
    }
}

#undef V4_AH_KT
#undef V4_AH_HEAD
#undef V4_AH_HEADS_K
#undef V4_AH_DOTS
#undef V4_AH_ACCUM
#undef V4_AH_LD1
