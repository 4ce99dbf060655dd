/* mhc.c - manifold-constrained hyper-connections (spec §5.2).
 *
 * The residual state of a sequence is hc streams of dim BF16 values.  Before each
 * sub-layer, hc_pre mixes them into one input u (weights "pre") and computes the
 * "post" weights and the hc x hc "comb" matrix (a Sinkhorn projection toward a
 * doubly-stochastic matrix); after the sub-layer, hc_post writes stream k =
 * post_k * out + sum_j comb[j][k] * X_j.  hc_head is the final pre-only mix.
 *
 * The only weight-sized product (fn . v, [mix][hc*dim] F32) runs batched through
 * the backend; everything else is per sequence and tiny.
 */
#include <math.h>

#include "internal.h"
#include "ops.h"

/* mixes[b][m] = f32(f32(fn . v_b) * r_b), r_b the RMS factor of the flattened streams. */
static void hc_mixes(v4_ctx *c, const v4_mat *fn, int n)
{
    const v4_config *cfg = &c->w->cfg;
    int hd = cfg->hc_mult * cfg->dim, mix = fn->rows;
    v4_linear(c->be, fn, V4_LIN_EXACT, n, c->s.X, hd, c->s.mixes, mix);
    for (int b = 0; b < n; b++) {
        float r = v4_rms_factor(c->s.X + (size_t)b * hd, hd, cfg->norm_eps);
        for (int m = 0; m < mix; m++)
            c->s.mixes[b * mix + m] = c->s.mixes[b * mix + m] * r;
    }
}

void v4_hc_reduce(const float *X, const float *pre, int hc, int dim, float *u)
{
    for (int i = 0; i < dim; i++) {
        double acc = 0.0;
        for (int j = 0; j < hc; j++)
            acc += (double)(pre[j] * X[(size_t)j * dim + i]);
        u[i] = v4_bf16((float)acc);
    }
}

void v4_sinkhorn(float *M, int hc, int iters, float eps)
{
    /* row softmax, + eps */
    for (int j = 0; j < hc; j++) {
        float *row = M + j * hc, mx = row[0];
        for (int k = 1; k < hc; k++)
            if (row[k] > mx)
                mx = row[k];
        double sum = 0.0;
        for (int k = 0; k < hc; k++) {
            row[k] = v4_expf(row[k] - mx);
            sum += row[k];
        }
        float fs = (float)sum;
        for (int k = 0; k < hc; k++)
            row[k] = row[k] / fs + eps;
    }
    for (int it = 0; it < iters; it++) {
        if (it > 0) {   /* row normalization */
            for (int j = 0; j < hc; j++) {
                double sum = 0.0;
                for (int k = 0; k < hc; k++)
                    sum += M[j * hc + k];
                float den = (float)sum + eps;
                for (int k = 0; k < hc; k++)
                    M[j * hc + k] = M[j * hc + k] / den;
            }
        }
        for (int k = 0; k < hc; k++) {   /* column normalization */
            double sum = 0.0;
            for (int j = 0; j < hc; j++)
                sum += M[j * hc + k];
            float den = (float)sum + eps;
            for (int j = 0; j < hc; j++)
                M[j * hc + k] = M[j * hc + k] / den;
        }
    }
}

void v4_hc_weights(const float *m, const float *scale, const float *base, int hc, int iters, float eps,
                   float *pre, float *post, float *comb)
{
    for (int j = 0; j < hc; j++) {
        pre[j] = v4_sigmoidf(m[j] * scale[0] + base[j]) + eps;
        post[j] = 2.0f * v4_sigmoidf(m[hc + j] * scale[1] + base[hc + j]);
    }
    for (int e = 0; e < hc * hc; e++)
        comb[e] = m[2 * hc + e] * scale[2] + base[2 * hc + e];
    v4_sinkhorn(comb, hc, iters, eps);
}

void v4_hc_pre(v4_ctx *c, const v4_mat *fn, const float *scale, const float *base, int n)
{
    const v4_config *cfg = &c->w->cfg;
    const int hc = cfg->hc_mult, dim = cfg->dim, mix = fn->rows;
    hc_mixes(c, fn, n);
    for (int b = 0; b < n; b++) {
        float *pre = c->s.pre + b * hc;
        v4_hc_weights(c->s.mixes + (size_t)b * mix, scale, base, hc, cfg->hc_iters, cfg->hc_eps, pre,
                      c->s.post + b * hc, c->s.comb + (size_t)b * hc * hc);
        v4_hc_reduce(c->s.X + (size_t)b * hc * dim, pre, hc, dim, c->s.x + (size_t)b * dim);
    }
}

void v4_hc_post_row(float *X, const float *out, const float *post, const float *comb, int hc, int dim)
{
    float old[64];
    for (int i = 0; i < dim; i++) {
        for (int j = 0; j < hc; j++)
            old[j] = X[(size_t)j * dim + i];
        for (int k = 0; k < hc; k++) {
            double acc = 0.0;
            for (int j = 0; j < hc; j++)
                acc += (double)(comb[j * hc + k] * old[j]);
            float t = post[k] * out[i];
            X[(size_t)k * dim + i] = v4_bf16(t + (float)acc);
        }
    }
}

void v4_hc_post(v4_ctx *c, int n)
{
    const v4_config *cfg = &c->w->cfg;
    const int hc = cfg->hc_mult, dim = cfg->dim;
    for (int b = 0; b < n; b++)
        v4_hc_post_row(c->s.X + (size_t)b * hc * dim, c->s.out + (size_t)b * dim, c->s.post + b * hc,
                       c->s.comb + (size_t)b * hc * hc, hc, dim);
}

void v4_hc_head(v4_ctx *c, int n)
{
    const v4_weights *w = c->w;
    const v4_config *cfg = &w->cfg;
    const int hc = cfg->hc_mult, dim = cfg->dim;
    hc_mixes(c, &w->hc_head_fn, n);
    for (int b = 0; b < n; b++) {
        const float *m = c->s.mixes + (size_t)b * w->hc_head_fn.rows;
        float pre[64];
        for (int j = 0; j < hc; j++)
            pre[j] = v4_sigmoidf(m[j] * w->hc_head_scale[0] + w->hc_head_base[j]) + cfg->hc_eps;
        v4_hc_reduce(c->s.X + (size_t)b * hc * dim, pre, hc, dim, c->s.x + (size_t)b * dim);
    }
}
