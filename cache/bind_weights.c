/* bind_weights.c - see bind_weights.h.
 *
 * Large matrices are never copied: a v4_mat points at the mapped bytes.  Small
 * vectors (norms, biases, mHC parameters, ape, sinks) are converted to aligned float
 * arrays, and a float/bf16 matrix whose mapped address happens to be misaligned is
 * copied once (safetensors gives no alignment guarantee; V4 checkpoints are aligned
 * in practice).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../kernels/codec.h"
#include "bind_weights.h"

typedef struct binder {
    const v4_ckpt *ck;
    v4_weights *w;
    v4_error *err;
    char name[256];
    int failed;
    int no_routed;              /* V4_BIND_NO_ROUTED */
} binder;

static void *own(binder *b, size_t bytes)
{
    if (b->failed)
        return NULL;
    v4_weights *w = b->w;
    if (w->n_owned == w->cap_owned) {
        int cap = w->cap_owned ? 2 * w->cap_owned : 64;
        void **p = realloc(w->owned, sizeof(void *) * (size_t)cap);
        if (!p)
            goto oom;
        w->owned = p;
        w->cap_owned = cap;
    }
    void *m = aligned_alloc(64, (bytes + 63) / 64 * 64);
    if (!m)
        goto oom;
    w->owned[w->n_owned++] = m;
    return m;
oom:
    b->failed = 1;
    v4_err_set(b->err, V4_ERR_NOMEM, b->name, "out of memory");
    return NULL;
}

/* Look up "<fmt>" with dtype dt and shape (d0[, d1]); NULL (and b->failed) on error. */
static const v4_tensor *get(binder *b, v4_dtype dt, int ndim, int64_t d0, int64_t d1, const char *fmt, ...)
    __attribute__((format(printf, 6, 7)));
static const v4_tensor *get(binder *b, v4_dtype dt, int ndim, int64_t d0, int64_t d1, const char *fmt, ...)
{
    if (b->failed)
        return NULL;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(b->name, sizeof b->name, fmt, ap);
    va_end(ap);
    int64_t shape[2] = {d0, d1};
    const v4_tensor *t = v4_ckpt_expect(b->ck, b->name, dt, ndim, shape, b->err);
    if (!t)
        b->failed = 1;
    return t;
}

static const void *aligned_data(binder *b, const v4_tensor *t, size_t align)
{
    if (!t)
        return NULL;
    if (((uintptr_t)t->data % align) == 0)
        return t->data;
    void *m = own(b, t->nbytes);
    if (m)
        memcpy(m, t->data, t->nbytes);
    return m;
}

/* BF16 or F32 vector of n elements -> owned float array. */
static const float *vec(binder *b, v4_dtype dt, int64_t n, const char *name)
{
    const v4_tensor *t = get(b, dt, 1, n, 0, "%s", name);
    float *f = t ? own(b, sizeof(float) * (size_t)n) : NULL;
    if (!f)
        return NULL;
    const uint8_t *p = t->data;
    for (int64_t i = 0; i < n; i++) {
        if (dt == V4_DT_BF16) {
            uint16_t u;
            memcpy(&u, p + 2 * i, 2);
            f[i] = v4_bf16_from_bits(u);
        } else {
            memcpy(&f[i], p + 4 * i, 4);
        }
    }
    return f;
}

/* A dense BF16/F32 matrix [rows][cols]. */
static v4_mat dense(binder *b, v4_dtype dt, int rows, int cols, const char *name)
{
    v4_mat m = {dt == V4_DT_BF16 ? V4_W_BF16 : V4_W_F32, rows, cols, NULL, NULL, V4_LAYOUT_ROWMAJOR};
    const v4_tensor *t = get(b, dt, 2, rows, cols, "%s", name);
    m.w = aligned_data(b, t, v4_dtype_size(dt));
    return m;
}

/* An FP8 (128x128 block scales) or packed FP4 (per-32 row scales) matrix "<name>.weight". */
static v4_mat quant(binder *b, int fp4, int rows, int cols, const char *prefix)
{
    v4_mat m = {fp4 ? V4_W_FP4 : V4_W_FP8, rows, cols, NULL, NULL, V4_LAYOUT_ROWMAJOR};
    char wn[256], sn[256];
    snprintf(wn, sizeof wn, "%s.weight", prefix);
    snprintf(sn, sizeof sn, "%s.scale", prefix);
    const v4_tensor *t = get(b, fp4 ? V4_DT_I8 : V4_DT_F8_E4M3, 2, rows, fp4 ? cols / 2 : cols, "%s", wn);
    const v4_tensor *s = fp4 ? get(b, V4_DT_F8_E8M0, 2, rows, cols / 32, "%s", sn)
                             : get(b, V4_DT_F8_E8M0, 2, (rows + 127) / 128, (cols + 127) / 128, "%s", sn);
    if (t && s) {
        m.w = t->data;
        m.scale = s->data;
    }
    return m;
}

