/* model_config.c - load, parse and validate a DeepSeek-V4 Hugging Face config.json.
 *
 * Design:
 *  - The text is parsed by jansson with JSON_REJECT_DUPLICATES; a syntax error or a
 *    duplicate key is reported as V4_ERR_FORMAT with jansson's line and column.
 *  - Plain scalar keys are read through one const table (HF name, kind, struct offset,
 *    required or default).  Keys with structure or special rules (compress_ratios,
 *    rope_scaling, compress_rope_theta, expert_dtype, scoring_func,
 *    quantization_config) have their own small readers.
 *  - A required key that is absent is V4_ERR_MISSING; a key of the wrong JSON type, a
 *    value that does not fit the field, or a value the engine does not support is
 *    V4_ERR_CONFIG.  Every message names the key (HF name, "a.b" for nested keys);
 *    err->where is the config file path (or the caller's source name).
 *  - For optional keys, JSON null is treated like an absent key (HF writes
 *    "rope_scaling": null, "quantization_config": null).
 *  - Parsing fills a local struct and copies it to the caller only when the whole
 *    config parsed and validated, so *cfg is untouched on failure.
 *  - v4_config_validate() checks the invariants of a filled struct (spec v4-decode.md
 *    §2.1 and §8.1) and is shared by the parser and by mkmodel.
 *
 * No global mutable state; all functions are reentrant.
 */
#include "model_config.h"

#include <errno.h>
#include <float.h>
#include <limits.h>
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#define MAX_CONFIG_BYTES (16u << 20) /* a config.json is a few KB; refuse absurd files */

/* ---------------------------------------------------------------------------------- */
/* Reading context and generic typed getters                                           */
/* ---------------------------------------------------------------------------------- */

typedef struct reader {
    const char *where;  /* file path or source name, copied into err->where */
    v4_error *err;
} reader;

static const char *json_type_name(const json_t *v)
{
    switch (json_typeof(v)) {
    case JSON_OBJECT: return "object";
    case JSON_ARRAY: return "array";
    case JSON_STRING: return "string";
    case JSON_INTEGER: return "integer";
    case JSON_REAL: return "real";
    case JSON_TRUE:
    case JSON_FALSE: return "boolean";
    case JSON_NULL: return "null";
    }
    return "unknown";
}

/* Full key name for messages: "key" or "parent.key". */
static void key_name(char *buf, size_t n, const char *parent, const char *key)
{
    if (parent)
        snprintf(buf, n, "%s.%s", parent, key);
    else
        snprintf(buf, n, "%s", key);
}

static int err_missing(const reader *r, const char *parent, const char *key)
{
    char name[128];
    key_name(name, sizeof name, parent, key);
    return v4_err_set(r->err, V4_ERR_MISSING, r->where, "missing required key '%s'", name);
}

static int err_type(const reader *r, const char *parent, const char *key, const json_t *v,
                    const char *expected)
{
    char name[128];
    key_name(name, sizeof name, parent, key);
    return v4_err_set(r->err, V4_ERR_CONFIG, r->where, "key '%s' has JSON type %s, expected %s",
                      name, json_type_name(v), expected);
}

/* Look up key in obj.  Returns 1 and sets *out if present (non-null, or null when
 * required so that the type check reports it), 0 if absent/optional-null, -1 on error. */
static int lookup(const reader *r, const json_t *obj, const char *parent, const char *key,
                  int required, json_t **out)
{
    json_t *v = json_object_get(obj, key);
    if (v && (required || !json_is_null(v))) {
        *out = v;
        return 1;
    }
    if (required)
        return err_missing(r, parent, key);
    return 0;
}

static int get_llong(const reader *r, const json_t *obj, const char *parent, const char *key,
                     int required, long long dflt, long long *out)
{
    json_t *v = NULL;
    int rc = lookup(r, obj, parent, key, required, &v);
    if (rc < 0)
        return -1;
    if (rc == 0) {
        *out = dflt;
        return 0;
    }
    if (!json_is_integer(v))
        return err_type(r, parent, key, v, "integer");
    *out = (long long)json_integer_value(v);
    return 0;
}

