/* linear_fast.c - the reference of the `fast` numerics mode (config/numerics_setting.h):
 * FP32 accumulation with fused multiply-adds in a fixed order, written to be read next
 * to the order defined in cpu_kernels.h.  The SIMD versions (linear_fast_avx512.c) give
 * the same bits; an ISA without them runs these.
 *
 * FP8 QUANT: the order of a bf16 dot product instruction (AVX512-BF16 VDPBF16PS, whose
 * lane semantics are: two FMAs per 32-bit lane, the odd element first, inputs
 * denormals-are-zero, results flushed to zero), so that CPUs with it run it in one
 * instruction per 32 products and every other CPU gets the same bits.  Operands, exact:
 * x'_j = xq_j * s_act (an e4m3 value times a power of two) and w'_j = e4m3(w_j) * s_w,
 * both bf16 values (each flushed to 0 when subnormal, before the bf16 rounding).  The columns go in chunks of 32; the
 * chunks alternate between two chains A (even chunks) and B (odd chunks) of 16 lanes;
 * lane l of a chunk at column c takes a = ftz(fma(x'_{c+2l+1}, w'_{c+2l+1}, a)), then
 * a = ftz(fma(x'_{c+2l}, w'_{c+2l}, a)).  At the end a[l] = ftz(A[l] + B[l]), the lanes
 * are folded a[l] = ftz(a[l] + a[l + h]) for h = 8, 4, 2, 1 and y = bf16(a[0]).  No rounding per
 * 128-block (the block scales are in the operands), one per product-add.
 *
 * V4_LIN_BF16 (the head and wo_a; BF16, F32, FP8 dequantized to bf16 like the exact
 * mode): one float accumulator per row, columns ascending, acc = fma(x_j, w_j, acc),
 * y = acc (a SIMD lane is a row: 16 rows of two R8 groups share one broadcast input).
 * V4_LIN_EXACT products stay on the exact kernels in the fast mode.
 *
 * FP4 has no fast kernel: its exact kernels are already integer dot products (the
 * backend uses them in both modes).
 *
 * Both orders depend on nothing but the row and the column count, so a row's result is
 * the same at any batch size, thread count or split.  NaN/Inf propagate as IEEE says
 * (a NaN weight code or scale gives NaN, like the exact mode).
 */
#include <float.h>
#include <math.h>

#include "../codec.h"
#include "cpu_kernels.h"

/* Subnormal -> zero (the instruction's DAZ on its inputs, FTZ on its results). */
static inline float ftz(float v)
{
    return v != 0.0f && fabsf(v) < FLT_MIN ? copysignf(0.0f, v) : v;
}

/* One product-add of the chain: fma, flushed. */
static inline float dot_step(float x, float w, float a)
{
    return ftz(fmaf(ftz(x), ftz(w), a));
}

void v4_rows_fp8_fast_scalar(const v4_mat *W, int n, const float *xq, const float *xs,
                             const float *x, int ldx, float *y, int ldy, int r0, int r1)
{
    (void)x; (void)ldx;
    const uint8_t *w = W->w;
    const int K = W->cols, nkb = K / 128, scols = (K + 127) / 128;
    for (int b = 0; b < n; b++) {
        const float *q = xq + (size_t)b * K, *qs = xs + (size_t)b * nkb;
        for (int r = r0; r < r1; r++) {
            const uint8_t *wr = w + (size_t)r * K;
            float ch[2][16] = {{0}};
            for (int kb = 0; kb < nkb; kb++) {
                const float sw = v4_e8m0_to_f32(W->scale[(size_t)(r / 128) * scols + kb]);
                for (int c = kb * 128; c < kb * 128 + 128; c += 32) {
                    float *a = ch[(c / 32) & 1];
                    for (int l = 0; l < 16; l++)
                        for (int j = c + 2 * l + 1; j >= c + 2 * l; j--)
                            a[l] = dot_step(v4_bf16(ftz(q[j] * qs[kb])), v4_bf16(ftz(v4_e4m3_to_f32(wr[j]) * sw)), a[l]);
                }
            }
            float a[16];
            for (int l = 0; l < 16; l++)
                a[l] = ftz(ch[0][l] + ch[1][l]);
            for (int h = 8; h >= 1; h >>= 1)
                for (int l = 0; l < h; l++)
                    a[l] = ftz(a[l] + a[l + h]);
            y[(size_t)b * ldy + r] = v4_bf16(a[0]);
        }
    }
}

void v4_rows_exact_fast_scalar(const v4_mat *W, int n, const float *xq, const float *xs,
                               const float *x, int ldx, float *y, int ldy, int r0, int r1)
{
    (void)xq; (void)xs;
    const int K = W->cols, scols = (K + 127) / 128;
    for (int b = 0; b < n; b++) {
        const float *xb = x + (size_t)b * ldx;
        for (int r = r0; r < r1; r++) {
            float acc = 0.0f;
            switch (W->type) {
            case V4_W_F32: {
                const float *w = W->w;
                for (int j = 0; j < K; j++)
                    acc = fmaf(xb[j], w[v4_mat_index(W, r, j)], acc);
                break;
            }
            case V4_W_BF16: {
                const uint16_t *w = W->w;
                for (int j = 0; j < K; j++)
                    acc = fmaf(xb[j], v4_bf16_from_bits(w[v4_mat_index(W, r, j)]), acc);
                break;
            }
            case V4_W_FP8: {
                const uint8_t *w = W->w;
                for (int j = 0; j < K; j++) {
                    float sw = v4_e8m0_to_f32(W->scale[(size_t)(r / 128) * scols + j / 128]);
                    float wv = v4_bf16(v4_e4m3_to_f32(w[v4_mat_index(W, r, j)]) * sw);
                    acc = fmaf(xb[j], wv, acc);
                }
                break;
            }
            default:
                acc = NAN;
                break;
            }
            y[(size_t)b * ldy + r] = acc;
        }
    }
}
