/* ops.h - the element-wise numerics of the V4 decode path, one function per rule of
 * the numerical contract (golden/tiny/README.md).  Everything is float32 with a
 * rounding after every operation (the build uses -ffp-contract=off), reductions sum
 * in double and round once, and transcendental functions are evaluated in double
 * from the float input and rounded once.  Pure functions; thread: any.
 */
#ifndef V4_OPS_H
#define V4_OPS_H

#include <math.h>

#include "../codec.h"

static inline float v4_expf(float x) { return (float)exp((double)x); }
static inline float v4_sigmoidf(float x) { return (float)(1.0 / (1.0 + exp(-(double)x))); }
static inline float v4_siluf(float x) { return (float)((double)x / (1.0 + exp(-(double)x))); }
static inline float v4_rsqrtf(float x) { return (float)(1.0 / sqrt((double)x)); }

/* f32(sum_i x_i * y_i) accumulated in double. */
double v4_dot_d(const float *x, const float *y, int n);
static inline float v4_dot(const float *x, const float *y, int n) { return (float)v4_dot_d(x, y, n); }

/* r = f32(1 / sqrt(double(f32(f32(sum x^2) / n) + eps))) */
float v4_rms_factor(const float *x, int n, float eps);
/* y = bf16(w * f32(x * r)); y may alias x. */
void v4_rmsnorm(const float *x, const float *w, int n, float eps, float *y);
/* Round every element to bf16 in place. */
void v4_round_bf16(float *x, int n);

/* Interleaved-pair rotation of v[0..2*npairs) by angle f32(f32(pos) * freqs[i]);
 * cos and sin are rounded to f32 (rule 4);
 * the rotation is evaluated in double and rounded to f32, then bf16.  inverse
 * rotates by the negative angle. */
void v4_rope(float *v, int npairs, const float *freqs, int pos, int inverse);
/* RoPE frequency table (npairs entries), op by op in f32 like the official
 * precompute; YaRN when original_seq_len > 0. */
void v4_rope_freqs(float *freqs, int rope_dim, double base, double factor,
                   int original_seq_len, double beta_fast, double beta_slow);

/* Sylvester-ordered Walsh-Hadamard, bf16(f32(sum) * f32(n^-0.5)); n a power of 2. */
void v4_hadamard(float *v, int n);
/* In-place FP8 (e4m3, power-of-two scale per block) quantize-dequantize. */
void v4_fp8_sim(float *v, int n, int block);
/* In-place FP4 (e2m1, power-of-two scale per block) quantize-dequantize. */
void v4_fp4_sim(float *v, int n, int block);

/* Top-k of score[0..n): highest first, ties by lower index.  Writes k indices. */
void v4_topk(const float *score, int n, int k, int *idx);

#endif
