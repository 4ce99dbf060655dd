/* step_check.h - the device-step check shared by the emulated and the GPU test
 * (step_check.cpp).  Thread: main thread. */
#ifndef V4_STEP_CHECK_H
#define V4_STEP_CHECK_H

/* Runs the check on DATA/golden/tiny for P positions; prints one line per part;
 * returns 0 when everything is bit-identical, 1 otherwise (or on a setup failure).
 * stand_in_lt: the emulation's cuBLASLt stand-in (its products decline, so the fast
 * mode's orchestration runs with the exact products and must stay bit-identical), or
 * NULL on a GPU, where the fast mode has its own checks (test_cuda_fast, numerics-check):
 * the fast-mode part then prints that it is not run here. */
int v4_step_check(const char *data, int P, void *stand_in_lt);

#endif