static void bind_compressor(binder *b, const v4_config *cfg, v4_compressor_w *cw, int ratio, int d, const char *pre)
{
    char n[256];
    cw->ratio = ratio;
    cw->dim = d;
    cw->overlap = ratio == 4;
    int cd = (cw->overlap ? 2 : 1) * d;
    snprintf(n, sizeof n, "%s.ape", pre);
    const v4_tensor *t = get(b, V4_DT_F32, 2, ratio, cd, "%s", n);
    float *ape = t ? own(b, t->nbytes) : NULL;
    if (ape)
        memcpy(ape, t->data, t->nbytes);
    cw->ape = ape;
    snprintf(n, sizeof n, "%s.wkv.weight", pre);
    cw->wkv = dense(b, V4_DT_BF16, cd, cfg->dim, n);
    snprintf(n, sizeof n, "%s.wgate.weight", pre);
    cw->wgate = dense(b, V4_DT_BF16, cd, cfg->dim, n);
    snprintf(n, sizeof n, "%s.norm.weight", pre);
    cw->norm = vec(b, V4_DT_BF16, d, n);
}

static void bind_expert(binder *b, const v4_config *cfg, v4_expert_w *e, int fp4, const char *pre)
{
    char n[256];
    snprintf(n, sizeof n, "%s.w1", pre);
    e->w1 = quant(b, fp4, cfg->moe_inter, cfg->dim, n);
    snprintf(n, sizeof n, "%s.w3", pre);
    e->w3 = quant(b, fp4, cfg->moe_inter, cfg->dim, n);
    snprintf(n, sizeof n, "%s.w2", pre);
    e->w2 = quant(b, fp4, cfg->dim, cfg->moe_inter, n);
}

static void bind_tid2eid(binder *b, const v4_config *cfg, v4_layer_w *lw, int l)
{
    const int V = cfg->vocab_size, K = cfg->n_act_experts;
    const v4_tensor *t = get(b, V4_DT_I64, 2, V, K, "layers.%d.ffn.gate.tid2eid", l);
    int32_t *tab = t ? own(b, sizeof(int32_t) * (size_t)V * K) : NULL;
    if (!tab)
        return;
    const uint8_t *p = t->data;
    for (size_t i = 0; i < (size_t)V * K; i++) {
        int64_t v;
        memcpy(&v, p + 8 * i, 8);
        if (v < 0 || v >= cfg->n_routed_experts) {
            b->failed = 1;
            v4_err_set(b->err, V4_ERR_RANGE, b->name, "entry [%zu][%zu] = %lld is not an expert id in [0, %d)",
                       i / K, i % K, (long long)v, cfg->n_routed_experts);
            return;
        }
        tab[i] = (int32_t)v;
    }
    lw->tid2eid = tab;
}

