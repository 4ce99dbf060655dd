/* ops.c - element-wise numerics of the decode path (see ops.h for the rules). */
#include "ops.h"

#include <stdlib.h>

double v4_dot_d(const float *x, const float *y, int n)
{
    double s = 0.0;
    for (int i = 0; i < n; i++)
        s += (double)x[i] * (double)y[i];
    return s;
}

float v4_rms_factor(const float *x, int n, float eps)
{
    double ss = 0.0;
    for (int i = 0; i < n; i++)
        ss += (double)x[i] * (double)x[i];
    float ms = (float)ss / (float)n;
    float den = ms + eps;
    return v4_rsqrtf(den);
}

void v4_rmsnorm(const float *x, const float *w, int n, float eps, float *y)
{
    float r = v4_rms_factor(x, n, eps);
    for (int i = 0; i < n; i++) {
        float t = x[i] * r;
        y[i] = v4_bf16(w[i] * t);
    }
}

void v4_round_bf16(float *x, int n)
{
    for (int i = 0; i < n; i++)
        x[i] = v4_bf16(x[i]);
}

void v4_rope(float *v, int npairs, const float *freqs, int pos, int inverse)
{
    float fp = (float)pos;
    for (int i = 0; i < npairs; i++) {
        float ang = fp * freqs[i];
        double c = (float)cos((double)ang), s = (float)sin((double)ang);
        if (inverse)
            s = -s;
        double a = v[2 * i], b = v[2 * i + 1];
        float ra = (float)(a * c - b * s);
        float rb = (float)(a * s + b * c);
        v[2 * i] = v4_bf16(ra);
        v[2 * i + 1] = v4_bf16(rb);
    }
}

void v4_rope_freqs(float *freqs, int rope_dim, double base, double factor,
                   int original_seq_len, double beta_fast, double beta_slow)
{
    int np = rope_dim / 2;
    for (int i = 0; i < np; i++) {
        float t = (float)(2 * i) / (float)rope_dim;
        float p = (float)pow((double)(float)base, (double)t);
        freqs[i] = 1.0f / p;
    }
    if (original_seq_len <= 0)
        return;
    const double two_pi = 2.0 * M_PI;
    double lo = floor(rope_dim * log(original_seq_len / (beta_fast * two_pi)) / (2.0 * log(base)));
    double hi = ceil(rope_dim * log(original_seq_len / (beta_slow * two_pi)) / (2.0 * log(base)));
    if (lo < 0)
        lo = 0;
    if (hi > rope_dim - 1)
        hi = rope_dim - 1;
    float flo = (float)lo, span = (float)(hi - lo);
    if (lo == hi)
        span = (float)((hi + 0.001) - lo);
    float ffac = (float)factor;
    for (int i = 0; i < np; i++) {
        float ramp = ((float)i - flo) / span;
        if (ramp < 0.0f) ramp = 0.0f;
        if (ramp > 1.0f) ramp = 1.0f;
        float smooth = 1.0f - ramp;
        float a = freqs[i] / ffac;
        float b = 1.0f - smooth;
        float c = a * b;
        float d = freqs[i] * smooth;
        freqs[i] = c + d;
    }
}

void v4_hadamard(float *v, int n)
{
    /* In-place butterflies in double: every partial sum of bf16 inputs is exact. */
    double buf[1024];
    double *d = n <= 1024 ? buf : malloc(sizeof(double) * (size_t)n);
    for (int i = 0; i < n; i++)
        d[i] = v[i];
    for (int h = 1; h < n; h *= 2)
        for (int i = 0; i < n; i += 2 * h)
            for (int j = i; j < i + h; j++) {
                double a = d[j], b = d[j + h];
                d[j] = a + b;
                d[j + h] = a - b;
            }
    float sc = (float)pow((double)n, -0.5);
    for (int i = 0; i < n; i++) {
        float t = (float)d[i];
        v[i] = v4_bf16(t * sc);
    }
    if (d != buf)
        free(d);
}

/* Quantize-dequantize v in blocks: s = 2^ceil(log2(f32(max(amax, amax_floor) * inv_max))),
 * v = bf16(round(clamp(v / s, +-maxv)) * s) with round = the format's nearest-even. */
static void block_qdq(float *v, int n, int block, float maxv, float inv_max, float amax_floor,
                      float (*round_fmt)(float))
{
    for (int b0 = 0; b0 < n; b0 += block) {
        float amax = amax_floor;
        for (int j = b0; j < b0 + block; j++)
            if (fabsf(v[j]) > amax)
                amax = fabsf(v[j]);
        float s = ldexpf(1.0f, v4_ceil_log2_bits(amax * inv_max));
        for (int j = b0; j < b0 + block; j++) {
            float q = v[j] / s;
            if (q > maxv) q = maxv;
            if (q < -maxv) q = -maxv;
            v[j] = v4_bf16(round_fmt(q) * s);
        }
    }
}

void v4_fp8_sim(float *v, int n, int block)
{
    block_qdq(v, n, block, 448.0f, 1.0f / 448.0f, 1e-4f, v4_e4m3_round);
}

void v4_fp4_sim(float *v, int n, int block)
{
    block_qdq(v, n, block, 6.0f, 1.0f / 6.0f, 6.0f * ldexpf(1.0f, -126), v4_e2m1_round);
}

void v4_topk(const float *score, int n, int k, int *idx)
{
    /* Selection by repeated scans would be O(nk); an insertion into a sorted list of
     * k is also O(nk) worst case but cheap in practice and keeps the tie rule plain. */
    int cnt = 0;
    for (int i = 0; i < n; i++) {
        float s = score[i];
        if (cnt == k && !(s > score[idx[k - 1]]))
            continue;               /* not better than the current k-th (ties: lower index kept) */
        int p = cnt < k ? cnt++ : k - 1;
        while (p > 0 && s > score[idx[p - 1]]) {
            idx[p] = idx[p - 1];
            p--;
        }
        idx[p] = i;
    }
}
