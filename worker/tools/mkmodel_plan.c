/* mkmodel_plan.c - the tensor plan of a synthetic checkpoint (see mkmodel.h).
 *
 * The plan lists, shard by shard, every tensor of the real V4-Flash naming, dtypes and
 * order (spec v4-decode.md §3.2): shard 1 = embed.weight, shard L+2 = everything of
 * layer L, the last shard = hc_head_*, norm.weight, head.weight.  Each entry says how
 * its contents are initialized (mkmodel_gen.c).  From the plan come every file's size
 * (through a throw-away safetensors writer, so header padding is exact), the index's
 * total_size, the index JSON and the bytes one decode token reads.
 *
 * Owner: the mkmodel work package.  Thread: one thread per plan while it is built;
 * a built plan is read-only.
 */
#include <jansson.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "cache/st_writer.h"
#include "mkmodel.h"

typedef struct builder {
    v4mk_shard *sh;
    char prefix[32];
    int failed;
    int no_experts;
} builder;

static v4mk_tensor *spec_push(builder *b, const char *name, const char *base, v4_dtype dt,
                        int ndim, int64_t d0, int64_t d1, v4mk_init kind)
{
    v4mk_shard *s = b->sh;
    if (s->n == s->cap) {
        size_t cap = s->cap ? 2 * s->cap : 128;
        v4mk_tensor *t = realloc(s->t, cap * sizeof *t);
        if (!t) {
            b->failed = 1;
            return NULL;
        }
        s->t = t;
        s->cap = cap;
    }
    v4mk_tensor *t = &s->t[s->n];
    memset(t, 0, sizeof *t);
    int n1 = snprintf(t->name, sizeof t->name, "%s%s", b->prefix, name);
    int n2 = snprintf(t->base, sizeof t->base, "%s%s", b->prefix, base);
    if (n1 < 0 || n2 < 0 || (size_t)n1 >= sizeof t->name || (size_t)n2 >= sizeof t->base) {
        b->failed = 1;
        return NULL;
    }
    t->dt = dt;
    t->ndim = ndim;
    t->shape[0] = d0;
    t->shape[1] = d1;
    t->kind = kind;
    s->n++;
    return t;
}

/* A BF16 or F32 tensor of N(mean, std) values; d1 < 0 = rank 1. */
static void add_normal(builder *b, const char *name, v4_dtype dt, int64_t d0, int64_t d1,
                       double mean, double std)
{
    v4mk_tensor *t = spec_push(b, name, name, dt, d1 < 0 ? 1 : 2, d0, d1, V4MK_NORMAL);
    if (t) {
        t->mean = mean;
        t->std = std;
    }
}

static void add_norm(builder *b, const char *name, int64_t n)
{
    add_normal(b, name, V4_DT_BF16, n, -1, 1.0, 0.05);
}

/* base.weight F8_E4M3 [out][in] + base.scale F8_E8M0 [ceil(out/128)][ceil(in/128)]. */
static void add_fp8(builder *b, const char *base, int64_t out, int64_t in)
{
    char w[V4MK_NAME_MAX], s[V4MK_NAME_MAX];
    snprintf(w, sizeof w, "%s.weight", base);
    snprintf(s, sizeof s, "%s.scale", base);
    double std = 1.0 / sqrt((double)in);
    v4mk_tensor *t = spec_push(b, w, base, V4_DT_F8_E4M3, 2, out, in, V4MK_FP8_W);
    if (t)
        t->std = std;
    t = spec_push(b, s, base, V4_DT_F8_E8M0, 2, (out + 127) / 128, (in + 127) / 128, V4MK_FP8_S);
    if (t)
        t->std = std;
}

