/* attn_kern.h - the inner loops of the per-sequence attention math (attn_head.c's
 * v4_sparse_attn_heads, indexer.c's v4_index_scores), one implementation per ISA, and
 * the run-time choice between them.  Not a public header (attn_head.c, indexer.c and
 * tests/test_attn_fast.c use it).
 *
 * The two reductions are sets of independent double chains, each summed in the
 * reference's order; SIMD lanes carry different chains, never parts of one chain:
 *   dots8   lanes = 8 heads: out[c][i] = sum_{d = 0, 1, ..} double(qT[d][i]) *
 *           double(k_c[d]) from 0.0, i.e. v4_dot_d(q_i, k_c, hd) bit for bit (a float *
 *           float product is exact in double, so mul + add in any instruction form is
 *           the reference's `s += x*y`); several keys in flight hide the add latency.
 *   accum8  lanes = 8 consecutive d: for each of up to 8 heads i with bit i of active,
 *           acc_i[d] = f32(double(f32(acc_i[d] * f_i)) + sum_{c = 0, 1, ..}
 *           pbd[i][c] * double(kv_c[d])), the reference's acc update (pbd holds the
 *           bf16(p) values as doubles); lanes i without the bit are neither read nor
 *           written.
 * and two element-wise steps, vectorized because their scalar form cost as much as
 * the reductions (a data-dependent branch per term, a scalar division per output):
 *   relu_terms8  the indexer's per-head terms of 8 heads at once.
 *   div_bf16     the attention output o = bf16(acc / l), 8 elements at once.
 * The code is written once with GCC vector extensions (attn_kern_body.h) and compiled
 * three times: attn_kern.c (baseline: SSE2 on x86-64, whatever the target has
 * elsewhere), attn_kern_avx2.c (-mavx2 -mfma) and attn_kern_avx512.c
 * (-mavx512f/bw/vl/dq): CMake gives those files their flags by name, and
 * v4_attn_kern_get() picks the widest the CPU supports (__builtin_cpu_supports), so
 * the binary still runs on a baseline x86-64.  The engine follows the CPU backend's
 * ISA instead (--isa, V4_CPU_ISA): v4_attn_kern_for_isa gives the set for it, NULL
 * for "scalar" = the plain reference loops (v4_sparse_attn_head per head,
 * v4_index_scores_ref); v4_ctx_create stores the choice in the context.  The results
 * do not depend on the choice.
 *
 * Ownership: callers own every buffer; no state.  Thread: any (pure functions).
 */
#ifndef V4_ATTN_KERN_H
#define V4_ATTN_KERN_H

#include <stddef.h>
#include <stdint.h>

#define V4_AK_LANES 8     /* heads per dots8 call / per accum8 call */
#define V4_AK_MAX_HD 1024 /* head dims of v4_sparse_attn_heads / v4_index_scores fast paths */
#define V4_AK_CHUNK 64    /* candidates per softmax chunk (the reference's) */

typedef struct v4_attn_kern {
    const char *name; /* "portable", "avx2", "avx512" */
    /* qT [hd][8] floats; keys[0..nk) non-NULL rows of hd floats; out [nk][8] doubles. */
    void (*dots8)(const float *qT, int hd, const float *const *keys, int nk, double *out);
    /* acc[i] rows of hd floats (only those with bit i of active are used); f[8];
     * pbd [8][V4_AK_CHUNK]; kv[0..nv) non-NULL rows of hd floats, nv <= V4_AK_CHUNK. */
    void (*accum8)(float *const *acc, const float *f, const double *pbd, const float *const *kv, int nv,
                   int hd, unsigned active);
    /* dots8 / accum8 with bf16 key rows (uint16_t bits: the sequence caches, seq.c);
     * the same bits as the float functions given rows holding the same values. */
    void (*dots8_bf16)(const float *qT, int hd, const uint16_t *const *keys, int nk, double *out);
    void (*accum8_bf16)(float *const *acc, const float *f, const double *pbd, const uint16_t *const *kv, int nv,
                        int hd, unsigned active);
    /* The indexer's terms: T[j][i] = double(bf16(relu(bf16(f32(D[j][i]))) * w8[i])) for
     * rows j < rows of 8 lanes (relu: d < 0 ? 0 : d, so -0 and NaN stay). */
    void (*relu_terms8)(const double *D, int rows, const float *w8, double *T);
    /* x[i] = bf16(x[i] / l) for i < n (the attention output). */
    void (*div_bf16)(float *x, int n, float l);
} v4_attn_kern;

