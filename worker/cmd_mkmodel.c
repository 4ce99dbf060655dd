/* cmd_mkmodel.c - `v4fleet mkmodel`: write a synthetic DeepSeek-V4 checkpoint.
 *
 *   v4fleet mkmodel --out DIR [--preset tiny|small] [--seed S] [--force] [--no-sync]
 *
 * Output (the real V4-Flash naming, dtypes and shard layout, spec v4-decode.md §3):
 *   DIR/config.json                      Hugging Face keys (v4_config_to_json)
 *   DIR/model-00001-of-0000N.safetensors embed.weight
 *   DIR/model-0000{L+2}-of-...           everything of layer L, in the real order
 *   DIR/model-0000N-of-0000N.safetensors hc_head_base, hc_head_fn, hc_head_scale,
 *                                        norm.weight, head.weight
 *   DIR/model.safetensors.index.json     weight_map (sorted) + metadata.total_size
 *   DIR/tokenizer.json, tokenizer_config.json  a small byte-level BPE tokenizer with
 *                                        exactly vocab_size ids, BOS 0 / EOS 1 (mktokenizer.h)
 * For the tiny preset the shard headers, the index and the config are the same as
 * those of tests/data/golden/tiny/model (only the weight values differ).
 *
 * Design: the whole checkpoint is first planned as a list of tensor specs per shard
 * (name, dtype, shape, how to initialize it); the plan gives every file's size, the
 * total, and the bytes one decode token reads, which are printed before anything is
 * written.  Each shard is then streamed through cache/st_writer (header first, data
 * in 4 MiB chunks, ".NAME.tmp" + fsync + rename).  The index is written after the
 * shards and config.json last, so a directory with a config.json (what scripts test
 * for) or an index is complete; with --force the old config.json and index are
 * deleted before anything else is touched.  The preset is checked with
 * v4_config_validate() and the written config.json is parsed back before writing.
 * Progress goes to stderr every 5% for checkpoints of 64 MiB or more.
 *
 * Determinism: every tensor has its own xoshiro256** stream seeded from splitmix64 of
 * (--seed, FNV-1a of the tensor's base name), and per-block choices (FP8 block
 * classes, FP4 scale jitter) are stateless hashes of (base seed, block index), so a
 * weight and its .scale agree without shared state and the output depends only on
 * the preset and the seed.  "Normal" samples are Irwin-Hall sums of four 16-bit
 * uniforms (integer arithmetic and one float multiply: identical on every IEEE
 * machine); the FP8 code tables use a normal quantile function evaluated at 256
 * points and rounded to e4m3.  No global mutable state.
 *
 * Weight initialization (roughly the statistics of a trained net, so that logits
 * are finite and vary with the input; fan_in = the matrix's input width):
 *   FP8 e4m3 matrices (wq_a, wq_b, wkv, wo_a, wo_b, shared experts, indexer wq_b):
 *     effective std 1/sqrt(fan_in).  Per 128x128 block a class c in {0,1,2} (hash);
 *     the E8M0 scale is 2^(e+c) and the block's codes come from a table of normal
 *     quantiles with std s0/2^c, s0 = std/2^e in (64, 128]: the scale bytes vary
 *     from block to block but every block has the same effective std, and codes use
 *     the e4m3 range up to ~340 (never saturating, NaN codes never produced).
 *   FP4 e2m1 routed experts (I8, low nibble = even input column): uniformly random
 *     codes (rms 2.93); per row and 32 inputs an E8M0 scale 2^(e+j), j in
 *     {-1,0,0,+1} (hash), e chosen so that the effective std is ~1/sqrt(fan_in).
 *   BF16: embed N(0,1); head N(0,1/sqrt(dim)); gate, compressor wkv/wgate,
 *     indexer weights_proj N(0,1/sqrt(dim)); every norm weight 1 + N(0,0.05).
 *   F32: hc_{attn,ffn}_fn and hc_head_fn N(0, 0.5/sqrt(hc_mult*dim)) (mix logits of
 *     std ~0.5); hc_{attn,ffn}_base N(0,0.1) plus +2 on the diagonal of the 4x4
 *     comb part (Sinkhorn then gives a diagonal-heavy, not uniform, mixing matrix);
 *     hc_*_scale 1 + N(0,0.1); hc_head_base N(0,0.1); attn_sink N(0,0.1);
 *     compressor ape N(0,0.1); gate.bias N(0,0.02).
 *   I64 tid2eid (layers < num_hash_layers): n_act distinct random ids per row.
 *
 * Presets: tiny = the golden tiny config (spec §8.2, without MTP).  small = a
 * half-width V4-Flash that is large enough for one decode token to read ~2.6 GB
 * (DRAM-bound on a small machine) while the file stays ~9 GB (fits in page cache):
 * dim 4096, 16 layers [0,0,4,128,4,128,...], 32 heads x 512, q_lora 1024,
 * o_groups 8 x o_lora 1024, window 128, 64 routed experts top-6 + 1 shared,
 * moe_inter 1024, 3 hash layers, indexer 16 heads x 128 top-512, vocab 32768.
 *
 * Owner: the mkmodel work package.  Thread: main thread (a command).
 */
#include <dirent.h>
#include <errno.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "../cache/st_writer.h"
#include "../config/model_config.h"
#include "../kernels/codec.h"
#include "cli_util.h"
#include "commands.h"
#include "rng.h"
#include "mktokenizer.h"

