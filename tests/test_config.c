/* test_config.c - config.json loading, defaults and validation (config/model_config.c).
 *
 * Positive cases: the golden tiny config loads with the expected values; optional keys
 * fall back to their documented defaults; MTP entries of compress_ratios are accepted
 * but not stored.  Negative cases start from the golden JSON, change one key with
 * jansson (or use a literal text for syntax errors), and check the error code, that
 * the message names the key, and that err.where names the source.
 */
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include <jansson.h>

#include "config/model_config.h"
#include "testutil.h"

#define SRC "test-config"

/* ---- helpers --------------------------------------------------------------------- */

static json_t *load_golden_json(const char *path)
{
    json_error_t je;
    json_t *root = json_load_file(path, 0, &je);
    CHECK(root != NULL, "cannot read %s: %s", path, je.text);
    return root;
}

/* Parse a JSON text and expect failure with code; msg must contain needle (may be NULL). */
static void expect_fail_text(const char *text, v4_errcode code, const char *needle,
                             const char *label)
{
    v4_config cfg;
    v4_error err;
    v4_err_clear(&err);
    int rc = v4_config_parse(text, SRC, &cfg, &err);
    CHECK(rc < 0, "[%s] parse unexpectedly succeeded", label);
    CHECK(err.code == code, "[%s] code %s, expected %s (msg: %s)", label,
          v4_errcode_name(err.code), v4_errcode_name(code), err.msg);
    CHECK(!needle || strstr(err.msg, needle), "[%s] message lacks '%s': %s", label, needle,
          err.msg);
    CHECK(!strcmp(err.where, SRC), "[%s] where is '%s'", label, err.where);
}

/* Dump root (deep-copied and mutated by the caller) and expect failure. */
static void expect_fail_json(json_t *root, v4_errcode code, const char *needle,
                             const char *label)
{
    char *text = json_dumps(root, JSON_INDENT(2));
    CHECK(text != NULL, "[%s] json_dumps failed", label);
    if (text)
        expect_fail_text(text, code, needle, label);
    free(text);
    json_decref(root);
}

/* Copy of base with key set to value (value reference stolen). */
static json_t *with_key(const json_t *base, const char *key, json_t *value)
{
    json_t *c = json_deep_copy(base);
    json_object_set_new(c, key, value);
    return c;
}

static json_t *without_key(const json_t *base, const char *key)
{
    json_t *c = json_deep_copy(base);
    json_object_del(c, key);
    return c;
}

/* Copy of base with base[obj][key] = value. */
static json_t *with_nested(const json_t *base, const char *obj, const char *key, json_t *value)
{
    json_t *c = json_deep_copy(base);
    json_object_set_new(json_object_get(c, obj), key, value);
    return c;
}

static json_t *int_array(int n, ...)
{
    json_t *a = json_array();
    va_list ap;
    va_start(ap, n);
    for (int i = 0; i < n; i++)
        json_array_append_new(a, json_integer(va_arg(ap, int)));
    va_end(ap);
    return a;
}

static int parse_json(json_t *root, v4_config *cfg, v4_error *err)
{
    char *text = json_dumps(root, 0);
    int rc = v4_config_parse(text, SRC, cfg, err);
    free(text);
    json_decref(root);
    return rc;
}

/* ---- positive cases -------------------------------------------------------------- */