/* base.weight I8 [out][in/2] (packed FP4) + base.scale F8_E8M0 [out][in/32]. */
static void add_fp4(builder *b, const char *base, int64_t out, int64_t in)
{
    char w[V4MK_NAME_MAX], s[V4MK_NAME_MAX];
    snprintf(w, sizeof w, "%s.weight", base);
    snprintf(s, sizeof s, "%s.scale", base);
    double std = 1.0 / sqrt((double)in);
    v4mk_tensor *t = spec_push(b, w, base, V4_DT_I8, 2, out, in / 2, V4MK_FP4_W);
    if (t)
        t->std = std;
    t = spec_push(b, s, base, V4_DT_F8_E8M0, 2, out, in / 32, V4MK_FP4_S);
    if (t)
        t->std = std;
}

/* compressor.{ape, wkv, wgate, norm} under prefix pre ("attn." or "attn.indexer."). */
static void add_compressor(builder *b, const v4_config *c, const char *pre, int ratio, int d)
{
    char n[V4MK_NAME_MAX];
    int width = ratio == 4 ? 2 * d : d;
    double wstd = 1.0 / sqrt((double)c->dim);
    snprintf(n, sizeof n, "%scompressor.ape", pre);
    add_normal(b, n, V4_DT_F32, ratio, width, 0.0, 0.1);
    snprintf(n, sizeof n, "%scompressor.wkv.weight", pre);
    add_normal(b, n, V4_DT_BF16, width, c->dim, 0.0, wstd);
    snprintf(n, sizeof n, "%scompressor.wgate.weight", pre);
    add_normal(b, n, V4_DT_BF16, width, c->dim, 0.0, wstd);
    snprintf(n, sizeof n, "%scompressor.norm.weight", pre);
    add_norm(b, n, d);
}

static void add_layer_hc(builder *b, const v4_config *c)
{
    int hc = c->hc_mult, mix = (2 + hc) * hc;
    double fstd = 0.5 / sqrt((double)hc * c->dim);
    add_normal(b, "hc_attn_fn", V4_DT_F32, mix, (int64_t)hc * c->dim, 0.0, fstd);
    add_normal(b, "hc_ffn_fn", V4_DT_F32, mix, (int64_t)hc * c->dim, 0.0, fstd);
    const char *bases[2] = {"hc_attn_base", "hc_ffn_base"};
    for (int i = 0; i < 2; i++) {
        v4mk_tensor *t = spec_push(b, bases[i], bases[i], V4_DT_F32, 1, mix, 0, V4MK_HC_BASE);
        if (t) {
            t->mean = 2.0;
            t->std = 0.1;
            t->aux = hc;
        }
    }
    add_normal(b, "hc_attn_scale", V4_DT_F32, 3, -1, 1.0, 0.1);
    add_normal(b, "hc_ffn_scale", V4_DT_F32, 3, -1, 1.0, 0.1);
}

static void add_attention(builder *b, const v4_config *c, int layer)
{
    int64_t hd = c->head_dim, qh = (int64_t)c->n_heads * hd;
    add_normal(b, "attn.attn_sink", V4_DT_F32, c->n_heads, -1, 0.0, 0.1);
    add_fp8(b, "attn.wq_a", c->q_lora_rank, c->dim);
    add_fp8(b, "attn.wq_b", qh, c->q_lora_rank);
    add_norm(b, "attn.q_norm.weight", c->q_lora_rank);
    add_fp8(b, "attn.wo_a", (int64_t)c->o_groups * c->o_lora_rank, qh / c->o_groups);
    add_fp8(b, "attn.wkv", hd, c->dim);
    add_norm(b, "attn.kv_norm.weight", hd);
    int ratio = c->compress_ratios[layer];
    if (ratio)
        add_compressor(b, c, "attn.", ratio, (int)hd);
    if (ratio == 4) {
        add_fp8(b, "attn.indexer.wq_b", (int64_t)c->index_n_heads * c->index_head_dim,
                c->q_lora_rank);
        add_normal(b, "attn.indexer.weights_proj.weight", V4_DT_BF16, c->index_n_heads, c->dim,
                   0.0, 1.0 / sqrt((double)c->dim));
        add_compressor(b, c, "attn.indexer.", 4, c->index_head_dim);
    }
    add_fp8(b, "attn.wo_b", c->dim, (int64_t)c->o_groups * c->o_lora_rank);
}

