/* numcheck_kernels.c - the per-kernel part of numerics-check (numcheck.h): every
 * matrix the decode path multiplies, on identical activations, through the reference
 * and the candidate backend; grouped by weight type and mode. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/codec.h"
#include "numcheck.h"

typedef struct kctx {
    v4_backend *ref, *cand;
    int rows;
    float *x, *yr, *yc;        /* [rows][max cols], [rows][max out] x2 */
    v4nc_kernel_row *out;
    int max, n;
} kctx;

static const char *type_name(v4_wtype t)
{
    return t == V4_W_FP8 ? "FP8" : t == V4_W_FP4 ? "FP4" : t == V4_W_BF16 ? "BF16" : "F32";
}

/* splitmix64: deterministic activations, the same for every run. */
static uint64_t mix(uint64_t *s)
{
    uint64_t z = (*s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

static void fill_acts(float *x, int rows, int cols, uint64_t seed)
{
    for (int r = 0; r < rows; r++)
        for (int b0 = 0; b0 < cols; b0 += 128) {
            const int e = (int)(mix(&seed) % 11) - 6;          /* block magnitude 2^-6..2^4 */
            for (int j = b0; j < cols && j < b0 + 128; j++) {
                uint64_t u = mix(&seed);
                float m = (float)((double)(u >> 11) / 9007199254740992.0);   /* [0, 1) */
                float v = (u & 1 ? -1.0f : 1.0f) * (0.25f + m) * (float)(1 << (e + 6)) / 64.0f;
                x[(size_t)r * cols + j] = (u % 29) == 0 ? 0.0f : v4_bf16(v);
            }
        }
}

static void check(kctx *k, const v4_mat *W, v4_lin_mode mode, const char *what)
{
    if (!W->w || W->rows <= 0 || W->cols <= 0)
        return;
    fill_acts(k->x, k->rows, W->cols, (uint64_t)W->rows * 1315423911u + (uint64_t)W->cols);
    v4_linear(k->ref, W, mode, k->rows, k->x, W->cols, k->yr, W->rows);
    v4_linear(k->cand, W, mode, k->rows, k->x, W->cols, k->yc, W->rows);
    v4_diff d = {0};
    v4_diff_add(&d, k->yr, k->yc, (size_t)k->rows * W->rows);
    const char *tn = type_name(W->type), *mn = mode == V4_LIN_QUANT ? "quant" : mode == V4_LIN_BF16 ? "bf16" : "exact";
    v4nc_kernel_row *row = NULL;
    for (int i = 0; i < k->n && !row; i++)
        if (!strcmp(k->out[i].type, tn) && !strcmp(k->out[i].mode, mn))
            row = &k->out[i];
    if (!row) {
        if (k->n >= k->max)
            return;
        row = &k->out[k->n++];
        *row = (v4nc_kernel_row){tn, mn, 0, -1.0, "", 0};
    }
    const double v = v4_diff_value(&d);
    row->matrices++;
    row->pattern_bad += d.pattern_bad;
    if (v > row->worst) {
        row->worst = v;
        snprintf(row->worst_at, sizeof row->worst_at, "%s", what);
    }
}

/* The three products of an expert: idx < 0 the shared one, else routed expert idx. */
static void expert(kctx *k, const v4_expert_w *e, int idx, int l)
{
    const v4_mat *m[3] = {&e->w1, &e->w3, &e->w2};
    char b[64];
    for (int i = 0; i < 3; i++) {
        if (idx < 0)
            snprintf(b, sizeof b, "layer %d shared.w%d", l, i == 0 ? 1 : i == 1 ? 3 : 2);
        else
            snprintf(b, sizeof b, "layer %d expert %d.w%d", l, idx, i == 0 ? 1 : i == 1 ? 3 : 2);
        check(k, m[i], V4_LIN_QUANT, b);
    }
}

static void layer(kctx *k, const v4_layer_w *lw, int l, int n_experts)
{
    struct { const v4_mat *m; v4_lin_mode mode; const char *name; } t[] = {
        {&lw->hc_attn_fn, V4_LIN_EXACT, "hc_attn_fn"}, {&lw->hc_ffn_fn, V4_LIN_EXACT, "hc_ffn_fn"},
        {&lw->wq_a, V4_LIN_QUANT, "wq_a"}, {&lw->wq_b, V4_LIN_QUANT, "wq_b"}, {&lw->wkv, V4_LIN_QUANT, "wkv"},
        {&lw->wo_a, V4_LIN_BF16, "wo_a"}, {&lw->wo_b, V4_LIN_QUANT, "wo_b"},
        {&lw->comp.wkv, V4_LIN_EXACT, "compressor.wkv"}, {&lw->comp.wgate, V4_LIN_EXACT, "compressor.wgate"},
        {&lw->idx_wq_b, V4_LIN_QUANT, "indexer.wq_b"}, {&lw->idx_weights_proj, V4_LIN_EXACT, "indexer.weights_proj"},
        {&lw->idx_comp.wkv, V4_LIN_EXACT, "indexer.compressor.wkv"},
        {&lw->idx_comp.wgate, V4_LIN_EXACT, "indexer.compressor.wgate"},
        {&lw->gate, V4_LIN_EXACT, "gate"},
    };
    char b[64];
    for (size_t i = 0; i < sizeof t / sizeof t[0]; i++) {
        snprintf(b, sizeof b, "layer %d %s", l, t[i].name);
        check(k, t[i].m, t[i].mode, b);
    }
    expert(k, &lw->shared, -1, l);
    if (lw->experts && n_experts > 0) {
        expert(k, &lw->experts[0], 0, l);
        if (n_experts > 1)
            expert(k, &lw->experts[n_experts - 1], n_experts - 1, l);
    }
}

static int widest(const v4_mat *m, int w, int cols)
{
    const int v = cols ? m->cols : m->rows;
    return v > w ? v : w;
}

int v4nc_kernels(const v4_weights *w, v4_backend *ref, v4_backend *cand, int rows, v4nc_kernel_row *out, int max,
                 int *n_out, v4_error *err)
{
    const v4_config *cfg = &w->cfg;
    /* The widest input and output of any matrix: dim, hc*dim, moe_inter, q_lora,
     * o_groups*o_lora, the head's vocab, ... - take them from the matrices. */
    int mc = widest(&w->head, 0, 1), mr = widest(&w->head, 0, 0);
    mc = widest(&w->hc_head_fn, mc, 1);
    for (int l = 0; l < cfg->n_layers; l++) {
        const v4_layer_w *lw = &w->layers[l];
        const v4_mat *ms[] = {&lw->hc_attn_fn, &lw->hc_ffn_fn, &lw->wq_a, &lw->wq_b, &lw->wkv, &lw->wo_a, &lw->wo_b,
                              &lw->comp.wkv, &lw->comp.wgate, &lw->idx_wq_b, &lw->idx_weights_proj,
                              &lw->idx_comp.wkv, &lw->idx_comp.wgate, &lw->gate, &lw->shared.w1, &lw->shared.w2};
        for (size_t i = 0; i < sizeof ms / sizeof ms[0]; i++) {
            mc = widest(ms[i], mc, 1);
            mr = widest(ms[i], mr, 0);
        }
    }
    kctx k = {ref, cand, rows, malloc(sizeof(float) * (size_t)rows * mc), malloc(sizeof(float) * (size_t)rows * mr),
              malloc(sizeof(float) * (size_t)rows * mr), out, max, 0};
    if (!k.x || !k.yr || !k.yc) {
        free(k.x); free(k.yr); free(k.yc);
        return v4_err_set(err, V4_ERR_NOMEM, "numerics-check", "out of memory for the kernel check");
    }
    for (int l = 0; l < cfg->n_layers; l++)
        layer(&k, &w->layers[l], l, cfg->n_routed_experts);
    check(&k, &w->hc_head_fn, V4_LIN_EXACT, "hc_head_fn");
    check(&k, &w->head, V4_LIN_BF16, "head");
    free(k.x); free(k.yr); free(k.yc);
    *n_out = k.n;
    return 0;
}
