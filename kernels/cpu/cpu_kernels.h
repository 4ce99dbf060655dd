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
 * SIMD variants (QUANT: linear_avx2.c, linear_avx512.c, linear_fp4_vnni.c; EXACT: linear_exact_avx2.c,
 * linear_exact_avx512.c) have the same signatures and give bit-identical results; they
 * may only be called when the CPU supports the ISA (the backend checks at run time).
 * V4_CPU_X86 tells whether they are compiled in.
 *
 * Layouts: the EXACT kernels accept row-major and R8 weights (backend.h) and any
 * [r0, r1) (R8: rows outside the range in a partial group are computed and dropped);
 * the QUANT kernels only row-major (the backend guards this).
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

/* The fast numerics mode (linear_fast.c: the reference and the order it defines; SIMD
 * twins give the same bits).  FP8 QUANT: the order of the bf16 dot instruction
 * VDPBF16PS (two chains of 16 lanes over alternating 32-column chunks, each lane the odd
 * then the even column's fma, subnormals flushed; the exact order is in linear_fast.c).
 * EXACT: per row one chain of fmas, columns ascending. */
void v4_rows_fp8_fast_scalar(const v4_mat *W, int n, const float *xq, const float *xs,
                             const float *x, int ldx, float *y, int ldy, int r0, int r1);
void v4_rows_exact_fast_scalar(const v4_mat *W, int n, const float *xq, const float *xs,
                               const float *x, int ldx, float *y, int ldy, int r0, int r1);

#if defined(__x86_64__)
#define V4_CPU_X86 1
typedef void (*v4_act_quant_fn)(const float *x, int cols, float *xq, float *xs);

void v4_act_quant_avx2(const float *x, int cols, float *xq, float *xs);
void v4_rows_fp8_avx2(const v4_mat *W, int n, const float *xq, const float *xs,
                      const float *x, int ldx, float *y, int ldy, int r0, int r1);
void v4_rows_fp4_avx2(const v4_mat *W, int n, const float *xq, const float *xs,
                      const float *x, int ldx, float *y, int ldy, int r0, int r1);
void v4_rows_exact_avx2(const v4_mat *W, int n, const float *xq, const float *xs,
                        const float *x, int ldx, float *y, int ldy, int r0, int r1);

/* FP4 on AVX-512 VNNI (linear_fp4_vnni.c; the "avx512vnni" ISA = avx512 + this) */
void v4_rows_fp4_vnni(const v4_mat *W, int n, const float *xq, const float *xs,
                      const float *x, int ldx, float *y, int ldy, int r0, int r1);

void v4_act_quant_avx512(const float *x, int cols, float *xq, float *xs);
void v4_rows_fp8_avx512(const v4_mat *W, int n, const float *xq, const float *xs,
                        const float *x, int ldx, float *y, int ldy, int r0, int r1);
void v4_rows_fp4_avx512(const v4_mat *W, int n, const float *xq, const float *xs,
                        const float *x, int ldx, float *y, int ldy, int r0, int r1);
void v4_rows_exact_avx512(const v4_mat *W, int n, const float *xq, const float *xs,
                          const float *x, int ldx, float *y, int ldy, int r0, int r1);
/* the fast mode on AVX-512 (linear_fast_avx512.c; EXACT: R8 weights, else the reference) */
void v4_rows_fp8_fast_avx512(const v4_mat *W, int n, const float *xq, const float *xs,
                             const float *x, int ldx, float *y, int ldy, int r0, int r1);
void v4_rows_exact_fast_avx512(const v4_mat *W, int n, const float *xq, const float *xs,
                               const float *x, int ldx, float *y, int ldy, int r0, int r1);
/* the fast FP8 QUANT kernel on AVX512-BF16 (linear_fast_bf16.c: VDPBF16PS, the same bits) */
void v4_rows_fp8_fast_bf16(const v4_mat *W, int n, const float *xq, const float *xs,
                           const float *x, int ldx, float *y, int ldy, int r0, int r1);
#else
#define V4_CPU_X86 0
typedef void (*v4_act_quant_fn)(const float *x, int cols, float *xq, float *xs);
#endif

#endif
