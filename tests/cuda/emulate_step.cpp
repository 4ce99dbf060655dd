/* emulate_step.cpp - the device-resident decode step (cuda_step.cu) with every
 * kernel, launcher and runtime call run on the CPU by the SIMT emulator (simt_emu.h),
 * checked by step_check.cpp against the CPU engine (test_cuda_step_emulated, in
 * every CUDA build).  It checks the step's orchestration (buffers, offsets, candidate
 * lists, compressor rows, expert gathers) and the kernels as the emulator runs them,
 * not the GPU hardware (test_cuda_step does that on a GPU).
 * Usage: cuda_emulate_step [DATA_DIR] [POSITIONS]
 * Ownership/threads: a throwaway program.
 */
#include <cstdlib>

#include "kernels/cuda/simt_emu.h"
#define V4_CUDA_LINEAR_H
#define V4_CUDA_OPS_H
#define V4_CUDA_ATTN_H
#include "kernels/cuda/cuda_linear.cu"
#include "kernels/cuda/cuda_ops.cu"
#include "kernels/cuda/cuda_attn.cu"
#include "kernels/cuda/cuda_moe.cu"
static const char *cudaGetErrorString(cudaError_t e) { return e ? "emulated CUDA error" : "no error"; }
#include "kernels/cuda/xslots.cu"
#include "kernels/cuda/cuda_mma.cu"
#include "kernels/cuda/cuda_fast.cu"
/* cuBLASLt does not run under the emulation: the step's fast mode (e->lt) stays off
 * here, and these stand-ins, never called, let cuda_step.cu compile (the fast-mode
 * kernels are checked by test_cuda_fast_emulated, the products on a GPU). */
#define V4_CUDA_LT_H
struct v4cu_lt;
static int v4cu_lt_quant(v4cu_lt *, int, const uint8_t *, const uint8_t *, int, int, int, const float *, int, float *,
                         cudaStream_t) { return 1; }
static int v4cu_lt_bf16(v4cu_lt *, const uint16_t *, int, int, int, const float *, int, float *, cudaStream_t)
{
    return 1;
}
static const char *v4cu_lt_error(const v4cu_lt *) { return "emulation"; }
#include "kernels/cuda/cuda_step.cu"
#include "step_check.h"

int main(int argc, char **argv)
{
    static int stand_in;   /* any non-NULL pointer: the stand-ins above never read it */
    return v4_step_check(argc > 1 ? argv[1] : "tests/data", argc > 2 ? atoi(argv[2]) : 136, &stand_in);
}
