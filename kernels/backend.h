/* backend.h - the narrow interface between the V4 decode path and the hardware.
 *
 * The model code (kernels/v4/) does all the small element-wise work itself and
 * calls the backend for the operations that touch weights: matrix x batch-of-vectors
 * products.  A CPU implementation lives in kernels/cpu/, a CUDA one will live in
 * kernels/cuda/; adding a backend touches no model code.
 *
 * Activations are passed as float arrays.  Where the model says "BF16", the floats
 * hold values that are exactly representable in bfloat16 (every BF16 value is a
 * float32 value), so no separate storage type is needed on the CPU.
 *
 * Numerics (golden README "Numerical contract"; every implementation must be
 * bit-identical to the scalar reference kernels/cpu/linear_scalar.c):
 *   V4_LIN_QUANT  (FP8 or FP4 weight): per 128 inputs amax = max(|x|, 1e-4),
 *       s = 2^ceil(log2(f32(amax * f32(1/448)))), q = e4m3_rne(clamp(x/s, +-448));
 *       per weight block (128 inputs for FP8, 32 for FP4) partial = f32(exact sum q*w);
 *       acc (f32, from 0, blocks ascending) = f32(acc + f32(f32(partial * s) * s_w));
 *       y = bf16(acc).
 *   V4_LIN_EXACT  (BF16, F32, or FP8 weight used dequantized, like wo_a):
 *       y = f32(sum_j double(x_j) * double(w_j)) accumulated in double, rounded once.
 *       For FP8 the weight is bf16(f32(e4m3(q) * 2^(e8m0-127))).
 *
 * Ownership: a v4_mat only borrows its weight bytes (usually the checkpoint's mmap);
 * x and y are caller-owned.  y must not alias x.
 * Thread: a backend instance is driven by one thread at a time (it may use its own
 * worker threads internally).
 */
#ifndef V4_BACKEND_H
#define V4_BACKEND_H

#include <stddef.h>
#include <stdint.h>

typedef enum v4_wtype {
    V4_W_FP8 = 1,   /* e4m3 bytes [rows][cols]; scale E8M0 [ceil(rows/128)][ceil(cols/128)] */
    V4_W_FP4,       /* e2m1 packed [rows][cols/2], low nibble = even column; scale E8M0 [rows][cols/32] */
    V4_W_BF16,      /* uint16 [rows][cols] */
    V4_W_F32,       /* float  [rows][cols] */
} v4_wtype;

typedef struct v4_mat {
    v4_wtype type;
    int rows;               /* outputs */
    int cols;               /* inputs  */
    const void *w;
    const uint8_t *scale;   /* E8M0 bytes, NULL for BF16/F32 */
} v4_mat;

typedef enum v4_lin_mode {
    V4_LIN_QUANT = 1,       /* FP8/FP4 weight, FP8 activations, BF16 output */
    V4_LIN_EXACT,           /* BF16/F32/FP8-dequantized weight, float input, f32 output */
} v4_lin_mode;

typedef struct v4_backend v4_backend;

typedef struct v4_backend_ops {
    const char *name;
    /* y[b*ldy + r] for b < n, r < W->rows from x[b*ldx + c], c < W->cols. */
    void (*linear)(v4_backend *be, const v4_mat *W, v4_lin_mode mode,
                   int n, const float *x, int ldx, float *y, int ldy);
    void (*destroy)(v4_backend *be);
} v4_backend_ops;

struct v4_backend {
    const v4_backend_ops *ops;
    void *impl;
};

static inline void v4_linear(v4_backend *be, const v4_mat *W, v4_lin_mode mode,
                             int n, const float *x, int ldx, float *y, int ldy)
{
    be->ops->linear(be, W, mode, n, x, ldx, y, ldy);
}

/* Rows [r0, r0+nr) of W as a matrix of its own (r0 multiple of 128 for FP8). */
v4_mat v4_mat_rows(const v4_mat *W, int r0, int nr);

#endif
