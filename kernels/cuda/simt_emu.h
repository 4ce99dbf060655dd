/* simt_emu.h - a small SIMT emulation that compiles CUDA kernel source as host C++,
 * so that CPU-only builds check the kernels' indexing, lane mapping, shuffles,
 * barriers and rounding steps against the C reference (test_cuda_emulated,
 * test_cuda_ops_emulated).  It does not check the GPU's arithmetic units: host IEEE
 * float/double with -ffp-contract=off stand in for the GPU's round-to-nearest
 * operations (the CUDA build uses --fmad=false), and host libm for CUDA's double
 * transcendentals.
 *
 * Model: launch() runs the blocks of a grid one after another; a block's threads are
 * std::threads; a warp's shuffles exchange values through a per-warp slot array
 * between two std::barrier waits; __syncthreads/__syncwarp are barriers; __shared__
 * arrays are function-local statics (one block at a time).  A warp must return as a
 * whole or not at all before a shuffle or barrier (true of the kernels checked).
 * Include this, then the .cu file: its kernels can be run through launch(), and its
 * launchers written with V4CU_LAUNCH (cu_launch.h) run their grids here.
 * Ownership/threads: test programs only; the globals below are the emulator's.
 */
#ifndef V4_SIMT_EMU_H
#define V4_SIMT_EMU_H

#include <barrier>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <memory>
#include <thread>
#include <vector>

struct dim3e {
    unsigned x = 0, y = 0, z = 0;
};
static thread_local dim3e threadIdx, blockIdx;
static dim3e blockDim, gridDim;
struct warp_ctx {
    std::barrier<> *bar;
    uint64_t slot[32];
};
static thread_local warp_ctx *g_warp;
static std::barrier<> *g_block_bar;

#define __global__
#define __device__
#define __forceinline__ inline
#define __launch_bounds__(x)
#define __restrict__
#define __shared__ static

struct uint4 {
    uint32_t x, y, z, w;
};
template <typename T> static T __ldg(const T *p)
{
    T v;
    std::memcpy(&v, p, sizeof v);
    return v;
}
static inline float __int_as_float(int i) { float f; std::memcpy(&f, &i, 4); return f; }
static inline float __uint_as_float(uint32_t i) { float f; std::memcpy(&f, &i, 4); return f; }
static inline uint32_t __float_as_uint(float f) { uint32_t u; std::memcpy(&u, &f, 4); return u; }
static inline double __hiloint2double(int hi, int lo)
{
    uint64_t u = ((uint64_t)(uint32_t)hi << 32) | (uint32_t)lo;
    double d;
    std::memcpy(&d, &u, 8);
    return d;
}
static inline double __longlong_as_double(long long v) { double d; std::memcpy(&d, &v, 8); return d; }
static inline float __fmul_rn(float a, float b) { return a * b; }
static inline float __fadd_rn(float a, float b) { return a + b; }
static inline float __fdiv_rn(float a, float b) { return a / b; }
static inline double __dmul_rn(double a, double b) { return a * b; }
static inline float __double2float_rn(double d) { return (float)d; }
using std::copysignf;
using std::fma;
using std::fmaxf;
using std::rintf;

template <typename T> static T shfl_idx(T v, int src)
{
    const unsigned lane = threadIdx.x & 31;
    uint64_t u = 0;
    std::memcpy(&u, &v, sizeof v);
    g_warp->slot[lane] = u;
    g_warp->bar->arrive_and_wait();
    u = g_warp->slot[src & 31];
    g_warp->bar->arrive_and_wait();
    T r;
    std::memcpy(&r, &u, sizeof r);
    return r;
}
template <typename T> static T __shfl_sync(unsigned, T v, int src) { return shfl_idx(v, src); }
template <typename T> static T __shfl_xor_sync(unsigned, T v, int m) { return shfl_idx(v, (int)(threadIdx.x & 31) ^ m); }
static inline void __syncwarp() { g_warp->bar->arrive_and_wait(); }
static inline void __syncthreads() { g_block_bar->arrive_and_wait(); }

