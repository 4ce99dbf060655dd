/* cu_launch.h - one spelling of a kernel launch for the CUDA build and for the CPU
 * emulation (simt_emu.h), so that the launchers of cuda_ops.cu / cuda_attn.cu (grid
 * and block arithmetic, argument checks) are the same code in both and the emulated
 * tests exercise them too.
 *   V4CU_LAUNCH(kernel, grid, block, stream, args...)
 * CUDA: kernel<<<grid, block, 0, stream>>>(args...); emulation: runs the grid on the
 * CPU at once (the stream is ignored: the emulator is synchronous).
 * Thread: the launching thread.
 */
#ifndef V4_CU_LAUNCH_H
#define V4_CU_LAUNCH_H

/* Blocks of b threads that cover a items. */
static inline unsigned v4cu_cdiv(long a, long b) { return (unsigned)((a + b - 1) / b); }

#ifdef V4CU_HOST_EMULATION
#define V4CU_LAUNCH(kernel, grid, block, st, ...)                                                                 \
    (void)(st), v4emu_launch(dim3(grid), dim3(block), [&] { kernel(__VA_ARGS__); })
#else
#define V4CU_LAUNCH(kernel, grid, block, st, ...) kernel<<<(grid), (block), 0, (st)>>>(__VA_ARGS__)
#endif

#endif
