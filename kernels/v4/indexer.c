/* indexer.c - the lightning indexer of CSA layers (spec §5.5).
 *
 * It scores every complete compressed block j of the sequence with
 * score_j = bf16(sum_h bf16(relu(bf16(q_h . K_j)) * w_h)) and keeps the top
 * index_topk (highest score first, ties to the lower j).  Queries come from the
 * q_norm output (qr) through wq_b, get RoPE, a Hadamard rotation and FP4
 * quantize-dequantize; keys come from the indexer's own compressor (rotate=1).
 * The batched projections (wq_b, weights_proj, compressor wkv/wgate) were done by
 * attention.c; this file does the per-sequence part.  The scores use attn_kern.h's
 * SIMD dots (8 heads per vector, every chain in the reference's order: same bits as
 * the plain loop v4_index_scores_ref, which tests/test_attn_fast.c checks them against).  Stack: ~37 KiB in
 * v4_index_scores (q of 8 heads transposed, one tile's dots).  Thread: the caller's.
 */
#include <math.h>
#include <string.h>

#include "attn_kern.h"
#include "internal.h"
#include "ops.h"

void v4_index_head_weights(const float *iw, int ih, int id, float *wh)
{
    const float wscale = (float)(pow((double)id, -0.5) * pow((double)ih, -0.5));
    for (int h = 0; h < ih; h++)
        wh[h] = v4_bf16(v4_bf16(iw[h]) * wscale);
}

void v4_index_scores_ref(const float *q, const float *keys, int n, const float *wh, int ih, int id, float *score)
{
    for (int j = 0; j < n; j++) {
        const float *Kj = keys + (size_t)j * id;
        double acc = 0.0;
        for (int h = 0; h < ih; h++) {
            float d = v4_bf16(v4_dot(q + (size_t)h * id, Kj, id));
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
void v4_index_scores_k(const v4_attn_kern *K, const float *q, const float *keys, int n, const float *wh, int ih,
                       int id, float *score)
{
    enum { NL = V4_AK_LANES, JT = 64 };
    if (!K || id > V4_AK_MAX_HD) {
        v4_index_scores_ref(q, keys, n, wh, ih, id, score);
        return;
    }
    float qT[V4_AK_MAX_HD * NL];
    double D[JT * NL], acc[JT];
    const float *kp[JT];
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
            K->dots8(qg, id, kp, nt, D);
            K->relu_terms8(D, nt, w8, D);
            for (int j = 0; j < nt; j++)
                for (int i = 0; i < nh; i++)
                    acc[j] += D[(size_t)j * NL + i];
        }
        for (int j = 0; j < nt; j++)
            score[j0 + j] = v4_bf16((float)acc[j]);
    }
}

void v4_index_scores(const float *q, const float *keys, int n, const float *wh, int ih, int id, float *score)
{
    v4_index_scores_k(v4_attn_kern_get(), q, keys, n, wh, ih, id, score);
}

void v4_indexer(v4_ctx *c, int layer, v4_seq *s, int b, v4_trace *tr)
{
    const v4_config *cfg = &c->w->cfg;
    const v4_layer_w *lw = &c->w->layers[layer];
    v4_layer_state *L = &s->L[layer];
    const int ih = cfg->index_n_heads, id = cfg->index_head_dim, rd = cfg->rope_head_dim;
    const int pos = c->s.rowpos[b];
    float *q = c->s.iq + (size_t)b * ih * id;

    for (int h = 0; h < ih; h++) {
        float *qh = q + (size_t)h * id;
        v4_rope(qh + id - rd, rd / 2, c->freqs_comp, pos, 0);
        v4_hadamard(qh, id);
        v4_fp4_sim(qh, id, 32);
    }
    if (v4_compressor_step(&lw->idx_comp, &L->ics, pos, c->s.ikv + (size_t)b * 2 * id,
                           c->s.isc + (size_t)b * 2 * id, c->freqs_comp, rd, cfg->norm_eps, 1,
                           L->idx_keys + (size_t)L->n_idx * id))
        L->n_idx++;

    float wh[1024];
    v4_index_head_weights(c->s.iw + (size_t)b * ih, ih, id, wh);
    const int n = L->n_idx;
    float *score = c->s.score;
    v4_index_scores_k(c->attn, q, L->idx_keys, n, wh, ih, id, score);
    int k = n < cfg->index_topk ? n : cfg->index_topk;
    int *sel = c->s.csel + (size_t)b * cfg->index_topk;
    v4_topk(score, n, k, sel);
    c->s.ncsel[b] = k;
    if (tr && tr->index_ids) {
        int32_t *dst = tr->index_ids + (size_t)layer * cfg->index_topk;
        for (int i = 0; i < cfg->index_topk; i++)
            dst[i] = i < k ? sel[i] : -1;
    }
    if (tr && tr->index_count)
        tr->index_count[layer] = k;
}
