/* linear_scalar.c - the reference implementation of the backend's linear op.
 *
 * Straight loops, written to be read next to the numerical contract in backend.h.
 * In the QUANT modes xq/xs are the quantized activations (xq[b*cols + j] holds the
 * e4m3 value as a float, xs[b*(cols/128) + k] the block scale); x is unused.  In the
 * EXACT mode x/ldx are the raw inputs and xq/xs are unused.
 *
 * Layouts: the EXACT kernel reads element (r, j) through v4_mat_index, so it serves
 * both the row-major and the row-interleaved R8 layout (backend.h) with the same
 * arithmetic; the QUANT kernels are row-major only (the backend never passes them an
 * R8 matrix).
 */
#include <math.h>

#include "../codec.h"
#include "cpu_kernels.h"

void v4_act_quant(const float *x, int cols, float *xq, float *xs)
{
    const float inv448 = 1.0f / 448.0f;
    for (int b = 0; b < cols / 128; b++) {
        const float *xb = x + b * 128;
        float amax = 1e-4f;
        for (int j = 0; j < 128; j++)
            if (fabsf(xb[j]) > amax)
                amax = fabsf(xb[j]);
        float s = ldexpf(1.0f, v4_ceil_log2_bits(amax * inv448));
        xs[b] = s;
        for (int j = 0; j < 128; j++) {
            float v = xb[j] / s;
            if (v > 448.0f) v = 448.0f;
            if (v < -448.0f) v = -448.0f;
            xq[b * 128 + j] = v4_e4m3_round(v);
        }
    }
}

void v4_rows_fp8_scalar(const v4_mat *W, int n, const float *xq, const float *xs,
                        const float *x, int ldx, float *y, int ldy, int r0, int r1)
{
    (void)x; (void)ldx;
    const uint8_t *w = W->w;
    const int K = W->cols, nkb = K / 128, scols = (K + 127) / 128;
    for (int b = 0; b < n; b++) {
        const float *q = xq + (size_t)b * K, *qs = xs + (size_t)b * nkb;
        for (int r = r0; r < r1; r++) {
            const uint8_t *wr = w + (size_t)r * K;
            float acc = 0.0f;
            for (int kb = 0; kb < nkb; kb++) {
                double part = 0.0;
                for (int j = kb * 128; j < kb * 128 + 128; j++)
                    part += (double)q[j] * (double)v4_e4m3_to_f32(wr[j]);
                float sw = v4_e8m0_to_f32(W->scale[(size_t)(r / 128) * scols + kb]);
                float t = (float)part * qs[kb];
                t = t * sw;
                acc = acc + t;
            }
            y[(size_t)b * ldy + r] = v4_bf16(acc);
        }
    }
}

void v4_rows_fp4_scalar(const v4_mat *W, int n, const float *xq, const float *xs,
                        const float *x, int ldx, float *y, int ldy, int r0, int r1)
{
    (void)x; (void)ldx;
    const uint8_t *w = W->w;
    const int K = W->cols, nkb = K / 128, nsb = K / 32;
    for (int b = 0; b < n; b++) {
        const float *q = xq + (size_t)b * K, *qs = xs + (size_t)b * nkb;
        for (int r = r0; r < r1; r++) {
            const uint8_t *wr = w + (size_t)r * (K / 2);
            float acc = 0.0f;
            for (int sb = 0; sb < nsb; sb++) {
                double part = 0.0;
                for (int j = sb * 32; j < sb * 32 + 32; j++) {
                    unsigned code = (j & 1) ? (wr[j >> 1] >> 4) : (wr[j >> 1] & 15);
                    part += (double)q[j] * (double)v4_e2m1_to_f32(code);
                }
                float sw = v4_e8m0_to_f32(W->scale[(size_t)r * nsb + sb]);
                float t = (float)part * qs[sb / 4];
                t = t * sw;
                acc = acc + t;
            }
            y[(size_t)b * ldy + r] = v4_bf16(acc);
        }
    }
}

void v4_rows_exact_scalar(const v4_mat *W, int n, const float *xq, const float *xs,
                          const float *x, int ldx, float *y, int ldy, int r0, int r1)
{
    (void)xq; (void)xs;
    const int K = W->cols, scols = (K + 127) / 128;
    for (int b = 0; b < n; b++) {
        const float *xb = x + (size_t)b * ldx;
        for (int r = r0; r < r1; r++) {
            /* one row, columns ascending, one double accumulator: the contract */
            double acc = 0.0;
            switch (W->type) {
            case V4_W_F32: {
                const float *w = W->w;
                for (int j = 0; j < K; j++)
                    acc += (double)xb[j] * (double)w[v4_mat_index(W, r, j)];
                break;
            }
            case V4_W_BF16: {
                const uint16_t *w = W->w;
                for (int j = 0; j < K; j++)
                    acc += (double)xb[j] * (double)v4_bf16_from_bits(w[v4_mat_index(W, r, j)]);
                break;
            }
            case V4_W_FP8: {
                const uint8_t *w = W->w;
                for (int j = 0; j < K; j++) {
                    float sw = v4_e8m0_to_f32(W->scale[(size_t)(r / 128) * scols + j / 128]);
                    float wv = v4_bf16(v4_e4m3_to_f32(w[v4_mat_index(W, r, j)]) * sw);
                    acc += (double)xb[j] * (double)wv;
                }
                break;
            }
            default:
                break;
            }
            y[(size_t)b * ldy + r] = (float)acc;
        }
    }
}