/* qT[d][i] = q[i][d] (rows of hd floats) for i < nh, 0 for nh <= i < 8. */
static inline void v4_ak_transpose8(const float *q, int hd, int nh, float *qT)
{
    for (int i = 0; i < V4_AK_LANES; i++) {
        const float *row = q + (size_t)i * hd;
        if (i < nh)
            for (int d = 0; d < hd; d++)
                qT[(size_t)d * V4_AK_LANES + i] = row[d];
        else
            for (int d = 0; d < hd; d++)
                qT[(size_t)d * V4_AK_LANES + i] = 0.0f;
    }
}

/* The widest implementation this CPU runs. */
const v4_attn_kern *v4_attn_kern_get(void);
/* "portable", "avx2" or "avx512"; NULL when unknown or not supported by this CPU. */
const v4_attn_kern *v4_attn_kern_by_name(const char *name);
/* The set for a CPU backend ISA as asked (cpu_backend.h v4_cpu_backend_isa_asked):
 * "scalar" -> NULL (the reference loops); "avx2" -> the AVX2 set; "avx512" and
 * "avx512vnni" -> the AVX-512 set (NULL, the reference, when this CPU lacks the ISA:
 * the backend refuses such ISAs anyway); "auto", NULL (not the CPU backend) or any
 * other name -> v4_attn_kern_get(). */
const v4_attn_kern *v4_attn_kern_for_isa(const char *isa);
/* K's name, "reference" for NULL. */
const char *v4_attn_kern_name(const v4_attn_kern *K);

/* v4_sparse_attn_heads / v4_index_scores (ops.h) through a given implementation;
 * K == NULL: the reference loops (the same bits). */
void v4_sparse_attn_heads_k(const v4_attn_kern *K, const float *q, int H, const float *const *cand, int L,
                            int hd, float scale, const float *sinks, float *o);
void v4_index_scores_k(const v4_attn_kern *K, const float *q, const float *keys, int n, const float *wh, int ih,
                       int id, float *score);
/* The same with bf16 key rows / a bf16 key matrix (uint16_t bits, ops.h's _bf16
 * references for K == NULL): what the engine calls on its sequence caches. */
void v4_sparse_attn_heads_bf16_k(const v4_attn_kern *K, const float *q, int H, const uint16_t *const *cand, int L,
                                 int hd, float scale, const float *sinks, float *o);
void v4_index_scores_bf16_k(const v4_attn_kern *K, const float *q, const uint16_t *keys, int n, const float *wh,
                            int ih, int id, float *score);

/* The per-ISA instances (attn_kern*.c). */
void v4_ak_relu_terms8_portable(const double *D, int rows, const float *w8, double *T);
void v4_ak_div_bf16_portable(float *x, int n, float l);
void v4_ak_dots8_portable(const float *qT, int hd, const float *const *keys, int nk, double *out);
void v4_ak_dots8_bf16_portable(const float *qT, int hd, const uint16_t *const *keys, int nk, double *out);
void v4_ak_accum8_bf16_portable(float *const *acc, const float *f, const double *pbd, const uint16_t *const *kv,
                                  int nv, int hd, unsigned active);
void v4_ak_accum8_portable(float *const *acc, const float *f, const double *pbd, const float *const *kv,
                           int nv, int hd, unsigned active);
#if defined(__x86_64__)
void v4_ak_relu_terms8_avx2(const double *D, int rows, const float *w8, double *T);
void v4_ak_div_bf16_avx2(float *x, int n, float l);
void v4_ak_dots8_avx2(const float *qT, int hd, const float *const *keys, int nk, double *out);
void v4_ak_dots8_bf16_avx2(const float *qT, int hd, const uint16_t *const *keys, int nk, double *out);
void v4_ak_accum8_bf16_avx2(float *const *acc, const float *f, const double *pbd, const uint16_t *const *kv,
                              int nv, int hd, unsigned active);
void v4_ak_accum8_avx2(float *const *acc, const float *f, const double *pbd, const float *const *kv, int nv,
                       int hd, unsigned active);
void v4_ak_relu_terms8_avx512(const double *D, int rows, const float *w8, double *T);
void v4_ak_div_bf16_avx512(float *x, int n, float l);
void v4_ak_dots8_avx512(const float *qT, int hd, const float *const *keys, int nk, double *out);
void v4_ak_dots8_bf16_avx512(const float *qT, int hd, const uint16_t *const *keys, int nk, double *out);
void v4_ak_accum8_bf16_avx512(float *const *acc, const float *f, const double *pbd, const uint16_t *const *kv,
                                int nv, int hd, unsigned active);
void v4_ak_accum8_avx512(float *const *acc, const float *f, const double *pbd, const float *const *kv,
                         int nv, int hd, unsigned active);
#endif

#endif