static int get_int(const reader *r, const json_t *obj, const char *parent, const char *key,
                   int required, int dflt, int *out)
{
    long long x = 0;
    if (get_llong(r, obj, parent, key, required, dflt, &x) < 0)
        return -1;
    if (x < INT_MIN || x > INT_MAX) {
        char name[128];
        key_name(name, sizeof name, parent, key);
        return v4_err_set(r->err, V4_ERR_CONFIG, r->where,
                          "key '%s' = %lld does not fit in a 32-bit int", name, x);
    }
    *out = (int)x;
    return 0;
}

/* Numbers: JSON integer or real (HF writes 10000 and 10000.0 alike). */
static int get_double(const reader *r, const json_t *obj, const char *parent, const char *key,
                      int required, double dflt, double *out)
{
    json_t *v = NULL;
    int rc = lookup(r, obj, parent, key, required, &v);
    if (rc < 0)
        return -1;
    if (rc == 0) {
        *out = dflt;
        return 0;
    }
    if (!json_is_number(v))
        return err_type(r, parent, key, v, "number");
    *out = json_number_value(v);
    return 0;
}

static int get_float(const reader *r, const json_t *obj, const char *parent, const char *key,
                     int required, double dflt, float *out)
{
    double x = 0.0;
    if (get_double(r, obj, parent, key, required, dflt, &x) < 0)
        return -1;
    if (!isfinite(x) || fabs(x) > FLT_MAX) {
        char name[128];
        key_name(name, sizeof name, parent, key);
        return v4_err_set(r->err, V4_ERR_CONFIG, r->where,
                          "key '%s' = %g is out of the range of a float", name, x);
    }
    *out = (float)x;
    return 0;
}

/* String key; *out is NULL when optional and absent.  The pointer borrows from obj. */
static int get_string(const reader *r, const json_t *obj, const char *parent, const char *key,
                      int required, const char **out)
{
    json_t *v = NULL;
    int rc = lookup(r, obj, parent, key, required, &v);
    *out = NULL;
    if (rc <= 0)
        return rc;
    if (!json_is_string(v))
        return err_type(r, parent, key, v, "string");
    *out = json_string_value(v);
    return 0;
}

/* A string key that, if present (or required), must equal want. */
static int expect_string(const reader *r, const json_t *obj, const char *parent, const char *key,
                         int required, const char *want)
{
    const char *s;
    if (get_string(r, obj, parent, key, required, &s) < 0)
        return -1;
    if (s && strcmp(s, want) != 0) {
        char name[128];
        key_name(name, sizeof name, parent, key);
        return v4_err_set(r->err, V4_ERR_CONFIG, r->where,
                          "key '%s' is \"%s\"; only \"%s\" is supported", name, s, want);
    }
    return 0;
}

/* Optional object; *out is NULL when absent or null. */
static int get_object(const reader *r, const json_t *obj, const char *key, json_t **out)
{
    json_t *v = NULL;
    int rc = lookup(r, obj, NULL, key, 0, &v);
    *out = NULL;
    if (rc <= 0)
        return rc;
    if (!json_is_object(v))
        return err_type(r, NULL, key, v, "object");
    *out = v;
    return 0;
}

/* ---------------------------------------------------------------------------------- */
/* The table of plain scalar keys                                                      */
/* ---------------------------------------------------------------------------------- */

typedef enum { K_INT, K_LLONG, K_FLOAT, K_DOUBLE } key_kind;

typedef struct key_spec {
    const char *name;   /* HF name */
    key_kind kind;
    size_t off;         /* offset of the field in v4_config */
    int required;
    double dflt;        /* used when optional and absent */
} key_spec;

#define REQ(name, kind, field) {name, kind, offsetof(v4_config, field), 1, 0.0}
#define OPT(name, kind, field, d) {name, kind, offsetof(v4_config, field), 0, (d)}