#define CHUNK_BYTES (4u << 20)
#define NAME_MAX_LEN 112
#define PROGRESS_MIN_BYTES (64ull << 20)

/* ------------------------------------------------------------------ PRNG */

typedef v4_rng rng;

/* Stateless 64-bit hash of two words. */
static uint64_t mix64(uint64_t a, uint64_t b)
{
    uint64_t x = a ^ (b * 0xd1b54a32d192ed03ull);
    return v4_splitmix64(&x);
}

static uint64_t fnv1a(const char *s)
{
    uint64_t h = 0xcbf29ce484222325ull;
    for (; *s; s++)
        h = (h ^ (unsigned char)*s) * 0x100000001b3ull;
    return h;
}

#define rng_seed v4_rng_seed
#define rng_next v4_rng_next

/* Approximately N(0,1): Irwin-Hall sum of four 16-bit uniforms (bounded at 3.46). */
static inline float rng_normal(rng *r)
{
    uint64_t x = rng_next(r);
    int32_t s = (int32_t)(x & 0xffff) + (int32_t)((x >> 16) & 0xffff) +
                (int32_t)((x >> 32) & 0xffff) + (int32_t)(x >> 48);
    return (float)(s - 131070) * 2.6429e-05f;   /* 1 / sqrt((65536^2 - 1) / 3) */
}

/* Uniform in [0, n) for n < 2^32 (multiply-shift; bias < 2^-32). */
static inline uint32_t rng_below(rng *r, uint32_t n)
{
    return (uint32_t)(((rng_next(r) >> 32) * (uint64_t)n) >> 32);
}

/* ------------------------------------------------------------- number helpers */

/* Inverse of the standard normal CDF (Acklam's rational approximation, |rel err|
 * < 1.2e-9), for 0 < p < 1. */
static double norm_quantile(double p)
{
    static const double a[6] = {-3.969683028665376e+01, 2.209460984245205e+02,
                                -2.759285104469687e+02, 1.383577518672690e+02,
                                -3.066479806614716e+01, 2.506628277459239e+00};
    static const double b[5] = {-5.447609879822406e+01, 1.615858368580409e+02,
                                -1.556989798598866e+02, 6.680131188771972e+01,
                                -1.328068155288572e+01};
    static const double c[6] = {-7.784894002430293e-03, -3.223964580411365e-01,
                                -2.400758277161838e+00, -2.549732539343734e+00,
                                4.374664141464968e+00, 2.938163982698783e+00};
    static const double d[4] = {7.784695709041462e-03, 3.224671290700398e-01,
                                2.445134137142996e+00, 3.754408661907416e+00};
    if (p < 0.02425 || p > 1 - 0.02425) {
        double q = sqrt(-2 * log(p < 0.5 ? p : 1 - p));
        double x = (((((c[0] * q + c[1]) * q + c[2]) * q + c[3]) * q + c[4]) * q + c[5]) /
                   ((((d[0] * q + d[1]) * q + d[2]) * q + d[3]) * q + 1);
        return p < 0.5 ? x : -x;
    }
    double q = p - 0.5, r = q * q;
    return (((((a[0] * r + a[1]) * r + a[2]) * r + a[3]) * r + a[4]) * r + a[5]) * q /
           (((((b[0] * r + b[1]) * r + b[2]) * r + b[3]) * r + b[4]) * r + 1);
}

/* ceil(log2(x)) for x > 0, exact (frexp). */
static int ceil_log2(double x)
{
    int k;
    double m = frexp(x, &k);          /* x = m * 2^k, m in [0.5, 1) */
    return m == 0.5 ? k - 1 : k;
}

/* log2(x) rounded to the nearest integer (in the log domain), exact. */
static int round_log2(double x)
{
    int k;
    double m = frexp(x, &k);
    return m >= 0.70710678118654752 ? k : k - 1;
}

/* FP8 blocks: scale exponent of class 0, and the code tables of the 3 classes. */
static int fp8_exp(double std) { return ceil_log2(std / 128.0); }

#define FP8_CLASSES 3
static void fp8_luts(double std, uint8_t lut[FP8_CLASSES][256])
{
    double s0 = std / ldexp(1.0, fp8_exp(std));          /* (64, 128] */
    for (int c = 0; c < FP8_CLASSES; c++)
        for (int u = 128; u < 256; u++) {
            double z = norm_quantile((u + 0.5) / 256.0);  /* > 0 */
            uint8_t b = v4_e4m3_encode((float)(ldexp(s0, -c) * z));
            lut[c][u] = b;
            lut[c][255 - u] = (uint8_t)(b | 0x80);
        }
}

static int fp8_block_class(uint64_t seed, int64_t bi, int64_t bj)
{
    return (int)(mix64(seed, ((uint64_t)bi << 32) ^ (uint64_t)bj) % FP8_CLASSES);
}

/* FP4: uniform codes have rms sqrt(68.5/8) = 2.926; the {-1,0,0,+1} jitter of the
 * exponent multiplies the rms by sqrt(mean(4^j)) = 1.25. */
static int fp4_exp(double std) { return round_log2(std / (2.926 * 1.25)); }

static int fp4_jitter(uint64_t seed, int64_t row, int64_t grp)
{
    static const int j[4] = {-1, 0, 0, 1};
    return j[mix64(seed, ((uint64_t)row << 32) ^ (uint64_t)grp) & 3];
}

