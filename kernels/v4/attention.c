/* attention.c - one attention sub-layer for a batch of sequences (spec §5.3).
 *
 * Query: wq_a -> q_norm (= qr, also the indexer's input) -> wq_b -> per-head RMS in
 * BF16 arithmetic -> RoPE on the last rope dims.  Window KV: wkv -> kv_norm -> RoPE
 * -> FP8 simulation of the non-rope dims -> ring slot pos % window (stored as bf16, the
 * values are bf16 already; so are the compressed entries).  Compressed KV:
 * CSA layers run the lightning indexer, then both layer types advance the main
 * compressor.  Attention: one softmax with a per-head sink logit over the candidate
 * list (window oldest -> newest, then compressed entries: HCA ascending, CSA in
 * indexer order), processed in chunks of 64 like the reference kernel.  Output:
 * inverse RoPE, grouped low-rank wo_a (BF16 GEMM on dequantized FP8), then wo_b.
 * Projections that read the same input go to the backend as one list
 * (v4_linear_many: one parallel section, shared activation quantization).
 */
#include <math.h>
#include <string.h>

#include "attn_kern.h"
#include "internal.h"
#include "ops.h"

/* Candidate list of sequence s at its current position; returns its length. */
static int candidates(v4_ctx *c, const v4_layer_w *lw, v4_layer_state *L, int pos, int b)
{
    const v4_config *cfg = &c->w->cfg;
    const int win = cfg->window, hd = cfg->head_dim;
    const uint16_t **cand = c->s.cand;
    int n = 0;
    if (pos >= win - 1) {
        int s = pos % win;
        for (int i = s + 1; i < win; i++)
            cand[n++] = L->win + (size_t)i * hd;
        for (int i = 0; i <= s; i++)
            cand[n++] = L->win + (size_t)i * hd;
    } else {
        for (int i = 0; i <= pos; i++)
            cand[n++] = L->win + (size_t)i * hd;
        while (n < win)
            cand[n++] = NULL;
    }
    if (lw->ratio == 4) {
        const int *sel = c->s.csel + (size_t)b * cfg->index_topk;
        for (int i = 0; i < c->s.ncsel[b]; i++)
            cand[n++] = L->comp + (size_t)sel[i] * hd;
    } else if (lw->ratio) {
        for (int j = 0; j < L->n_comp; j++)
            cand[n++] = L->comp + (size_t)j * hd;
    }
    return n;
}

