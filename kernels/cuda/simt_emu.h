/* simt_emu.h - a small SIMT emulation that compiles CUDA kernel source as host C++,
 * so that CPU-only builds check the kernels' indexing, lane mapping, shuffles,
 * barriers and rounding steps against the C reference (test_cuda_emulated,
 * test_cuda_ops_emulated).  It does not check the GPU's arithmetic units: host IEEE
 * float/double with -ffp-contract=off stand in for the GPU's round-to-nearest
 * operations (the CUDA build uses --fmad=false), and host libm for CUDA's double
 * transcendentals.
 *
 * Model: launch() runs the blocks of a grid one after another; a block's threads are
 * fibers (ucontext) on the calling thread, switched only at barriers, so a run is
 * deterministic and cheap; a warp's shuffles exchange values through per-thread slots
 * between two warp barriers; __syncthreads/__syncwarp are barriers; __shared__ arrays
 * are function-local statics (one block at a time).  A warp must return as a whole or
 * not at all before a shuffle or barrier (true of the kernels checked); a barrier that
 * can never open aborts the program.
 * Include this, then the .cu file: its kernels can be run through launch(), and its
 * launchers written with V4CU_LAUNCH (cu_launch.h) run their grids here.
 * Ownership/threads: test programs only; the globals below are the emulator's.
 */
#ifndef V4_SIMT_EMU_H
#define V4_SIMT_EMU_H

#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <memory>
#include <type_traits>
#include <cstdio>
#include <ucontext.h>
#include <vector>

struct dim3e {
    unsigned x = 0, y = 0, z = 0;
};
/* The running fiber's coordinates (one OS thread runs every fiber: plain globals). */
static dim3e threadIdx, blockIdx, blockDim, gridDim;

/* Fibers of one block: each CUDA thread is a fiber with its own stack; a thread runs
 * until it waits at a barrier or returns, then the scheduler (emu_run_block) resumes
 * the next runnable one.  A block barrier opens when every live thread of the block
 * waits at it; a warp barrier when every live thread of the warp does.  On x86-64 a
 * fiber switch is six register pushes and a stack swap (emu_switch, below: no system
 * call, unlike swapcontext's signal-mask save); elsewhere ucontext does it. */
struct emu_sched {
    std::vector<int> state;             /* 0 runnable, 1 at the block barrier, 2 at its warp barrier, 3 done */
    std::vector<uint64_t> slot;         /* shuffle exchange, one per thread */
    char *stacks = nullptr;
    size_t stack_bytes = 0;
    unsigned cur = 0, nt = 0;
    const std::function<void()> *fn = nullptr;
#if defined(__x86_64__)
    void *main_sp = nullptr;
    std::vector<void *> sp;
#else
    ucontext_t main;
    std::vector<ucontext_t> ctx;
#endif
};
static emu_sched g_emu;

#if defined(__x86_64__)
/* emu_switch(save, to): push the callee-saved registers, store rsp in *save, load
 * rsp = to, pop the registers saved there, return into that fiber. */
extern "C" void emu_switch(void **save, void *to);
__asm__(".text\n"
        ".globl emu_switch\n"
        ".type emu_switch,@function\n"
        "emu_switch:\n"
        "  pushq %rbp\n  pushq %rbx\n  pushq %r12\n  pushq %r13\n  pushq %r14\n  pushq %r15\n"
        "  movq %rsp, (%rdi)\n"
        "  movq %rsi, %rsp\n"
        "  popq %r15\n  popq %r14\n  popq %r13\n  popq %r12\n  popq %rbx\n  popq %rbp\n"
        "  ret\n"
        ".size emu_switch,.-emu_switch\n");
#endif

static inline void emu_wait(int why)
{
    g_emu.state[g_emu.cur] = why;
#if defined(__x86_64__)
    emu_switch(&g_emu.sp[g_emu.cur], g_emu.main_sp);
#else
    swapcontext(&g_emu.ctx[g_emu.cur], &g_emu.main);
#endif
}

static void emu_entry()
{
    (*g_emu.fn)();
    g_emu.state[g_emu.cur] = 3;
#if defined(__x86_64__)
    emu_switch(&g_emu.sp[g_emu.cur], g_emu.main_sp);   /* never resumed */
    __builtin_trap();
#endif                                  /* ucontext: uc_link returns to the scheduler */
}

