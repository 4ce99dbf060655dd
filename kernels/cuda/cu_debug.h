/* cu_debug.h - the sync debug mode of the CUDA code (V4_CUDA_SYNC_DEBUG=1): after every
 * kernel launch (and cuBLASLt product) the owner of the stream waits for it and checks
 * for an error, so an asynchronous fault (an illegal address, a trap) is reported with
 * the name of the kernel that caused it instead of at a later, unrelated synchronization.
 *
 * The mode is a property of a context, never global: the backend (cuda_backend.cu), the
 * device-resident step engine (cuda_step.cu) and the cuBLASLt context (cuda_lt.cu) each
 * call v4cu_sync_debug_env() once when they are created and keep the answer in a field;
 * their launch sites then pass their result through v4cu_sync_after().  The launchers
 * themselves (V4CU_LAUNCH in cu_launch.h, which take only a stream) stay unchanged: the
 * check happens right after the launcher returns, on the stream it was given, and the
 * caller names the launcher (the engine: the launcher's own name, taken from the call
 * text, plus its label; the backend and cuBLASLt: their kernel step names).
 * Costs: one stream synchronization per launch (a decode step becomes several times
 * slower): a debugging aid, off by default.
 *
 * CUDA builds include <cuda_runtime_api.h> here; the SIMT emulation (simt_emu.h, which
 * must come first) brings its own cudaStreamSynchronize / cudaGetLastError.
 * State: none (reads the environment when asked).  Thread: any.
 */
#ifndef V4_CU_DEBUG_H
#define V4_CU_DEBUG_H

#include <stdlib.h>
#include <string.h>
#ifndef V4CU_HOST_EMULATION
#include <cuda_runtime_api.h>
#endif

/* 1 when V4_CUDA_SYNC_DEBUG is set to anything but "" or "0". */
static inline int v4cu_sync_debug_env(void)
{
    const char *s = getenv("V4_CUDA_SYNC_DEBUG");
    return s && *s && strcmp(s, "0") != 0;
}

/* rc = the launch's own error (a launcher's return); when it is cudaSuccess, wait for
 * st and return the first error the stream's work raised (cudaSuccess when none). */
static inline cudaError_t v4cu_sync_after(cudaStream_t st, cudaError_t rc)
{
    if (rc != cudaSuccess)
        return rc;
    rc = cudaStreamSynchronize(st);
    return rc != cudaSuccess ? rc : cudaGetLastError();
}

#endif
