/* model_config.h - the DeepSeek-V4 model configuration (Hugging Face config.json).
 *
 * v4_config_load() parses config.json with jansson, reads every key the decode path
 * needs (spec v4-decode.md §2.1), and validates it: a missing key, a wrong JSON type,
 * or an inconsistent value (compress_ratios of the wrong length, a dimension that
 * breaks the 128-element quantization blocks of §8.1, ...) is rejected with an error
 * naming the key and the reason.
 *
 * Ownership: v4_config is a plain value (no heap pointers); the caller owns it.
 * Thread: load/validate from any thread; a loaded config is read-only and may be
 * shared freely.
 */
#ifndef V4_MODEL_CONFIG_H
#define V4_MODEL_CONFIG_H

#include "error.h"

#define V4_MAX_LAYERS 128

typedef struct v4_config {
    int vocab_size;            /* vocab_size */
    int dim;                   /* hidden_size */
    int n_layers;              /* num_hidden_layers */
    int n_mtp_layers;          /* num_nextn_predict_layers (MTP is not run) */
    int n_heads;               /* num_attention_heads */
    int n_kv_heads;            /* num_key_value_heads (must be 1) */
    int head_dim;              /* head_dim */
    int rope_head_dim;         /* qk_rope_head_dim */
    int q_lora_rank;           /* q_lora_rank */
    int o_groups;              /* o_groups */
    int o_lora_rank;           /* o_lora_rank */
    int window;                /* sliding_window */
    int compress_ratios[V4_MAX_LAYERS]; /* per main layer: 0 (window only), 4 (CSA), other (HCA) */
    int n_routed_experts;      /* n_routed_experts */
    int n_act_experts;         /* num_experts_per_tok */
    int n_shared_experts;      /* n_shared_experts (must be 1) */
    int moe_inter;             /* moe_intermediate_size */
    int n_hash_layers;         /* num_hash_layers */
    float route_scale;         /* routed_scaling_factor */
    float swiglu_limit;        /* swiglu_limit (0 = no clamp) */
    int index_n_heads;         /* index_n_heads */
    int index_head_dim;        /* index_head_dim */
    int index_topk;            /* index_topk */
    int hc_mult;               /* hc_mult */
    int hc_iters;              /* hc_sinkhorn_iters */
    float hc_eps;              /* hc_eps */
    float norm_eps;            /* rms_norm_eps */
    double rope_theta;         /* rope_theta (window-only layers) */
    double compress_rope_theta;/* compress_rope_theta (compressed layers) */
    double rope_factor;        /* rope_scaling.factor */
    int original_seq_len;      /* rope_scaling.original_max_position_embeddings */
    double beta_fast;          /* rope_scaling.beta_fast */
    double beta_slow;          /* rope_scaling.beta_slow */
    long long max_position;    /* max_position_embeddings */
    int bos_id;                /* bos_token_id */
    int eos_id;                /* eos_token_id */
    int expert_fp4;            /* expert_dtype == "fp4" (1) or FP8 experts (0) */
} v4_config;

/* Parse and validate DIR/config.json (path = the file itself). */
int v4_config_load(const char *path, v4_config *cfg, v4_error *err);
/* Parse from a JSON text (used by tests and mkmodel); where names the source. */
int v4_config_parse(const char *json_text, const char *where, v4_config *cfg, v4_error *err);
/* Re-check the invariants of an already filled struct (used after parse and by mkmodel). */
int v4_config_validate(const v4_config *cfg, const char *where, v4_error *err);
/* Write cfg as a Hugging Face config.json text; returns a malloc'd string (caller frees). */
char *v4_config_to_json(const v4_config *cfg);

/* Derived helpers. */
static inline int v4_layer_is_csa(const v4_config *c, int l) { return c->compress_ratios[l] == 4; }
static inline int v4_layer_is_hca(const v4_config *c, int l) { return c->compress_ratios[l] != 0 && c->compress_ratios[l] != 4; }
static inline int v4_layer_is_hash(const v4_config *c, int l) { return l < c->n_hash_layers; }

#endif