#define __global__
#define __device__
#define __forceinline__ inline
#define __launch_bounds__(x)
#define __restrict__
#define __shared__ static
#define __align__(n) __attribute__((aligned(n)))

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
static inline float __fsub_rn(float a, float b) { return a - b; }
static inline float __fdiv_rn(float a, float b) { return a / b; }
static inline double __dmul_rn(double a, double b) { return a * b; }
static inline float __double2float_rn(double d) { return (float)d; }
using std::copysignf;
using std::fma;
using std::fmaxf;
using std::rintf;

template <typename T> static T shfl_idx(T v, int src)
{
    const unsigned me = threadIdx.x, base = me & ~31u;
    uint64_t u = 0;
    std::memcpy(&u, &v, sizeof v);
    g_emu.slot[me] = u;
    emu_wait(2);
    u = g_emu.slot[base + ((unsigned)src & 31u)];
    emu_wait(2);
    T r;
    std::memcpy(&r, &u, sizeof r);
    return r;
}
template <typename T> static T __shfl_sync(unsigned, T v, int src) { return shfl_idx(v, src); }
template <typename T> static T __shfl_xor_sync(unsigned, T v, int m) { return shfl_idx(v, (int)(threadIdx.x & 31) ^ m); }
static inline void __syncwarp() { emu_wait(2); }
static inline void __syncthreads() { emu_wait(1); }
/* __ballot_sync: bit l = lane l's predicate, exchanged like a shuffle (whole warps). */
static inline unsigned __ballot_sync(unsigned, int pred)
{
    const unsigned me = threadIdx.x, base = me & ~31u;
    g_emu.slot[me] = pred != 0;
    emu_wait(2);
    unsigned r = 0;
    for (unsigned l = 0; l < 32 && base + l < g_emu.nt; l++)
        r |= (unsigned)(g_emu.slot[base + l] != 0) << l;
    emu_wait(2);
    return r;
}
static inline int __popc(unsigned v) { return __builtin_popcount(v); }
/* Fibers switch only at barriers, so a plain read-modify-write is atomic here. */
template <typename T> static T atomicAdd(T *p, T v)
{
    const T old = *p;
    *p = old + v;
    return old;
}

typedef int cudaError_t;
typedef void *cudaStream_t;
enum { cudaSuccess = 0, cudaErrorInvalidValue = 1, cudaErrorMemoryAllocation = 2, cudaErrorNotReady = 600,
       cudaErrorUnknown = 999 };
static inline cudaError_t cudaGetLastError() { return cudaSuccess; }
struct dim3 {
    unsigned x, y, z;
    dim3(unsigned a = 1, unsigned b = 1, unsigned c = 1) : x(a), y(b), z(c) {}
};
#define V4CU_HOST_EMULATION 1