int v4_attention(v4_ctx *c, int layer, v4_seq *const *seqs, int n, v4_trace *const *tr)
{
    const v4_config *cfg = &c->w->cfg;
    const v4_layer_w *lw = &c->w->layers[layer];
    v4_scratch *S = &c->s;
    v4_backend *be = c->be;
    const int dim = cfg->dim, H = cfg->n_heads, hd = cfg->head_dim, rd = cfg->rope_head_dim;
    const int ql = cfg->q_lora_rank, G = cfg->o_groups, ol = cfg->o_lora_rank;
    const int ih = cfg->index_n_heads, id = cfg->index_head_dim;
    const float eps = cfg->norm_eps;
    const float *freqs = lw->ratio ? c->freqs_comp : c->freqs_swa;

    /* batched projections, as two backend lists: those of the normed input x, then
     * those of the q_norm output qa */
    v4_lin_job jobs[8];
    int nj = 0;
    jobs[nj++] = (v4_lin_job){&lw->wq_a, V4_LIN_QUANT, n, S->x, dim, S->qa, ql};
    jobs[nj++] = (v4_lin_job){&lw->wkv, V4_LIN_QUANT, n, S->x, dim, S->kv, hd};
    if (lw->ratio) {
        int cw = lw->comp.wkv.rows;
        jobs[nj++] = (v4_lin_job){&lw->comp.wkv, V4_LIN_EXACT, n, S->x, dim, S->ckv, cw};
        jobs[nj++] = (v4_lin_job){&lw->comp.wgate, V4_LIN_EXACT, n, S->x, dim, S->csc, cw};
    }
    if (lw->ratio == 4) {
        jobs[nj++] = (v4_lin_job){&lw->idx_weights_proj, V4_LIN_EXACT, n, S->x, dim, S->iw, ih};
        jobs[nj++] = (v4_lin_job){&lw->idx_comp.wkv, V4_LIN_EXACT, n, S->x, dim, S->ikv, 2 * id};
        jobs[nj++] = (v4_lin_job){&lw->idx_comp.wgate, V4_LIN_EXACT, n, S->x, dim, S->isc, 2 * id};
    }
    v4_linear_many(be, jobs, nj);
    for (int b = 0; b < n; b++)
        v4_rmsnorm(S->qa + (size_t)b * ql, lw->q_norm, ql, eps, S->qa + (size_t)b * ql);
    nj = 0;
    jobs[nj++] = (v4_lin_job){&lw->wq_b, V4_LIN_QUANT, n, S->qa, ql, S->q, H * hd};
    if (lw->ratio == 4)
        jobs[nj++] = (v4_lin_job){&lw->idx_wq_b, V4_LIN_QUANT, n, S->qa, ql, S->iq, ih * id};
    v4_linear_many(be, jobs, nj);

    const float scale = (float)pow((double)hd, -0.5);
    for (int b = 0; b < n; b++) {
        v4_seq *s = seqs[b];
        v4_layer_state *L = &s->L[layer];
        v4_trace *t = tr ? tr[b] : NULL;
        const int pos = S->rowpos[b];
        float *q = S->q + (size_t)b * H * hd, *kv = S->kv + (size_t)b * hd;

        for (int h = 0; h < H; h++) {
            v4_head_rms_bf16(q + (size_t)h * hd, hd, eps);
            v4_rope(q + (size_t)h * hd + hd - rd, rd / 2, freqs, pos, 0);
        }
        v4_rmsnorm(kv, lw->kv_norm, hd, eps, kv);
        v4_rope(kv + hd - rd, rd / 2, freqs, pos, 0);
        v4_fp8_sim(kv, hd - rd, 64);
        if (t && t->q)
            memcpy(t->q + (size_t)layer * H * hd, q, sizeof(float) * (size_t)H * hd);
        if (t && t->kv)
            memcpy(t->kv + (size_t)layer * hd, kv, sizeof(float) * (size_t)hd);

        if (lw->ratio == 4)
            v4_indexer(c, layer, s, b, t);
        v4_seq_store_bf16(s, L->win + (size_t)(pos % cfg->window) * hd, kv, hd);
        if (lw->ratio) {
            int cw = lw->comp.wkv.rows;
            float e[1024];   /* head_dim <= 1024 (the attention loops' limit) */
            if (v4_compressor_step(&lw->comp, &L->cs, pos, S->ckv + (size_t)b * cw,
                                   S->csc + (size_t)b * cw, freqs, rd, eps, 0, e))
                v4_seq_store_bf16(s, L->comp + (size_t)L->n_comp++ * hd, e, hd);
        }

        int nc = candidates(c, lw, L, pos, b);
        float *o = S->o + (size_t)b * H * hd;
        v4_sparse_attn_heads_bf16_k(c->attn, q, H, S->cand, nc, hd, scale, lw->attn_sink, o);
        for (int h = 0; h < H; h++)
            v4_rope(o + (size_t)h * hd + hd - rd, rd / 2, freqs, pos, 1);
    }

    /* grouped low-rank output projection: the groups as one backend list (8 at a time) */
    const int gin = H * hd / G;
    for (int g0 = 0; g0 < G; g0 += 8) {
        v4_mat wg[8];
        nj = 0;
        for (int g = g0; g < G && g < g0 + 8; g++, nj++) {
            wg[nj] = v4_mat_rows(&lw->wo_a, g * ol, ol);
            jobs[nj] = (v4_lin_job){&wg[nj], V4_LIN_BF16, n, S->o + (size_t)g * gin, H * hd, S->z + (size_t)g * ol,
                                    G * ol};
        }
        v4_linear_many(be, jobs, nj);
    }
    v4_round_bf16(S->z, n * G * ol);
    v4_linear(be, &lw->wo_b, V4_LIN_QUANT, n, S->z, G * ol, S->out, dim);
    return 0;
}