static const key_spec scalar_keys[] = {
    REQ("vocab_size", K_INT, vocab_size),
    REQ("hidden_size", K_INT, dim),
    REQ("num_hidden_layers", K_INT, n_layers),
    OPT("num_nextn_predict_layers", K_INT, n_mtp_layers, 0),
    REQ("num_attention_heads", K_INT, n_heads),
    REQ("num_key_value_heads", K_INT, n_kv_heads),
    REQ("head_dim", K_INT, head_dim),
    REQ("qk_rope_head_dim", K_INT, rope_head_dim),
    REQ("q_lora_rank", K_INT, q_lora_rank),
    REQ("o_groups", K_INT, o_groups),
    REQ("o_lora_rank", K_INT, o_lora_rank),
    REQ("sliding_window", K_INT, window),
    REQ("n_routed_experts", K_INT, n_routed_experts),
    REQ("num_experts_per_tok", K_INT, n_act_experts),
    OPT("n_shared_experts", K_INT, n_shared_experts, 1),
    REQ("moe_intermediate_size", K_INT, moe_inter),
    OPT("num_hash_layers", K_INT, n_hash_layers, 0),
    REQ("routed_scaling_factor", K_FLOAT, route_scale),
    OPT("swiglu_limit", K_FLOAT, swiglu_limit, 0.0),
    REQ("index_n_heads", K_INT, index_n_heads),
    REQ("index_head_dim", K_INT, index_head_dim),
    REQ("index_topk", K_INT, index_topk),
    OPT("hc_mult", K_INT, hc_mult, 4),
    OPT("hc_sinkhorn_iters", K_INT, hc_iters, 20),
    OPT("hc_eps", K_FLOAT, hc_eps, 1e-6),
    REQ("rms_norm_eps", K_FLOAT, norm_eps),
    REQ("rope_theta", K_DOUBLE, rope_theta),
    REQ("max_position_embeddings", K_LLONG, max_position),
    REQ("bos_token_id", K_INT, bos_id),
    REQ("eos_token_id", K_INT, eos_id),
};

static int read_scalar(const reader *r, const json_t *root, const key_spec *k, v4_config *c)
{
    char *field = (char *)c + k->off;
    switch (k->kind) {
    case K_INT:
        return get_int(r, root, NULL, k->name, k->required, (int)k->dflt, (int *)(void *)field);
    case K_LLONG:
        return get_llong(r, root, NULL, k->name, k->required, (long long)k->dflt,
                         (long long *)(void *)field);
    case K_FLOAT:
        return get_float(r, root, NULL, k->name, k->required, k->dflt, (float *)(void *)field);
    case K_DOUBLE:
        return get_double(r, root, NULL, k->name, k->required, k->dflt, (double *)(void *)field);
    }
    return v4_err_set(r->err, V4_ERR_INTERNAL, r->where, "bad key kind for '%s'", k->name);
}

static int read_scalars(const reader *r, const json_t *root, v4_config *c)
{
    for (size_t i = 0; i < sizeof scalar_keys / sizeof scalar_keys[0]; i++)
        if (read_scalar(r, root, &scalar_keys[i], c) < 0)
            return -1;
    return 0;
}

/* ---------------------------------------------------------------------------------- */
/* Keys with their own rules                                                           */
/* ---------------------------------------------------------------------------------- */

/* compress_ratios: n_layers + n_mtp_layers integers; only the main layers are stored. */
static int read_compress_ratios(const reader *r, const json_t *root, v4_config *c)
{
    json_t *arr = NULL;
    if (lookup(r, root, NULL, "compress_ratios", 1, &arr) < 0)
        return -1;
    if (!json_is_array(arr))
        return err_type(r, NULL, "compress_ratios", arr, "array of integers");
    if (c->n_layers < 1 || c->n_layers > V4_MAX_LAYERS)
        return v4_err_set(r->err, V4_ERR_CONFIG, r->where,
                          "num_hidden_layers is %d, expected 1..%d (V4_MAX_LAYERS)", c->n_layers,
                          V4_MAX_LAYERS);
    if (c->n_mtp_layers < 0)
        return v4_err_set(r->err, V4_ERR_CONFIG, r->where,
                          "num_nextn_predict_layers is %d, must be >= 0", c->n_mtp_layers);
    long long want = (long long)c->n_layers + c->n_mtp_layers;
    size_t n = json_array_size(arr);
    if ((long long)n != want)
        return v4_err_set(r->err, V4_ERR_CONFIG, r->where,
                          "compress_ratios has %zu entries, expected num_hidden_layers (%d) + "
                          "num_nextn_predict_layers (%d) = %lld",
                          n, c->n_layers, c->n_mtp_layers, want);
    for (size_t i = 0; i < n; i++) {
        json_t *v = json_array_get(arr, i);
        if (!json_is_integer(v))
            return v4_err_set(r->err, V4_ERR_CONFIG, r->where,
                              "compress_ratios[%zu] has JSON type %s, expected integer", i,
                              json_type_name(v));
        long long x = (long long)json_integer_value(v);
        if (x != 0 && (x < 2 || x > INT_MAX))
            return v4_err_set(r->err, V4_ERR_CONFIG, r->where,
                              "compress_ratios[%zu] is %lld, expected 0 (window only) or >= 2",
                              i, x);
        if (i < (size_t)c->n_layers)
            c->compress_ratios[i] = (int)x;
    }
    return 0;
}