/* Run one block of nt fibers to completion (aborts on a barrier that can never open). */
static void emu_run_block(unsigned nt)
{
    emu_sched &S = g_emu;
    const size_t stack = 64 * 1024;
    if (S.stack_bytes < stack * nt) {
        std::free(S.stacks);
        S.stacks = (char *)std::malloc(stack * nt);
        S.stack_bytes = stack * nt;
        if (!S.stacks)
            std::abort();
    }
    S.nt = nt;
    S.state.assign(nt, 0);
    S.slot.assign(nt, 0);
#if defined(__x86_64__)
    S.sp.assign(nt, nullptr);
    for (unsigned t = 0; t < nt; t++) {   /* a fresh stack "returns" into emu_entry */
        void **sp = (void **)(((uintptr_t)(S.stacks + stack * (t + 1))) & ~(uintptr_t)15);
        *--sp = nullptr;                  /* emu_entry's return address slot: rsp % 16 == 8 at entry */
        *--sp = (void *)emu_entry;
        for (int r = 0; r < 6; r++)
            *--sp = nullptr;              /* rbp rbx r12 r13 r14 r15 */
        S.sp[t] = sp;
    }
#else
    S.ctx.assign(nt, ucontext_t{});
    for (unsigned t = 0; t < nt; t++) {
        getcontext(&S.ctx[t]);
        S.ctx[t].uc_stack.ss_sp = S.stacks + stack * t;
        S.ctx[t].uc_stack.ss_size = stack;
        S.ctx[t].uc_link = &S.main;
        makecontext(&S.ctx[t], emu_entry, 0);
    }
#endif
    for (;;) {
        int ran = 0;
        for (unsigned t = 0; t < nt; t++)
            if (S.state[t] == 0) {
                S.cur = t;
                threadIdx.x = t;
#if defined(__x86_64__)
                emu_switch(&S.main_sp, S.sp[t]);
#else
                swapcontext(&S.main, &S.ctx[t]);
#endif
                ran = 1;
            }
        int live = 0, at_block = 0, opened = 0;
        for (unsigned t = 0; t < nt; t++) {
            live += S.state[t] != 3;
            at_block += S.state[t] == 1;
        }
        if (!live)
            return;
        for (unsigned w = 0; w < nt; w += 32) {   /* warp barriers */
            const unsigned e = w + 32 < nt ? w + 32 : nt;
            int wl = 0, wa = 0;
            for (unsigned t = w; t < e; t++) {
                wl += S.state[t] != 3;
                wa += S.state[t] == 2;
            }
            if (wl && wa == wl) {
                for (unsigned t = w; t < e; t++)
                    if (S.state[t] == 2)
                        S.state[t] = 0;
                opened = 1;
            }
        }
        if (!opened && at_block == live) {
            for (unsigned t = 0; t < nt; t++)
                if (S.state[t] == 1)
                    S.state[t] = 0;
            opened = 1;
        }
        if (!opened && !ran) {
            std::fprintf(stderr, "simt_emu: deadlock (a barrier no thread can pass)\n");
            std::abort();
        }
    }
}

/* Run fn() as a grid of gx*gy blocks of nt threads (blocks one after another). */
static void launch(unsigned gx, unsigned gy, unsigned nt, const std::function<void()> &fn)
{
    if (gx == 0 || gy == 0 || nt == 0)
        return;
    blockDim = {nt, 1, 1};
    gridDim = {gx, gy, 1};
    g_emu.fn = &fn;
    for (unsigned by = 0; by < gy; by++)
        for (unsigned bx = 0; bx < gx; bx++) {
            blockIdx.x = bx;
            blockIdx.y = by;
            emu_run_block(nt);
        }
}

/* The CUDA runtime calls the launchers and the device step use, on host memory
 * ("device" pointers are host pointers here; the default stream's calls complete at
 * once, a created stream's copies wait in its queue: see emu_stream below). */
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
/* Streams and events.  The default stream (0) runs every call at once, kernels
 * included (V4CU_LAUNCH ignores its stream).  A stream made by cudaStreamCreate* is a
 * "copy stream": its cudaMemcpyAsync / cudaMemsetAsync calls are DEFERRED (queued) and
 * run only when something waits for them: cudaStreamWaitEvent or cudaEventSynchronize
 * on an event recorded on that stream after them (runs the queue up to the event),
 * cudaStreamSynchronize / cudaStreamDestroy of that stream, cudaDeviceSynchronize.  A
 * kernel that reads a copy's destination without such a wait sees the old bytes, and
 * a host buffer refilled before the wait for its copy is copied with the new bytes:
 * both bugs make a check fail instead of passing by luck.  An event recorded on the
 * default stream (or never recorded) is complete.  Streams live until exit (a destroyed
 * one is drained and marked dead), so an event never points at freed memory. */
struct emu_stream {
    std::vector<std::function<void()>> q;   /* q[i] is op number i (run: i < done) */
    size_t done = 0;
    bool dead = false;
};
struct emu_event {
    emu_stream *s = nullptr;                /* nullptr: complete */
    size_t upto = 0;                        /* ops of s before the record */
};
typedef emu_event *cudaEvent_t;
static std::vector<std::unique_ptr<emu_stream>> g_emu_streams;
enum { cudaStreamDefault = 0, cudaStreamNonBlocking = 1, cudaEventDefault = 0, cudaEventDisableTiming = 2,
       cudaHostAllocDefault = 0 };

