/* cuda_fast.h - internal: the element-wise kernels of the fast numerics mode on the GPU
 * (cuda_fast.cu), which put activations and weights into the forms cuBLASLt's
 * tensor-core products read (cuda_lt.h) and turn its results back into the model's
 * values.  C-compatible (CUDA runtime API types only); not part of the engine API.
 *
 * The products they feed, per model product (kernels/backend.h):
 *   V4_LIN_QUANT, FP8 weight: W e4m3 [rows][K] with its E8M0 128x128 grid turned into
 *       float scales (BLK128x128, K-major, stride L4 = L rounded up to 4, L = K/128),
 *       times x quantized exactly as the model does (per 128 columns amax, power-of-two
 *       scale, e4m3 round-to-nearest-even) with float scales per (row, 128 columns)
 *       (VEC128, N-major: qs[b * npad + j]); the float result rounded to bf16 as the
 *       model's QUANT output is.
 *   V4_LIN_QUANT, FP4 weight (W4A8): each row's 128-column block of e2m1 values and its
 *       four 32-column E8M0 scales becomes e4m3 values with one float scale per (row,
 *       128 columns) (VEC128, M-major: s8[b * rows + r]): the block scale is
 *       2^(Emax - 6) for the block's largest exponent Emax, and an element of a
 *       32-column part with exponent E is e2m1 * 2^(6 - (Emax - E)), which e4m3 holds
 *       exactly while Emax - E <= 14 (smaller elements round; below 2^-10 of the
 *       block's largest possible value they flush to 0).  A NaN scale (0xff) makes the
 *       block scale NaN, as it makes the exact product NaN.
 *   V4_LIN_BF16: x split into bf16 hi = bf16(x) and lo = bf16(x - hi) (16 significant
 *       bits together; a non-finite x keeps lo = 0) as 2*npad columns of one BF16 GEMM;
 *       the result is hi-part + lo-part.  The weight is the bf16 the exact mode decodes
 *       (BF16 as stored; FP8 as bf16(f32(e4m3 * 2^(e8m0-127)))), row-major.
 * npad: the row count rounded up to a multiple of 4 (cuBLASLt's scale layouts need
 * it); padding rows are zero with scale 1.
 *
 * All pointers are device pointers; every launcher enqueues on `st` and returns the
 * launch's cudaError_t.  Thread: the caller's (the backend's or the engine's) thread.
 */
#ifndef V4_CUDA_FAST_H
#define V4_CUDA_FAST_H

#ifndef V4CU_HOST_EMULATION   /* the CPU emulation (simt_emu.h) brings its own types */
#include <cuda_runtime_api.h>
#endif
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Rows rounded up to a multiple of 4. */
static inline int v4cu_npad(int n) { return (n + 3) & ~3; }
/* 128-column blocks of K rounded up to a multiple of 4 (BLK128x128 scale stride). */
static inline int v4cu_l4(int K) { return ((K / 128) + 3) & ~3; }

/* x [n] rows of K floats (stride ldx, K % 128 == 0) -> q [npad][K] e4m3 bytes and
 * qs [K/128][npad] float scales. */
cudaError_t v4cu_fast_act_quant(const float *x, int ldx, int n, int npad, int K, uint8_t *q, float *qs,
                                cudaStream_t st);
/* E8M0 grid [ceil(rows/128)][K/128] -> float [ceil(rows/128)][L4] (pad entries 1). */
cudaError_t v4cu_fast_wscale(const uint8_t *e8, int rows, int K, float *out, cudaStream_t st);
/* FP4 matrix (e2m1 [rows][K/2], E8M0 [rows][K/32]) -> e4m3 [rows][K] + float [K/128][rows]. */
cudaError_t v4cu_fast_fp4_to_fp8(const uint8_t *w4, const uint8_t *s4, int rows, int K, uint8_t *w8, float *s8,
                                 cudaStream_t st);
/* x [n] rows (stride ldx) -> xb [2*npad][K] bf16 bits: rows j = hi(x_j), npad + j = lo(x_j). */
cudaError_t v4cu_fast_split_bf16(const float *x, int ldx, int n, int npad, int K, uint16_t *xb, cudaStream_t st);
/* The exact mode's bf16 weight, row-major: type 1 FP8 (with scale), 3 BF16; r8: the
 * V4_LAYOUT_R8 layout (backend.h) of the source. */
cudaError_t v4cu_fast_weight_bf16(int type, int r8, const void *w, const uint8_t *scale, int rows, int K,
                                  uint16_t *out, cudaStream_t st);
/* d [cols][rows] floats from a GEMM -> y [n][ldy]: mode 0 y = bf16(d[j]) (QUANT),
 * mode 1 y = d[j] + d[npad + j] (the hi and lo halves of a V4_LIN_BF16 product). */
cudaError_t v4cu_fast_finish(const float *d, int rows, int n, int npad, int mode, float *y, int ldy,
                             cudaStream_t st);

#ifdef __cplusplus
}
#endif

#endif