/* rope_scaling: absent -> no YaRN (factor 1, original_seq_len 0); present -> type yarn. */
static int read_rope_scaling(const reader *r, const json_t *root, v4_config *c)
{
    json_t *rs = NULL;
    c->rope_factor = 1.0;
    c->original_seq_len = 0;
    c->beta_fast = 32.0;
    c->beta_slow = 1.0;
    if (get_object(r, root, "rope_scaling", &rs) < 0)
        return -1;
    if (!rs)
        return 0;
    /* Older HF configs spell it "type", newer ones "rope_type". */
    const char *tkey =
        !json_object_get(rs, "type") && json_object_get(rs, "rope_type") ? "rope_type" : "type";
    if (expect_string(r, rs, "rope_scaling", tkey, 1, "yarn") < 0)
        return -1;
    if (get_double(r, rs, "rope_scaling", "factor", 1, 1.0, &c->rope_factor) < 0 ||
        get_int(r, rs, "rope_scaling", "original_max_position_embeddings", 1, 0,
                &c->original_seq_len) < 0 ||
        get_double(r, rs, "rope_scaling", "beta_fast", 0, 32.0, &c->beta_fast) < 0 ||
        get_double(r, rs, "rope_scaling", "beta_slow", 0, 1.0, &c->beta_slow) < 0)
        return -1;
    return 0;
}

/* compress_rope_theta defaults to rope_theta (read before). */
static int read_compress_rope_theta(const reader *r, const json_t *root, v4_config *c)
{
    return get_double(r, root, NULL, "compress_rope_theta", 0, c->rope_theta,
                      &c->compress_rope_theta);
}

/* expert_dtype: "fp4" -> FP4 experts, "fp8" or absent -> FP8 experts. */
static int read_expert_dtype(const reader *r, const json_t *root, v4_config *c)
{
    const char *s;
    if (get_string(r, root, NULL, "expert_dtype", 0, &s) < 0)
        return -1;
    if (!s || !strcmp(s, "fp8")) {
        c->expert_fp4 = 0;
        return 0;
    }
    if (!strcmp(s, "fp4")) {
        c->expert_fp4 = 1;
        return 0;
    }
    return v4_err_set(r->err, V4_ERR_CONFIG, r->where,
                      "key 'expert_dtype' is \"%s\"; expected \"fp4\" or \"fp8\"", s);
}

/* weight_block_size must be [128, 128] (the FP8 scale blocks of §3.3). */
static int check_block_size(const reader *r, const json_t *qc)
{
    json_t *v = NULL;
    if (lookup(r, qc, "quantization_config", "weight_block_size", 1, &v) < 0)
        return -1;
    if (!json_is_array(v))
        return err_type(r, "quantization_config", "weight_block_size", v, "array [128, 128]");
    json_t *a = json_array_get(v, 0), *b = json_array_get(v, 1);
    if (json_array_size(v) != 2 || !json_is_integer(a) || !json_is_integer(b) ||
        json_integer_value(a) != 128 || json_integer_value(b) != 128)
        return v4_err_set(r->err, V4_ERR_CONFIG, r->where,
                          "key 'quantization_config.weight_block_size' must be [128, 128]");
    return 0;
}

/* quantization_config, if present: fp8 weights, e4m3, ue8m0 scales, 128x128 blocks. */
static int read_quantization(const reader *r, const json_t *root)
{
    json_t *qc = NULL;
    if (get_object(r, root, "quantization_config", &qc) < 0)
        return -1;
    if (!qc)
        return 0;
    if (expect_string(r, qc, "quantization_config", "quant_method", 1, "fp8") < 0 ||
        expect_string(r, qc, "quantization_config", "fmt", 1, "e4m3") < 0 ||
        expect_string(r, qc, "quantization_config", "scale_fmt", 1, "ue8m0") < 0)
        return -1;
    return check_block_size(r, qc);
}

