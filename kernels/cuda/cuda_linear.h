/* cuda_linear.h - internal: the launchers of the CUDA linear kernels (cuda_linear.cu),
 * called by cuda_backend.cu, cuda_step.cu and cuda_moe.cu (and by bench/bench_cuda_linear.c
 * to time the kernels alone).  C-compatible (CUDA runtime API types only); not part of the engine API.
 *
 * All pointers are device pointers; every launcher enqueues on `st` and returns the
 * launch's cudaError_t (cudaGetLastError after the launch).  Layout of the per-call
 * scratch, identical to the CPU backend's so that the kernels index it the same way:
 *   x   [n][K] floats (compact copy of the caller's rows)
 *   xq  [n][K] doubles, the e4m3 values of the quantized activations (tail columns
 *       K%128 zero)
 *   xs  [n*(K/128) + 1] floats, the per-128 scales, flat, last element 0
 *   y   [n][rows] floats
 * Thread: the backend's driving thread.
 */
#ifndef V4_CUDA_LINEAR_H
#define V4_CUDA_LINEAR_H

#include <cuda_runtime_api.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

cudaError_t v4cu_act_quant(const float *x, int n, int K, double *xq, float *xs, cudaStream_t st);
cudaError_t v4cu_quant_fp8(const uint8_t *w, const uint8_t *scale, int rows, int K, int n, const double *xq,
                           const float *xs, float *y, cudaStream_t st);
cudaError_t v4cu_quant_fp4(const uint8_t *w, const uint8_t *scale, int rows, int K, int n, const double *xq,
                           const float *xs, float *y, cudaStream_t st);
/* Grouped QUANT products of the MoE (cuda_moe.cu): for every pair slot s < npairs with
 * tile[s] > 0, the tile[s] (<= nbt, 1 or 4) rows s.. of xq/xs times expert eid[s]'s
 * matrix (wtab[eid[s]], stab[eid[s]]: FP4 if fp4, else FP8, rows x K) into rows s.. of
 * y [npairs][rows]; the same per-row arithmetic as v4cu_quant_fp8/fp4, one launch. */
cudaError_t v4cu_quant_grouped(int fp4, int nbt, const uint8_t *const *wtab, const uint8_t *const *stab,
                               const int32_t *eid, const int32_t *tile, int rows, int K, int npairs,
                               const double *xq, const float *xs, float *y, cudaStream_t st);
/* type: 1 FP8 (dequantized to bf16, backend.h), 3 BF16, 4 F32 (v4_wtype values);
 * r8: 1 for the V4_LAYOUT_R8 layout. */
cudaError_t v4cu_exact(int type, int r8, const void *w, const uint8_t *scale, int rows, int K, int n,
                       const float *x, float *y, cudaStream_t st);

#ifdef __cplusplus
}
#endif

#endif