static void test_golden(const char *path)
{
    v4_config c;
    v4_error err;
    v4_err_clear(&err);
    int rc = v4_config_load(path, &c, &err);
    CHECK(rc == 0, "load %s: %s (%s)", path, err.msg, err.where);
    if (rc)
        return;
    CHECK(c.vocab_size == 4096, "vocab_size %d", c.vocab_size);
    CHECK(c.dim == 256, "dim %d", c.dim);
    CHECK(c.n_layers == 4, "n_layers %d", c.n_layers);
    CHECK(c.n_mtp_layers == 0, "n_mtp_layers %d", c.n_mtp_layers);
    CHECK(c.n_heads == 4, "n_heads %d", c.n_heads);
    CHECK(c.n_kv_heads == 1, "n_kv_heads %d", c.n_kv_heads);
    CHECK(c.head_dim == 128, "head_dim %d", c.head_dim);
    CHECK(c.rope_head_dim == 64, "rope_head_dim %d", c.rope_head_dim);
    CHECK(c.q_lora_rank == 128, "q_lora_rank %d", c.q_lora_rank);
    CHECK(c.o_groups == 2 && c.o_lora_rank == 128, "o %d x %d", c.o_groups, c.o_lora_rank);
    CHECK(c.window == 32, "window %d", c.window);
    CHECK(c.compress_ratios[0] == 0 && c.compress_ratios[1] == 4 &&
              c.compress_ratios[2] == 128 && c.compress_ratios[3] == 4,
          "compress_ratios %d %d %d %d", c.compress_ratios[0], c.compress_ratios[1],
          c.compress_ratios[2], c.compress_ratios[3]);
    CHECK(!v4_layer_is_csa(&c, 0) && !v4_layer_is_hca(&c, 0), "layer 0 is window-only");
    CHECK(v4_layer_is_csa(&c, 1) && v4_layer_is_hca(&c, 2) && v4_layer_is_csa(&c, 3),
          "layer kinds");
    CHECK(v4_layer_is_hash(&c, 1) && !v4_layer_is_hash(&c, 2), "hash layers");
    CHECK(c.n_routed_experts == 16 && c.n_act_experts == 4 && c.n_shared_experts == 1,
          "experts %d/%d/%d", c.n_routed_experts, c.n_act_experts, c.n_shared_experts);
    CHECK(c.moe_inter == 128, "moe_inter %d", c.moe_inter);
    CHECK(c.n_hash_layers == 2, "n_hash_layers %d", c.n_hash_layers);
    CHECK(c.route_scale == 1.5f, "route_scale %g", (double)c.route_scale);
    CHECK(c.swiglu_limit == 10.0f, "swiglu_limit %g", (double)c.swiglu_limit);
    CHECK(c.index_n_heads == 4 && c.index_head_dim == 128 && c.index_topk == 16,
          "indexer %d %d %d", c.index_n_heads, c.index_head_dim, c.index_topk);
    CHECK(c.hc_mult == 4 && c.hc_iters == 20 && c.hc_eps == 1e-6f, "hc %d %d %g", c.hc_mult,
          c.hc_iters, (double)c.hc_eps);
    CHECK(c.norm_eps == 1e-6f, "norm_eps %g", (double)c.norm_eps);
    CHECK(c.rope_theta == 10000.0 && c.compress_rope_theta == 160000.0, "thetas %g %g",
          c.rope_theta, c.compress_rope_theta);
    CHECK(c.rope_factor == 16.0 && c.original_seq_len == 65536, "yarn %g %d", c.rope_factor,
          c.original_seq_len);
    CHECK(c.beta_fast == 32.0 && c.beta_slow == 1.0, "betas %g %g", c.beta_fast, c.beta_slow);
    CHECK(c.max_position == 1048576LL, "max_position %lld", c.max_position);
    CHECK(c.bos_id == 0 && c.eos_id == 1, "bos/eos %d %d", c.bos_id, c.eos_id);
    CHECK(c.expert_fp4 == 1, "expert_fp4 %d", c.expert_fp4);
    CHECK(v4_config_validate(&c, path, &err) == 0, "revalidate: %s", err.msg);
}

static void test_defaults(const json_t *base)
{
    const char *optional[] = {"num_nextn_predict_layers", "n_shared_experts", "hc_mult",
                              "hc_sinkhorn_iters", "hc_eps", "swiglu_limit", "num_hash_layers",
                              "expert_dtype", "compress_rope_theta", "rope_scaling",
                              "scoring_func", "quantization_config"};
    json_t *root = json_deep_copy(base);
    for (size_t i = 0; i < sizeof optional / sizeof optional[0]; i++)
        json_object_del(root, optional[i]);
    v4_config c;
    v4_error err;
    int rc = parse_json(root, &c, &err);
    CHECK(rc == 0, "defaults: %s", err.msg);
    if (rc)
        return;
    CHECK(c.n_mtp_layers == 0, "default n_mtp_layers %d", c.n_mtp_layers);
    CHECK(c.n_shared_experts == 1, "default n_shared_experts %d", c.n_shared_experts);
    CHECK(c.hc_mult == 4 && c.hc_iters == 20 && c.hc_eps == 1e-6f, "default hc");
    CHECK(c.swiglu_limit == 0.0f, "default swiglu_limit %g", (double)c.swiglu_limit);
    CHECK(c.n_hash_layers == 0, "default n_hash_layers %d", c.n_hash_layers);
    CHECK(c.expert_fp4 == 0, "default expert_fp4 %d", c.expert_fp4);
    CHECK(c.compress_rope_theta == c.rope_theta, "default compress_rope_theta %g",
          c.compress_rope_theta);
    CHECK(c.rope_factor == 1.0 && c.original_seq_len == 0, "default rope_scaling %g %d",
          c.rope_factor, c.original_seq_len);

    /* null means absent for optional keys */
    rc = parse_json(with_key(base, "rope_scaling", json_null()), &c, &err);
    CHECK(rc == 0 && c.original_seq_len == 0, "rope_scaling null: %s", err.msg);
    /* "fp8" experts and HF's newer rope_type spelling */
    json_t *r = with_key(base, "expert_dtype", json_string("fp8"));
    json_object_del(json_object_get(r, "rope_scaling"), "type");
    json_object_set_new(json_object_get(r, "rope_scaling"), "rope_type", json_string("yarn"));
    rc = parse_json(r, &c, &err);
    CHECK(rc == 0 && c.expert_fp4 == 0 && c.rope_factor == 16.0, "fp8/rope_type: %s", err.msg);
    /* real numbers are accepted where a number is expected */
    rc = parse_json(with_key(base, "rope_theta", json_real(10000.0)), &c, &err);
    CHECK(rc == 0 && c.rope_theta == 10000.0, "real rope_theta: %s", err.msg);
}