static uint8_t e8m0_byte(int e)
{
    int b = 127 + e;
    return (uint8_t)(b < 0 ? 0 : b > 254 ? 254 : b);
}

/* ------------------------------------------------------------------- the plan */

typedef enum init_kind {
    I_NORMAL,       /* BF16/F32: mean + std * N(0,1) */
    I_HC_BASE,      /* F32 [(2+hc)*hc]: N(0,std), +mean on the comb diagonal */
    I_FP8_W,        /* F8_E4M3 [out][in] */
    I_FP8_S,        /* F8_E8M0 [ceil(out/128)][ceil(in/128)] */
    I_FP4_W,        /* I8 [out][in/2] */
    I_FP4_S,        /* F8_E8M0 [out][in/32] */
    I_TID2EID,      /* I64 [vocab][n_act], aux = n_routed_experts */
} init_kind;

typedef struct tspec {
    char name[NAME_MAX_LEN];
    char base[NAME_MAX_LEN];    /* seeding name: shared by a weight and its .scale */
    v4_dtype dt;
    int ndim;
    int64_t shape[2];
    init_kind kind;
    double mean, std;
    int aux;
} tspec;

typedef struct shard {
    tspec *t;
    size_t n, cap;
    char file[64];
    uint64_t file_bytes, data_bytes;
} shard;

typedef struct plan {
    shard *s;
    int n;
    uint64_t total_file_bytes;  /* shards only */
    uint64_t total_size;        /* sum of tensor bytes (index metadata.total_size) */
} plan;

typedef struct builder {
    shard *sh;
    char prefix[32];
    int failed;
} builder;

static tspec *spec_push(builder *b, const char *name, const char *base, v4_dtype dt,
                        int ndim, int64_t d0, int64_t d1, init_kind kind)
{
    shard *s = b->sh;
    if (s->n == s->cap) {
        size_t cap = s->cap ? 2 * s->cap : 128;
        tspec *t = realloc(s->t, cap * sizeof *t);
        if (!t) {
            b->failed = 1;
            return NULL;
        }
        s->t = t;
        s->cap = cap;
    }
    tspec *t = &s->t[s->n];
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
    tspec *t = spec_push(b, name, name, dt, d1 < 0 ? 1 : 2, d0, d1, I_NORMAL);
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
    char w[NAME_MAX_LEN], s[NAME_MAX_LEN];
    snprintf(w, sizeof w, "%s.weight", base);
    snprintf(s, sizeof s, "%s.scale", base);
    double std = 1.0 / sqrt((double)in);
    tspec *t = spec_push(b, w, base, V4_DT_F8_E4M3, 2, out, in, I_FP8_W);
    if (t)
        t->std = std;
    t = spec_push(b, s, base, V4_DT_F8_E8M0, 2, (out + 127) / 128, (in + 127) / 128, I_FP8_S);
    if (t)
        t->std = std;
}

/* base.weight I8 [out][in/2] (packed FP4) + base.scale F8_E8M0 [out][in/32]. */
static void add_fp4(builder *b, const char *base, int64_t out, int64_t in)
{
    char w[NAME_MAX_LEN], s[NAME_MAX_LEN];
    snprintf(w, sizeof w, "%s.weight", base);
    snprintf(s, sizeof s, "%s.scale", base);
    double std = 1.0 / sqrt((double)in);
    tspec *t = spec_push(b, w, base, V4_DT_I8, 2, out, in / 2, I_FP4_W);
    if (t)
        t->std = std;
    t = spec_push(b, s, base, V4_DT_F8_E8M0, 2, out, in / 32, I_FP4_S);
    if (t)
        t->std = std;
}

