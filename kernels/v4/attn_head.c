/* attn_head.c - the per-head math of the attention sub-layer (spec §5.3): the head
 * RMS in BF16 arithmetic and the sparse softmax with sink over a candidate list, as
 * pure functions (ops.h).
 *
 * v4_sparse_attn_head is the reference: one head, one double chain per q.k dot and per
 * acc element, latency-bound.  The CUDA kernels and tests/test_attn_fast.c are checked
 * against it.  v4_sparse_attn_heads (what attention.c calls) computes all heads of a
 * sequence with the same result bit for bit: heads go in groups of 8 whose queries are
 * transposed to [d][8] once, the q.k dots of a chunk's valid candidates run 8 heads per
 * SIMD vector (attn_kern.h dots8, each lane still sums d = 0, 1, .. from 0.0), the
 * softmax bookkeeping (rowmax, m, f, p, psum, l, the bf16 rounding of p) is the
 * reference's scalar code per head, and the acc update runs 8 d per vector for up to 8
 * heads at once (accum8, each lane still sums c = 0, 1, .. after f32(acc * f)).  acc
 * lives in the output rows until the final o = bf16(acc / l) (div_bf16, 8 at a time).
 * Stack: ~45 KiB in v4_sparse_attn_heads (q transposed for hd <= 1024, one chunk's
 * dots and probabilities).  Thread: any (pure). */
#include <math.h>
#include <string.h>

#include "attn_kern.h"
#include "ops.h"

void v4_head_rms_bf16(float *q, int n, float eps)
{
    double ss = 0.0;
    for (int i = 0; i < n; i++)
        ss += (double)v4_bf16(q[i] * q[i]);
    float ms = v4_bf16((float)ss / (float)n);
    float den = v4_bf16(ms + eps);
    float g = v4_bf16(v4_rsqrtf(den));
    for (int i = 0; i < n; i++)
        q[i] = v4_bf16(q[i] * g);
}

/* float candidate rows (the reference the CUDA kernels and tests use), then bf16 rows
 * (the sequence caches: what the engine calls) */
#define V4_AH_KT float
#define V4_AH_HEAD v4_sparse_attn_head
#define V4_AH_HEADS_K v4_sparse_attn_heads_k
#define V4_AH_DOTS dots8
#define V4_AH_ACCUM accum8
#define V4_AH_LD1(x) (x)
#include "attn_head_keys.h"
#define V4_AH_KT uint16_t
#define V4_AH_HEAD v4_sparse_attn_head_bf16
#define V4_AH_HEADS_K v4_sparse_attn_heads_bf16_k
#define V4_AH_DOTS dots8_bf16
#define V4_AH_ACCUM accum8_bf16
#define V4_AH_LD1(x) v4_bf16_from_bits(x)
#include "attn_head_keys.h"

void v4_sparse_attn_heads(const float *q, int H, const float *const *cand, int L, int hd, float scale,
                          const float *sinks, float *o)
{
    v4_sparse_attn_heads_k(v4_attn_kern_get(), q, H, cand, L, hd, scale, sinks, o);
}
