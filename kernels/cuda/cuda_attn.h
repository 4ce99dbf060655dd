/* cuda_attn.h - the attention-path kernels of the decode step on the GPU
 * (cuda_attn.cu): per-head RMS in BF16 arithmetic, the sparse softmax with sink over
 * candidate keys, the compressor's gated pooling, the lightning indexer's scores and
 * its top-k.  Device counterparts of the functions of kernels/v4/ops.h they name.
 *
 * Exactness: every per-element sum that the reference does left to right in double
 * (dot products, the attention's value accumulation, the pooling, the indexer's head
 * sum, the softmax sums) is done left to right by one thread here, so results are
 * bit-identical (the indexer's key rows and the attention's candidate rows are first
 * staged in shared memory with coalesced reads; the sums stay per thread, in order); only the head-RMS sum of bf16 squares is a tree (exact in double for
 * realistic heads: 512 bf16 squares spanning < 36 binades).  The top-k returns exactly
 * v4_topk's list (score desc, ties to the lower index, -0 == +0, and v4_topk's
 * placement of NaN scores, see cuda_attn.cu) by a one-block radix select: O(n) work,
 * at most 6 sweeps over the n scores, one launch; for min(k, n) > 4096 (no model) it falls
 * back to ranking every score against all others, O(n * k), exact for NaN-free scores.
 * The attention's candidate rows and the indexer's keys are bf16 (uint16_t bits, the
 * sequence caches' precision), converted to float on load (exact), so the sums are
 * those of the float rows holding the same values.
 * All pointers are device pointers (candidate lists hold device pointers); launchers
 * enqueue on st and return cudaGetLastError().
 * Ownership: kernels touch only their arguments.  Thread: the caller's.
 */
#ifndef V4_CUDA_ATTN_H
#define V4_CUDA_ATTN_H

#include <cuda_runtime_api.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* v4_head_rms_bf16 on nvec vectors q + k*hd. */
cudaError_t v4cu_head_rms_bf16(float *q, int nvec, int hd, float eps, cudaStream_t st);
/* v4_sparse_attn_head_bf16 for n rows x H heads: q/o [n][H][hd] (hd <= 1024), bf16
 * candidate rows (uint16_t bits [hd]) of row b: cand[b*lmax .. b*lmax + len[b]) (NULL =
 * masked), sink [H]. */
cudaError_t v4cu_sparse_attn(const float *q, const uint16_t *const *cand, const int32_t *len, int lmax, int n, int H,
                             int hd, float scale, const float *sink, float *o, cudaStream_t st);
/* v4_comp_pool: state kv/sc [rows][W] -> e[d] (nrows = (overlap ? 2 : 1) * r <= 512). */
cudaError_t v4cu_comp_pool(const float *kv, const float *sc, int W, int r, int d, int overlap, float *e,
                           cudaStream_t st);
/* v4_index_head_weights + v4_index_scores_ref_bf16 of one sequence: q [ih][id], bf16
 * keys (uint16_t bits [id] each) in pages of 2^shift keys (key j at pages[j >> shift] +
 * (j & (2^shift - 1)) * id; pages: a device array of device pointers, 0 <= shift <= 30;
 * one page of 2^30 for contiguous keys), iw [ih] (ih <= 1024) -> score [n]. */
cudaError_t v4cu_index_scores(const float *q, const uint16_t *const *pages, int shift, int n, const float *iw, int ih,
                              int id, float *score, cudaStream_t st);
/* v4_topk of score[0..n) -> sel[0..min(k, n)) (one block of 1024 threads). */
cudaError_t v4cu_topk(const float *score, int n, int k, int32_t *sel, cudaStream_t st);

#ifdef __cplusplus
}
#endif

#endif