/* compressor.{ape, wkv, wgate, norm} under prefix pre ("attn." or "attn.indexer."). */
static void add_compressor(builder *b, const v4_config *c, const char *pre, int ratio, int d)
{
    char n[NAME_MAX_LEN];
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
        tspec *t = spec_push(b, bases[i], bases[i], V4_DT_F32, 1, mix, 0, I_HC_BASE);
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
    char n[NAME_MAX_LEN];
    add_fp8(b, "ffn.shared_experts.w1", c->moe_inter, c->dim);
    add_fp8(b, "ffn.shared_experts.w3", c->moe_inter, c->dim);
    add_fp8(b, "ffn.shared_experts.w2", c->dim, c->moe_inter);
    for (int e = 0; e < c->n_routed_experts; e++) {
        snprintf(n, sizeof n, "ffn.experts.%d.w1", e);
        add_fp4(b, n, c->moe_inter, c->dim);
        snprintf(n, sizeof n, "ffn.experts.%d.w3", e);
        add_fp4(b, n, c->moe_inter, c->dim);
    }
    for (int e = 0; e < c->n_routed_experts; e++) {
        snprintf(n, sizeof n, "ffn.experts.%d.w2", e);
        add_fp4(b, n, c->dim, c->moe_inter);
    }
    if (v4_layer_is_hash(c, layer)) {
        tspec *t = spec_push(b, "ffn.gate.tid2eid", "ffn.gate.tid2eid", V4_DT_I64, 2,
                             c->vocab_size, c->n_act_experts, I_TID2EID);
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

static void plan_free(plan *p)
{
    for (int i = 0; i < p->n; i++)
        free(p->s[i].t);
    free(p->s);
    p->s = NULL;
    p->n = 0;
}

/* Build a throw-away writer for shard s (declarations only). */
static v4_stw *shard_writer(const shard *s, v4_error *err)
{
    v4_stw *w = v4_stw_new();
    if (!w) {
        v4_err_set(err, V4_ERR_NOMEM, s->file, "out of memory");
        return NULL;
    }
    for (size_t i = 0; i < s->n; i++) {
        const tspec *t = &s->t[i];
        if (v4_stw_add(w, t->name, t->dt, t->ndim, t->shape, err)) {
            v4_stw_free(w);
            return NULL;
        }
    }
    return w;
}

static int plan_sizes(plan *p, v4_error *err)
{
    p->total_file_bytes = p->total_size = 0;
    for (int i = 0; i < p->n; i++) {
        shard *s = &p->s[i];
        v4_stw *w = shard_writer(s, err);
        if (!w || v4_stw_file_bytes(w, &s->file_bytes, err)) {
            v4_stw_free(w);
            return -1;
        }
        s->data_bytes = v4_stw_data_bytes(w);
        v4_stw_free(w);
        p->total_file_bytes += s->file_bytes;
        p->total_size += s->data_bytes;
    }
    return 0;
}

static int plan_build(plan *p, const v4_config *c, v4_error *err)
{
    memset(p, 0, sizeof *p);
    p->n = c->n_layers + 2;
    p->s = calloc((size_t)p->n, sizeof *p->s);
    if (!p->s)
        return v4_err_set(err, V4_ERR_NOMEM, "mkmodel", "out of memory");
    builder b = {0};
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
        plan_free(p);
        return v4_err_set(err, V4_ERR_NOMEM, "mkmodel", "out of memory building the plan");
    }
    if (plan_sizes(p, err)) {
        plan_free(p);
        return -1;
    }
    return 0;
}

/* ------------------------------------------------------- bytes read per token */

typedef struct token_bytes {
    uint64_t trunk;     /* non-expert layer tensors, hc/norm/head (embed: one row) */
    uint64_t experts;   /* n_act routed experts per layer */
    uint64_t total;
} token_bytes;

static uint64_t spec_bytes(const tspec *t)
{
    uint64_t n = v4_stw_dtype_size(t->dt);
    for (int d = 0; d < t->ndim; d++)
        n *= (uint64_t)t->shape[d];
    return n;
}

static token_bytes per_token_bytes(const plan *p, const v4_config *c)
{
    token_bytes tb = {0, 0, 0};
    for (int i = 0; i < p->n; i++) {
        uint64_t expert_bytes = 0;
        for (size_t k = 0; k < p->s[i].n; k++) {
            const tspec *t = &p->s[i].t[k];
            if (strstr(t->name, ".ffn.experts."))
                expert_bytes += spec_bytes(t);
            else if (t->kind == I_TID2EID)
                tb.trunk += (uint64_t)c->n_act_experts * 8;
            else if (!strcmp(t->name, "embed.weight"))
                tb.trunk += (uint64_t)c->dim * 2;
            else
                tb.trunk += spec_bytes(t);
        }
        if (c->n_routed_experts > 0)
            tb.experts += expert_bytes / (uint64_t)c->n_routed_experts *
                          (uint64_t)c->n_act_experts;
    }
    tb.total = tb.trunk + tb.experts;
    return tb;
}

/* ------------------------------------------------------------------ progress */

typedef struct progress {
    uint64_t done, total;
    int next_pct;       /* next 5% mark to report; > 100 = silent */
    struct timespec t0;
} progress;

static double seconds_since(const struct timespec *t0)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)(t.tv_sec - t0->tv_sec) + 1e-9 * (double)(t.tv_nsec - t0->tv_nsec);
}

static void progress_add(progress *pg, uint64_t n)
{
    pg->done += n;
    if (pg->next_pct > 100 || !pg->total)
        return;
    int pct = (int)(pg->done * 100 / pg->total);
    if (pct < pg->next_pct)
        return;
    fprintf(stderr, "mkmodel: %3d%%  %.2f / %.2f GB  %.1f s\n", pct, pg->done / 1e9,
            pg->total / 1e9, seconds_since(&pg->t0));
    pg->next_pct = (pct / 5 + 1) * 5;
}

/* ----------------------------------------------------------- tensor contents */

typedef struct gen {
    uint64_t seed;
    unsigned char *buf;         /* CHUNK_BYTES (or one row if larger) */
    size_t cap;
    v4_stw *w;
    progress *pg;
} gen;

static int emit(gen *g, size_t n, v4_error *err)
{
    if (v4_stw_write(g->w, g->buf, n, err))
        return -1;
    progress_add(g->pg, n);
    return 0;
}

static void put_f32(unsigned char *p, float f)
{
    uint32_t u = v4_f32_bits(f);
    for (int i = 0; i < 4; i++)
        p[i] = (unsigned char)(u >> (8 * i));
}

static void put_bf16(unsigned char *p, float f)
{
    uint16_t u = v4_bf16_bits(f);
    p[0] = (unsigned char)u;
    p[1] = (unsigned char)(u >> 8);
}

static float hc_base_value(const tspec *t, rng *r, int64_t i)
{
    int hc = t->aux;
    float v = (float)t->std * rng_normal(r);
    int64_t j = i - 2 * hc;         /* index inside the hc x hc comb part */
    if (j >= 0 && j / hc == j % hc)
        v += (float)t->mean;
    return v;
}

