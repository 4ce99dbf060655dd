/* step_check.h - the device-step check shared by the emulated and the GPU test
 * (step_check.cpp).  Thread: main thread. */
#ifndef V4_STEP_CHECK_H
#define V4_STEP_CHECK_H

/* Runs the check on DATA/golden/tiny for P positions; prints one line per part;
 * returns 0 when everything is bit-identical, 1 otherwise (or on a setup failure). */
int v4_step_check(const char *data, int P);

#endif
