/* cuda_backend.h - create the CUDA implementation of the backend interface (C11 API).
 *
 * "Hybrid" mode, a first step of the GPU engine: only the weight products
 * (backend.h linear) run on the GPU; the rest of the decode path stays on the CPU.
 * Every linear call copies x host->device, runs the kernel, and copies y back
 * (stream-ordered on the backend's own stream, synchronous for the caller).
 *
 * Numerics: bit-identical to the scalar reference kernels/cpu/linear_scalar.c for
 * every mode/type/layout backend.h allows (QUANT FP8/FP4 row-major; EXACT BF16/F32/FP8
 * row-major or R8).  The only allowed difference is the sign/payload of a NaN output
 * (the GPU produces canonical NaNs; x86 propagates operand payloads): a NaN is a NaN.
 * Combinations the interface does not allow (R8 in QUANT mode, FP4 in R8, QUANT with a
 * BF16/F32 weight, EXACT with FP4) give NaN outputs.
 *
 * Weights: v4_mat.w / .scale are host pointers (the checkpoint's mmap or a repacked
 * copy).  The backend keeps a device copy of every weight range it has seen, keyed by
 * the host address range, uploaded on first use through a 16 MiB pinned staging
 * buffer; a row view (v4_mat_rows) inside an uploaded matrix reuses its copy.  Device
 * memory used = the bytes of every distinct weight matrix (and scale grid) ever passed
 * (v4_cuda_backend_weight_bytes), plus per-call scratch (x, quantized x, y: a few MiB).
 * The copies are bounded by a byte budget (v4_cuda_backend_set_weight_budget; the
 * engine sets V4_GPU_WEIGHT_MEM or the free memory less 1 GiB; 0 = unbounded, the
 * default of a bare backend): an upload that would exceed it, or whose cudaMalloc
 * fails, first evicts the least recently used copies not used by the current call,
 * one at a time (never the whole cache); when the current call's own weights do not
 * fit, the call fails (NaN outputs, not sticky) with a message naming the budget.  Every use of a cached copy first
 * compares a fingerprint of 32 words sampled across the host range with the one taken
 * at upload and re-uploads on a difference, so a host buffer refilled with other
 * weights (a paged-expert slot) is noticed in practice; this is a heuristic (a change
 * that leaves all 32 sampled words equal goes unseen), so a caller that frees or
 * rewrites weight memory should call v4_cuda_backend_drop_weights.
 *
 * Device matrices (backend.h V4_MAT_CUDA): the slots of this backend's GPU expert
 * cache (gpu_experts.h, attached with v4_gpu_experts_attach; the backend owns it).
 * linear uses their device pointers directly, with no host-keyed lookup, after making
 * its stream wait for the event of the copy that filled the slot; a device matrix that
 * is not in this backend's cache gives NaN outputs (reported, not sticky).  Routed
 * experts served that way never enter the host-keyed cache above.
 *
 * Failures: linear() has no error return.  A CUDA failure during a call (allocation,
 * copy, launch, or a fault found at the synchronization) fills that call's y rows with
 * NaN, prints one line on stderr (first failure only), and is kept as a sticky error
 * (v4_cuda_backend_status); after a launch/copy/sync failure every later call also
 * returns NaN (the CUDA context may be unusable).  An allocation failure of the
 * per-call scratch is reported the same way but is not sticky.
 * Sync debug mode (V4_CUDA_SYNC_DEBUG=1, read once at create and kept in the backend,
 * cu_debug.h): every kernel launch is followed by a wait for the stream, so a kernel's
 * fault is reported (status, stderr) under that kernel's name; slow, for debugging.
 *
 * Ownership: the caller owns the returned backend and frees it with
 * be->ops->destroy(be); that frees all device memory, the stream and staging buffer,
 * and the GPU expert cache if one is attached.
 * Thread: create/destroy and every call from one thread at a time (backend.h).
 */