static void bind_layer(binder *b, const v4_config *cfg, int l)
{
    v4_layer_w *lw = &b->w->layers[l];
    const int D = cfg->dim, hc = cfg->hc_mult, mix = (2 + hc) * hc, H = cfg->n_heads, hd = cfg->head_dim;
    const int ql = cfg->q_lora_rank, G = cfg->o_groups, ol = cfg->o_lora_rank;
    char p[64], n[256];
    snprintf(p, sizeof p, "layers.%d", l);
    lw->ratio = cfg->compress_ratios[l];
#define NAME(fmt) (snprintf(n, sizeof n, "%s." fmt, p), n)
    lw->hc_attn_fn = dense(b, V4_DT_F32, mix, hc * D, NAME("hc_attn_fn"));
    lw->hc_ffn_fn = dense(b, V4_DT_F32, mix, hc * D, NAME("hc_ffn_fn"));
    lw->hc_attn_base = vec(b, V4_DT_F32, mix, NAME("hc_attn_base"));
    lw->hc_ffn_base = vec(b, V4_DT_F32, mix, NAME("hc_ffn_base"));
    lw->hc_attn_scale = vec(b, V4_DT_F32, 3, NAME("hc_attn_scale"));
    lw->hc_ffn_scale = vec(b, V4_DT_F32, 3, NAME("hc_ffn_scale"));
    lw->attn_norm = vec(b, V4_DT_BF16, D, NAME("attn_norm.weight"));
    lw->ffn_norm = vec(b, V4_DT_BF16, D, NAME("ffn_norm.weight"));
    lw->attn_sink = vec(b, V4_DT_F32, H, NAME("attn.attn_sink"));
    lw->wq_a = quant(b, 0, ql, D, NAME("attn.wq_a"));
    lw->wq_b = quant(b, 0, H * hd, ql, NAME("attn.wq_b"));
    lw->q_norm = vec(b, V4_DT_BF16, ql, NAME("attn.q_norm.weight"));
    lw->wkv = quant(b, 0, hd, D, NAME("attn.wkv"));
    lw->kv_norm = vec(b, V4_DT_BF16, hd, NAME("attn.kv_norm.weight"));
    lw->wo_a = quant(b, 0, G * ol, H * hd / G, NAME("attn.wo_a"));
    lw->wo_b = quant(b, 0, D, G * ol, NAME("attn.wo_b"));
    if (lw->ratio)
        bind_compressor(b, cfg, &lw->comp, lw->ratio, hd, NAME("attn.compressor"));
    if (lw->ratio == 4) {
        const int ih = cfg->index_n_heads, id = cfg->index_head_dim;
        lw->idx_wq_b = quant(b, 0, ih * id, ql, NAME("attn.indexer.wq_b"));
        lw->idx_weights_proj = dense(b, V4_DT_BF16, ih, D, NAME("attn.indexer.weights_proj.weight"));
        bind_compressor(b, cfg, &lw->idx_comp, 4, id, NAME("attn.indexer.compressor"));
    }
    lw->gate = dense(b, V4_DT_BF16, cfg->n_routed_experts, D, NAME("ffn.gate.weight"));
    if (v4_layer_is_hash(cfg, l))
        bind_tid2eid(b, cfg, lw, l);
    else
        lw->gate_bias = vec(b, V4_DT_F32, cfg->n_routed_experts, NAME("ffn.gate.bias"));
    bind_expert(b, cfg, &lw->shared, 0, NAME("ffn.shared_experts"));
#undef NAME
    lw->experts = calloc((size_t)cfg->n_routed_experts, sizeof *lw->experts);
    if (!lw->experts) {
        b->failed = 1;
        v4_err_set(b->err, V4_ERR_NOMEM, p, "out of memory");
        return;
    }
    const v4_wtype xt = cfg->expert_fp4 ? V4_W_FP4 : V4_W_FP8;
    for (int e = 0; e < cfg->n_routed_experts && !b->failed; e++) {
        if (b->no_routed) {     /* shape only: the provider delivers the bytes */
            lw->experts[e].w1 = (v4_mat){xt, cfg->moe_inter, cfg->dim, NULL, NULL, V4_LAYOUT_ROWMAJOR};
            lw->experts[e].w3 = (v4_mat){xt, cfg->moe_inter, cfg->dim, NULL, NULL, V4_LAYOUT_ROWMAJOR};
            lw->experts[e].w2 = (v4_mat){xt, cfg->dim, cfg->moe_inter, NULL, NULL, V4_LAYOUT_ROWMAJOR};
            continue;
        }
        snprintf(n, sizeof n, "%s.ffn.experts.%d", p, e);
        bind_expert(b, cfg, &lw->experts[e], cfg->expert_fp4, n);
    }
}

int v4_weights_bind(const v4_config *cfg, const v4_ckpt *ck, v4_weights *w, v4_error *err)
{
    return v4_weights_bind_ex(cfg, ck, 0, w, err);
}

int v4_weights_bind_ex(const v4_config *cfg, const v4_ckpt *ck, int flags, v4_weights *w, v4_error *err)
{
    memset(w, 0, sizeof *w);
    w->cfg = *cfg;
    binder b = {.ck = ck, .w = w, .err = err, .no_routed = (flags & V4_BIND_NO_ROUTED) != 0};
    const int V = cfg->vocab_size, D = cfg->dim, hc = cfg->hc_mult;
    if (cfg->head_dim > 1024 || cfg->index_head_dim > 1024 || cfg->index_n_heads > 1024 ||
        cfg->n_routed_experts > 1024 || cfg->hc_mult > 16 || cfg->rope_head_dim > 128) {
        return v4_err_set(err, V4_ERR_CONFIG, "config.json",
                          "dimensions beyond this engine's limits (head_dim, index_head_dim, "
                          "index_n_heads, n_routed_experts <= 1024; hc_mult <= 16; rope dims <= 128)");
    }
    for (int l = 0; l < cfg->n_layers; l++)
        if (cfg->compress_ratios[l] > 256)
            return v4_err_set(err, V4_ERR_CONFIG, "config.json",
                              "compress_ratios[%d] = %d exceeds this engine's limit of 256", l, cfg->compress_ratios[l]);
    w->embed = dense(&b, V4_DT_BF16, V, D, "embed.weight");
    w->head = dense(&b, V4_DT_BF16, V, D, "head.weight");
    w->norm = vec(&b, V4_DT_BF16, D, "norm.weight");
    w->hc_head_fn = dense(&b, V4_DT_F32, hc, hc * D, "hc_head_fn");
    w->hc_head_base = vec(&b, V4_DT_F32, hc, "hc_head_base");
    w->hc_head_scale = vec(&b, V4_DT_F32, 1, "hc_head_scale");
    w->layers = calloc((size_t)cfg->n_layers, sizeof *w->layers);
    if (!w->layers && !b.failed) {
        b.failed = 1;
        v4_err_set(err, V4_ERR_NOMEM, "layers", "out of memory");
    }
    for (int l = 0; l < cfg->n_layers && !b.failed; l++)
        bind_layer(&b, cfg, l);
    if (b.failed) {
        v4_weights_free(w);
        return -1;
    }
    return 0;
}