/* I_NORMAL and I_HC_BASE: element-wise BF16 / F32. */
static int gen_elementwise(gen *g, const tspec *t, rng *r, v4_error *err)
{
    size_t es = v4_stw_dtype_size(t->dt);
    uint64_t total = spec_bytes(t) / es, i = 0;
    size_t per = g->cap / es;
    while (i < total) {
        size_t n = total - i < per ? (size_t)(total - i) : per;
        for (size_t k = 0; k < n; k++) {
            float v = t->kind == I_HC_BASE ? hc_base_value(t, r, (int64_t)(i + k))
                                           : (float)t->mean + (float)t->std * rng_normal(r);
            if (es == 2)
                put_bf16(g->buf + 2 * k, v);
            else
                put_f32(g->buf + 4 * k, v);
        }
        if (emit(g, n * es, err))
            return -1;
        i += n;
    }
    return 0;
}

/* Fill n bytes with codes: lut[random byte] (lut NULL = raw random bytes). */
static void fill_bytes(unsigned char *p, size_t n, rng *r, const uint8_t *lut)
{
    size_t i = 0;
    while (i < n) {
        uint64_t x = rng_next(r);
        for (int k = 0; k < 8 && i < n; k++, i++) {
            uint8_t byte = (uint8_t)(x >> (8 * k));
            p[i] = lut ? lut[byte] : byte;
        }
    }
}

/* Row-major [rows][cols] of one-byte elements, whole rows per chunk. */
static int gen_rows(gen *g, const tspec *t, rng *r, const uint8_t lut[FP8_CLASSES][256],
                    uint64_t seed, v4_error *err)
{
    int64_t rows = t->shape[0], cols = t->shape[1];
    int64_t per = (int64_t)g->cap / (cols ? cols : 1);
    for (int64_t r0 = 0; r0 < rows; r0 += per) {
        int64_t nr = rows - r0 < per ? rows - r0 : per;
        for (int64_t i = 0; i < nr; i++) {
            unsigned char *row = g->buf + i * cols;
            if (!lut) {
                fill_bytes(row, (size_t)cols, r, NULL);
                continue;
            }
            for (int64_t j0 = 0; j0 < cols; j0 += 128) {
                int cls = fp8_block_class(seed, (r0 + i) / 128, j0 / 128);
                int64_t n = cols - j0 < 128 ? cols - j0 : 128;
                fill_bytes(row + j0, (size_t)n, r, lut[cls]);
            }
        }
        if (emit(g, (size_t)(nr * cols), err))
            return -1;
    }
    return 0;
}

/* E8M0 scale grids: byte(i, j) from the stateless block choices. */
static int gen_scales(gen *g, const tspec *t, uint64_t seed, v4_error *err)
{
    int64_t rows = t->shape[0], cols = t->shape[1];
    int64_t per = (int64_t)g->cap / (cols ? cols : 1);
    int e = t->kind == I_FP8_S ? fp8_exp(t->std) : fp4_exp(t->std);
    for (int64_t r0 = 0; r0 < rows; r0 += per) {
        int64_t nr = rows - r0 < per ? rows - r0 : per;
        for (int64_t i = 0; i < nr; i++)
            for (int64_t j = 0; j < cols; j++) {
                int d = t->kind == I_FP8_S ? fp8_block_class(seed, r0 + i, j)
                                           : fp4_jitter(seed, r0 + i, j);
                g->buf[i * cols + j] = e8m0_byte(e + d);
            }
        if (emit(g, (size_t)(nr * cols), err))
            return -1;
    }
    return 0;
}

static void put_i64(unsigned char *p, int64_t v)
{
    for (int i = 0; i < 8; i++)
        p[i] = (unsigned char)((uint64_t)v >> (8 * i));
}

/* One row of tid2eid: k distinct expert ids. */
static void tid2eid_row(unsigned char *p, int k, int n_experts, rng *r)
{
    int ids[64];
    for (int a = 0; a < k; a++) {
        int id, dup;
        do {
            id = (int)rng_below(r, (uint32_t)n_experts);
            dup = 0;
            for (int b = 0; b < a; b++)
                dup |= ids[b] == id;
        } while (dup);
        ids[a] = id;
        put_i64(p + 8 * a, id);
    }
}

static int gen_tid2eid(gen *g, const tspec *t, rng *r, v4_error *err)
{
    int64_t rows = t->shape[0];
    int k = (int)t->shape[1];
    if (k > 64 || k > t->aux)
        return v4_err_set(err, V4_ERR_CONFIG, t->name, "cannot pick %d distinct of %d experts",
                          k, t->aux);
    int64_t per = (int64_t)g->cap / (8 * k);
    for (int64_t r0 = 0; r0 < rows; r0 += per) {
        int64_t nr = rows - r0 < per ? rows - r0 : per;
        for (int64_t i = 0; i < nr; i++)
            tid2eid_row(g->buf + i * 8 * k, k, t->aux, r);
        if (emit(g, (size_t)(nr * 8 * k), err))
            return -1;
    }
    return 0;
}