static void test_mtp_entries(const json_t *base)
{
    json_t *root = with_key(base, "num_nextn_predict_layers", json_integer(1));
    json_object_set_new(root, "compress_ratios", int_array(5, 0, 4, 128, 4, 0));
    v4_config c;
    v4_error err;
    int rc = parse_json(root, &c, &err);
    CHECK(rc == 0, "mtp: %s", err.msg);
    CHECK(rc || (c.n_mtp_layers == 1 && c.compress_ratios[3] == 4 && c.compress_ratios[4] == 0),
          "mtp entries");
}

/* ---- negative cases -------------------------------------------------------------- */

static void test_syntax(void)
{
    expect_fail_text("{\n  \"vocab_size\": 4096,\n  \"hidden_size\": }\n", V4_ERR_FORMAT,
                     "line 3, column", "syntax error");
    expect_fail_text("{\"vocab_size\": 4096,\n \"vocab_size\": 4096}", V4_ERR_FORMAT,
                     "vocab_size", "duplicate key");
    expect_fail_text("{\"vocab_size\": 4096,\n \"vocab_size\": 4096}", V4_ERR_FORMAT,
                     "line 2", "duplicate key line");
    expect_fail_text("[1, 2, 3]", V4_ERR_FORMAT, "object", "top level array");
    expect_fail_text("", V4_ERR_FORMAT, "line", "empty text");
}

static void test_missing_and_types(const json_t *b)
{
    expect_fail_json(without_key(b, "hidden_size"), V4_ERR_MISSING, "hidden_size", "missing");
    expect_fail_json(without_key(b, "compress_ratios"), V4_ERR_MISSING, "compress_ratios",
                     "missing compress_ratios");
    expect_fail_json(with_nested(b, "rope_scaling", "factor", json_null()),
                     V4_ERR_CONFIG, "rope_scaling.factor", "null nested");
    json_t *r = json_deep_copy(b);
    json_object_del(json_object_get(r, "rope_scaling"), "original_max_position_embeddings");
    expect_fail_json(r, V4_ERR_MISSING, "rope_scaling.original_max_position_embeddings",
                     "missing nested");
    expect_fail_json(with_key(b, "hidden_size", json_string("256")), V4_ERR_CONFIG,
                     "hidden_size", "string for int");
    expect_fail_json(with_key(b, "hidden_size", json_string("256")), V4_ERR_CONFIG, "integer",
                     "string for int (expected type)");
    expect_fail_json(with_key(b, "num_attention_heads", json_real(4.5)), V4_ERR_CONFIG,
                     "num_attention_heads", "real for int");
    expect_fail_json(with_key(b, "vocab_size", json_true()), V4_ERR_CONFIG, "boolean",
                     "bool for int");
    expect_fail_json(with_key(b, "rope_theta", json_string("1e4")), V4_ERR_CONFIG, "rope_theta",
                     "string for number");
    expect_fail_json(with_key(b, "vocab_size", json_integer(1LL << 40)), V4_ERR_CONFIG,
                     "vocab_size", "int overflow");
    expect_fail_json(with_key(b, "compress_ratios", json_string("0,4")), V4_ERR_CONFIG,
                     "compress_ratios", "compress_ratios type");
    json_t *cr = int_array(3, 0, 4, 128);
    json_array_append_new(cr, json_string("4"));
    expect_fail_json(with_key(b, "compress_ratios", cr), V4_ERR_CONFIG, "compress_ratios[3]",
                     "compress_ratios entry type");
    expect_fail_json(with_key(b, "rope_scaling", json_integer(1)), V4_ERR_CONFIG,
                     "rope_scaling", "rope_scaling type");
}