#ifndef V4_CUDA_BACKEND_H
#define V4_CUDA_BACKEND_H

#include <stddef.h>

#include "../../config/error.h"
#include "../backend.h"
#include "cuda_lt_policy.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Number of usable CUDA devices; 0 when there is no device or no (compatible) driver,
 * with the reason in why (if non-NULL, size n). */
int v4_cuda_device_count(char *why, size_t n);
/* Backend on CUDA device `device` (0-based).  NULL + err (V4_ERR_INVALID with the
 * CUDA runtime's reason) when there is no such device or no driver. */
v4_backend *v4_cuda_backend_create(int device, v4_error *err);
/* The same with a numerics mode: fast != 0 runs V4_LIN_QUANT and V4_LIN_BF16 products
 * on tensor cores through cuBLASLt (cuda_lt.h: block-scaled FP8, W4A8 for FP4, BF16
 * with split activations), held to the fast mode's measured contract instead of the
 * bit-exact one above; V4_LIN_EXACT products and shapes the tensor-core path does not
 * take stay on the exact kernels.  When cuBLASLt does not start or its self-test
 * fails, one stderr line says why and the backend runs every product exactly
 * (v4_cuda_backend_fast says 0). */
v4_backend *v4_cuda_backend_create_ex(int device, int fast, v4_error *err);
/* 1 when the backend runs the fast mode's tensor-core products. */
int v4_cuda_backend_fast(const v4_backend *be);
/* The fast mode's start-up verdict (cuda_lt_policy.h): V4_FAST_NOT_RUN for an exact
 * backend, else passed, failed or unavailable with the product that failed, the cuBLAS /
 * CUDA status name and number and the reason.  Copied into *out (not NULL). */
void v4_cuda_backend_selftest(const v4_backend *be, v4_fast_selftest *out);
/* The backend's cuBLASLt context (struct v4cu_lt of cuda_lt.h, borrowed), NULL in the
 * exact mode: the resident step (cuda_step.h) runs its products through it. */
void *v4_cuda_backend_lt(const v4_backend *be);
/* 0 while no CUDA failure happened; otherwise -1 and the first failure in err. */
int v4_cuda_backend_status(const v4_backend *be, v4_error *err);
/* The device's name ("NVIDIA H200 ...") and bytes of weights held on the device. */
const char *v4_cuda_backend_device_name(const v4_backend *be);
size_t v4_cuda_backend_weight_bytes(const v4_backend *be);
/* Cached copies refreshed because their host bytes changed (see above). */
size_t v4_cuda_backend_reuploads(const v4_backend *be);
struct v4_cuda_engine;
/* The backend takes ownership of a device-resident step engine (cuda_step.h) and frees
 * it at destroy (before its own memory); a second call frees the previous one. */
void v4_cuda_backend_own_engine(v4_backend *be, struct v4_cuda_engine *e);
/* Device bytes held by the owned engine (0 without one). */
size_t v4_cuda_backend_engine_bytes(const v4_backend *be);
/* The owned engine (NULL without one), borrowed: valid until the backend is destroyed
 * or takes another engine. */
const struct v4_cuda_engine *v4_cuda_backend_engine(const v4_backend *be);
/* Free and total bytes of the backend's device (cudaMemGetInfo): 0, or -1. */
int v4_cuda_backend_mem_info(const v4_backend *be, size_t *free_b, size_t *total_b);
/* Forget (and free) every cached device copy of weights. */
void v4_cuda_backend_drop_weights(v4_backend *be);
/* The weight copies' byte budget (0 = unbounded); copies above a smaller new budget are
 * evicted at the next upload.  Evictions so far (v4_cuda_backend_weight_evictions). */
void v4_cuda_backend_set_weight_budget(v4_backend *be, size_t bytes);
size_t v4_cuda_backend_weight_evictions(const v4_backend *be);

#ifdef __cplusplus
}
#endif

#endif
