/* backend.h - the narrow interface between the V4 decode path and the hardware.
 *
 * The model code (kernels/v4/) does all the small element-wise work itself and
 * calls the backend for the operations that touch weights: matrix x batch-of-vectors
 * products.  The CPU implementation lives in kernels/cpu/ (kernels/cpu/cpu_backend.h),
 * the CUDA one in kernels/cuda/ (kernels/cuda/cuda_backend.h: the products on the GPU,
 * plus the device-resident step of kernels/cuda/cuda_step.h, which a backend may run
 * in place of the CPU step); adding a backend touches no model code.  Which backend
 * runs is chosen by the serving core (worker/serve/engine.h).
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
 * Weight layouts (v4_mat.layout).  V4_LAYOUT_ROWMAJOR (0, the checkpoint's layout):
 * element (r, j) at index r*cols + j.  V4_LAYOUT_R8: rows in groups of 8, each group
 * stored column-interleaved, [ceil(rows/8)][cols][8]: element (r, j) at index
 * ((r/8)*cols + j)*8 + r%8 (v4_mat_index); the rows of the last group past `rows` are
 * padding (zero).  Element = one weight of the type's storage (a uint16 for BF16, a
 * float for F32, an e4m3 byte for FP8; FP8 scales keep their [rows/128][cols/128]
 * grid, and a group never straddles a 128-row block).  R8 lets SIMD kernels give each
 * lane one row and still walk every row's columns in order with contiguous loads: it
 * is meant for V4_LIN_EXACT with BF16/F32/FP8 weights (kernels/v4/weights.c prepares
 * those at model load).  The CPU backend answers V4_LIN_QUANT or FP4 with an R8
 * weight with NaN outputs (a programming error made visible).  Results never depend
 * on the layout.
 *
 * Device matrices (V4_MAT_CUDA).  A matrix whose layout has the V4_MAT_CUDA bit set
 * (layout = V4_LAYOUT_ROWMAJOR | V4_MAT_CUDA) has w and scale pointing at DEVICE memory
 * of a CUDA backend: the slots of its GPU expert cache (kernels/cuda/gpu_experts.h),
 * the only producer.  Only that backend instance may be given such a matrix; it uses
 * the pointers directly after making its stream wait for the copy that fills the slot
 * (the readiness is found from the address, so v4_mat carries no extra handle).  The
 * CPU backend answers a device matrix with NaN outputs (a programming error made
 * visible, never a read of device memory); host code must not dereference w/scale of
 * one (v4_mat_is_device).  The flag lives in `layout` rather than in a new member so
 * that the existing positional initializers of v4_mat stay complete (-Wextra
 * -Wmissing-field-initializers); code unaware of the flag sees an unknown layout.
 *
 * Ownership: a v4_mat only borrows its weight bytes (usually the checkpoint's mmap, or
 * a repacked copy owned by v4_weights); x and y are caller-owned.  y must not alias x.
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

typedef enum v4_layout {
    V4_LAYOUT_ROWMAJOR = 0, /* [rows][cols] */
    V4_LAYOUT_R8,           /* [ceil(rows/8)][cols][8], see above */
    V4_MAT_CUDA = 0x100,    /* flag OR'd into a layout: device pointers (see above) */
} v4_layout;

typedef struct v4_mat {
    v4_wtype type;
    int rows;               /* outputs */
    int cols;               /* inputs  */
    const void *w;
    const uint8_t *scale;   /* E8M0 bytes, NULL for BF16/F32 */
    v4_layout layout;       /* V4_LAYOUT_ROWMAJOR unless prepared */
} v4_mat;

/* Whether W's pointers are device pointers of a CUDA backend (V4_MAT_CUDA), and W's
 * layout without that flag. */
static inline int v4_mat_is_device(const v4_mat *W)
{
    return (W->layout & V4_MAT_CUDA) != 0;
}

static inline v4_layout v4_mat_layout(const v4_mat *W)
{
    return (v4_layout)(W->layout & ~V4_MAT_CUDA);
}

/* Index of element (r, j) in W->w, counted in elements of the storage type (not for
 * FP4, whose elements are nibbles in row-major order). */
static inline size_t v4_mat_index(const v4_mat *W, int r, int j)
{
    if (W->layout == V4_LAYOUT_R8)
        return ((size_t)(r >> 3) * (size_t)W->cols + (size_t)j) * 8 + (size_t)(r & 7);
    return (size_t)r * (size_t)W->cols + (size_t)j;
}

typedef enum v4_lin_mode {
    V4_LIN_QUANT = 1,       /* FP8/FP4 weight, FP8 activations, BF16 output */
    V4_LIN_EXACT,           /* BF16/F32/FP8-dequantized weight, float input, f32 output */
    V4_LIN_BF16,            /* the same product where a BF16-GEMM accuracy is allowed (the LM
                               head, wo_a): the exact numerics mode runs it as V4_LIN_EXACT,
                               bit for bit; the fast mode with float accumulation (on a GPU,
                               BF16 tensor cores).  Router, mHC and the small projections
                               stay V4_LIN_EXACT in both modes. */
} v4_lin_mode;

typedef struct v4_backend v4_backend;

/* One product of a v4_linear_many call: the arguments of one v4_linear. */
typedef struct v4_lin_job {
    const v4_mat *W;
    v4_lin_mode mode;
    int n;
    const float *x;
    int ldx;
    float *y;
    int ldy;
} v4_lin_job;

typedef struct v4_backend_ops {
    const char *name;
    /* y[b*ldy + r] for b < n, r < W->rows from x[b*ldx + c], c < W->cols. */
    void (*linear)(v4_backend *be, const v4_mat *W, v4_lin_mode mode,
                   int n, const float *x, int ldx, float *y, int ldy);
    void (*destroy)(v4_backend *be);
    /* Optional (NULL: v4_linear_many calls linear per job): all jobs of the list as
     * one unit of work, e.g. every expert of a MoE layer in one parallel section. */
    void (*linear_many)(v4_backend *be, const v4_lin_job *jobs, int n_jobs);
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

/* The jobs' products, with results identical to v4_linear on each job in list order.
 * No job's y may overlap any job's x or another job's y (jobs may share an x).  jobs
 * is caller-owned and only read during the call. */
static inline void v4_linear_many(v4_backend *be, const v4_lin_job *jobs, int n_jobs)
{
    if (be->ops->linear_many) {
        be->ops->linear_many(be, jobs, n_jobs);
        return;
    }
    for (int i = 0; i < n_jobs; i++)
        be->ops->linear(be, jobs[i].W, jobs[i].mode, jobs[i].n, jobs[i].x, jobs[i].ldx, jobs[i].y, jobs[i].ldy);
}

/* Rows [r0, r0+nr) of W as a matrix of its own (r0 multiple of 128 for FP8, of 8 for
 * the R8 layout: a group of 8 rows starts at element r0*cols in both layouts). */
v4_mat v4_mat_rows(const v4_mat *W, int r0, int nr);

#endif