static void add_ffn(builder *b, const v4_config *c, int layer)
{
    char n[V4MK_NAME_MAX];
    add_fp8(b, "ffn.shared_experts.w1", c->moe_inter, c->dim);
    add_fp8(b, "ffn.shared_experts.w3", c->moe_inter, c->dim);
    add_fp8(b, "ffn.shared_experts.w2", c->dim, c->moe_inter);
    for (int e = 0; e < c->n_routed_experts && !b->no_experts; e++) {
        snprintf(n, sizeof n, "ffn.experts.%d.w1", e);
        add_fp4(b, n, c->moe_inter, c->dim);
        snprintf(n, sizeof n, "ffn.experts.%d.w3", e);
        add_fp4(b, n, c->moe_inter, c->dim);
    }
    for (int e = 0; e < c->n_routed_experts && !b->no_experts; e++) {
        snprintf(n, sizeof n, "ffn.experts.%d.w2", e);
        add_fp4(b, n, c->dim, c->moe_inter);
    }
    if (v4_layer_is_hash(c, layer)) {
        v4mk_tensor *t = spec_push(b, "ffn.gate.tid2eid", "ffn.gate.tid2eid", V4_DT_I64, 2,
                             c->vocab_size, c->n_act_experts, V4MK_TID2EID);
        if (t)
            t->aux = c->n_routed_experts;
    } else {
        add_normal(b, "ffn.gate.bias", V4_DT_F32, c->n_routed_experts, -1, 0.0, 0.02);
    }
    add_normal(b, "ffn.gate.weight", V4_DT_BF16, c->n_routed_experts, c->dim, 0.0,
               1.0 / sqrt((double)c->dim));
}

static void build_layer(builder *b, const v4_config *c, int layer)
{
    snprintf(b->prefix, sizeof b->prefix, "layers.%d.", layer);
    add_layer_hc(b, c);
    add_attention(b, c, layer);
    add_norm(b, "attn_norm.weight", c->dim);
    add_norm(b, "ffn_norm.weight", c->dim);
    add_ffn(b, c, layer);
}

static void build_head(builder *b, const v4_config *c)
{
    int hc = c->hc_mult;
    b->prefix[0] = 0;
    add_normal(b, "hc_head_base", V4_DT_F32, hc, -1, 0.0, 0.1);
    add_normal(b, "hc_head_fn", V4_DT_F32, hc, (int64_t)hc * c->dim, 0.0,
               0.5 / sqrt((double)hc * c->dim));
    add_normal(b, "hc_head_scale", V4_DT_F32, 1, -1, 1.0, 0.1);
    add_norm(b, "norm.weight", c->dim);
    add_normal(b, "head.weight", V4_DT_BF16, c->vocab_size, c->dim, 0.0,
               1.0 / sqrt((double)c->dim));
}

void v4mk_plan_free(v4mk_plan *p)
{
    for (int i = 0; i < p->n; i++)
        free(p->s[i].t);
    free(p->s);
    p->s = NULL;
    p->n = 0;
}

/* Build a throw-away writer for shard s (declarations only). */
v4_stw *v4mk_shard_writer(const v4mk_shard *s, v4_error *err)
{
    v4_stw *w = v4_stw_new();
    if (!w) {
        v4_err_set(err, V4_ERR_NOMEM, s->file, "out of memory");
        return NULL;
    }
    for (size_t i = 0; i < s->n; i++) {
        const v4mk_tensor *t = &s->t[i];
        if (v4_stw_add(w, t->name, t->dt, t->ndim, t->shape, err)) {
            v4_stw_free(w);
            return NULL;
        }
    }
    return w;
}

static int plan_sizes(v4mk_plan *p, v4_error *err)
{
    p->total_file_bytes = p->total_size = 0;
    p->n_tensors = 0;
    for (int i = 0; i < p->n; i++) {
        v4mk_shard *s = &p->s[i];
        v4_stw *w = v4mk_shard_writer(s, err);
        if (!w || v4_stw_file_bytes(w, &s->file_bytes, err)) {
            v4_stw_free(w);
            return -1;
        }
        s->data_bytes = v4_stw_data_bytes(w);
        v4_stw_free(w);
        p->total_file_bytes += s->file_bytes;
        p->total_size += s->data_bytes;
        p->n_tensors += s->n;
    }
    return 0;
}

