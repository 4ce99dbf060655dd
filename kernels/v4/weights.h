/* weights.h - the V4 weights as the decode path sees them.
 *
 * Matrices are v4_mat views that borrow bytes (normally the checkpoint's read-only
 * mmap).  Small vectors (norm weights, mHC bases/scales, attention sinks, compressor
 * position biases, router bias) are held as aligned float copies because they are
 * tiny and safetensors gives no alignment guarantee; routing tables as int32.
 * Who fills them: cache/bind_weights.c (from a checkpoint).  kernels/v4 only reads.
 *
 * Ownership: v4_weights owns the float/int copies and the per-layer expert arrays
 * (freed by v4_weights_free); it borrows every v4_mat's bytes, which must outlive it.
 * Thread: read-only after binding; share freely.
 */
#ifndef V4_WEIGHTS_H
#define V4_WEIGHTS_H

#include <stdint.h>

#include "../../config/model_config.h"
#include "../backend.h"

typedef struct v4_compressor_w {
    int ratio;              /* 4 (overlapping, CSA) or >= 2 (HCA) */
    int dim;                /* width d of one compressed entry */
    int overlap;            /* ratio == 4 */
    const float *ape;       /* [ratio][c*d], c = 1 + overlap */
    v4_mat wkv, wgate;      /* [c*d][model dim], BF16, used in f32 */
    const float *norm;      /* [d] */
} v4_compressor_w;

typedef struct v4_expert_w {
    v4_mat w1, w3;          /* [inter][dim] gate and up projections */
    v4_mat w2;              /* [dim][inter] down projection */
} v4_expert_w;

typedef struct v4_layer_w {
    int ratio;                       /* compress ratio: 0, 4 (CSA), other (HCA) */
    /* mHC (hyper-connections) around attention and around the MoE */
    v4_mat hc_attn_fn, hc_ffn_fn;    /* F32 [(2+hc)*hc][hc*dim] */
    const float *hc_attn_base, *hc_ffn_base;    /* [(2+hc)*hc] */
    const float *hc_attn_scale, *hc_ffn_scale;  /* [3] */
    const float *attn_norm, *ffn_norm;          /* [dim] */
    /* attention */
    v4_mat wq_a, wq_b, wkv, wo_a, wo_b;
    const float *q_norm, *kv_norm;   /* [q_lora], [head_dim] */
    const float *attn_sink;          /* [n_heads] */
    v4_compressor_w comp;            /* ratio != 0 */
    /* lightning indexer (ratio 4) */
    v4_mat idx_wq_b;                 /* FP8 [idx_heads*idx_dim][q_lora] */
    v4_mat idx_weights_proj;         /* BF16 [idx_heads][dim] */
    v4_compressor_w idx_comp;
    /* MoE */
    v4_mat gate;                     /* BF16 [n_routed][dim] */
    const float *gate_bias;          /* [n_routed] (learned-routing layers) */
    const int32_t *tid2eid;          /* [vocab][n_act] (hash layers) */
    v4_expert_w shared;
    v4_expert_w *experts;            /* [n_routed] */
} v4_layer_w;

typedef struct v4_weights {
    v4_config cfg;
    v4_mat embed;                    /* BF16 [vocab][dim] */
    v4_mat head;                     /* BF16 [vocab][dim] */
    const float *norm;               /* [dim] */
    v4_mat hc_head_fn;               /* F32 [hc][hc*dim] */
    const float *hc_head_base;       /* [hc] */
    const float *hc_head_scale;      /* [1] */
    v4_layer_w *layers;              /* [n_layers] */
    /* owned allocations (freed by v4_weights_free) */
    void **owned;
    int n_owned, cap_owned;
} v4_weights;

void v4_weights_free(v4_weights *w);

/* Byte accounting (for benchmarks and the expert cache): bytes of one matrix as
 * stored (weights + scales), of one expert (w1 + w3 + w2), and of the weights every
 * decode step reads regardless of routing (all matrices except the routed experts
 * and the embedding table, plus one embedding row). */
uint64_t v4_mat_bytes(const v4_mat *m);
uint64_t v4_expert_bytes(const v4_expert_w *e);
uint64_t v4_step_trunk_bytes(const v4_weights *w);

#endif
