/* attn_kern_keys.h - attn_kern.h's dots8 and accum8 for one key-row type, included
 * by attn_kern_body.h once per type (after its vector types and conversion macros):
 *   V4_AK_KT       the element type of a key row (float, or uint16_t = bf16 bits)
 *   V4_AK_KNAME(f) the function name for f (suffix per ISA and key type)
 *   V4_AK_LDK(p)   V4_AK_VW elements at p as a v4ak_vf (exact: bf16 -> f32 is a shift)
 *   V4_AK_LDK1(x)  one element as a float
 * The arithmetic is the same for both types: the key values are converted to float on
 * load, so a bf16 row gives the bits of the float row holding the same values.
 * Thread: any (pure). */

void V4_AK_KNAME(v4_ak_dots8)(const float *qT, int hd, const V4_AK_KT *const *keys, int nk, double *out)
{
    for (int c0 = 0; c0 < nk; c0 += V4_AK_KB) {
        const V4_AK_KT *kp[V4_AK_KB];
        v4ak_vd a[V4_AK_KB][V4_AK_NV];
#pragma GCC unroll 16
        for (int i = 0; i < V4_AK_KB; i++) {
            kp[i] = keys[c0 + i < nk ? c0 + i : nk - 1]; /* short block: repeat the last key */
#pragma GCC unroll 8
            for (int v = 0; v < V4_AK_NV; v++)
                a[i][v] = (v4ak_vd){0};
        }
        for (int d0 = 0; d0 < hd; d0 += V4_AK_DT) {
            const int dn = hd - d0 < V4_AK_DT ? hd - d0 : V4_AK_DT;
            double kd[V4_AK_KB][V4_AK_DT];
            for (int i = 0; i < V4_AK_KB; i++) {
                int t = 0;
                for (; t + V4_AK_VW <= dn; t += V4_AK_VW) {
                    const v4ak_vd y = V4_AK_TO_PD(V4_AK_LDK(kp[i] + d0 + t));
                    memcpy(&kd[i][t], &y, sizeof y);
                }
                for (; t < dn; t++)
                    kd[i][t] = (double)V4_AK_LDK1(kp[i][d0 + t]);
            }
            const float *qp = qT + (size_t)d0 * V4_AK_LANES;
            for (int t = 0; t < dn; t++) {
                v4ak_vd qd[V4_AK_NV];
#pragma GCC unroll 8
                for (int v = 0; v < V4_AK_NV; v++) {
                    v4ak_vf qf;
                    memcpy(&qf, qp + (size_t)t * V4_AK_LANES + v * V4_AK_VW, sizeof qf);
                    qd[v] = V4_AK_TO_PD(qf);
                }
#pragma GCC unroll 16
                for (int i = 0; i < V4_AK_KB; i++)
#pragma GCC unroll 8
                    for (int v = 0; v < V4_AK_NV; v++)
                        a[i][v] = V4_AK_MADD(a[i][v], qd[v], kd[i][t]);
            }
        }
#pragma GCC unroll 16
        for (int i = 0; i < V4_AK_KB; i++)
            if (c0 + i < nk)
#pragma GCC unroll 8
                for (int v = 0; v < V4_AK_NV; v++)
                    memcpy(out + (size_t)(c0 + i) * V4_AK_LANES + v * V4_AK_VW, &a[i][v], sizeof a[i][v]);
    }
}

void V4_AK_KNAME(v4_ak_accum8)(float *const *acc, const float *f, const double *pbd, const V4_AK_KT *const *kv,
                               int nv, int hd, unsigned active)
{
    int d = 0;
    for (; d + V4_AK_LANES <= hd; d += V4_AK_LANES) {
        for (int h0 = 0; h0 < V4_AK_LANES; h0 += V4_AK_HP) {
            const unsigned act = (active >> h0) & ((1u << V4_AK_HP) - 1u);
            if (!act)
                continue;
            v4ak_vd a[V4_AK_HP][V4_AK_NV];
#pragma GCC unroll 16
            for (int i = 0; i < V4_AK_HP; i++)
#pragma GCC unroll 8
                for (int v = 0; v < V4_AK_NV; v++) {
                    a[i][v] = (v4ak_vd){0};
                    if (act >> i & 1u) {
                        v4ak_vf av;
                        memcpy(&av, acc[h0 + i] + d + v * V4_AK_VW, sizeof av);
                        av = av * f[h0 + i]; /* f32(acc[d] * f) */
                        a[i][v] = V4_AK_TO_PD(av);
                    }
                }
            for (int c = 0; c < nv; c++) {
                v4ak_vd k[V4_AK_NV];
#pragma GCC unroll 8
                for (int v = 0; v < V4_AK_NV; v++) {
                    k[v] = V4_AK_TO_PD(V4_AK_LDK(kv[c] + d + v * V4_AK_VW));
                }
#pragma GCC unroll 16
                for (int i = 0; i < V4_AK_HP; i++)
#pragma GCC unroll 8
                    for (int v = 0; v < V4_AK_NV; v++)
                        a[i][v] = V4_AK_MADD(a[i][v], k[v], pbd[(size_t)(h0 + i) * V4_AK_CHUNK + c]);
            }
#pragma GCC unroll 16
            for (int i = 0; i < V4_AK_HP; i++)
                if (act >> i & 1u)
#pragma GCC unroll 8
                    for (int v = 0; v < V4_AK_NV; v++) {
                        const v4ak_vf r = V4_AK_TO_PS(a[i][v]);
                        memcpy(acc[h0 + i] + d + v * V4_AK_VW, &r, sizeof r);
                    }
        }
    }
    for (; d < hd; d++) /* hd % 8 tail: the reference loop per head */
        for (int i = 0; i < V4_AK_LANES; i++) {
            if (!(active >> i & 1u))
                continue;
            double a = (double)(acc[i][d] * f[i]);
            for (int c = 0; c < nv; c++)
                a += pbd[(size_t)i * V4_AK_CHUNK + c] * (double)V4_AK_LDK1(kv[c][d]);
            acc[i][d] = (float)a;
        }
}

#undef V4_AK_KT
#undef V4_AK_KNAME
#undef V4_AK_LDK
#undef V4_AK_LDK1
