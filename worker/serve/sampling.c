/* sampling.c - see sampling.h. */
#include <math.h>
#include <stdlib.h>

#include "config/rng.h"
#include "sampling.h"

struct v4_sampler {
    int vocab;
    v4_sampling_params p;
    v4_rng rng;
    int *idx;               /* candidate ids */
    double *prob;
};

int v4_sampling_validate(const v4_sampling_params *p, v4_error *err)
{
    if (!(p->temperature >= 0.0) || !isfinite(p->temperature))
        return v4_err_set(err, V4_ERR_INVALID, "temperature", "must be a finite number >= 0 (got %g)", p->temperature);
    if (!(p->top_p > 0.0 && p->top_p <= 1.0))
        return v4_err_set(err, V4_ERR_INVALID, "top_p", "must be in (0, 1] (got %g)", p->top_p);
    if (p->top_k < 0)
        return v4_err_set(err, V4_ERR_INVALID, "top_k", "must be >= 0 (got %d)", p->top_k);
    return 0;
}

v4_sampler *v4_sampler_create(int vocab, const v4_sampling_params *p, v4_error *err)
{
    if (v4_sampling_validate(p, err))
        return NULL;
    v4_sampler *s = calloc(1, sizeof *s);
    if (s) {
        s->idx = malloc(sizeof(int) * (size_t)vocab);
        s->prob = malloc(sizeof(double) * (size_t)vocab);
    }
    if (!s || !s->idx || !s->prob) {
        v4_sampler_free(s);
        v4_err_set(err, V4_ERR_NOMEM, "sampler", "out of memory");
        return NULL;
    }
    s->vocab = vocab;
    s->p = *p;
    v4_rng_seed(&s->rng, p->seed);
    return s;
}

void v4_sampler_free(v4_sampler *s)
{
    if (!s)
        return;
    free(s->idx);
    free(s->prob);
    free(s);
}

int v4_argmax(const float *logits, int n)
{
    int best = 0;
    for (int i = 1; i < n; i++)
        if (logits[i] > logits[best])
            best = i;
    return best;
}

/* Sort candidate ids by descending logit, ties to the lower id (heap sort: O(n log n),
 * no recursion, deterministic). */
static int before(const float *l, int a, int b) { return l[a] > l[b] || (l[a] == l[b] && a < b); }

static void sift(const float *l, int *h, int n, int i)
{
    for (;;) {
        int w = i, a = 2 * i + 1, b = a + 1;
        if (a < n && before(l, h[w], h[a]))   /* min-heap on the order: the "last" on top */
            w = a;
        if (b < n && before(l, h[w], h[b]))
            w = b;
        if (w == i)
            return;
        int t = h[i];
        h[i] = h[w];
        h[w] = t;
        i = w;
    }
}

/* The k first ids in order into idx[0..k).  Keeps a heap of the best k seen. */
static int top_ids(const float *l, int n, int k, int *idx)
{
    int m = 0;
    for (int i = 0; i < n; i++) {
        if (isnan(l[i]) || l[i] == -INFINITY)   /* -inf: refused by a constraint's mask */
            continue;
        if (m < k) {
            idx[m++] = i;
            for (int j = m / 2 - 1; j >= 0 && m == k; j--)
                sift(l, idx, m, j);
        } else if (before(l, i, idx[0])) {
            idx[0] = i;
            sift(l, idx, m, 0);
        }
    }
    if (m < k)
        for (int j = m / 2 - 1; j >= 0; j--)
            sift(l, idx, m, j);
    for (int e = m - 1; e > 0; e--) {   /* heap sort: worst goes to the end */
        int t = idx[0];
        idx[0] = idx[e];
        idx[e] = t;
        sift(l, idx, e, 0);
    }
    return m;
}

int v4_sample(v4_sampler *s, const float *logits)
{
    const v4_sampling_params *p = &s->p;
    if (p->temperature == 0.0)
        return v4_argmax(logits, s->vocab);
    int k = p->top_k > 0 && p->top_k < s->vocab ? p->top_k : s->vocab;
    int m = top_ids(logits, s->vocab, k, s->idx);
    if (m == 0)
        return v4_argmax(logits, s->vocab);
    double mx = logits[s->idx[0]], sum = 0.0;
    for (int i = 0; i < m; i++) {
        s->prob[i] = exp(((double)logits[s->idx[i]] - mx) / p->temperature);
        sum += s->prob[i];
    }
    int keep = m;
    if (p->top_p < 1.0) {
        double c = 0.0;
        for (int i = 0; i < m; i++) {
            c += s->prob[i] / sum;
            if (c >= p->top_p) {
                keep = i + 1;
                break;
            }
        }
    }
    double mass = 0.0;
    for (int i = 0; i < keep; i++)
        mass += s->prob[i];
    double u = v4_rng_unit(&s->rng) * mass, c = 0.0;
    for (int i = 0; i < keep; i++) {
        c += s->prob[i];
        if (u < c)
            return s->idx[i];
    }
    return s->idx[keep - 1];
}