static int gen_tensor(gen *g, const tspec *t, v4_error *err)
{
    uint64_t seed = mix64(g->seed, fnv1a(t->base));
    rng r;
    rng_seed(&r, mix64(seed, fnv1a(t->name)));
    switch (t->kind) {
    case I_NORMAL:
    case I_HC_BASE:
        return gen_elementwise(g, t, &r, err);
    case I_FP8_W: {
        uint8_t lut[FP8_CLASSES][256];
        fp8_luts(t->std, lut);
        return gen_rows(g, t, &r, lut, seed, err);
    }
    case I_FP4_W:
        return gen_rows(g, t, &r, NULL, seed, err);
    case I_FP8_S:
    case I_FP4_S:
        return gen_scales(g, t, seed, err);
    case I_TID2EID:
        return gen_tid2eid(g, t, &r, err);
    }
    return v4_err_set(err, V4_ERR_INTERNAL, t->name, "unknown init kind");
}

/* Largest row of one-byte or element-wise data a chunk must hold. */
static size_t max_row_bytes(const plan *p)
{
    size_t m = 0;
    for (int i = 0; i < p->n; i++)
        for (size_t k = 0; k < p->s[i].n; k++) {
            const tspec *t = &p->s[i].t[k];
            size_t rb = (size_t)(t->ndim == 2 ? t->shape[1] : 1) * v4_stw_dtype_size(t->dt);
            if (rb > m)
                m = rb;
        }
    return m;
}

/* ------------------------------------------------------------------- writing */

static int join_path(char *out, size_t cap, const char *dir, const char *name)
{
    int n = snprintf(out, cap, "%s/%s", dir, name);
    return (n < 0 || (size_t)n >= cap) ? -1 : 0;
}

static int write_shard(gen *g, const shard *s, const char *dir, int sync, v4_error *err)
{
    char path[4096];
    if (join_path(path, sizeof path, dir, s->file))
        return v4_err_set(err, V4_ERR_INVALID, dir, "output path too long");
    v4_stw *w = shard_writer(s, err);
    if (!w)
        return -1;
    v4_stw_set_sync(w, sync);
    g->w = w;
    int rc = v4_stw_begin(w, path, err);
    for (size_t i = 0; i < s->n && !rc; i++)
        rc = gen_tensor(g, &s->t[i], err);
    if (!rc)
        rc = v4_stw_finish(w, err);
    g->w = NULL;
    v4_stw_free(w);
    return rc;
}

static char *index_json(const plan *p)
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

/* config.json text, checked by parsing it back (NULL + err on failure). */
static char *config_json(const v4_config *c, v4_error *err)
{
    char *text = v4_config_to_json(c);
    v4_config back;
    if (!text) {
        v4_err_set(err, V4_ERR_NOMEM, "config.json", "cannot build JSON");
        return NULL;
    }
    if (v4_config_parse(text, "config.json (written)", &back, err)) {
        free(text);
        return NULL;
    }
    return text;
}

/* Write text (owned, freed here; NULL = the builder failed and set err, or OOM). */
static int write_text(const char *dir, const char *name, char *text, int sync, v4_error *err)
{
    char path[4096];
    int rc;
    if (!text)
        rc = err->code ? -1 : v4_err_set(err, V4_ERR_NOMEM, name, "cannot build JSON");
    else if (join_path(path, sizeof path, dir, name))
        rc = v4_err_set(err, V4_ERR_INVALID, dir, "output path too long");
    else
        rc = v4_write_file_atomic(path, text, strlen(text), sync, err);
    free(text);
    return rc;
}

/* The tokenizer for the model's vocabulary; its BOS/EOS ids are the config's. */
static int write_tokenizer(const char *dir, const v4_config *c, int sync, v4_error *err)
{
    if (c->bos_id != 0 || c->eos_id != 1)
        return v4_err_set(err, V4_ERR_CONFIG, "mkmodel", "the generated tokenizer has BOS 0 and EOS 1");
    char *tj, *cj;
    if (v4_mktokenizer(c->vocab_size, &tj, &cj, err))
        return -1;
    if (write_text(dir, "tokenizer.json", tj, sync, err)) {
        free(cj);
        return -1;
    }
    return write_text(dir, "tokenizer_config.json", cj, sync, err);
}

/* --------------------------------------------------------- output directory */

/* Names mkmodel may create (and, with --force, delete): model-*.safetensors,
 * model.safetensors.index.json, config.json, tokenizer.json,
 * tokenizer_config.json and their ".NAME.tmp" files. */
static int is_ours(const char *name)
{
    const char *n = name;
    size_t len = strlen(n);
    if (n[0] == '.' && len > 5 && !strcmp(n + len - 4, ".tmp"))
        n++, len -= 5;
    if ((len == 11 && !strncmp(n, "config.json", 11)) ||
        (len == 28 && !strncmp(n, "model.safetensors.index.json", 28)) ||
        (len == 14 && !strncmp(n, "tokenizer.json", 14)) ||
        (len == 21 && !strncmp(n, "tokenizer_config.json", 21)))
        return 1;
    return len > 18 && !strncmp(n, "model-", 6) && !strncmp(n + len - 12, ".safetensors", 12);
}

static int mkdir_p(const char *dir, v4_error *err)
{
    char tmp[4096];
    if (snprintf(tmp, sizeof tmp, "%s", dir) >= (int)sizeof tmp)
        return v4_err_set(err, V4_ERR_INVALID, dir, "path too long");
    for (char *p = tmp + 1; *p; p++)
        if (*p == '/') {
            *p = 0;
            if (mkdir(tmp, 0755) && errno != EEXIST)
                return v4_err_set(err, V4_ERR_IO, tmp, "mkdir failed: %s", strerror(errno));
            *p = '/';
        }
    if (mkdir(tmp, 0755) && errno != EEXIST)
        return v4_err_set(err, V4_ERR_IO, dir, "mkdir failed: %s", strerror(errno));
    return 0;
}

