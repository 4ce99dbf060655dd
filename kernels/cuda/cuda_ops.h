/* cuda_ops.h - the element-wise kernels of the V4 decode path on the GPU (cuda_ops.cu):
 * the device counterparts of kernels/v4/ops.h and of the per-row pieces of mHC and the
 * MoE, for the device-resident decode step (issue 6).  C-compatible launchers.
 *
 * Every kernel follows the CPU function named next to it rounding for rounding (the
 * same f32 steps, double where the reference uses double), so results are bit-identical
 * with one documented exception: the RMS reductions (rmsnorm, rms_scale) sum x^2 in
 * double in a tree instead of left to right, which is the same value whenever the sum
 * is exact in double (bf16 inputs whose magnitudes span at most ~12 binades at dim 4096),
 * and otherwise differs by at most an ulp of the double sum before the f32 rounding.
 * Transcendentals (exp, log1p, sqrt, cos, sin) use CUDA's double functions (<= 2 ulp
 * in double) before the rounding to f32: a different f32 result needs a double result
 * within 2 ulp of an f32 rounding boundary (probability ~2^-28 per call).
 *
 * Layout: n rows (sequences) of a batch, each array row-major with the leading
 * dimension named (ld*) or implied (dim, hc*dim, ...).  All pointers are device
 * pointers; every launcher enqueues on st and returns cudaGetLastError().
 * Ownership: kernels read/write only the arrays passed.  Thread: the caller's.
 */
#ifndef V4_CUDA_OPS_H
#define V4_CUDA_OPS_H

#include <cuda_runtime_api.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* X[b][j][i] = bf16 embed[tokens[b]][i] for j < hc (forward.c). */
cudaError_t v4cu_embed(const uint16_t *embed, const int32_t *tokens, int n, int dim, int hc, float *X,
                       cudaStream_t st);
/* v4_rmsnorm per row: y[b*ldy+i] = bf16(w[i] * f32(x[b*ldx+i] * r_b)); y may equal x. */
cudaError_t v4cu_rmsnorm(const float *x, int ldx, const float *w, int dim, float eps, float *y, int ldy, int n,
                         cudaStream_t st);
/* mhc.c hc_mixes' scaling: mixes[b*mix+m] *= v4_rms_factor(X[b], hd, eps). */
cudaError_t v4cu_rms_scale(const float *X, int hd, float eps, float *mixes, int mix, int n, cudaStream_t st);
/* v4_hc_weights per row (hc <= 16): mixes [n][(2+hc)*hc] -> pre/post [n][hc], comb [n][hc*hc]. */
cudaError_t v4cu_hc_weights(const float *mixes, const float *scale, const float *base, int hc, int iters, float eps,
                            float *pre, float *post, float *comb, int n, cudaStream_t st);
/* v4_hc_reduce per row: X [n][hc][dim], pre [n][hc] -> u [n][dim]. */
cudaError_t v4cu_hc_reduce(const float *X, const float *pre, int hc, int dim, float *u, int n, cudaStream_t st);
/* v4_hc_post_row per row: X [n][hc][dim] in place, out [n][dim]. */
cudaError_t v4cu_hc_post(float *X, const float *out, const float *post, const float *comb, int hc, int dim, int n,
                         cudaStream_t st);
/* v4_rope on nvec vectors v + k*stride (npairs pairs each), vector k at position
 * pos[k / vpp] (vpp vectors per row, e.g. heads); inverse rotates back. */
cudaError_t v4cu_rope(float *v, int nvec, int stride, int npairs, const float *freqs, const int32_t *pos, int vpp,
                      int inverse, cudaStream_t st);
/* v4_hadamard on nvec vectors v + k*stride of n (a power of two <= 1024) values. */
cudaError_t v4cu_hadamard(float *v, int nvec, int stride, int n, cudaStream_t st);
/* v4_fp8_sim (fp4 = 0) / v4_fp4_sim (fp4 = 1) on nvec vectors v + k*stride of n values
 * in blocks of `block` (n a multiple of block). */
cudaError_t v4cu_block_qdq(float *v, int nvec, int stride, int n, int block, int fp4, cudaStream_t st);
/* v4_moe_route per row: z [n][E] gate logits (become the scores), bias [E], hash:
 * tid2eid [vocab][K] with tokens [n] (NULL: top-K of score + bias) -> sel/wt [n][K]. */
cudaError_t v4cu_route(float *z, int E, int K, const float *bias, const int32_t *tid2eid, const int32_t *tokens,
                       float route_scale, int32_t *sel, float *wt, int n, cudaStream_t st);
/* v4_swiglu per row: g, u, h [n][I]; wt [n] or NULL. */
cudaError_t v4cu_swiglu(const float *g, const float *u, int I, float lim, const float *wt, float *h, int n,
                        cudaStream_t st);

/* The same with one position pos for every vector. */
cudaError_t v4cu_rope_at(float *v, int nvec, int stride, int npairs, const float *freqs, int pos, int inverse,
                         cudaStream_t st);

/* Glue of the device step: y = a + b (f32); x = bf16(x); y = bf16(a + b);
 * y[rows[r]][:] += o[r][:] for r = 0..m-1 in order; hc_head's pre weights
 * (v4_hc_weights' pre formula on mixes [n][mix]); cand[i] = base + sel[i]*stride (bf16
 * rows). */
cudaError_t v4cu_add(const float *a, const float *b, float *y, long n, cudaStream_t st);
cudaError_t v4cu_round_bf16(float *x, long n, cudaStream_t st);
cudaError_t v4cu_add_bf16(const float *a, const float *b, float *y, long n, cudaStream_t st);
cudaError_t v4cu_scatter_add(float *y, int dim, const float *o, const int32_t *rows, int m, cudaStream_t st);
cudaError_t v4cu_hc_head_pre(const float *mixes, int mix, const float *scale, const float *base, int hc, float eps,
                             float *pre, int n, cudaStream_t st);
/* cand[i] = the address of entry sel[i] (i < k) of a paged cache: entry j is
 * pages[j >> shift] + (j & (2^shift - 1)) * stride (pages: a device array of device
 * pointers; 0 <= shift <= 30). */
cudaError_t v4cu_cand_from_sel(const uint16_t **cand, const uint16_t *const *pages, int shift, int stride,
                               const int32_t *sel, int k, cudaStream_t st);
/* y[i] = the bits of bf16(x[i]) (v4_bf16_bits; exact for values already bf16, as the
 * sequence caches' are) for i < n. */
cudaError_t v4cu_bf16_bits(const float *x, uint16_t *y, long n, cudaStream_t st);

#ifdef __cplusplus
}
#endif

#endif
