/* config_json_write.c - v4_config -> Hugging Face config.json text (model_config.h).
 *
 * Design: the output mirrors the real DeepSeek-V4 config.json (and the golden
 * tests/data/golden/tiny/model/config.json): the same keys, in the same order
 * (alphabetical, then compress_rope_theta and compress_ratios last), 2-space
 * indentation, no trailing newline.  Constant keys the decode path ignores
 * (architectures, attention_bias, hidden_act, scoring_func, topk_method, ...) are
 * written with V4-Flash's values so that other tools accept the file.
 *
 * Numbers: float fields of v4_config are written as their shortest decimal form
 * (1e-6f -> 1e-06 rather than 9.99999997e-07); double fields that hold an integral
 * value (rope_theta, YaRN factor/betas) are written as JSON integers, like the real
 * file.  jansson prints exponents without leading zeros ("1e-6"), which is the same
 * number.  compress_ratios gets n_layers + n_mtp_layers entries (the MTP entries are
 * 0: the MTP block is window-only); rope_scaling is omitted when there is no YaRN
 * (original_seq_len == 0).
 *
 * Owner: the mkmodel work package.  Thread: any (no shared state).
 */
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "model_config.h"

/* The double whose shortest decimal string round-trips f as a float. */
static double float_decimal(float f)
{
    char buf[32];
    for (int p = 1; p <= 9; p++) {
        snprintf(buf, sizeof buf, "%.*g", p, (double)f);
        if (strtof(buf, NULL) == f)
            return strtod(buf, NULL);
    }
    return (double)f;
}

/* An integral double as a JSON integer, anything else as a real. */
static json_t *number_json(double d)
{
    if (isfinite(d) && d == floor(d) && fabs(d) < 9e15)
        return json_integer((json_int_t)d);
    return json_real(d);
}

static int set(json_t *o, const char *key, json_t *v)
{
    return json_object_set_new(o, key, v);   /* steals v, also on failure */
}

static json_t *quantization_json(void)
{
    return json_pack("{s:s, s:s, s:s, s:s, s:[i,i]}", "activation_scheme", "dynamic",
                     "fmt", "e4m3", "quant_method", "fp8", "scale_fmt", "ue8m0",
                     "weight_block_size", 128, 128);
}

static json_t *rope_scaling_json(const v4_config *c)
{
    json_t *o = json_object();
    if (!o)
        return NULL;
    if (set(o, "beta_fast", number_json(c->beta_fast)) ||
        set(o, "beta_slow", number_json(c->beta_slow)) ||
        set(o, "factor", number_json(c->rope_factor)) ||
        set(o, "original_max_position_embeddings", json_integer(c->original_seq_len)) ||
        set(o, "type", json_string("yarn"))) {
        json_decref(o);
        return NULL;
    }
    return o;
}

static json_t *ratios_json(const v4_config *c)
{
    json_t *a = json_array();
    if (!a)
        return NULL;
    int n = c->n_layers + c->n_mtp_layers;
    for (int i = 0; i < n; i++) {
        int r = (i < c->n_layers && i < V4_MAX_LAYERS) ? c->compress_ratios[i] : 0;
        if (json_array_append_new(a, json_integer(r))) {
            json_decref(a);
            return NULL;
        }
    }
    return a;
}

/* Keys "architectures" .. "index_topk" (alphabetical). */
static int add_keys_a_to_i(json_t *o, const v4_config *c)
{
    return set(o, "architectures", json_pack("[s]", "DeepseekV4ForCausalLM")) ||
           set(o, "attention_bias", json_false()) ||
           set(o, "attention_dropout", json_real(0.0)) ||
           set(o, "bos_token_id", json_integer(c->bos_id)) ||
           set(o, "eos_token_id", json_integer(c->eos_id)) ||
           set(o, "expert_dtype", json_string(c->expert_fp4 ? "fp4" : "fp8")) ||
           set(o, "hc_eps", json_real(float_decimal(c->hc_eps))) ||
           set(o, "hc_mult", json_integer(c->hc_mult)) ||
           set(o, "hc_sinkhorn_iters", json_integer(c->hc_iters)) ||
           set(o, "head_dim", json_integer(c->head_dim)) ||
           set(o, "hidden_act", json_string("silu")) ||
           set(o, "hidden_size", json_integer(c->dim)) ||
           set(o, "index_head_dim", json_integer(c->index_head_dim)) ||
           set(o, "index_n_heads", json_integer(c->index_n_heads)) ||
           set(o, "index_topk", json_integer(c->index_topk));
}