static void test_unsupported(const json_t *b)
{
    expect_fail_json(with_nested(b, "rope_scaling", "type",
                                 json_string("linear")),
                     V4_ERR_CONFIG, "rope_scaling.type", "rope_scaling.type");
    expect_fail_json(with_key(b, "scoring_func", json_string("softmax")), V4_ERR_CONFIG,
                     "scoring_func", "scoring_func");
    expect_fail_json(with_key(b, "expert_dtype", json_string("int4")), V4_ERR_CONFIG,
                     "expert_dtype", "expert_dtype");
    expect_fail_json(with_nested(b, "quantization_config", "weight_block_size",
                                 int_array(2, 64, 64)),
                     V4_ERR_CONFIG, "weight_block_size", "weight_block_size");
    expect_fail_json(with_nested(b, "quantization_config", "scale_fmt",
                                 json_string("fp32")),
                     V4_ERR_CONFIG, "quantization_config.scale_fmt", "scale_fmt");
    expect_fail_json(with_nested(b, "quantization_config", "quant_method",
                                 json_string("gptq")),
                     V4_ERR_CONFIG, "quant_method", "quant_method");
}

static void test_constraints(const json_t *b)
{
    expect_fail_json(with_key(b, "compress_ratios", int_array(5, 0, 4, 128, 4, 0)),
                     V4_ERR_CONFIG,
                     "compress_ratios has 5 entries, expected num_hidden_layers (4) + "
                     "num_nextn_predict_layers (0) = 4",
                     "compress_ratios length");
    expect_fail_json(with_key(b, "compress_ratios", int_array(4, 0, 1, 128, 4)), V4_ERR_CONFIG,
                     "compress_ratios[1]", "compress ratio 1");
    expect_fail_json(with_key(b, "num_hidden_layers", json_integer(V4_MAX_LAYERS + 1)),
                     V4_ERR_CONFIG, "num_hidden_layers", "too many layers");
    expect_fail_json(with_key(b, "hidden_size", json_integer(200)), V4_ERR_CONFIG,
                     "hidden_size", "dim % 128");
    expect_fail_json(with_key(b, "q_lora_rank", json_integer(96)), V4_ERR_CONFIG, "q_lora_rank",
                     "q_lora_rank % 128");
    expect_fail_json(with_key(b, "o_lora_rank", json_integer(100)), V4_ERR_CONFIG,
                     "o_lora_rank", "o_groups*o_lora_rank % 128");
    expect_fail_json(with_key(b, "moe_intermediate_size", json_integer(192)), V4_ERR_CONFIG,
                     "moe_intermediate_size", "moe_inter % 128");
    expect_fail_json(with_key(b, "index_head_dim", json_integer(96)), V4_ERR_CONFIG,
                     "index_head_dim", "index_head_dim not pow2");
    expect_fail_json(with_key(b, "index_head_dim", json_integer(64)), V4_ERR_CONFIG,
                     "index_head_dim", "index_head_dim == rope");
    expect_fail_json(with_key(b, "index_head_dim", json_integer(16)), V4_ERR_CONFIG,
                     "index_head_dim", "index_head_dim % 32");
    expect_fail_json(with_key(b, "head_dim", json_integer(160)), V4_ERR_CONFIG, "head_dim",
                     "nope dims % 64");
    expect_fail_json(with_key(b, "head_dim", json_integer(64)), V4_ERR_CONFIG, "head_dim",
                     "nope dims zero");
    expect_fail_json(with_key(b, "qk_rope_head_dim", json_integer(63)), V4_ERR_CONFIG,
                     "qk_rope_head_dim", "odd rope dim");
    expect_fail_json(with_key(b, "o_groups", json_integer(3)), V4_ERR_CONFIG, "o_groups",
                     "heads*head_dim % o_groups");
    expect_fail_json(with_key(b, "o_groups", json_integer(8)), V4_ERR_CONFIG, "o_groups",
                     "group width % 128");
    expect_fail_json(with_key(b, "num_key_value_heads", json_integer(2)), V4_ERR_CONFIG,
                     "num_key_value_heads", "kv heads");
    expect_fail_json(with_key(b, "n_shared_experts", json_integer(2)), V4_ERR_CONFIG,
                     "n_shared_experts", "shared experts");
    expect_fail_json(with_key(b, "num_experts_per_tok", json_integer(17)), V4_ERR_CONFIG,
                     "num_experts_per_tok", "top-k > experts");
    expect_fail_json(with_key(b, "num_hash_layers", json_integer(5)), V4_ERR_CONFIG,
                     "num_hash_layers", "hash layers > layers");
    expect_fail_json(with_key(b, "index_topk", json_integer(0)), V4_ERR_CONFIG, "index_topk",
                     "index_topk 0");
    expect_fail_json(with_key(b, "hc_mult", json_integer(0)), V4_ERR_CONFIG, "hc_mult",
                     "hc_mult 0");
    expect_fail_json(with_key(b, "sliding_window", json_integer(0)), V4_ERR_CONFIG,
                     "sliding_window", "window 0");
    expect_fail_json(with_key(b, "vocab_size", json_integer(0)), V4_ERR_CONFIG, "vocab_size",
                     "vocab 0");
    expect_fail_json(with_key(b, "rms_norm_eps", json_real(0.0)), V4_ERR_CONFIG, "rms_norm_eps",
                     "norm eps 0");
    expect_fail_json(with_key(b, "hc_eps", json_real(-1e-6)), V4_ERR_CONFIG, "hc_eps",
                     "hc eps negative");
    expect_fail_json(with_key(b, "bos_token_id", json_integer(4096)), V4_ERR_CONFIG,
                     "bos_token_id", "bos out of vocab");
    expect_fail_json(with_key(b, "eos_token_id", json_integer(-1)), V4_ERR_CONFIG,
                     "eos_token_id", "eos negative");
}