static inline void emu_drain(emu_stream *s, size_t upto)
{
    while (s && s->done < upto && s->done < s->q.size()) {
        auto op = std::move(s->q[s->done]);
        s->q[s->done++] = nullptr;
        op();
    }
}
/* Run op now on the default stream, or queue it on a copy stream. */
static inline cudaError_t emu_enqueue(cudaStream_t st, std::function<void()> op)
{
    emu_stream *s = (emu_stream *)st;
    if (!s) {
        op();
        return cudaSuccess;
    }
    if (s->dead)
        return cudaErrorInvalidValue;
    s->q.push_back(std::move(op));
    return cudaSuccess;
}
static inline cudaError_t cudaStreamCreateWithFlags(cudaStream_t *st, unsigned)
{
    g_emu_streams.emplace_back(new emu_stream);
    *st = g_emu_streams.back().get();
    return cudaSuccess;
}
static inline cudaError_t cudaStreamCreate(cudaStream_t *st) { return cudaStreamCreateWithFlags(st, 0); }
static inline cudaError_t cudaStreamSynchronize(cudaStream_t st)
{
    emu_stream *s = (emu_stream *)st;
    if (s)
        emu_drain(s, s->q.size());
    return cudaSuccess;
}
static inline cudaError_t cudaStreamDestroy(cudaStream_t st)
{
    cudaStreamSynchronize(st);
    if (st)
        ((emu_stream *)st)->dead = true;
    return cudaSuccess;
}
static inline cudaError_t cudaDeviceSynchronize()
{
    for (auto &s : g_emu_streams)
        emu_drain(s.get(), s->q.size());
    return cudaSuccess;
}
static inline cudaError_t cudaEventCreateWithFlags(cudaEvent_t *ev, unsigned)
{
    *ev = new emu_event;
    return cudaSuccess;
}
static inline cudaError_t cudaEventCreate(cudaEvent_t *ev) { return cudaEventCreateWithFlags(ev, 0); }
static inline cudaError_t cudaEventDestroy(cudaEvent_t ev)
{
    delete ev;
    return cudaSuccess;
}
static inline cudaError_t cudaEventRecord(cudaEvent_t ev, cudaStream_t st = 0)
{
    emu_stream *s = (emu_stream *)st;
    if (!ev || (s && s->dead))
        return cudaErrorInvalidValue;
    ev->s = s;
    ev->upto = s ? s->q.size() : 0;
    return cudaSuccess;
}
static inline cudaError_t cudaEventSynchronize(cudaEvent_t ev)
{
    if (!ev)
        return cudaErrorInvalidValue;
    emu_drain(ev->s, ev->upto);
    return cudaSuccess;
}
/* Complete: never recorded, recorded on the default stream, or its ops have run
 * (a deferred copy runs only when waited for, so this does not run anything). */
static inline cudaError_t cudaEventQuery(cudaEvent_t ev)
{
    if (!ev)
        return cudaErrorInvalidValue;
    return !ev->s || ev->s->done >= ev->upto ? cudaSuccess : cudaErrorNotReady;
}
/* The waiting stream's later work is ordered after the event's: run the event's ops now. */
static inline cudaError_t cudaStreamWaitEvent(cudaStream_t, cudaEvent_t ev, unsigned = 0)
{
    return cudaEventSynchronize(ev);
}
static inline cudaError_t cudaHostAlloc(void **p, size_t bytes, unsigned)
{
    *p = std::malloc(bytes ? bytes : 1);
    return *p ? cudaSuccess : cudaErrorMemoryAllocation;
}
static inline cudaError_t cudaMallocHost(void **p, size_t bytes) { return cudaHostAlloc(p, bytes, 0); }
static inline cudaError_t cudaFreeHost(void *p)
{
    std::free(p);
    return cudaSuccess;
}
static inline const char *cudaGetErrorName(cudaError_t e)
{
    return e == cudaSuccess ? "cudaSuccess" : e == cudaErrorMemoryAllocation ? "cudaErrorMemoryAllocation"
                                                                             : "cudaErrorInvalidValue";
}
static inline cudaError_t cudaMemsetAsync(void *p, int v, size_t bytes, cudaStream_t st)
{
    return emu_enqueue(st, [p, v, bytes] { std::memset(p, v, bytes); });
}
static inline cudaError_t cudaMemset2DAsync(void *p, size_t pitch, int v, size_t width, size_t height, cudaStream_t)
{
    for (size_t r = 0; r < height; r++)
        std::memset((char *)p + r * pitch, v, width);
    return cudaSuccess;
}
static inline cudaError_t cudaMemcpyAsync(void *d, const void *s, size_t bytes, cudaMemcpyKind, cudaStream_t st)
{
    if (!bytes)
        return cudaSuccess;
    return emu_enqueue(st, [d, s, bytes] { std::memmove(d, s, bytes); });
}
static inline cudaError_t cudaMemcpy2DAsync(void *d, size_t dpitch, const void *s, size_t spitch, size_t width,
                                            size_t height, cudaMemcpyKind, cudaStream_t)
{
    for (size_t r = 0; r < height; r++)
        std::memmove((char *)d + r * dpitch, (const char *)s + r * spitch, width);
    return cudaSuccess;
}

