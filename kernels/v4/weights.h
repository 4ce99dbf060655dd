/* weights.h - the V4 weights as the decode path sees them.
 *
 * Matrices are v4_mat views that borrow bytes (normally the checkpoint's read-only
 * mmap).  Small vectors (norm weights, mHC bases/scales, attention sinks, compressor
 * position biases, router bias) are held as aligned float copies because they are
 * tiny and safetensors gives no alignment guarantee; routing tables as int32.
 * Who fills them: cache/bind_weights.c (from a checkpoint).  kernels/v4 only reads.
 *
 * Prepared layout: v4_weights_prepare (called by v4_model_open unless disabled)
 * replaces the matrices the decode path multiplies in V4_LIN_EXACT mode with
 * row-interleaved copies (V4_LAYOUT_R8, backend.h), so that the SIMD kernels can keep
 * the scalar summation order without transposing tiles on the fly: head, hc_head_fn,
 * and per layer hc_attn_fn, hc_ffn_fn, wo_a (FP8 bytes interleaved, scale grid
 * unchanged), gate, comp.wkv/wgate, idx_weights_proj, idx_comp.wkv/wgate.  The
 * results are bit-identical with either layout.
 *
 * Ownership: v4_weights owns the float/int copies, the prepared R8 copies and the
 * per-layer expert arrays (all freed by v4_weights_free); it borrows every other
 * v4_mat's bytes (the checkpoint's mmap), which must outlive it.  Preparing leaves the
 * mapped originals untouched (their pages are not read again by the decode path).
 * Thread: read-only after binding/preparing; share freely.
 */
#ifndef V4_WEIGHTS_H
#define V4_WEIGHTS_H

#include <stddef.h>
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

/* Repack every EXACT-mode matrix listed above into an owned R8 copy (a matrix already
 * in R8 is left alone; wo_a stays row-major if o_lora_rank % 8 != 0, since attention
 * takes row views of it at multiples of o_lora_rank).  Runs on one thread per online
 * core; prints nothing.  On failure (out of memory) every matrix keeps its previous
 * layout and err says why; the weights stay usable.  Call before sharing w. */
int v4_weights_prepare(v4_weights *w, v4_error *err);

/* R8 packing of a row-major BF16/F32/FP8 matrix: bytes of the R8 copy (rows padded to
 * a multiple of 8), and the packing of groups [g0, g1) of src into dst (an R8 buffer
 * of v4_mat_r8_bytes(src) bytes; padding rows are written as zero).  Thread: disjoint
 * group ranges may be packed concurrently. */
size_t v4_mat_r8_bytes(const v4_mat *src);
void v4_mat_pack_r8(const v4_mat *src, void *dst, int g0, int g1);

/* Byte accounting (for benchmarks and the expert cache): bytes of one matrix as
 * stored (weights + scales; R8 counts its padding rows), of one expert (w1 + w3 + w2), and of the weights every
 * decode step reads regardless of routing (all matrices except the routed experts
 * and the embedding table, plus one embedding row). */
uint64_t v4_mat_bytes(const v4_mat *m);
uint64_t v4_expert_bytes(const v4_expert_w *e);
uint64_t v4_step_trunk_bytes(const v4_weights *w);
/* Multiply-adds of one position's weight products: the trunk's (every matrix above but
 * the routed experts) and one routed expert's (rows * cols summed; attention over the
 * cached keys is not counted). */
uint64_t v4_step_trunk_macs(const v4_weights *w);
uint64_t v4_expert_macs(const v4_expert_w *e);

#endif