/* v4_config_validate on a struct (the mkmodel path). */
static void test_validate_struct(const json_t *b)
{
    v4_config c;
    v4_error err;
    if (parse_json(json_deep_copy(b), &c, &err) < 0) {
        CHECK(0, "base parse: %s", err.msg);
        return;
    }
    v4_config bad = c;
    bad.dim = 200;
    CHECK(v4_config_validate(&bad, "mk", &err) < 0 && strstr(err.msg, "hidden_size") &&
              !strcmp(err.where, "mk"),
          "validate dim: %s", err.msg);
    bad = c;
    bad.compress_ratios[2] = 1;
    CHECK(v4_config_validate(&bad, "mk", &err) < 0 && strstr(err.msg, "compress_ratios[2]"),
          "validate ratio: %s", err.msg);
    bad = c;
    bad.n_layers = V4_MAX_LAYERS + 1;
    CHECK(v4_config_validate(&bad, "mk", &err) < 0 && strstr(err.msg, "num_hidden_layers"),
          "validate n_layers: %s", err.msg);
    CHECK(v4_config_validate(&c, "mk", &err) == 0, "validate ok: %s", err.msg);
}

/* v4_config_load: IO errors and where = the path. */
static void test_load_errors(void)
{
    const char *tmp = t_env("V4_TMP", "/tmp");
    char path[1024];
    v4_config c;
    v4_error err;
    snprintf(path, sizeof path, "%s/test_config_missing_%d.json", tmp, (int)sizeof c);
    remove(path);
    CHECK(v4_config_load(path, &c, &err) < 0 && err.code == V4_ERR_IO &&
              !strcmp(err.where, path),
          "missing file: %s (%s)", err.msg, err.where);
    snprintf(path, sizeof path, "%s/test_config_bad.json", tmp);
    FILE *f = fopen(path, "w");
    CHECK(f != NULL, "cannot write %s", path);
    if (!f)
        return;
    fputs("{\n  \"vocab_size\": 4096,\n  oops\n}\n", f);
    fclose(f);
    CHECK(v4_config_load(path, &c, &err) < 0 && err.code == V4_ERR_FORMAT &&
              !strcmp(err.where, path) && strstr(err.msg, "line 3"),
          "bad file: %s (%s)", err.msg, err.where);
    remove(path);
}

int main(void)
{
    char path[1024];
    snprintf(path, sizeof path, "%s/golden/tiny/model/config.json",
             t_env("V4_TEST_DATA", "tests/data"));
    test_golden(path);
    json_t *base = load_golden_json(path);
    if (base) {
        test_defaults(base);
        test_mtp_entries(base);
        test_missing_and_types(base);
        test_unsupported(base);
        test_constraints(base);
        test_validate_struct(base);
        json_decref(base);
    }
    test_syntax();
    test_load_errors();
    TEST_DONE();
}