/* Unlink DIR/name if it exists. */
static int remove_if_there(const char *dir, const char *name, v4_error *err)
{
    char path[4096];
    if (!join_path(path, sizeof path, dir, name) && unlink(path) && errno != ENOENT)
        return v4_err_set(err, V4_ERR_IO, path, "cannot remove: %s", strerror(errno));
    return 0;
}

/* Count entries (other than . and ..); with del, unlink ours, the config.json and
 * the index first (so that the directory stops looking like a checkpoint). */
static int scan_dir(const char *dir, int del, int *count, v4_error *err)
{
    char path[4096];
    if (del && (remove_if_there(dir, "config.json", err) ||
                remove_if_there(dir, "model.safetensors.index.json", err)))
        return -1;
    DIR *d = opendir(dir);
    if (!d)
        return v4_err_set(err, V4_ERR_IO, dir, "cannot open directory: %s", strerror(errno));
    struct dirent *e;
    *count = 0;
    while ((e = readdir(d))) {
        if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, ".."))
            continue;
        (*count)++;
        if (del && is_ours(e->d_name) && !join_path(path, sizeof path, dir, e->d_name) &&
            unlink(path) && errno != ENOENT) {
            closedir(d);
            return v4_err_set(err, V4_ERR_IO, path, "cannot remove: %s", strerror(errno));
        }
    }
    closedir(d);
    return 0;
}

static int prepare_dir(const char *dir, int force, v4_error *err)
{
    struct stat st;
    if (stat(dir, &st)) {
        if (errno != ENOENT)
            return v4_err_set(err, V4_ERR_IO, dir, "cannot stat: %s", strerror(errno));
        return mkdir_p(dir, err);
    }
    if (!S_ISDIR(st.st_mode))
        return v4_err_set(err, V4_ERR_INVALID, dir, "exists and is not a directory");
    int n;
    if (scan_dir(dir, 0, &n, err))
        return -1;
    if (n && !force)
        return v4_err_set(err, V4_ERR_INVALID, dir,
                          "directory is not empty; use --force to overwrite a checkpoint");
    return n ? scan_dir(dir, 1, &n, err) : 0;
}

/* ------------------------------------------------------------------- presets */

static void preset_common(v4_config *c)
{
    memset(c, 0, sizeof *c);
    c->n_mtp_layers = 0;
    c->n_kv_heads = 1;
    c->rope_head_dim = 64;
    c->n_shared_experts = 1;
    c->route_scale = 1.5f;
    c->swiglu_limit = 10.0f;
    c->index_head_dim = 128;
    c->hc_mult = 4;
    c->hc_iters = 20;
    c->hc_eps = 1e-6f;
    c->norm_eps = 1e-6f;
    c->rope_theta = 10000;
    c->compress_rope_theta = 160000;
    c->rope_factor = 16;
    c->original_seq_len = 65536;
    c->beta_fast = 32;
    c->beta_slow = 1;
    c->max_position = 1048576;
    c->bos_id = 0;
    c->eos_id = 1;
    c->expert_fp4 = 1;
}

/* The golden tiny model (spec §8.2 without the MTP block). */
static void preset_tiny(v4_config *c)
{
    static const int ratios[4] = {0, 4, 128, 4};
    preset_common(c);
    c->vocab_size = 4096;
    c->dim = 256;
    c->n_layers = 4;
    memcpy(c->compress_ratios, ratios, sizeof ratios);
    c->n_heads = 4;
    c->head_dim = 128;
    c->q_lora_rank = 128;
    c->o_groups = 2;
    c->o_lora_rank = 128;
    c->window = 32;
    c->n_routed_experts = 16;
    c->n_act_experts = 4;
    c->moe_inter = 128;
    c->n_hash_layers = 2;
    c->index_n_heads = 4;
    c->index_topk = 16;
}

/* Half-width V4-Flash: ~2.6 GB read per token, ~9 GB on disk. */
static void preset_small(v4_config *c)
{
    preset_common(c);
    c->vocab_size = 32768;
    c->dim = 4096;
    c->n_layers = 16;
    for (int l = 0; l < c->n_layers; l++)
        c->compress_ratios[l] = l < 2 ? 0 : (l % 2 == 0 ? 4 : 128);
    c->n_heads = 32;
    c->head_dim = 512;
    c->q_lora_rank = 1024;
    c->o_groups = 8;
    c->o_lora_rank = 1024;
    c->window = 128;
    c->n_routed_experts = 64;
    c->n_act_experts = 6;
    c->moe_inter = 1024;
    c->n_hash_layers = 3;
    c->index_n_heads = 16;
    c->index_topk = 512;
}

/* ---------------------------------------------------------------- the command */

typedef struct opts {
    const char *out, *preset;
    uint64_t seed;
    int force, sync;
} opts;

