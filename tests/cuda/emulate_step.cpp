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
#include "kernels/cuda/cuda_step.cu"
#include "step_check.h"

int main(int argc, char **argv)
{
    return v4_step_check(argc > 1 ? argv[1] : "tests/data", argc > 2 ? atoi(argv[2]) : 136);
}
