/* indexer_keys.h - v4_index_scores_ref and v4_index_scores_k for one key type,
 * included by indexer.c once per type:
 *   V4_IX_KT             the element type of the keys (float, or uint16_t = bf16 bits)
 *   V4_IX_REF / V4_IX_K  the names of the two functions
 *   V4_IX_DOTS           the attn_kern.h dots8 member for that type
 *   V4_IX_LD1(x)         one element as a float (exact)
 * The arithmetic does not depend on the type.  Thread: any (pure). */

void V4_IX_REF(const float *q, const V4_IX_KT *keys, int n, const float *wh, int ih, int id, float *score)
{
    for (int j = 0; j < n; j++) {
        const V4_IX_KT *Kj = keys + (size_t)j * id;
        double acc = 0.0;
        for (int h = 0; h < ih; h++) {
            const float *qh = q + (size_t)h * id;
            double dot = 0.0;   /* v4_dot */
            for (int e = 0; e < id; e++)
                dot += (double)qh[e] * (double)V4_IX_LD1(Kj[e]);
            float d = v4_bf16((float)dot);
            if (d < 0.0f)
                d = 0.0f;
            acc += (double)v4_bf16(d * wh[h]);
        }
        score[j] = v4_bf16((float)acc);
    }
}

/* score[j] for the keys of a tile at a time: per group of 8 heads (q transposed to
 * [id][8]) attn_kern.h's dots8 gives the 8 heads' q.K_j of the tile's keys (each lane
 * the reference's chain over d), relu_terms8 the 8 heads' bf16(relu(bf16(dot)) * w_h)
 * (branch-free: the signs are random), then the terms are added to the key's double
 * sum in head order, as the reference loop does. */
void V4_IX_K(const v4_attn_kern *K, const float *q, const V4_IX_KT *keys, int n, const float *wh, int ih, int id,
             float *score)
{
    enum { NL = V4_AK_LANES, JT = 64 };
    if (!K || id > V4_AK_MAX_HD) {
        V4_IX_REF(q, keys, n, wh, ih, id, score);
        return;
    }
    float qT[V4_AK_MAX_HD * NL];
    double D[JT * NL], acc[JT];
    const V4_IX_KT *kp[JT];
    /* All groups' transposed queries when they fit (ih <= 64 at id = 128): transposing
     * per tile would re-read q from L3 once the keys have streamed it out of L2. */
    const int groups = (ih + NL - 1) / NL, all = (size_t)groups * NL * id <= sizeof qT / sizeof qT[0];
    for (int j0 = 0; j0 < n; j0 += JT) {
        const int nt = n - j0 < JT ? n - j0 : JT;
        for (int j = 0; j < nt; j++) {
            kp[j] = keys + (size_t)(j0 + j) * id;
            acc[j] = 0.0;
        }
        for (int g = 0; g < groups; g++) {
            const int h0 = g * NL, nh = ih - h0 < NL ? ih - h0 : NL;
            float *qg = all ? qT + (size_t)g * NL * id : qT;
            if (!all || j0 == 0)
                v4_ak_transpose8(q + (size_t)h0 * id, id, nh, qg);
            float w8[NL];
            for (int i = 0; i < NL; i++)
                w8[i] = i < nh ? wh[h0 + i] : 0.0f;
            K->V4_IX_DOTS(qg, id, kp, nt, D);
            K->relu_terms8(D, nt, w8, D);
            for (int j = 0; j < nt; j++)
                for (int i = 0; i < nh; i++)
                    acc[j] += D[(size_t)j * NL + i];
        }
        for (int j = 0; j < nt; j++)
            score[j0 + j] = v4_bf16((float)acc[j]);
    }
}

#undef V4_IX_KT
#undef V4_IX_REF
#undef V4_IX_K
#undef V4_IX_DOTS
#undef V4_IX_LD1
