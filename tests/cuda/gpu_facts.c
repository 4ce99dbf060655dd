/* gpu_facts.c - the facts of the machine's GPUs and CUDA libraries, printed first by
 * scripts/device-check.sh (before any build: it compiles this file alone with nvcc) so
 * that even a run cut off early says what it ran on.
 *
 *   gpu_facts        one "gpu_facts:" line per fact; exit 0, or 77 without a usable GPU
 *                    (the library versions are still printed: they need no device)
 *
 * Needs only the CUDA runtime and cuBLASLt headers and libraries.  CMake builds it too
 * (tests/cuda/CMakeLists.txt), so it stays warning-free under -Werror.
 * Ownership/threads: a throwaway program, main thread only.
 */
#include <cublasLt.h>
#include <cuda_runtime.h>
#include <stdio.h>

static void version(const char *what, int v)
{
    printf("gpu_facts: %s %d.%d (%d)\n", what, v / 1000, (v % 1000) / 10, v);
}

int main(void)
{
    int rt = 0, drv = 0, n = 0;
    if (cudaRuntimeGetVersion(&rt) == cudaSuccess)
        version("CUDA runtime", rt);
    if (cudaDriverGetVersion(&drv) == cudaSuccess && drv > 0)
        version("CUDA driver API", drv);
    else
        printf("gpu_facts: CUDA driver API: none (no driver loaded)\n");
    const size_t lt = cublasLtGetVersion();
    printf("gpu_facts: cuBLASLt %zu.%zu.%zu (%zu), built for CUDA runtime %zu\n", lt / 10000, (lt / 100) % 100,
           lt % 100, lt, (size_t)cublasLtGetCudartVersion());
    const cudaError_t e = cudaGetDeviceCount(&n);
    if (e != cudaSuccess || n < 1) {
        printf("gpu_facts: no GPU: skipped (cudaGetDeviceCount: %s)\n",
               e != cudaSuccess ? cudaGetErrorString(e) : "0 devices");
        return 77;
    }
    for (int d = 0; d < n; d++) {
        struct cudaDeviceProp p;
        if (cudaGetDeviceProperties(&p, d) != cudaSuccess) {
            printf("gpu_facts: device %d: cudaGetDeviceProperties failed\n", d);
            continue;
        }
        size_t fr = 0, tot = 0;
        if (cudaSetDevice(d) != cudaSuccess || cudaMemGetInfo(&fr, &tot) != cudaSuccess)
            fr = tot = 0;
        int clk = 0, mclk = 0;
        cudaDeviceGetAttribute(&clk, cudaDevAttrClockRate, d);
        cudaDeviceGetAttribute(&mclk, cudaDevAttrMemoryClockRate, d);
        printf("gpu_facts: device %d of %d: %s, compute %d.%d, %d SMs, %.1f GiB (free %.1f GiB), L2 %d MiB, "
               "%d-bit memory bus at %d MHz, SM clock %d MHz, %zu KiB shared memory per block (opt-in)\n",
               d, n, p.name, p.major, p.minor, p.multiProcessorCount, (double)tot / (1u << 30),
               (double)fr / (1u << 30), p.l2CacheSize >> 20, p.memoryBusWidth, mclk / 1000, clk / 1000,
               p.sharedMemPerBlockOptin >> 10);
    }
    return 0;
}