int v4mk_plan_build(v4mk_plan *p, const v4_config *c, int no_experts, v4_error *err)
{
    memset(p, 0, sizeof *p);
    p->n = c->n_layers + 2;
    p->no_experts = no_experts != 0;
    p->s = calloc((size_t)p->n, sizeof *p->s);
    if (!p->s)
        return v4_err_set(err, V4_ERR_NOMEM, "mkmodel", "out of memory");
    builder b = {.no_experts = p->no_experts};
    for (int i = 0; i < p->n && !b.failed; i++) {
        b.sh = &p->s[i];
        snprintf(b.sh->file, sizeof b.sh->file, "model-%05d-of-%05d.safetensors", i + 1, p->n);
        if (i == 0) {
            b.prefix[0] = 0;
            add_normal(&b, "embed.weight", V4_DT_BF16, c->vocab_size, c->dim, 0.0, 1.0);
        } else if (i <= c->n_layers) {
            build_layer(&b, c, i - 1);
        } else {
            build_head(&b, c);
        }
    }
    if (b.failed) {
        v4mk_plan_free(p);
        return v4_err_set(err, V4_ERR_NOMEM, "mkmodel", "out of memory building the plan");
    }
    if (plan_sizes(p, err)) {
        v4mk_plan_free(p);
        return -1;
    }
    return 0;
}

uint64_t v4mk_tensor_bytes(const v4mk_tensor *t)
{
    uint64_t n = v4_stw_dtype_size(t->dt);
    for (int d = 0; d < t->ndim; d++)
        n *= (uint64_t)t->shape[d];
    return n;
}

v4mk_token_bytes v4mk_per_token_bytes(const v4mk_plan *p, const v4_config *c)
{
    v4mk_token_bytes tb = {0, 0, 0};
    for (int i = 0; i < p->n; i++) {
        uint64_t expert_bytes = 0;
        for (size_t k = 0; k < p->s[i].n; k++) {
            const v4mk_tensor *t = &p->s[i].t[k];
            if (strstr(t->name, ".ffn.experts."))
                expert_bytes += v4mk_tensor_bytes(t);
            else if (t->kind == V4MK_TID2EID)
                tb.trunk += (uint64_t)c->n_act_experts * 8;
            else if (!strcmp(t->name, "embed.weight"))
                tb.trunk += (uint64_t)c->dim * 2;
            else
                tb.trunk += v4mk_tensor_bytes(t);
        }
        if (c->n_routed_experts > 0)
            tb.experts += expert_bytes / (uint64_t)c->n_routed_experts *
                          (uint64_t)c->n_act_experts;
    }
    if (p->no_experts) {    /* not in the plan, read all the same (generated) */
        const uint64_t I = (uint64_t)c->moe_inter, D = (uint64_t)c->dim;
        tb.experts = (uint64_t)c->n_layers * (uint64_t)c->n_act_experts * 3 * (I * D / 2 + I * D / 32);
    }
    tb.total = tb.trunk + tb.experts;
    return tb;
}

char *v4mk_index_json(const v4mk_plan *p)
{
    json_t *map = json_object();
    json_t *root = json_pack("{s:{s:I}, s:o}", "metadata", "total_size",
                             (json_int_t)p->total_size, "weight_map", map);
    if (!root)
        return NULL;
    for (int i = 0; i < p->n; i++)
        for (size_t k = 0; k < p->s[i].n; k++)
            if (json_object_set_new(map, p->s[i].t[k].name, json_string(p->s[i].file))) {
                json_decref(root);
                return NULL;
            }
    char *text = json_dumps(root, JSON_INDENT(2) | JSON_SORT_KEYS);
    json_decref(root);
    return text;
}

