/* cuda_internal.h - internal: what cuda_backend.cu and gpu_experts.cu share (C++ only,
 * not part of the engine API).
 *
 * The backend owns at most one GPU expert cache (v4cu_tier); it asks it for the ready
 * event of a device matrix and frees it at destroy, through the v4cu_tier_ops the
 * cache gave it.  The cache uses
 * the backend's device and compute stream.
 * Thread: the backend's driving thread.
 */
#ifndef V4_CUDA_INTERNAL_H
#define V4_CUDA_INTERNAL_H

#include <cuda_runtime_api.h>
#include <stddef.h>

#include "../backend.h"

struct v4cu_tier;

/* The backend's pieces (be must be a CUDA backend: v4cu_is_cuda). */
int v4cu_is_cuda(const v4_backend *be);
int v4cu_device(const v4_backend *be);
cudaStream_t v4cu_stream(const v4_backend *be);
v4cu_tier **v4cu_tier_of(v4_backend *be);
const v4cu_tier *v4cu_tier_of_const(const v4_backend *be);

/* What the backend calls on its GPU expert cache.  The cache hands these to the
 * backend when it attaches (v4cu_tier_ops_set), so gpu_experts.cu calls into
 * cuda_backend.cu and never the other way round.
 *   ready: the event a device matrix W waits for before its bytes may be read: 0 with
 *          *ev set (the slot's last copy) when W's weight and scale lie in one slot of
 *          the cache's pool, -1 when they do not (not a matrix of this cache);
 *   free:  wait for the cache's copies and free everything it holds. */
typedef struct v4cu_tier_ops {
    int (*ready)(const v4cu_tier *t, const v4_mat *W, cudaEvent_t *ev);
    void (*free)(v4cu_tier *t);
} v4cu_tier_ops;
/* Set with the cache (*v4cu_tier_of(be)); ops is static (never freed). */
void v4cu_tier_ops_set(v4_backend *be, const v4cu_tier_ops *ops);

/* Bytes of W's weight array and of its scale grid (row-major or R8 as stored). */
size_t v4cu_wbytes(const v4_mat *W);
size_t v4cu_sbytes(const v4_mat *W);

#endif
