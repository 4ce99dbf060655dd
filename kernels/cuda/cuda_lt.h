/* cuda_lt.h - internal: the fast numerics mode's products on tensor cores through
 * cuBLASLt (cuda_lt.cu), used by the hybrid backend (cuda_backend.cu) and the resident
 * step (cuda_step.cu).  C-compatible; not part of the engine API.
 *
 * Products (all device pointers; y [n][rows] compact, x [n][K] with stride ldx):
 *   v4cu_lt_quant: V4_LIN_QUANT with an FP8 weight (block-scaled FP8 GEMM, weight
 *       scales BLK128x128, activation scales VEC128) or an FP4 weight (converted to
 *       e4m3 with VEC128 weight scales per call, W4A8: cuda_fast.h), y = bf16(result).
 *   v4cu_lt_bf16: V4_LIN_BF16 on a bf16 row-major weight (hi/lo split activations, one
 *       BF16 GEMM with FP32 accumulation).
 * Both return 0 when done, 1 when the shape does not suit the tensor-core path
 * (K % 128 for QUANT, K % 8 for BF16, rows % 16, an operand below 16-byte alignment, or
 * the self-test failed: the caller then runs the exact kernel, which is always allowed),
 * and -1 on a CUDA/cuBLAS failure (message in v4cu_lt_error).
 *
 * Operand alignment (cuda_lt_policy.h): cuBLASLt's heuristic is told each operand's real
 * alignment (CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_{A,B,C,D}_BYTES, from the address and the
 * column stride, 16..256 bytes; the preferences default to 256) and the plans are keyed on
 * those values too, so an algorithm picked for 256-byte operands never runs on a weight
 * row view or an expert-slot part aligned to less.  The block scales' pointers
 * (CUBLASLT_MATMUL_DESC_A/B_SCALE_POINTER) are on the descriptor before the heuristic is
 * asked, as cuBLASLt's block-scaled FP8 sample does (a NULL scale pointer means "scale 1",
 * i.e. another problem than the one run).
 *
 * Numerics: cuBLASLt with CUBLAS_COMPUTE_32F, fast accumulation off (FP8: FP32
 * promotion per 128-block, as DeepGEMM), FP32 output.  Determinism and batch
 * invariance: one algorithm per (kind, rows, K, operand alignments), chosen once by
 * the heuristic for a fixed reference width (64 columns) with split-K and every
 * reduction scheme excluded, and used for every width n.  Without a K split an output
 * element's reduction order should be the kernel's fixed one whatever the width; cuBLASLt does
 * not promise it, so tests/test_cuda_fast.c checks it on a GPU (a row alone against the
 * same row in batches of 5, 8 and 64).  A width the pinned algorithm refuses gets the
 * heuristic's choice for that width (counted in v4cu_lt_stats: `fallbacks`; nonzero
 * means batch invariance is not guaranteed).
 *
 * Self-test (v4cu_lt_create): one FP8, one FP4 and one BF16 product of random
 * matrices through this path against the exact kernels of cuda_linear.cu on the same
 * device, held to calc_diff <= 1e-5 with identical non-finite positions; a failure
 * turns the tensor-core path off (every call answers 1) and says on stderr which product
 * ("fp8 block-scaled", "fp4 w4a8", "bf16") failed with which cuBLAS / CUDA status, so a
 * layout or library fault can never silently change results.  The same verdict comes
 * back as a v4_fast_selftest (cuda_lt_policy.h) for the worker's log and /metrics.  The
 * test's inputs are copied on st itself (the backend's stream is non-blocking: it does
 * not wait for the legacy default stream of a plain cudaMemcpy).
 *
 * What is verified how: the kernels of cuda_fast.h run under the CPU emulation
 * (test_cuda_fast_emulated) against C references; the cuBLASLt calls, the scale
 * layouts as cuBLASLt reads them and the self-test need a GPU (test_cuda_linear and
 * scripts/device-check.sh's numerics-check --device cuda).
 *
 * Ownership: v4cu_lt_create returns an object the caller frees with v4cu_lt_free; it
 * owns the cuBLASLt handle, workspace, plans and scratch (grown on demand).
 * Thread: one thread at a time (the device must be current: cudaSetDevice).
 */
#ifndef V4_CUDA_LT_H
#define V4_CUDA_LT_H

#include <cuda_runtime_api.h>
#include <stddef.h>
#include <stdint.h>

#include "cuda_lt_policy.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct v4cu_lt v4cu_lt;

/* NULL when cuBLASLt cannot start (verdict: V4_FAST_UNAVAILABLE, product "setup", the
 * status and the reason in detail).  Otherwise the self-test runs on st and *verdict gets
 * V4_FAST_PASSED, or V4_FAST_FAILED with the product, status and reason (also on stderr,
 * and in v4cu_lt_error; v4cu_lt_ok says 0).  verdict must not be NULL.
 * V4_CUDA_SYNC_DEBUG=1 (read here, kept in the context; cu_debug.h): every kernel and
 * GEMM of a product is followed by a wait for its stream, and a fault names the kernel
 * in v4cu_lt_error. */
v4cu_lt *v4cu_lt_create(cudaStream_t st, v4_fast_selftest *verdict);
void v4cu_lt_free(v4cu_lt *lt);
/* 1 when the tensor-core path passed its self-test, else 0 (why: v4cu_lt_error). */
int v4cu_lt_ok(const v4cu_lt *lt);
const char *v4cu_lt_error(const v4cu_lt *lt);

/* type: 1 FP8, 2 FP4 (v4_wtype values). */
int v4cu_lt_quant(v4cu_lt *lt, int type, const uint8_t *w, const uint8_t *scale, int rows, int K, int n,
                  const float *x, int ldx, float *y, cudaStream_t st);
int v4cu_lt_bf16(v4cu_lt *lt, const uint16_t *wb, int rows, int K, int n, const float *x, int ldx, float *y,
                 cudaStream_t st);

typedef struct v4cu_lt_stats {
    uint64_t gemms;         /* tensor-core products run */
    uint64_t fallbacks;     /* products whose width the pinned algorithm refused */
    uint64_t declined;      /* calls answered 1 (exact kernel instead) */
    uint64_t misaligned;    /* of those, declined for an operand below 16-byte alignment */
    int plans;              /* pinned (kind, rows, K, alignments) algorithms */
} v4cu_lt_stats;
void v4cu_lt_get_stats(const v4cu_lt *lt, v4cu_lt_stats *st);

#ifdef __cplusplus
}
#endif

#endif