static int read_config(const reader *r, const json_t *root, v4_config *c)
{
    if (read_scalars(r, root, c) < 0 ||
        read_compress_ratios(r, root, c) < 0 ||
        read_rope_scaling(r, root, c) < 0 ||
        read_compress_rope_theta(r, root, c) < 0 ||
        read_expert_dtype(r, root, c) < 0 ||
        expect_string(r, root, NULL, "scoring_func", 0, "sqrtsoftplus") < 0 ||
        read_quantization(r, root) < 0)
        return -1;
    return 0;
}

/* ---------------------------------------------------------------------------------- */
/* Validation                                                                           */
/* ---------------------------------------------------------------------------------- */

static int is_pow2(long long x) { return x > 0 && (x & (x - 1)) == 0; }

#define BAD(...) v4_err_set(err, V4_ERR_CONFIG, where, __VA_ARGS__)

/* Every field that must simply be >= 1. */
static int check_positive_ints(const v4_config *c, const char *where, v4_error *err)
{
    const struct { const char *name; int v; } f[] = {
        {"vocab_size", c->vocab_size},
        {"hidden_size", c->dim},
        {"num_attention_heads", c->n_heads},
        {"head_dim", c->head_dim},
        {"q_lora_rank", c->q_lora_rank},
        {"o_groups", c->o_groups},
        {"o_lora_rank", c->o_lora_rank},
        {"sliding_window", c->window},
        {"n_routed_experts", c->n_routed_experts},
        {"num_experts_per_tok", c->n_act_experts},
        {"moe_intermediate_size", c->moe_inter},
        {"index_n_heads", c->index_n_heads},
        {"index_head_dim", c->index_head_dim},
        {"index_topk", c->index_topk},
        {"hc_mult", c->hc_mult},
        {"hc_sinkhorn_iters", c->hc_iters},
    };
    for (size_t i = 0; i < sizeof f / sizeof f[0]; i++)
        if (f[i].v < 1)
            return BAD("%s is %d, must be >= 1", f[i].name, f[i].v);
    if (c->max_position < 1)
        return BAD("max_position_embeddings is %lld, must be >= 1", c->max_position);
    return 0;
}

static int check_layers(const v4_config *c, const char *where, v4_error *err)
{
    if (c->n_layers < 1 || c->n_layers > V4_MAX_LAYERS)
        return BAD("num_hidden_layers is %d, expected 1..%d (V4_MAX_LAYERS)", c->n_layers,
                   V4_MAX_LAYERS);
    if (c->n_mtp_layers < 0)
        return BAD("num_nextn_predict_layers is %d, must be >= 0", c->n_mtp_layers);
    for (int l = 0; l < c->n_layers; l++)
        if (c->compress_ratios[l] != 0 && c->compress_ratios[l] < 2)
            return BAD("compress_ratios[%d] is %d, expected 0 (window only) or >= 2", l,
                       c->compress_ratios[l]);
    if (c->n_hash_layers < 0 || c->n_hash_layers > c->n_layers)
        return BAD("num_hash_layers is %d, expected 0..num_hidden_layers (%d)", c->n_hash_layers,
                   c->n_layers);
    return 0;
}

/* §8.1: inputs of every FP8/FP4 linear are multiples of the 128-wide quant blocks. */
static int check_blocks(const v4_config *c, const char *where, v4_error *err)
{
    if (c->dim % 128)
        return BAD("hidden_size (%d) must be a multiple of 128", c->dim);
    if (c->q_lora_rank % 128)
        return BAD("q_lora_rank (%d) must be a multiple of 128", c->q_lora_rank);
    long long og = (long long)c->o_groups * c->o_lora_rank;
    if (og % 128)
        return BAD("o_groups * o_lora_rank (%d * %d = %lld) must be a multiple of 128",
                   c->o_groups, c->o_lora_rank, og);
    if (c->moe_inter % 128)
        return BAD("moe_intermediate_size (%d) must be a multiple of 128", c->moe_inter);
    return 0;
}

