/* cuda_moe.h - the routed experts of a MoE layer without a host round trip (issue 6),
 * for the device-resident step (cuda_step.cu), its experts resident or paged (the
 * pointer table tab is then the layer's slot table; entries of experts without rows are
 * never read, the step leaves them NULL):
 * the per-expert row lists are built on the device from the route ids, the experts'
 * products run as one grouped launch per matrix (w1, w3, w2) over all (expert, row)
 * pairs, and the combination sums each token's experts in ascending expert id.
 * Results are bit-identical to the host-driven path (moe.c's order):
 *   - pairs are sorted by expert id, then row b, then k (the host loop's order), so
 *     each expert's rows form one contiguous run, cut into tiles of up to nbt rows
 *     that the grouped kernels compute exactly as the plain kernels compute a chunk;
 *   - activations are quantized per row (act_quant is row-independent), SwiGLU is
 *     per pair with the pair's route weight, as per expert before;
 *   - the combination starts each output row at +0 and adds its pairs in ascending
 *     slot order (= ascending expert id, then k), then out = bf16(y + shared), the
 *     f32 steps of v4cu_scatter_add (experts in ascending id) and v4cu_add_bf16.
 * Limits: n*K <= V4CU_MOE_MAX_PAIRS, E <= V4CU_MOE_MAX_EXPERTS (the caller falls back
 * to the host path beyond).  Route ids outside [0, E) are dropped, as the host loop
 * (which never matches them) drops them.
 *
 * Layout (all device pointers; P = n*K pair slots):
 *   rows/wt/eid/tile [P]  sorted pairs: token row, route weight, expert id, and at the
 *                         first pair of each tile its size (else 0; slots past the
 *                         last pair: tile 0, row -1);
 *   comb [n][K]           row b's slots in ascending (expert id, k) order, -1 padded;
 *   start [E+1]           first slot of each expert (start[E] = the pair count);
 *   active [E], nact [1]  the experts with rows, ascending, and their count.
 * Ownership: the caller owns every buffer (v4cu_moe_bufs); nothing is allocated here.
 * Thread: the launching thread (kernels enqueued on st, no synchronization).
 */
#ifndef V4_CUDA_MOE_H
#define V4_CUDA_MOE_H

#ifndef V4CU_HOST_EMULATION
#include <cuda_runtime_api.h>
#endif
#include <stdint.h>

#define V4CU_MOE_MAX_PAIRS 4096
#define V4CU_MOE_MAX_EXPERTS 1024

#ifdef __cplusplus
extern "C" {
#endif

/* Scratch of the grouped path, sized for P = max_batch*K pairs, dim d, moe_inter I. */
typedef struct v4cu_moe_bufs {
    int32_t *rows, *eid, *tile, *comb, *start, *active, *nact;
    float *wt;
    float *gx, *gg, *gu, *gh, *go;   /* [P][d] in, [P][I] w1 / w3 / swiglu, [P][d] out */
    double *xq;                      /* [P][max(d, I)] */
    float *xs;                       /* [P*(max(d, I)/128) + 1] */
    uint16_t *xb;                    /* [P][max(d, I)] bf16 (tensor-core path only) */
    int32_t *tl;                     /* [v4cu_mma_tile_bound(P, E)] (tensor-core path only) */
} v4cu_moe_bufs;

/* The sorted pairs and lists above from ids/w [n][K] (one block). nbt: tile size, 1, 4
 * or 16 (V4CU_MMA_ROWS, the tensor-core path's: then also B->tl, the tiles' first slots
 * ascending, -1 padded to v4cu_mma_tile_bound(n*K, E)). */
cudaError_t v4cu_moe_lists(const int32_t *ids, const float *w, int n, int K, int E, int nbt, const v4cu_moe_bufs *B,
                           cudaStream_t st);
/* The routed experts of a layer: lists, gather of x [n][d] into gx, w1/w3 (grouped),
 * SwiGLU (limit lim, route weights), w2 (grouped) into go [P][d].  tab [6][E]: the
 * layer's w1.w, w1.scale, w3.w, w3.scale, w2.w, w2.scale pointers by expert id (FP4
 * if fp4, else FP8; w1/w3 I x d, w2 d x I). */
cudaError_t v4cu_moe_routed(const v4cu_moe_bufs *B, const uint8_t *const *tab, int fp4, int E, int d, int I,
                            float lim, const int32_t *ids, const float *w, const float *x, int n, int K,
                            cudaStream_t st);
/* The same routed experts with the products on the tensor cores (cuda_mma.h; the fast
 * mode's steps of many rows per expert): tiles of up to V4CU_MMA_ROWS pairs, the
 * activations dequantized to bf16 (xb, tl in B), one WMMA launch per matrix; lists,
 * gather, quantization and SwiGLU as above.  Within the fast contract, not bit-exact. */
cudaError_t v4cu_moe_routed_mma(const v4cu_moe_bufs *B, const uint8_t *const *tab, int fp4, int E, int d, int I,
                                float lim, const int32_t *ids, const float *w, const float *x, int n, int K,
                                cudaStream_t st);
/* out[r] = x[rows[r]] for r < m, rows of d floats (a row id < 0 gives zeros): the
 * gather of one expert's rows for the host-driven path. */
cudaError_t v4cu_gather_rows(const float *x, int d, const int32_t *rows, int m, float *out, cudaStream_t st);
/* out[b] = bf16((+0 + go[comb[b][0]] + go[comb[b][1]] + ...) + shared[b]) for b < n. */
cudaError_t v4cu_moe_combine(const float *go, int d, const int32_t *comb, int n, int K, const float *shared,
                             float *out, cudaStream_t st);

#ifdef __cplusplus
}
#endif

#endif
