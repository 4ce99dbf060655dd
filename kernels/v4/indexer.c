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

/* float keys (the reference the CUDA kernels and tests use), then bf16 keys (the
 * sequence caches: what the engine calls) */
#define V4_IX_KT float
#define V4_IX_REF v4_index_scores_ref
#define V4_IX_K v4_index_scores_k
#define V4_IX_DOTS dots8
#define V4_IX_LD1(x) (x)
#include "indexer_keys.h"
#define V4_IX_KT uint16_t
#define V4_IX_REF v4_index_scores_ref_bf16
#define V4_IX_K v4_index_scores_bf16_k
#define V4_IX_DOTS dots8_bf16
#define V4_IX_LD1(x) v4_bf16_from_bits(x)
#include "indexer_keys.h"

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
    float e[1024];   /* index_head_dim <= 1024 (v4_compressor_step's limit) */
    if (v4_compressor_step(&lw->idx_comp, &L->ics, pos, c->s.ikv + (size_t)b * 2 * id,
                           c->s.isc + (size_t)b * 2 * id, c->freqs_comp, rd, cfg->norm_eps, 1, e))
        v4_seq_store_bf16(s, L->idx_keys + (size_t)L->n_idx++ * id, e, id);

    float wh[1024];
    v4_index_head_weights(c->s.iw + (size_t)b * ih, ih, id, wh);
    const int n = L->n_idx;
    float *score = c->s.score;
    v4_index_scores_bf16_k(c->attn, q, L->idx_keys, n, wh, ih, id, score);
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