static void usage(FILE *f)
{
    fprintf(f,
            "usage: v4fleet mkmodel --out DIR [--preset tiny|small] [--seed S] [--force] "
            "[--no-sync]\n\n"
            "Write a synthetic DeepSeek-V4 checkpoint (V4-Flash naming, dtypes, shard layout)\n"
            "with deterministic random weights.\n\n"
            "  --out DIR        output directory (created; must be empty unless --force)\n"
            "  --preset NAME    tiny (golden tiny shape, ~11 MB) or small (~9 GB, ~2.6 GB\n"
            "                   read per decode token); default tiny\n"
            "  --seed S         unsigned 64-bit seed (default 1)\n"
            "  --force          overwrite a checkpoint in a non-empty DIR\n"
            "  --no-sync        skip fsync before each rename (faster, less durable)\n");
}

static int parse_seed(const char *s, uint64_t *out)
{
    char *end;
    errno = 0;
    if (!s || !*s || *s == '-')
        return -1;
    unsigned long long v = strtoull(s, &end, 0);
    if (errno || *end)
        return -1;
    *out = v;
    return 0;
}

/* Returns 0 ok, 1 = --help printed, -1 = usage error (message printed). */
static int parse_args(int argc, char **argv, opts *o)
{
    *o = (opts){NULL, "tiny", 1, 0, 1};
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            usage(stdout);
            return 1;
        } else if (!strcmp(a, "--force")) {
            o->force = 1;
        } else if (!strcmp(a, "--no-sync")) {
            o->sync = 0;
        } else if (!strcmp(a, "--out") && v) {
            o->out = v, i++;
        } else if (!strcmp(a, "--preset") && v) {
            o->preset = v, i++;
        } else if (!strcmp(a, "--seed") && v) {
            if (parse_seed(v, &o->seed)) {
                fprintf(stderr, "mkmodel: --seed wants an unsigned integer, got '%s'\n", v);
                return -1;
            }
            i++;
        } else {
            fprintf(stderr, "mkmodel: unknown or incomplete option '%s'\n", a);
            usage(stderr);
            return -1;
        }
    }
    if (!o->out) {
        fprintf(stderr, "mkmodel: --out DIR is required\n");
        usage(stderr);
        return -1;
    }
    return 0;
}

static void print_summary(const plan *p, const v4_config *c, const char *preset)
{
    token_bytes tb = per_token_bytes(p, c);
    printf("mkmodel: preset %s: %d layers, dim %d, %d experts (top %d), vocab %d, %d shards\n",
           preset, c->n_layers, c->dim, c->n_routed_experts, c->n_act_experts, c->vocab_size,
           p->n);
    printf("mkmodel: checkpoint %llu bytes (%.3f GB; tensors %llu bytes)\n",
           (unsigned long long)p->total_file_bytes, p->total_file_bytes / 1e9,
           (unsigned long long)p->total_size);
    printf("mkmodel: read per decode token %llu bytes (%.3f GB): trunk %.3f GB + routed "
           "experts %.3f GB\n",
           (unsigned long long)tb.total, tb.total / 1e9, tb.trunk / 1e9, tb.experts / 1e9);
    fflush(stdout);
}

static int generate(const opts *o, const plan *p, const v4_config *c, v4_error *err)
{
    progress pg = {0, p->total_file_bytes, p->total_file_bytes >= PROGRESS_MIN_BYTES ? 5 : 101,
                   {0, 0}};
    clock_gettime(CLOCK_MONOTONIC, &pg.t0);
    size_t cap = max_row_bytes(p);
    cap = cap > CHUNK_BYTES ? cap : CHUNK_BYTES;
    gen g = {o->seed, malloc(cap), cap, NULL, &pg};
    if (!g.buf)
        return v4_err_set(err, V4_ERR_NOMEM, "mkmodel", "out of memory");
    int rc = 0;
    for (int i = 0; i < p->n && !rc; i++) {
        rc = write_shard(&g, &p->s[i], o->out, o->sync, err);
        pg.done += p->s[i].file_bytes - p->s[i].data_bytes;   /* headers */
    }
    free(g.buf);
    if (!rc)
        rc = write_text(o->out, "model.safetensors.index.json", index_json(p), o->sync, err);
    if (!rc)
        rc = write_tokenizer(o->out, c, o->sync, err);
    if (!rc)
        rc = write_text(o->out, "config.json", config_json(c, err), o->sync, err);
    if (!rc)
        printf("mkmodel: wrote %s in %.1f s\n", o->out, seconds_since(&pg.t0));
    return rc;
}

int v4_cmd_mkmodel(int argc, char **argv)
{
    opts o;
    int a = parse_args(argc, argv, &o);
    if (a)
        return a > 0 ? 0 : 2;
    v4_config cfg;
    if (!strcmp(o.preset, "tiny")) {
        preset_tiny(&cfg);
    } else if (!strcmp(o.preset, "small")) {
        preset_small(&cfg);
    } else {
        fprintf(stderr, "mkmodel: unknown preset '%s' (tiny or small)\n", o.preset);
        return 2;
    }
    v4_error err = {0};
    plan p;
    if (v4_config_validate(&cfg, o.preset, &err) || plan_build(&p, &cfg, &err)) {
        v4_print_error("mkmodel", &err);
        return 1;
    }
    int rc = prepare_dir(o.out, o.force, &err);
    if (!rc) {
        print_summary(&p, &cfg, o.preset);
        rc = generate(&o, &p, &cfg, &err);
    }
    plan_free(&p);
    if (rc) {
        v4_print_error("mkmodel", &err);
        return 1;
    }
    return 0;
}