static int check_heads(const v4_config *c, const char *where, v4_error *err)
{
    if (c->n_kv_heads != 1)
        return BAD("num_key_value_heads is %d, must be 1 (one shared KV vector per token)",
                   c->n_kv_heads);
    if (c->rope_head_dim < 2 || c->rope_head_dim % 2)
        return BAD("qk_rope_head_dim (%d) must be positive and even", c->rope_head_dim);
    int nope = c->head_dim - c->rope_head_dim;
    if (nope <= 0 || nope % 64)
        return BAD("head_dim - qk_rope_head_dim (%d - %d = %d) must be a positive multiple "
                   "of 64", c->head_dim, c->rope_head_dim, nope);
    long long hd = (long long)c->n_heads * c->head_dim;
    if (hd % c->o_groups)
        return BAD("num_attention_heads * head_dim (%lld) must be divisible by o_groups (%d)",
                   hd, c->o_groups);
    if ((hd / c->o_groups) % 128)
        return BAD("num_attention_heads * head_dim / o_groups (%lld / %d = %lld) must be a "
                   "multiple of 128", hd, c->o_groups, hd / c->o_groups);
    return 0;
}

static int check_indexer(const v4_config *c, const char *where, v4_error *err)
{
    int d = c->index_head_dim;
    if (!is_pow2(d) || d % 32)
        return BAD("index_head_dim (%d) must be a power of two and a multiple of 32", d);
    if (d <= c->rope_head_dim)
        return BAD("index_head_dim (%d) must be larger than qk_rope_head_dim (%d)", d,
                   c->rope_head_dim);
    return 0;
}

static int check_moe(const v4_config *c, const char *where, v4_error *err)
{
    if (c->n_shared_experts != 1)
        return BAD("n_shared_experts is %d, must be 1", c->n_shared_experts);
    if (c->n_act_experts > c->n_routed_experts)
        return BAD("num_experts_per_tok (%d) exceeds n_routed_experts (%d)", c->n_act_experts,
                   c->n_routed_experts);
    if (!(c->route_scale > 0.0f) || !isfinite(c->route_scale))
        return BAD("routed_scaling_factor (%g) must be positive", (double)c->route_scale);
    if (!(c->swiglu_limit >= 0.0f) || !isfinite(c->swiglu_limit))
        return BAD("swiglu_limit (%g) must be >= 0 (0 = no clamp)", (double)c->swiglu_limit);
    if (c->expert_fp4 != 0 && c->expert_fp4 != 1)
        return BAD("expert_dtype flag is %d, expected 0 (fp8) or 1 (fp4)", c->expert_fp4);
    return 0;
}

static int positive_finite(double x) { return x > 0.0 && isfinite(x); }

static int check_numerics(const v4_config *c, const char *where, v4_error *err)
{
    if (!positive_finite(c->norm_eps))
        return BAD("rms_norm_eps (%g) must be positive", (double)c->norm_eps);
    if (!positive_finite(c->hc_eps))
        return BAD("hc_eps (%g) must be positive", (double)c->hc_eps);
    if (!positive_finite(c->rope_theta))
        return BAD("rope_theta (%g) must be positive", c->rope_theta);
    if (!positive_finite(c->compress_rope_theta))
        return BAD("compress_rope_theta (%g) must be positive", c->compress_rope_theta);
    if (!positive_finite(c->rope_factor))
        return BAD("rope_scaling.factor (%g) must be positive", c->rope_factor);
    if (c->original_seq_len < 0)
        return BAD("rope_scaling.original_max_position_embeddings (%d) must be >= 0",
                   c->original_seq_len);
    if (!positive_finite(c->beta_fast))
        return BAD("rope_scaling.beta_fast (%g) must be positive", c->beta_fast);
    if (!positive_finite(c->beta_slow))
        return BAD("rope_scaling.beta_slow (%g) must be positive", c->beta_slow);
    return 0;
}

static int check_tokens(const v4_config *c, const char *where, v4_error *err)
{
    if (c->bos_id < 0 || c->bos_id >= c->vocab_size)
        return BAD("bos_token_id (%d) is outside the vocabulary [0, vocab_size=%d)", c->bos_id,
                   c->vocab_size);
    if (c->eos_id < 0 || c->eos_id >= c->vocab_size)
        return BAD("eos_token_id (%d) is outside the vocabulary [0, vocab_size=%d)", c->eos_id,
                   c->vocab_size);
    return 0;
}

