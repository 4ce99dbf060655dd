/* cuda_mma.h - internal: the fast numerics mode's grouped routed-expert products on the
 * tensor cores (cuda_mma.cu), for the resident step's MoE steps of many rows per expert
 * (prefill chunks; cuda_moe.h v4cu_moe_routed_mma drives them).  C-compatible; not part
 * of the engine API.
 *
 * Input: the sorted (expert, row) pairs of cuda_moe.h, their tiles of up to
 * V4CU_MMA_ROWS pairs of one expert (tile[s] > 0 at a tile's first slot), and the
 * activations quantized as the model does (act_quant: e4m3 values xq, power-of-two
 * scales xs per row and 128 columns).  One launch per matrix computes every tile
 * against its expert's weight (FP4 e2m1 with E8M0 scales per 32 columns, or FP8 e4m3
 * with an E8M0 grid per 128x128), read straight from the pointer table (resident or
 * paged slots alike): no host round trip, no per-expert launch, no W4A8 conversion in
 * memory.
 *
 * Numerics: a block dequantizes its weight tile in shared memory to bf16
 * (e2m1 * 2^s and e4m3 * 2^s have at most 4 significant bits: exact in bf16) and the
 * activations likewise (e4m3 * power-of-two scale: exact), so the tensor cores multiply
 * exactly the values the exact kernels multiply; only the sum differs (WMMA bf16
 * m16n16k16, FP32 accumulation over the whole row instead of exact 32/128-blocks in
 * double, then f32 block terms).  The output is rounded to bf16 as the model's QUANT
 * output.  Deterministic: a tile's sum is one block's fixed sequence of MMAs, and it
 * does not depend on the other tiles, so a row's output does not depend on which
 * other rows share its step except through its tile's membership (the tensor cores'
 * row-independent arithmetic makes even that immaterial on the GPU; checked there).
 * v4cu_mma_selftest holds the path to calc_diff <= 1e-5 against the exact kernels
 * (cuda_linear.h) with identical NaN positions; the resident step runs it once when the
 * fast mode starts and keeps the per-expert cuBLASLt path if it fails.
 *
 * Shapes: K % 128 == 0 (act_quant's), any row count (tiles of 64 outputs, masked).
 * All pointers are device pointers; launchers enqueue on st and return the launch's
 * cudaError_t.  Ownership: no allocation except v4cu_mma_selftest's own (freed).
 * Thread: the launching thread (the device current).
 */
#ifndef V4_CUDA_MMA_H
#define V4_CUDA_MMA_H

#ifndef V4CU_HOST_EMULATION
#include <cuda_runtime_api.h>
#endif
#include <stddef.h>
#include <stdint.h>

#define V4CU_MMA_ROWS 16   /* pairs per tile (the MMA's M) */

#ifdef __cplusplus
extern "C" {
#endif

/* An upper bound of the tiles of P pairs over at most E experts (the tile list's size):
 * sum over experts of ceil(m/16) <= (P + 15 * min(E, P)) / 16. */
static inline int v4cu_mma_tile_bound(int P, int E)
{
    const int a = E < P ? E : P;
    return (P + 15 * a + 15) / 16;
}

/* xb [P][K] bf16 bits = xq * xs (the dequantized activations; exact). */
cudaError_t v4cu_mma_act(const double *xq, const float *xs, int P, int K, uint16_t *xb, cudaStream_t st);
/* y [P][rows] for every tile of tl: y[s + i] = bf16(W_eid[s] . xb[s + i]) for i < tile[s]
 * (rows of other slots untouched).  tl: the tiles' first slots ascending, -1 padded to
 * its size ntl (v4cu_mma_tile_bound; cuda_moe.h's list builder writes it); wtab/stab:
 * the weight and scale pointers by expert id. */
cudaError_t v4cu_mma_grouped(int fp4, const uint8_t *const *wtab, const uint8_t *const *stab, const int32_t *eid,
                             const int32_t *tile, const int32_t *tl, int ntl, int rows, int K, const uint16_t *xb,
                             float *y, cudaStream_t st);
/* One FP4 and one FP8 grouped product of random matrices (two experts, tiles that
 * straddle 16 rows and a row count that is not a multiple of 64, NaN codes included)
 * through this path and the exact kernels on the same device: 1 passed (calc_diff
 * <= 1e-5 each, same NaN positions), 0 failed (why says how), -1 a CUDA failure (why). */
int v4cu_mma_selftest(cudaStream_t st, char *why, size_t nwhy);

#ifdef __cplusplus
}
#endif

#endif
