/* step_check_gpu.cpp - test_cuda_step: the device-resident decode step on the GPU
 * checked against the CPU engine (step_check.cpp).  Exit 77 (ctest: SKIPPED) when
 * there is no usable CUDA device.
 * Usage: cuda_step_check [DATA_DIR] [POSITIONS]
 * Ownership/threads: a throwaway program.
 */
#include <cuda_runtime.h>

#include <cstdio>
#include <cstdlib>

#include "step_check.h"

int main(int argc, char **argv)
{
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess || n < 1 || cudaSetDevice(0) != cudaSuccess) {
        printf("no usable CUDA device: skipped\n");
        return 77;
    }
    return v4_step_check(argc > 1 ? argv[1] : "tests/data", argc > 2 ? atoi(argv[2]) : 136, NULL);
}
