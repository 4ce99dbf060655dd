/* cpu_kernels.h - row-range kernels of the CPU backend (internal to kernels/cpu/).
 *
 * Each kernel computes outputs r in [r0, r1) of y = W x for n input vectors; the
 * backend splits rows across its threads.  The scalar versions are the readable
 * reference; SIMD versions must give bit-identical results (the FP8/FP4 block partials
 * are exact, and the EXACT mode sums in double).
 *
 * Activation quantization (v4_act_quant) is done once per input vector before the
 * row kernels run: xq holds the e4m3 values as floats and xs the per-128 scales.
 *
 * Thread: all functions are reentrant; callers give each thread disjoint rows.
 */
#ifndef V4_CPU_KERNELS_H
#define V4_CPU_KERNELS_H

#include "../backend.h"

/* x[cols] -> xq[cols] (e4m3 values as float), xs[cols/128] (power-of-two scales). */
void v4_act_quant(const float *x, int cols, float *xq, float *xs);

typedef void (*v4_rows_fn)(const v4_mat *W, int n, const float *xq, const float *xs,
                           const float *x, int ldx, float *y, int ldy, int r0, int r1);

void v4_rows_fp8_scalar(const v4_mat *W, int n, const float *xq, const float *xs,
                        const float *x, int ldx, float *y, int ldy, int r0, int r1);
void v4_rows_fp4_scalar(const v4_mat *W, int n, const float *xq, const float *xs,
                        const float *x, int ldx, float *y, int ldy, int r0, int r1);
void v4_rows_exact_scalar(const v4_mat *W, int n, const float *xq, const float *xs,
                          const float *x, int ldx, float *y, int ldy, int r0, int r1);

#endif