typedef int cudaError_t;
typedef void *cudaStream_t;
enum { cudaSuccess = 0, cudaErrorInvalidValue = 1 };
static inline cudaError_t cudaGetLastError() { return cudaSuccess; }
struct dim3 {
    unsigned x, y, z;
    dim3(unsigned a = 1, unsigned b = 1, unsigned c = 1) : x(a), y(b), z(c) {}
};
#define V4CU_HOST_EMULATION 1

/* Run fn() as a grid of gx*gy blocks of nt threads (nt a multiple of 32, or < 32). */
static void launch(unsigned gx, unsigned gy, unsigned nt, const std::function<void()> &fn)
{
    if (gx == 0 || gy == 0 || nt == 0)
        return;
    blockDim = {nt, 1, 1};
    gridDim = {gx, gy, 1};
    for (unsigned by = 0; by < gy; by++)
        for (unsigned bx = 0; bx < gx; bx++) {
            std::barrier<> block_bar((std::ptrdiff_t)nt);
            std::vector<warp_ctx> warps((nt + 31) / 32);
            std::vector<std::unique_ptr<std::barrier<>>> wbars;
            for (size_t w = 0; w < warps.size(); w++) {
                const unsigned in_warp = nt - 32 * (unsigned)w < 32 ? nt - 32 * (unsigned)w : 32;
                wbars.push_back(std::make_unique<std::barrier<>>((std::ptrdiff_t)in_warp));
                warps[w].bar = wbars[w].get();
            }
            g_block_bar = &block_bar;
            std::vector<std::thread> th;
            for (unsigned t = 0; t < nt; t++)
                th.emplace_back([&, t] {
                    threadIdx.x = t;
                    blockIdx.x = bx;
                    blockIdx.y = by;
                    g_warp = &warps[t / 32];
                    fn();
                });
            for (auto &x : th)
                x.join();
        }
}

/* The CUDA runtime calls the launchers and the device step use, on host memory
 * ("device" pointers are host pointers here; every call completes at once). */
enum cudaMemcpyKind { cudaMemcpyHostToDevice = 1, cudaMemcpyDeviceToHost = 2, cudaMemcpyDeviceToDevice = 3 };
static inline cudaError_t cudaMalloc(void **p, size_t bytes)
{
    *p = std::malloc(bytes ? bytes : 1);
    return *p ? cudaSuccess : 2;
}
static inline cudaError_t cudaFree(void *p)
{
    std::free(p);
    return cudaSuccess;
}
static inline cudaError_t cudaMemsetAsync(void *p, int v, size_t bytes, cudaStream_t)
{
    std::memset(p, v, bytes);
    return cudaSuccess;
}
static inline cudaError_t cudaMemset2DAsync(void *p, size_t pitch, int v, size_t width, size_t height, cudaStream_t)
{
    for (size_t r = 0; r < height; r++)
        std::memset((char *)p + r * pitch, v, width);
    return cudaSuccess;
}
static inline cudaError_t cudaMemcpyAsync(void *d, const void *s, size_t bytes, cudaMemcpyKind, cudaStream_t)
{
    if (bytes)
        std::memmove(d, s, bytes);
    return cudaSuccess;
}
static inline cudaError_t cudaMemcpy2DAsync(void *d, size_t dpitch, const void *s, size_t spitch, size_t width,
                                            size_t height, cudaMemcpyKind, cudaStream_t)
{
    for (size_t r = 0; r < height; r++)
        std::memmove((char *)d + r * dpitch, (const char *)s + r * spitch, width);
    return cudaSuccess;
}
static inline cudaError_t cudaStreamSynchronize(cudaStream_t) { return cudaSuccess; }

/* V4CU_LAUNCH (cu_launch.h) in emulation. */
static inline void v4emu_launch(dim3 grid, dim3 block, const std::function<void()> &fn)
{
    launch(grid.x, grid.y, block.x, fn);
}

#endif