/* Keys "initializer_range" .. "qk_rope_head_dim". */
static int add_keys_i_to_q(json_t *o, const v4_config *c)
{
    return set(o, "initializer_range", json_real(0.02)) ||
           set(o, "max_position_embeddings", json_integer(c->max_position)) ||
           set(o, "model_type", json_string("deepseek_v4")) ||
           set(o, "moe_intermediate_size", json_integer(c->moe_inter)) ||
           set(o, "n_routed_experts", json_integer(c->n_routed_experts)) ||
           set(o, "n_shared_experts", json_integer(c->n_shared_experts)) ||
           set(o, "norm_topk_prob", json_true()) ||
           set(o, "num_attention_heads", json_integer(c->n_heads)) ||
           set(o, "num_experts_per_tok", json_integer(c->n_act_experts)) ||
           set(o, "num_hidden_layers", json_integer(c->n_layers)) ||
           set(o, "num_hash_layers", json_integer(c->n_hash_layers)) ||
           set(o, "num_key_value_heads", json_integer(c->n_kv_heads)) ||
           set(o, "num_nextn_predict_layers", json_integer(c->n_mtp_layers)) ||
           set(o, "o_groups", json_integer(c->o_groups)) ||
           set(o, "o_lora_rank", json_integer(c->o_lora_rank)) ||
           set(o, "q_lora_rank", json_integer(c->q_lora_rank)) ||
           set(o, "qk_rope_head_dim", json_integer(c->rope_head_dim));
}

/* Keys "quantization_config" .. "vocab_size", then the two V4 additions. */
static int add_keys_q_to_end(json_t *o, const v4_config *c)
{
    if (set(o, "quantization_config", quantization_json()) ||
        set(o, "rms_norm_eps", json_real(float_decimal(c->norm_eps))))
        return -1;
    if (c->original_seq_len > 0 && set(o, "rope_scaling", rope_scaling_json(c)))
        return -1;
    return set(o, "rope_theta", number_json(c->rope_theta)) ||
           set(o, "routed_scaling_factor", json_real(float_decimal(c->route_scale))) ||
           set(o, "scoring_func", json_string("sqrtsoftplus")) ||
           set(o, "sliding_window", json_integer(c->window)) ||
           set(o, "swiglu_limit", json_real(float_decimal(c->swiglu_limit))) ||
           set(o, "tie_word_embeddings", json_false()) ||
           set(o, "topk_method", json_string("noaux_tc")) ||
           set(o, "torch_dtype", json_string("bfloat16")) ||
           set(o, "transformers_version", json_string("4.57.1")) ||
           set(o, "use_cache", json_true()) ||
           set(o, "vocab_size", json_integer(c->vocab_size)) ||
           set(o, "compress_rope_theta", number_json(c->compress_rope_theta)) ||
           set(o, "compress_ratios", ratios_json(c));
}

char *v4_config_to_json(const v4_config *cfg)
{
    json_t *o = json_object();
    if (!o)
        return NULL;
    char *text = NULL;
    if (!add_keys_a_to_i(o, cfg) && !add_keys_i_to_q(o, cfg) && !add_keys_q_to_end(o, cfg))
        text = json_dumps(o, JSON_INDENT(2) | JSON_PRESERVE_ORDER | JSON_REAL_PRECISION(15));
    json_decref(o);
    return text;
}