#undef BAD

int v4_config_validate(const v4_config *cfg, const char *where, v4_error *err)
{
    if (!cfg)
        return v4_err_set(err, V4_ERR_INVALID, where, "v4_config_validate: cfg is NULL");
    if (check_positive_ints(cfg, where, err) < 0 ||
        check_layers(cfg, where, err) < 0 ||
        check_blocks(cfg, where, err) < 0 ||
        check_heads(cfg, where, err) < 0 ||
        check_indexer(cfg, where, err) < 0 ||
        check_moe(cfg, where, err) < 0 ||
        check_numerics(cfg, where, err) < 0 ||
        check_tokens(cfg, where, err) < 0)
        return -1;
    return 0;
}

/* ---------------------------------------------------------------------------------- */
/* Entry points                                                                         */
/* ---------------------------------------------------------------------------------- */

/* Parse a decoded JSON document (root owned by the caller). */
static int config_from_root(const json_t *root, const char *where, v4_config *cfg,
                            v4_error *err)
{
    reader r = {where, err};
    if (!json_is_object(root))
        return v4_err_set(err, V4_ERR_FORMAT, where,
                          "config top level is a JSON %s, expected an object",
                          json_type_name(root));
    v4_config c;
    memset(&c, 0, sizeof c);
    if (read_config(&r, root, &c) < 0 || v4_config_validate(&c, where, err) < 0)
        return -1;
    *cfg = c;
    return 0;
}

static int json_syntax_error(const json_error_t *je, const char *where, v4_error *err)
{
    return v4_err_set(err, V4_ERR_FORMAT, where, "invalid JSON at line %d, column %d: %s",
                      je->line, je->column, je->text);
}

/* Decode len bytes of JSON (need not be NUL-terminated) and parse the config. */
static int config_from_buffer(const char *buf, size_t len, const char *where, v4_config *cfg,
                              v4_error *err)
{
    json_error_t je;
    json_t *root = json_loadb(buf, len, JSON_REJECT_DUPLICATES, &je);
    if (!root)
        return json_syntax_error(&je, where, err);
    int rc = config_from_root(root, where, cfg, err);
    json_decref(root);
    return rc;
}

int v4_config_parse(const char *json_text, const char *where, v4_config *cfg, v4_error *err)
{
    if (!where)
        where = "config.json";
    if (!json_text || !cfg)
        return v4_err_set(err, V4_ERR_INVALID, where, "v4_config_parse: NULL argument");
    return config_from_buffer(json_text, strlen(json_text), where, cfg, err);
}

/* Read a whole (small) file into a malloc'd buffer. */
static int read_file(const char *path, char **out, size_t *out_len, v4_error *err)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return v4_err_set(err, V4_ERR_IO, path, "cannot open config: %s", strerror(errno));
    size_t cap = 4096, len = 0;
    char *buf = malloc(cap);
    int rc = buf ? 0 : v4_err_set(err, V4_ERR_NOMEM, path, "out of memory reading config");
    while (rc == 0) {
        if (len == cap) {
            char *nb = cap < MAX_CONFIG_BYTES ? realloc(buf, cap * 2) : NULL;
            if (!nb) {
                rc = v4_err_set(err, cap < MAX_CONFIG_BYTES ? V4_ERR_NOMEM : V4_ERR_FORMAT, path,
                                "config file too large or out of memory (%zu bytes read)", len);
                break;
            }
            buf = nb;
            cap *= 2;
        }
        size_t n = fread(buf + len, 1, cap - len, f);
        len += n;
        if (n == 0) {
            if (ferror(f))
                rc = v4_err_set(err, V4_ERR_IO, path, "error reading config");
            break;
        }
    }
    fclose(f);
    if (rc < 0) {
        free(buf);
        return -1;
    }
    *out = buf;
    *out_len = len;
    return 0;
}

int v4_config_load(const char *path, v4_config *cfg, v4_error *err)
{
    if (!path || !cfg)
        return v4_err_set(err, V4_ERR_INVALID, path, "v4_config_load: NULL argument");
    char *buf = NULL;
    size_t len = 0;
    if (read_file(path, &buf, &len, err) < 0)
        return -1;
    int rc = config_from_buffer(buf, len, path, cfg, err);
    free(buf);
    return rc;
}
