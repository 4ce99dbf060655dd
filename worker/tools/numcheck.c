/* numcheck.c - the measures of numerics-check (numcheck.h): KL, margins, Jaccard,
 * quantiles (calc_diff: kernels/calc_diff.h). */
#include <math.h>
#include <stdlib.h>

#include "numcheck.h"

/* max and log(sum exp(x - max)) of a logit row, in double. */
static void lse(const float *x, int V, double *mx, double *ls)
{
    double m = -INFINITY, s = 0;
    for (int i = 0; i < V; i++)
        if (x[i] > m || isnan(x[i]))
            m = x[i];
    for (int i = 0; i < V; i++)
        s += exp((double)x[i] - m);
    *mx = m;
    *ls = log(s);
}

double v4nc_kl(const float *p, const float *q, int V)
{
    double pm, pl, qm, ql;
    lse(p, V, &pm, &pl);
    lse(q, V, &qm, &ql);
    if (isnan(pm) || isnan(qm))
        return NAN;
    double kl = 0;
    for (int i = 0; i < V; i++) {
        const double lp = (double)p[i] - pm - pl, lq = (double)q[i] - qm - ql;
        const double pi = exp(lp);
        if (pi > 0)
            kl += pi * (lp - lq);
    }
    return kl > 0 ? kl : 0.0;   /* rounding may give -1e-17 for identical rows */
}

int v4nc_top2(const float *x, int V, double *margin)
{
    int a = 0;
    for (int i = 1; i < V; i++)
        if (x[i] > x[a])
            a = i;
    double second = -INFINITY;
    for (int i = 0; i < V; i++)
        if (i != a && x[i] > second)
            second = x[i];
    *margin = V > 1 ? (double)x[a] - second : INFINITY;
    return a;
}

static int has(const int32_t *v, int n, int32_t x)
{
    for (int i = 0; i < n; i++)
        if (v[i] == x)
            return 1;
    return 0;
}

double v4nc_jaccard(const int32_t *a, int na, const int32_t *b, int nb)
{
    long inter = 0, uni = 0;
    for (int i = 0; i < na; i++) {
        if (has(a, i, a[i]))
            continue;            /* a duplicate of an earlier id */
        uni++;
        inter += has(b, nb, a[i]);
    }
    for (int i = 0; i < nb; i++)
        if (!has(b, i, b[i]) && !has(a, na, b[i]))
            uni++;
    return uni ? (double)inter / (double)uni : 1.0;
}

static int cmp_double(const void *x, const void *y)
{
    double a = *(const double *)x, b = *(const double *)y;
    return (a > b) - (a < b);
}

double v4nc_quantile(double *v, int n, double q)
{
    if (n <= 0)
        return 0.0;
    qsort(v, (size_t)n, sizeof *v, cmp_double);
    int k = (int)ceil(q * n) - 1;
    if (k < 0)
        k = 0;
    if (k >= n)
        k = n - 1;
    return v[k];
}