/* bf16 as the tensor-core kernels store it (cuda_mma.cu): bits only. */
struct __nv_bfloat16 {
    uint16_t x;
};
static inline __nv_bfloat16 __ushort_as_bfloat16(unsigned short b) { return __nv_bfloat16{b}; }

/* The WMMA API (mma.h) for the 16x16x16 bf16 shape with float accumulation, by its
 * documented semantics, which do not depend on how the hardware spreads a fragment
 * over the warp's lanes: every thread's fragment holds the whole 16x16 tile (loaded
 * from the same pointer by all 32 lanes, as the API requires), mma_sync computes
 * d[i][j] = c[i][j] + sum_k a[i][k] b[k][j] with float adds in ascending k (the
 * products of two bf16 values are exact in float), store_matrix_sync writes the whole
 * tile (32 identical writes).  The tensor cores' own summation order and rounding are
 * not modelled: this checks a kernel's tiling, layouts and pointers. */
namespace nvcuda {
namespace wmma {
struct matrix_a {};
struct matrix_b {};
struct accumulator {};
struct row_major {};
struct col_major {};
enum layout_t { mem_row_major, mem_col_major };
template <typename Use, int M, int N, int K, typename T, typename Layout = void> struct fragment {
    float v[16][16];
    static constexpr int num_elements = 256;
};
template <typename Use, typename Layout>
static inline void load_matrix_sync(fragment<Use, 16, 16, 16, __nv_bfloat16, Layout> &f, const __nv_bfloat16 *p,
                                    unsigned ld)
{
    const bool rm = std::is_same<Layout, row_major>::value;
    for (int i = 0; i < 16; i++)
        for (int j = 0; j < 16; j++)
            f.v[i][j] = __uint_as_float((uint32_t)(rm ? p[(size_t)i * ld + j] : p[(size_t)j * ld + i]).x << 16);
}
static inline void fill_fragment(fragment<accumulator, 16, 16, 16, float> &f, float x)
{
    for (auto &r : f.v)
        for (float &e : r)
            e = x;
}
template <typename LA, typename LB>
static inline void mma_sync(fragment<accumulator, 16, 16, 16, float> &d,
                            const fragment<matrix_a, 16, 16, 16, __nv_bfloat16, LA> &a,
                            const fragment<matrix_b, 16, 16, 16, __nv_bfloat16, LB> &b,
                            const fragment<accumulator, 16, 16, 16, float> &c)
{
    float out[16][16];
    for (int i = 0; i < 16; i++)
        for (int j = 0; j < 16; j++) {
            float acc = c.v[i][j];
            for (int k = 0; k < 16; k++)
                acc += a.v[i][k] * b.v[k][j];
            out[i][j] = acc;
        }
    std::memcpy(d.v, out, sizeof out);
}
static inline void store_matrix_sync(float *p, const fragment<accumulator, 16, 16, 16, float> &f, unsigned ld,
                                     layout_t l)
{
    for (int i = 0; i < 16; i++)
        for (int j = 0; j < 16; j++)
            p[l == mem_row_major ? (size_t)i * ld + j : (size_t)j * ld + i] = f.v[i][j];
}
} /* namespace wmma */
} /* namespace nvcuda */

/* V4CU_LAUNCH (cu_launch.h) in emulation. */
static inline void v4emu_launch(dim3 grid, dim3 block, const std::function<void()> &fn)
{
    launch(grid.x, grid.y, block.x, fn);
}

#endif
