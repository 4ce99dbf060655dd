/* ops.h - the element-wise numerics of the V4 decode path, one function per rule of
 * the numerical contract (golden/tiny/README.md).  Everything is float32 with a
 * rounding after every operation (the build uses -ffp-contract=off), reductions sum
 * in double and round once, and transcendental functions are evaluated in double
 * from the float input and rounded once.  Pure functions; thread: any.
 */
#ifndef V4_OPS_H
#define V4_OPS_H

#include <math.h>
#include <stdint.h>

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

/* ---- per-row pieces of the sub-layers (mhc.c, moe.c), pure, for tests and other
 * implementations of the same numerics (the CUDA kernels are checked against them). */

/* hc_pre weights from one row of mixes m[(2+hc)*hc]: pre = sigmoid(m*scale0+base)+eps,
 * post = 2*sigmoid(...), comb = Sinkhorn(m*scale2+base) (iters rounds). */
void v4_hc_weights(const float *m, const float *scale, const float *base, int hc, int iters, float eps,
                   float *pre, float *post, float *comb);
void v4_sinkhorn(float *M, int hc, int iters, float eps);
/* u[i] = bf16(f32(sum_j double(f32(pre_j * X[j][i])))), X [hc][dim]. */
void v4_hc_reduce(const float *X, const float *pre, int hc, int dim, float *u);
/* X[k][i] = bf16(f32(post_k * out_i) + f32(sum_j double(f32(comb[j][k] * X[j][i])))) in place. */
void v4_hc_post_row(float *X, const float *out, const float *post, const float *comb, int hc, int dim);
/* sqrt(softplus(z)) (softplus in double, z > 20: z). */
float v4_sqrt_softplus(float z);
/* Router of one token: z[E] (gate logits) becomes the scores; sel = hash_row (hash
 * layer) or top-K of score + bias; wt = score[sel] / f32(sum) * route_scale (E <= 1024). */
void v4_moe_route(float *z, int E, int K, const float *bias, const int32_t *hash_row, float route_scale, int *sel,
                  float *wt);
/* h = bf16([wt *] silu(min(g, lim)) * clamp(u, +-lim)) (lim <= 0: no clamp). */
void v4_swiglu(const float *g, const float *u, int I, float lim, const float *wt, float *h);

/* attention.c: q <- bf16(q * g), g = bf16(rsqrt(bf16(bf16(f32(sum bf16(q_i^2)) / n) + eps)))
 * (sum in double). */
void v4_head_rms_bf16(float *q, int n, float eps);
/* attention.c: one head's softmax with sink over the candidate keys cand[0..L) (NULL =
 * masked), in chunks of 64 (online max/sum), o = bf16(acc / l); hd <= 1024. */
void v4_sparse_attn_head(const float *q, const float *const *cand, int L, int hd, float scale, float sink, float *o);
/* The same with bf16 candidate rows (uint16_t bits, e.g. a sequence's caches): the bits
 * of v4_sparse_attn_head on float rows holding the same values. */
void v4_sparse_attn_head_bf16(const float *q, const uint16_t *const *cand, int L, int hd, float scale, float sink,
                              float *o);
/* attention.c: v4_sparse_attn_head for the H heads of one sequence, q/o [H][hd],
 * sinks[H]; the same bits, computed several heads and candidates at a time (the widest
 * SIMD the CPU has, attn_kern.h; the engine itself calls v4_sparse_attn_heads_k with
 * its context's choice, which follows the CPU backend's ISA).  o must not overlap q or
 * the candidates. */
void v4_sparse_attn_heads(const float *q, int H, const float *const *cand, int L, int hd, float scale,
                          const float *sinks, float *o);
/* compressor.c: the gated pooling of a complete block from the compressor state
 * kv/sc [rows][W] (ratio r, d channels, overlap: 2r candidates) -> e[d] (bf16). */
void v4_comp_pool(const float *kv, const float *sc, int W, int r, int d, int overlap, float *e);
/* indexer.c: wh[h] = bf16(bf16(iw[h]) * f32(id^-0.5 * ih^-0.5)); the scores
 * score[j] = bf16(f32(sum_h double(bf16(relu(bf16(q_h . K_j)) * wh[h])))). */
void v4_index_head_weights(const float *iw, int ih, int id, float *wh);
/* (the widest SIMD the CPU has; the engine calls v4_index_scores_k with its context's
 * choice) */
void v4_index_scores(const float *q, const float *keys, int n, const float *wh, int ih, int id, float *score);
/* The same scores by the plain loop over keys and heads (the reference the SIMD path is
 * checked against, and its fallback for head dims above V4_AK_MAX_HD). */
void v4_index_scores_ref(const float *q, const float *keys, int n, const float *wh, int ih, int id, float *score);
/* v4_index_scores_ref with bf16 keys (uint16_t bits [n][id]). */
void v4_index_scores_ref_bf16(const float *q, const uint16_t *keys, int n, const float *wh, int ih, int id,
                              float *score);

#endif
